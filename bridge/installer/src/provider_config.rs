//! The ProviderConfig controller: brings up the provider process a ProviderConfig describes
//! (through the same pool managed resources use, so it is the process they get) and reports
//! in its status whether the provider accepted the configuration, which version was resolved
//! and which protocol it speaks. Resources report the same errors on themselves; this status is
//! where a platform team looks first.
//!
//! It also keeps the ProviderConfig and the Secrets of its `configFrom` until nothing needs
//! them (`core_kinds::lifecycle`): the ProviderConfig carries the finalizer `kraken.dev/config`,
//! each Secret it reads a finalizer naming it; deleting it waits (`Ready=False, InUse`) while
//! managed resources in its namespace still reference it, then releases the Secrets and itself.
//!
//! It holds the provider source as the seam [`ProviderSource`], so its unit tests run it over
//! `kraken_source::fake::FakeSource`.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource as _, ResourceExt as _};

use kraken_core_kinds::generated::PROVIDER_ANNOTATION;
use kraken_core_kinds::lifecycle::{self, CONFIG_FINALIZER, OnDelete, hold_secrets};
use kraken_core_kinds::{KindInfo, Provider, ProviderConfig};
use kraken_kit::Kit;
use kraken_kit::conditions::{self, READY, Set, reason};
use kraken_kit::errors::chain;
use kraken_kit::finalizer::{self, Phase};
use kraken_kit::reconciler::Reconciler;
use kraken_source::{Error, ProviderSource};

/// The kind as metrics and logs name it.
const LABEL: &str = "ProviderConfig.core.kraken.dev";

/// The ProviderConfig controller's context.
pub struct ProviderConfigs {
    pub kit: Arc<Kit>,
    /// The provider source configurations are checked through (the same one managed resources
    /// use, so the process it brings up is the one they get).
    pub source: Arc<dyn ProviderSource>,
}

impl std::ops::Deref for ProviderConfigs {
    type Target = Kit;
    fn deref(&self) -> &Kit {
        &self.kit
    }
}

pub async fn run(
    ctx: Arc<ProviderConfigs>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<ProviderConfig> = Api::all(ctx.client.clone());
    let controller = Controller::new(api, watcher::Config::default().any_semantic());
    // A Provider that finishes installing (or changes version) re-checks the ProviderConfigs
    // that refer to it.
    let store = controller.store();
    ctx.source.cache_provider_configs(store.clone());
    let providers: Api<Provider> = Api::all(ctx.client.clone());
    let controller = controller
        .watches(providers, watcher::Config::default(), move |p: Provider| {
            let name = p.name_any();
            store
                .state()
                .iter()
                .filter(|pc| {
                    pc.spec
                        .provider_ref
                        .as_ref()
                        .is_some_and(|r| r.name == name)
                })
                .map(|pc| ObjectRef::from_obj(pc.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown);
    kraken_kit::reconciler::drive(controller, ctx).await;
}

/// The ProviderConfig controller in the shape every controller has (`kraken_kit::reconciler`).
impl Reconciler for ProviderConfigs {
    type Object = ProviderConfig;
    type Error = Error;

    fn kit(&self) -> &Kit {
        &self.kit
    }

    fn kind(&self) -> &str {
        LABEL
    }

    fn reconcile(
        self: Arc<Self>,
        pc: Arc<ProviderConfig>,
    ) -> impl std::future::Future<Output = Result<Action, Error>> + Send {
        reconcile(pc, self)
    }
}

/// Finalizer → hold the Secrets → bring the provider up → status. A failure to bring it up
/// is reported on the ProviderConfig, then returned.
async fn reconcile(pc: Arc<ProviderConfig>, ctx: Arc<ProviderConfigs>) -> Result<Action, Error> {
    let Some(namespace) = pc.metadata.namespace.clone() else {
        return Ok(Action::await_change());
    };
    let api: Api<ProviderConfig> = Api::namespaced(ctx.client.clone(), &namespace);
    match finalizer::phase(&pc.metadata, CONFIG_FINALIZER) {
        Phase::Released => return Ok(Action::await_change()),
        Phase::Cleanup => return cleanup(&pc, &ctx, &namespace).await,
        Phase::Apply { add } => {
            if add {
                finalizer::ensure(
                    &api,
                    &pc.metadata,
                    CONFIG_FINALIZER,
                    true,
                    &ctx.metrics,
                    "providerconfigs",
                )
                .await?;
            }
        }
    }
    let name = pc.metadata.name.clone().unwrap_or_default();
    let generation = pc.metadata.generation;
    // The Secrets it reads stay readable until it is gone; looked through again for ones it
    // no longer names when its spec changed.
    let sweep = pc.status.as_ref().and_then(|s| s.observed_generation) != generation;
    hold_secrets(
        &ctx.client,
        &ctx.metrics,
        &namespace,
        &holder(&name),
        &secret_names(&pc),
        sweep,
    )
    .await?;
    let mut status = pc.status.clone().unwrap_or_default();
    let (update, outcome) = match ctx.source.check_config(&namespace, &pc).await {
        Ok(checked) => {
            status.version = Some(checked.version);
            status.protocol = i32::try_from(checked.protocol).ok();
            let message = format!("{} configured", checked.address);
            (
                Set::new(READY, true, reason::AVAILABLE, message),
                Ok(Action::await_change()),
            )
        }
        // The API server is the one failing: nothing to report on the ProviderConfig.
        Err(Error::Api(e)) => return Err(Error::Api(e)),
        Err(err) => (Set::new(READY, false, err.reason(), chain(&err)), Err(err)),
    };
    let now = kraken_kit::conditions::now();
    status.conditions = conditions::merge(&status.conditions, &[update], generation, &now);
    status.observed_generation = generation;
    if pc.status.as_ref() != Some(&status) {
        kraken_kit::status::merge(&api, &ctx.metrics, "providerconfigs", &name, &status).await?;
    }
    outcome
}

/// The finalizer this ProviderConfig puts on the Secrets it reads.
fn holder(name: &str) -> String {
    lifecycle::holder_finalizer("providerconfig", name)
}

/// The Secrets `configFrom` reads.
fn secret_names(pc: &ProviderConfig) -> BTreeSet<String> {
    pc.spec
        .config_from
        .iter()
        .map(|f| f.secret_key_ref.name.clone())
        .collect()
}

/// A ProviderConfig being deleted: wait while managed resources reference it, then release its
/// Secrets and itself.
async fn cleanup(
    pc: &ProviderConfig,
    ctx: &ProviderConfigs,
    namespace: &str,
) -> Result<Action, Error> {
    let name = pc.metadata.name.clone().unwrap_or_default();
    let api: Api<ProviderConfig> = Api::namespaced(ctx.client.clone(), namespace);
    let users = users(ctx, namespace, &name).await?;
    let forced = lifecycle::forced(&pc.metadata);
    if let OnDelete::Wait(message) = lifecycle::on_delete(&users, forced) {
        let mut status = pc.status.clone().unwrap_or_default();
        let repeated = status
            .conditions
            .iter()
            .any(|c| c.type_ == READY && c.reason == reason::IN_USE && c.message == message);
        let update = Set::new(READY, false, reason::IN_USE, message.clone());
        let now = kraken_kit::conditions::now();
        status.conditions =
            conditions::merge(&status.conditions, &[update], pc.metadata.generation, &now);
        status.users = i64::try_from(users.len()).ok();
        status.observed_generation = pc.metadata.generation;
        if pc.status.as_ref() != Some(&status) {
            kraken_kit::status::merge(&api, &ctx.metrics, "providerconfigs", &name, &status)
                .await?;
        }
        if !repeated {
            ctx.event(
                (false, reason::IN_USE, &message, "Delete"),
                pc.object_ref(&()),
            );
        }
        return Ok(Action::requeue(lifecycle::WAIT_AGAIN));
    }
    if !ctx.source.stop_runner(namespace, &name).await? {
        return Ok(Action::requeue(std::time::Duration::from_secs(1)));
    }
    hold_secrets(
        &ctx.client,
        &ctx.metrics,
        namespace,
        &holder(&name),
        &BTreeSet::new(),
        true,
    )
    .await?;
    finalizer::ensure(
        &api,
        &pc.metadata,
        CONFIG_FINALIZER,
        false,
        &ctx.metrics,
        "providerconfigs",
    )
    .await?;
    Ok(Action::await_change())
}

/// The managed resources of namespace `namespace` that use ProviderConfig `name`, as
/// `Kind namespace/name`: every generated kind listed, on the deletion path only.
async fn users(
    ctx: &ProviderConfigs,
    namespace: &str,
    name: &str,
) -> Result<Vec<String>, kube::Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    let generated = crds
        .list(&ListParams::default().labels(PROVIDER_ANNOTATION))
        .await?;
    let mut users = Vec::new();
    for kind in generated.iter().filter_map(KindInfo::any_from_crd) {
        let objects: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), namespace, &kind.resource);
        let list = match objects.list(&ListParams::default()).await {
            Ok(list) => list,
            // A kind whose CRD went away between the two lists has no objects.
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(e) => return Err(e),
        };
        for o in list.items.iter().filter(|o| uses(&o.data, name)) {
            users.push(format!(
                "{} {namespace}/{}",
                kind.resource.kind,
                o.metadata.name.as_deref().unwrap_or_default()
            ));
        }
    }
    Ok(users)
}

/// Whether a managed resource (its JSON, `spec` inside) uses ProviderConfig `name`:
/// `spec.providerConfigRef.name`, or `default` when it names none.
fn uses(object: &serde_json::Value, name: &str) -> bool {
    let named = object
        .pointer("/spec/providerConfigRef/name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("default");
    named == name
}

#[cfg(test)]
#[path = "provider_config/tests.rs"]
mod controller_tests;

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn users_name_it_or_take_the_default() {
        let cases = [
            (
                json!({"spec": {"providerConfigRef": {"name": "random"}}}),
                "random",
                true,
            ),
            (
                json!({"spec": {"providerConfigRef": {"name": "other"}}}),
                "random",
                false,
            ),
            (json!({"spec": {"forProvider": {}}}), "default", true),
            (json!({"spec": {"forProvider": {}}}), "random", false),
            (json!({}), "default", true),
        ];
        for (object, name, want) in cases {
            assert_eq!(super::uses(&object, name), want, "{object} uses {name}");
        }
    }
}

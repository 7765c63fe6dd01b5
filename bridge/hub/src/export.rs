//! The ConfigExport controller: values of other objects written into a ConfigMap or Secret
//! the ConfigExport owns, kept in sync through its DependencyRequest.
//!
//! A pass: finalizer → request the values (every entry as a string) → when resolved, check
//! the target (it must not exist unless this ConfigExport made it; sensitive values only go
//! to a Secret) → write it when it differs. Deleting the ConfigExport deletes its target
//! and its request, then releases the finalizer (the shared flow of [`kraken_kit::finalizer`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource as _, ResourceExt as _};
use serde_json::Value as Json;

use super::consumer::{Values, WAITING, consumer_triggers, drop_request, request_values};
use super::{object_key, to_text};
use kraken_core_kinds::GROUP;
use kraken_core_kinds::hub::{
    ConfigExport, ConfigExportStatus, ObjectReference, TargetKind, ValueReference,
};
use kraken_kit::Kit;
use kraken_kit::conditions::{self, READY, Set};
use kraken_kit::finalizer::{self, Phase};
use kraken_kit::reconciler::{ReconcileError, Reconciler};

const FINALIZER: &str = "kraken.dev/config-export";
/// Label on a target: the ConfigExport that owns it.
pub const EXPORT_LABEL: &str = "kraken.dev/config-export";
const MANAGER: &str = "kraken-config-export";
/// The ConfigExports' resource, as the write metrics name it.
const RESOURCE: &str = "configexports";
/// The kind as metrics and logs name it.
const LABEL: &str = "ConfigExport.core.kraken.dev";

/// Why an export stopped. Besides the API server failing (tried again), the export may not
/// be written as asked: reported on its `Ready` condition, and left until the ConfigExport
/// changes (an object in the way that goes meanwhile is seen at its next pass).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The log line shows the API server's answer after this (`kit::errors::chain`).
    #[error("kubernetes API request failed")]
    Api(#[from] kube::Error),
    /// A Secret's value or a sensitive output would go to a ConfigMap.
    #[error("{0}")]
    SensitiveValue(String),
    /// The target exists and this ConfigExport did not make it: it is never overwritten.
    #[error("{0}")]
    TargetNotOwned(String),
}

impl Error {
    /// The `Ready` reason (and Event reason, metric label).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Api(_) => kraken_kit::conditions::reason::API_ERROR,
            Error::SensitiveValue(_) => "SensitiveValue",
            Error::TargetNotOwned(_) => "TargetNotOwned",
        }
    }
}

impl ReconcileError for Error {
    fn reason(&self) -> &str {
        Error::reason(self)
    }

    fn is_transient(&self) -> bool {
        matches!(self, Error::Api(_))
    }
}

/// The ConfigExport controller's context.
pub struct Exporter {
    pub kit: Arc<Kit>,
    pub index: Arc<super::Index>,
}

impl std::ops::Deref for Exporter {
    type Target = Kit;
    fn deref(&self) -> &Kit {
        &self.kit
    }
}

/// Runs the ConfigExport controller, at most `concurrency` exports at once, until `shutdown`
/// resolves.
pub async fn run(
    ex: Arc<Exporter>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<ConfigExport> = Api::all(ex.client.clone());
    let triggers = consumer_triggers(&ex.index, GROUP, "ConfigExport")
        .map(|(name, ns)| ObjectRef::<ConfigExport>::new(&name).within(&ns));
    let controller = Controller::new(api, watcher::Config::default().any_semantic())
        .reconcile_on(triggers)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown);
    kraken_kit::reconciler::drive(controller, ex).await;
}

/// The ConfigExport controller in the shape every controller has (`kraken_kit::reconciler`).
impl Reconciler for Exporter {
    type Object = ConfigExport;
    type Error = Error;

    fn kit(&self) -> &Kit {
        &self.kit
    }

    fn kind(&self) -> &str {
        LABEL
    }

    async fn reconcile(self: Arc<Self>, ce: Arc<ConfigExport>) -> Result<Action, Error> {
        let ns = ce.namespace().unwrap_or_default();
        let name = ce.name_any();
        export(&ce, &self, &ns, &name).await
    }
}

/// Finalizer → request the values → write the target → status.
async fn export(ce: &ConfigExport, ex: &Exporter, ns: &str, name: &str) -> Result<Action, Error> {
    let api: Api<ConfigExport> = Api::namespaced(ex.client.clone(), ns);
    match finalizer::phase(&ce.metadata, FINALIZER) {
        Phase::Released => return Ok(Action::await_change()),
        Phase::Cleanup => {
            delete_target(ex, ce, ns).await?;
            let request = object_key(GROUP, "ConfigExport", name);
            if let Some(owner) = ce.controller_owner_ref(&()) {
                drop_request(&ex.client, &ex.metrics, ns, &request, &owner).await?;
            }
            finalizer::ensure(&api, &ce.metadata, FINALIZER, false, &ex.metrics, RESOURCE).await?;
            return Ok(Action::await_change());
        }
        Phase::Apply { add: true } => {
            finalizer::ensure(&api, &ce.metadata, FINALIZER, true, &ex.metrics, RESOURCE).await?;
        }
        Phase::Apply { add: false } => {}
    }
    let consumer = ObjectReference {
        api_version: ConfigExport::api_version(&()).into_owned(),
        kind: "ConfigExport".into(),
        name: name.to_owned(),
        uid: ce.uid().unwrap_or_default(),
    };
    let values = request_values(
        &ex.client,
        &ex.metrics,
        &ex.index,
        ns,
        &consumer,
        GROUP,
        references(ce),
    )
    .await?;
    let outcome = match values {
        Values::None => Ok(Set::new(READY, false, "NoData", "spec.data is empty")),
        Values::Waiting { reason, message } => Ok(Set::new(
            READY,
            false,
            WAITING,
            format!("{reason}: {message}"),
        )),
        Values::Ready { sensitive, .. }
            if !sensitive.is_empty() && ce.spec.target.kind == TargetKind::ConfigMap =>
        {
            Err(Error::SensitiveValue(format!(
                "{} come from Secrets or sensitive outputs and are never written to a ConfigMap; export them to a Secret (spec.target.kind: Secret)",
                sensitive.join(", ")
            )))
        }
        Values::Ready { values, .. } => write_target(ex, ce, ns, &values).await,
    };
    let update = match outcome {
        Ok(update) => update,
        Err(e @ Error::Api(_)) => return Err(e),
        Err(refused) => {
            let update = Set::new(READY, false, refused.reason(), refused.to_string());
            write_status(ex, ce, &api, update).await?;
            return Err(refused);
        }
    };
    write_status(ex, ce, &api, update).await?;
    Ok(Action::await_change())
}

/// The request's references: every entry of `spec.data`, as a string.
fn references(ce: &ConfigExport) -> Vec<ValueReference> {
    ce.spec
        .data
        .iter()
        .map(|d| ValueReference {
            path: d.key.clone(),
            r#type: None,
            sensitive: false,
            resource: d.resource.clone(),
            state_declaration: d.state_declaration.clone(),
            config_map_key_ref: d.config_map_key_ref.clone(),
            secret_key_ref: d.secret_key_ref.clone(),
            template: d.template.clone(),
        })
        .collect()
}

async fn write_status(
    ex: &Exporter,
    ce: &ConfigExport,
    api: &Api<ConfigExport>,
    update: Set,
) -> Result<(), kube::Error> {
    let old = ce.status.clone().unwrap_or_default();
    let now = kraken_kit::conditions::now();
    let status = ConfigExportStatus {
        observed_generation: ce.metadata.generation,
        conditions: conditions::merge(
            &old.conditions,
            std::slice::from_ref(&update),
            ce.metadata.generation,
            &now,
        ),
    };
    if status == old {
        return Ok(());
    }
    let changed = old
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .is_none_or(|c| c.reason != update.reason || c.message != update.message);
    kraken_kit::status::merge(api, &ex.metrics, "configexports", &ce.name_any(), &status).await?;
    if changed && update.reason != WAITING {
        ex.kit.event(
            (!update.status, update.reason, &update.message, "Export"),
            ce.object_ref(&()),
        );
    }
    Ok(())
}

/// Writes the target if it is ours (or absent) and differs; the condition to report.
async fn write_target(
    ex: &Exporter,
    ce: &ConfigExport,
    ns: &str,
    values: &[(String, Json)],
) -> Result<Set, Error> {
    let data: BTreeMap<String, String> = values
        .iter()
        .map(|(k, v)| (k.clone(), to_text(v)))
        .collect();
    let n = data.len();
    let metadata = ObjectMeta {
        name: Some(ce.spec.target.name.clone()),
        namespace: Some(ns.to_owned()),
        owner_references: ce.controller_owner_ref(&()).map(|o| vec![o]),
        labels: Some(BTreeMap::from([(
            EXPORT_LABEL.to_owned(),
            kraken_kit::names::label_value(&ce.name_any()),
        )])),
        ..Default::default()
    };
    let owned = match ce.spec.target.kind {
        TargetKind::ConfigMap => {
            let cm = ConfigMap {
                metadata,
                data: Some(data),
                ..Default::default()
            };
            apply_target(ex, ce, ns, "configmaps", &cm, |c: &ConfigMap| {
                c.data == cm.data
            })
            .await?
        }
        TargetKind::Secret => {
            let bytes: BTreeMap<String, ByteString> = data
                .into_iter()
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect();
            let secret = Secret {
                metadata,
                data: Some(bytes),
                type_: Some("Opaque".into()),
                ..Default::default()
            };
            apply_target(ex, ce, ns, "secrets", &secret, |s: &Secret| {
                s.data == secret.data
            })
            .await?
        }
    };
    if !owned {
        return Err(Error::TargetNotOwned(format!(
            "{:?} {} exists and was not made by this ConfigExport; Kraken does not overwrite it (delete it or choose another name)",
            ce.spec.target.kind, ce.spec.target.name
        )));
    }
    Ok(ready(ce, n))
}

/// Writes `desired` (the target, counted as a write to `resource`) unless one exists that
/// `ce` does not own (`false`) or that is the `same` already. The write is conditional on what
/// was read: a target that did not exist is created (a Secret or ConfigMap someone made under
/// the name meanwhile is not written over: 409, retried), and one that did is applied at the
/// resourceVersion read (one changed meanwhile, perhaps by a new owner, is not either).
async fn apply_target<K>(
    ex: &Exporter,
    ce: &ConfigExport,
    ns: &str,
    resource: &str,
    desired: &K,
    same: impl Fn(&K) -> bool,
) -> Result<bool, kube::Error>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let name = &ce.spec.target.name;
    let api: Api<K> = Api::namespaced(ex.client.clone(), ns);
    let Some(existing) = api.get_opt(name).await? else {
        ex.metrics.api_write(resource, "create");
        api.create(&PostParams::default(), desired).await?;
        return Ok(true);
    };
    if !owned_by(ce, existing.meta()) {
        return Ok(false);
    }
    if same(&existing) {
        return Ok(true);
    }
    let mut desired = desired.clone();
    desired.meta_mut().resource_version = existing.meta().resource_version.clone();
    ex.metrics.api_write(resource, "apply");
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(serde_json::to_value(&desired).map_err(kube::Error::SerdeError)?),
    )
    .await?;
    Ok(true)
}

/// Whether `ce` owns the object `meta` describes.
fn owned_by(ce: &ConfigExport, meta: &ObjectMeta) -> bool {
    meta.owner_references
        .as_ref()
        .is_some_and(|os| os.iter().any(|o| Some(&o.uid) == ce.metadata.uid.as_ref()))
}

fn ready(ce: &ConfigExport, n: usize) -> Set {
    Set::new(
        READY,
        true,
        "Exported",
        format!(
            "{n} keys written to {:?} {}",
            ce.spec.target.kind, ce.spec.target.name
        ),
    )
}

async fn delete_target(ex: &Exporter, ce: &ConfigExport, ns: &str) -> Result<(), kube::Error> {
    match ce.spec.target.kind {
        TargetKind::ConfigMap => delete_owned::<ConfigMap>(ex, ce, ns, "configmaps").await,
        TargetKind::Secret => delete_owned::<Secret>(ex, ce, ns, "secrets").await,
    }
}

/// Deletes the target when `ce` owns it.
async fn delete_owned<K>(
    ex: &Exporter,
    ce: &ConfigExport,
    ns: &str,
    resource: &str,
) -> Result<(), kube::Error>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let name = &ce.spec.target.name;
    let api: Api<K> = Api::namespaced(ex.client.clone(), ns);
    if let Some(o) = api.get_opt(name).await?
        && owned_by(ce, o.meta())
        && let Some(uid) = o.meta().uid.as_deref()
    {
        // By uid: a target someone made under the name since this read is not deleted.
        ex.metrics.api_write(resource, "delete");
        kraken_kit::ownership::delete_by_uid(&api, name, uid).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

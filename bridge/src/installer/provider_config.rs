//! The ProviderConfig controller: brings up the provider process a ProviderConfig describes
//! (through the same pool managed resources use, so it is the process they get) and reports
//! in its status whether the provider accepted the configuration, which version was resolved
//! and which protocol it speaks. Resources report the same errors on themselves; this status is
//! where a platform team looks first.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube::ResourceExt as _;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use super::Context;
use crate::core_kinds::{Provider, ProviderConfig};
use crate::kit::conditions::{self, READY, Set, reason};
use crate::kit::errors::chain;
use crate::kit::time::jitter;
use crate::provider::Plugin as _;
use crate::source;
use crate::source::Error;

/// How often a failing ProviderConfig is tried again: the fix may be elsewhere (a Secret, a
/// provider installed into the plugin directory).
const RETRY: Duration = Duration::from_secs(30);

pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<ProviderConfig> = Api::all(ctx.client.clone());
    let controller = Controller::new(api, watcher::Config::default().any_semantic());
    // A Provider that finishes installing (or changes version) re-checks the ProviderConfigs
    // that refer to it.
    let store = controller.store();
    let _ = ctx.source.provider_configs.set(store.clone());
    let providers: Api<Provider> = Api::all(ctx.client.clone());
    controller
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
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| std::future::ready(()))
        .await;
}

async fn reconcile(pc: Arc<ProviderConfig>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(namespace) = pc.metadata.namespace.clone() else {
        return Ok(Action::await_change());
    };
    let name = pc.metadata.name.clone().unwrap_or_default();
    let generation = pc.metadata.generation;
    let mut status = pc.status.clone().unwrap_or_default();
    let (update, action) = match source::configured(&ctx.source, &namespace, &pc).await {
        Ok((resolved, host)) => {
            status.version = Some(resolved.version);
            status.protocol = i32::try_from(host.protocol_version()).ok();
            let message = format!("{} configured", resolved.address);
            (
                Set::new(READY, true, reason::AVAILABLE, message),
                Action::await_change(),
            )
        }
        Err(Error::Api(e)) => return Err(Error::Api(e)),
        Err(err) => (
            Set::new(READY, false, err.reason(), chain(&err)),
            Action::requeue(jitter(RETRY, 0.2)),
        ),
    };
    let now = crate::kit::conditions::now();
    status.conditions = conditions::merge(&status.conditions, &[update], generation, &now);
    status.observed_generation = generation;
    if pc.status.as_ref() != Some(&status) {
        let api: Api<ProviderConfig> = Api::namespaced(ctx.client.clone(), &namespace);
        crate::kit::status::merge(&api, &ctx.metrics, "providerconfigs", &name, &status).await?;
    }
    Ok(action)
}

fn error_policy(_pc: Arc<ProviderConfig>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!("ProviderConfig reconcile failed: {err}");
    Action::requeue(jitter(RETRY, 0.2))
}

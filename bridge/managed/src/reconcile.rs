//! The reconcile of one managed resource: read the object, dispatch to the step its state
//! calls for — [`apply`](super::apply) (dereference → configuration → observe → plan → apply →
//! persist → status) or [`cleanup`](super::cleanup) (destroy or orphan, then release the
//! finalizer) — and report a failure on the object as a condition and an Event
//! ([`report`](super::report)) before returning it. The span, the metrics and the choice
//! between backoff and waiting for a change are the runner's (`kraken_kit::reconciler`).

use std::sync::Arc;

use kube::api::{Api, DynamicObject, GetParams, PartialObjectMeta};
use kube::runtime::controller::Action;
use serde_json::json;

use super::apply::apply;
use super::cleanup::cleanup;
use super::error::{Error, Result};
use super::read::read;
use super::report::report;
use super::spec::ManagedSpec;
use super::write::Run;
use super::{KindContext, PAUSED_ANNOTATION};
use kraken_kit::conditions::{SYNCED, Set, reason};

/// One reconcile of the object `meta` names.
pub async fn reconcile(
    meta: Arc<PartialObjectMeta<DynamicObject>>,
    k: Arc<KindContext>,
) -> Result<Action> {
    let Some(namespace) = meta.metadata.namespace.clone() else {
        return Ok(Action::await_change());
    };
    let name = meta.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(k.ctx.client.clone(), &namespace, &k.kind.resource);
    // At least as new as the watch event that woke this reconcile: the API server answers
    // from its watch cache instead of a quorum read of etcd.
    // Or as new as this controller's own last write, if the watch has not brought that yet.
    let seen_uid = meta.metadata.uid.clone().unwrap_or_default();
    let got = match meta.metadata.resource_version.as_deref() {
        Some(rv) => {
            let at = k.read_version(&seen_uid, rv);
            api.get_with(&name, &GetParams::at(&at)).await
        }
        None => api.get(&name).await,
    };
    let obj = match got {
        Ok(obj) => obj,
        Err(kube::Error::Api(e)) if e.code == 404 => {
            k.wrote(&seen_uid, None);
            k.note_ready(&seen_uid, false);
            return Ok(Action::await_change());
        }
        Err(e) => return Err(e.into()),
    };
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let mut run = Run::new(&k, obj, namespace);
    let spec = serde_json::from_value::<ManagedSpec>(
        run.obj
            .data
            .get("spec")
            .cloned()
            .unwrap_or_else(|| json!({})),
    )
    .map_err(|e| Error::InvalidSpec(format!("spec: {e}")));
    let result = match spec {
        Ok(spec) => pass(&mut run, &spec).await,
        Err(e) => Err(e),
    };
    let ready = kraken_kit::conditions::is_true(&run.status, kraken_kit::conditions::READY);
    k.note_ready(&uid, ready && run.obj.metadata.deletion_timestamp.is_none());
    match result {
        Ok(action) => Ok(action),
        // The API server is the one failing: nothing to report on the object, retry.
        Err(Error::Api(e) | Error::Source(kraken_source::Error::Api(e))) => Err(Error::Api(e)),
        // Not this replica's to report: the current leader reconciles the object.
        Err(e @ Error::Fenced(_)) => Err(e),
        Err(err) => {
            let err = err.redacted(&run.sensitive_values);
            report(&mut run, &err).await?;
            Err(err)
        }
    }
}

async fn pass(run: &mut Run<'_>, spec: &ManagedSpec) -> Result<Action> {
    if run.annotation(PAUSED_ANNOTATION) == Some("true") {
        run.set_conditions(&[Set::new(
            SYNCED,
            false,
            reason::RECONCILE_PAUSED,
            format!("reconciliation is paused by the annotation {PAUSED_ANNOTATION}"),
        )]);
        run.flush_status().await?;
        return Ok(Action::await_change());
    }
    if run.obj.metadata.deletion_timestamp.is_some() {
        return cleanup(run, spec).await;
    }
    if run.k.kind.data_source {
        return read(run, spec).await;
    }
    apply(run, spec).await
}

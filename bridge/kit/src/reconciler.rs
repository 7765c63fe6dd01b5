//! The one shape of every controller: a [`Reconciler`] says what one pass over one object does
//! and what error it may end with; the runner ([`run`], and [`drive`] around a kube-runtime
//! `Controller`) gives every pass of every controller the same
//! - **span**: `reconcile` at `info` level, with the object's `kind`, `namespace` and `name`,
//!   so every log line of the pass, and every provider RPC span opened under it, says which
//!   object it is about;
//! - **metrics**: `kraken_reconcile_runs_total{kind}` when the pass starts,
//!   `kraken_reconcile_duration_seconds{kind}` when it ends (however it ends), and
//!   `kraken_reconcile_failures_total{kind, reason}` for a pass that fails ([`super::metrics`]);
//! - **error policy**: a failure whose error [`is_transient`](ReconcileError::is_transient) is
//!   tried again after the kit's jittered, per-object backoff ([`super::time::Backoff`]); one that
//!   is not waits for a change of the object. Either way it is logged once, at `warn`. A pass
//!   that succeeds resets the object's backoff and returns what the reconciler chose;
//! - **test seam**: a unit test runs [`run`] (or the reconciler's own
//!   [`Reconciler::reconcile`], to see the error) over the fakes, exactly as the controller does.
//!
//! What stays each controller's own: its watches and triggers, its status and Events (a
//! reconciler reports a failure on the object itself before returning it), sharding (through
//! [`Reconciler::admit`]) and fencing.

use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt as _;
use kube::Resource;
use kube::runtime::controller::{Action, Controller};
use serde::de::DeserializeOwned;
use tracing::Instrument as _;

use super::Kit;
use super::conditions::reason;

/// How a pass failed: the label it is counted and reported under, and whether trying again
/// may help by itself.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    /// The failure's category: the metric's `reason` label, and the condition and Event reason
    /// where the controller reports it (`ApiError`, `ProviderError`, ...).
    fn reason(&self) -> &str;

    /// Whether the pass is tried again after a backoff (`true`: the cause may clear by itself,
    /// or is outside what a watch of the object sees) or waits for the object to change
    /// (`false`: only its author can fix it).
    fn is_transient(&self) -> bool;
}

/// The API server failed or refused a request: it may answer next time.
impl ReconcileError for kube::Error {
    fn reason(&self) -> &str {
        reason::API_ERROR
    }

    fn is_transient(&self) -> bool {
        true
    }
}

/// This replica may not write now: the one that may does the work, or this one once renewed.
impl ReconcileError for super::fence::Fenced {
    fn reason(&self) -> &str {
        reason::FENCED
    }

    fn is_transient(&self) -> bool {
        true
    }
}

/// What a pass holds while it runs once [`Reconciler::admit`] let it in (a shard's gate).
pub type Admission = Box<dyn Send>;

/// One controller: the objects it reconciles, what a pass over one of them does, and the kit
/// it does it with. The context a controller's passes share is the type implementing this.
pub trait Reconciler: Send + Sync + Sized + 'static {
    type Object: Resource + Send + Sync + 'static;
    type Error: ReconcileError;

    /// The kit every controller holds.
    fn kit(&self) -> &Kit;

    /// The kind as metrics and logs name it: `Kind.group`.
    fn kind(&self) -> &str;

    /// Whether this replica reconciles `obj` now; `None` turns the pass away before it is
    /// counted or logged. Everything is admitted unless a controller is sharded.
    fn admit(&self, _obj: &Self::Object) -> Option<Admission> {
        Some(Box::new(()))
    }

    /// One pass over `obj`. A failure the object can carry is reported on it (condition,
    /// Event) before it is returned; the runner counts it, logs it and chooses the requeue.
    fn reconcile(
        self: Arc<Self>,
        obj: Arc<Self::Object>,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;
}

/// One pass of `r` over `obj`, in the controller's shape (see the module's notes): admitted,
/// in its span, timed, counted, and its failure turned into the requeue the policy gives.
pub async fn run<R: Reconciler>(r: Arc<R>, obj: Arc<R::Object>) -> Action {
    let Some(_admitted) = r.admit(&obj) else {
        return Action::await_change();
    };
    let meta = obj.meta();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    // The backoff is per object: its uid, or (an object without one, in tests) its name.
    let key = meta
        .uid
        .clone()
        .unwrap_or_else(|| format!("{namespace}/{name}"));
    let span = tracing::info_span!(
        "reconcile",
        kind = %r.kind(),
        namespace = %namespace,
        name = %name,
    );
    pass(r, obj, key).instrument(span).await
}

async fn pass<R: Reconciler>(r: Arc<R>, obj: Arc<R::Object>, key: String) -> Action {
    let kit = r.kit();
    let _timer = kit.metrics.reconcile(r.kind());
    match R::reconcile(r.clone(), obj).await {
        Ok(action) => {
            kit.backoff.succeeded(&key);
            action
        }
        Err(err) => policy(kit, r.kind(), &key, &err),
    }
}

/// The error policy: count the failure under its reason, then back off (transient) or wait
/// for a change, with one log line saying which.
fn policy(kit: &Kit, kind: &str, key: &str, err: &dyn ReconcileError) -> Action {
    let reason = err.reason();
    kit.metrics.reconcile_failed(kind, reason);
    let message = super::errors::chain(err);
    if err.is_transient() {
        let wait = kit.backoff.failed(key);
        tracing::warn!(
            reason,
            "reconcile failed: {message}; retrying in {wait:.1?}"
        );
        Action::requeue(wait)
    } else {
        // The next pass comes from a change, which starts the backoff over.
        kit.backoff.succeeded(key);
        tracing::warn!(reason, "reconcile failed: {message}; waiting for a change");
        Action::await_change()
    }
}

/// The runner as kube-runtime's `Controller::run` takes it: every failure has become a
/// requeue by then, so nothing reaches [`error_policy`].
pub async fn reconcile<R: Reconciler>(
    obj: Arc<R::Object>,
    r: Arc<R>,
) -> Result<Action, Infallible> {
    Ok(run(r, obj).await)
}

/// `Controller::run`'s error policy for [`reconcile`], which never fails.
pub fn error_policy<R: Reconciler>(_: Arc<R::Object>, never: &Infallible, _: Arc<R>) -> Action {
    match *never {}
}

/// Runs `controller` (its watches, triggers and configuration set up by the caller) with
/// [`reconcile`] over `r`, until the controller ends (its shutdown signal).
pub async fn drive<R>(controller: Controller<R::Object>, r: Arc<R>)
where
    R: Reconciler,
    R::Object: Clone + DeserializeOwned + Debug,
    <R::Object as Resource>::DynamicType: Eq + Hash + Clone + Debug + Unpin + Send + Sync,
{
    let kind = r.kind().to_owned();
    controller
        .run(reconcile::<R>, error_policy::<R>, r)
        .for_each(|res| {
            // Objects the cache no longer has, a queue that is full: the runtime's own.
            if let Err(err) = res {
                tracing::debug!(kind = %kind, "controller: {err}");
            }
            std::future::ready(())
        })
        .await;
}

#[cfg(test)]
#[path = "reconciler/tests.rs"]
mod tests;

//! The managed-resource controller: one generic reconciler, run once per generated
//! kind, drives every resource through the provider that serves it.
//!
//! Shape of a pass (see [`reconcile`]): dereference the ProviderConfig and Secrets (the
//! [`ProviderSource`]) → build the configuration value → restore state ([`state`]) →
//! import / read ([`observe`]) → plan → what [`decide`] chooses ([`apply`], or [`cleanup`] for
//! a deleted object) → persist state → status, Events ([`report`] for failures). Errors are reported on the
//! object as a `Synced` condition and an Event ([`error`]), then retried with jittered backoff
//! when they may clear on their own, or left until the object changes when only the user can
//! fix them.
//!
//! Memory: the controller caches only object *metadata* (a metadata watch, managedFields and
//! the last-applied annotation stripped) and fetches the full object when it reconciles it, so
//! the operator's footprint per managed resource stays small however large specs are. Own status
//! writes do not retrigger a reconcile: only changes of generation, deletion and the pause
//! and publish annotations do.

mod apply;
mod cleanup;
pub mod consent;
mod decide;
mod deposed;
mod deps;
pub mod echo;
pub mod error;
pub mod fence;
pub mod floor;
mod hold;
pub(crate) mod ignore;
mod observe;
mod plan;
pub mod plan_key;
pub mod plan_status;
pub mod preview;
mod read;
mod reconcile;
mod recover;
mod report;
pub mod seal;
pub mod share;
mod spec;
pub mod state;
mod target;
pub(crate) mod write;

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::Writer;

pub use kraken_core_kinds::KindInfo;
use kraken_kit::Kit;
use kraken_kit::reconciler::{Admission, Reconciler};
use kraken_source::ProviderSource;

pub use kraken_core_kinds::{FINALIZER, PAUSED_ANNOTATION};
/// The create fence: written before the provider is asked to create.
pub const CREATE_ATTEMPT_ANNOTATION: &str = "kraken.dev/create-attempt";
/// Approves the held plan whose `status.plan.id` is the value (see [`plan`]).
pub const APPROVE_PLAN_ANNOTATION: &str = "kraken.dev/approve-plan";
/// Who approved: written beside [`APPROVE_PLAN_ANNOTATION`], the approving user's name. The
/// admission policy `kraken-plan-approval` (in the chart) admits it only when it is the name of
/// the user making the request and that user may `approve` plans in the namespace.
pub const APPROVED_BY_ANNOTATION: &str = "kraken.dev/approved-by";
pub use kraken_kit::FIELD_MANAGER;

/// Everything the managed-resource reconciles share.
pub struct Context {
    pub kit: Arc<Kit>,
    /// Where configured providers come from: the real `source::Source`, or a fake in tests.
    pub source: Arc<dyn ProviderSource>,
    /// The dependency hub's index: which DependencyRequests read which objects.
    pub hub_index: Arc<kraken_hub::Index>,
    /// The key every digest in `status.plan` is computed under (see [`plan_key`]).
    pub plan_key: plan_key::PlanKey,
    /// Each namespace's plan-policy floor (the administrators' label, [`floor`]).
    pub floors: Arc<floor::Floors>,
    /// This replica's share of the objects (everything unless sharded).
    pub share: Arc<share::Share>,
}

impl std::ops::Deref for Context {
    type Target = Kit;
    fn deref(&self) -> &Kit {
        &self.kit
    }
}

/// Per-kind state handed to the reconciler.
pub struct KindContext {
    pub ctx: Arc<Context>,
    pub kind: KindInfo,
    pub label: String,
    /// The resourceVersion each object (by uid) had after this controller last wrote it: a
    /// reconcile reads the object at least that new, even before the watch has seen the write.
    pub written: Mutex<HashMap<String, u64>>,
    /// The uids of this kind's objects whose last reconcile left them `Ready=True`
    /// (`kraken_ready_resources`).
    pub ready: Mutex<std::collections::HashSet<String>>,
    /// The pace at which listed objects enter the queue ([`share::Pacer`]).
    pub pacer: Arc<share::Pacer>,
}

impl KindContext {
    /// Records (`Some`) or forgets the version of `uid` after a write.
    pub fn wrote(&self, uid: &str, version: Option<&str>) {
        let mut map = self.written.lock().unwrap_or_else(|e| e.into_inner());
        match version.and_then(|v| v.parse::<u64>().ok()) {
            Some(v) => {
                map.insert(uid.to_owned(), v);
            }
            None => {
                map.remove(uid);
            }
        }
    }

    /// Records whether object `uid` is Ready after a reconcile (`false` also when it is gone).
    pub fn note_ready(&self, uid: &str, ready: bool) {
        let mut set = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        if ready {
            set.insert(uid.to_owned());
        } else {
            set.remove(uid);
        }
    }

    /// Forgets the objects that left this replica's share (they are another's now).
    fn keep_share(&self) {
        let share = &self.ctx.share;
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|uid, _| share.owns(uid));
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|uid| share.owns(uid));
    }

    /// Objects of this kind Ready now.
    pub fn ready_count(&self) -> usize {
        self.ready.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The version to read object `uid` at: the newer of what the watch saw (`seen`) and what
    /// this controller last wrote. Versions are etcd revisions in practice; one that is not a
    /// number is used as it is.
    pub fn read_version(&self, uid: &str, seen: &str) -> String {
        let written = self
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .copied();
        newer_version(seen, written)
    }
}

/// The newer of `seen` and `written`; `seen` as it is when it is not a number.
fn newer_version(seen: &str, written: Option<u64>) -> String {
    match (seen.parse::<u64>(), written) {
        (Ok(s), Some(w)) => s.max(w).to_string(),
        _ => seen.to_owned(),
    }
}

/// What makes a metadata event worth a reconcile: a new generation (spec change), deletion,
/// the pause annotation and an approval of a plan. Kraken's own writes (status, the state Secret, the finalizer and
/// the create fence) change none of these, so they never retrigger the reconcile that made them.
fn trigger_hash(meta: &PartialObjectMeta<DynamicObject>) -> u64 {
    let m = &meta.metadata;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.generation.hash(&mut h);
    m.deletion_timestamp.is_some().hash(&mut h);
    m.uid.hash(&mut h);
    let annotation = |k: &str| m.annotations.as_ref().and_then(|a| a.get(k).cloned());
    annotation(PAUSED_ANNOTATION).hash(&mut h);
    annotation(APPROVE_PLAN_ANNOTATION).hash(&mut h);
    annotation(kraken_hub::producer::PUBLISH_ANNOTATION).hash(&mut h);
    h.finish()
}

/// Drops what the controller never reads from cached metadata: a reconcile reads the full
/// object from the API server, so the cache keeps only what locates an object and decides
/// whether an event is worth a reconcile ([`trigger_hash`]).
fn strip(meta: &mut PartialObjectMeta<DynamicObject>) {
    let m = &mut meta.metadata;
    m.managed_fields = None;
    m.labels = None;
    m.finalizers = None;
    m.owner_references = None;
    m.creation_timestamp = None;
    m.generate_name = None;
    if let Some(a) = m.annotations.as_mut() {
        a.retain(|k, _| {
            k == PAUSED_ANNOTATION
                || k == APPROVE_PLAN_ANNOTATION
                || k == kraken_hub::producer::PUBLISH_ANNOTATION
        });
        if a.is_empty() {
            m.annotations = None;
        }
    }
}

/// Runs the controller for one kind until `shutdown` resolves; in-flight reconciles finish.
pub async fn run_kind(
    ctx: Arc<Context>,
    kind: KindInfo,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<PartialObjectMeta<DynamicObject>> =
        Api::all_with(ctx.client.clone(), &kind.resource);
    let writer: Writer<PartialObjectMeta<DynamicObject>> = Writer::new(kind.resource.clone());
    let reader = writer.as_reader();
    // /readyz waits (while leading) until this kind's objects are listed.
    let synced = spawn_sync_report(&ctx, &kind.label(), reader.clone());
    let share = ctx.share.clone();
    let events = share::events(share.clone(), reader.clone(), share::lister(api, strip));
    let pacer = share::Pacer::new(usize::from(concurrency));
    let stream = share::triggers(events.reflect(writer), share, pacer.clone(), trigger_hash);
    let label = kind.label();
    tracing::info!(kind = %label, type_name = %kind.type_name, "starting controller");
    let kctx = Arc::new(KindContext {
        ctx,
        label: label.clone(),
        kind: kind.clone(),
        written: Mutex::default(),
        ready: Mutex::default(),
        pacer,
    });
    let metrics = kctx.ctx.metrics.clone();
    let gauge = spawn_gauges(kctx.clone(), reader.clone());
    // A change of one of this kind's DependencyRequests (resolved values) reconciles its
    // consumer: the hub's watch of the requests passes it on.
    let triggers = {
        let ar = kind.resource.clone();
        kraken_hub::consumer::consumer_triggers(
            &kctx.ctx.hub_index,
            &kind.resource.group,
            &kind.resource.kind,
        )
        .map(move |(name, ns)| ObjectRef::new_with(&name, ar.clone()).within(&ns))
    };
    let shutdown = futures::FutureExt::shared(Box::pin(shutdown));
    let listed = reader.clone();
    let controller = Controller::for_stream_with(stream, reader, kind.resource.clone())
        .reconcile_on(triggers)
        .with_config(controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown.clone());
    let run = kraken_kit::reconciler::drive(controller, kctx);
    // kube-runtime's controller holds its runner until the cache has listed, and never ends
    // if it is stopped before that. Nothing can be in flight then, so it is dropped instead.
    let unlisted_stop = async move {
        shutdown.await;
        if futures::FutureExt::now_or_never(listed.wait_until_ready()).is_none() {
            return;
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        () = run => {}
        () = unlisted_stop => {}
    }
    synced.abort();
    gauge.abort();
    metrics.set_managed_resources(&label, 0);
    metrics.set_ready_resources(&label, 0);
    tracing::info!(kind = %kind.label(), "controller stopped");
}

/// The managed-resource controller of one kind, in the shape every controller has
/// (`kraken_kit::reconciler`): a pass enters this replica's share first (see [`share`]), paced.
impl Reconciler for KindContext {
    type Object = PartialObjectMeta<DynamicObject>;
    type Error = error::Error;

    fn kit(&self) -> &Kit {
        &self.ctx.kit
    }

    fn kind(&self) -> &str {
        &self.label
    }

    fn admit(&self, meta: &Self::Object) -> Option<Admission> {
        let uid = meta.metadata.uid.as_deref().unwrap_or_default();
        let paced = self.pacer.reconciling(uid);
        let entered = self.ctx.share.enter(uid)?;
        Some(Box::new((paced, entered)))
    }

    fn reconcile(
        self: Arc<Self>,
        meta: Arc<Self::Object>,
    ) -> impl std::future::Future<Output = error::Result<Action>> + Send {
        reconcile::reconcile(meta, self)
    }
}

/// Registers this kind's cache with `/readyz` and marks it synced once it has listed; the
/// task holds the registration until it is aborted (the controller stopped).
fn spawn_sync_report(
    ctx: &Context,
    label: &str,
    reader: kube::runtime::reflector::Store<PartialObjectMeta<DynamicObject>>,
) -> tokio::task::JoinHandle<()> {
    let mut cache = ctx.readiness.cache(label);
    tokio::spawn(async move {
        if kraken_kit::readiness::store_synced(&reader).await {
            cache.synced();
        }
        std::future::pending::<()>().await;
    })
}

/// `kraken_managed_resources{kind}` (the objects in this kind's cache) and
/// `kraken_ready_resources{kind}`, every 5 s, under the same `kind` label as the reconcile
/// metrics (Kind.group, unique across providers).
fn spawn_gauges(
    k: Arc<KindContext>,
    reader: kube::runtime::reflector::Store<PartialObjectMeta<DynamicObject>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            k.keep_share();
            let n = i64::try_from(reader.state().len()).unwrap_or(i64::MAX);
            k.ctx.metrics.set_managed_resources(&k.label, n);
            let ready = i64::try_from(k.ready_count()).unwrap_or(i64::MAX);
            k.ctx.metrics.set_ready_resources(&k.label, ready);
        }
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod trigger_tests {
    use super::*;

    fn meta(annotations: &[(&str, &str)]) -> PartialObjectMeta<DynamicObject> {
        PartialObjectMeta {
            types: None,
            metadata: kube::api::ObjectMeta {
                generation: Some(1),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..Default::default()
            },
            _phantom: std::marker::PhantomData,
        }
    }

    /// What the cache keeps still tells the annotations that must wake a reconcile apart.
    #[test]
    fn the_pause_and_publish_annotations_survive_the_strip_and_wake_a_reconcile() {
        let hash = |a: &[(&str, &str)]| {
            let mut m = meta(a);
            strip(&mut m);
            trigger_hash(&m)
        };
        let plain = hash(&[("other", "x")]);
        assert_eq!(plain, hash(&[]), "other annotations do not wake it");
        assert_ne!(plain, hash(&[(PAUSED_ANNOTATION, "true")]));
        assert_ne!(
            plain,
            hash(&[(kraken_hub::producer::PUBLISH_ANNOTATION, "true")])
        );
    }
}

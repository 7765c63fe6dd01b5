//! The dependency hub's watches: the DependencyRequests into its cache (waking their
//! consumers), the changes of the objects requests read mapped to those requests, the requests
//! a reconcile asked to resolve again, and the gauge of pending requests.

use std::sync::Arc;

use futures::{Stream, StreamExt as _};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};

use super::{Index, ObjectKey, SourceKind};
use kraken_core_kinds::hub::DependencyRequest;
use kraken_kit::conditions::{self, READY};

/// `kraken_hub_pending_requests`: the requests in the cache not `Ready=True` (resolved), every
/// 5 s. Stopped when the returned guard drops.
pub(super) fn spawn_pending_gauge(
    reader: reflector::Store<DependencyRequest>,
    metrics: Arc<kraken_kit::metrics::Metrics>,
) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            tick.tick().await;
            let pending = reader
                .state()
                .iter()
                .filter(|dr| {
                    let conditions = dr.status.as_ref().map(|s| s.conditions.as_slice());
                    !conditions
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == READY && c.status == conditions::ConditionStatus::True)
                })
                .count();
            metrics.set_hub_pending(i64::try_from(pending).unwrap_or(i64::MAX));
        }
    }))
}

/// Aborts its task when dropped.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The requests as the watch sees them, into the hub's cache (`writer`), each change also
/// waking the request's consumer (after the cache has it) and a deletion leaving the index.
pub(super) fn request_changes(
    client: Client,
    seen: Arc<Index>,
    writer: reflector::store::Writer<DependencyRequest>,
) -> impl Stream<Item = Result<DependencyRequest, watcher::Error>> + Send + 'static {
    let api: Api<DependencyRequest> = Api::all(client);
    watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .reflect(writer)
        .inspect(move |ev| match ev {
            Ok(watcher::Event::Delete(dr)) => {
                let (ns, name) = (dr.namespace().unwrap_or_default(), dr.name_any());
                seen.forget(&ns, &name);
                seen.request_changed(dr);
            }
            Ok(watcher::Event::Apply(dr) | watcher::Event::InitApply(dr)) => {
                seen.request_changed(dr);
            }
            _ => {}
        })
        .touched_objects()
}

/// The requests a reconcile asked to resolve again (members of a cycle it found).
pub(super) fn retriggered(
    rx: Option<tokio::sync::mpsc::UnboundedReceiver<ObjectRef<DependencyRequest>>>,
) -> impl Stream<Item = ObjectRef<DependencyRequest>> + Send + 'static {
    futures::stream::unfold(rx, |rx| async move {
        let mut rx = rx?;
        let next = rx.recv().await?;
        Some((next, Some(rx)))
    })
}

/// Maps a change of an object of `kind` to the requests that read it.
pub(super) fn readers<K>(
    kind: SourceKind,
    index: Arc<Index>,
) -> impl Fn(PartialObjectMeta<K>) -> std::vec::IntoIter<ObjectRef<DependencyRequest>>
+ Send
+ Sync
+ 'static {
    move |meta: PartialObjectMeta<K>| {
        let ns = meta.metadata.namespace.clone().unwrap_or_default();
        let name = meta.metadata.name.clone().unwrap_or_default();
        index
            .readers(&ns, &ObjectKey(kind, name))
            .into_iter()
            .map(|r| ObjectRef::<DependencyRequest>::new(&r).within(&ns))
            .collect::<Vec<_>>()
            .into_iter()
    }
}

/// How often the namespaces with requests are compared with the running per-namespace watches.
const NAMESPACES_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The metadata of the `K`s (Secrets, ConfigMaps) that requests may read, as one stream of the
/// objects touched. With `cluster_wide` one watch over every namespace; otherwise (the chart's
/// RBAC grants them namespace by namespace, and a cluster-wide watch would need the right to read
/// every Secret in the cluster) one watch per namespace that holds a request, started when its
/// first request appears and stopped when its last goes.
pub(super) fn source_changes<K>(
    client: Client,
    cfg: watcher::Config,
    requests: reflector::Store<DependencyRequest>,
    cluster_wide: bool,
) -> futures::stream::BoxStream<'static, Result<PartialObjectMeta<K>, watcher::Error>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    if cluster_wide {
        return watcher(Api::<PartialObjectMeta<K>>::all(client), cfg)
            .default_backoff()
            .touched_objects()
            .boxed();
    }
    let (tx, rx) = futures::channel::mpsc::unbounded();
    tokio::spawn(async move {
        let mut running: std::collections::HashMap<String, AbortOnDrop> = Default::default();
        while !tx.is_closed() {
            let wanted: std::collections::BTreeSet<String> = requests
                .state()
                .iter()
                .filter_map(|r| r.namespace())
                .collect();
            running.retain(|ns, _| wanted.contains(ns));
            for ns in wanted {
                if running.contains_key(&ns) {
                    continue;
                }
                let api = Api::<PartialObjectMeta<K>>::namespaced(client.clone(), &ns);
                let tx = tx.clone();
                let events = watcher(api, cfg.clone())
                    .default_backoff()
                    .touched_objects();
                let task = tokio::spawn(events.for_each(move |e| {
                    let _ = tx.unbounded_send(e);
                    std::future::ready(())
                }));
                running.insert(ns, AbortOnDrop(task));
            }
            tokio::time::sleep(NAMESPACES_EVERY).await;
        }
    });
    rx.boxed()
}

//! The hub's in-process state: the [`Index`] of which requests read which objects, with what
//! the hub shares in-process — its request cache, the consumers to wake, and what each
//! producer last published.

use std::collections::{BTreeSet, HashMap};
use std::sync::RwLock;

use super::{CONSUMER_GROUP_LABEL, CONSUMER_KIND_LABEL, ObjectKey, SourceKind};
use kraken_kit::names::{Origin, label_value};

/// Which DependencyRequests read which objects, per namespace: the hub's field index. A
/// change of an object re-resolves exactly the requests listed for it.
#[derive(Debug, Default)]
pub struct Index {
    inner: RwLock<IndexInner>,
    /// What this process last published for each producer (by uid): digests of its
    /// StateDeclaration spec and of its sensitive outputs. Kept in memory only (a digest of
    /// sensitive values is never written anywhere); after a restart the objects are read
    /// and compared once instead.
    published: std::sync::Mutex<HashMap<String, Published>>,
    /// The DependencyRequests as the hub's watch last saw them, while the hub runs: consumers
    /// read their request here rather than from the API server.
    requests: std::sync::Mutex<
        Option<kube::runtime::reflector::Store<kraken_core_kinds::hub::DependencyRequest>>,
    >,
    /// Consumer controllers waiting for their requests' changes.
    subscribers: std::sync::Mutex<Vec<Subscriber>>,
}

/// A consumer controller (its kind's group and lowercased kind) and where to send the
/// consumers (name, namespace) whose request changed.
#[derive(Debug)]
struct Subscriber {
    group: String,
    kind: String,
    /// The labels a request of this consumer kind carries (bounded label values).
    group_label: String,
    kind_label: String,
    tx: tokio::sync::mpsc::UnboundedSender<(String, String)>,
}

/// Digests of what a producer last published (see [`Index::published`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    pub spec: u64,
    /// Of the sensitive outputs; `None` when there were none.
    pub secret: Option<u64>,
}

#[derive(Debug, Default)]
struct IndexInner {
    by_object: HashMap<(String, ObjectKey), BTreeSet<String>>,
    by_request: HashMap<(String, String), Vec<ObjectKey>>,
}

impl Index {
    /// Records that request `name` in `ns` reads `objects` (replacing what it read before).
    pub fn register(&self, ns: &str, name: &str, objects: Vec<ObjectKey>) {
        let Ok(mut inner) = self.inner.write() else {
            return;
        };
        let key = (ns.to_owned(), name.to_owned());
        if inner.by_request.get(&key) == Some(&objects) {
            return;
        }
        if let Some(old) = inner.by_request.remove(&key) {
            for o in old {
                let k = (ns.to_owned(), o);
                if let Some(set) = inner.by_object.get_mut(&k) {
                    set.remove(name);
                    if set.is_empty() {
                        inner.by_object.remove(&k);
                    }
                }
            }
        }
        for o in &objects {
            inner
                .by_object
                .entry((ns.to_owned(), o.clone()))
                .or_default()
                .insert(name.to_owned());
        }
        inner.by_request.insert(key, objects);
    }

    /// Forgets request `name` in `ns` (deleted).
    pub fn forget(&self, ns: &str, name: &str) {
        self.register(ns, name, Vec::new());
        if let Ok(mut inner) = self.inner.write() {
            inner.by_request.remove(&(ns.to_owned(), name.to_owned()));
        }
    }

    /// What this process last published for the producer `uid`.
    pub fn published(&self, uid: &str) -> Option<Published> {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .copied()
    }

    /// Records what was published for `uid`; `None` forgets it (the producer is gone).
    pub fn set_published(&self, uid: &str, what: Option<Published>) {
        let mut map = self.published.lock().unwrap_or_else(|e| e.into_inner());
        match what {
            Some(p) => {
                map.insert(uid.to_owned(), p);
            }
            None => {
                map.remove(uid);
            }
        }
    }

    /// Serves the hub's request cache (each time the hub starts).
    pub fn serve_requests(
        &self,
        store: kube::runtime::reflector::Store<kraken_core_kinds::hub::DependencyRequest>,
    ) {
        *self.requests.lock().unwrap_or_else(|e| e.into_inner()) = Some(store);
    }

    /// Request `name` in `ns` from the hub's cache: `None` while the hub's watch has not
    /// listed the requests yet (read it from the API server then), `Some(None)` when there is
    /// no such request.
    pub fn request(
        &self,
        ns: &str,
        name: &str,
    ) -> Option<Option<std::sync::Arc<kraken_core_kinds::hub::DependencyRequest>>> {
        use futures::FutureExt as _;
        let store = self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()?;
        store.wait_until_ready().now_or_never()?.ok()?;
        Some(store.get(&kube::runtime::reflector::ObjectRef::new(name).within(ns)))
    }

    /// The consumers of `kind` in `group` (their name and namespace) whose request changed, as
    /// the hub's watch sees the changes — after its cache has them, so a consumer reading its
    /// request in [`Index::request`] sees at least the change that woke it.
    pub fn subscribe(
        &self,
        group: &str,
        kind: &str,
    ) -> tokio::sync::mpsc::UnboundedReceiver<(String, String)> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Subscriber {
                group: group.to_owned(),
                kind: kind.to_owned(),
                group_label: label_value(group),
                kind_label: label_value(&kind.to_lowercase()),
                tx,
            });
        rx
    }

    /// Wakes the controller of the object that publishes `declaration` in `ns`, if one of the
    /// running kinds would name an object's declaration so: a producer publishes only once a
    /// request reads it, and the hub calls this when a request reads one that is not there.
    pub fn wake_producer(&self, ns: &str, declaration: &str) {
        let subs = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        for s in subs.iter() {
            if let Some(name) = producer_name(&s.group, &s.kind, declaration) {
                let _ = s.tx.send((name, ns.to_owned()));
            }
        }
    }

    /// The API groups of the running controllers that have a kind named `kind` (any case):
    /// what a `resource` reference without `apiVersion` can mean.
    pub fn groups_of(&self, kind: &str) -> Vec<String> {
        let subs = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let groups: BTreeSet<String> = subs
            .iter()
            .filter(|s| s.kind.eq_ignore_ascii_case(kind) && !s.tx.is_closed())
            .map(|s| s.group.clone())
            .collect();
        groups.into_iter().collect()
    }

    /// Wakes the consumer of `dr` (the hub's watch saw it change).
    pub fn request_changed(&self, dr: &kraken_core_kinds::hub::DependencyRequest) {
        let labels = dr.metadata.labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k)).cloned().unwrap_or_default();
        let (group, kind) = (label(CONSUMER_GROUP_LABEL), label(CONSUMER_KIND_LABEL));
        let Some(ns) = dr.metadata.namespace.clone() else {
            return;
        };
        let owner = dr
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| label_value(&o.kind.to_lowercase()) == kind);
        let Some(owner) = owner else {
            return;
        };
        let mut subs = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        // A closed channel is a controller that stopped: forget it.
        subs.retain(|s| {
            if s.group_label != group || s.kind_label != kind {
                return !s.tx.is_closed();
            }
            s.tx.send((owner.name.clone(), ns.clone())).is_ok()
        });
    }

    /// Forgets everything published (on becoming leader: another replica may have published
    /// meanwhile).
    pub fn forget_published(&self) {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The requests in `ns` that read `object`.
    pub fn readers(&self, ns: &str, object: &ObjectKey) -> Vec<String> {
        self.inner
            .read()
            .ok()
            .and_then(|i| {
                i.by_object
                    .get(&(ns.to_owned(), object.clone()))
                    .map(|s| s.iter().cloned().collect())
            })
            .unwrap_or_default()
    }

    /// The StateDeclarations request `name` reads (its edges in the dependency graph).
    pub fn declarations_read_by(&self, ns: &str, name: &str) -> Vec<String> {
        self.inner
            .read()
            .ok()
            .and_then(|i| {
                i.by_request
                    .get(&(ns.to_owned(), name.to_owned()))
                    .map(|v| {
                        v.iter()
                            .filter(|o| o.0 == SourceKind::StateDeclaration)
                            .map(|o| o.1.clone())
                            .collect()
                    })
            })
            .unwrap_or_default()
    }
}

/// The name of the object of `kind` in `group` whose declaration is `declaration`, if any
/// (the naming rule read backwards, checked forwards).
fn producer_name(group: &str, kind: &str, declaration: &str) -> Option<String> {
    let prefix = format!("{}-", kind.to_lowercase());
    let probe = Origin::new(group, kind, "n").base();
    let suffix = probe.strip_prefix(&prefix)?.strip_prefix('n')?;
    let name = declaration.strip_prefix(&prefix)?.strip_suffix(suffix)?;
    (!name.is_empty() && Origin::new(group, kind, name).base() == declaration)
        .then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::find_cycle;

    fn request(
        ns: &str,
        name: &str,
        group: &str,
        kind: &str,
        owner: &str,
    ) -> kraken_core_kinds::hub::DependencyRequest {
        let mut dr = kraken_core_kinds::hub::DependencyRequest::new(
            name,
            kraken_core_kinds::hub::DependencyRequestSpec {
                consumer: Default::default(),
                references: Vec::new(),
            },
        );
        dr.metadata.namespace = Some(ns.into());
        dr.metadata.labels = Some(
            [
                (CONSUMER_GROUP_LABEL.to_owned(), group.to_owned()),
                (CONSUMER_KIND_LABEL.to_owned(), kind.to_lowercase()),
            ]
            .into(),
        );
        dr.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: format!("{group}/v1alpha1"),
                kind: kind.into(),
                name: owner.into(),
                uid: "u".into(),
                ..Default::default()
            },
        ]);
        dr
    }

    #[test]
    fn a_declaration_read_before_it_is_published_wakes_its_producer() {
        let index = Index::default();
        let mut objects = index.subscribe("fixture.tf.kraken.dev", "Object");
        let mut uuids = index.subscribe("random.tf.kraken.dev", "Uuid");
        let mut ec2 = index.subscribe("aws.kraken.dev", "EC2Instance");
        index.wake_producer("ns", "object-web-1.fixture");
        index.wake_producer("ns", "ec2instance-app.aws.kraken.dev");
        // Another provider's kind of the name, and a name no kind makes, wake nobody.
        index.wake_producer("ns", "uuid-u.fixture");
        index.wake_producer("ns", "pet-x");
        assert_eq!(
            objects.try_recv().ok(),
            Some(("web-1".to_owned(), "ns".to_owned()))
        );
        assert_eq!(
            ec2.try_recv().ok(),
            Some(("app".to_owned(), "ns".to_owned()))
        );
        assert!(objects.try_recv().is_err() && uuids.try_recv().is_err());
        assert_eq!(
            producer_name("random.tf.kraken.dev", "Uuid", "uuid-.random"),
            None
        );
    }

    #[test]
    fn request_changes_wake_the_consumer_kind_that_owns_them() {
        let index = Index::default();
        let mut objects = index.subscribe("fixture.tf.kraken.dev", "Object");
        let mut exports = index.subscribe("core.kraken.dev", "ConfigExport");
        index.request_changed(&request(
            "ns",
            "object-a",
            "fixture.tf.kraken.dev",
            "Object",
            "a",
        ));
        index.request_changed(&request(
            "ns",
            "configexport-b",
            "core.kraken.dev",
            "ConfigExport",
            "b",
        ));
        assert_eq!(
            objects.try_recv().ok(),
            Some(("a".to_owned(), "ns".to_owned()))
        );
        assert!(objects.try_recv().is_err(), "one wake-up per change");
        assert_eq!(
            exports.try_recv().ok(),
            Some(("b".to_owned(), "ns".to_owned()))
        );
        // A stopped controller (its receiver dropped) is forgotten on the next change.
        drop(exports);
        index.request_changed(&request(
            "ns",
            "configexport-c",
            "core.kraken.dev",
            "ConfigExport",
            "c",
        ));
        let left = index
            .subscribers
            .lock()
            .map(|s| s.len())
            .unwrap_or_default();
        assert_eq!(left, 1);
    }

    #[test]
    fn requests_come_from_the_hub_cache_once_it_has_listed() {
        use kube::runtime::watcher::Event;
        let index = Index::default();
        assert_eq!(
            index.request("ns", "object-a"),
            None,
            "no hub running: read the API"
        );
        let (reader, mut writer) = kube::runtime::reflector::store();
        index.serve_requests(reader);
        assert_eq!(
            index.request("ns", "object-a"),
            None,
            "not listed yet: read the API"
        );
        let dr = request("ns", "object-a", "fixture.tf.kraken.dev", "Object", "a");
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(dr.clone()));
        writer.apply_watcher_event(&Event::InitDone);
        let got = index.request("ns", "object-a").flatten();
        assert_eq!(got.map(|d| d.metadata.name.clone()), Some(dr.metadata.name));
        assert_eq!(
            index.request("ns", "object-b"),
            Some(None),
            "listed and absent"
        );
    }

    #[test]
    fn published_digests_are_remembered_per_producer_and_cleared_on_leadership() {
        let index = Index::default();
        let p = Published {
            spec: 1,
            secret: Some(2),
        };
        index.set_published("uid-a", Some(p));
        assert_eq!(index.published("uid-a"), Some(p));
        index.set_published("uid-a", None);
        assert_eq!(index.published("uid-a"), None);
        index.set_published("uid-b", Some(p));
        index.forget_published();
        assert_eq!(index.published("uid-b"), None);
    }

    #[test]
    fn index_tracks_readers_and_cycles_are_found() {
        let idx = Index::default();
        let sd = |n: &str| ObjectKey(SourceKind::StateDeclaration, n.into());
        idx.register("ns", "object-b", vec![sd("pet-a")]);
        idx.register("ns", "object-c", vec![sd("pet-a"), sd("object-b")]);
        assert_eq!(
            idx.readers("ns", &sd("pet-a")),
            vec!["object-b", "object-c"]
        );
        assert!(idx.readers("other", &sd("pet-a")).is_empty());
        idx.register("ns", "object-c", vec![sd("object-b")]);
        assert_eq!(idx.readers("ns", &sd("pet-a")), vec!["object-b"]);
        idx.forget("ns", "object-b");
        assert!(idx.readers("ns", &sd("pet-a")).is_empty());

        idx.register("ns", "a", vec![sd("b")]);
        idx.register("ns", "b", vec![sd("c")]);
        idx.register("ns", "c", vec![sd("a")]);
        let edges = |n: &str| idx.declarations_read_by("ns", n);
        assert_eq!(
            find_cycle("a", &edges),
            Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
        idx.register("ns", "c", vec![]);
        assert_eq!(find_cycle("a", &edges), None);
    }
}

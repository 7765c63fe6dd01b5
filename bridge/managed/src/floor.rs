//! What administrators set on each Namespace: its plan-policy floor, and the resource types
//! its resources may adopt without the owner's tag.
//!
//! A resource's `spec.planPolicy` and its ProviderConfig's are written by the namespace's users,
//! so neither can be what holds a change for review against them. The label
//! [`PLAN_POLICY_LABEL`] on a Namespace (which namespace users cannot edit) is: a resource's
//! policy is the strictest of that floor, its ProviderConfig's `planPolicy` and its own, so a
//! resource may ask for more review, never less ([`effective`]).
//!
//! The annotation [`ADOPTABLE_TYPES_ANNOTATION`] lists (glob patterns over Terraform type
//! names) the types whose existing objects a resource of the namespace may adopt without the
//! object carrying [`kraken_core_kinds::ADOPT_TAG`] (see [`super::consent`]).
//!
//! The operator keeps both for all namespaces from one watch of the Namespaces' metadata
//! ([`Floors::watch`]): no request per reconcile. Until the watch has listed them once, a
//! reconcile that needs them waits.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt as _, watcher::watcher};

pub use kraken_core_kinds::{ADOPTABLE_TYPES_ANNOTATION, PLAN_POLICY_LABEL, PlanPolicy};

/// How much review a policy asks for: `Auto` < `ManualForDestructive` < `Manual`.
fn strictness(p: PlanPolicy) -> u8 {
    match p {
        PlanPolicy::Auto => 0,
        PlanPolicy::ManualForDestructive => 1,
        PlanPolicy::Manual => 2,
    }
}

/// The strictest of the namespace's `floor`, the ProviderConfig's policy and the resource's.
pub fn effective(
    floor: PlanPolicy,
    config: Option<PlanPolicy>,
    own: Option<PlanPolicy>,
) -> PlanPolicy {
    [Some(floor), config, own]
        .into_iter()
        .flatten()
        .max_by_key(|p| strictness(*p))
        .unwrap_or_default()
}

/// The floor a label value sets. A value that is none of the policies asks for the most
/// review: an administrator's typo must not open the namespace.
pub fn parse(value: &str) -> PlanPolicy {
    match value {
        "Auto" => PlanPolicy::Auto,
        "ManualForDestructive" => PlanPolicy::ManualForDestructive,
        _ => PlanPolicy::Manual,
    }
}

/// How long a reconcile waits for the first listing of the floors.
pub const WAIT_FOR_FLOORS: std::time::Duration = std::time::Duration::from_secs(60);

/// What administrators set on one Namespace.
#[derive(Debug, Clone, Default)]
pub struct NamespacePolicy {
    pub floor: PlanPolicy,
    /// The types its resources may adopt without the owner's tag.
    pub adoptable: Vec<glob::Pattern>,
}

impl NamespacePolicy {
    /// Whether resources of the namespace may adopt objects of `type_name` untagged.
    pub fn may_adopt(&self, type_name: &str) -> bool {
        self.adoptable.iter().any(|p| p.matches(type_name))
    }
}

/// What administrators set on every Namespace, as the watch last saw it.
#[derive(Debug)]
pub struct Floors {
    by_namespace: RwLock<HashMap<String, NamespacePolicy>>,
    ready: tokio::sync::watch::Sender<bool>,
}

impl Floors {
    /// Floors known at once (tests, and `kraken plan`, which reads one namespace).
    pub fn fixed(floors: HashMap<String, PlanPolicy>) -> Arc<Self> {
        let policies = floors
            .into_iter()
            .map(|(ns, floor)| {
                let policy = NamespacePolicy {
                    floor,
                    adoptable: Vec::new(),
                };
                (ns, policy)
            })
            .collect();
        Arc::new(Self {
            by_namespace: RwLock::new(policies),
            ready: tokio::sync::watch::Sender::new(true),
        })
    }

    /// Sets the floor of `ns`, as the watch would on a label change.
    #[cfg(test)]
    pub(crate) fn set(&self, ns: &str, floor: PlanPolicy) {
        let mut map = self.by_namespace.write().unwrap_or_else(|e| e.into_inner());
        map.entry(ns.to_owned()).or_default().floor = floor;
    }

    /// Lets resources of `ns` adopt untagged objects of the types `patterns` match, as the
    /// annotation would.
    #[cfg(test)]
    pub(crate) fn set_adoptable(&self, ns: &str, patterns: &str) {
        let mut map = self.by_namespace.write().unwrap_or_else(|e| e.into_inner());
        map.entry(ns.to_owned()).or_default().adoptable = patterns_of(ns, patterns);
    }

    /// The floor of namespace `ns` (`Auto` without the label), once the floors are known. If
    /// they are still not known after [`WAIT_FOR_FLOORS`] (the operator may not watch
    /// Namespaces, say), `Manual`: nothing is applied without approval while the floor is
    /// unknown, and the log says why.
    pub async fn of(&self, ns: &str) -> PlanPolicy {
        self.policy(ns).await.floor
    }

    /// What administrators set on namespace `ns`, once the watch listed the Namespaces; after
    /// [`WAIT_FOR_FLOORS`] without a listing, the most careful policy (`Manual`, nothing
    /// adoptable untagged), and the log says why.
    pub async fn policy(&self, ns: &str) -> NamespacePolicy {
        let mut ready = self.ready.subscribe();
        // Only an error if the sender is gone, which it is not while `self` lives.
        if tokio::time::timeout(WAIT_FOR_FLOORS, ready.wait_for(|r| *r))
            .await
            .is_err()
        {
            tracing::warn!(
                namespace = ns,
                "the namespaces' plan-policy floors are not known yet (is the watch of Namespaces \
                 allowed?): taking Manual"
            );
            return NamespacePolicy {
                floor: PlanPolicy::Manual,
                adoptable: Vec::new(),
            };
        }
        self.by_namespace
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(ns)
            .cloned()
            .unwrap_or_default()
    }

    /// Watches the Namespaces' metadata and keeps what administrators set on them; the task
    /// runs until the returned `Floors` is dropped.
    pub fn watch(client: kube::Client) -> Arc<Self> {
        let floors = Arc::new(Self {
            by_namespace: RwLock::new(HashMap::new()),
            ready: tokio::sync::watch::Sender::new(false),
        });
        let weak = Arc::downgrade(&floors);
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
        // Every Namespace, not only labelled ones: the annotation cannot be selected on.
        let config = watcher::Config::default();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, config).default_backoff());
            let mut listing: HashMap<String, NamespacePolicy> = HashMap::new();
            while let Some(event) = stream.next().await {
                let Some(floors) = weak.upgrade() else { return };
                match event {
                    Ok(e) => floors.apply(e, &mut listing),
                    Err(e) => {
                        tracing::warn!(error = %e, "watching the namespaces' plan-policy floors")
                    }
                }
            }
        });
        floors
    }

    fn apply(
        &self,
        event: Event<PartialObjectMeta<Namespace>>,
        listing: &mut HashMap<String, NamespacePolicy>,
    ) {
        let mut map = self.by_namespace.write().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Init => listing.clear(),
            Event::InitApply(ns) => {
                let (name, p) = policy_of(&ns);
                listing.insert(name, p);
            }
            Event::InitDone => {
                *map = std::mem::take(listing);
                self.ready.send_replace(true);
            }
            Event::Apply(ns) => {
                let (name, p) = policy_of(&ns);
                map.insert(name, p);
            }
            Event::Delete(ns) => {
                map.remove(&ns.metadata.name.clone().unwrap_or_default());
            }
        }
    }
}

/// A Namespace's name and what administrators set on it.
pub(crate) fn policy_of(ns: &PartialObjectMeta<Namespace>) -> (String, NamespacePolicy) {
    let (name, floor) = floor_of(ns);
    let adoptable = ns
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ADOPTABLE_TYPES_ANNOTATION))
        .map(|v| patterns_of(&name, v))
        .unwrap_or_default();
    (name, NamespacePolicy { floor, adoptable })
}

/// The glob patterns of an [`ADOPTABLE_TYPES_ANNOTATION`] value; a bad one is logged and
/// left out (it allows nothing).
fn patterns_of(namespace: &str, value: &str) -> Vec<glob::Pattern> {
    value
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .filter_map(|p| match glob::Pattern::new(p) {
            Ok(pattern) => Some(pattern),
            Err(e) => {
                tracing::warn!(
                    namespace,
                    pattern = p,
                    "the annotation {ADOPTABLE_TYPES_ANNOTATION} has an invalid pattern ({e}): ignored"
                );
                None
            }
        })
        .collect()
}

/// A Namespace's name and floor (`Auto` without the label); a value that is none of the
/// policies is logged (and taken as `Manual`, [`parse`]).
fn floor_of(ns: &PartialObjectMeta<Namespace>) -> (String, PlanPolicy) {
    let name = ns.metadata.name.clone().unwrap_or_default();
    let raw = ns
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(PLAN_POLICY_LABEL))
        .map_or("Auto", String::as_str);
    if !matches!(raw, "Auto" | "ManualForDestructive" | "Manual") {
        tracing::warn!(
            namespace = name,
            value = raw,
            "the label {PLAN_POLICY_LABEL} is none of Auto, ManualForDestructive, Manual: taken as Manual"
        );
    }
    (name, parse(raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use PlanPolicy::{Auto, Manual, ManualForDestructive as Destructive};

    #[test]
    fn a_resource_may_ask_for_more_review_never_less() {
        // (floor, ProviderConfig, resource) → effective
        let table = [
            (Auto, None, None, Auto),
            (Auto, Some(Manual), Some(Auto), Manual),
            (Auto, None, Some(Destructive), Destructive),
            (Manual, None, Some(Auto), Manual),
            (Manual, Some(Auto), Some(Auto), Manual),
            (Destructive, None, Some(Auto), Destructive),
            (Destructive, Some(Auto), Some(Manual), Manual),
        ];
        for (floor, config, own, want) in table {
            assert_eq!(
                effective(floor, config, own),
                want,
                "{floor:?} {config:?} {own:?}"
            );
        }
    }

    #[test]
    fn an_unknown_label_value_asks_for_the_most_review() {
        assert_eq!(parse("Auto"), Auto);
        assert_eq!(parse("ManualForDestructive"), Destructive);
        assert_eq!(parse("manual"), Manual);
        assert_eq!(parse(""), Manual);
    }

    #[tokio::test]
    async fn floors_follow_the_watch_and_wait_for_its_first_listing() {
        let floors = Arc::new(Floors {
            by_namespace: RwLock::new(HashMap::new()),
            ready: tokio::sync::watch::Sender::new(false),
        });
        let ns = |name: &str, value: &str| -> PartialObjectMeta<Namespace> {
            let mut m = kube::core::PartialObjectMeta::<Namespace>::default();
            m.metadata.name = Some(name.into());
            m.metadata.labels = Some([(PLAN_POLICY_LABEL.to_owned(), value.to_owned())].into());
            m
        };
        let waiting = tokio::spawn({
            let floors = floors.clone();
            async move { floors.of("team").await }
        });
        let mut listing = HashMap::new();
        floors.apply(Event::Init, &mut listing);
        floors.apply(Event::InitApply(ns("team", "Manual")), &mut listing);
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "no floor before the first listing is done"
        );
        floors.apply(Event::InitDone, &mut listing);
        assert_eq!(waiting.await.ok(), Some(Manual));
        floors.apply(Event::Apply(ns("team", "Auto")), &mut listing);
        assert_eq!(floors.of("team").await, Auto);
        floors.apply(
            Event::Apply(ns("ops", "ManualForDestructive")),
            &mut listing,
        );
        assert_eq!(floors.of("ops").await, Destructive);
        floors.apply(Event::Delete(ns("ops", "")), &mut listing);
        assert_eq!(floors.of("ops").await, Auto);
        // The adoption allow-list comes from an annotation, on any Namespace.
        let mut m = ns("mig", "Auto");
        m.metadata.annotations = Some(
            [(
                ADOPTABLE_TYPES_ANNOTATION.to_owned(),
                "random_*, aws_iam_role,[bad".to_owned(),
            )]
            .into(),
        );
        floors.apply(Event::Apply(m), &mut listing);
        let mig = floors.policy("mig").await;
        assert!(mig.may_adopt("random_pet") && mig.may_adopt("aws_iam_role"));
        assert!(!mig.may_adopt("aws_iam_role_policy"));
        assert!(!floors.policy("team").await.may_adopt("random_pet"));
    }
}

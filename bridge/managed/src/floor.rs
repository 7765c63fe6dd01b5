//! The plan-policy floor of each namespace, set by administrators.
//!
//! A resource's `spec.planPolicy` and its ProviderConfig's are written by the namespace's users,
//! so neither can be what holds a change for review against them. The label
//! [`PLAN_POLICY_LABEL`] on a Namespace (which namespace users cannot edit) is: a resource's
//! policy is the strictest of that floor, its ProviderConfig's `planPolicy` and its own, so a
//! resource may ask for more review, never less ([`effective`]).
//!
//! The operator keeps the floors of all namespaces from one watch of the labelled Namespaces
//! ([`Floors::watch`]): no request per reconcile. Until the watch has listed them once, a
//! reconcile that needs its floor waits.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt as _, watcher::watcher};

pub use kraken_core_kinds::{PLAN_POLICY_LABEL, PlanPolicy};

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

/// The floors of all namespaces, as the watch last saw them.
#[derive(Debug)]
pub struct Floors {
    by_namespace: RwLock<HashMap<String, PlanPolicy>>,
    ready: tokio::sync::watch::Sender<bool>,
}

impl Floors {
    /// Floors known at once (tests, and `kraken plan`, which reads one namespace).
    pub fn fixed(floors: HashMap<String, PlanPolicy>) -> Arc<Self> {
        Arc::new(Self {
            by_namespace: RwLock::new(floors),
            ready: tokio::sync::watch::Sender::new(true),
        })
    }

    /// Sets the floor of `ns`, as the watch would on a label change.
    #[cfg(test)]
    pub(crate) fn set(&self, ns: &str, floor: PlanPolicy) {
        let mut map = self.by_namespace.write().unwrap_or_else(|e| e.into_inner());
        map.insert(ns.to_owned(), floor);
    }

    /// The floor of namespace `ns` (`Auto` without the label), once the floors are known. If
    /// they are still not known after [`WAIT_FOR_FLOORS`] (the operator may not watch
    /// Namespaces, say), `Manual`: nothing is applied without approval while the floor is
    /// unknown, and the log says why.
    pub async fn of(&self, ns: &str) -> PlanPolicy {
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
            return PlanPolicy::Manual;
        }
        self.by_namespace
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(ns)
            .copied()
            .unwrap_or_default()
    }

    /// Watches the labelled Namespaces and keeps their floors; the task runs until the
    /// returned `Floors` is dropped.
    pub fn watch(client: kube::Client) -> Arc<Self> {
        let floors = Arc::new(Self {
            by_namespace: RwLock::new(HashMap::new()),
            ready: tokio::sync::watch::Sender::new(false),
        });
        let weak = Arc::downgrade(&floors);
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
        let config = watcher::Config::default().labels(PLAN_POLICY_LABEL);
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, config).default_backoff());
            let mut listing: HashMap<String, PlanPolicy> = HashMap::new();
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
        listing: &mut HashMap<String, PlanPolicy>,
    ) {
        let mut map = self.by_namespace.write().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Init => listing.clear(),
            Event::InitApply(ns) => {
                let (name, f) = floor_of(&ns);
                listing.insert(name, f);
            }
            Event::InitDone => {
                *map = std::mem::take(listing);
                self.ready.send_replace(true);
            }
            Event::Apply(ns) => {
                let (name, f) = floor_of(&ns);
                map.insert(name, f);
            }
            Event::Delete(ns) => {
                map.remove(&ns.metadata.name.clone().unwrap_or_default());
            }
        }
    }
}

/// A labelled Namespace's name and floor; a value that is none of the policies is logged
/// (and taken as `Manual`, [`parse`]).
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
    }
}

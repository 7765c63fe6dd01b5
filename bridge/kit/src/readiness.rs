//! What `/readyz` reports: whether this replica is up and, when it leads, whether the caches
//! its controllers reconcile from have synced.
//!
//! - Starting (before the first campaign): not ready.
//! - Standing by (another replica leads): ready — it is what a fail-over needs.
//! - Leading: ready once every registered cache has listed its objects; a cache that cannot
//!   sync (its watch is refused, say) keeps the replica unready, naming the cache.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
pub struct Readiness {
    started: AtomicBool,
    leading: AtomicBool,
    /// Each registered cache (by name) and whether it has synced; a name may be registered
    /// more than once (two controllers), counted by the number of registrations.
    caches: Mutex<BTreeMap<String, (usize, usize)>>,
}

impl Readiness {
    /// The process serves and campaigns (or runs its controllers, without leader election).
    pub fn set_started(&self) {
        self.started.store(true, Ordering::Release);
    }

    pub fn set_leading(&self, leading: bool) {
        self.leading.store(leading, Ordering::Release);
    }

    fn caches(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (usize, usize)>> {
        self.caches.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a cache that has not synced yet; [`Cache::synced`] marks it, dropping the
    /// guard removes it (its controller stopped).
    pub fn cache(self: &Arc<Self>, name: &str) -> Cache {
        self.caches().entry(name.to_owned()).or_default().0 += 1;
        Cache {
            readiness: self.clone(),
            name: name.to_owned(),
            synced: false,
        }
    }

    /// Whether `/readyz` answers 200, and the line it answers with.
    pub fn report(&self) -> (bool, String) {
        if !self.started.load(Ordering::Acquire) {
            return (false, "starting\n".into());
        }
        if !self.leading.load(Ordering::Acquire) {
            return (true, "standby: another replica leads\n".into());
        }
        let caches = self.caches();
        let total: usize = caches.values().map(|(n, _)| n).sum();
        let waiting: Vec<&str> = caches
            .iter()
            .filter(|(_, (n, synced))| synced < n)
            .map(|(name, _)| name.as_str())
            .collect();
        if waiting.is_empty() {
            (true, format!("leading: {total} caches synced\n"))
        } else {
            (
                false,
                format!(
                    "leading: waiting for {} of {total} caches to sync: {}\n",
                    waiting.len(),
                    waiting.join(", ")
                ),
            )
        }
    }
}

/// Waits until `store` has listed its objects (`false`: its writer is gone first).
///
/// Polls again every half second instead of waiting once: kube-runtime's store signals
/// readiness through a one-shot channel that keeps only the last poller's waker, so a second
/// waiter beside the controller's own may never be woken.
pub async fn store_synced<K>(store: &kube::runtime::reflector::Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        let wait = store.wait_until_ready();
        match tokio::time::timeout(std::time::Duration::from_millis(500), wait).await {
            Ok(result) => return result.is_ok(),
            Err(_) => continue,
        }
    }
}

/// A registered cache; see [`Readiness::cache`].
#[derive(Debug)]
pub struct Cache {
    readiness: Arc<Readiness>,
    name: String,
    synced: bool,
}

impl Cache {
    /// The cache has listed its objects.
    pub fn synced(&mut self) {
        if !self.synced {
            self.synced = true;
            if let Some(entry) = self.readiness.caches().get_mut(&self.name) {
                entry.1 += 1;
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let mut caches = self.readiness.caches();
        if let Some(entry) = caches.get_mut(&self.name) {
            entry.0 = entry.0.saturating_sub(1);
            if self.synced {
                entry.1 = entry.1.saturating_sub(1);
            }
            if entry.0 == 0 {
                caches.remove(&self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standby_is_ready_and_a_leader_waits_for_its_caches() {
        let r = Arc::new(Readiness::default());
        assert!(!r.report().0, "starting");
        r.set_started();
        assert!(r.report().0, "standby");
        r.set_leading(true);
        let mut a = r.cache("Object.fixture.tf.kraken.dev");
        let b = r.cache("DependencyRequest");
        let (ready, line) = r.report();
        assert!(!ready);
        assert!(
            line.contains("2 of 2") && line.contains("DependencyRequest"),
            "{line}"
        );
        a.synced();
        a.synced();
        let (ready, line) = r.report();
        assert!(!ready && line.contains("1 of 2"), "{line}");
        drop(b);
        assert_eq!(r.report(), (true, "leading: 1 caches synced\n".into()));
        drop(a);
        assert_eq!(r.report(), (true, "leading: 0 caches synced\n".into()));
    }
}

//! Idle runners scaled to zero, and started again on demand.
//!
//! Every operator replica that holds a connection to a runner marks the runner in use: while
//! the connection lasts it writes the time into the Deployment's annotation
//! [`LAST_USED_ANNOTATION`] (every quarter of the idle time). A replica's connection lasts as
//! long as its provider host: the host pool shuts a host down after `--provider-idle-timeout`
//! without a request (never while one is in flight), and the connection goes with it. So a
//! runner is idle when no replica has held a connection to it for `--runner-idle-after`.
//!
//! A replica that wrote a runner's Deployment watches it; once it is idle, the replica scales
//! it to zero, guarded by the resourceVersion it read (a replica that marked it or dialed it
//! meanwhile wins). The next dial writes the Deployment again with one replica and waits for
//! its Pod as for a new one. The watch ends when the Deployment is at zero or gone.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};

/// When a replica last held a connection to the runner (RFC 3339), on its Deployment.
pub const LAST_USED_ANNOTATION: &str = "kraken.dev/runner-last-used";

/// How often a held runner is marked, and an idle one looked at: a quarter of the idle time,
/// between 1 s and 5 min.
pub fn mark_every(idle_after: Duration) -> Duration {
    (idle_after / 4).clamp(Duration::from_secs(1), Duration::from_secs(300))
}

/// What to do with a runner the watch looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// In use (or marked too recently): look again later.
    Keep,
    /// No replica held it for the idle time: scale it to zero.
    ScaleToZero,
    /// Already at zero (or gone): nothing more to watch.
    Done,
}

/// The pure core: a runner wanting `replicas`, last marked at `last_used`, at `now`. A
/// Deployment never marked is kept (its writer marks it as it writes it).
pub fn decide(
    replicas: i32,
    last_used: Option<Timestamp>,
    now: Timestamp,
    idle_after: Duration,
) -> Decision {
    if replicas == 0 {
        return Decision::Done;
    }
    let Some(last) = last_used else {
        return Decision::Keep;
    };
    let idle = now
        .duration_since(last)
        .try_into()
        .unwrap_or(Duration::ZERO);
    if idle >= idle_after {
        Decision::ScaleToZero
    } else {
        Decision::Keep
    }
}

/// The annotation's value for now.
pub fn now_mark() -> String {
    kraken_kit::conditions::now()
}

/// Marks `namespace/name` in use every [`mark_every`] until dropped.
pub struct Mark {
    task: tokio::task::AbortHandle,
}

impl Drop for Mark {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Start marking the runner Deployment `namespace/name` in use while the result is kept.
pub fn mark(api: Api<Deployment>, name: String, idle_after: Duration) -> Mark {
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(mark_every(idle_after));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let patch = serde_json::json!({"metadata": {"annotations": {
                LAST_USED_ANNOTATION: now_mark()}}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                // Scaled away and deleted with its ProviderConfig: nothing to mark.
                Err(kube::Error::Api(e)) if e.code == 404 => return,
                Err(e) => tracing::debug!(runner = %name, "marking the runner in use: {e}"),
            }
        }
    });
    Mark {
        task: task.abort_handle(),
    }
}

/// The runners this replica watches (namespace/name), so each is watched once.
#[derive(Debug, Default, Clone)]
pub struct Watching(Arc<Mutex<BTreeSet<String>>>);

impl Watching {
    fn claim(&self, key: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_owned())
    }

    fn release(&self, key: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

/// Watch the runner Deployment `namespace/name` (unless this replica already does) and scale
/// it to zero once idle.
pub fn watch(
    watching: &Watching,
    api: Api<Deployment>,
    (namespace, name): (&str, &str),
    idle_after: Duration,
) {
    let key = format!("{namespace}/{name}");
    if !watching.claim(&key) {
        return;
    }
    let (watching, name) = (watching.clone(), name.to_owned());
    tokio::spawn(async move {
        let every = mark_every(idle_after);
        loop {
            tokio::time::sleep(every).await;
            match look(&api, &name, idle_after).await {
                Ok(false) => {}
                Ok(true) => break,
                Err(e) => tracing::debug!(runner = %key, "looking at an idle runner: {e}"),
            }
        }
        watching.release(&key);
    });
}

/// One look: `Ok(true)` once there is nothing more to watch.
async fn look(
    api: &Api<Deployment>,
    name: &str,
    idle_after: Duration,
) -> Result<bool, kube::Error> {
    let Some(d) = api.get_opt(name).await? else {
        return Ok(true);
    };
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let last = d
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LAST_USED_ANNOTATION))
        .and_then(|t| t.parse::<Timestamp>().ok());
    match decide(replicas, last, Timestamp::now(), idle_after) {
        Decision::Keep => Ok(false),
        Decision::Done => Ok(true),
        Decision::ScaleToZero => {
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": d.metadata.resource_version},
                "spec": {"replicas": 0}});
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    tracing::info!(
                        namespace = d.metadata.namespace.as_deref().unwrap_or_default(),
                        runner = name,
                        idle_after = ?idle_after,
                        "scaled an idle runner to zero"
                    );
                    Ok(true)
                }
                // Marked or dialed since it was read: in use again.
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    #[test]
    fn a_runner_is_scaled_to_zero_only_after_the_idle_time_without_a_mark() {
        let idle = Duration::from_secs(600);
        let now = at("2026-12-07T12:10:00Z");
        assert_eq!(
            decide(1, Some(at("2026-12-07T12:00:00Z")), now, idle),
            Decision::ScaleToZero
        );
        assert_eq!(
            decide(1, Some(at("2026-12-07T12:00:01Z")), now, idle),
            Decision::Keep
        );
        // A mark from a replica whose clock runs ahead is recent, not negative.
        assert_eq!(
            decide(1, Some(at("2026-12-07T12:11:00Z")), now, idle),
            Decision::Keep
        );
        assert_eq!(decide(1, None, now, idle), Decision::Keep);
        assert_eq!(decide(0, None, now, idle), Decision::Done);
    }

    #[test]
    fn marks_come_four_times_per_idle_time_within_bounds() {
        assert_eq!(
            mark_every(Duration::from_secs(1800)),
            Duration::from_secs(300)
        );
        assert_eq!(mark_every(Duration::from_secs(60)), Duration::from_secs(15));
        assert_eq!(mark_every(Duration::from_secs(2)), Duration::from_secs(1));
    }
}

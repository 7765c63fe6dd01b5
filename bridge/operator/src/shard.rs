//! Shard membership for `--shards auto`: one `coordination.k8s.io/v1` Lease per replica, named
//! `<lease name>-member-<identity>` and labelled with the ring (`kraken.dev/shard-ring: <lease
//! name>`), renewed every retry period. Its annotation `kraken.dev/shard-view` names the ring
//! view (the set of members) its holder has drained for; [`tracker`] turns the live members'
//! Leases into the [`Ownership`] this replica acts on (the pure half, and the handshake in
//! full).
//!
//! Each renewal also keeps this replica's [`Fence`] current (epoch: the member Lease's uid), so
//! a replica that stops renewing stops writing before its Lease expires for the others.
//!
//! A member is live while its Lease is (client-go's rule: `renewTime + leaseDurationSeconds`
//! not past on this replica's clock, and the record not seen unchanged for that long). Leases of
//! members gone for more than [`FORGET_AFTER`] leases are deleted (guarded by their
//! `resourceVersion`), so replicas that were scaled away leave nothing behind.

mod tracker;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{info, warn};

use super::leader::record::{Decision, Observer, claim, decide, fresh};
use kraken_kit::fence::{Epoch, Fence};
use kraken_kit::metrics::Metrics;
use kraken_kit::ring::Ownership;
use tracker::{Member, Tracker};

/// Label naming the ring a member Lease belongs to.
pub const RING_LABEL: &str = "kraken.dev/shard-ring";
/// Annotation naming the view a member has drained for.
pub const VIEW_ANNOTATION: &str = "kraken.dev/shard-view";
/// Expired member Leases are deleted after this many lease durations.
const FORGET_AFTER: u32 = 30;

/// What a replica acts on, with its generation; the controllers report back the generation
/// they run ([`ShardLink::applied`]).
pub type Published = (Ownership, u64);

/// This replica's membership.
#[derive(Clone)]
pub struct Membership {
    api: Api<Lease>,
    ring: String,
    identity: String,
    lease: Duration,
    renew_deadline: Duration,
    retry: Duration,
    fence: Fence,
    metrics: std::sync::Arc<Metrics>,
}

/// A running membership (stopped by [`Shard::leave`]).
pub struct Shard {
    task: tokio::task::JoinHandle<()>,
}

/// What the controllers act on, and where they report the generation they run (once the work
/// of the previous one has finished).
pub struct ShardLink {
    pub ownership: watch::Receiver<Published>,
    pub applied: watch::Sender<u64>,
}

impl Shard {
    /// Stops renewing and deletes this replica's member Lease, so the others take its share at
    /// once (graceful shutdown, after the controllers stopped).
    pub async fn leave(self, membership: &Membership) {
        self.task.abort();
        let _ = self.task.await;
        membership.fence.revoke();
        let name = membership.lease_name();
        match membership.api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => info!(lease = %name, "left the shard ring"),
            Err(err) => {
                warn!(lease = %name, error = %err, "failed to leave the shard ring; its Lease will expire")
            }
        }
    }
}

impl Membership {
    /// `identity` joins the ring `ring` (the leader Lease's name) in `namespace`, with timing
    /// derived from `lease` as leader election does.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        ring: &str,
        identity: &str,
        lease: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            ring: ring.to_owned(),
            identity: identity.to_owned(),
            lease,
            renew_deadline: lease.mul_f64(2.0 / 3.0),
            retry: lease.mul_f64(2.0 / 15.0),
            fence: Fence::leased(),
            metrics: std::sync::Arc::new(Metrics::new()),
        }
    }

    pub fn with_fence(self, fence: Fence) -> Self {
        Self { fence, ..self }
    }

    pub fn with_metrics(self, metrics: std::sync::Arc<Metrics>) -> Self {
        Self { metrics, ..self }
    }

    /// `<ring>-member-<identity>`, within a name's length.
    fn lease_name(&self) -> String {
        let id: String = self
            .identity
            .to_lowercase()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        kraken_kit::names::suffixed(&format!("{}-member-", self.ring), id.trim_matches('-'))
    }

    /// Starts renewing and tracking; the first ownership owns nothing.
    pub fn start(&self) -> (Shard, ShardLink) {
        let tracker = Tracker::new(&self.identity);
        let (tx, ownership) = watch::channel(tracker.ownership());
        let (applied, applied_rx) = watch::channel(0);
        let task = tokio::spawn(self.clone().run(tracker, tx, applied_rx));
        (Shard { task }, ShardLink { ownership, applied })
    }

    async fn run(
        self,
        mut tracker: Tracker,
        tx: watch::Sender<Published>,
        mut applied: watch::Receiver<u64>,
    ) {
        info!(ring = %self.ring, identity = %self.identity, "joining the shard ring");
        let mut tick = tokio::time::interval(self.retry);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut renewed: Option<Instant> = None;
        let mut observers: HashMap<String, Observer> = HashMap::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                // The controllers finished draining: confirm without waiting for the tick.
                Ok(()) = applied.changed() => {}
            }
            let started = Instant::now();
            let ack = tracker.ack_id();
            let budget = self.renew_deadline;
            match tokio::time::timeout(budget, self.renew(ack.as_deref())).await {
                Ok(Ok(epoch)) => {
                    renewed = Some(started);
                    self.fence
                        .grant(epoch, (started + self.renew_deadline).into_std());
                }
                Ok(Err(err)) => {
                    warn!(ring = %self.ring, error = %err, "failed to renew the shard membership")
                }
                Err(_) => warn!(ring = %self.ring, "renewing the shard membership timed out"),
            }
            if renewed.is_none_or(|r| r.elapsed() >= self.renew_deadline) {
                self.fence.revoke();
                if let Some(p) = tracker.reset() {
                    warn!(ring = %self.ring, "the shard membership lapsed: giving up every object until it is renewed");
                    tx.send_replace(p);
                }
                continue;
            }
            let live = match self.members(&mut observers).await {
                Ok(live) => live,
                Err(err) => {
                    warn!(ring = %self.ring, error = %err, "failed to list the shard members");
                    continue;
                }
            };
            let before = tracker.ack_id();
            if let Some(p) = tracker.observe(&live, *applied.borrow_and_update()) {
                self.report(&tracker, &live, &p);
                tx.send_replace(p);
            }
            if tracker.ack_id() != before {
                // Confirm now rather than a retry period later.
                tick.reset_immediately();
            }
        }
    }

    fn report(&self, tracker: &Tracker, live: &[Member], p: &Published) {
        let members: Vec<&str> = live.iter().map(|m| m.name.as_str()).collect();
        let settled = tracker.settled().map(kraken_kit::ring::View::id);
        info!(
            ring = %self.ring,
            generation = p.1,
            ?members,
            settled = ?settled,
            "shard ownership changed"
        );
        self.metrics
            .set_shard_members(i64::try_from(live.len()).unwrap_or(i64::MAX));
        self.metrics.shard_rebalanced();
    }

    /// Writes this replica's Lease (creating it if missing) with `ack`; its epoch.
    async fn renew(&self, ack: Option<&str>) -> Result<Epoch, kube::Error> {
        let name = self.lease_name();
        let now = Timestamp::now();
        let mut lease = match self.api.get_opt(&name).await? {
            Some(lease) => claim(lease, &self.identity, now, self.lease),
            None => fresh(&name, &self.identity, now, self.lease),
        };
        let meta = &mut lease.metadata;
        meta.labels.get_or_insert_with(BTreeMap::new).insert(
            RING_LABEL.into(),
            kraken_kit::names::label_value(&self.ring),
        );
        let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
        match ack {
            Some(id) => annotations.insert(VIEW_ANNOTATION.into(), id.to_owned()),
            None => annotations.remove(VIEW_ANNOTATION),
        };
        let written = if meta.resource_version.is_some() {
            self.api
                .replace(&name, &PostParams::default(), &lease)
                .await?
        } else {
            self.api.create(&PostParams::default(), &lease).await?
        };
        Ok(Epoch {
            lease: written.metadata.uid.unwrap_or_default(),
            n: 0,
        })
    }

    /// The members whose Leases are live; deletes those long expired.
    async fn members(
        &self,
        observers: &mut HashMap<String, Observer>,
    ) -> Result<Vec<Member>, kube::Error> {
        let selector = format!(
            "{RING_LABEL}={}",
            kraken_kit::names::label_value(&self.ring)
        );
        let leases = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await?;
        let now = Timestamp::now();
        let mut live = Vec::new();
        let mut seen = Vec::new();
        for lease in leases {
            let name = lease.metadata.name.clone().unwrap_or_default();
            seen.push(name.clone());
            let unchanged = observers
                .entry(name.clone())
                .or_default()
                .unchanged_for(&lease);
            let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
            match decide(&lease, "", now, unchanged, self.lease) {
                Decision::Wait { holder } => live.push(Member {
                    name: holder,
                    ack: lease
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(VIEW_ANNOTATION).cloned()),
                }),
                _ if unchanged >= self.lease * FORGET_AFTER
                    && holder.as_deref() != Some(&self.identity) =>
                {
                    self.forget(&lease).await;
                }
                _ => {}
            }
        }
        observers.retain(|name, _| seen.contains(name));
        Ok(live)
    }

    /// Deletes a member Lease expired long ago, unless it changed since it was read.
    async fn forget(&self, lease: &Lease) {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let params = DeleteParams::default().preconditions(Preconditions {
            resource_version: lease.metadata.resource_version.clone(),
            uid: None,
        });
        match self.api.delete(&name, &params).await {
            Ok(_) => info!(lease = %name, "deleted the Lease of a shard member gone for good"),
            Err(err) => {
                warn!(lease = %name, error = %err, "failed to delete an expired shard member's Lease")
            }
        }
    }
}

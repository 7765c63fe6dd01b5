//! Leader election on a `coordination.k8s.io/v1` Lease, the way client-go's `leaderelection`
//! does it, so only one replica reconciles (and talks to providers) at a time.
//!
//! A candidate [`LeaderElection::acquire`]s by writing its identity into the Lease (creating it
//! if missing) once the Lease is free or expired; every write is a `replace` carrying the
//! `resourceVersion` that was read, so two candidates racing for the same Lease cannot both
//! win. The winner's [`Leadership`] renews `renewTime` every `retry` in a background task and
//! resolves [`Leadership::lost`] when renewals have failed for `renew_deadline`, or when
//! another identity holds the Lease. Because `renew_deadline < lease`, a leader that cannot
//! renew stops before anyone else may take over.
//!
//! When is another holder's Lease expired? Either when its `renewTime + leaseDurationSeconds`
//! has passed on this replica's clock, or — client-go's rule, immune to clock skew — when this
//! candidate has seen the same Lease record unchanged for `leaseDurationSeconds` on its own
//! monotonic clock. The first takes over a dead leader's Lease at once after a restart; the
//! second still takes over when the holder's clock runs ahead of ours.

pub(super) mod record;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, info, warn};

use kraken_kit::fence::{Epoch, Fence};

use record::{Decision, Observer, claim, decide, fresh, holder_of, released};

fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.is_conflict() || status.is_already_exists())
}

/// One attempt's outcome.
enum Attempt {
    /// This identity holds the Lease now, in this epoch (its uid and `leaseTransitions`).
    Held(Epoch),
    /// Someone else does (or won the race to write it).
    Standby { holder: String },
}

/// A candidate for one Lease.
#[derive(Clone)]
pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease: Duration,
    renew_deadline: Duration,
    retry: Duration,
    /// Granted each term, renewed with each renewal, revoked when the Lease is lost.
    fence: Option<Fence>,
}

/// The epoch a Lease records: which Lease, and how many times it changed holders.
fn epoch_of(lease: &Lease) -> Epoch {
    let transitions = lease.spec.as_ref().and_then(|s| s.lease_transitions);
    Epoch {
        lease: lease.metadata.uid.clone().unwrap_or_default(),
        n: u64::try_from(transitions.unwrap_or(0)).unwrap_or(0),
    }
}

impl LeaderElection {
    /// A candidate called `identity` (unique per replica, e.g. the pod name) for the Lease
    /// `namespace/name`, with client-go's default timing: lease 15 s, renew deadline 10 s,
    /// retry 2 s.
    pub fn new(client: kube::Client, namespace: &str, name: &str, identity: String) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity,
            lease: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
            fence: None,
        }
    }

    /// Timing derived from one lease duration the way client-go's defaults relate (15 s, 10 s,
    /// 2 s): renew deadline two thirds of it, retry two fifteenths.
    pub fn with_lease_duration(self, lease: Duration) -> Self {
        let renew_deadline = lease.mul_f64(2.0 / 3.0);
        let retry = lease.mul_f64(2.0 / 15.0);
        self.with_timing(lease, renew_deadline, retry)
    }

    /// Keeps `fence` current: granted while this candidate leads, revoked when it stops.
    pub fn with_fence(self, fence: Fence) -> Self {
        Self {
            fence: Some(fence),
            ..self
        }
    }

    fn grant(&self, epoch: &Epoch, renewed: Instant) {
        if let Some(f) = &self.fence {
            f.grant(epoch.clone(), (renewed + self.renew_deadline).into_std());
        }
    }

    fn revoke(&self) {
        if let Some(f) = &self.fence {
            f.revoke();
        }
    }

    /// Other timing. Keep `retry < renew_deadline < lease`: the leader must give up before its
    /// Lease can expire for the others.
    pub fn with_timing(self, lease: Duration, renew_deadline: Duration, retry: Duration) -> Self {
        Self {
            lease,
            renew_deadline,
            retry,
            ..self
        }
    }

    /// Campaigns until this instance holds the Lease. API errors (the server is down, say) are
    /// logged and retried every `retry`; this only returns as the leader.
    pub async fn acquire(&self) -> Leadership {
        info!(lease = %self.name, identity = %self.identity, "campaigning for the leader lease");
        let mut observer = Observer::default();
        let mut last_holder: Option<String> = None;
        loop {
            let started = Instant::now();
            // A request to an API server that accepts but never answers must not stall the
            // campaign.
            let attempt =
                tokio::time::timeout(self.renew_deadline, self.try_acquire(&mut observer));
            match attempt.await {
                Ok(Ok(Attempt::Held(epoch))) => {
                    info!(lease = %self.name, identity = %self.identity, %epoch, "acquired the leader lease");
                    return self.lead(started, epoch);
                }
                Ok(Ok(Attempt::Standby { holder })) => {
                    if last_holder.as_deref() != Some(holder.as_str()) {
                        info!(lease = %self.name, %holder, "the leader lease is held elsewhere; standing by");
                        last_holder = Some(holder);
                    }
                }
                Ok(Err(err)) => {
                    warn!(lease = %self.name, error = %err, "failed to campaign for the leader lease");
                }
                Err(_) => warn!(lease = %self.name, "campaigning for the leader lease timed out"),
            }
            tokio::time::sleep(self.retry).await;
        }
    }

    /// One read-decide-write round of campaigning.
    async fn try_acquire(&self, observer: &mut Observer) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            let fresh = fresh(&self.name, &self.identity, now, self.lease);
            return match self.api.create(&PostParams::default(), &fresh).await {
                Ok(created) => Ok(Attempt::Held(epoch_of(&created))),
                Err(err) if is_conflict(&err) => Ok(Attempt::Standby {
                    holder: "another candidate (it created the lease first)".into(),
                }),
                Err(err) => Err(err),
            };
        };
        let unchanged_for = observer.unchanged_for(&lease);
        match decide(&lease, &self.identity, now, unchanged_for, self.lease) {
            Decision::Wait { holder } => return Ok(Attempt::Standby { holder }),
            Decision::TakeOver { from } => {
                info!(lease = %self.name, %from, "the leader lease has expired; taking it over");
            }
            Decision::Acquire | Decision::Renew => {}
        }
        let holder = holder_of(&lease);
        let claimed = claim(lease, &self.identity, now, self.lease);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &claimed)
            .await
        {
            Ok(written) => Ok(Attempt::Held(epoch_of(&written))),
            Err(err) if is_conflict(&err) => {
                debug!(lease = %self.name, previous = %holder, "lost a race to write the leader lease");
                Ok(Attempt::Standby {
                    holder: "another candidate (it wrote the lease first)".into(),
                })
            }
            Err(err) => Err(err),
        }
    }

    /// Renews once: `Ok(None)` when renewed, `Ok(Some(holder))` when another identity holds it.
    async fn renew(&self) -> Result<Option<String>, kube::Error> {
        let now = Timestamp::now();
        let lease = self.api.get(&self.name).await?;
        if decide(&lease, &self.identity, now, Duration::ZERO, self.lease) != Decision::Renew {
            return Ok(Some(holder_of(&lease)));
        }
        let renewed = claim(lease, &self.identity, now, self.lease);
        self.api
            .replace(&self.name, &PostParams::default(), &renewed)
            .await?;
        Ok(None)
    }

    /// Clears the holder if it is still this identity: `Ok(None)` when released,
    /// `Ok(Some(holder))` when the Lease was no longer ours to release.
    async fn give_up(&self) -> Result<Option<String>, kube::Error> {
        let lease = self.api.get(&self.name).await?;
        let holder = holder_of(&lease);
        if holder != self.identity {
            return Ok(Some(holder));
        }
        let lease = released(lease, Timestamp::now());
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(None)
    }

    /// Starts renewing a Lease acquired in `epoch` by a write sent at `renewed`.
    fn lead(&self, renewed: Instant, epoch: Epoch) -> Leadership {
        self.grant(&epoch, renewed);
        let (lost_tx, lost) = watch::channel(false);
        let renewer = tokio::spawn(self.clone().renew_loop(renewed, epoch, lost_tx));
        Leadership {
            election: self.clone(),
            lost,
            renewer: AbortOnDrop(renewer),
        }
    }

    /// Renews every `retry` until a renewal finds another holder or none has succeeded for
    /// `renew_deadline` (timed from when the last successful write was sent, the conservative
    /// end), then reports the loss.
    async fn renew_loop(self, mut renewed: Instant, epoch: Epoch, lost: watch::Sender<bool>) {
        let mut tick = tokio::time::interval_at(renewed + self.retry, self.retry);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let started = Instant::now();
            let budget = self
                .renew_deadline
                .saturating_sub(started.duration_since(renewed));
            match tokio::time::timeout(budget, self.renew()).await {
                Ok(Ok(None)) => {
                    renewed = started;
                    self.grant(&epoch, renewed);
                    continue;
                }
                Ok(Ok(Some(holder))) => {
                    info!(lease = %self.name, %holder, "lost the leader lease: another candidate holds it");
                    break;
                }
                Ok(Err(err)) => {
                    warn!(lease = %self.name, error = %err, "failed to renew the leader lease");
                }
                Err(_) => warn!(lease = %self.name, "renewing the leader lease timed out"),
            }
            if renewed.elapsed() >= self.renew_deadline {
                info!(
                    lease = %self.name,
                    deadline = ?self.renew_deadline,
                    "lost the leader lease: not renewed within the renew deadline"
                );
                break;
            }
        }
        self.revoke();
        lost.send_replace(true);
    }
}

/// Holding the Lease. Dropping it stops renewing without releasing (the Lease then expires);
/// [`Leadership::release`] hands it over at once.
pub struct Leadership {
    election: LeaderElection,
    lost: watch::Receiver<bool>,
    renewer: AbortOnDrop,
}

impl Leadership {
    /// Resolves when leadership is lost: renewals failed for longer than the renew deadline,
    /// or someone else holds the Lease. Cancel-safe, and resolves at once once lost.
    pub async fn lost(&mut self) {
        // An error means the renewal task is gone (it panicked): nobody renews, so lost too.
        let _ = self.lost.wait_for(|lost| *lost).await;
    }

    /// Stops renewing and gives the Lease up (clears `holderIdentity`) so a standby can take
    /// over at once; used on graceful shutdown. Retries failed writes for up to the renew
    /// deadline, then leaves the Lease to expire.
    pub async fn release(self) {
        let Self {
            election,
            mut renewer,
            ..
        } = self;
        renewer.0.abort();
        election.revoke();
        // Wait for an in-flight renewal to be dropped; a write it already sent is harmless, as
        // the release below re-reads the Lease and replaces by resourceVersion.
        let _ = (&mut renewer.0).await;
        let deadline = Instant::now() + election.renew_deadline;
        loop {
            let budget = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(budget, election.give_up()).await {
                Ok(Ok(None)) => {
                    info!(lease = %election.name, identity = %election.identity, "released the leader lease");
                    return;
                }
                Ok(Ok(Some(holder))) => {
                    info!(lease = %election.name, %holder, "the leader lease was already held elsewhere; nothing to release");
                    return;
                }
                Ok(Err(err)) => {
                    warn!(lease = %election.name, error = %err, "failed to release the leader lease");
                }
                Err(_) => warn!(lease = %election.name, "releasing the leader lease timed out"),
            }
            if Instant::now() + election.retry >= deadline {
                warn!(lease = %election.name, "gave up releasing the leader lease; it will expire");
                return;
            }
            tokio::time::sleep(election.retry).await;
        }
    }
}

/// The renewal task, stopped when its [`Leadership`] is dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

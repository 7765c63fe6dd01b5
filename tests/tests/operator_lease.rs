//! Leader election (`kraken_bridge::operator::leader`) against a real kube-apiserver + etcd
//! (`scripts/testenv.sh up`): one leader at a time on a shared Lease, a released Lease is taken
//! over at once, an abandoned one once it expires, a leader notices when another identity has
//! written itself into the Lease, and one cut off from a frozen API server steps down before its
//! Lease could expire for anyone else and wins the Lease back once the server answers again.
//!
//! The assertions are orderings of what the Lease recorded, not stopwatch readings: a watch
//! keeps every version of the Lease (holder, acquire and renew times, all written from this
//! machine's clock), and each property is a comparison of those times. Timeouts are hang
//! guards only.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kraken_bridge::operator::leader::{LeaderElection, Leadership};
use kraken_tests::ControlPlane;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::task::JoinHandle;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

const NAMESPACE: &str = "lease-test";
const LEASE: &str = "kraken-operator";

/// Short timing so the test takes seconds. The renew deadline is half the lease, so a leader
/// that cannot renew steps down with seconds to spare before anyone may take over.
const LEASE_DURATION: Duration = Duration::from_secs(4);
const RENEW_DEADLINE: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(500);

/// How long any single step may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(30);

fn candidate(client: &kube::Client, identity: &str) -> LeaderElection {
    LeaderElection::new(client.clone(), NAMESPACE, LEASE, identity.to_owned()).with_timing(
        LEASE_DURATION,
        RENEW_DEADLINE,
        RETRY,
    )
}

/// One version of the Lease as the watch delivered it.
#[derive(Debug, Clone)]
struct Version {
    holder: Option<String>,
    acquired: Option<Timestamp>,
    renewed: Option<Timestamp>,
    duration: Option<i32>,
}

impl Version {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Self {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            acquired: spec.acquire_time.map(|t| t.0),
            renewed: spec.renew_time.map(|t| t.0),
            duration: spec.lease_duration_seconds,
        }
    }

    fn held_by(&self, who: &str) -> bool {
        self.holder.as_deref() == Some(who)
    }

    fn renewed(&self) -> anyhow::Result<Timestamp> {
        self.renewed
            .with_context(|| format!("a Lease version without renewTime: {self:?}"))
    }

    fn acquired(&self) -> anyhow::Result<Timestamp> {
        self.acquired
            .with_context(|| format!("a Lease version without acquireTime: {self:?}"))
    }

    /// When this version's holder loses its claim: renewTime + leaseDurationSeconds.
    fn expires(&self) -> anyhow::Result<Timestamp> {
        let secs = self.duration.context("no leaseDurationSeconds")?;
        Ok(self
            .renewed()?
            .checked_add(SignedDuration::from_secs(i64::from(secs)))?)
    }
}

/// Every version of the Lease since the watch started, in the order they were written.
#[derive(Clone, Default)]
struct History(Arc<Mutex<Vec<Version>>>);

impl History {
    /// Watch the Lease from the current resourceVersion of the namespace's Leases, so that no
    /// version is missed; reconnects from the last version seen if the server ends the watch.
    async fn start(leases: Api<Lease>) -> anyhow::Result<(Self, tokio::task::JoinHandle<()>)> {
        let history = Self::default();
        let mut version = leases
            .list(&ListParams::default())
            .await?
            .metadata
            .resource_version
            .context("a list without resourceVersion")?;
        let recorder = history.clone();
        let task = tokio::spawn(async move {
            let params = WatchParams::default()
                .fields(&format!("metadata.name={LEASE}"))
                .timeout(290);
            loop {
                let Ok(stream) = leases.watch(&params, &version).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let mut stream = stream.boxed();
                while let Some(Ok(event)) = stream.next().await {
                    match event {
                        WatchEvent::Added(lease) | WatchEvent::Modified(lease) => {
                            if let Some(rv) = lease.metadata.resource_version.clone() {
                                version = rv;
                            }
                            if let Ok(mut h) = recorder.0.lock() {
                                h.push(Version::of(&lease));
                            }
                        }
                        WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                        WatchEvent::Deleted(_) | WatchEvent::Error(_) => {}
                    }
                }
            }
        });
        Ok((history, task))
    }

    fn versions(&self) -> Vec<Version> {
        self.0.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// Wait until `check` finds what it looks for in the history (hang guard: [`HANG`]).
    async fn wait_for<T>(
        &self,
        what: &str,
        check: impl Fn(&[Version]) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = tokio::time::Instant::now() + HANG;
        loop {
            let versions = self.versions();
            if let Some(found) = check(&versions) {
                return Ok(found);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("the Lease history never showed {what}: {versions:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The first version at or after index `from` held by `who`, with its index.
    fn first_held_by(versions: &[Version], from: usize, who: &str) -> Option<(usize, Version)> {
        versions
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, v)| v.held_by(who))
            .map(|(i, v)| (i, v.clone()))
    }

    /// The last version before index `before` held by `who`.
    fn last_held_by(versions: &[Version], before: usize, who: &str) -> Option<Version> {
        versions[..before.min(versions.len())]
            .iter()
            .rev()
            .find(|v| v.held_by(who))
            .cloned()
    }
}

/// Log lines of the code under test, to wait for what it reports doing.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<String>>>);

impl Logs {
    fn count(&self, needle: &str) -> usize {
        self.0
            .lock()
            .map(|l| l.iter().filter(|m| m.contains(needle)).count())
            .unwrap_or(0)
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Logs {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        if let Ok(mut lines) = self.0.lock() {
            lines.push(message.0);
        }
    }
}

async fn holder(leases: &Api<Lease>) -> anyhow::Result<(Option<String>, Option<i32>)> {
    let spec = leases.get(LEASE).await?.spec.unwrap_or_default();
    Ok((spec.holder_identity, spec.lease_transitions))
}

#[test]
fn lease_has_one_holder_and_passes_on_release_and_expiry() -> anyhow::Result<()> {
    let logs = Logs::default();
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::EnvFilter::new("kraken=debug"))
        .with(tracing_subscriber::fmt::layer().with_test_writer())
        .with(logs.clone())
        .try_init();
    let cp = ControlPlane::start("operator-lease")?;
    cp.kubectl(&["create", "namespace", NAMESPACE])?;
    tokio::runtime::Runtime::new()?.block_on(elect(&cp, &logs))
}

async fn elect(cp: &ControlPlane, logs: &Logs) -> anyhow::Result<()> {
    let kubeconfig = Kubeconfig::read_from(&cp.kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("failed to load the control plane's kubeconfig")?;
    let client = kube::Client::try_from(config)?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let (history, watch) = History::start(leases.clone()).await?;
    let bed = Bed {
        client: &client,
        leases: &leases,
        history: &history,
        cp,
        logs,
    };
    let result = scenario(&bed).await;
    watch.abort();
    result
}

/// What every step of the scenario works on: the candidates' client, the Lease, its history,
/// the control plane (to freeze its API server) and the operator's log lines.
struct Bed<'a> {
    client: &'a kube::Client,
    leases: &'a Api<Lease>,
    history: &'a History,
    cp: &'a ControlPlane,
    logs: &'a Logs,
}

/// The Lease passes from a to b on release, to c on expiry, to d after an intruder, and back
/// to d after the API server froze: each step hands its leaders to the next.
async fn scenario(bed: &Bed<'_>) -> anyhow::Result<()> {
    let (first, second) = bed.one_holder_while_it_renews().await?;
    let second = bed.a_release_passes_at_once(first, second).await?;
    let (third, c_at) = bed.an_abandoned_lease_passes_on_expiry(second).await?;
    let (d, fourth) = bed.an_intruder_is_not_written_over(third, c_at).await?;
    bed.a_leader_cut_off_steps_down_in_time(d, fourth).await
}

impl Bed<'_> {
    /// a holds the Lease and keeps renewing; b campaigns meanwhile and never gets it.
    async fn one_holder_while_it_renews(
        &self,
    ) -> anyhow::Result<(Leadership, JoinHandle<Leadership>)> {
        // The first candidate creates the Lease and holds it.
        let mut first = tokio::time::timeout(HANG, candidate(self.client, "a").acquire())
            .await
            .context("the first candidate must acquire the missing lease")?;
        ensure!(holder(self.leases).await? == (Some("a".into()), Some(0)));

        // The second campaigns; a keeps renewing for longer than a whole lease duration past the
        // moment b started, and b never gets it.
        let b_started = Timestamp::now();
        let second = tokio::spawn({
            let b = candidate(self.client, "b");
            async move { b.acquire().await }
        });
        let full_lease_later = b_started.checked_add(SignedDuration::try_from(LEASE_DURATION)?)?;
        self.history
            .wait_for(
                "a renewing a full lease duration after b began campaigning",
                |vs| {
                    vs.iter()
                        .any(|v| v.held_by("a") && v.renewed.is_some_and(|r| r > full_lease_later))
                        .then_some(())
                },
            )
            .await?;
        ensure!(!second.is_finished(), "b must not lead while a renews");
        let versions = self.history.versions();
        ensure!(
            versions.iter().all(|v| v.held_by("a")),
            "nobody but a may hold the lease while a renews: {versions:#?}"
        );
        ensure!(
            tokio::time::timeout(Duration::from_millis(10), first.lost())
                .await
                .is_err(),
            "a must still lead"
        );

        Ok((first, second))
    }

    /// a releases: b takes the Lease at once.
    async fn a_release_passes_at_once(
        &self,
        first: Leadership,
        second: JoinHandle<Leadership>,
    ) -> anyhow::Result<Leadership> {
        // Released, the Lease is free at once: b takes it over before a's lease could have
        // expired, i.e. because of the release and not by waiting for the expiry.
        let released_from = self.history.versions().len();
        first.release().await;
        let second = tokio::time::timeout(HANG, second)
            .await
            .context("b must acquire the released lease")??;
        ensure!(holder(self.leases).await? == (Some("b".into()), Some(1)));
        let versions = self
            .history
            .wait_for("b holding the lease", |vs| {
                History::first_held_by(vs, released_from, "b").map(|_| vs.to_vec())
            })
            .await?;
        let (b_at, b_first) =
            History::first_held_by(&versions, released_from, "b").context("b's first version")?;
        let a_last = History::last_held_by(&versions, b_at, "a").context("a's last version")?;
        let release = versions[..b_at]
            .iter()
            .rev()
            .find(|v| v.holder.is_none())
            .with_context(|| format!("no released version before b's: {versions:#?}"))?;
        ensure!(
            release.renewed()? >= a_last.renewed()?,
            "a's last renewal must come before its release: {versions:#?}"
        );
        ensure!(
            b_first.acquired()? < a_last.expires()?,
            "b must take a released lease without waiting for it to expire: a renewed at {}, its \
             lease ran to {}, b acquired at {}",
            a_last.renewed()?,
            a_last.expires()?,
            b_first.acquired()?
        );

        Ok(second)
    }

    /// b stops renewing without releasing: c takes over once the Lease expired. Returns c's
    /// leadership and the index of its first version in the history.
    async fn an_abandoned_lease_passes_on_expiry(
        &self,
        second: Leadership,
    ) -> anyhow::Result<(Leadership, usize)> {
        // b stops renewing without releasing: c waits for the Lease to expire, then takes over.
        let abandoned_from = self.history.versions().len();
        drop(second);
        let third = tokio::time::timeout(HANG, candidate(self.client, "c").acquire())
            .await
            .context("c must take over the abandoned lease once it expires")?;
        ensure!(holder(self.leases).await? == (Some("c".into()), Some(2)));
        let versions = self
            .history
            .wait_for("c holding the lease", |vs| {
                History::first_held_by(vs, abandoned_from, "c").map(|_| vs.to_vec())
            })
            .await?;
        let (c_at, c_first) =
            History::first_held_by(&versions, abandoned_from, "c").context("c's first version")?;
        let b_last = History::last_held_by(&versions, c_at, "b").context("b's last version")?;
        ensure!(
            c_first.acquired()? >= claim_deadline(&b_last)?,
            "c must wait for b's lease to expire: b last renewed at {}, its lease ran to {}, c \
             acquired at {}",
            b_last.renewed()?,
            b_last.expires()?,
            c_first.acquired()?
        );

        Ok((third, c_at))
    }

    /// Someone else writes itself into the Lease: c steps down, d takes over on expiry.
    async fn an_intruder_is_not_written_over(
        &self,
        mut third: Leadership,
        c_at: usize,
    ) -> anyhow::Result<(LeaderElection, Leadership)> {
        // Someone else writes itself into the Lease: c's next renewal sees it and c steps down
        // without writing over it. c renews every 0.5 s, so the write may conflict with a
        // renewal: re-read and retry.
        let mut attempts = 0;
        loop {
            let mut lease = self.leases.get(LEASE).await?;
            if let Some(spec) = lease.spec.as_mut() {
                spec.holder_identity = Some("intruder".into());
                spec.renew_time = Some(MicroTime(Timestamp::now()));
            }
            match self
                .leases
                .replace(LEASE, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => break,
                Err(kube::Error::Api(status)) if status.is_conflict() && attempts < 10 => {
                    attempts += 1;
                }
                Err(err) => return Err(err.into()),
            }
        }
        tokio::time::timeout(HANG, third.lost())
            .await
            .context("c must notice that another identity holds the lease")?;
        ensure!(holder(self.leases).await?.0.as_deref() == Some("intruder"));

        // The intruder never renews; d takes over once its Lease expires.
        let d = candidate(self.client, "d");
        let fourth = tokio::time::timeout(HANG, d.acquire())
            .await
            .context("d must take over the intruder's expired lease")?;
        let versions = self
            .history
            .wait_for("d holding the lease", |vs| {
                History::first_held_by(vs, c_at, "d").map(|_| vs.to_vec())
            })
            .await?;
        let (d_at, d_first) =
            History::first_held_by(&versions, c_at, "d").context("d's first version")?;
        let intruder =
            History::last_held_by(&versions, d_at, "intruder").context("the intruder's version")?;
        let intruder_at = History::first_held_by(&versions, c_at, "intruder")
            .context("the intruder's version")?
            .0;
        ensure!(
            versions[intruder_at..d_at]
                .iter()
                .all(|v| v.held_by("intruder")),
            "c must step down, not write over the intruder: {versions:#?}"
        );
        ensure!(
            d_first.acquired()? >= claim_deadline(&intruder)?,
            "d must wait for the intruder's lease to expire: it ran to {}, d acquired at {}",
            intruder.expires()?,
            d_first.acquired()?
        );

        Ok((d, fourth))
    }

    /// The API server freezes: d steps down before its Lease could expire for anyone else, and
    /// leads again once the server answers.
    async fn a_leader_cut_off_steps_down_in_time(
        &self,
        d: LeaderElection,
        mut fourth: Leadership,
    ) -> anyhow::Result<()> {
        // The API server freezes (SIGSTOP: connections hang, as behind a partition). d cannot
        // renew, so it must step down before its lease could expire for anyone else: before its
        // last successful renewal + the lease duration.
        let frozen_at = Timestamp::now();
        let frozen = Frozen::stop(self.cp.apiserver_pid()?)?;
        tokio::time::timeout(HANG, fourth.lost())
            .await
            .context("d must step down when it cannot renew")?;
        let stepped_down = Timestamp::now();

        // Campaigning against the frozen server only logs and retries: d makes a whole attempt
        // (it times out after the renew deadline) without acquiring anything.
        let timed_out = "campaigning for the leader lease timed out";
        let attempts_before = self.logs.count(timed_out);
        let again = tokio::spawn(async move { d.acquire().await });
        let deadline = tokio::time::Instant::now() + HANG;
        while self.logs.count(timed_out) == attempts_before {
            ensure!(
                tokio::time::Instant::now() < deadline,
                "d's campaign against the frozen server never timed out"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ensure!(
            !again.is_finished(),
            "nobody can acquire from a frozen server"
        );
        let thawed_at = Timestamp::now();
        drop(frozen);
        tokio::time::timeout(HANG, again)
            .await
            .context("d must lead again once the API server answers")??;
        ensure!(holder(self.leases).await?.0.as_deref() == Some("d"));

        // Now that the server answers, the history holds what it stored before the freeze.
        let versions = self
            .history
            .wait_for("d's renewal after the thaw", |vs| {
                vs.iter()
                    .any(|v| v.held_by("d") && v.renewed.is_some_and(|r| r >= thawed_at))
                    .then(|| vs.to_vec())
            })
            .await?;
        let d_last = versions
            .iter()
            .rev()
            .find(|v| v.held_by("d") && v.renewed.is_some_and(|r| r <= frozen_at))
            .context("d's last renewal before the freeze")?;
        ensure!(
            stepped_down < d_last.expires()?,
            "d must step down before its lease expires for others: last renewed at {}, lease ran \
             to {}, stepped down at {stepped_down}",
            d_last.renewed()?,
            d_last.expires()?
        );
        Ok(())
    }
}

/// The earliest acquireTime a candidate may write when it takes over `held` once expired.
/// A candidate stamps its claim with the time it *began* the attempt, before reading the
/// Lease, and may also decide by having seen the record unchanged for a lease duration on its
/// own clock (client-go's rule), so its stamp can precede `held`'s expiry by up to one
/// attempt's read: one retry period of slack, far below the lease duration a premature
/// takeover would miss it by.
fn claim_deadline(held: &Version) -> anyhow::Result<Timestamp> {
    Ok(held
        .expires()?
        .checked_sub(SignedDuration::try_from(RETRY)?)?)
}

/// A process stopped with SIGSTOP, continued on drop (also when the test fails, so the control
/// plane can be shut down).
struct Frozen(u32);

impl Frozen {
    fn stop(pid: u32) -> anyhow::Result<Self> {
        signal("-STOP", pid)?;
        Ok(Self(pid))
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Err(err) = signal("-CONT", self.0) {
            eprintln!("failed to continue process {}: {err:#}", self.0);
        }
    }
}

fn signal(sig: &str, pid: u32) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()?;
    ensure!(status.success(), "kill {sig} {pid} failed: {status}");
    Ok(())
}

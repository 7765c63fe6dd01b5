//! The Kraken side: a fresh control plane per measurement, `kraken operator` (release build,
//! no leader election, so every API write it counts is a reconcile's), N objects applied with
//! `kubectl apply --server-side` in batches, and a [`Watch`] that sees them become Ready.
//!
//! API writes and reconciles come from the operator's `/metrics`, as deltas between
//! snapshots taken when the writes have stopped ([`settle`]): Events may be written after the
//! status that makes an object Ready.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kraken_tests::ControlPlane;
use kraken_tests::bench::fair::{ANY_PROVIDER, providers_below};
use kraken_tests::bench::{Seen, apiserver_requests};
use kraken_tests::operator::{Operator, metric_samples};
use serde_json::{Value, json};

pub use crate::bed::{Bed, Memory, check_alive};
use crate::watch::Watch;
use crate::{Config, Key, Prov};

/// Requests the API server counted, per (verb, resource).
pub type Requests = BTreeMap<(String, String), f64>;

/// `after - before`, per key; keys that did not move are left out.
pub fn requests_since(after: &Requests, before: &Requests) -> Requests {
    let mut out = after.clone();
    for (k, v) in before {
        *out.entry(k.clone()).or_insert(0.0) -= v;
    }
    out.retain(|_, v| *v != 0.0);
    out
}

/// The namespace of every bench object.
pub const NS: &str = "bench";

/// The operator's counters at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `kraken_api_writes_total` per (resource, verb), Lease renewals left out.
    pub writes: BTreeMap<(String, String), f64>,
    pub reconciles: f64,
    pub managed: f64,
}

impl Snapshot {
    pub fn read(op: &Operator) -> anyhow::Result<Self> {
        Ok(Self::parse(&op.metrics()?))
    }

    /// From the text of `/metrics`.
    pub fn parse(text: &str) -> Self {
        let mut writes = BTreeMap::new();
        for (labels, v) in metric_samples(text, "kraken_api_writes_total") {
            let label = |k: &str| kraken_tests::operator::label(&labels, k).to_string();
            let key = (label("resource"), label("verb"));
            if key.0 != "leases" {
                *writes.entry(key).or_insert(0.0) += v;
            }
        }
        let sum = |name| -> f64 { metric_samples(text, name).iter().map(|(_, v)| v).sum() };
        // Every controller counts its reconciles; the managed resources' are the ones per
        // resource (the ProviderConfig's, the hub's requests' are not).
        let reconciles = metric_samples(text, "kraken_reconcile_runs_total")
            .iter()
            .filter(|(labels, _)| {
                let kind = kraken_tests::operator::label(labels, "kind");
                !kind.ends_with(".core.kraken.dev") && !kind.ends_with(".aws.kraken.dev")
            })
            .map(|(_, v)| v)
            .sum();
        Self {
            writes,
            reconciles,
            managed: sum("kraken_managed_resources"),
        }
    }

    /// `self - before`, counter by counter (the gauge `managed` is taken from `self`).
    pub fn since(&self, before: &Self) -> Self {
        let mut writes = self.writes.clone();
        for (k, v) in &before.writes {
            *writes.entry(k.clone()).or_insert(0.0) -= v;
        }
        writes.retain(|_, v| *v != 0.0);
        Self {
            writes,
            reconciles: self.reconciles - before.reconciles,
            managed: self.managed,
        }
    }

    /// Every write, Events included.
    pub fn total(&self) -> f64 {
        self.writes.values().sum()
    }

    /// Writes of Events (`events`, core or events.k8s.io).
    pub fn events(&self) -> f64 {
        self.writes
            .iter()
            .filter(|((r, _), _)| r == "events")
            .map(|(_, v)| v)
            .sum()
    }

    /// `resource verb x.xx` per written (resource, verb), divided by `per`.
    pub fn breakdown(&self, per: f64) -> String {
        self.writes
            .iter()
            .map(|((r, verb), v)| format!("{r} {verb} {:.2}", v / per))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Wait until the operator's API writes have not moved for `quiet`, at most `max`; the
/// snapshot then. Reconciles are not part of the test: drift checks may go on.
pub fn settle(op: &Operator, quiet: Duration, max: Duration) -> anyhow::Result<Snapshot> {
    let start = Instant::now();
    let mut last = Snapshot::read(op)?;
    let mut since = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(250));
        let now = Snapshot::read(op)?;
        if now.writes != last.writes {
            since = Instant::now();
        }
        last = now;
        if since.elapsed() >= quiet {
            return Ok(last);
        }
        if start.elapsed() >= max {
            eprintln!(
                "  warning: the operator was still writing after {max:?}; counting what it wrote so far"
            );
            return Ok(last);
        }
    }
}

/// One create-until-Ready run.
#[derive(Debug, Clone)]
pub struct CreateRun {
    /// First `kubectl apply` started → all N reconciled.
    pub total: Duration,
    /// First `kubectl apply` started → the last one returned.
    pub apply: Duration,
    pub idle: Memory,
    pub loaded: Memory,
    /// API writes and reconciles of the create, settled.
    pub delta: Snapshot,
    /// What the API server itself counted over the same span, every client included.
    pub apiserver: Requests,
    /// The provider processes the operator ran.
    pub seen: Vec<Seen>,
}

/// Apply `n` manifests from `manifest(i)` with `cfg.kubectl_parallel` concurrent `kubectl
/// apply --server-side` processes of `cfg.batch` documents; `applied` counts what is done. A
/// set `abort` stops the remaining batches.
pub fn apply_all(
    cp: &ControlPlane,
    cfg: &Config,
    n: usize,
    manifest: &(dyn Fn(usize) -> Value + Sync),
    applied: &AtomicUsize,
    abort: &AtomicBool,
) -> anyhow::Result<()> {
    let next = AtomicUsize::new(0);
    let error = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..cfg.kubectl_parallel.max(1) {
            s.spawn(|| {
                while !abort.load(Ordering::Relaxed) {
                    let b = next.fetch_add(1, Ordering::Relaxed);
                    let range = b * cfg.batch..((b + 1) * cfg.batch).min(n);
                    if range.is_empty() {
                        return;
                    }
                    let docs: Vec<Value> = range.clone().map(manifest).collect();
                    if let Err(e) = apply_docs(cp, &docs) {
                        abort.store(true, Ordering::Relaxed);
                        *error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                        return;
                    }
                    applied.fetch_add(range.len(), Ordering::Relaxed);
                }
            });
        }
    });
    match error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The N create manifests of `prov` through [`apply_all`], all at once.
pub fn apply_n(cp: &ControlPlane, cfg: &Config, prov: Prov, n: usize) -> anyhow::Result<()> {
    let (applied, abort) = (AtomicUsize::new(0), AtomicBool::new(false));
    apply_all(
        cp,
        cfg,
        n,
        &|i| prov.manifest(NS, i, 0, None),
        &applied,
        &abort,
    )
}

/// One `kubectl apply --server-side -f -` of these documents.
pub fn apply_docs(cp: &ControlPlane, docs: &[Value]) -> anyhow::Result<()> {
    let yaml = kraken_tests::operator::yaml_documents(docs);
    let out = cp.kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager=kraken-bench",
            "-n",
            NS,
            "-f",
            "-",
        ],
        yaml.as_bytes(),
    )?;
    ensure!(
        out.status.success(),
        "kubectl apply of {} documents failed: {}",
        docs.len(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Apply N objects and wait until all are reconciled; memory and writes around it.
pub fn create_run(
    bed: &mut Bed,
    cfg: &Config,
    prov: Prov,
    n: usize,
    what: &str,
) -> anyhow::Result<CreateRun> {
    let pid = bed.op()?.pid().context("the operator is not running")?;
    std::thread::sleep(Duration::from_secs(3)); // idle: start-up allocations done
    let idle = Memory::sample(pid)?;
    let before = Snapshot::read(bed.op()?)?;
    let requests_before = apiserver_requests(&bed.cp)?;

    let applied = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);
    let started = Instant::now();
    let mut apply_took = None;
    let timeout = cfg.timeout(n);
    let result = std::thread::scope(|s| -> anyhow::Result<Duration> {
        let cp = &bed.cp;
        let op = bed.op.as_mut().context("this bed has no operator")?;
        let (applied, abort) = (&applied, &abort);
        let applier = s.spawn(move || {
            let r = apply_all(
                cp,
                cfg,
                n,
                &|i| prov.manifest(NS, i, 0, None),
                applied,
                abort,
            );
            (r, started.elapsed())
        });
        let progress = Progress {
            what,
            n,
            started,
            timeout,
            applied,
        };
        let waited = wait_all(&bed.watch, op, &progress, &applier);
        abort.store(true, Ordering::Relaxed);
        let (r, took) = applier
            .join()
            .map_err(|_| anyhow::anyhow!("the apply thread panicked"))?;
        r?;
        apply_took = Some(took);
        waited
    });
    let total = result?;
    let loaded_writes = settle(bed.op()?, Duration::from_secs(2), Duration::from_secs(60))?;
    let loaded = Memory::sample(pid)?;
    let seen = providers_below(pid, ANY_PROVIDER);
    let requests = requests_since(&apiserver_requests(&bed.cp)?, &requests_before);
    bed.check_ledger(n)?;
    Ok(CreateRun {
        total,
        apply: apply_took.unwrap_or_default(),
        idle,
        loaded,
        delta: loaded_writes.since(&before),
        apiserver: requests,
        seen,
    })
}

/// What [`wait_all`] waits for and reports.
struct Progress<'a> {
    what: &'a str,
    n: usize,
    started: Instant,
    timeout: Duration,
    applied: &'a AtomicUsize,
}

/// Wait for `n` reconciled objects, with progress on stderr; the time since `started` at
/// which the last one was seen reconciled.
fn wait_all(
    watch: &Watch,
    op: &mut Operator,
    p: &Progress<'_>,
    applier: &std::thread::ScopedJoinHandle<'_, (anyhow::Result<()>, Duration)>,
) -> anyhow::Result<Duration> {
    let Progress {
        what,
        n,
        started,
        timeout,
        applied,
    } = *p;
    let mut last_progress = Instant::now();
    let (mut last_count, mut last_change) = (0, Instant::now());
    loop {
        let (reconciled, line) = {
            let s = watch.summary();
            if s.reconciled() >= n {
                let last = (0..n)
                    .filter_map(|i| s.get(&format!("bench-{i}"))?.reconciled_at)
                    .max()
                    .context("no reconcile time recorded")?;
                return Ok(last - started);
            }
            let line = format!(
                "  [{what}] {:.0}s: applied {}/{n}, seen {}, reconciled {}, failing {}{}",
                started.elapsed().as_secs_f64(),
                applied.load(Ordering::Relaxed),
                s.seen(),
                s.reconciled(),
                s.failing(),
                s.last_failure
                    .as_ref()
                    .filter(|_| s.failing() > 0)
                    .map(|f| format!(" (e.g. {f})"))
                    .unwrap_or_default()
            );
            (s.reconciled(), line)
        };
        if applier.is_finished() && applied.load(Ordering::Relaxed) < n {
            bail!("applying the manifests failed (see the apply error)");
        }
        if reconciled != last_count {
            (last_count, last_change) = (reconciled, Instant::now());
        }
        if last_progress.elapsed() >= Duration::from_secs(5) {
            last_progress = Instant::now();
            eprintln!("{line}");
            check_alive(op)?;
        }
        if started.elapsed() >= timeout {
            bail!("timed out after {timeout:?}:\n{line}");
        }
        if last_change.elapsed() >= Duration::from_secs(120) {
            bail!("no progress for 120 s:\n{line}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One-change latencies with N objects in place.
#[derive(Debug, Clone)]
pub struct ChangeRun {
    /// `kubectl apply` started → the changed object reconciled at its new generation.
    pub latencies: Vec<Duration>,
    /// `kubectl apply` alone (process start to exit).
    pub kubectl: Vec<Duration>,
    pub delta: Snapshot,
}

/// Change `changes` different objects, one after the other, each to a new value (an in-place
/// update for the fixture, a replacement for a pet), timing each to Ready.
pub fn change_run(
    bed: &mut Bed,
    prov: Prov,
    n: usize,
    changes: usize,
) -> anyhow::Result<ChangeRun> {
    let before = settle(bed.op()?, Duration::from_secs(2), Duration::from_secs(60))?;
    let (mut latencies, mut kubectl) = (Vec::new(), Vec::new());
    for j in 1..=changes {
        let i = (j - 1) * n / changes.max(1);
        let name = format!("bench-{i}");
        let gen0 = bed
            .watch
            .summary()
            .get(&name)
            .with_context(|| format!("{name} was never seen"))?
            .generation;
        let started = Instant::now();
        apply_docs(&bed.cp, &[prov.manifest(NS, i, j, None)])?;
        kubectl.push(started.elapsed());
        let at = bed.watch.wait(
            Duration::from_secs(120),
            &format!("{name} to be reconciled after change {j}"),
            |s| {
                s.get(&name)
                    .filter(|o| o.generation > gen0)
                    .and_then(|o| o.reconciled_at)
            },
        )?;
        latencies.push(at - started);
        bed.check_alive()?;
        std::thread::sleep(Duration::from_millis(300)); // let its Events go out
    }
    let after = settle(bed.op()?, Duration::from_secs(2), Duration::from_secs(60))?;
    Ok(ChangeRun {
        latencies,
        kubectl,
        delta: after.since(&before),
    })
}

/// On the last round: `cfg.changes` one-change runs and, when asked for this build, as many
/// plans under `planPolicy: Manual`.
pub fn changes_and_plans(
    bed: &mut Bed,
    cfg: &Config,
    prov: Prov,
    n: usize,
    key: &Key,
    what: &str,
) -> anyhow::Result<(ChangeRun, Option<PlanRun>)> {
    let c = change_run(bed, prov, n, cfg.changes)?;
    eprintln!("{what}: changes → Ready {:?}", c.latencies);
    let planned = cfg.plan_builds.is_empty() || cfg.plan_builds.contains(&key.build);
    if !(cfg.plans && planned) {
        return Ok((c, None));
    }
    let p = plan_run(bed, prov, n, cfg.changes)?;
    eprintln!(
        "{what}: plans visible {:?}, approved → applied {:?}",
        p.visible, p.approved
    );
    Ok((c, Some(p)))
}

/// Plan latencies with N objects in place: a change under `planPolicy: Manual` until its plan
/// is visible, then its approval until it is applied.
#[derive(Debug, Clone)]
pub struct PlanRun {
    /// `kubectl apply` started → `status.plan` seen at the new generation.
    pub visible: Vec<Duration>,
    /// `kubectl annotate` (the approval) started → the object reconciled.
    pub approved: Vec<Duration>,
    pub delta: Snapshot,
}

/// Change `changes` objects (others than [`change_run`] changes) under `planPolicy: Manual`,
/// one after the other: time each plan until visible, then approve it and time the apply.
pub fn plan_run(bed: &mut Bed, prov: Prov, n: usize, changes: usize) -> anyhow::Result<PlanRun> {
    let before = settle(bed.op()?, Duration::from_secs(2), Duration::from_secs(60))?;
    let (mut visible, mut approved) = (Vec::new(), Vec::new());
    for j in 1..=changes {
        let i = ((j - 1) * n / changes.max(1) + 1) % n.max(1);
        let name = format!("bench-{i}");
        let gen0 = bed
            .watch
            .summary()
            .get(&name)
            .with_context(|| format!("{name} was never seen"))?
            .generation;
        let mut manifest = prov.manifest(NS, i, 1000 + j, None);
        manifest["spec"]["planPolicy"] = json!("Manual");
        let started = Instant::now();
        apply_docs(&bed.cp, &[manifest])?;
        let at = bed.watch.wait(
            Duration::from_secs(120),
            &format!("the plan of {name} (change {j}) to be visible"),
            |s| {
                s.get(&name)
                    .filter(|o| o.generation > gen0)
                    .and_then(|o| o.planned_at)
            },
        )?;
        visible.push(at - started);
        let resource = format!("{}.{}", prov.kind().plural, prov.kind().group);
        let id = bed.cp.kubectl(&[
            "get",
            &resource,
            &name,
            "-n",
            NS,
            "-o",
            "jsonpath={.status.plan.id}",
        ])?;
        let started = Instant::now();
        bed.cp.kubectl(&[
            "annotate",
            &resource,
            &name,
            "-n",
            NS,
            "--overwrite",
            &format!("kraken.dev/approve-plan={}", id.trim()),
            "kraken.dev/approved-by=bench",
        ])?;
        let at = bed.watch.wait(
            Duration::from_secs(120),
            &format!("{name} to be applied after approval {j}"),
            |s| s.get(&name).and_then(|o| o.reconciled_at),
        )?;
        approved.push(at.saturating_duration_since(started));
        bed.check_alive()?;
        std::thread::sleep(Duration::from_millis(300));
    }
    let after = settle(bed.op()?, Duration::from_secs(2), Duration::from_secs(60))?;
    Ok(PlanRun {
        visible,
        approved,
        delta: after.since(&before),
    })
}

/// No-op drift checks of `n` objects with a short `driftInterval`, over `window`.
#[derive(Debug, Clone)]
pub struct DriftRun {
    pub n: usize,
    pub interval: String,
    pub window: Duration,
    pub delta: Snapshot,
}

pub fn drift_run(bed: &mut Bed, cfg: &Config, prov: Prov) -> anyhow::Result<DriftRun> {
    let n = cfg.drift_n;
    let interval = format!("{}s", cfg.drift_interval_s);
    let (applied, abort) = (AtomicUsize::new(0), AtomicBool::new(false));
    let started = Instant::now();
    apply_all(
        &bed.cp,
        cfg,
        n,
        &|i| prov.manifest(NS, i, 0, Some(&interval)),
        &applied,
        &abort,
    )?;
    bed.watch
        .wait(cfg.timeout(n), &format!("{n} objects reconciled"), |s| {
            (s.reconciled() >= n).then_some(())
        })?;
    eprintln!(
        "  [drift {}] {n} reconciled in {:.1}s",
        prov.name(),
        started.elapsed().as_secs_f64()
    );
    let before = settle(bed.op()?, Duration::from_secs(3), Duration::from_secs(60))?;
    let window = Duration::from_secs(cfg.drift_window_s);
    std::thread::sleep(window);
    bed.check_alive()?;
    let after = Snapshot::read(bed.op()?)?;
    Ok(DriftRun {
        n,
        interval,
        window,
        delta: after.since(&before),
    })
}

//! Two runs that separate Kraken's throughput from its load generator's:
//! - the *ceiling*: the same manifests through the same batched `kubectl apply --server-side`
//!   with no operator running, until the watch has seen every object. No create run can beat
//!   it on this machine: it is what the API server admits with kubectl in front.
//! - the *backlog*: the N objects are created first, then the operator starts; the clock runs
//!   from the operator's spawn to the last object Ready. No kubectl competes for the cores, so
//!   this is Kraken's own reconcile throughput (start-up and the first list included).

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kraken_tests::bench::fair::{ANY_PROVIDER, providers_below};
use kraken_tests::bench::{OperatorBuild, Seen, apiserver_requests};

use crate::kraken::{self, Bed, Memory, Requests, Snapshot, requests_since, settle};
use crate::{Config, Prov};

/// `kubectl apply` of N with no operator.
#[derive(Debug, Clone)]
pub struct CeilingRun {
    /// First `kubectl apply` started → the last one returned.
    pub apply: Duration,
    /// First `kubectl apply` started → the watch has seen all N.
    pub seen_all: Duration,
    /// The API server's count of the applies (and the watch).
    pub apiserver: Requests,
}

pub fn ceiling_run(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    prov: Prov,
    n: usize,
    label: &str,
) -> anyhow::Result<CeilingRun> {
    // No operator: the level only sets the ProviderConfig's maxConcurrency, which nothing reads.
    let bed = Bed::start(rt, cfg, prov, label, cfg.levels[0], None)?;
    let before = apiserver_requests(&bed.cp)?;
    let started = Instant::now();
    kraken::apply_n(&bed.cp, cfg, prov, n)?;
    let apply = started.elapsed();
    bed.watch
        .wait(cfg.timeout(n), "the watch to see every object", |s| {
            (s.seen() >= n).then_some(())
        })?;
    let seen_all = started.elapsed();
    Ok(CeilingRun {
        apply,
        seen_all,
        apiserver: requests_since(&apiserver_requests(&bed.cp)?, &before),
    })
}

/// N objects waiting, then the operator.
#[derive(Debug, Clone)]
pub struct BacklogRun {
    /// Operator spawned → the last of the N Ready.
    pub total: Duration,
    /// Operator spawned → its `/readyz` answered.
    pub ready: Duration,
    pub loaded: Memory,
    /// Everything the operator wrote (its counters start at zero).
    pub delta: Snapshot,
    /// The API server's count from the operator's spawn until its writes settled.
    pub apiserver: Requests,
    /// The provider processes the operator ran.
    pub seen: Vec<Seen>,
}

pub fn backlog_run(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    prov: Prov,
    n: usize,
    label: &str,
    (build, level): (&OperatorBuild, usize),
) -> anyhow::Result<BacklogRun> {
    let mut bed = Bed::start(rt, cfg, prov, label, level, None)?;
    kraken::apply_n(&bed.cp, cfg, prov, n)?;
    bed.watch
        .wait(cfg.timeout(n), "the watch to see every object", |s| {
            (s.seen() >= n).then_some(())
        })?;
    let before = apiserver_requests(&bed.cp)?;
    let started = Instant::now();
    bed.start_operator(cfg, build)?;
    let ready = started.elapsed();
    let result = (|| {
        let total = wait_reconciled(&mut bed, cfg, n, started, label)?;
        let op = bed.op()?;
        let delta = settle(op, Duration::from_secs(2), Duration::from_secs(60))?;
        let pid = op.pid().context("the operator is not running")?;
        let loaded = Memory::sample(pid)?;
        let seen = providers_below(pid, ANY_PROVIDER);
        bed.check_ledger(n)?;
        Ok(BacklogRun {
            total,
            ready,
            loaded,
            delta,
            apiserver: requests_since(&apiserver_requests(&bed.cp)?, &before),
            seen,
        })
    })();
    bed.finish(result)
}

/// Wait for N reconciled objects with progress on stderr; the time from `started` to the
/// last one.
fn wait_reconciled(
    bed: &mut Bed,
    cfg: &Config,
    n: usize,
    started: Instant,
    what: &str,
) -> anyhow::Result<Duration> {
    let mut last_progress = Instant::now();
    loop {
        let line = {
            let s = bed.watch.summary();
            if s.reconciled() >= n {
                let last = (0..n)
                    .filter_map(|i| s.get(&format!("bench-{i}"))?.reconciled_at)
                    .max()
                    .context("no reconcile time recorded")?;
                return Ok(last - started);
            }
            format!(
                "  [{what}] {:.0}s: reconciled {}/{n}, failing {}",
                started.elapsed().as_secs_f64(),
                s.reconciled(),
                s.failing()
            )
        };
        if last_progress.elapsed() >= Duration::from_secs(5) {
            last_progress = Instant::now();
            eprintln!("{line}");
            bed.check_alive()?;
        }
        if started.elapsed() >= cfg.timeout(n) {
            bail!("timed out after {:?}:\n{line}", cfg.timeout(n));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

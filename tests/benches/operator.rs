//! Operator benchmark: `cargo bench -p kraken-tests --bench operator`.
//!
//! Measures `kraken operator` (release build, `--no-leader-elect`) against a fresh control
//! plane per run, beside Terraform with the same provider binaries, and prints markdown tables
//! (copied into `docs/benchmarks.md`). Every comparison with Terraform is made at each
//! parallelism level P (`KRAKEN_BENCH_PARALLELISM`, default 10 and 32): the operator runs with
//! `--concurrency P` and its ProviderConfig with `maxConcurrency: P`, Terraform with
//! `-parallelism=P`, in the same run, interleaved; both sides' provider processes run the same
//! binary (hashed from what each side started) under the same `GOGC` (`KRAKEN_BENCH_GOGC`,
//! default Go's own on both sides), and the bench prints each Kraken / Terraform ratio.
//! 1. N fixture objects or `random_pet`s applied with `kubectl apply --server-side` until all
//!    are Ready, beside `terraform apply` creating the same N;
//! 2. the load generator's ceiling (`kubectl apply` of the same manifests, no operator) and a
//!    backlog run (the N created first, the operator started after: its own throughput);
//! 3. the operator's RSS idle and with N managed resources, with its provider processes;
//! 4. API writes per created resource from the operator's `kraken_api_writes_total`, and
//!    every client's requests by verb from the API server's `apiserver_request_total`;
//! 5. API writes of no-op drift checks (a small set with a short `driftInterval`);
//! 6. with N in place, one changed object from `kubectl apply` to Ready (p50 of several),
//!    beside Terraform applying one change among N, as a full `apply` (which refreshes all N)
//!    and as `apply -refresh=false -target=…`;
//! 7. with N in place, one change under `planPolicy: Manual` from `kubectl apply` to its plan
//!    visible in `status.plan`, and from the approval to the object applied (p50 of several).
//!
//! Several operator builds can be compared in one session (`KRAKEN_BENCH_OPERATORS`): every
//! Kraken measurement then runs once per build, interleaved.
//!
//! Sections (arguments): `drift`, `kraken`, `backlog`, `ceiling`, `terraform` (the default is
//! all five), and `plumbing`: the benchmark's own machinery against a real control plane
//! without an operator (manifests admitted by the CRDs, the batched applies, the watch and its
//! Ready test, the parsing of the operator's metrics, the RSS sampler).
//!
//! Knobs: `KRAKEN_BENCH_SIZES` (default `1000,10000`), `KRAKEN_BENCH_PROVIDERS` (default
//! `fixture,random`), `KRAKEN_BENCH_PARALLELISM` (default `10,32`), `KRAKEN_BENCH_GOGC`
//! (`default` or a percentage), `KRAKEN_BENCH_RUNS` (default 3 below 10,000 resources, else
//! 1), `KRAKEN_BENCH_CHANGES` (default 10), `KRAKEN_BENCH_PLANS` (1: section 7 runs; 0: not),
//! `KRAKEN_BENCH_PLAN_BUILDS` (the builds section 7 runs for, by label; default all),
//! `KRAKEN_BENCH_TF_CHANGE_RUNS` (per level; default 3 below 10,000, else 1),
//! `KRAKEN_BENCH_OPERATORS` (`label=path [operator args],...`, e.g. one build two ways:
//! `inProcess=PATH --runner-placement inProcess,local=PATH`; default this checkout's release
//! build),
//! `KRAKEN_BENCH_DRIFT_N` (100), `KRAKEN_BENCH_DRIFT_INTERVAL_S` (2),
//! `KRAKEN_BENCH_DRIFT_WINDOW_S` (10), `KRAKEN_BENCH_BATCH` (documents per kubectl call,
//! 500), `KRAKEN_BENCH_KUBECTL_PARALLEL` (2), `KRAKEN_BENCH_RUST_LOG` (the operator's,
//! `info`), `KRAKEN_BENCH_TIMEOUT_S` (per create run; default 120 s + 0.1 s per resource).
//! `KRAKEN_BENCH_SMOKE=1`: 4 objects, one run, one change, a drift check of 3 objects over
//! 3 s, both providers and both levels.

// A bench target's root resolves modules beside itself; the parts live in `operator/`.
#[path = "operator/backlog.rs"]
mod backlog;
#[path = "operator/bed.rs"]
mod bed;
#[path = "operator/cleanup.rs"]
mod cleanup;
#[path = "operator/config.rs"]
mod config;
#[path = "operator/kraken.rs"]
mod kraken;
#[path = "operator/plumbing.rs"]
mod plumbing;
#[path = "operator/report.rs"]
mod report;
#[path = "operator/tables.rs"]
mod tables;
#[path = "operator/terraform.rs"]
mod terraform;
#[path = "operator/watch.rs"]
mod watch;

use anyhow::ensure;
use kraken_tests::TestEnv;
use kraken_tests::bench::OperatorBuild;

pub use crate::config::{Config, Key, Measured, Prov, Results};
use crate::kraken::Bed;

/// Which sections run.
struct Sections {
    plumbing: bool,
    drift: bool,
    kraken: bool,
    backlog: bool,
    ceiling: bool,
    terraform: bool,
}

const SECTIONS: [&str; 6] = [
    "plumbing",
    "drift",
    "kraken",
    "backlog",
    "ceiling",
    "terraform",
];

impl Sections {
    /// From the arguments (`cargo bench` passes `--bench`; the others select sections).
    fn from_args() -> anyhow::Result<Self> {
        let filter: Vec<String> = std::env::args()
            .skip(1)
            .filter(|a| !a.starts_with("--"))
            .collect();
        for f in &filter {
            ensure!(
                SECTIONS.contains(&f.as_str()),
                "unknown section {f:?}: {}",
                SECTIONS.join(", ")
            );
        }
        let wants = |s: &str| {
            if filter.is_empty() {
                s != "plumbing"
            } else {
                filter.iter().any(|f| f == s)
            }
        };
        Ok(Self {
            plumbing: wants("plumbing"),
            drift: wants("drift"),
            kraken: wants("kraken"),
            backlog: wants("backlog"),
            ceiling: wants("ceiling"),
            terraform: wants("terraform"),
        })
    }
}

fn main() -> anyhow::Result<()> {
    kraken_tests::bench::knobs::start("operator")?;
    let sections = Sections::from_args()?;
    let mut cfg = Config::from_env()?;
    let env = TestEnv::load()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    cleanup::on_signal(&rt)?;
    if sections.kraken || sections.drift || sections.backlog {
        // Build the release `kraken` up front, not inside the first timed run.
        cfg.operators = kraken_tests::bench::operator_builds()?;
        for b in &cfg.operators {
            eprintln!("operator {}: {}", b.label, b.bin.display());
        }
    }
    report::machine(&env, &cfg);
    let mut results = Results::default();
    let outcome = run(&rt, &cfg, &env, &sections, &mut results);
    // A failed run still prints what it measured, and then fails.
    let printed = report::print(&cfg, &results);
    outcome.and(printed)
}

fn run(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    env: &TestEnv,
    sections: &Sections,
    results: &mut Results,
) -> anyhow::Result<()> {
    if sections.plumbing {
        for &prov in &cfg.providers {
            results
                .plumbing
                .push(plumbing::run(rt, cfg, prov, cfg.sizes[0])?);
        }
    }
    if sections.drift {
        for &prov in &cfg.providers {
            for build in &cfg.operators {
                drift(rt, cfg, prov, build, results)?;
            }
        }
    }
    if !(sections.kraken || sections.terraform || sections.backlog || sections.ceiling) {
        return Ok(());
    }
    for &prov in &cfg.providers {
        for &n in &cfg.sizes {
            results.measured.push(Measured {
                prov: Some(prov),
                n,
                ..Measured::default()
            });
            measure(rt, cfg, env, sections, results.current()?)?;
            let m = results.current()?;
            if (sections.kraken || sections.backlog) && sections.terraform {
                let binary = env.provider(prov.env_name())?.path;
                let same = kraken_tests::bench::fair::same_provider(
                    &binary,
                    cfg.gogc,
                    &m.kraken_seen,
                    &m.tf_seen,
                )?;
                results
                    .fairness
                    .push(format!("{} {n}: {same}", prov.name()));
            }
        }
    }
    Ok(())
}

/// The no-op drift checks of one provider and build, at the first level.
fn drift(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    prov: Prov,
    build: &OperatorBuild,
    results: &mut Results,
) -> anyhow::Result<()> {
    let label = format!("bench-drift-{}-{}", prov.name(), build.label);
    let level = cfg.levels[0];
    let mut bed = Bed::start(rt, cfg, prov, &label, level, Some(build))?;
    let d = kraken::drift_run(&mut bed, cfg, prov);
    let d = bed.finish(d)?;
    eprintln!(
        "drift {} ({}): {} checks, {} writes ({} Events) in {:?}",
        prov.name(),
        build.label,
        d.delta.reconciles,
        d.delta.total(),
        d.delta.events(),
        d.window
    );
    ensure!(
        d.delta.reconciles >= 1.0,
        "no drift check ran in the window: the measurement proves nothing"
    );
    results.drift.push((prov, build.label.clone(), d));
    Ok(())
}

/// Interleaved runs of every side for one (provider, N): per round and level, each operator
/// build's create (then its backlog run) and Terraform at that parallelism; then the kubectl
/// ceiling; after the rounds, the one-change runs.
fn measure(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    env: &TestEnv,
    sections: &Sections,
    m: &mut Measured,
) -> anyhow::Result<()> {
    let (prov, n) = (m.prov(), m.n);
    let tf = if sections.terraform {
        Some(terraform::Workspace::new(env, prov, n, cfg.gogc)?)
    } else {
        None
    };
    let runs = cfg.runs(n);
    for r in 1..=runs {
        let last = r == runs;
        for &level in &cfg.levels {
            for build in &cfg.operators {
                let key = Key {
                    build: build.label.clone(),
                    level,
                };
                if sections.kraken {
                    kraken_round(rt, cfg, m, (build, &key), r, last)?;
                }
                if sections.backlog {
                    backlog_round(rt, cfg, m, (build, &key), r)?;
                }
            }
            if let Some(tf) = &tf {
                let took = tf.create_all(level)?;
                eprintln!(
                    "terraform {} {n} -parallelism={level} run {r}/{runs}: {:.2}s",
                    prov.name(),
                    took.as_secs_f64()
                );
                m.terraform.push((level, took));
            }
        }
        if sections.ceiling {
            let label = format!("bench-ceiling-{}-{n}-r{r}", prov.name());
            let c = backlog::ceiling_run(rt, cfg, prov, n, &label)?;
            eprintln!(
                "ceiling {} {n} run {r}/{runs}: kubectl done {:.2}s, watch saw all {:.2}s",
                prov.name(),
                c.apply.as_secs_f64(),
                c.seen_all.as_secs_f64()
            );
            m.ceiling.push(c);
        }
    }
    if let Some(tf) = &tf {
        terraform_changes(cfg, tf, m)?;
        m.tf_seen.extend(tf.seen());
    }
    Ok(())
}

/// One backlog run of one build at one level.
fn backlog_round(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    m: &mut Measured,
    (build, key): (&OperatorBuild, &Key),
    r: usize,
) -> anyhow::Result<()> {
    let (prov, n, runs) = (m.prov(), m.n, cfg.runs(m.n));
    let what = format!("backlog {key} {} {n} run {r}/{runs}", prov.name());
    let label = format!(
        "bench-backlog-{}-p{}-{}-{n}-r{r}",
        build.label,
        key.level,
        prov.name()
    );
    let b = backlog::backlog_run(rt, cfg, prov, n, &label, (build, key.level))?;
    eprintln!(
        "{what}: all Ready {:.2}s after the operator started (ready at {:.2}s)",
        b.total.as_secs_f64(),
        b.ready.as_secs_f64()
    );
    m.kraken_seen.extend(b.seen.iter().cloned());
    m.backlog.push((key.clone(), b));
    Ok(())
}

/// One create run of one build at one level (and on the last round, its one-change runs).
fn kraken_round(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    m: &mut Measured,
    (build, key): (&OperatorBuild, &Key),
    r: usize,
    last: bool,
) -> anyhow::Result<()> {
    let (prov, n, runs) = (m.prov(), m.n, cfg.runs(m.n));
    let what = format!("kraken {key} {} {n} run {r}/{runs}", prov.name());
    let label = format!(
        "bench-{}-p{}-{}-{n}-r{r}",
        build.label,
        key.level,
        prov.name()
    );
    let mut bed = Bed::start(rt, cfg, prov, &label, key.level, Some(build))?;
    let result = (|| {
        let run = kraken::create_run(&mut bed, cfg, prov, n, &what)?;
        eprintln!(
            "{what}: all Ready in {:.2}s (kubectl done at {:.2}s), RSS {:.1} → {:.1} MB, {:.2} writes/resource",
            run.total.as_secs_f64(),
            run.apply.as_secs_f64(),
            run.idle.rss as f64 / 1e6,
            run.loaded.rss as f64 / 1e6,
            run.delta.total() / n as f64
        );
        let change = if last && cfg.changes > 0 {
            Some(kraken::changes_and_plans(
                &mut bed, cfg, prov, n, key, &what,
            )?)
        } else {
            None
        };
        Ok((run, change))
    })();
    let (run, change) = bed.finish(result)?;
    m.kraken_seen.extend(run.seen.iter().cloned());
    m.kraken.push((key.clone(), run));
    if let Some((c, p)) = change {
        m.kraken_change.push((key.clone(), c));
        if let Some(p) = p {
            m.kraken_plan.push((key.clone(), p));
        }
    }
    Ok(())
}

/// Terraform's one change among N at each level: a full refresh first (its default), then
/// targeted.
fn terraform_changes(
    cfg: &Config,
    tf: &terraform::Workspace,
    m: &mut Measured,
) -> anyhow::Result<()> {
    let (prov, n) = (m.prov(), m.n);
    let runs = cfg.tf_change_runs(n);
    let mut rev = 0;
    for &level in &cfg.levels {
        for k in 1..=runs {
            rev += 1;
            let took = tf.change_one(rev, level)?;
            eprintln!(
                "terraform {} {n} -parallelism={level}: one change {k} in {:.2}s",
                prov.name(),
                took.as_secs_f64()
            );
            m.tf_change.push((level, took));
        }
        // A targeted apply reads one instance: cheap at any N, so a few samples at least
        // (one in the smoke mode).
        let targeted = if kraken_tests::bench::smoke() {
            runs
        } else {
            runs.max(3)
        };
        for k in 1..=targeted {
            rev += 1;
            let took = tf.change_one_targeted(rev, level)?;
            eprintln!(
                "terraform {} {n} -parallelism={level}: one targeted change {k} in {:.2}s",
                prov.name(),
                took.as_secs_f64()
            );
            m.tf_change_targeted.push((level, took));
        }
    }
    Ok(())
}

//! Operator benchmark: `cargo bench -p kraken-tests --bench operator`.
//!
//! Measures `kraken operator` (release build, `--no-leader-elect --concurrency 64`) against a
//! fresh control plane per run, beside Terraform with the same provider binaries, and prints
//! markdown tables (copied into `docs/benchmarks.md`):
//! 1. N fixture objects or `random_pet`s applied with `kubectl apply --server-side` until all
//!    are Ready, beside `terraform apply` creating the same N at `-parallelism` 10 (its
//!    default) and at the operator's `--concurrency` (interleaved);
//! 2. the load generator's ceiling (`kubectl apply` of the same manifests, no operator) and a
//!    backlog run (the N created first, the operator started after: its own throughput);
//! 3. the operator's RSS idle and with N managed resources, with its provider processes;
//! 4. API writes per created resource from the operator's `kraken_api_writes_total`, and
//!    every client's requests by verb from the API server's `apiserver_request_total`;
//! 5. API writes of no-op drift checks (a small set with a short `driftInterval`);
//! 6. with N in place, one changed object from `kubectl apply` to Ready (p50 of several),
//!    beside Terraform applying one change among N (which refreshes all N) and the same with
//!    `-refresh=false -target=…`;
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
//! `fixture,random`), `KRAKEN_BENCH_RUNS` (default 3 below 10,000 resources, else 1),
//! `KRAKEN_BENCH_CHANGES` (default 10), `KRAKEN_BENCH_PLANS` (1: section 7 runs; 0: not),
//! `KRAKEN_BENCH_PLAN_BUILDS` (the builds section 7 runs for, by label; default all),
//! `KRAKEN_BENCH_TF_CHANGE_RUNS` (default 3 below 10,000, else 1),
//! `KRAKEN_BENCH_TF_PARALLELISM` (default `10,<concurrency>`),
//! `KRAKEN_BENCH_OPERATORS` (`label=path,...`; default this checkout's release build),
//! `KRAKEN_BENCH_DRIFT_N` (100), `KRAKEN_BENCH_DRIFT_INTERVAL_S` (2),
//! `KRAKEN_BENCH_DRIFT_WINDOW_S` (10), `KRAKEN_BENCH_BATCH` (documents per kubectl call,
//! 500), `KRAKEN_BENCH_KUBECTL_PARALLEL` (2), `KRAKEN_BENCH_CONCURRENCY` (64),
//! `KRAKEN_BENCH_RUST_LOG` (the operator's, `info`), `KRAKEN_BENCH_TIMEOUT_S` (per create
//! run; default 120 s + 0.1 s per resource).

// A bench target's root resolves modules beside itself; the parts live in `operator/`.
#[path = "operator/backlog.rs"]
mod backlog;
#[path = "operator/bed.rs"]
mod bed;
#[path = "operator/cleanup.rs"]
mod cleanup;
#[path = "operator/kraken.rs"]
mod kraken;
#[path = "operator/plumbing.rs"]
mod plumbing;
#[path = "operator/report.rs"]
mod report;
#[path = "operator/terraform.rs"]
mod terraform;
#[path = "operator/watch.rs"]
mod watch;

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::TestEnv;
use kraken_tests::bench::OperatorBuild;
use serde_json::{Value, json};

use crate::kraken::Bed;

/// A provider under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prov {
    /// The protocol 6 fixture, `fixture_object` as kind `Object`: a file per object in a
    /// ledger directory, fsynced, like a (very fast) cloud.
    Fixture,
    /// `hashicorp/random` 3.6.0, `random_pet` as kind `Pet`: no I/O at all.
    Random,
}

impl Prov {
    fn parse(s: &str) -> anyhow::Result<Self> {
        match s.trim() {
            "fixture" => Ok(Self::Fixture),
            "random" => Ok(Self::Random),
            other => {
                bail!("unknown provider {other:?} in KRAKEN_BENCH_PROVIDERS (fixture, random)")
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Fixture => "fixture",
            Self::Random => "random",
        }
    }

    /// The test environment's name for the provider binary.
    pub fn env_name(self) -> &'static str {
        self.name()
    }

    pub fn crd_dir(self) -> String {
        format!("generated-crds/{}", self.name())
    }

    pub fn crd_label(self) -> String {
        format!("tf.kraken.dev/provider={}", self.name())
    }

    pub fn kind(self) -> watch::Kind {
        match self {
            Self::Fixture => watch::Kind {
                group: "fixture.tf.kraken.dev",
                version: "v1alpha1",
                kind: "Object",
                plural: "objects",
            },
            Self::Random => watch::Kind {
                group: "random.tf.kraken.dev",
                version: "v1alpha1",
                kind: "Pet",
                plural: "pets",
            },
        }
    }

    /// The resource name kubectl takes, fully qualified.
    pub fn kubectl_resource(self) -> String {
        let k = self.kind();
        format!("{}.{}", k.plural, k.group)
    }

    /// What one change does to the external object.
    pub fn change(self) -> &'static str {
        match self {
            Self::Fixture => "update `size`",
            Self::Random => "replace (`keepers`)",
        }
    }

    /// Object `bench-<i>` at change number `rev` (0 for the create), with `driftInterval` if
    /// given. The Terraform side ([`terraform::config`]) has the same arguments.
    pub fn manifest(self, ns: &str, i: usize, rev: usize, drift: Option<&str>) -> Value {
        let name = format!("bench-{i}");
        let k = self.kind();
        let for_provider = match self {
            Self::Fixture => json!({"name": name, "size": rev + 1}),
            Self::Random => json!({"keepers": {"rev": rev.to_string()}}),
        };
        let mut spec = json!({"forProvider": for_provider});
        if let Some(d) = drift {
            spec["driftInterval"] = json!(d);
        }
        json!({
            "apiVersion": format!("{}/{}", k.group, k.version),
            "kind": k.kind,
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        })
    }
}

/// The knobs, from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    pub sizes: Vec<usize>,
    pub providers: Vec<Prov>,
    runs: Option<usize>,
    pub changes: usize,
    /// Also time plans under `planPolicy: Manual` beside the changes (`KRAKEN_BENCH_PLANS`);
    /// only for these builds when `KRAKEN_BENCH_PLAN_BUILDS` names some (builds older than
    /// plan policies would never show a plan).
    pub plans: bool,
    pub plan_builds: Vec<String>,
    tf_change_runs: Option<usize>,
    pub drift_n: usize,
    pub drift_interval_s: u64,
    pub drift_window_s: u64,
    pub batch: usize,
    pub kubectl_parallel: usize,
    pub concurrency: usize,
    pub rust_log: String,
    timeout_s: Option<u64>,
    /// The operator builds compared, interleaved (`KRAKEN_BENCH_OPERATORS`).
    pub operators: Vec<OperatorBuild>,
    /// Terraform's `-parallelism` values, each a create run of its own.
    pub tf_parallelism: Vec<usize>,
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> anyhow::Result<T> {
    Ok(env_opt(key)?.unwrap_or(default))
}

/// A malformed value is an error: a typo must not silently run the 10,000-resource default.
fn env_opt<T: std::str::FromStr>(key: &str) -> anyhow::Result<Option<T>> {
    match std::env::var(key) {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse() {
            Ok(x) => Ok(Some(x)),
            Err(_) => bail!("{key}={v:?} is not a valid value"),
        },
        _ => Ok(None),
    }
}

impl Config {
    fn from_env() -> anyhow::Result<Self> {
        let list = |key: &str, default: &str| std::env::var(key).unwrap_or_else(|_| default.into());
        let sizes = list("KRAKEN_BENCH_SIZES", "1000,10000")
            .split(',')
            .map(|s| {
                s.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("KRAKEN_BENCH_SIZES: {s:?} is not a positive number"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let providers = list("KRAKEN_BENCH_PROVIDERS", "fixture,random")
            .split(',')
            .map(Prov::parse)
            .collect::<anyhow::Result<Vec<_>>>()?;
        let concurrency = env_or("KRAKEN_BENCH_CONCURRENCY", 64)?;
        // Terraform's default and Kraken's own concurrency: neither side gets more workers.
        let tf_parallelism = list("KRAKEN_BENCH_TF_PARALLELISM", &format!("10,{concurrency}"))
            .split(',')
            .map(|s| {
                s.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| {
                        format!("KRAKEN_BENCH_TF_PARALLELISM: {s:?} is not a positive number")
                    })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let cfg = Self {
            sizes,
            providers,
            runs: env_opt("KRAKEN_BENCH_RUNS")?,
            changes: env_or("KRAKEN_BENCH_CHANGES", 10)?,
            plans: env_or("KRAKEN_BENCH_PLANS", 1)? == 1,
            plan_builds: std::env::var("KRAKEN_BENCH_PLAN_BUILDS")
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            tf_change_runs: env_opt("KRAKEN_BENCH_TF_CHANGE_RUNS")?,
            drift_n: env_or("KRAKEN_BENCH_DRIFT_N", 100)?,
            drift_interval_s: env_or("KRAKEN_BENCH_DRIFT_INTERVAL_S", 2)?,
            drift_window_s: env_or("KRAKEN_BENCH_DRIFT_WINDOW_S", 10)?,
            batch: env_or("KRAKEN_BENCH_BATCH", 500)?,
            kubectl_parallel: env_or("KRAKEN_BENCH_KUBECTL_PARALLEL", 2)?,
            concurrency,
            rust_log: env_or("KRAKEN_BENCH_RUST_LOG", "info".to_string())?,
            timeout_s: env_opt("KRAKEN_BENCH_TIMEOUT_S")?,
            operators: Vec::new(),
            tf_parallelism,
        };
        ensure!(
            cfg.batch > 0 && cfg.drift_n > 0,
            "batch and drift sizes must be positive"
        );
        Ok(cfg)
    }

    /// Interleaved create runs per side at size `n`.
    pub fn runs(&self, n: usize) -> usize {
        self.runs.unwrap_or(if n >= 10_000 { 1 } else { 3 })
    }

    /// Timed Terraform one-change applies at size `n` (each refreshes all n).
    pub fn tf_change_runs(&self, n: usize) -> usize {
        self.tf_change_runs
            .unwrap_or(if n >= 10_000 { 1 } else { 3 })
    }

    /// How long one create of `n` may take before the run fails.
    pub fn timeout(&self, n: usize) -> Duration {
        Duration::from_secs(self.timeout_s.unwrap_or(120 + n as u64 / 10))
    }
}

/// Everything measured for one (provider, N). Kraken's runs carry the label of the
/// operator build that made them.
#[derive(Debug, Default)]
pub struct Measured {
    pub prov: Option<Prov>,
    pub n: usize,
    pub kraken: Vec<(String, kraken::CreateRun)>,
    pub backlog: Vec<(String, backlog::BacklogRun)>,
    pub ceiling: Vec<backlog::CeilingRun>,
    /// (`-parallelism`, wall time) per Terraform create.
    pub terraform: Vec<(usize, Duration)>,
    pub kraken_change: Vec<(String, kraken::ChangeRun)>,
    pub kraken_plan: Vec<(String, kraken::PlanRun)>,
    pub tf_change: Vec<Duration>,
    pub tf_change_targeted: Vec<Duration>,
}

impl Measured {
    pub fn prov(&self) -> Prov {
        self.prov.unwrap_or(Prov::Fixture)
    }

    /// The create runs of one build.
    pub fn kraken_of<'a>(&'a self, label: &'a str) -> impl Iterator<Item = &'a kraken::CreateRun> {
        self.kraken
            .iter()
            .filter(move |(l, _)| l == label)
            .map(|(_, r)| r)
    }
}

/// Results so far, printed even when a later measurement fails.
#[derive(Debug, Default)]
pub struct Results {
    pub plumbing: Vec<plumbing::Plumbing>,
    pub drift: Vec<(Prov, String, kraken::DriftRun)>,
    pub measured: Vec<Measured>,
}

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

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; other arguments select sections.
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
    let sections = Sections {
        plumbing: wants("plumbing"),
        drift: wants("drift"),
        kraken: wants("kraken"),
        backlog: wants("backlog"),
        ceiling: wants("ceiling"),
        terraform: wants("terraform"),
    };
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
    report::print(&cfg, &results);
    outcome
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
                let label = format!("bench-drift-{}-{}", prov.name(), build.label);
                let mut bed = Bed::start(rt, cfg, prov, &label, Some(build))?;
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
                results.drift.push((prov, build.label.clone(), d));
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
            let m = results.measured.last_mut().context("just pushed")?;
            measure(rt, cfg, env, sections, m)?;
        }
    }
    Ok(())
}

/// Interleaved runs of every side for one (provider, N): per round, each operator build's
/// create (then its backlog run), the kubectl ceiling, Terraform at each parallelism; then
/// the one-change runs.
fn measure(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    env: &TestEnv,
    sections: &Sections,
    m: &mut Measured,
) -> anyhow::Result<()> {
    let (prov, n) = (m.prov(), m.n);
    let tf = if sections.terraform {
        Some(terraform::Workspace::new(env, prov, n)?)
    } else {
        None
    };
    let runs = cfg.runs(n);
    for r in 1..=runs {
        let last = r == runs;
        for build in &cfg.operators {
            if sections.kraken {
                kraken_round(rt, cfg, m, build, r, last)?;
            }
            if sections.backlog {
                let what = format!("backlog {} {} {n} run {r}/{runs}", build.label, prov.name());
                let label = format!("bench-backlog-{}-{}-{n}-r{r}", build.label, prov.name());
                let b = backlog::backlog_run(rt, cfg, prov, n, &label, build)?;
                eprintln!(
                    "{what}: all Ready {:.2}s after the operator started (ready at {:.2}s)",
                    b.total.as_secs_f64(),
                    b.ready.as_secs_f64()
                );
                m.backlog.push((build.label.clone(), b));
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
        if let Some(tf) = &tf {
            for &p in &cfg.tf_parallelism {
                let took = tf.create_all(p)?;
                eprintln!(
                    "terraform {} {n} -parallelism={p} run {r}/{runs}: {:.2}s",
                    prov.name(),
                    took.as_secs_f64()
                );
                m.terraform.push((p, took));
            }
        }
    }
    if let Some(tf) = &tf {
        terraform_changes(cfg, tf, m)?;
    }
    Ok(())
}

/// One create run of one build (and on the last round, its one-change runs).
fn kraken_round(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    m: &mut Measured,
    build: &OperatorBuild,
    r: usize,
    last: bool,
) -> anyhow::Result<()> {
    let (prov, n, runs) = (m.prov(), m.n, cfg.runs(m.n));
    let what = format!("kraken {} {} {n} run {r}/{runs}", build.label, prov.name());
    let label = format!("bench-{}-{}-{n}-r{r}", build.label, prov.name());
    let mut bed = Bed::start(rt, cfg, prov, &label, Some(build))?;
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
            let c = kraken::change_run(&mut bed, prov, n, cfg.changes)?;
            eprintln!("{what}: changes → Ready {:?}", c.latencies);
            let planned = cfg.plan_builds.is_empty() || cfg.plan_builds.contains(&build.label);
            let p = if cfg.plans && planned {
                let p = kraken::plan_run(&mut bed, prov, n, cfg.changes)?;
                eprintln!(
                    "{what}: plans visible {:?}, approved → applied {:?}",
                    p.visible, p.approved
                );
                Some(p)
            } else {
                None
            };
            Some((c, p))
        } else {
            None
        };
        Ok((run, change))
    })();
    let (run, change) = bed.finish(result)?;
    m.kraken.push((build.label.clone(), run));
    if let Some((c, p)) = change {
        m.kraken_change.push((build.label.clone(), c));
        if let Some(p) = p {
            m.kraken_plan.push((build.label.clone(), p));
        }
    }
    Ok(())
}

/// Terraform's one change among N: a full refresh first (its default), then targeted.
fn terraform_changes(
    cfg: &Config,
    tf: &terraform::Workspace,
    m: &mut Measured,
) -> anyhow::Result<()> {
    let (prov, n) = (m.prov(), m.n);
    let runs = cfg.tf_change_runs(n);
    for k in 1..=runs {
        let took = tf.change_one(k)?;
        eprintln!(
            "terraform {} {n}: one change {k} in {:.2}s",
            prov.name(),
            took.as_secs_f64()
        );
        m.tf_change.push(took);
    }
    // A targeted apply reads one instance: cheap at any N, so always a few samples.
    for k in 1..=runs.max(3) {
        let took = tf.change_one_targeted(1000 + k)?;
        eprintln!(
            "terraform {} {n}: one targeted change {k} in {:.2}s",
            prov.name(),
            took.as_secs_f64()
        );
        m.tf_change_targeted.push(took);
    }
    Ok(())
}

//! What the operator benchmark measures and with which knobs: the providers under test, the
//! configuration read from the environment, and the results gathered for the tables.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::bench::knobs::{self, knob, positive_list};
use kraken_tests::bench::{Gogc, OperatorBuild, Seen};
use serde_json::{Value, json};

use crate::{backlog, kraken, plumbing, watch};

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
    /// given. The Terraform side ([`crate::terraform::config`]) has the same arguments.
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
    pub rust_log: String,
    timeout_s: Option<u64>,
    /// The operator builds compared, interleaved (`KRAKEN_BENCH_OPERATORS`).
    pub operators: Vec<OperatorBuild>,
    /// The parallelism levels: at each, the operator's `--concurrency`, the ProviderConfig's
    /// `maxConcurrency` and Terraform's `-parallelism` are all this number.
    pub levels: Vec<usize>,
    /// `GOGC` of every provider process, Kraken's and Terraform's.
    pub gogc: Gogc,
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
    pub fn from_env() -> anyhow::Result<Self> {
        let levels = "KRAKEN_BENCH_PARALLELISM (each level sets the operator's --concurrency, \
                      the ProviderConfig's maxConcurrency and Terraform's -parallelism)";
        knobs::retired(&[
            ("KRAKEN_BENCH_CONCURRENCY", levels),
            ("KRAKEN_BENCH_TF_PARALLELISM", levels),
        ])?;
        let smoke = knobs::smoke();
        let sizes = positive_list("KRAKEN_BENCH_SIZES", if smoke { "4" } else { "1000,10000" })?;
        let providers = std::env::var("KRAKEN_BENCH_PROVIDERS")
            .unwrap_or_else(|_| "fixture,random".into())
            .split(',')
            .map(Prov::parse)
            .collect::<anyhow::Result<Vec<_>>>()?;
        let cfg = Self {
            sizes,
            providers,
            runs: env_opt("KRAKEN_BENCH_RUNS")?.or(smoke.then_some(1)),
            changes: knob("KRAKEN_BENCH_CHANGES", 10, 1)?,
            plans: knob("KRAKEN_BENCH_PLANS", 1, 1)? == 1,
            plan_builds: std::env::var("KRAKEN_BENCH_PLAN_BUILDS")
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            tf_change_runs: env_opt("KRAKEN_BENCH_TF_CHANGE_RUNS")?.or(smoke.then_some(1)),
            drift_n: knob("KRAKEN_BENCH_DRIFT_N", 100, 3)?,
            drift_interval_s: knob("KRAKEN_BENCH_DRIFT_INTERVAL_S", 2, 1)?,
            drift_window_s: knob("KRAKEN_BENCH_DRIFT_WINDOW_S", 10, 3)?,
            batch: knob("KRAKEN_BENCH_BATCH", 500, 500)?,
            kubectl_parallel: knob("KRAKEN_BENCH_KUBECTL_PARALLEL", 2, 2)?,
            rust_log: knob("KRAKEN_BENCH_RUST_LOG", "info".to_string(), "info".into())?,
            timeout_s: env_opt("KRAKEN_BENCH_TIMEOUT_S")?,
            operators: Vec::new(),
            levels: knobs::levels()?,
            gogc: Gogc::from_env()?,
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

    /// Timed Terraform one-change applies at size `n` (each refreshes all n), per level.
    pub fn tf_change_runs(&self, n: usize) -> usize {
        self.tf_change_runs
            .unwrap_or(if n >= 10_000 { 1 } else { 3 })
    }

    /// How long one create of `n` may take before the run fails.
    pub fn timeout(&self, n: usize) -> Duration {
        Duration::from_secs(self.timeout_s.unwrap_or(120 + n as u64 / 10))
    }

    /// Every (operator build, parallelism level) a Kraken measurement runs for.
    pub fn keys(&self) -> Vec<Key> {
        self.levels
            .iter()
            .flat_map(|&level| {
                self.operators.iter().map(move |b| Key {
                    build: b.label.clone(),
                    level,
                })
            })
            .collect()
    }
}

/// Which Kraken: an operator build at a parallelism level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub build: String,
    pub level: usize,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} p={}", self.build, self.level)
    }
}

/// Everything measured for one (provider, N). Kraken's runs carry the build and level that
/// made them; Terraform's their `-parallelism`.
#[derive(Debug, Default)]
pub struct Measured {
    pub prov: Option<Prov>,
    pub n: usize,
    pub kraken: Vec<(Key, kraken::CreateRun)>,
    pub backlog: Vec<(Key, backlog::BacklogRun)>,
    pub ceiling: Vec<backlog::CeilingRun>,
    /// (`-parallelism`, wall time) per Terraform create.
    pub terraform: Vec<(usize, Duration)>,
    pub kraken_change: Vec<(Key, kraken::ChangeRun)>,
    pub kraken_plan: Vec<(Key, kraken::PlanRun)>,
    /// (`-parallelism`, wall time) per Terraform one-change apply, full and targeted.
    pub tf_change: Vec<(usize, Duration)>,
    pub tf_change_targeted: Vec<(usize, Duration)>,
    /// The provider processes each side ran, for the fairness check.
    pub kraken_seen: BTreeSet<Seen>,
    pub tf_seen: BTreeSet<Seen>,
}

impl Measured {
    pub fn prov(&self) -> Prov {
        self.prov.unwrap_or(Prov::Fixture)
    }

    /// The create runs of one build at one level.
    pub fn kraken_of<'a>(&'a self, key: &'a Key) -> impl Iterator<Item = &'a kraken::CreateRun> {
        self.kraken
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, r)| r)
    }

    /// The backlog runs of one build at one level.
    pub fn backlog_of<'a>(&'a self, key: &'a Key) -> impl Iterator<Item = &'a backlog::BacklogRun> {
        self.backlog
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, r)| r)
    }

    /// Terraform's samples at `level` from one of the (parallelism, time) lists.
    pub fn at(list: &[(usize, Duration)], level: usize) -> Vec<Duration> {
        list.iter()
            .filter(|(p, _)| *p == level)
            .map(|(_, d)| *d)
            .collect()
    }
}

/// Results so far, printed even when a later measurement fails.
#[derive(Debug, Default)]
pub struct Results {
    pub plumbing: Vec<plumbing::Plumbing>,
    pub drift: Vec<(Prov, String, kraken::DriftRun)>,
    pub measured: Vec<Measured>,
    /// What was checked equal on both sides, per provider ("the same provider binary …").
    pub fairness: Vec<String>,
}

impl Results {
    /// The last (provider, N) measured.
    pub fn current(&mut self) -> anyhow::Result<&mut Measured> {
        self.measured.last_mut().context("nothing measured yet")
    }
}

//! hashicorp/aws through the bridge, side by side with Terraform driving the same provider
//! binary against the same moto: `cargo bench -p kraken-tests --bench aws`.
//!
//! 100 `aws_instance` + 100 `aws_sqs_queue` + 100 `aws_sns_topic` (the third type stands in
//! for `aws_s3_bucket`, which hashicorp/aws 6.34 cannot read back from an emulator on
//! loopback: it reads bucket tags through S3 Control at `<account>.<endpoint host>`, for
//! Terraform as well). For each parallelism level P (`KRAKEN_BENCH_PARALLELISM`, default 10
//! and 32), on a fresh bed (control plane, operator, the Provider installed, moto), Kraken with
//! the ProviderConfig's `maxConcurrency: P`, then, on the reset moto, Terraform at
//! `-parallelism=P`:
//! - apply → all 300 Ready (Kraken, one `kubectl apply`) vs `terraform apply` from empty;
//! - one change among the 300 (an instance's tag; a queue's visibility timeout): Kraken from
//!   the patch to the object reconciled at its new generation, vs Terraform's full `apply`
//!   (which refreshes all 300 first) and vs `apply -refresh=false -target=<that resource>`;
//!   moto's own latency for one request beside them;
//! - with `KRAKEN_BENCH_AWS_DELETE=1`, delete all vs `terraform destroy` (long: the
//!   provider waits about a minute on each queue it deletes, for either tool);
//! - peak and settled RSS of the operator (idle before the Provider install) and of the AWS
//!   provider process under it, and of Terraform with its provider; the operator's API writes
//!   per resource.
//!
//! Both sides' provider processes run the test mirror's binary (hashed from what each side
//! started) under the same `GOGC` (`KRAKEN_BENCH_GOGC`); the bench prints each ratio.
//!
//! Knobs: `KRAKEN_BENCH_AWS_N` (per type, default 100), `KRAKEN_BENCH_AWS_CHANGES` (Kraken's
//! instance tag samples, default 10), `KRAKEN_BENCH_AWS_QUEUE_CHANGES` (Kraken's queue samples,
//! default 4; Terraform takes one of each kind), `KRAKEN_BENCH_AWS_TF_CHANGES` (Terraform's tag
//! samples, each kind of apply, default 3), `KRAKEN_BENCH_PARALLELISM`, `KRAKEN_BENCH_GOGC`
//! (`default` or a percentage), `KRAKEN_BENCH_OPERATORS` (`label=path,...`: one Kraken pass
//! per build and level; Terraform runs once per level), `KRAKEN_BENCH_AWS_DELETE=1`.
//! `KRAKEN_BENCH_SMOKE=1`: one object per type, one tag change per side and kind of apply, no
//! queue change (each waits about 25 s in the provider's own propagation check, for either
//! tool; the tag change goes through the same code), the first level only (each level is a
//! fresh bed: a second one runs the same code).

#[path = "aws/kraken.rs"]
mod kraken;
#[path = "aws/report.rs"]
mod report;
#[path = "aws/terraform.rs"]
mod terraform;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context as _;
use kraken_tests::bench::knobs::{self, knob};
use kraken_tests::bench::{Gogc, OperatorBuild, Seen, aws_provider, fair, operator_builds};
use kraken_tests::operator::OperatorOptions;
use kraken_tests::operator::aws::AwsBed;

use crate::kraken::KrakenRun;
use crate::terraform::TerraformRun;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RESOURCES: &[&str] = &["aws_instance", "aws_sqs_queue", "aws_sns_topic"];

/// The knobs.
pub struct Config {
    /// Objects per type.
    pub n: usize,
    pub changes: usize,
    pub queue_changes: usize,
    pub tf_changes: usize,
    pub levels: Vec<usize>,
    pub gogc: Gogc,
    pub delete: bool,
}

impl Config {
    fn from_env() -> anyhow::Result<Self> {
        let instead = "KRAKEN_BENCH_PARALLELISM sets both sides at each level";
        knobs::retired(&[
            ("KRAKEN_BENCH_AWS_CONCURRENCY", instead),
            ("KRAKEN_BENCH_AWS_TF_PARALLELISM", instead),
            (
                "KRAKEN_BENCH_AWS_PROVIDER_ENV",
                "KRAKEN_BENCH_GOGC sets the providers' GOGC on both sides",
            ),
        ])?;
        let cfg = Self {
            n: knob("KRAKEN_BENCH_AWS_N", 100, 1)?,
            changes: knob("KRAKEN_BENCH_AWS_CHANGES", 10, 1)?,
            queue_changes: knob("KRAKEN_BENCH_AWS_QUEUE_CHANGES", 4, 0)?,
            tf_changes: knob("KRAKEN_BENCH_AWS_TF_CHANGES", 3, 1)?,
            levels: knobs::levels_on_fresh_beds()?,
            gogc: Gogc::from_env()?,
            delete: std::env::var("KRAKEN_BENCH_AWS_DELETE").is_ok_and(|v| v == "1"),
        };
        anyhow::ensure!(
            cfg.n > 0 && cfg.changes > 0 && cfg.tf_changes > 0,
            "KRAKEN_BENCH_AWS_N, _CHANGES and _TF_CHANGES must be at least 1"
        );
        Ok(cfg)
    }
}

/// What every pass ran, for the fairness check.
#[derive(Default)]
struct Ran {
    kraken: BTreeSet<Seen>,
    terraform: BTreeSet<Seen>,
}

/// One bed: Kraken's pass at `level`, then (`with_tf`) Terraform's at the same level against
/// the same moto, reset in between.
fn pass(
    build: &OperatorBuild,
    cfg: &Config,
    level: usize,
    with_tf: bool,
) -> anyhow::Result<(KrakenRun, Option<TerraformRun>)> {
    let opts = OperatorOptions {
        label: format!("aws-{}-{level}", build.label),
        rust_log: "warn".into(),
        leader_elect: false,
        bin: Some(build.bin.clone()),
        // Per kind; the provider's RPCs in flight are capped at the same P by maxConcurrency.
        args: [
            vec!["--concurrency".to_owned(), level.to_string()],
            cfg.gogc.operator_args(),
            build.args.clone(),
        ]
        .concat(),
        ..OperatorOptions::default()
    };
    let name = format!("bench-aws-{}-{level}", build.label);
    // The idle sample: the operator ready, its start-up allocations done, no Provider yet.
    let pc = serde_json::json!({"maxConcurrency": level});
    let (ab, idle) = AwsBed::start_probed(&name, opts, (RESOURCES, &[]), pc, |bed| {
        std::thread::sleep(Duration::from_secs(3));
        let pid = bed.op.pid().context("the operator is not running")?;
        kraken_tests::rss_bytes(pid)
    })?;
    let result = (|| {
        let mut run = kraken::measure(&ab, cfg, level, idle)?;
        run.build = build.label.clone();
        eprintln!(
            "kraken {} maxConcurrency {level}: {} Ready in {:.1} s, changes p50 {}, deleted in {} s, memory (peak, after) operator {:?} provider {:?}",
            build.label,
            run.ready.len(),
            run.ready
                .iter()
                .max()
                .unwrap_or(&Duration::ZERO)
                .as_secs_f64(),
            report::p50s(&run.changes),
            report::opt(run.deleted),
            run.memory.first(),
            run.memory.get(1)
        );
        if !with_tf {
            return Ok((run, None));
        }
        ab.moto.reset()?;
        let t = terraform::pass(&ab, cfg, level)?;
        eprintln!(
            "terraform -parallelism={level}: apply {:.1} s, destroy {} s",
            t.apply.as_secs_f64(),
            report::opt(t.destroy)
        );
        Ok((run, Some(t)))
    })();
    ab.bed.finish(result)
}

fn main() -> anyhow::Result<()> {
    knobs::start("aws")?;
    let cfg = Config::from_env()?;
    let (binary, version) =
        aws_provider().context("the AWS provider test peer (scripts/testenv.sh install)")?;
    let builds = operator_builds()?;
    let (mut runs, mut tf, mut seen) = (Vec::new(), Vec::new(), Ran::default());
    for &level in &cfg.levels {
        for (i, build) in builds.iter().enumerate() {
            let (run, t) = pass(build, &cfg, level, i == 0)?;
            seen.kraken.extend(run.seen.iter().cloned());
            runs.push(run);
            if let Some(t) = t {
                seen.terraform.extend(t.seen.iter().cloned());
                tf.push(t);
            }
        }
    }
    let same = fair::same_provider(&binary, cfg.gogc, &seen.kraken, &seen.terraform)?;
    report::timings(cfg.n, &version, &runs, &tf);
    report::memory(&runs, &tf);
    let levels: Vec<String> = cfg.levels.iter().map(ToString::to_string).collect();
    report::ratios(&runs, &tf)?.print(&[
        format!(
            "parallelism levels {}: at each P, the ProviderConfig's `maxConcurrency: P` (RPCs in flight to the provider process) and the operator's `--concurrency P`, beside Terraform's `-parallelism=P`",
            levels.join(", ")
        ),
        cfg.gogc.describe(),
        same.to_string(),
    ])
}

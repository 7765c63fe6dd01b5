//! Native EC2 benchmark: `cargo bench -p kraken-tests --bench ec2`.
//!
//! N EC2Instances (count 1 each) applied with one `kubectl apply`, timed until every one is
//! Ready (its instance running in moto), watched through the kube client. Then deleted, timed
//! until every instance is terminated. Side by side in the same run and against the same moto:
//! `terraform apply` of N `aws_instance` resources with the real hashicorp/aws provider pointed
//! at moto (its `endpoints { ec2 = ... }`; a test peer: `scripts/testenv.sh install`), then
//! `terraform destroy`. Each comparison is made at each parallelism level P
//! (`KRAKEN_BENCH_PARALLELISM`, default 10 and 32): the operator runs with `--concurrency P`
//! (EC2Instances reconciled at once), Terraform with `-parallelism=P`. Runs are interleaved,
//! each on a fresh moto state; the table reports medians and the bench prints each ratio.
//! Kraken's side runs no provider process; Terraform's runs the test mirror's binary (hashed)
//! under `KRAKEN_BENCH_GOGC`.
//!
//! Knobs: `KRAKEN_BENCH_EC2_N` (default 100), `KRAKEN_BENCH_EC2_RUNS` (default 3),
//! `KRAKEN_BENCH_PARALLELISM`, `KRAKEN_BENCH_GOGC` (`default` or a percentage).
//! `KRAKEN_BENCH_SMOKE=1`: 2 instances, one run, both levels.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kraken_tests::bench::knobs::{self, knob};
use kraken_tests::bench::{
    Gogc, Ratios, Seen, api_writes as writes, aws_provider, fair, median, pct, terraform,
    terraform_watched,
};
use kraken_tests::moto::{AMI, Ec2Probe, Moto, REGION, cpu_seconds};
use kraken_tests::operator::bed::yaml_documents;
use kraken_tests::operator::{FixtureBed, Operator, OperatorOptions};
use kraken_tests::wait_for;
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Watches EC2Instances named `<prefix>-*` until `n` are Ready at their generation; each
/// one's time since `start`.
async fn wait_ready(
    client: &kube::Client,
    ns: &str,
    prefix: &str,
    n: usize,
    start: Instant,
) -> anyhow::Result<Vec<Duration>> {
    use futures::StreamExt as _;
    use kraken_bridge::ec2::EC2Instance;
    use kube::api::Api;
    use kube::runtime::{WatchStreamExt as _, watcher};
    let api: Api<EC2Instance> = Api::namespaced(client.clone(), ns);
    let mut seen = BTreeMap::new();
    let stream = watcher(api, watcher::Config::default()).applied_objects();
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::sleep(Duration::from_secs(600));
    let mut deadline = std::pin::pin!(deadline);
    loop {
        let o = tokio::select! {
            next = stream.next() => match next {
                Some(Ok(o)) => o,
                Some(Err(e)) => bail!("watching EC2Instances: {e}"),
                None => bail!("the watch ended"),
            },
            () = &mut deadline => bail!("only {} of {n} Ready after 600 s", seen.len()),
        };
        let now = start.elapsed();
        let name = o.metadata.name.clone().unwrap_or_default();
        if !name.starts_with(prefix) || seen.contains_key(&name) {
            continue;
        }
        let Some(status) = &o.status else { continue };
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.reason == "Available");
        if ready && status.observed_generation == o.metadata.generation && status.running == 1 {
            seen.insert(name, now);
            if seen.len() >= n {
                return Ok(seen.into_values().collect());
            }
        }
    }
}

/// A Terraform working directory for `n` aws_instance resources against `endpoint`.
fn terraform_dir(endpoint: &str, n: usize, version: &str) -> anyhow::Result<tempfile::TempDir> {
    let dir = kraken_tests::scratch_dir("kraken-bench-ec2-tf-")?;
    let header = kraken_tests::bench::aws_terraform_header(endpoint, version, &["ec2"]);
    let main = format!(
        r#"{header}resource "aws_instance" "i" {{
  count         = {n}
  ami           = "{AMI}"
  instance_type = "t3.micro"
  tags          = {{ bench = "terraform" }}
}}
"#
    );
    std::fs::write(dir.path().join("main.tf"), main)?;
    terraform(dir.path(), &["init", "-input=false", "-no-color"])?;
    Ok(dir)
}

/// The knobs.
struct Config {
    n: usize,
    runs: usize,
    levels: Vec<usize>,
    gogc: Gogc,
}

/// One Kraken run (or the medians of several): seconds, writes per instance, CPU seconds.
#[derive(Debug, Default, Clone)]
struct KrakenRun {
    all: f64,
    p50: f64,
    delete: f64,
    writes: f64,
    moto_cpu: f64,
    op_cpu: f64,
}

/// The world every run shares: one control plane and operator, moto, the Terraform directory
/// per level.
struct World {
    bed: FixtureBed,
    moto: Moto,
    probe: Ec2Probe,
    rt: tokio::runtime::Runtime,
    kc: kube::Client,
    /// The operator's current `--concurrency`.
    level: usize,
}

fn operator_options(level: usize) -> OperatorOptions {
    OperatorOptions {
        label: format!("ec2-p{level}"),
        rust_log: "warn".into(),
        leader_elect: false,
        env: vec![
            ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
            ("AWS_REGION".into(), REGION.into()),
        ],
        // moto on loopback: the operator allows only the endpoints it is told to.
        args: [
            "--aws-endpoint",
            "http://127.0.0.1:*",
            "--concurrency",
            &level.to_string(),
        ]
        .map(String::from)
        .to_vec(),
        ..OperatorOptions::default()
    }
}

impl World {
    fn start(level: usize) -> anyhow::Result<Self> {
        let bed = FixtureBed::start("bench-ec2", operator_options(level))?;
        let moto = Moto::start(bed.cp.run_dir())?;
        let probe = Ec2Probe::new(&moto.endpoint())?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let kc = rt.block_on(kraken_tests::bench::kube_client(bed.cp.kubeconfig()))?;
        let ns = bed.ns.clone();
        bed.apply(&yaml_documents(&[
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "aws-creds", "namespace": ns},
                   "stringData": {"id": "testing", "secret": "testing"}}),
            json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "AwsConfig",
                   "metadata": {"name": "moto", "namespace": ns},
                   "spec": {"region": REGION, "endpoint": moto.endpoint(), "credentials": {
                       "accessKeyIdSecretRef": {"name": "aws-creds", "key": "id"},
                       "secretAccessKeySecretRef": {"name": "aws-creds", "key": "secret"}}}}),
        ]))?;
        Ok(Self {
            bed,
            moto,
            probe,
            rt,
            kc,
            level,
        })
    }

    /// The operator at `--concurrency level`: restarted when it runs at another.
    fn at_level(&mut self, level: usize) -> anyhow::Result<()> {
        if self.level != level {
            self.bed.op = Operator::start(&self.bed.cp, operator_options(level))?;
            self.bed.op.wait_ready(Duration::from_secs(60))?;
            self.level = level;
        }
        Ok(())
    }

    fn running(&self, tag: &str) -> anyhow::Result<usize> {
        Ok(self
            .probe
            .instances(&[("tag:bench", tag), ("instance-state-name", "running")])?
            .len())
    }
}

/// N EC2Instances created until all run, then deleted until all are gone.
fn kraken_run(w: &mut World, cfg: &Config, level: usize, run: usize) -> anyhow::Result<KrakenRun> {
    w.at_level(level)?;
    let (n, ns) = (cfg.n, w.bed.ns.clone());
    let prefix = format!("r{run}p{level}");
    let docs: Vec<Value> = (0..n)
        .map(|i| {
            json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "EC2Instance",
                   "metadata": {"name": format!("{prefix}-{i}"), "namespace": ns},
                   "spec": {"awsConfigRef": {"name": "moto"}, "imageId": AMI,
                            "instanceType": "t3.micro", "tags": {"bench": "kraken"}}})
        })
        .collect();
    w.moto.reset()?;
    let op_pid = w.bed.op.pid().context("the operator is not running")?;
    let (moto0, op0) = (cpu_seconds(w.moto.pid())?, cpu_seconds(op_pid)?);
    let w0 = writes(&w.bed.op.metrics()?);
    let start = Instant::now();
    w.bed.apply(&yaml_documents(&docs))?;
    let times = w.rt.block_on(wait_ready(&w.kc, &ns, &prefix, n, start))?;
    let all = times.iter().max().copied().unwrap_or_default();
    let (moto_cpu, op_cpu) = (
        cpu_seconds(w.moto.pid())? - moto0,
        cpu_seconds(op_pid)? - op0,
    );
    std::thread::sleep(Duration::from_secs(2));
    let per = (writes(&w.bed.op.metrics()?) - w0) / n as f64;
    ensure!(
        w.running("kraken")? == n,
        "moto does not run {n} Kraken instances"
    );
    let start = Instant::now();
    let kinds = "ec2instances.aws.kraken.dev";
    w.bed
        .cp
        .kubectl(&["delete", kinds, "--all", "-n", &ns, "--wait=false"])?;
    wait_for(Duration::from_secs(600), "every EC2Instance gone", || {
        let left = w.bed.cp.kubectl(&["get", kinds, "-n", &ns, "-o", "name"])?;
        if left.trim().is_empty() {
            Ok(Some(()))
        } else {
            bail!("{} left", left.lines().count())
        }
    })?;
    let deleted = start.elapsed();
    let left = w.running("kraken")?;
    ensure!(
        left == 0,
        "{left} Kraken instances still run after deletion"
    );
    Ok(KrakenRun {
        all: all.as_secs_f64(),
        p50: pct(&times, 0.5).as_secs_f64(),
        delete: deleted.as_secs_f64(),
        writes: per,
        moto_cpu,
        op_cpu,
    })
}

/// `terraform apply` of N, then `terraform destroy`, at `-parallelism=P` on a reset moto:
/// (apply s, destroy s).
fn terraform_run(
    w: &World,
    cfg: &Config,
    dir: &std::path::Path,
    level: usize,
    seen: &mut BTreeSet<Seen>,
) -> anyhow::Result<(f64, f64)> {
    w.moto.reset()?;
    let p = format!("-parallelism={level}");
    let apply = ["apply", "-auto-approve", "-input=false", "-no-color", &p];
    let applied = terraform_watched(dir, &apply, cfg.gogc, &[0])?;
    seen.extend(applied.seen);
    ensure!(
        w.running("terraform")? == cfg.n,
        "moto does not run {} Terraform instances",
        cfg.n
    );
    let destroy = ["destroy", "-auto-approve", "-input=false", "-no-color", &p];
    let destroyed = terraform_watched(dir, &destroy, cfg.gogc, &[0])?;
    seen.extend(destroyed.seen);
    Ok((applied.took.as_secs_f64(), destroyed.took.as_secs_f64()))
}

/// Every run's numbers at one level.
#[derive(Default)]
struct Level {
    kraken: Vec<KrakenRun>,
    tf: Vec<(f64, f64)>,
}

fn main() -> anyhow::Result<()> {
    knobs::start("ec2")?;
    let cfg = Config {
        n: knob("KRAKEN_BENCH_EC2_N", 100, 2)?,
        runs: knob("KRAKEN_BENCH_EC2_RUNS", 3, 1)?,
        levels: knobs::levels()?,
        gogc: Gogc::from_env()?,
    };
    knobs::retired(&[(
        "KRAKEN_BENCH_EC2_TF_PARALLELISM",
        "KRAKEN_BENCH_PARALLELISM sets both sides at each level",
    )])?;
    let (binary, version) =
        aws_provider().context("the AWS provider test peer (scripts/testenv.sh install)")?;
    let mut w = World::start(cfg.levels[0])?;
    let result = (|| -> anyhow::Result<()> {
        let mut dirs = Vec::new();
        for _ in &cfg.levels {
            dirs.push(terraform_dir(&w.moto.endpoint(), cfg.n, &version)?);
        }
        let mut levels: Vec<Level> = cfg.levels.iter().map(|_| Level::default()).collect();
        let mut seen = BTreeSet::new();
        for run in 0..cfg.runs {
            for ((&level, at), dir) in cfg.levels.iter().zip(&mut levels).zip(&dirs) {
                let k = kraken_run(&mut w, &cfg, level, run)?;
                let t = terraform_run(&w, &cfg, dir.path(), level, &mut seen)?;
                eprintln!(
                    "run {} at parallelism {level}: kraken {} Ready in {:.2} s (p50 {:.2} s; CPU to Ready: moto {:.1} s, operator {:.1} s), deleted in {:.2} s, {:.2} API writes each; terraform apply {:.2} s, destroy {:.2} s",
                    run + 1,
                    cfg.n,
                    k.all,
                    k.p50,
                    k.moto_cpu,
                    k.op_cpu,
                    k.delete,
                    k.writes,
                    t.0,
                    t.1
                );
                at.kraken.push(k);
                at.tf.push(t);
            }
        }
        let same = fair::terraform_provider(&binary, cfg.gogc, &seen)?;
        print(&cfg, &version, &levels, &same)
    })();
    w.bed.finish(result)
}

fn print(
    cfg: &Config,
    version: &str,
    levels: &[Level],
    same: &fair::Identity,
) -> anyhow::Result<()> {
    let (n, runs) = (cfg.n, cfg.runs);
    println!(
        "### {n} EC2 instances against moto: apply → all running ({runs} interleaved runs, medians)\n"
    );
    println!(
        "| tool | parallelism | apply → all running s | p50 per instance s | delete → all terminated s | API writes per instance | CPU s to all running: moto / operator |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut ratios = Ratios::default();
    for (&level, at) in cfg.levels.iter().zip(levels) {
        let col = |f: fn(&KrakenRun) -> f64| median(at.kraken.iter().map(f).collect());
        let (apply, destroy) = (
            median(at.tf.iter().map(|t| t.0).collect()),
            median(at.tf.iter().map(|t| t.1).collect()),
        );
        println!(
            "| Kraken (EC2Instance, native SDK), `--concurrency {level}` | {level} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} / {:.1} |",
            col(|k| k.all),
            col(|k| k.p50),
            col(|k| k.delete),
            col(|k| k.writes),
            col(|k| k.moto_cpu),
            col(|k| k.op_cpu)
        );
        println!(
            "| Terraform 1.8.5 + hashicorp/aws {version} (`-parallelism={level}`) | {level} | {apply:.2} | — | {destroy:.2} | — | — |"
        );
        ratios.add("apply → all running", level, col(|k| k.all), apply)?;
        ratios.add("delete → all terminated", level, col(|k| k.delete), destroy)?;
    }
    ratios.print(&[
        "at each P, the operator's `--concurrency P` (EC2Instances reconciled at once) beside Terraform's `-parallelism=P`".to_owned(),
        cfg.gogc.describe(),
        format!("{same}; Kraken's native path runs no provider process"),
    ])
}

//! Native EC2 benchmark: `cargo bench -p kraken-tests --bench ec2`.
//!
//! N EC2Instances (count 1 each) applied with one `kubectl apply`, timed until every one is
//! Ready (its instance running in moto), watched through the kube client. Then deleted, timed
//! until every instance is terminated. Side by side in the same run and against the same moto:
//! `terraform apply` of N `aws_instance` resources with the real hashicorp/aws provider pointed
//! at moto (its `endpoints { ec2 = ... }`), when the provider binary is in the test cache
//! (a test peer: `scripts/testenv.sh install`); without it that row says so. Runs are interleaved, each on a
//! fresh moto state; the table reports medians.
//!
//! Knobs: `KRAKEN_BENCH_EC2_N` (default 100), `KRAKEN_BENCH_EC2_RUNS` (default 3),
//! `KRAKEN_BENCH_EC2_TF_PARALLELISM` (default 10, Terraform's default).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kraken_tests::bench::{api_writes as writes, aws_provider, env_or, median, pct, terraform};
use kraken_tests::moto::{AMI, Ec2Probe, Moto, REGION, cpu_seconds};
use kraken_tests::operator::bed::yaml_documents;
use kraken_tests::operator::{FixtureBed, OperatorOptions};
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
    let mut seen = std::collections::BTreeMap::new();
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
    Ok(dir)
}

fn main() -> anyhow::Result<()> {
    let n: usize = env_or("KRAKEN_BENCH_EC2_N", 100)?;
    let runs: usize = env_or("KRAKEN_BENCH_EC2_RUNS", 3)?;
    let parallelism: usize = env_or("KRAKEN_BENCH_EC2_TF_PARALLELISM", 10)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let opts = OperatorOptions {
        label: "ec2".into(),
        rust_log: "warn".into(),
        leader_elect: false,
        env: vec![
            ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
            ("AWS_REGION".into(), REGION.into()),
        ],
        // moto on loopback: the operator allows only the endpoints it is told to.
        args: vec!["--aws-endpoint".into(), "http://127.0.0.1:*".into()],
        ..OperatorOptions::default()
    };
    let bed = FixtureBed::start("bench-ec2", opts)?;
    let moto = Moto::start(bed.cp.run_dir())?;
    let probe = Ec2Probe::new(&moto.endpoint())?;
    let aws = aws_provider().ok();
    let result = (|| -> anyhow::Result<()> {
        let ns = bed.ns.clone();
        let kc = rt.block_on(kraken_tests::bench::kube_client(bed.cp.kubeconfig()))?;
        bed.apply(&yaml_documents(&[
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "aws-creds", "namespace": ns},
                   "stringData": {"id": "testing", "secret": "testing"}}),
            json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "AwsConfig",
                   "metadata": {"name": "moto", "namespace": ns},
                   "spec": {"region": REGION, "endpoint": moto.endpoint(), "credentials": {
                       "accessKeyIdSecretRef": {"name": "aws-creds", "key": "id"},
                       "secretAccessKeySecretRef": {"name": "aws-creds", "key": "secret"}}}}),
        ]))?;
        let mut kraken_all = Vec::new();
        let mut kraken_p50 = Vec::new();
        let mut kraken_delete = Vec::new();
        let mut kraken_writes = Vec::new();
        let mut kraken_moto_cpu = Vec::new();
        let mut kraken_op_cpu = Vec::new();
        let mut tf_apply = Vec::new();
        let mut tf_destroy = Vec::new();
        for run in 0..runs {
            // Kraken.
            let prefix = format!("r{run}");
            let docs: Vec<Value> = (0..n)
                .map(|i| {
                    json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "EC2Instance",
                           "metadata": {"name": format!("{prefix}-{i}"), "namespace": ns},
                           "spec": {"awsConfigRef": {"name": "moto"}, "imageId": AMI,
                                    "instanceType": "t3.micro", "tags": {"bench": "kraken"}}})
                })
                .collect();
            moto.reset()?;
            let op_pid = bed.op.pid().context("the operator is not running")?;
            let (moto0, op0) = (cpu_seconds(moto.pid())?, cpu_seconds(op_pid)?);
            let w0 = writes(&bed.op.metrics()?);
            let start = Instant::now();
            bed.apply(&yaml_documents(&docs))?;
            let times = rt.block_on(wait_ready(&kc, &ns, &prefix, n, start))?;
            let all = times.iter().max().copied().unwrap_or_default();
            let (moto_cpu, op_cpu) = (cpu_seconds(moto.pid())? - moto0, cpu_seconds(op_pid)? - op0);
            std::thread::sleep(Duration::from_secs(2));
            let w = (writes(&bed.op.metrics()?) - w0) / n as f64;
            let live: BTreeSet<String> = probe
                .instances(&[("tag:bench", "kraken"), ("instance-state-name", "running")])?
                .into_iter()
                .map(|i| i.id)
                .collect();
            if live.len() != n {
                bail!("moto runs {} Kraken instances, expected {n}", live.len());
            }
            let start = Instant::now();
            bed.cp.kubectl(&[
                "delete",
                "ec2instances.aws.kraken.dev",
                "--all",
                "-n",
                &ns,
                "--wait=false",
            ])?;
            wait_for(Duration::from_secs(600), "every EC2Instance gone", || {
                let left = bed.cp.kubectl(&[
                    "get",
                    "ec2instances.aws.kraken.dev",
                    "-n",
                    &ns,
                    "-o",
                    "name",
                ])?;
                if left.trim().is_empty() {
                    Ok(Some(()))
                } else {
                    bail!("{} left", left.lines().count())
                }
            })?;
            let deleted = start.elapsed();
            let running =
                probe.instances(&[("tag:bench", "kraken"), ("instance-state-name", "running")])?;
            if !running.is_empty() {
                bail!(
                    "{} Kraken instances still run after deletion",
                    running.len()
                );
            }
            eprintln!(
                "run {}: kraken {n} Ready in {:.2} s (p50 {:.2} s; CPU to Ready: moto {moto_cpu:.1} s, operator {op_cpu:.1} s), deleted in {:.2} s, {w:.2} API writes each",
                run + 1,
                all.as_secs_f64(),
                pct(&times, 0.5).as_secs_f64(),
                deleted.as_secs_f64()
            );
            kraken_moto_cpu.push(moto_cpu);
            kraken_op_cpu.push(op_cpu);
            kraken_all.push(all.as_secs_f64());
            kraken_p50.push(pct(&times, 0.5).as_secs_f64());
            kraken_delete.push(deleted.as_secs_f64());
            kraken_writes.push(w);

            // Terraform, same moto.
            if let Some((_, version)) = &aws {
                moto.reset()?;
                let dir = terraform_dir(&moto.endpoint(), n, version)?;
                terraform(dir.path(), &["init", "-input=false", "-no-color"])?;
                let p = format!("-parallelism={parallelism}");
                let start = Instant::now();
                terraform(
                    dir.path(),
                    &["apply", "-auto-approve", "-input=false", "-no-color", &p],
                )?;
                let applied = start.elapsed();
                let running = probe.instances(&[
                    ("tag:bench", "terraform"),
                    ("instance-state-name", "running"),
                ])?;
                if running.len() != n {
                    bail!(
                        "moto runs {} Terraform instances, expected {n}",
                        running.len()
                    );
                }
                let start = Instant::now();
                terraform(
                    dir.path(),
                    &["destroy", "-auto-approve", "-input=false", "-no-color", &p],
                )?;
                let destroyed = start.elapsed();
                eprintln!(
                    "run {}: terraform apply {:.2} s, destroy {:.2} s",
                    run + 1,
                    applied.as_secs_f64(),
                    destroyed.as_secs_f64()
                );
                tf_apply.push(applied.as_secs_f64());
                tf_destroy.push(destroyed.as_secs_f64());
            }
        }
        println!(
            "### {n} EC2 instances against moto: apply → all running ({runs} interleaved runs, medians)\n"
        );
        println!(
            "| tool | apply → all running s | p50 per instance s | delete → all terminated s | API writes per instance | CPU s to all running: moto / operator |"
        );
        println!("|---|---|---|---|---|---|");
        println!(
            "| Kraken (EC2Instance, native SDK) | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} / {:.1} |",
            median(kraken_all.clone()),
            median(kraken_p50),
            median(kraken_delete.clone()),
            median(kraken_writes),
            median(kraken_moto_cpu),
            median(kraken_op_cpu)
        );
        match &aws {
            Some((_, version)) => {
                println!(
                    "| Terraform 1.8.5 + hashicorp/aws {version} (`-parallelism={parallelism}`) | {:.2} | — | {:.2} | — | — |",
                    median(tf_apply.clone()),
                    median(tf_destroy.clone())
                );
                println!(
                    "\nratio Kraken / Terraform: apply {:.2}, delete {:.2}",
                    median(kraken_all) / median(tf_apply),
                    median(kraken_delete) / median(tf_destroy)
                );
            }
            None => println!(
                "| Terraform + hashicorp/aws | not measured: the AWS provider test peer is not installed (`scripts/testenv.sh install`) | | | | |"
            ),
        }
        Ok(())
    })();
    bed.finish(result)
}

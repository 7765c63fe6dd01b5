//! hashicorp/aws through the bridge, side by side with Terraform driving the same provider
//! binary against the same moto: `cargo bench -p kraken-tests --bench aws`.
//!
//! 100 `aws_instance` + 100 `aws_sqs_queue` + 100 `aws_sns_topic` (the third type stands in
//! for `aws_s3_bucket`, which hashicorp/aws 6.34 cannot read back from an emulator on
//! loopback: it reads bucket tags through S3 Control at `<account>.<endpoint host>`, for
//! Terraform as well). Measured in one run:
//! - apply → all 300 Ready (Kraken, one `kubectl apply`) vs `terraform apply
//!   -parallelism=10` from empty;
//! - one change among the 300 (a queue's visibility timeout): Kraken from the patch to the
//!   object reconciled at its new generation, vs Terraform's `apply`, which refreshes all 300
//!   first; moto's own latency for one request beside them;
//! - with `KRAKEN_BENCH_AWS_DELETE=1`, delete all vs `terraform destroy` (long: the
//!   provider waits about a minute on each queue it deletes, for either tool);
//! - peak and settled RSS of the operator and of the AWS provider process under it, and of
//!   Terraform with its provider; the operator's API writes per resource.
//!
//! Kraken runs once per operator build and `maxConcurrency` of its ProviderConfig (RPCs in flight per provider
//! process), default `10`, the same as Terraform's `-parallelism` default.
//!
//! Knobs: `KRAKEN_BENCH_AWS_N` (per type, default 100), `KRAKEN_BENCH_AWS_CHANGES` (Kraken
//! change samples, default 10), `KRAKEN_BENCH_AWS_TF_CHANGES` (default 3),
//! `KRAKEN_BENCH_AWS_CONCURRENCY` (comma-separated, default `10`),
//! `KRAKEN_BENCH_AWS_TF_PARALLELISM` (default 10), `KRAKEN_BENCH_OPERATORS`
//! (`label=path,...`: the operator builds to run, one Kraken pass each, in one run), and
//! `KRAKEN_BENCH_AWS_PROVIDER_ENV` (`;`-separated variants of the provider processes'
//! environment, each `NAME=value,...` or empty for none, one Kraken pass each: for example
//! `;GOGC=50` compares Go's default collector with a tighter one, side by side).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use futures::StreamExt as _;
use kraken_tests::bench::{
    OperatorBuild, RssSampler, api_writes, aws_provider, env_or, median, operator_builds, pct,
    processes_named, terraform,
};
use kraken_tests::moto::{AMI, Ec2Probe};
use kraken_tests::operator::aws::{AwsBed, GROUP, INSTANCE, Kind, QUEUE, TOPIC};
use kraken_tests::operator::bed::is_reconciled;
use kraken_tests::operator::{OperatorOptions, descendants};
use kraken_tests::wait_for;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RESOURCES: &[&str] = &["aws_instance", "aws_sqs_queue", "aws_sns_topic"];
const KINDS: [&Kind; 3] = [&INSTANCE, &QUEUE, &TOPIC];
const MIB: f64 = 1024.0 * 1024.0;

fn api_resource(kind: &Kind) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: "v1alpha1".into(),
        api_version: format!("{GROUP}/v1alpha1"),
        kind: kind.0.into(),
        plural: kraken_codegen::names::plural_for(kind.0),
    }
}

fn api(client: &kube::Client, ns: &str, kind: &Kind) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &api_resource(kind))
}

/// The 300 manifests: `i-<k>`, `q-<k>`, `t-<k>`. No drift interval: the default one (10m)
/// keeps drift reads out of the measured minutes.
fn manifests(ns: &str, n: usize) -> Vec<Value> {
    let one = |kind: &Kind, name: String, for_provider: Value| {
        json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": kind.0,
               "metadata": {"name": name, "namespace": ns},
               "spec": {"providerConfigRef": {"name": "aws"}, "forProvider": for_provider}})
    };
    (0..n)
        .flat_map(|k| {
            [
                one(
                    &INSTANCE,
                    format!("i-{k}"),
                    json!({"ami": AMI, "instanceType": "t3.micro", "tags": {"bench": "kraken"}}),
                ),
                one(
                    &QUEUE,
                    format!("q-{k}"),
                    json!({"name": format!("kraken-q-{k}"), "visibilityTimeoutSeconds": 30}),
                ),
                one(
                    &TOPIC,
                    format!("t-{k}"),
                    json!({"name": format!("kraken-t-{k}")}),
                ),
            ]
        })
        .collect()
}

/// Watches the three kinds until `n` objects are reconciled at their generation; each one's
/// time since `start`.
async fn wait_ready(
    client: &kube::Client,
    ns: &str,
    n: usize,
    start: Instant,
) -> anyhow::Result<Vec<Duration>> {
    let streams = KINDS.map(|kind| {
        let api = api(client, ns, kind);
        watcher(api, watcher::Config::default())
            .applied_objects()
            .map(move |o| (kind.0, o))
            .boxed()
    });
    let mut all = futures::stream::select_all(streams);
    let mut seen = BTreeMap::new();
    let deadline = tokio::time::sleep(Duration::from_secs(900));
    let mut deadline = std::pin::pin!(deadline);
    loop {
        let (kind, o) = tokio::select! {
            next = all.next() => match next {
                Some((kind, Ok(o))) => (kind, o),
                Some((kind, Err(e))) => bail!("watching {kind}: {e}"),
                None => bail!("the watches ended"),
            },
            () = &mut deadline => bail!("only {} of {n} reconciled after 900 s", seen.len()),
        };
        let now = start.elapsed();
        let key = (kind, o.metadata.name.clone().unwrap_or_default());
        if !seen.contains_key(&key) && is_reconciled(&serde_json::to_value(&o)?) {
            seen.insert(key, now);
            if seen.len() >= n {
                return Ok(seen.into_values().collect());
            }
        }
    }
}

/// What a change sample edits: an instance's tags (the provider's update is a CreateTags
/// and a read), or a queue's visibility timeout (the provider then polls until SQS shows the
/// new attributes several times in a row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    InstanceTag,
    QueueTimeout,
}

impl Target {
    fn kind(self) -> &'static Kind {
        match self {
            Target::InstanceTag => &INSTANCE,
            Target::QueueTimeout => &QUEUE,
        }
    }

    /// The object of sample `c` (spread over the 100), by its index.
    fn index(c: usize, n: usize) -> usize {
        c * 7 % n
    }

    fn patch(self, c: usize) -> Value {
        match self {
            Target::InstanceTag => {
                json!({"spec": {"forProvider": {"tags": {"bench": "kraken", "change": c.to_string()}}}})
            }
            Target::QueueTimeout => {
                json!({"spec": {"forProvider": {"visibilityTimeoutSeconds": 40 + c}}})
            }
        }
    }

    fn label(self) -> &'static str {
        match self {
            Target::InstanceTag => "an instance's tag",
            Target::QueueTimeout => "a queue's visibility timeout",
        }
    }
}

/// Applies sample `c` of `target` and waits until the object is reconciled at the new
/// generation: the time from the patch.
async fn change(
    client: &kube::Client,
    ns: &str,
    target: Target,
    c: usize,
    n: usize,
) -> anyhow::Result<Duration> {
    let api = api(client, ns, target.kind());
    let name = format!(
        "{}-{}",
        if target == Target::InstanceTag {
            "i"
        } else {
            "q"
        },
        Target::index(c, n)
    );
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(watcher(api.clone(), config).applied_objects());
    let start = Instant::now();
    let patched = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&target.patch(c)),
        )
        .await?;
    let generation = patched.metadata.generation.context("no generation")?;
    let wait = async {
        while let Some(o) = stream.next().await {
            let o = o?;
            let at = o.metadata.generation.unwrap_or_default();
            if at >= generation && is_reconciled(&serde_json::to_value(&o)?) {
                return Ok(start.elapsed());
            }
        }
        bail!("the watch of {name} ended")
    };
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .with_context(|| format!("{name} not reconciled 120 s after the change"))?
}

/// What one Kraken pass measured.
struct KrakenRun {
    /// The operator build (`KRAKEN_BENCH_OPERATORS`, else `head`).
    build: String,
    concurrency: u32,
    ready: Vec<Duration>,
    /// Per target: the samples.
    changes: Vec<(Target, Vec<Duration>)>,
    /// With `KRAKEN_BENCH_AWS_DELETE=1`.
    deleted: Option<Duration>,
    writes_per_create: f64,
    writes_per_change: f64,
    /// (peak, settled) per group: operator, providers.
    memory: Vec<(u64, u64)>,
    operator_idle: u64,
}

/// One bed: Kraken's pass, then (when `terraform` gives its change samples and parallelism)
/// Terraform's against the same moto, reset in between.
fn pass(
    build: &OperatorBuild,
    provider_env: &[(String, String)],
    concurrency: u32,
    n: usize,
    changes: usize,
    terraform: Option<(usize, usize)>,
) -> anyhow::Result<(KrakenRun, f64, Option<TerraformRun>)> {
    // The administrator's way to set a provider's environment: the variable in the
    // operator's environment, passed on with `--provider-env`.
    let opts = OperatorOptions {
        label: format!("aws-{}-{concurrency}", build.label),
        rust_log: "warn".into(),
        leader_elect: false,
        bin: Some(build.bin.clone()),
        env: provider_env.to_vec(),
        args: provider_env
            .iter()
            .flat_map(|(k, _)| ["--provider-env".to_owned(), k.clone()])
            .collect(),
        ..OperatorOptions::default()
    };
    let name = format!("bench-aws-{}-{concurrency}", build.label);
    let ab = AwsBed::start_with(&name, opts, (RESOURCES, &[]))?;
    let result = (|| {
        let (mut run, moto_ms) = kraken_measure(&ab, concurrency, n, changes)?;
        run.build = build.label.clone();
        eprintln!(
            "kraken {} maxConcurrency {concurrency}: {} Ready in {:.1} s, changes p50 {}, memory (peak, after) operator {:?} provider {:?}",
            build.label,
            run.ready.len(),
            secs(run.ready.iter().max().unwrap_or(&Duration::ZERO)),
            p50s(&run.changes),
            run.memory.first(),
            run.memory.get(1)
        );
        let tf = match terraform {
            Some((changes, parallelism)) => {
                ab.moto.reset()?;
                Some(terraform_pass(&ab, n, changes, parallelism)?)
            }
            None => None,
        };
        Ok((run, moto_ms, tf))
    })();
    ab.bed.finish(result)
}

fn kraken_measure(
    ab: &AwsBed,
    concurrency: u32,
    n: usize,
    changes: usize,
) -> anyhow::Result<(KrakenRun, f64)> {
    let ns = ab.ns().to_owned();
    let op = ab.bed.op.pid().context("the operator is not running")?;
    let pc_api = "providerconfigs.core.kraken.dev";
    let before = ab.bed.cp.get_json(&ns, pc_api, "aws")?;
    let changed = before["spec"]["maxConcurrency"].as_u64().unwrap_or(10) != u64::from(concurrency);
    let old: Vec<u32> = descendants(op)?.into_iter().skip(1).collect();
    ab.bed.cp.kubectl(&[
        "patch",
        pc_api,
        "aws",
        "-n",
        &ns,
        "--type",
        "merge",
        "-p",
        &json!({"spec": {"maxConcurrency": concurrency}}).to_string(),
    ])?;
    // A new maxConcurrency is a new ProviderConfig generation, served by a new provider
    // process; the old one is shut down once nothing holds it. Sample only after that: the
    // two side by side for a moment are not what the 300 resources cost.
    wait_for(
        Duration::from_secs(180),
        "the ProviderConfig served by one provider process of its current generation",
        || {
            let providers: Vec<u32> = descendants(op)?.into_iter().skip(1).collect();
            let fresh = providers.iter().all(|p| !changed || !old.contains(p));
            if providers.len() == 1 && fresh {
                Ok(Some(()))
            } else {
                bail!("provider processes {providers:?} (before the patch: {old:?})")
            }
        },
    )?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = rt.block_on(kraken_tests::bench::kube_client(ab.bed.cp.kubeconfig()))?;
    let operator_idle = kraken_tests::rss_bytes(op)?;
    let sampler = RssSampler::start(vec![
        Box::new(move || vec![op]),
        Box::new(move || {
            descendants(op)
                .unwrap_or_default()
                .into_iter()
                .skip(1)
                .collect()
        }),
        // Both at one instant: what the two take together.
        Box::new(move || {
            let mut both = vec![op];
            both.extend(descendants(op).unwrap_or_default().into_iter().skip(1));
            both
        }),
    ]);
    let w0 = api_writes(&ab.bed.op.metrics()?);
    let start = Instant::now();
    ab.apply(&manifests(&ns, n))?;
    let ready = rt.block_on(wait_ready(&client, &ns, 3 * n, start))?;
    std::thread::sleep(Duration::from_secs(2));
    let w1 = api_writes(&ab.bed.op.metrics()?);
    check_moto(ab, n)?;
    let mut samples = Vec::new();
    let mut count = 0;
    for (target, k) in [
        (Target::InstanceTag, changes),
        (Target::QueueTimeout, changes.div_ceil(3)),
    ] {
        let mut times = Vec::new();
        for c in 0..k {
            times.push(rt.block_on(change(&client, &ns, target, c, n))?);
        }
        count += k;
        samples.push((target, times));
    }
    std::thread::sleep(Duration::from_secs(2));
    let w2 = api_writes(&ab.bed.op.metrics()?);
    check_changes(ab, n, changes)?;
    // Settle, then the resident sets as they stay.
    std::thread::sleep(Duration::from_secs(5));
    let memory = sampler.finish();
    let moto_ms = moto_latency(ab)?;
    let deleted = if deletes() {
        Some(delete_all(ab, &ns)?)
    } else {
        None
    };
    let run = KrakenRun {
        build: String::new(),
        concurrency,
        ready,
        changes: samples,
        deleted,
        writes_per_create: (w1 - w0) / (3 * n) as f64,
        writes_per_change: (w2 - w1) / count as f64,
        memory,
        operator_idle,
    };
    Ok((run, moto_ms))
}

/// `KRAKEN_BENCH_AWS_DELETE=1`: also time deleting everything (the provider's delete waiters
/// make it long: about a minute per SQS queue, ten at a time, for either tool).
fn deletes() -> bool {
    std::env::var("KRAKEN_BENCH_AWS_DELETE").is_ok_and(|v| v == "1")
}

fn delete_all(ab: &AwsBed, ns: &str) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let kinds: Vec<String> = KINDS.iter().map(|k| k.resource()).collect();
    ab.bed.cp.kubectl(&[
        "delete",
        &kinds.join(","),
        "--all",
        "-n",
        ns,
        "--wait=false",
    ])?;
    wait_for(Duration::from_secs(900), "every AWS object deleted", || {
        let left = ab
            .bed
            .cp
            .kubectl(&["get", &kinds.join(","), "-n", ns, "-o", "name"])?;
        if left.trim().is_empty() {
            Ok(Some(()))
        } else {
            bail!("{} left", left.lines().count())
        }
    })?;
    Ok(start.elapsed())
}

fn queue_url(ab: &AwsBed, name: &str) -> anyhow::Result<String> {
    let answer = ab
        .api
        .call("sqs", "get_queue_url", &json!({"QueueName": name}))?;
    answer["QueueUrl"]
        .as_str()
        .map(str::to_owned)
        .context("no QueueUrl")
}

/// moto shows the last sample of each target (read through aws-sdk and boto3).
fn check_changes(ab: &AwsBed, n: usize, changes: usize) -> anyhow::Result<()> {
    let probe = Ec2Probe::new(&ab.moto.endpoint())?;
    let last = changes - 1;
    let want = last.to_string();
    let tagged = probe.instances(&[("tag:change", want.as_str())])?;
    ensure!(
        tagged.len() == 1,
        "{} instances show the tag change={want}, expected 1",
        tagged.len()
    );
    let q = Target::index(changes.div_ceil(3) - 1, n);
    let url = queue_url(ab, &format!("kraken-q-{q}"))?;
    let attrs = ab.api.call(
        "sqs",
        "get_queue_attributes",
        &json!({"QueueUrl": url, "AttributeNames": ["VisibilityTimeout"]}),
    )?;
    let want = (40 + changes.div_ceil(3) - 1).to_string();
    ensure!(
        attrs["Attributes"]["VisibilityTimeout"] == json!(want),
        "moto's queue kraken-q-{q} does not show the last change: {attrs}"
    );
    Ok(())
}

/// moto holds what the bench asked for, read through boto3.
fn check_moto(ab: &AwsBed, n: usize) -> anyhow::Result<()> {
    let probe = Ec2Probe::new(&ab.moto.endpoint())?;
    let running =
        probe.instances(&[("tag:bench", "kraken"), ("instance-state-name", "running")])?;
    ensure!(
        running.len() == n,
        "moto runs {} instances, expected {n}",
        running.len()
    );
    let queues = ab.api.call(
        "sqs",
        "list_queues",
        &json!({"QueueNamePrefix": "kraken-q-", "MaxResults": 1000}),
    )?;
    let count = queues["QueueUrls"].as_array().map_or(0, Vec::len);
    ensure!(count == n, "moto holds {count} queues, expected {n}");
    Ok(())
}

/// moto's median latency for one request (DescribeInstances of one instance), ms.
fn moto_latency(ab: &AwsBed) -> anyhow::Result<f64> {
    let probe = Ec2Probe::new(&ab.moto.endpoint())?;
    let id = probe
        .instances(&[("tag:bench", "kraken")])?
        .first()
        .map(|i| i.id.clone())
        .context("no instance to describe")?;
    let mut times = Vec::new();
    for _ in 0..21 {
        let start = Instant::now();
        probe.instance(&id)?;
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(median(times))
}

/// A Terraform working directory with the same 300 resources against `endpoint`; the change
/// samples set the map variables `tags` (instance index → extra tags) and `vts` (queue index
/// → visibility timeout).
fn terraform_dir(endpoint: &str, n: usize, version: &str) -> anyhow::Result<tempfile::TempDir> {
    let dir = kraken_tests::scratch_dir("kraken-bench-aws-tf-")?;
    let header =
        kraken_tests::bench::aws_terraform_header(endpoint, version, &["ec2", "sqs", "sns"]);
    let main = format!(
        r#"{header}variable "vts" {{
  type    = map(number)
  default = {{}}
}}
variable "tags" {{
  type    = map(map(string))
  default = {{}}
}}
resource "aws_instance" "i" {{
  count         = {n}
  ami           = "{AMI}"
  instance_type = "t3.micro"
  tags          = merge({{ bench = "terraform" }}, lookup(var.tags, tostring(count.index), {{}}))
}}
resource "aws_sqs_queue" "q" {{
  count                      = {n}
  name                       = "tf-q-${{count.index}}"
  visibility_timeout_seconds = lookup(var.vts, tostring(count.index), 30)
}}
resource "aws_sns_topic" "t" {{
  count = {n}
  name  = "tf-t-${{count.index}}"
}}
"#
    );
    std::fs::write(dir.path().join("main.tf"), main)?;
    Ok(dir)
}

/// What the Terraform pass measured.
struct TerraformRun {
    apply: Duration,
    changes: Vec<(Target, Vec<Duration>)>,
    /// With `KRAKEN_BENCH_AWS_DELETE=1`.
    destroy: Option<Duration>,
    /// (peak, settled) of terraform and its provider process.
    memory: (u64, u64),
}

fn terraform_pass(
    ab: &AwsBed,
    n: usize,
    changes: usize,
    parallelism: usize,
) -> anyhow::Result<TerraformRun> {
    let (_, version) = aws_provider()?;
    let dir = terraform_dir(&ab.moto.endpoint(), n, &version)?;
    terraform(dir.path(), &["init", "-input=false", "-no-color"])?;
    let p = format!("-parallelism={parallelism}");
    let apply = [
        "apply",
        "-auto-approve",
        "-input=false",
        "-no-color",
        p.as_str(),
    ];
    let cli = kraken_tests::TestEnv::load()?.path("KRAKEN_TEST_TERRAFORM")?;
    let cli = cli
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .context("the Terraform CLI path has no file name")?;
    let sampler = RssSampler::start(vec![Box::new(move || processes_named(&cli))]);
    let start = Instant::now();
    terraform(dir.path(), &apply)?;
    let applied = start.elapsed();
    let (mut tags, mut vts) = (serde_json::Map::new(), serde_json::Map::new());
    let mut samples = Vec::new();
    for (target, k) in [(Target::InstanceTag, changes), (Target::QueueTimeout, 1)] {
        let mut times = Vec::new();
        for c in 0..k {
            let i = Target::index(c, n).to_string();
            match target {
                Target::InstanceTag => tags.insert(i, json!({"change": c.to_string()})),
                Target::QueueTimeout => vts.insert(i, json!(40 + c)),
            };
            let vars = json!({"tags": tags, "vts": vts}).to_string();
            std::fs::write(dir.path().join("terraform.tfvars.json"), vars)?;
            let start = Instant::now();
            terraform(dir.path(), &apply)?;
            times.push(start.elapsed());
        }
        samples.push((target, times));
    }
    let memory = sampler.finish().first().copied().unwrap_or_default();
    let destroy = if deletes() {
        let start = Instant::now();
        let args = ["destroy", "-auto-approve", "-input=false", "-no-color", &p];
        terraform(dir.path(), &args)?;
        Some(start.elapsed())
    } else {
        None
    };
    Ok(TerraformRun {
        apply: applied,
        changes: samples,
        destroy,
        memory,
    })
}

fn main() -> anyhow::Result<()> {
    let n: usize = env_or("KRAKEN_BENCH_AWS_N", 100)?;
    let changes: usize = env_or("KRAKEN_BENCH_AWS_CHANGES", 10)?;
    let tf_changes: usize = env_or("KRAKEN_BENCH_AWS_TF_CHANGES", 3)?;
    let parallelism: usize = env_or("KRAKEN_BENCH_AWS_TF_PARALLELISM", 10)?;
    let concurrency: Vec<u32> = std::env::var("KRAKEN_BENCH_AWS_CONCURRENCY")
        .unwrap_or_else(|_| "10".into())
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .context("KRAKEN_BENCH_AWS_CONCURRENCY: numbers, comma-separated")
        })
        .collect::<anyhow::Result<_>>()?;
    ensure!(
        n > 0 && changes > 0,
        "KRAKEN_BENCH_AWS_N and _CHANGES must be at least 1"
    );
    let (_, version) =
        aws_provider().context("the AWS provider test peer (scripts/testenv.sh install)")?;
    let mut runs = Vec::new();
    let mut moto_ms = Vec::new();
    let mut tf = None;
    let variants = provider_env_variants()?;
    let mut passes: Vec<(OperatorBuild, &ProviderEnv, u32)> = Vec::new();
    for build in operator_builds()? {
        for env in &variants {
            for c in &concurrency {
                let mut build = build.clone();
                // The label names the pass's namespace: `head-gogc50` for GOGC=50.
                for (k, v) in env.iter() {
                    let var: String = format!("{k}{v}")
                        .chars()
                        .filter(char::is_ascii_alphanumeric)
                        .collect();
                    build.label = format!("{}-{}", build.label, var.to_ascii_lowercase());
                }
                passes.push((build, env, *c));
            }
        }
    }
    for (i, (build, env, c)) in passes.iter().enumerate() {
        let with_tf = (i == 0).then_some((tf_changes, parallelism));
        let (run, ms, t) = pass(build, env, *c, n, changes, with_tf)?;
        eprintln!(
            "kraken {build} maxConcurrency {c}: {} Ready in {:.1} s, changes p50 {}, deleted in {} s",
            3 * n,
            secs(run.ready.iter().max().unwrap_or(&Duration::ZERO)),
            p50s(&run.changes),
            opt(run.deleted),
            build = build.label
        );
        if let Some(t) = &t {
            eprintln!(
                "terraform: apply {:.1} s, changes median {}, destroy {} s",
                secs(&t.apply),
                p50s(&t.changes),
                opt(t.destroy)
            );
        }
        tf = tf.or(t);
        runs.push(run);
        moto_ms.push(ms);
    }
    let tf = tf.context("no Terraform pass ran")?;
    report(n, &version, parallelism, &runs, &tf, median(moto_ms));
    Ok(())
}

/// Variables set for the provider processes (through the operator's `--provider-env`).
type ProviderEnv = Vec<(String, String)>;

/// `KRAKEN_BENCH_AWS_PROVIDER_ENV`: the provider environments to run, default one (none).
fn provider_env_variants() -> anyhow::Result<Vec<ProviderEnv>> {
    let Ok(spec) = std::env::var("KRAKEN_BENCH_AWS_PROVIDER_ENV") else {
        return Ok(vec![Vec::new()]);
    };
    spec.split(';')
        .map(|variant| {
            variant
                .split(',')
                .filter(|v| !v.trim().is_empty())
                .map(|v| {
                    let (k, val) = v.trim().split_once('=').with_context(|| {
                        format!("KRAKEN_BENCH_AWS_PROVIDER_ENV: {v:?} is not NAME=value")
                    })?;
                    Ok((k.to_owned(), val.to_owned()))
                })
                .collect()
        })
        .collect()
}

/// Seconds with one decimal, or `—` when not measured.
fn opt(d: Option<Duration>) -> String {
    d.map_or_else(|| "—".to_owned(), |d| format!("{:.1}", d.as_secs_f64()))
}

fn secs(d: &Duration) -> f64 {
    d.as_secs_f64()
}

/// The median of each target's samples, for progress lines.
fn p50s(changes: &[(Target, Vec<Duration>)]) -> String {
    let each: Vec<String> = changes
        .iter()
        .map(|(t, v)| format!("{}: {:.2} s", t.label(), secs(&pct(v, 0.5))))
        .collect();
    each.join(", ")
}

fn samples(changes: &[(Target, Vec<Duration>)], target: Target) -> &[Duration] {
    changes
        .iter()
        .find(|(t, _)| *t == target)
        .map_or(&[][..], |(_, v)| v.as_slice())
}

fn report(
    n: usize,
    version: &str,
    parallelism: usize,
    runs: &[KrakenRun],
    tf: &TerraformRun,
    moto_ms: f64,
) {
    println!(
        "### {n} aws_instance + {n} aws_sqs_queue + {n} aws_sns_topic against moto (hashicorp/aws {version})\n"
    );
    println!(
        "| tool | apply → all Ready s | change: an instance's tag, p50 s | change: a queue's visibility timeout, p50 s | delete all s | API writes per create / per change |"
    );
    println!("|---|---|---|---|---|---|");
    let cell = |v: &[Duration]| {
        format!(
            "{:.3} (p90 {:.3}, n={})",
            secs(&pct(v, 0.5)),
            secs(&pct(v, 0.9)),
            v.len()
        )
    };
    for r in runs {
        println!(
            "| Kraken {}, `maxConcurrency: {}` | {:.1} | {} | {} | {} | {:.2} / {:.2} |",
            r.build,
            r.concurrency,
            r.ready.iter().max().map(secs).unwrap_or_default(),
            cell(samples(&r.changes, Target::InstanceTag)),
            cell(samples(&r.changes, Target::QueueTimeout)),
            opt(r.deleted),
            r.writes_per_create,
            r.writes_per_change
        );
    }
    println!(
        "| Terraform 1.8.5, `-parallelism={parallelism}` (a change is an apply: refresh all, plan, apply) | {:.1} | {} | {} | {} | — |",
        secs(&tf.apply),
        cell(samples(&tf.changes, Target::InstanceTag)),
        cell(samples(&tf.changes, Target::QueueTimeout)),
        opt(tf.destroy)
    );
    println!("\nmoto's own latency, one DescribeInstances: {moto_ms:.1} ms (median of 21)\n");
    memory_table(runs, tf);
    if let Some(r) = runs.first() {
        let k = r.ready.iter().max().map(secs).unwrap_or_default();
        let ratio = |t: Target| {
            secs(&pct(samples(&r.changes, t), 0.5)) / secs(&pct(samples(&tf.changes, t), 0.5))
        };
        println!(
            "\nratio Kraken {} (`maxConcurrency: {}`) / Terraform: apply {:.2}, tag change {:.3}, queue change {:.3}, delete {}",
            r.build,
            r.concurrency,
            k / secs(&tf.apply),
            ratio(Target::InstanceTag),
            ratio(Target::QueueTimeout),
            match (r.deleted, tf.destroy) {
                (Some(k), Some(t)) => format!("{:.2}", secs(&k) / secs(&t)),
                _ => "not measured".to_owned(),
            }
        );
    }
}

fn memory_table(runs: &[KrakenRun], tf: &TerraformRun) {
    let mib = |b: u64| format!("{:.0} MiB", b as f64 / MIB);
    println!("| process | idle | peak | after the run |");
    println!("|---|---|---|---|");
    for r in runs {
        let (op, prov) = (r.memory[0], r.memory[1]);
        let c = r.concurrency;
        println!(
            "| Kraken {} operator (release), `maxConcurrency: {c}` | {} | {} | {} |",
            r.build,
            mib(r.operator_idle),
            mib(op.0),
            mib(op.1)
        );
        println!(
            "| its AWS provider process | — | {} | {} |",
            mib(prov.0),
            mib(prov.1)
        );
        let both = r.memory.get(2).copied().unwrap_or_default();
        println!(
            "| operator + provider, at one instant | | {} ({} MB) | {} |",
            mib(both.0),
            both.0 / 1_000_000,
            mib(both.1)
        );
        println!(
            "| operator + provider, each one's peak summed | | {} | {} |",
            mib(op.0 + prov.0),
            mib(op.1 + prov.1)
        );
    }
    println!(
        "| terraform + its AWS provider process | — | {} | — |",
        mib(tf.memory.0)
    );
}

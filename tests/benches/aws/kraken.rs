//! The Kraken side of the AWS bench: the 300 manifests, the watch that sees them Ready, the
//! change samples, and what moto holds afterwards (read through aws-sdk and boto3, not through
//! Kraken).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use futures::StreamExt as _;
use kraken_tests::bench::fair::{provider_pids, providers_below};
use kraken_tests::bench::{RssSampler, Seen, api_writes, median};
use kraken_tests::moto::{AMI, Ec2Probe};
use kraken_tests::operator::aws::{AwsBed, GROUP, INSTANCE, Kind, QUEUE, TOPIC};
use kraken_tests::operator::bed::is_reconciled;
use kraken_tests::wait_for;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::{Value, json};

use crate::Config;

pub const KINDS: [&Kind; 3] = [&INSTANCE, &QUEUE, &TOPIC];

/// The AWS provider's executable name; the bed's fixture ProviderConfig runs a fixture
/// provider beside it, which is not part of what is measured.
const AWS: &str = "terraform-provider-aws";

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

/// The 3 × n manifests: `i-<k>`, `q-<k>`, `t-<k>`. No drift interval: the default one (10m)
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
pub enum Target {
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

    /// The object of sample `c` (spread over the n), by its index.
    pub fn index(c: usize, n: usize) -> usize {
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

    pub fn label(self) -> &'static str {
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
    let prefix = if target == Target::InstanceTag {
        "i"
    } else {
        "q"
    };
    let name = format!("{prefix}-{}", Target::index(c, n));
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
pub struct KrakenRun {
    /// The operator build (`KRAKEN_BENCH_OPERATORS`, else `head`).
    pub build: String,
    /// The ProviderConfig's `maxConcurrency`, the level.
    pub concurrency: usize,
    pub ready: Vec<Duration>,
    /// Per target: the samples.
    pub changes: Vec<(Target, Vec<Duration>)>,
    /// With `KRAKEN_BENCH_AWS_DELETE=1`.
    pub deleted: Option<Duration>,
    pub writes_per_create: f64,
    pub writes_per_change: f64,
    /// (peak, settled) per group: operator, providers, both at one instant.
    pub memory: Vec<(u64, u64)>,
    /// The operator before the Provider was installed.
    pub operator_idle: u64,
    /// moto's median latency for one DescribeInstances, ms.
    pub moto_ms: f64,
    /// The provider processes the operator ran.
    pub seen: Vec<Seen>,
}

/// The ProviderConfig was created at `maxConcurrency: level` (a fresh bed per level): one
/// provider process serves it from the start. Changing it on a running bed would start a
/// second process and leave the first until the provider idle timeout (10 minutes), in the
/// middle of the memory samples.
fn check_level(ab: &AwsBed, level: usize) -> anyhow::Result<()> {
    let pc = ab
        .bed
        .cp
        .get_json(ab.ns(), "providerconfigs.core.kraken.dev", "aws")?;
    ensure!(
        pc["spec"]["maxConcurrency"].as_u64() == Some(level as u64),
        "the ProviderConfig aws has maxConcurrency {}, not {level}",
        pc["spec"]["maxConcurrency"]
    );
    Ok(())
}

/// The memory groups sampled: the operator, its AWS provider process, and both at one instant.
fn sampler(op: u32) -> RssSampler {
    let below = move || provider_pids(op, AWS);
    RssSampler::start(vec![
        Box::new(move || vec![op]),
        Box::new(below),
        Box::new(move || {
            let mut both = vec![op];
            both.extend(below());
            both
        }),
    ])
}

/// One Kraken pass on a fresh bed: the level set, the 3 × n creates, the change samples,
/// optionally the deletes; memory sampled throughout.
pub fn measure(
    ab: &AwsBed,
    cfg: &Config,
    level: usize,
    operator_idle: u64,
) -> anyhow::Result<KrakenRun> {
    let ns = ab.ns().to_owned();
    let op = ab.bed.op.pid().context("the operator is not running")?;
    check_level(ab, level)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = rt.block_on(kraken_tests::bench::kube_client(ab.bed.cp.kubeconfig()))?;
    let sampler = sampler(op);
    let w0 = api_writes(&ab.bed.op.metrics()?);
    let start = Instant::now();
    ab.apply(&manifests(&ns, cfg.n))?;
    let ready = rt.block_on(wait_ready(&client, &ns, 3 * cfg.n, start))?;
    std::thread::sleep(Duration::from_secs(2));
    let w1 = api_writes(&ab.bed.op.metrics()?);
    let seen = providers_below(op, AWS);
    ensure!(
        seen.len() == 1,
        "{} provider processes serve the ProviderConfig, not one: {seen:?}",
        seen.len()
    );
    check_moto(ab, cfg.n)?;
    let samples = rt.block_on(changes(&client, &ns, cfg))?;
    let count: usize = samples.iter().map(|(_, v)| v.len()).sum();
    std::thread::sleep(Duration::from_secs(2));
    let w2 = api_writes(&ab.bed.op.metrics()?);
    check_changes(ab, cfg)?;
    // Settle, then the resident sets as they stay.
    std::thread::sleep(Duration::from_secs(5));
    let memory = sampler.finish();
    let moto_ms = moto_latency(ab)?;
    let deleted = if cfg.delete {
        Some(delete_all(ab, &ns)?)
    } else {
        None
    };
    Ok(KrakenRun {
        build: String::new(),
        concurrency: level,
        ready,
        changes: samples,
        deleted,
        writes_per_create: (w1 - w0) / (3 * cfg.n) as f64,
        writes_per_change: (w2 - w1) / count.max(1) as f64,
        memory,
        operator_idle,
        moto_ms,
        seen,
    })
}

/// The change samples, one at a time: `cfg.changes` instance tags, `cfg.queue_changes`
/// queue timeouts.
async fn changes(
    client: &kube::Client,
    ns: &str,
    cfg: &Config,
) -> anyhow::Result<Vec<(Target, Vec<Duration>)>> {
    let mut samples = Vec::new();
    for (target, k) in [
        (Target::InstanceTag, cfg.changes),
        (Target::QueueTimeout, cfg.queue_changes),
    ] {
        let mut times = Vec::new();
        for c in 0..k {
            times.push(change(client, ns, target, c, cfg.n).await?);
        }
        samples.push((target, times));
    }
    Ok(samples)
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
fn check_changes(ab: &AwsBed, cfg: &Config) -> anyhow::Result<()> {
    let probe = Ec2Probe::new(&ab.moto.endpoint())?;
    if let Some(last) = cfg.changes.checked_sub(1) {
        let want = last.to_string();
        let tagged = probe.instances(&[("tag:change", want.as_str())])?;
        ensure!(
            tagged.len() == 1,
            "{} instances show the tag change={want}, expected 1",
            tagged.len()
        );
    }
    let Some(last) = cfg.queue_changes.checked_sub(1) else {
        return Ok(());
    };
    let q = Target::index(last, cfg.n);
    let url = queue_url(ab, &format!("kraken-q-{q}"))?;
    let attrs = ab.api.call(
        "sqs",
        "get_queue_attributes",
        &json!({"QueueUrl": url, "AttributeNames": ["VisibilityTimeout"]}),
    )?;
    let want = (40 + last).to_string();
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

//! Dependency hub benchmark: `cargo bench -p kraken-tests --bench hub`.
//!
//! One producer (a fixture Object) and N consumers (fixture Objects whose `tags.size` comes
//! from the producer's `size` output through `spec.valuesFrom`). After all are Ready, the
//! producer's `size` changes (an in-place update); the clock runs from that `kubectl patch`
//! until every consumer is Ready at its generation with the new value in
//! `status.atProvider.tags.size`, each consumer's time taken when a watch (the kube client)
//! first sees it so. Also counted: the API objects the hub adds per reference and
//! the operator's API writes (`kraken_api_writes_total`, by resource) for creating the
//! consumers and for one propagation. A real kube-apiserver + etcd, the release operator, the
//! fixture provider (protocol 6) writing its ledger.
//!
//! Knobs: `KRAKEN_BENCH_HUB_CONSUMERS` (default 1000), `KRAKEN_BENCH_HUB_CHANGES` (propagations
//! measured per run, default 3; the table reports the median), `KRAKEN_BENCH_HUB_ROUNDS` (runs
//! per operator build, default 1), `KRAKEN_BENCH_OPERATORS` (`label=path,...`: builds compared
//! side by side, interleaved; default this checkout's release build).
//! `KRAKEN_BENCH_SMOKE=1`: 5 consumers, one propagation.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kraken_tests::bench::{OperatorBuild, knob, operator_builds, pct};
use kraken_tests::operator::bed::{OBJECTS, yaml_documents};
use kraken_tests::operator::{FixtureBed, Operator, OperatorOptions, metric_samples};
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// kraken_api_writes_total by resource (Lease renewals excluded).
fn writes(op: &Operator) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for (labels, v) in metric_samples(&op.metrics()?, "kraken_api_writes_total") {
        let resource = labels
            .iter()
            .find(|(k, _)| k == "resource")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        if resource != "leases" {
            *out.entry(resource).or_insert(0.0) += v;
        }
    }
    Ok(out)
}

fn diff(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>, per: f64) -> (f64, String) {
    let mut total = 0.0;
    let mut parts = Vec::new();
    for (k, v) in after {
        let d = v - before.get(k).copied().unwrap_or(0.0);
        if d > 0.0 {
            total += d;
            parts.push(format!("{k} {:.2}", d / per));
        }
    }
    (total / per, parts.join(", "))
}

fn consumer(ns: &str, i: usize) -> Value {
    json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
           "metadata": {"name": format!("c{i}"), "namespace": ns},
           "spec": {"forProvider": {"name": format!("c{i}"), "size": 1},
                    "driftInterval": "0",
                    "valuesFrom": [{"path": "tags.size", "resource": {"kind": "Object", "name": "producer", "path": "size"}}]}})
}

/// Watches the consumers until all are Ready at their generation with `tags.size == want`;
/// returns each one's time since `start` (a watch, not a poll: listing 1,000 objects ten
/// times a second would load the API server more than the hub does).
async fn wait_consumers(
    client: &kube::Client,
    ns: &str,
    n: usize,
    want: &str,
    start: Instant,
    timeout: Duration,
) -> anyhow::Result<Vec<Duration>> {
    use futures::StreamExt as _;
    use kube::api::{Api, DynamicObject};
    use kube::core::{ApiResource, GroupVersionKind};
    use kube::runtime::{WatchStreamExt as _, watcher};
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fixture.tf.kraken.dev", "v1alpha1", "Object"),
        "objects",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let mut seen: BTreeMap<String, Duration> = BTreeMap::new();
    let stream = watcher(api, watcher::Config::default()).applied_objects();
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::sleep(timeout);
    let mut deadline = std::pin::pin!(deadline);
    loop {
        let o = tokio::select! {
            next = stream.next() => match next {
                Some(Ok(o)) => o,
                Some(Err(e)) => bail!("watching the consumers: {e}"),
                None => bail!("the watch ended"),
            },
            () = &mut deadline => bail!("only {} of {n} consumers had size {want} after {timeout:?}", seen.len()),
        };
        let now = start.elapsed();
        let name = o.metadata.name.clone().unwrap_or_default();
        if name == "producer" || seen.contains_key(&name) {
            continue;
        }
        let status = &o.data["status"];
        let current = status["observedGeneration"].as_i64() == o.metadata.generation;
        let ready = status["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        if current && ready && status["atProvider"]["tags"]["size"] == want {
            seen.insert(name, now);
            if seen.len() >= n {
                return Ok(seen.into_values().collect());
            }
        }
    }
}

/// One build's run: the create, then `changes` propagations.
struct HubRun {
    label: String,
    created_in: Duration,
    create_writes: f64,
    create_breakdown: String,
    drs: usize,
    sds: usize,
    /// Per propagation: (all, p50, p90, first, writes per consumer, breakdown).
    changes: Vec<(Duration, Duration, Duration, Duration, f64, String)>,
}

fn main() -> anyhow::Result<()> {
    kraken_tests::bench::knobs::start("hub")?;
    let n: usize = knob("KRAKEN_BENCH_HUB_CONSUMERS", 1000, 5)?;
    let changes: usize = knob("KRAKEN_BENCH_HUB_CHANGES", 3, 1)?;
    let rounds: usize = knob("KRAKEN_BENCH_HUB_ROUNDS", 1, 1)?;
    anyhow::ensure!(
        n > 0 && changes > 0 && rounds > 0,
        "KRAKEN_BENCH_HUB_CONSUMERS, _CHANGES and _ROUNDS must be at least 1"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let builds = operator_builds()?;
    let mut runs = Vec::new();
    for round in 1..=rounds {
        for build in &builds {
            eprintln!("round {round}/{rounds}, operator {}", build.label);
            runs.push(measure(&rt, n, changes, build)?);
        }
    }
    print(n, changes, &runs)
}

fn measure(
    rt: &tokio::runtime::Runtime,
    n: usize,
    changes: usize,
    build: &OperatorBuild,
) -> anyhow::Result<HubRun> {
    let opts = OperatorOptions {
        label: format!("hub-{}", build.label),
        rust_log: "warn".into(),
        leader_elect: false,
        bin: Some(build.bin.clone()),
        args: build.args.clone(),
        ..OperatorOptions::default()
    };
    let bed = FixtureBed::start(&format!("bench-hub-{}", build.label), opts)?;
    let result = (|| -> anyhow::Result<HubRun> {
        let ns = bed.ns.clone();
        let kc = rt.block_on(kraken_tests::bench::kube_client(bed.cp.kubeconfig()))?;
        bed.apply_object(
            "producer",
            json!({"forProvider": {"name": "producer", "size": 1}}),
        )?;
        bed.wait_reconciled("producer", Duration::from_secs(60))?;

        let before_create = writes(&bed.op)?;
        let t = Instant::now();
        let docs: Vec<Value> = (0..n).map(|i| consumer(&ns, i)).collect();
        for chunk in docs.chunks(200) {
            bed.apply(&yaml_documents(chunk))?;
        }
        rt.block_on(wait_consumers(
            &kc,
            &ns,
            n,
            "1",
            t,
            Duration::from_secs(1800),
        ))?;
        let created_in = t.elapsed();
        std::thread::sleep(Duration::from_secs(3));
        let (create_writes, create_breakdown) = diff(&writes(&bed.op)?, &before_create, n as f64);
        let count = |what: &str| -> anyhow::Result<usize> {
            Ok(bed
                .cp
                .kubectl(&["get", what, "-n", &ns, "-o", "name"])?
                .lines()
                .count())
        };
        let (drs, sds) = (count("dependencyrequests")?, count("statedeclarations")?);
        eprintln!(
            "{n} consumers Ready in {:.1} s; {drs} DependencyRequests, {sds} StateDeclarations",
            created_in.as_secs_f64()
        );
        let mut rows = Vec::new();
        for c in 0..changes {
            rows.push(propagate(rt, &bed, &kc, n, c + 2)?);
        }
        Ok(HubRun {
            label: build.label.clone(),
            created_in,
            create_writes,
            create_breakdown,
            drs,
            sds,
            changes: rows,
        })
    })();
    bed.finish(result)
}

/// Change the producer's `size`; time until every consumer has it.
fn propagate(
    rt: &tokio::runtime::Runtime,
    bed: &FixtureBed,
    kc: &kube::Client,
    n: usize,
    size: usize,
) -> anyhow::Result<(Duration, Duration, Duration, Duration, f64, String)> {
    let ns = &bed.ns;
    let before = writes(&bed.op)?;
    let start = Instant::now();
    bed.cp.kubectl(&[
        "patch",
        OBJECTS,
        "producer",
        "-n",
        ns,
        "--type=merge",
        "-p",
        &format!(r#"{{"spec":{{"forProvider":{{"size":{size}}}}}}}"#),
    ])?;
    let times = rt.block_on(wait_consumers(
        kc,
        ns,
        n,
        &size.to_string(),
        start,
        Duration::from_secs(600),
    ))?;
    std::thread::sleep(Duration::from_secs(3));
    let (w, breakdown) = diff(&writes(&bed.op)?, &before, n as f64);
    let all = times.iter().max().copied().unwrap_or_default();
    eprintln!(
        "size {size}: all {n} consumers in {:.2} s (p50 {:.2} s, p90 {:.2} s), {w:.2} writes/consumer ({breakdown})",
        all.as_secs_f64(),
        pct(&times, 0.5).as_secs_f64(),
        pct(&times, 0.9).as_secs_f64()
    );
    Ok((
        all,
        pct(&times, 0.5),
        pct(&times, 0.9),
        pct(&times, 0.0),
        w,
        breakdown,
    ))
}

fn print(n: usize, changes: usize, runs: &[HubRun]) -> anyhow::Result<()> {
    println!(
        "### One producer, {n} consumers: output change → all consumers Ready with the new value ({changes} changes per run, median by total)\n"
    );
    println!(
        "| build | consumers | all Ready s | every propagation (s) | p50 per consumer s | p90 s | first s | writes per consumer | target |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
    labels.dedup();
    labels.sort();
    labels.dedup();
    for label in &labels {
        let mut rows: Vec<_> = runs
            .iter()
            .filter(|r| r.label == *label)
            .flat_map(|r| r.changes.iter())
            .collect();
        rows.sort_by_key(|r| r.0);
        let all: Vec<String> = rows
            .iter()
            .map(|r| format!("{:.2}", r.0.as_secs_f64()))
            .collect();
        let mid = rows.get(rows.len() / 2).context("no changes measured")?;
        println!(
            "| {label} | {n} | {:.2} | {} | {:.2} | {:.2} | {:.2} | {:.2} ({}) | all < 30 s, p50 < 1 s |",
            mid.0.as_secs_f64(),
            all.join(", "),
            mid.1.as_secs_f64(),
            mid.2.as_secs_f64(),
            mid.3.as_secs_f64(),
            mid.4,
            mid.5
        );
    }
    println!();
    println!("### What a reference costs\n");
    println!(
        "| build | consumers | created and Ready s | DependencyRequests | StateDeclarations | writes per consumer created |"
    );
    println!("|---|---|---|---|---|---|");
    for r in runs {
        println!(
            "| {} | {n} | {:.1} | {} | {} | {:.2} ({}) |",
            r.label,
            r.created_in.as_secs_f64(),
            r.drs,
            r.sds,
            r.create_writes,
            r.create_breakdown
        );
    }
    Ok(())
}

//! Scale-out benchmark: `kraken operator --shards auto` (release build) with 1, 2 and 3 replicas
//! over N fixture objects (default 10,000) on one control plane, printing markdown tables for
//! `docs/benchmarks.md`:
//! 1. create throughput, T objects (default 1,000) applied until all are in the fixture's
//!    ledger, with 1 replica and then with 3 (expect no gain on 2 cores: the API server, etcd,
//!    the replicas and the providers share them);
//! 2. per replica, with every object in place and the ring settled: the operator's RSS above
//!    an idle replica's (its managed-resource memory), objects owned, provider processes and
//!    their RSS — fresh replicas each time (started over the N objects, so none holds memory
//!    of a larger share it had before), for 1, 2 and 3 replicas;
//! 3. fail-over with 3 replicas: one replica SIGKILLed; a third of P objects, its, changed at
//!    once, the rest, the survivors' own, one at a time over three lease durations: when the
//!    killed replica's changes reached the ledger (from the kill: once the survivors took its
//!    share over), and how long each of the survivors' own waited while they took it over,
//!    beside ten such changes made one at a time before the kill.
//!
//! Knobs: `KRAKEN_BENCH_SHARDS_N` (10000), `KRAKEN_BENCH_SHARDS_T` (1000),
//! `KRAKEN_BENCH_SHARDS_P` (60), `KRAKEN_BENCH_SHARDS_MEMORY` (`0`: only sections 1 and the
//! storage table), `KRAKEN_BENCH_OPERATORS` (the first build is used),
//! `KRAKEN_BENCH_OPERATOR_ARGS` (more arguments for every replica, split at spaces).
//! `KRAKEN_BENCH_SMOKE=1`: 40 objects, 8 timed creates, 6 changes at the fail-over, replicas
//! with a 4 s lease, 2 s of quiet instead of 10, no wait for the API server's storage metrics.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kraken_tests::bench::{knob, operator_builds, smoke};
use kraken_tests::operator::bed::{OBJECTS, object_manifest, yaml_documents};
use kraken_tests::operator::{FixtureBed, Operator, OperatorOptions};
use kraken_tests::{ledger, rss_anon_bytes, rss_bytes, wait_for};
use serde_json::json;

const MIB: f64 = 1024.0 * 1024.0;

/// The replicas' lease: the operator's default, or in the smoke mode a short one (its floor
/// is 3 s), so a fail-over is over in seconds.
fn lease() -> Duration {
    Duration::from_secs(if smoke() { 4 } else { 10 })
}

/// How long the replicas must start no reconcile to count as quiet.
fn quiet() -> Duration {
    Duration::from_secs(if smoke() { 2 } else { 10 })
}

fn options(label: &str, bin: &std::path::Path) -> OperatorOptions {
    let lease = format!("{}s", lease().as_secs());
    OperatorOptions {
        label: label.into(),
        rust_log: "info".into(),
        leader_elect: true,
        bin: Some(bin.to_path_buf()),
        env: vec![("POD_NAME".into(), label.into())],
        args: ["--shards", "auto", "--lease-duration", &lease]
            .into_iter()
            .map(String::from)
            .chain(
                std::env::var("KRAKEN_BENCH_OPERATOR_ARGS")
                    .unwrap_or_default()
                    .split_whitespace()
                    .map(String::from),
            )
            .collect(),
        ..OperatorOptions::default()
    }
}

/// Objects `op` manages now (its share).
fn owned(op: &Operator) -> f64 {
    op.metric_where("kraken_managed_resources", |l| {
        l.iter()
            .any(|(k, v)| k == "kind" && v.starts_with("Object."))
    })
    .unwrap_or(0.0)
}

/// Until every replica sees `ops.len()` members and their shares add up to `total`.
fn settle(ops: &[&Operator], total: usize) -> anyhow::Result<Vec<f64>> {
    #[allow(clippy::cast_precision_loss)]
    let (want, n) = (total as f64, ops.len() as f64);
    wait_for(Duration::from_secs(900), "the ring to settle", || {
        let members: Vec<f64> = ops
            .iter()
            .map(|o| o.metric("kraken_shard_members").unwrap_or(0.0))
            .collect();
        let shares: Vec<f64> = ops.iter().map(|o| owned(o)).collect();
        if members.iter().all(|m| *m == n) && (shares.iter().sum::<f64>() - want).abs() < 0.5 {
            Ok(Some(shares))
        } else {
            bail!("members {members:?}, shares {shares:?}")
        }
    })
}

/// Until no replica has started a reconcile for `quiet`.
fn quiesce(ops: &[&Operator], quiet: Duration) -> anyhow::Result<()> {
    let runs = || -> f64 {
        ops.iter()
            .map(|o| o.metric("kraken_reconcile_runs_total").unwrap_or(0.0))
            .sum()
    };
    let (mut seen, mut since) = (runs(), Instant::now());
    let started = Instant::now();
    while since.elapsed() < quiet {
        if started.elapsed() > Duration::from_secs(900) {
            bail!("the replicas never went quiet");
        }
        std::thread::sleep(Duration::from_millis(500));
        let now = runs();
        if (now - seen).abs() > 0.5 {
            (seen, since) = (now, Instant::now());
        }
    }
    Ok(())
}

/// Applies objects `prefix-0..n` (size 1), 1,000 per kubectl call.
fn create(bed: &FixtureBed, prefix: &str, n: usize) -> anyhow::Result<()> {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:05}")).collect();
    for chunk in names.chunks(1000) {
        let docs: Vec<_> = chunk
            .iter()
            .map(|name| {
                object_manifest(
                    &bed.ns,
                    name,
                    json!({"forProvider": {"name": name, "size": 1}}),
                )
            })
            .collect();
        bed.apply(&yaml_documents(&docs))?;
    }
    Ok(())
}

/// Creates `n` objects and times them into the ledger: objects per second.
fn throughput(bed: &FixtureBed, prefix: &str, n: usize) -> anyhow::Result<f64> {
    let before = ledger::live_objects(bed.ledger_dir());
    let started = Instant::now();
    create(bed, prefix, n)?;
    wait_for(
        Duration::from_secs(1800),
        "the creates in the ledger",
        || {
            let live = ledger::live_objects(bed.ledger_dir());
            Ok((live >= before + n).then_some(()))
        },
    )?;
    #[allow(clippy::cast_precision_loss)]
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// A replica's memory: RSS and its private anonymous part (`RssAnon`), and its provider
/// processes' RSS, bytes.
#[derive(Clone, Copy)]
struct Memory {
    rss: f64,
    anon: f64,
    providers: f64,
}

impl Memory {
    fn of(op: &Operator) -> anyhow::Result<Self> {
        let pid = op.pid().context("a replica is not running")?;
        #[allow(clippy::cast_precision_loss)]
        Ok(Self {
            rss: rss_bytes(pid).context("reading a replica's RSS")? as f64,
            anon: rss_anon_bytes(pid).context("reading a replica's RssAnon")? as f64,
            providers: op
                .metric("kraken_provider_resident_memory_bytes")
                .unwrap_or(0.0),
        })
    }
}

/// One replica's numbers: RSS and RssAnon above idle, objects, provider processes and their
/// RSS, and the whole replica (operator and providers, what its container is charged) above
/// idle, MiB.
struct Replica {
    rss: f64,
    anon: f64,
    objects: f64,
    providers: f64,
    provider_rss: f64,
    pod: f64,
}

fn measure(op: &Operator, idle: Memory) -> anyhow::Result<Replica> {
    let now = Memory::of(op)?;
    Ok(Replica {
        rss: (now.rss - idle.rss) / MIB,
        anon: (now.anon - idle.anon) / MIB,
        objects: owned(op),
        providers: op.metric("kraken_provider_processes").unwrap_or(0.0),
        provider_rss: now.providers / MIB,
        pod: (now.rss - idle.rss + now.providers - idle.providers) / MIB,
    })
}

/// Starts `labels` fresh over what is there, waits until they settled and went quiet.
fn fresh(
    bed: &FixtureBed,
    bin: &std::path::Path,
    labels: &[&str],
    total: usize,
) -> anyhow::Result<Vec<Operator>> {
    let mut ops = Vec::new();
    for label in labels {
        ops.push(Operator::start(&bed.cp, options(label, bin))?);
    }
    let refs: Vec<&Operator> = ops.iter().collect();
    settle(&refs, total)?;
    quiesce(&refs, quiet())?;
    Ok(ops)
}

fn main() -> anyhow::Result<()> {
    kraken_tests::bench::knobs::start("shards")?;
    let n: usize = knob("KRAKEN_BENCH_SHARDS_N", 10_000, 40)?;
    let t: usize = knob("KRAKEN_BENCH_SHARDS_T", 1_000, 8)?;
    let p: usize = knob("KRAKEN_BENCH_SHARDS_P", 60, 6)?;
    // The fail-over draws its changes from the first 3P bulk objects.
    anyhow::ensure!(
        n > 2 * t + 3 * p && t > 0 && p > 0,
        "need N > 2T + 3P, T > 0, P > 0"
    );
    let build = operator_builds()?
        .into_iter()
        .next()
        .context("no operator build")?;
    let bin = build.bin.clone();
    let mut bed = FixtureBed::start("bench-shards", options("r1", &bin))?;
    let result = run(&mut bed, &bin, (n, t, p));
    bed.finish(result)
}

fn run(
    bed: &mut FixtureBed,
    bin: &std::path::Path,
    (n, t, p): (usize, usize, usize),
) -> anyhow::Result<()> {
    settle(&[&bed.op], 0)?;
    // The baseline manages one object: its provider process and the operator's client of it are
    // running, which every replica pays once whatever its share.
    create(bed, "idle", 1)?;
    wait_for(
        Duration::from_secs(60),
        "the baseline's object in the ledger",
        || Ok((ledger::live_objects(bed.ledger_dir()) >= 1).then_some(())),
    )?;
    std::thread::sleep(Duration::from_secs(5));
    let idle = Memory::of(&bed.op)?;
    eprintln!(
        "idle replica: {:.1} MiB RSS, {:.1} MiB RssAnon; its provider process {:.1} MiB RSS",
        idle.rss / MIB,
        idle.anon / MIB,
        idle.providers / MIB
    );

    let one = throughput(bed, "t1", t)?;
    eprintln!("1 replica: {one:.1} creates/s");
    create(bed, "bulk", n - 2 * t - 1)?;
    let mut r2 = Operator::start(&bed.cp, options("r2", bin))?;
    let mut r3 = Operator::start(&bed.cp, options("r3", bin))?;
    wait_for(Duration::from_secs(1800), "the bulk in the ledger", || {
        Ok((ledger::live_objects(bed.ledger_dir()) >= n - t).then_some(()))
    })?;
    settle(&[&bed.op, &r2, &r3], n - t)?;
    // The new share's first reconciles (every replica lists and passes over its objects once
    // after a change of share) finish before the creates are timed.
    quiesce(&[&bed.op, &r2, &r3], quiet())?;
    let three = throughput(bed, "t3", t)?;
    eprintln!("3 replicas: {three:.1} creates/s");
    quiesce(&[&bed.op, &r2, &r3], quiet())?;
    // The API server refreshes its storage metrics about once a minute (the smoke run prints
    // whatever they say).
    std::thread::sleep(Duration::from_secs(if smoke() { 1 } else { 70 }));
    storage(bed, n)?;
    bed.op.kill()?;
    r2.kill()?;
    r3.kill()?;

    if std::env::var("KRAKEN_BENCH_SHARDS_MEMORY").is_ok_and(|v| v == "0") {
        println!("create throughput: 1 replica {one:.1}/s, 3 replicas {three:.1}/s");
        return Ok(());
    }
    let mut rows = Vec::new();
    for labels in [&["a1"][..], &["b1", "b2"], &["c1", "c2", "c3"]] {
        let ops = fresh(bed, bin, labels, n)?;
        for (label, op) in labels.iter().zip(&ops) {
            rows.push((labels.len(), (*label).to_owned(), measure(op, idle)?));
        }
        if labels.len() < 3 {
            drop(ops);
            continue;
        }
        eprintln!("fail-over: {}", failover(bed, ops, (p, labels))?);
    }
    report(n, (one, three), &rows);
    Ok(())
}

/// What the API server stores for `n` managed objects: objects per resource, and the etcd
/// database's size (`apiserver_storage_*` from its `/metrics`), for the paper estimate.
fn storage(bed: &FixtureBed, n: usize) -> anyhow::Result<()> {
    use kraken_tests::operator::{label, metric_samples};
    let text = bed.cp.kubectl(&["get", "--raw", "/metrics"])?;
    println!("\n### What the API server stores for {n} fixture objects\n");
    println!("| resource | objects |");
    println!("|---|---|");
    for (labels, v) in metric_samples(&text, "apiserver_storage_objects") {
        if v >= 1.0 {
            println!("| {} | {v:.0} |", label(&labels, "resource"));
        }
    }
    for (_, v) in metric_samples(&text, "apiserver_storage_size_bytes") {
        println!("\netcd database: {:.1} MiB", v / MIB);
    }
    Ok(())
}

/// Which of `names` the replica whose identity starts with `victim` owns, by the ring of the
/// live members' Leases (what the replicas themselves compute). The live members are the
/// holders named after `live`: replicas killed earlier leave Leases behind until they expire
/// for good, and a ring with them in it places objects elsewhere.
fn owned_by(
    bed: &FixtureBed,
    names: &[String],
    (victim, live): (&str, &[&str]),
) -> anyhow::Result<Vec<String>> {
    use kraken_bridge::kit::ring::View;
    let leases: serde_json::Value = serde_json::from_str(&bed.cp.kubectl(&[
        "-n",
        "default",
        "get",
        "leases",
        "-l",
        "kraken.dev/shard-ring",
        "-o",
        "json",
    ])?)?;
    let members: Vec<String> = leases["items"]
        .as_array()
        .context("no Lease list")?
        .iter()
        .filter_map(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
        .filter(|h| live.iter().any(|l| h.starts_with(&format!("{l}-"))))
        .collect();
    anyhow::ensure!(
        members.len() == live.len(),
        "membership Leases of {live:?}: {members:?}"
    );
    let view = View::new(members.iter().cloned());
    let objects: serde_json::Value = serde_json::from_str(
        &bed.cp
            .kubectl(&["-n", &bed.ns, "get", OBJECTS, "-o", "json"])?,
    )?;
    let uid_of = |name: &str| {
        objects["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["metadata"]["name"] == name)
            .and_then(|o| o["metadata"]["uid"].as_str())
            .map(str::to_owned)
    };
    Ok(names
        .iter()
        .filter(|n| {
            uid_of(n)
                .and_then(|uid| view.owner(&uid).map(|o| o.starts_with(victim)))
                .unwrap_or(false)
        })
        .cloned()
        .collect())
}

fn epoch_nanos() -> anyhow::Result<u128> {
    Ok(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos())
}

/// Median and largest of `v`, "none" for none.
fn spread(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    match (v.get(v.len() / 2), v.last()) {
        (Some(mid), Some(max)) => format!("median {mid:.1} s, largest {max:.1} s"),
        _ => "none".to_owned(),
    }
}

/// Each of `names` changed one at a time, with no replica missing: how long each took to reach
/// the ledger, seconds.
fn changes_at_rest(
    bed: &FixtureBed,
    names: &[String],
    changed: &serde_json::Value,
) -> anyhow::Result<Vec<f64>> {
    let mut at_rest = Vec::new();
    for name in names {
        let before = ledger::event_log(bed.ledger_dir())?.len();
        let from = epoch_nanos()?;
        bed.patch_objects(std::slice::from_ref(name), changed)?;
        let landed = wait_for(Duration::from_secs(60), "a change at rest", || {
            Ok(ledger::event_log(bed.ledger_dir())?[before..]
                .iter()
                .find(|e| e.op == "update" && e.name == *name)
                .map(|e| e.nanos))
        })?;
        #[allow(clippy::cast_precision_loss)]
        at_rest.push(landed.saturating_sub(from) as f64 / 1e9);
    }
    Ok(at_rest)
}

/// Kills the third replica, changes about a third of `p` objects of its at once, and the rest
/// (the survivors' own) one at a time over the three lease durations after the kill, across the
/// take-over: when each change reached the ledger, the killed replica's measured from the
/// kill, the survivors' own from their patch (how long a user's change waits while its replica
/// takes a dead one's share over).
fn failover(
    bed: &FixtureBed,
    mut ops: Vec<Operator>,
    (p, live): (usize, &[&str]),
) -> anyhow::Result<String> {
    let label = live.last().context("no replica")?;
    let pool: Vec<String> = (0..p * 3).map(|i| format!("bulk-{i:05}")).collect();
    let victims = owned_by(bed, &pool, (label, live))?;
    let theirs: Vec<String> = victims.iter().take(p / 3).cloned().collect();
    let own: Vec<String> = pool
        .iter()
        .filter(|n| !victims.contains(n))
        .take(p - theirs.len() + 10)
        .cloned()
        .collect();
    let changed = json!({"spec": {"forProvider": {"size": 2}}});
    // the same kind of change at rest, for comparison: the survivors' first ten, one at a time
    let (rest, own) = own.split_at(own.len().min(10));
    let mut at_rest = changes_at_rest(bed, rest, &changed)?;
    let victim = ops.last_mut().context("no replica")?;
    let before = ledger::event_log(bed.ledger_dir())?.len();
    victim.kill()?;
    let killed = epoch_nanos()?;
    if !theirs.is_empty() {
        bed.patch_objects(&theirs, &changed)?;
    }
    let mut patched = std::collections::HashMap::new();
    let step = lease() * 3 / u32::try_from(own.len().max(1))?;
    let start = Instant::now();
    for (i, name) in own.iter().enumerate() {
        let at = step * u32::try_from(i)?;
        std::thread::sleep(at.saturating_sub(start.elapsed()));
        patched.insert(name.clone(), epoch_nanos()?);
        bed.patch_objects(std::slice::from_ref(name), &changed)?;
    }
    let updates = || -> anyhow::Result<Vec<(String, u128)>> {
        Ok(ledger::event_log(bed.ledger_dir())?[before..]
            .iter()
            .filter(|e| e.op == "update")
            .map(|e| (e.name.clone(), e.nanos))
            .collect())
    };
    let all = theirs.len() + own.len();
    wait_for(lease() * 6, "every change in the ledger", || {
        Ok((updates()?.len() >= all).then_some(()))
    })?;
    #[allow(clippy::cast_precision_loss)]
    let secs = |from: u128, to: u128| to.saturating_sub(from) as f64 / 1e9;
    let (mut taken, mut waited) = (Vec::new(), Vec::new());
    let mut detail = Vec::new();
    for (name, at) in updates()? {
        match patched.get(&name) {
            Some(&from) => {
                waited.push(secs(from, at));
                detail.push(format!(
                    "{name} +{:.1}s→{:.1}s",
                    secs(killed, from),
                    secs(from, at)
                ));
            }
            None => taken.push(secs(killed, at)),
        }
    }
    eprintln!(
        "the survivors' changes (patched after the kill → applied after): {}",
        detail.join(", ")
    );
    let lease = lease();
    Ok(format!(
        "{} changes at rest, one at a time, applied after their change: {}; a replica SIGKILLed (lease {lease:?}); its {} changed objects applied after the kill: {}; the survivors' own {}, changed one at a time over {:?} after the kill, applied after their change: {}",
        at_rest.len(),
        spread(&mut at_rest),
        taken.len(),
        spread(&mut taken),
        waited.len(),
        lease * 3,
        spread(&mut waited),
    ))
}

fn report(n: usize, (one, three): (f64, f64), rows: &[(usize, String, Replica)]) {
    println!("### Scale-out: {n} fixture objects, `--shards auto`\n");
    println!(
        "| replicas | replica | objects owned | operator RSS above idle, MiB | of it RssAnon, MiB | provider processes | provider RSS, MiB | operator and providers above idle, MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (k, label, r) in rows {
        println!(
            "| {k} | {label} | {:.0} | {:.1} | {:.1} | {:.0} | {:.1} | {:.1} |",
            r.objects, r.rss, r.anon, r.providers, r.provider_rss, r.pod
        );
    }
    let ratio = |of: fn(&Replica) -> f64| {
        let single = rows
            .iter()
            .find(|(k, _, _)| *k == 1)
            .map_or(f64::NAN, |(_, _, r)| of(r));
        let worst3 = rows
            .iter()
            .filter(|(k, _, _)| *k == 3)
            .map(|(_, _, r)| of(r))
            .fold(0.0, f64::max);
        worst3 / single
    };
    println!(
        "\nlargest of 3 replicas / single replica, managed-resource memory: operator RSS {:.2}, operator RssAnon {:.2}, operator and providers {:.2}",
        ratio(|r| r.rss),
        ratio(|r| r.anon),
        ratio(|r| r.pod)
    );
    println!(
        "\ncreate throughput: 1 replica {one:.1}/s, 3 replicas {three:.1}/s (ratio {:.2})",
        three / one
    );
}

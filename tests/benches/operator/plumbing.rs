//! The benchmark's machinery checked against a real control plane without an operator
//! (`cargo bench -p kraken-tests --bench operator -- plumbing`): what the Kraken side's
//! numbers rest on can be tested before `kraken operator` exists, and again whenever a number
//! looks wrong.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use serde_json::json;

use crate::kraken::{self, Bed, Memory, NS};
use crate::{Config, Prov, cleanup};

/// The plumbing check of one provider (no operator).
#[derive(Debug)]
pub struct Plumbing {
    pub prov: Prov,
    pub n: usize,
    pub apply: Duration,
    pub seen_all: Duration,
    pub change_kubectl: Duration,
    pub change_seen: Duration,
    pub apiserver: Memory,
    pub children_rss: u64,
}

/// The benchmark's machinery without an operator: the manifests are admitted by the CRDs,
/// the batched applies and the watch see every object, a change bumps the generation the
/// change measurement waits on, and the RSS sampler reads a process and its children.
pub fn run(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    prov: Prov,
    n: usize,
) -> anyhow::Result<Plumbing> {
    let label = format!("bench-plumbing-{}", prov.name());
    let bed = Bed::start(rt, cfg, prov, &label, cfg.levels[0], None)?;
    let started = Instant::now();
    kraken::apply_n(&bed.cp, cfg, prov, n)?;
    let apply = started.elapsed();
    bed.watch.wait(
        Duration::from_secs(60),
        "the watch to see every object",
        |s| (s.seen() >= n).then_some(()),
    )?;
    let seen_all = started.elapsed();
    ensure!(
        bed.watch.summary().reconciled() == 0,
        "objects were reconciled without an operator"
    );
    let listed = bed
        .cp
        .kubectl(&["get", &prov.kubectl_resource(), "-n", NS, "-o", "name"])?
        .lines()
        .count();
    ensure!(listed == n, "kubectl lists {listed} objects, not {n}");
    let (change_kubectl, change_seen) = change_and_status(&bed, prov)?;
    // The drift set's manifests pass the CRD's duration pattern.
    let interval = format!("{}s", cfg.drift_interval_s);
    kraken::apply_docs(&bed.cp, &[prov.manifest(NS, n, 0, Some(&interval))])?;

    metrics_parse()?;
    let (apiserver, children_rss) = samplers(&bed)?;
    Ok(Plumbing {
        prov,
        n,
        apply,
        seen_all,
        change_kubectl,
        change_seen,
        apiserver,
        children_rss,
    })
}

/// A change bumps the generation the change measurement waits on, and a status written by
/// hand the way the operator writes it counts as reconciled: (the change's kubectl, the
/// change seen by the watch).
fn change_and_status(bed: &Bed, prov: Prov) -> anyhow::Result<(Duration, Duration)> {
    let gen0 = bed
        .watch
        .summary()
        .get("bench-0")
        .context("bench-0 unseen")?
        .generation;
    let t = Instant::now();
    kraken::apply_docs(&bed.cp, &[prov.manifest(NS, 0, 1, None)])?;
    let change_kubectl = t.elapsed();
    bed.watch
        .wait(Duration::from_secs(10), "bench-0's new generation", |s| {
            s.get("bench-0").filter(|o| o.generation > gen0).map(|_| ())
        })?;
    let change_seen = t.elapsed();
    // What the operator writes when it is done, written by hand: the watch calls it reconciled.
    let generation = gen0 + 1;
    let now = "2026-01-01T00:00:00Z";
    let status = json!({"status": {
        "observedGeneration": generation,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": now},
            {"type": "Synced", "status": "True", "reason": "ReconcileSuccess", "lastTransitionTime": now},
        ],
    }});
    let kind = prov.kubectl_resource();
    let patch = status.to_string();
    bed.cp.kubectl(&[
        "patch",
        &kind,
        "bench-0",
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ])?;
    bed.watch
        .wait(Duration::from_secs(10), "bench-0 reconciled", |s| {
            s.get("bench-0")
                .filter(|o| o.generation == generation)
                .and_then(|o| o.reconciled_at)
        })?;
    ensure!(
        bed.watch.summary().reconciled() == 1,
        "only bench-0 is reconciled"
    );
    Ok((change_kubectl, change_seen))
}

/// The RSS sampler reads the API server, and counts a process's children (a shell with two
/// sleeping children, like an operator with providers): (the API server, the children).
fn samplers(bed: &Bed) -> anyhow::Result<(Memory, u64)> {
    let apiserver = Memory::sample(bed.cp.apiserver_pid()?)?;
    ensure!(
        apiserver.rss > 0 && apiserver.hwm >= apiserver.rss,
        "implausible API server memory {apiserver:?}"
    );
    let mut sh = std::process::Command::new("sh")
        .args(["-c", "sleep 60 & sleep 60 & wait"])
        .spawn()?;
    let _registered = cleanup::process(sh.id());
    std::thread::sleep(Duration::from_millis(300));
    let shell = Memory::sample(sh.id());
    kraken_tests::operator::kill_tree(sh.id())?;
    sh.wait()?;
    let shell = shell?;
    ensure!(
        shell.children_rss > 0,
        "the sleeps below sh were not counted: {shell:?}"
    );
    Ok((apiserver, shell.children_rss))
}

/// The operator's own metrics encoder, read back the way the benchmark reads `/metrics`.
fn metrics_parse() -> anyhow::Result<()> {
    let metrics = kraken_bridge::kit::metrics::Metrics::new();
    for (resource, verb, times) in [
        ("objects", "patch", 3),
        ("secrets", "create", 1),
        ("events", "create", 2),
        ("leases", "update", 5),
    ] {
        for _ in 0..times {
            metrics.api_write(resource, verb);
        }
    }
    drop(metrics.reconcile("Object"));
    // Not a resource's: left out of the reconciles per resource.
    drop(metrics.reconcile("ProviderConfig.core.kraken.dev"));
    metrics.set_managed_resources("Object", 7);
    let before = kraken::Snapshot::default();
    let s = kraken::Snapshot::parse(&metrics.encode()).since(&before);
    ensure!(
        (s.total(), s.events(), s.reconciles, s.managed) == (6.0, 2.0, 1.0, 7.0),
        "the metrics read back as {s:?} from:\n{}",
        metrics.encode()
    );
    ensure!(
        s.breakdown(2.0) == "events create 1.00, objects patch 1.50, secrets create 0.50",
        "breakdown {:?}",
        s.breakdown(2.0)
    );
    Ok(())
}

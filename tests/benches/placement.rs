//! Where provider processes live with three replicas: `cargo bench -p kraken-tests --bench
//! placement`.
//!
//! Three sharded replicas (release build) manage P ProviderConfigs of the fixture with K
//! objects each, their objects spread over the replicas by the ring. Once in `local` placement
//! (every replica starts a sandboxed provider for each ProviderConfig whose objects it owns),
//! then, on a fresh control plane, in `pods` placement (one runner Pod per ProviderConfig,
//! under the test kubelet, dialed by every replica). Prints a markdown table for
//! `docs/benchmarks.md` ("Three replicas, P ProviderConfigs"): provider processes and their
//! memory (runners included), and each replica's own RSS and what its container would be
//! charged (the replica and its child processes).
//!
//! Knobs: `KRAKEN_BENCH_PLACEMENT_PCS` (20), `KRAKEN_BENCH_PLACEMENT_OBJECTS` (objects per
//! ProviderConfig, 10), `KRAKEN_BENCH_OPERATORS` (the first build is used).
//! `KRAKEN_BENCH_SMOKE=1`: 2 ProviderConfigs of 3 objects.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kraken_tests::bench::{knob, operator_builds};
use kraken_tests::kubelet::{Controllers, Images, TestKubelet};
use kraken_tests::operator::bed::{is_reconciled, yaml_documents};
use kraken_tests::operator::{Operator, OperatorOptions, descendants};
use kraken_tests::{ControlPlane, FIXTURE_ADDRESS, TestEnv, repo_root, rss_bytes, wait_for};
use serde_json::{Value, json};

const MIB: f64 = 1024.0 * 1024.0;
const NS: &str = "bench";
const REPLICAS: [&str; 3] = ["r1", "r2", "r3"];
const OBJECTS: &str = "objects.fixture.tf.kraken.dev";
const WAIT: Duration = Duration::from_secs(600);

/// One placement's world: a control plane with its controllers and test kubelet, and three
/// replicas.
struct Bed {
    ops: Vec<Operator>,
    kubelet: TestKubelet,
    controllers: Controllers,
    cp: ControlPlane,
    ledger: tempfile::TempDir,
    _cache: tempfile::TempDir,
}

fn start(placement: &str, bin: &std::path::Path) -> anyhow::Result<Bed> {
    let env = TestEnv::load()?;
    let mirror = env.path("KRAKEN_TEST_PLUGIN_DIR")?;
    let cp = ControlPlane::start(&format!("bench-placement-{}", placement.to_lowercase()))?;
    cp.install_crds(
        &repo_root().join("generated-crds/core"),
        "kraken.dev/core=true",
    )?;
    let controllers = Controllers::start(&cp)?;
    let images = Images(BTreeMap::from([("kraken".to_owned(), bin.to_path_buf())]));
    let kubelet = TestKubelet::start(&cp, images)?;
    cp.kubectl(&["create", "namespace", NS])?;
    let cache = kraken_tests::scratch_dir("kraken-plugin-cache-")?;
    let mut ops = Vec::new();
    for label in REPLICAS {
        let mut opts = OperatorOptions::replica(label);
        opts.bin = Some(bin.to_path_buf());
        opts.args = [
            "--shards",
            "auto",
            "--plugin-cache",
            &cache.path().display().to_string(),
            "--runner-image",
            "kraken:bench",
            // One namespace holds every ProviderConfig here; the default allows 16.
            "--max-providers-per-namespace",
            "64",
        ]
        .map(str::to_owned)
        .to_vec();
        ops.push(Operator::start(&cp, opts)?);
    }
    let provider = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "Provider",
        "metadata": {"name": "fixture"},
        "spec": {"source": FIXTURE_ADDRESS, "mirror": mirror, "resources": ["fixture_object"]}});
    cp.apply_yaml("", &provider.to_string())?;
    let ledger = kraken_tests::fixture_dir("kraken-ledger-")?;
    wait_for(WAIT, "Provider fixture installed", || {
        let crd = cp.get_json_opt("", "crd", OBJECTS)?;
        let p = cp.get_json("", "providers.core.kraken.dev", "fixture")?;
        if crd.is_some() && is_ready(&p) {
            Ok(Some(()))
        } else {
            bail!("{}", p["status"])
        }
    })?;
    Ok(Bed {
        ops,
        kubelet,
        controllers,
        cp,
        ledger,
        _cache: cache,
    })
}

fn is_ready(obj: &Value) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// P ProviderConfigs in `placement`, K objects each; waits until every object is Ready.
fn populate(bed: &Bed, placement: &str, (pcs, per): (usize, usize)) -> anyhow::Result<Duration> {
    let mut docs = Vec::new();
    for p in 0..pcs {
        docs.push(
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
            "metadata": {"name": format!("pc-{p:02}"), "namespace": NS},
            "spec": {"providerRef": {"name": "fixture"},
                     "config": {"ledgerDir": bed.ledger.path()},
                     "runner": {"placement": placement}}}),
        );
    }
    bed.cp.apply_yaml(NS, &yaml_documents(&docs))?;
    let started = Instant::now();
    let objects: Vec<Value> = (0..pcs * per)
        .map(|i| {
            json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
            "metadata": {"name": format!("o-{i:04}"), "namespace": NS},
            "spec": {"providerConfigRef": {"name": format!("pc-{:02}", i % pcs)},
                     "forProvider": {"name": format!("o-{i:04}"), "size": 1}}})
        })
        .collect();
    for chunk in objects.chunks(100) {
        bed.cp.apply_yaml(NS, &yaml_documents(chunk))?;
    }
    wait_for(WAIT, "every object Ready", || {
        let all = bed.cp.list_json(NS, OBJECTS)?;
        let ready = all.iter().filter(|o| is_reconciled(o)).count();
        if ready == pcs * per {
            Ok(Some(()))
        } else {
            bail!("{ready} of {} Ready", pcs * per)
        }
    })?;
    Ok(started.elapsed())
}

/// Processes under `roots` (the roots included): how many are providers, and all their RSS.
fn tree(roots: &[u32]) -> anyhow::Result<(usize, f64)> {
    let (mut providers, mut rss) = (0, 0.0);
    for &root in roots {
        for pid in std::iter::once(root).chain(descendants(root)?) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.starts_with("terraform-prov") {
                providers += 1;
            }
            #[allow(clippy::cast_precision_loss)]
            let bytes = rss_bytes(pid).unwrap_or(0) as f64;
            rss += bytes;
        }
    }
    Ok((providers, rss / MIB))
}

/// One placement's numbers.
struct Row {
    placement: &'static str,
    ready: Duration,
    /// Provider processes anywhere (replicas' children and runner Pods), and the RSS of them
    /// with their runners, MiB.
    providers: usize,
    provider_rss: f64,
    /// Runner Pods.
    pods: usize,
    /// Each replica: its own RSS, and its container's (itself and its children), MiB.
    replicas: Vec<(f64, f64)>,
}

fn measure(bed: &Bed, placement: &'static str, ready: Duration) -> anyhow::Result<Row> {
    // Let the last reconciles and the runners' first schema reads finish.
    std::thread::sleep(Duration::from_secs(5));
    let mut replicas = Vec::new();
    let (mut providers, mut provider_rss) = (0, 0.0);
    for op in &bed.ops {
        let pid = op.pid().context("a replica is not running")?;
        #[allow(clippy::cast_precision_loss)]
        let own = rss_bytes(pid)? as f64 / MIB;
        let (n, whole) = tree(&[pid])?;
        providers += n;
        provider_rss += whole - own;
        replicas.push((own, whole));
    }
    let runner_pids: Vec<u32> = bed.kubelet.running().iter().map(|r| r.2).collect();
    let (n, rss) = tree(&runner_pids)?;
    Ok(Row {
        placement,
        ready,
        providers: providers + n,
        provider_rss: provider_rss + rss,
        pods: runner_pids.len(),
        replicas,
    })
}

fn run_one(
    bin: &std::path::Path,
    placement: &'static str,
    size: (usize, usize),
) -> anyhow::Result<Row> {
    let mut bed = start(placement, bin)?;
    let result = populate(&bed, placement, size).and_then(|t| measure(&bed, placement, t));
    let checked = bed.controllers.check();
    let result = result.map_err(|e| {
        kraken_tests::operator::with_log_tails(
            e,
            &[
                ("r1", &bed.ops[0]),
                ("r2", &bed.ops[1]),
                ("r3", &bed.ops[2]),
            ],
            40,
        )
    });
    for op in &mut bed.ops {
        let _ = op.kill();
    }
    checked?;
    result
}

fn print(rows: &[Row], (pcs, per): (usize, usize)) {
    println!(
        "\n#### Three replicas, {pcs} ProviderConfigs of the fixture, {per} objects each (MiB)\n"
    );
    println!(
        "| placement | all Ready (s) | provider processes | runner Pods | providers' RSS, runners included | replica RSS (r1 / r2 / r3) | replica + its children (r1 / r2 / r3) |"
    );
    println!("|---|---:|---:|---:|---:|---|---|");
    for r in rows {
        let own: Vec<String> = r.replicas.iter().map(|(o, _)| format!("{o:.1}")).collect();
        let whole: Vec<String> = r.replicas.iter().map(|(_, w)| format!("{w:.1}")).collect();
        println!(
            "| {} | {:.1} | {} | {} | {:.1} | {} | {} |",
            r.placement,
            r.ready.as_secs_f64(),
            r.providers,
            r.pods,
            r.provider_rss,
            own.join(" / "),
            whole.join(" / ")
        );
    }
    if let [local, pods] = rows {
        #[allow(clippy::cast_precision_loss)]
        let processes = pods.providers as f64 / local.providers.max(1) as f64;
        let replica = |r: &Row| r.replicas.iter().map(|(_, w)| w).sum::<f64>();
        println!(
            "\npods/local: provider processes {processes:.2}×, their memory {:.2}×, the replicas' containers {:.2}×",
            pods.provider_rss / local.provider_rss.max(1.0),
            replica(pods) / replica(local).max(1.0)
        );
    }
}

fn main() -> anyhow::Result<()> {
    kraken_tests::bench::knobs::start("placement")?;
    let pcs: usize = knob("KRAKEN_BENCH_PLACEMENT_PCS", 20, 2)?;
    let per: usize = knob("KRAKEN_BENCH_PLACEMENT_OBJECTS", 10, 3)?;
    anyhow::ensure!(pcs > 0 && per > 0, "need ProviderConfigs and objects");
    let build = operator_builds()?
        .into_iter()
        .next()
        .context("no operator build")?;
    let mut rows = Vec::new();
    for placement in ["local", "pods"] {
        eprintln!("placement {placement}: {pcs} ProviderConfigs × {per} objects, 3 replicas");
        rows.push(run_one(&build.bin, placement, (pcs, per))?);
    }
    print(&rows, (pcs, per));
    Ok(())
}

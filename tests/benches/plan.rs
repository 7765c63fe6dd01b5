//! `kraken plan -f` over N generated fixture manifests (all new: N creates) beside `terraform
//! plan` over the same N resources, with the same fixture provider binary and the Terraform CLI
//! of the test environment; prints a table of medians and the ratios.
//!
//! What is timed is the whole command, as a user waits for it: for Kraken the process start,
//! reading and parsing the manifests, discovery, one provider process, and per object a GET of
//! the object, of its ProviderConfig and (when the object exists) of its state Secret, then
//! ValidateResourceConfig and PlanResourceChange; for Terraform `terraform plan -refresh=false`
//! from an empty state (`init` is not timed). No operator runs: planning new objects needs
//! none. At each parallelism level P (`KRAKEN_BENCH_PARALLELISM`, default 10 and 32) Kraken
//! runs `--concurrency P` with the ProviderConfig's `maxConcurrency: P` (the RPCs in flight to
//! its provider process), Terraform `-parallelism=P`; both sides' provider processes run the
//! same binary (hashed) under the same `GOGC` (`KRAKEN_BENCH_GOGC`).
//!
//! Knobs: `KRAKEN_BENCH_PLAN_N` (1000), `KRAKEN_BENCH_RUNS` (3), `KRAKEN_BENCH_PARALLELISM`,
//! `KRAKEN_BENCH_GOGC`, `KRAKEN_BENCH_OPERATORS` (`label=path` pairs: the `kraken` builds to
//! time, interleaved; default this checkout's). `KRAKEN_BENCH_SMOKE=1`: 5 objects, one run.
//!
//! ```sh
//! cargo bench -p kraken-tests --bench plan
//! KRAKEN_BENCH_SMOKE=1 cargo test -p kraken-tests --bench plan   # smoke run, debug build
//! ```

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::ensure;
use kraken_tests::bench::knobs::{self, knob};
use kraken_tests::bench::{
    Gogc, OperatorBuild, Ratios, Seen, fair, kraken_plan_at, operator_builds, pct,
    terraform_watched,
};
use kraken_tests::operator::bed::{apply_fixture_config_at, object_manifest, yaml_documents};
use kraken_tests::{ControlPlane, TestEnv, fixture_terraform_header, scratch_dir};
use serde_json::json;

const NS: &str = "bench-plan";

/// Every sample of one level: per build, Kraken's; Terraform's.
struct Level {
    level: usize,
    kraken: Vec<Vec<Duration>>,
    terraform: Vec<Duration>,
}

/// The control plane, the manifests and the Terraform directory every run plans.
struct World {
    cp: ControlPlane,
    manifests: std::path::PathBuf,
    tf: tempfile::TempDir,
    ledger: tempfile::TempDir,
    _work: tempfile::TempDir,
}

fn world(n: usize) -> anyhow::Result<World> {
    let ledger = scratch_dir("bench-plan-ledger-")?;
    let work = scratch_dir("bench-plan-")?;
    let cp = ControlPlane::with_fixture_kinds(NS, NS)?;
    let manifests = work.path().join("objects.yaml");
    let docs: Vec<_> = (0..n)
        .map(|i| {
            let name = format!("bench-{i}");
            object_manifest(NS, &name, json!({"forProvider": {"name": name, "size": 1}}))
        })
        .collect();
    std::fs::write(&manifests, yaml_documents(&docs))?;
    let tf = terraform_dir(n, ledger.path())?;
    Ok(World {
        cp,
        manifests,
        tf,
        ledger,
        _work: work,
    })
}

/// The ProviderConfig `default` with `maxConcurrency: level` (no operator runs to react).
fn set_level(w: &World, level: usize) -> anyhow::Result<()> {
    apply_fixture_config_at(&w.cp, NS, "default", w.ledger.path(), level)
}

fn main() -> anyhow::Result<()> {
    knobs::start("plan")?;
    let n: usize = knob("KRAKEN_BENCH_PLAN_N", 1000, 5)?;
    let runs: usize = knob("KRAKEN_BENCH_RUNS", 3, 1)?;
    let gogc = Gogc::from_env()?;
    let env = TestEnv::load()?;
    let w = world(n)?;
    let builds = operator_builds()?;
    let mut levels: Vec<Level> = knobs::levels()?
        .into_iter()
        .map(|level| Level {
            level,
            kraken: vec![Vec::new(); builds.len()],
            terraform: Vec::new(),
        })
        .collect();
    let (mut kraken_seen, mut tf_seen) = (BTreeSet::new(), BTreeSet::new());
    for run in 1..=runs {
        for at in &mut levels {
            set_level(&w, at.level)?;
            for (b, times) in builds.iter().zip(at.kraken.iter_mut()) {
                let (k, seen) = kraken_plan(b, &w, n, at.level, gogc)?;
                kraken_seen.extend(seen);
                eprintln!(
                    "run {run}, p={}: kraken plan ({}) {:.2} s",
                    at.level,
                    b.label,
                    k.as_secs_f64()
                );
                times.push(k);
            }
            let (t, seen) = terraform_plan(w.tf.path(), n, at.level, gogc)?;
            tf_seen.extend(seen);
            eprintln!(
                "run {run}, p={}: terraform plan {:.2} s",
                at.level,
                t.as_secs_f64()
            );
            at.terraform.push(t);
        }
    }
    ensure!(
        kraken_tests::ledger::event_log(w.ledger.path())?.is_empty(),
        "a plan changed the ledger"
    );
    let binary = env.provider("fixture")?.path;
    let same = fair::same_provider(&binary, gogc, &kraken_seen, &tf_seen)?;
    print(
        n,
        runs,
        &builds,
        &levels,
        &[gogc.describe(), same.to_string()],
    )
}

fn print(
    n: usize,
    runs: usize,
    builds: &[OperatorBuild],
    levels: &[Level],
    fairness: &[String],
) -> anyhow::Result<()> {
    println!("\n#### Planning {n} new fixture objects, {runs} runs\n");
    println!("| command | parallelism | median | min | max |");
    println!("|---|---|---|---|---|");
    let mut ratios = Ratios::default();
    for at in levels {
        let p = at.level;
        let mut rows: Vec<(String, &Vec<Duration>)> = builds
            .iter()
            .zip(&at.kraken)
            .map(|(b, v)| {
                let label = format!(
                    "`kraken plan -f --concurrency {p}` ({}, `maxConcurrency: {p}`)",
                    b.label
                );
                (label, v)
            })
            .collect();
        rows.push((
            format!("`terraform plan -refresh=false -parallelism={p}`"),
            &at.terraform,
        ));
        for (label, v) in rows {
            println!(
                "| {label} | {p} | {:.2} s | {:.2} s | {:.2} s |",
                pct(v, 0.5).as_secs_f64(),
                pct(v, 0.0).as_secs_f64(),
                pct(v, 1.0).as_secs_f64()
            );
        }
        let tf = pct(&at.terraform, 0.5).as_secs_f64();
        for (b, v) in builds.iter().zip(&at.kraken) {
            let what = format!("`kraken plan` of {n} new objects ({})", b.label);
            ratios.add(&what, p, pct(v, 0.5).as_secs_f64(), tf)?;
        }
    }
    ratios.print(fairness)
}

/// One `kraken plan` of the N manifests with `b`: it must plan N creates and exit 2.
fn kraken_plan(
    b: &OperatorBuild,
    w: &World,
    n: usize,
    level: usize,
    gogc: Gogc,
) -> anyhow::Result<(Duration, BTreeSet<Seen>)> {
    let run = kraken_plan_at(&b.bin, &w.cp, &w.manifests, Some(level), gogc)?;
    let stdout = String::from_utf8_lossy(&run.out.stdout);
    let want = format!("Plan: {n} to create, 0 to update, 0 to replace, 0 unchanged.");
    ensure!(
        run.out.status.code() == Some(2) && stdout.contains(&want),
        "kraken plan: {:?}\n{}\n{}\n{}",
        run.out.status,
        stdout
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or_default(),
        stdout.lines().last().unwrap_or_default(),
        String::from_utf8_lossy(&run.out.stderr)
    );
    Ok((run.took, run.seen))
}

/// A Terraform working directory for the same N objects, initialised from the test mirror.
fn terraform_dir(n: usize, ledger: &Path) -> anyhow::Result<tempfile::TempDir> {
    let dir = scratch_dir("bench-plan-tf-")?;
    let config = format!(
        r#"{head}

resource "fixture_object" "o" {{
  count = {n}
  name  = "bench-${{count.index}}"
  size  = 1
}}
"#,
        head = fixture_terraform_header(Some(ledger)),
    );
    std::fs::write(dir.path().join("main.tf"), config)?;
    kraken_tests::bench::terraform(dir.path(), &["init", "-input=false", "-no-color"])?;
    Ok(dir)
}

/// One `terraform plan` of the N resources from an empty state: it must plan N to add.
fn terraform_plan(
    dir: &Path,
    n: usize,
    level: usize,
    gogc: Gogc,
) -> anyhow::Result<(Duration, BTreeSet<Seen>)> {
    let p = format!("-parallelism={level}");
    let args = ["plan", "-input=false", "-no-color", "-refresh=false", &p];
    let run = terraform_watched(dir, &args, gogc, &[0])?;
    let stdout = String::from_utf8_lossy(&run.out.stdout);
    let want = format!("Plan: {n} to add, 0 to change, 0 to destroy.");
    ensure!(
        stdout.contains(&want),
        "terraform plan: {}",
        stdout.lines().last().unwrap_or_default()
    );
    Ok((run.took, run.seen))
}

//! `kraken plan -f` over N generated fixture manifests (all new: N creates) beside `terraform
//! plan` over the same N resources, with the same fixture provider binary and the Terraform CLI
//! of the test environment; prints a table of medians.
//!
//! What is timed is the whole command, as a user waits for it: for Kraken the process start,
//! reading and parsing the manifests, discovery, one provider process, and per object a GET of
//! the object, of its ProviderConfig and (when the object exists) of its state Secret, then
//! ValidateResourceConfig and PlanResourceChange (`--concurrency`, 16 by default); for Terraform
//! `terraform plan -refresh=false` from an empty state (its default `-parallelism=10`; `init` is
//! not timed). No operator runs: planning new objects needs none.
//!
//! Knobs: `KRAKEN_BENCH_PLAN_N` (1000), `KRAKEN_BENCH_RUNS` (3), `KRAKEN_BENCH_OPERATORS`
//! (`label=path` pairs: the `kraken` builds to time, interleaved; default this checkout's).
//!
//! ```sh
//! cargo bench -p kraken-tests --bench plan
//! KRAKEN_BENCH_PLAN_N=100 cargo test -p kraken-tests --bench plan   # smoke run, debug build
//! ```

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use kraken_tests::bench::{env_or, operator_builds, pct};
use kraken_tests::operator::bed::{object_manifest, provider_config_manifest, yaml_documents};
use kraken_tests::{ControlPlane, TestEnv, fixture_terraform_header, scratch_dir};
use serde_json::json;

const NS: &str = "bench-plan";

fn main() -> anyhow::Result<()> {
    let n: usize = env_or("KRAKEN_BENCH_PLAN_N", 1000)?;
    let runs: usize = env_or("KRAKEN_BENCH_RUNS", 3)?;
    let env = TestEnv::load()?;
    let ledger = scratch_dir("bench-plan-ledger-")?;
    let work = scratch_dir("bench-plan-")?;
    let cp = ControlPlane::with_fixture_kinds(NS, NS)?;
    let pc = provider_config_manifest(
        NS,
        "default",
        json!({"ledgerDir": ledger.path().to_string_lossy()}),
    );
    cp.apply_yaml(NS, &pc.to_string())?;
    let manifests = work.path().join("objects.yaml");
    let docs: Vec<_> = (0..n)
        .map(|i| {
            let name = format!("bench-{i}");
            object_manifest(NS, &name, json!({"forProvider": {"name": name, "size": 1}}))
        })
        .collect();
    std::fs::write(&manifests, yaml_documents(&docs))?;
    let tf = terraform_dir(&env, n, ledger.path())?;

    let builds = operator_builds()?;
    let mut kraken: Vec<Vec<Duration>> = vec![Vec::new(); builds.len()];
    let mut terraform = Vec::new();
    for run in 1..=runs {
        for (b, times) in builds.iter().zip(kraken.iter_mut()) {
            let k = kraken_plan(&b.bin, &cp, &manifests, n)?;
            eprintln!(
                "run {run}: kraken plan ({}) {:.2} s",
                b.label,
                k.as_secs_f64()
            );
            times.push(k);
        }
        let t = terraform_plan(&env, tf.path(), n)?;
        eprintln!("run {run}: terraform plan {:.2} s", t.as_secs_f64());
        terraform.push(t);
    }
    ensure!(
        kraken_tests::ledger::event_log(ledger.path())?.is_empty(),
        "a plan changed the ledger"
    );
    println!("\n#### Planning {n} new fixture objects, {runs} runs\n");
    println!("| command | median | min | max |");
    println!("|---|---|---|---|");
    let mut rows: Vec<(String, &Vec<Duration>)> = builds
        .iter()
        .zip(&kraken)
        .map(|(b, v)| (format!("`kraken plan -f` ({}, concurrency 16)", b.label), v))
        .collect();
    rows.push((
        "`terraform plan -refresh=false` (parallelism 10)".to_owned(),
        &terraform,
    ));
    for (label, v) in rows {
        println!(
            "| {label} | {:.2} s | {:.2} s | {:.2} s |",
            pct(v, 0.5).as_secs_f64(),
            pct(v, 0.0).as_secs_f64(),
            pct(v, 1.0).as_secs_f64()
        );
    }
    Ok(())
}

/// One `kraken plan` of the N manifests with `bin`: it must plan N creates and exit 2.
fn kraken_plan(
    bin: &Path,
    cp: &ControlPlane,
    manifests: &Path,
    n: usize,
) -> anyhow::Result<Duration> {
    let (out, took) = kraken_tests::bench::kraken_plan(bin, cp, manifests)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want = format!("Plan: {n} to create, 0 to update, 0 to replace, 0 unchanged.");
    ensure!(
        out.status.code() == Some(2) && stdout.contains(&want),
        "kraken plan: {:?}\n{}\n{}\n{}",
        out.status,
        stdout
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or_default(),
        stdout.lines().last().unwrap_or_default(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(took)
}

/// A Terraform working directory for the same N objects, initialised from the test mirror.
fn terraform_dir(env: &TestEnv, n: usize, ledger: &Path) -> anyhow::Result<tempfile::TempDir> {
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
    terraform(env, dir.path(), &["init", "-input=false", "-no-color"])?;
    Ok(dir)
}

/// One `terraform plan` of the N resources from an empty state: it must plan N to add.
fn terraform_plan(env: &TestEnv, dir: &Path, n: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let stdout = terraform(
        env,
        dir,
        &["plan", "-input=false", "-no-color", "-refresh=false"],
    )?;
    let took = started.elapsed();
    let want = format!("Plan: {n} to add, 0 to change, 0 to destroy.");
    ensure!(
        stdout.contains(&want),
        "terraform plan: {}",
        stdout.lines().last().unwrap_or_default()
    );
    Ok(took)
}

fn terraform(env: &TestEnv, dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(env.path("KRAKEN_TEST_TERRAFORM")?)
        .current_dir(dir)
        .env("TF_CLI_CONFIG_FILE", env.path("KRAKEN_TEST_TF_CLI_CONFIG")?)
        .env("TF_IN_AUTOMATION", "1")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running terraform")?;
    ensure!(
        out.status.success(),
        "terraform {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

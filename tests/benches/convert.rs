//! Migrating N resources from Terraform (issue 20's performance section), with the fixture
//! provider binary and the test environment's Terraform CLI:
//! - `kraken convert DIR --state terraform.tfstate` of a configuration of N `fixture_object`s
//!   (`for_each` over a map variable, each naming its object from the key and reading the
//!   first one's id) and the N-entry state `terraform apply` left: its time and peak memory
//!   (its own VmHWM, printed by the command);
//! - the zero-change check before hand-over, `kraken plan -f` over the converted manifests
//!   (each object imported through the provider, read and planned: N unchanged), beside
//!   `terraform plan` over the same state (refresh and plan: "No changes").
//!
//! Knobs: `KRAKEN_BENCH_CONVERT_N` (1000), `KRAKEN_BENCH_RUNS` (3, interleaved; medians).
//!
//! ```sh
//! cargo bench -p kraken-tests --bench convert
//! KRAKEN_BENCH_CONVERT_N=50 cargo test -p kraken-tests --bench convert   # smoke run
//! ```

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use kraken_tests::bench::{env_or, pct, terraform};
use kraken_tests::operator::bed::provider_config_manifest;
use kraken_tests::{ControlPlane, TestEnv, fixture_terraform_header, kraken_bin, scratch_dir};
use serde_json::json;

const NS: &str = "bench-convert";

fn main() -> anyhow::Result<()> {
    let n: usize = env_or("KRAKEN_BENCH_CONVERT_N", 1000)?;
    let runs: usize = env_or("KRAKEN_BENCH_RUNS", 3)?;
    let env = TestEnv::load()?;
    let kraken = kraken_bin()?;
    let ledger = scratch_dir("bench-convert-ledger-")?;
    let work = scratch_dir("bench-convert-")?;
    let cp = ControlPlane::with_fixture_kinds(NS, NS)?;
    let pc = provider_config_manifest(
        NS,
        "fixture",
        json!({"ledgerDir": ledger.path().to_string_lossy()}),
    );
    cp.apply_yaml(NS, &pc.to_string())?;

    let tf = work.path().join("tf");
    std::fs::create_dir_all(&tf)?;
    std::fs::write(tf.join("main.tf"), configuration(n, ledger.path()))?;
    terraform(&tf, &["init", "-input=false", "-no-color"])?;
    let started = Instant::now();
    terraform(
        &tf,
        &["apply", "-auto-approve", "-input=false", "-no-color"],
    )?;
    eprintln!(
        "terraform apply of {n} (not timed in the table): {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let made = kraken_tests::ledger::event_log(ledger.path())?.len();

    let out = work.path().join("out");
    let (mut convert, mut peaks, mut check, mut tf_plan) = (vec![], vec![], vec![], vec![]);
    for run in 1..=runs {
        let (took, peak) = kraken_convert(&kraken, &env, (&tf, &out), n)?;
        let k = kraken_plan(&kraken, &cp, &out, n)?;
        let t = terraform_plan(&tf)?;
        eprintln!(
            "run {run}: convert {:.2} s ({peak} MiB), kraken plan {:.2} s, terraform plan {:.2} s",
            took.as_secs_f64(),
            k.as_secs_f64(),
            t.as_secs_f64()
        );
        convert.push(took);
        peaks.push(peak);
        check.push(k);
        tf_plan.push(t);
    }
    ensure!(
        kraken_tests::ledger::event_log(ledger.path())?.len() == made,
        "converting or planning changed the ledger"
    );
    peaks.sort_unstable();
    println!("\n#### Migrating {n} fixture objects with their state, {runs} runs\n");
    println!("| command | median | min | max |");
    println!("|---|---|---|---|");
    let rows = [
        (
            format!(
                "`kraken convert --state` ({n} resources, {n}-entry state; peak memory median {} MiB)",
                peaks[peaks.len() / 2]
            ),
            &convert,
        ),
        (
            "`kraken plan -f` (the zero-change check: import, read, plan; concurrency 16)"
                .to_owned(),
            &check,
        ),
        (
            "`terraform plan` (refresh and plan, parallelism 10)".to_owned(),
            &tf_plan,
        ),
    ];
    for (label, v) in rows {
        println!(
            "| {label} | {:.2} s | {:.2} s | {:.2} s |",
            pct(v, 0.5).as_secs_f64(),
            pct(v, 0.0).as_secs_f64(),
            pct(v, 1.0).as_secs_f64()
        );
    }
    println!(
        "\nratio kraken plan / terraform plan: {:.2}",
        pct(&check, 0.5).as_secs_f64() / pct(&tf_plan, 0.5).as_secs_f64()
    );
    Ok(())
}

/// N objects from a map variable, each but the first reading the first one's id.
fn configuration(n: usize, ledger: &Path) -> String {
    let keys: Vec<String> = (0..n).map(|i| format!("k{i:04} = {}", i % 7 + 1)).collect();
    format!(
        r#"{head}

variable "objects" {{
  type    = map(number)
  default = {{
    {keys}
  }}
}}

resource "fixture_object" "first" {{
  name = "first"
  size = 1
}}

resource "fixture_object" "o" {{
  for_each = var.objects
  name     = "bench-${{each.key}}"
  size     = each.value
  labels   = [fixture_object.first.id, each.key]
}}
"#,
        head = fixture_terraform_header(Some(ledger)),
        keys = keys.join("\n    "),
    )
}

/// `kraken convert --state`: its time and the peak memory it reports.
fn kraken_convert(
    bin: &Path,
    env: &TestEnv,
    (tf, out): (&Path, &Path),
    n: usize,
) -> anyhow::Result<(Duration, u64)> {
    let started = Instant::now();
    let run = Command::new(bin)
        .arg("convert")
        .arg(tf)
        .arg("--state")
        .arg(tf.join("terraform.tfstate"))
        .args(["--namespace", NS, "--out"])
        .arg(out)
        .arg("--plugin-dir")
        .arg(env.path("KRAKEN_TEST_PLUGIN_DIR")?)
        .stdin(Stdio::null())
        .output()
        .context("running kraken convert")?;
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&run.stdout);
    ensure!(
        run.status.success() && stdout.contains(&format!("{} objects import", n + 1)),
        "kraken convert: {stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let peak = stdout
        .split("peak memory ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .context("convert printed no peak memory")?;
    Ok((took, peak))
}

/// The zero-change check: `kraken plan` of the converted objects must find nothing to do.
fn kraken_plan(bin: &Path, cp: &ControlPlane, out: &Path, n: usize) -> anyhow::Result<Duration> {
    let (run, took) =
        kraken_tests::bench::kraken_plan(bin, cp, &out.join("resource-fixture-object.yaml"))?;
    let stdout = String::from_utf8_lossy(&run.stdout);
    let want = format!(
        "Plan: 0 to create, 0 to update, 0 to replace, {} unchanged.",
        n + 1
    );
    ensure!(
        run.status.code() == Some(0) && stdout.contains(&want),
        "kraken plan: {:?}\n{}\n{}",
        run.status,
        stdout.lines().last().unwrap_or_default(),
        String::from_utf8_lossy(&run.stderr)
    );
    Ok(took)
}

/// `terraform plan` over the state: refresh every resource, plan, find no changes.
fn terraform_plan(dir: &Path) -> anyhow::Result<Duration> {
    let env = TestEnv::load()?;
    let started = Instant::now();
    let out = Command::new(env.path("KRAKEN_TEST_TERRAFORM")?)
        .current_dir(dir)
        .env("TF_CLI_CONFIG_FILE", env.path("KRAKEN_TEST_TF_CLI_CONFIG")?)
        .env("TF_IN_AUTOMATION", "1")
        .args(["plan", "-input=false", "-no-color", "-detailed-exitcode"])
        .stdin(Stdio::null())
        .output()
        .context("running terraform plan")?;
    let took = started.elapsed();
    ensure!(
        out.status.code() == Some(0),
        "terraform plan found changes or failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(took)
}

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
//! At each parallelism level P (`KRAKEN_BENCH_PARALLELISM`, default 10 and 32) the check runs
//! `kraken plan --concurrency P` with the ProviderConfig's `maxConcurrency: P`, Terraform
//! `plan -parallelism=P`; both sides' provider processes run the same binary (hashed) under
//! the same `GOGC` (`KRAKEN_BENCH_GOGC`). The bench prints the ratios of the check, and of
//! convert and check together, to `terraform plan`.
//!
//! Knobs: `KRAKEN_BENCH_CONVERT_N` (1000), `KRAKEN_BENCH_RUNS` (3, interleaved; medians),
//! `KRAKEN_BENCH_PARALLELISM`, `KRAKEN_BENCH_GOGC`. `KRAKEN_BENCH_SMOKE=1`: 5 objects, one run.
//!
//! ```sh
//! cargo bench -p kraken-tests --bench convert
//! KRAKEN_BENCH_SMOKE=1 cargo test -p kraken-tests --bench convert   # smoke run, debug build
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use kraken_tests::bench::knobs::{self, knob};
use kraken_tests::bench::{
    Gogc, Ratios, Seen, fair, kraken_plan_at, pct, run_watched, terraform, terraform_watched,
};
use kraken_tests::operator::bed::apply_fixture_config_at;
use kraken_tests::{ControlPlane, TestEnv, fixture_terraform_header, kraken_bin, scratch_dir};

const NS: &str = "bench-convert";

/// What every run works on: the control plane with the ProviderConfig, the Terraform
/// directory and its state, the ledger both write to, the conversion's output.
struct World {
    cp: ControlPlane,
    kraken: PathBuf,
    tf: PathBuf,
    out: PathBuf,
    ledger: tempfile::TempDir,
    /// Mutations in the ledger after Terraform's apply: nothing later may add one.
    made: usize,
    _work: tempfile::TempDir,
}

fn world(n: usize) -> anyhow::Result<World> {
    let kraken = kraken_bin()?;
    let ledger = scratch_dir("bench-convert-ledger-")?;
    let work = scratch_dir("bench-convert-")?;
    let cp = ControlPlane::with_fixture_kinds(NS, NS)?;
    // Terraform's objects carry no owner's tag: the administrator vouches for the migration.
    cp.kubectl(&[
        "annotate",
        "namespace",
        NS,
        "kraken.dev/adoptable-types=fixture_*",
    ])?;
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
    Ok(World {
        cp,
        kraken,
        out: work.path().join("out"),
        tf,
        ledger,
        made,
        _work: work,
    })
}

/// The ProviderConfig `fixture` with `maxConcurrency: level` (no operator runs to react).
fn set_level(w: &World, level: usize) -> anyhow::Result<()> {
    apply_fixture_config_at(&w.cp, NS, "fixture", w.ledger.path(), level)
}

/// One level's samples.
#[derive(Default)]
struct Samples {
    convert: Vec<Duration>,
    peaks: Vec<u64>,
    check: Vec<Duration>,
    tf_plan: Vec<Duration>,
}

fn main() -> anyhow::Result<()> {
    knobs::start("convert")?;
    let n: usize = knob("KRAKEN_BENCH_CONVERT_N", 1000, 5)?;
    let runs: usize = knob("KRAKEN_BENCH_RUNS", 3, 1)?;
    let (levels, gogc) = (knobs::levels()?, Gogc::from_env()?);
    let w = world(n)?;
    let mut at: Vec<Samples> = levels.iter().map(|_| Samples::default()).collect();
    let (mut kraken_seen, mut tf_seen) = (BTreeSet::new(), BTreeSet::new());
    for run in 1..=runs {
        for (&level, s) in levels.iter().zip(&mut at) {
            set_level(&w, level)?;
            let (took, peak, seen) = kraken_convert(&w, n, gogc)?;
            kraken_seen.extend(seen);
            let (k, seen) = kraken_check(&w, n, level, gogc)?;
            kraken_seen.extend(seen);
            let (t, seen) = terraform_plan(&w.tf, level, gogc)?;
            tf_seen.extend(seen);
            eprintln!(
                "run {run}, p={level}: convert {:.2} s ({peak} MiB), kraken plan {:.2} s, terraform plan {:.2} s",
                took.as_secs_f64(),
                k.as_secs_f64(),
                t.as_secs_f64()
            );
            s.convert.push(took);
            s.peaks.push(peak);
            s.check.push(k);
            s.tf_plan.push(t);
        }
    }
    ensure!(
        kraken_tests::ledger::event_log(w.ledger.path())?.len() == w.made,
        "converting or planning changed the ledger"
    );
    let binary = TestEnv::load()?.provider("fixture")?.path;
    let same = fair::same_provider(&binary, gogc, &kraken_seen, &tf_seen)?;
    print(
        n,
        runs,
        &levels,
        &mut at,
        &[gogc.describe(), same.to_string()],
    )
}

fn print(
    n: usize,
    runs: usize,
    levels: &[usize],
    at: &mut [Samples],
    fairness: &[String],
) -> anyhow::Result<()> {
    println!("\n#### Migrating {n} fixture objects with their state, {runs} runs\n");
    println!("| command | parallelism | median | min | max |");
    println!("|---|---|---|---|---|");
    let mut ratios = Ratios::default();
    for (&p, s) in levels.iter().zip(at.iter_mut()) {
        s.peaks.sort_unstable();
        let peak = s.peaks.get(s.peaks.len() / 2).copied().unwrap_or_default();
        let rows = [
            (
                format!(
                    "`kraken convert --state` ({} resources, {}-entry state; peak memory median {peak} MiB)",
                    n + 1,
                    n + 1
                ),
                &s.convert,
            ),
            (
                format!(
                    "`kraken plan -f --concurrency {p}` (the zero-change check: import, read, plan; `maxConcurrency: {p}`)"
                ),
                &s.check,
            ),
            (
                format!("`terraform plan -parallelism={p}` (refresh and plan)"),
                &s.tf_plan,
            ),
        ];
        for (label, v) in rows {
            println!(
                "| {label} | {p} | {:.2} s | {:.2} s | {:.2} s |",
                pct(v, 0.5).as_secs_f64(),
                pct(v, 0.0).as_secs_f64(),
                pct(v, 1.0).as_secs_f64()
            );
        }
        let (c, k, t) = (
            pct(&s.convert, 0.5).as_secs_f64(),
            pct(&s.check, 0.5).as_secs_f64(),
            pct(&s.tf_plan, 0.5).as_secs_f64(),
        );
        ratios.add(
            "the zero-change check (`kraken plan`) vs `terraform plan`",
            p,
            k,
            t,
        )?;
        ratios.add(
            "`kraken convert --state` and the check vs `terraform plan`",
            p,
            c + k,
            t,
        )?;
    }
    ratios.print(fairness)
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

/// `kraken convert --state`: its time, the peak memory it reports, the providers it ran.
fn kraken_convert(
    w: &World,
    n: usize,
    gogc: Gogc,
) -> anyhow::Result<(Duration, u64, BTreeSet<Seen>)> {
    let env = TestEnv::load()?;
    let mut cmd = Command::new(&w.kraken);
    cmd.arg("convert")
        .arg(&w.tf)
        .arg("--state")
        .arg(w.tf.join("terraform.tfstate"))
        .args(["--namespace", NS, "--out"])
        .arg(&w.out)
        .arg("--plugin-dir")
        .arg(env.path("KRAKEN_TEST_PLUGIN_DIR")?);
    gogc.kraken_cli(&mut cmd);
    let run = run_watched(&mut cmd, "kraken convert")?;
    let stdout = String::from_utf8_lossy(&run.out.stdout);
    ensure!(
        run.out.status.success() && stdout.contains(&format!("{} objects import", n + 1)),
        "kraken convert: {stdout}{}",
        String::from_utf8_lossy(&run.out.stderr)
    );
    let peak = stdout
        .split("peak memory ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .context("convert printed no peak memory")?;
    Ok((run.took, peak, run.seen))
}

/// The zero-change check: `kraken plan` of the converted objects must find nothing to do.
fn kraken_check(
    w: &World,
    n: usize,
    level: usize,
    gogc: Gogc,
) -> anyhow::Result<(Duration, BTreeSet<Seen>)> {
    let manifests = w.out.join("resource-fixture-object.yaml");
    let run = kraken_plan_at(&w.kraken, &w.cp, &manifests, Some(level), gogc)?;
    let stdout = String::from_utf8_lossy(&run.out.stdout);
    let want = format!(
        "Plan: 0 to create, 0 to update, 0 to replace, {} unchanged.",
        n + 1
    );
    ensure!(
        run.out.status.code() == Some(0) && stdout.contains(&want),
        "kraken plan: {:?}\n{}\n{}",
        run.out.status,
        stdout.lines().last().unwrap_or_default(),
        String::from_utf8_lossy(&run.out.stderr)
    );
    Ok((run.took, run.seen))
}

/// `terraform plan` over the state: refresh every resource, plan, find no changes.
fn terraform_plan(
    dir: &Path,
    level: usize,
    gogc: Gogc,
) -> anyhow::Result<(Duration, BTreeSet<Seen>)> {
    let p = format!("-parallelism={level}");
    let args = [
        "plan",
        "-input=false",
        "-no-color",
        "-detailed-exitcode",
        &p,
    ];
    // Exit 2 would mean changes: not a zero-change plan.
    let run = terraform_watched(dir, &args, gogc, &[0])?;
    Ok((run.took, run.seen))
}

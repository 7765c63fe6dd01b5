//! Codegen benchmark: `cargo bench -p kraken-tests --bench codegen`.
//!
//! 1. `kraken_codegen::generate` over the full `hashicorp/aws` schema (committed, gzipped, in
//!    `tests/data/aws/`): median wall time of several runs, CRDs per second, largest CRD; and
//!    peak memory of the whole `kraken codegen --schema … --out …` command (which reports its
//!    own VmHWM), including reading and parsing the schema.
//! 2. Installing CRDs into a real kube-apiserver (`scripts/testenv.sh up`) with server-side
//!    apply: the 20 smallest-named AWS kinds, then all of them on a fresh control plane; time
//!    until every CRD is Established and the API server's RSS growth per CRD.
//!
//! Sections can be selected by name: `-- generate` or `-- install`. Knob: `KRAKEN_BENCH_REPS`
//! (codegen repetitions, default 5). `KRAKEN_BENCH_SMOKE=1`: one repetition over the 20
//! smallest-named types (the schema still read whole), and installs of 5 and 20 CRDs with a
//! second of settling instead of 10.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kraken_codegen::{Options, generate, write_dir};
use kraken_tests::bench::{knob, smoke};
use kraken_tests::{ControlPlane, repo_root};

/// The allocator the `kraken` binary ships with, so `generate()` is measured as users run it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn aws_schema_path() -> PathBuf {
    repo_root().join("tests/data/aws/schema.json.gz")
}

fn load_aws() -> anyhow::Result<(String, kraken_codegen::schema::ProviderSchema)> {
    let path = aws_schema_path();
    let gz = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice()).read_to_end(&mut text)?;
    let json: serde_json::Value = serde_json::from_slice(&text)?;
    let all = kraken_codegen::tfjson::parse_provider_schemas(&json)?;
    all.into_iter()
        .next()
        .context("no provider in the AWS schema file")
}

/// The `k` smallest-named resource types (shortest first), as `generate` and the CLI take them.
fn smallest(schema: &kraken_codegen::schema::ProviderSchema, k: usize) -> Vec<String> {
    let mut types: Vec<&String> = schema.resources.keys().collect();
    types.sort_by_key(|t| (t.len(), t.as_str()));
    types.iter().take(k).map(|t| t.to_string()).collect()
}

/// Peak memory of the whole CLI run (read + parse + generate + write), as a user runs it:
/// its wall time and the summary it prints (which reports its own VmHWM).
fn cli_run(only: &[String]) -> anyhow::Result<(Duration, String)> {
    let out = tempfile::tempdir()?;
    let kraken = kraken_tests::kraken_bin()?;
    let started = Instant::now();
    let mut cmd = std::process::Command::new(&kraken);
    cmd.args(["codegen", "--schema"])
        .arg(aws_schema_path())
        .arg("--out")
        .arg(out.path());
    if !only.is_empty() {
        cmd.arg("--resources").arg(only.join(","));
    }
    let cli = cmd.output()?;
    let cli_time = started.elapsed();
    ensure!(
        cli.status.success(),
        "kraken codegen failed: {}",
        String::from_utf8_lossy(&cli.stderr)
    );
    Ok((cli_time, String::from_utf8_lossy(&cli.stdout).into_owned()))
}

fn bench_generate() -> anyhow::Result<()> {
    let reps: usize = knob("KRAKEN_BENCH_REPS", 5, 1)?;
    ensure!(reps > 0, "KRAKEN_BENCH_REPS must be at least 1");
    let (address, schema) = load_aws()?;
    // Empty: every type.
    let only = if smoke() {
        smallest(&schema, 20)
    } else {
        Vec::new()
    };
    let opts = Options {
        resources: only.clone(),
        ..Default::default()
    };
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..reps {
        let started = Instant::now();
        let generated = generate(&address, &schema, &opts)?;
        times.push(started.elapsed());
        last = Some(generated);
    }
    times.sort();
    let generated = last.context("no run")?;
    let asked = if only.is_empty() {
        schema.resources.len()
    } else {
        only.len()
    };
    ensure!(
        generated.crds.len() + generated.report.errors.len() == asked,
        "{} CRDs and {} errors for {asked} types",
        generated.crds.len(),
        generated.report.errors.len()
    );
    let cli = cli_run(&only)?;
    println!(
        "\n### Codegen of the full AWS schema ({} resource types{})\n",
        schema.resources.len(),
        if only.is_empty() {
            String::new()
        } else {
            format!("; smoke run: {} of them", only.len())
        }
    );
    print_generated(&generated, &times, cli)
}

/// The table of one `generate()` (its `times`, sorted) and the CLI's run.
fn print_generated(
    generated: &kraken_codegen::Generated,
    times: &[Duration],
    (cli_time, summary): (Duration, String),
) -> anyhow::Result<()> {
    let median = times.get(times.len() / 2).copied().context("no run")?;
    let largest = generated
        .crds
        .iter()
        .max_by_key(|c| c.json_bytes)
        .context("no CRDs")?;
    let total: usize = generated.crds.iter().map(|c| c.json_bytes).sum();
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| `generate()` wall time, median of {} | {:.3} s |",
        times.len(),
        median.as_secs_f64()
    );
    println!(
        "| CRDs per second | {:.0} |",
        generated.crds.len() as f64 / median.as_secs_f64()
    );
    println!("| CRDs generated | {} |", generated.crds.len());
    println!(
        "| errors (types not generated) | {} |",
        generated.report.errors.len()
    );
    println!(
        "| CRDs with trimmed descriptions | {} |",
        generated.report.trimmed.len()
    );
    println!(
        "| largest CRD | {} ({} bytes of JSON) |",
        largest.type_name, largest.json_bytes
    );
    println!(
        "| all CRDs together | {:.1} MiB of JSON |",
        total as f64 / 1048576.0
    );
    println!(
        "| `kraken codegen` CLI end to end (gunzip, parse, generate, write YAML) | {:.3} s |",
        cli_time.as_secs_f64()
    );
    println!("| CLI summary | {} |", summary.trim());
    Ok(())
}

/// Install the CRDs in `dir` and wait until all are Established; returns the elapsed time.
fn install_dir(cp: &ControlPlane, dir: &Path, count: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let installed = cp.install_crds(dir, "tf.kraken.dev/provider=aws")?;
    let elapsed = started.elapsed();
    ensure!(
        installed == count,
        "expected {count} CRDs, found {installed}"
    );
    Ok(elapsed)
}

/// RSS after the API server settles (it keeps building OpenAPI and discovery for a while).
fn settled_rss(cp: &ControlPlane) -> anyhow::Result<u64> {
    std::thread::sleep(Duration::from_secs(if smoke() { 1 } else { 10 }));
    cp.apiserver_rss()
}

fn bench_install() -> anyhow::Result<()> {
    let (address, schema) = load_aws()?;
    let few = smallest(&schema, 20);
    println!("\n### Installing AWS CRDs into a real kube-apiserver (server-side apply)\n");
    println!("| CRDs | time to all Established | API server RSS before | after | growth per CRD |");
    println!("|---|---|---|---|---|");
    // All of them takes five minutes: the smoke run installs 5, then 20.
    let subsets = if smoke() {
        [Some(smallest(&schema, 5)), Some(few)]
    } else {
        [Some(few), None]
    };
    for subset in subsets {
        let opts = Options {
            resources: subset.clone().unwrap_or_default(),
            ..Default::default()
        };
        let generated = generate(&address, &schema, &opts)?;
        let dir = tempfile::tempdir()?;
        write_dir(&generated, dir.path())?;
        let cp = ControlPlane::start("bench-crds")?;
        let before = settled_rss(&cp)?;
        let n = generated.crds.len();
        let took = install_dir(&cp, dir.path(), n)?;
        let after = settled_rss(&cp)?;
        let growth = after.saturating_sub(before) as f64 / n as f64;
        println!(
            "| {n} | {:.1} s | {:.0} MiB | {:.0} MiB | {:.2} MiB |",
            took.as_secs_f64(),
            before as f64 / 1048576.0,
            after as f64 / 1048576.0,
            growth / 1048576.0
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    kraken_tests::bench::knobs::start("codegen")?;
    if !aws_schema_path().exists() {
        bail!(
            "{} is missing; run scripts/aws-schema.sh",
            aws_schema_path().display()
        );
    }
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wants = |s: &str| filter.is_empty() || filter.iter().any(|f| s.contains(f.as_str()));
    println!(
        "## Codegen benchmark ({} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if wants("generate") {
        bench_generate()?;
    }
    if wants("install") {
        bench_install()?;
    }
    Ok(())
}

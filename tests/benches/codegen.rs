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
//! (codegen repetitions, default 5).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kraken_codegen::{Options, generate, write_dir};
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

fn bench_generate() -> anyhow::Result<()> {
    let reps: usize = std::env::var("KRAKEN_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let (address, schema) = load_aws()?;
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..reps {
        let started = Instant::now();
        let generated = generate(&address, &schema, &Options::default())?;
        times.push(started.elapsed());
        last = Some(generated);
    }
    times.sort();
    let generated = last.context("no run")?;
    let median = times[times.len() / 2];
    let largest = generated
        .crds
        .iter()
        .max_by_key(|c| c.json_bytes)
        .context("no CRDs")?;
    let total: usize = generated.crds.iter().map(|c| c.json_bytes).sum();

    // Peak memory of the whole CLI run (read + parse + generate + write), as a user runs it.
    let out = tempfile::tempdir()?;
    let kraken = kraken_tests::kraken_bin()?;
    let started = Instant::now();
    let cli = std::process::Command::new(&kraken)
        .args(["codegen", "--schema"])
        .arg(aws_schema_path())
        .arg("--out")
        .arg(out.path())
        .output()?;
    let cli_time = started.elapsed();
    ensure!(
        cli.status.success(),
        "kraken codegen failed: {}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let summary = String::from_utf8_lossy(&cli.stdout);

    println!(
        "\n### Codegen of the full AWS schema ({} resource types)\n",
        schema.resources.len()
    );
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| `generate()` wall time, median of {reps} | {:.3} s |",
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
    std::thread::sleep(Duration::from_secs(10));
    cp.apiserver_rss()
}

fn bench_install() -> anyhow::Result<()> {
    let (address, schema) = load_aws()?;
    let mut types: Vec<&String> = schema.resources.keys().collect();
    types.sort_by_key(|t| (t.len(), t.as_str()));
    let few: Vec<String> = types.iter().take(20).map(|t| t.to_string()).collect();
    println!("\n### Installing AWS CRDs into a real kube-apiserver (server-side apply)\n");
    println!("| CRDs | time to all Established | API server RSS before | after | growth per CRD |");
    println!("|---|---|---|---|---|");
    for subset in [Some(few), None] {
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

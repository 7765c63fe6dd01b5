//! Benchmark of `kraken fetch` (not a timed test): cache-hit latency, peak memory while
//! installing from a loopback HTTPS registry (the largest test provider and a synthetic
//! 256 MiB package, to show memory does not grow with package size), and `h1:` throughput.
//!
//! Rerun: `cargo bench -p kraken-tests --bench fetch` (after `scripts/testenv.sh install`).
//! Knobs: `KRAKEN_BENCH_FETCH_HITS` (cache-hit samples, default 50),
//! `KRAKEN_BENCH_FETCH_BIG_MIB` (synthetic package size, default 256).
//! `KRAKEN_BENCH_SMOKE=1`: 3 cache hits, an 8 MiB synthetic package.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kraken_tests::bench::knob;
use kraken_tests::registry_server::{
    Publish, RegistryServer, SigningIdentity, package_zip, single_file_h1,
};
use kraken_tests::{TestEnv, kraken_bin, status_kib};

fn main() -> anyhow::Result<()> {
    kraken_tests::bench::knobs::start("fetch")?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let kraken = kraken_bin()?;
    let server = RegistryServer::start().await?;
    let signer = SigningIdentity::generate("bench")?;
    let fixture = env.provider("fixture")?;
    let platform = kraken_registry_fetch::current_platform();
    let publish = |ns: &str,
                   ty: &str,
                   version: &str,
                   zip: Vec<u8>,
                   h1: String,
                   host: &str|
     -> anyhow::Result<()> {
        server.publish(&Publish {
            hostname: host,
            namespace: ns,
            type_name: ty,
            version,
            platform: &platform,
            zip,
            h1,
            protocols: vec!["5.0", "6.0"],
            signer: &signer,
            published_keys: vec![signer.public_armor.clone()],
            other_platforms: vec![],
        })?;
        Ok(())
    };
    let fixture_zip = package_zip(&fixture.path, "fixture", &fixture.version)?;
    let fixture_zip_len = fixture_zip.len();
    publish(
        "kraken",
        "fixture",
        &fixture.version,
        fixture_zip,
        single_file_h1(&fixture.path, "fixture", &fixture.version)?,
        "registry.kraken.dev",
    )?;
    let big_mib: usize = knob("KRAKEN_BENCH_FETCH_BIG_MIB", 256, 8)?;
    anyhow::ensure!(big_mib > 0, "KRAKEN_BENCH_FETCH_BIG_MIB must be at least 1");
    let scratch = tempfile::tempdir()?;
    let big_bin = scratch.path().join("terraform-provider-big");
    write_incompressible(&big_bin, big_mib << 20)?;
    let big_zip = stored_zip(&big_bin, "terraform-provider-big_v1.0.0")?;
    let big_zip_len = big_zip.len();
    publish(
        "kraken",
        "big",
        "1.0.0",
        big_zip,
        single_file_h1(&big_bin, "big", "1.0.0")?,
        "registry.kraken.dev",
    )?;

    println!("## kraken fetch (registry-fetch)\n");
    println!("### Peak memory while installing from the loopback HTTPS registry\n");
    println!("| package | zip MiB | wall s | peak RSS MiB (VmHWM) |");
    println!("|---|---|---|---|");
    for (addr, zip_len) in [
        (kraken_tests::FIXTURE_ADDRESS.to_string(), fixture_zip_len),
        ("registry.kraken.dev/kraken/big".to_string(), big_zip_len),
    ] {
        let cache = tempfile::tempdir()?;
        let (wall, hwm) = install_measured(&kraken, &server, &addr, cache.path()).await?;
        println!(
            "| {addr} | {:.1} | {:.2} | {:.1} |",
            zip_len as f64 / 1048576.0,
            wall.as_secs_f64(),
            hwm as f64 / 1024.0
        );
    }

    cache_hits(&kraken, &server)?;
    h1_throughput(
        fixture.path.parent().unwrap_or(Path::new(".")),
        scratch.path(),
    )?;
    Ok(())
}

/// Repeated `kraken fetch` of an installed provider with a lock file.
fn cache_hits(kraken: &Path, server: &RegistryServer) -> anyhow::Result<()> {
    let hits: usize = knob("KRAKEN_BENCH_FETCH_HITS", 50, 3)?;
    anyhow::ensure!(hits > 0, "KRAKEN_BENCH_FETCH_HITS must be at least 1");
    let cache = tempfile::tempdir()?;
    let lock = cache.path().join("bench.lock.hcl");
    let mut samples = Vec::new();
    for i in 0..=hits {
        let started = Instant::now();
        let out = fetch_cmd(kraken, server, kraken_tests::FIXTURE_ADDRESS, cache.path())
            .arg("--lock-file")
            .arg(&lock)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if i > 0 {
            samples.push(started.elapsed()); // the first run installs
        }
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("\n### Cache hit: `kraken fetch` process, lock file present ({hits} runs)\n");
    println!("| p50 ms | min ms | max ms | target |");
    println!("|---|---|---|---|");
    println!(
        "| {:.2} | {:.2} | {:.2} | < 20 ms |",
        ms(samples[samples.len() / 2]),
        ms(samples[0]),
        ms(samples[samples.len() - 1])
    );

    Ok(())
}

/// `h1:` of the fixture's package directory and of the synthetic package.
fn h1_throughput(fixture_dir: &Path, synthetic_dir: &Path) -> anyhow::Result<()> {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("\n### h1: hashing throughput (`hash::dir_hash`, warm page cache)\n");
    println!("| package | MiB | ms | MiB/s |");
    println!("|---|---|---|---|");
    for (name, dir) in [("fixture 1.0.0", fixture_dir), ("synthetic", synthetic_dir)] {
        let size: u64 = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok()?.metadata().ok())
            .map(|m| m.len())
            .sum();
        kraken_registry_fetch::hash::dir_hash(dir)?;
        let started = Instant::now();
        kraken_registry_fetch::hash::dir_hash(dir)?;
        let took = started.elapsed();
        let mib = size as f64 / 1048576.0;
        println!(
            "| {name} | {mib:.1} | {:.1} | {:.0} |",
            ms(took),
            mib / took.as_secs_f64()
        );
    }
    Ok(())
}

fn fetch_cmd(kraken: &Path, server: &RegistryServer, addr: &str, cache: &Path) -> Command {
    let mut cmd = Command::new(kraken);
    cmd.args(["fetch", addr, "--registry", &server.base_url(), "--ca-cert"])
        .arg(server.ca_file())
        .arg("--cache-dir")
        .arg(cache)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("TF_PLUGIN_CACHE_DIR");
    cmd
}

/// Install once as a child process, sampling its VmHWM (peak RSS) until it exits.
async fn install_measured(
    kraken: &Path,
    server: &RegistryServer,
    addr: &str,
    cache: &Path,
) -> anyhow::Result<(Duration, u64)> {
    let started = Instant::now();
    let mut child = fetch_cmd(kraken, server, addr, cache).spawn()?;
    let pid = child.id();
    let mut hwm = 0;
    loop {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            hwm = hwm.max(status_kib(&status, "VmHWM:").unwrap_or(0));
        }
        if let Some(status) = child.try_wait()? {
            anyhow::ensure!(status.success(), "kraken fetch {addr} failed");
            return Ok((started.elapsed(), hwm));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Deterministic incompressible bytes (xorshift), so the zip is as big as the package.
fn write_incompressible(path: &Path, len: usize) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..len / buf.len() {
        for chunk in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
        f.write_all(&buf)?;
    }
    f.flush()?;
    Ok(())
}

fn stored_zip(file: &Path, name: &str) -> anyhow::Result<Vec<u8>> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true)
        .unix_permissions(0o755);
    zip.start_file(name, opts)?;
    std::io::copy(&mut std::fs::File::open(file)?, &mut zip)?;
    zip.finish()?;
    Ok(out.into_inner())
}

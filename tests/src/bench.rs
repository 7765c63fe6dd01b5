//! Helpers the benchmarks share: knobs from the environment (and the smoke mode, [`knobs`]),
//! percentiles, a kube client, the Terraform and `kraken plan` runs each side of a comparison
//! makes, and what keeps a comparison fair ([`fair`]).

pub mod fair;
pub mod knobs;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use fair::{Gogc, Ratios, Seen, Spy};
pub use knobs::{knob, levels, smoke};

/// The number in environment variable `key`, or `default` when it is unset.
pub fn env_or<T: std::str::FromStr>(key: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(key) {
        Ok(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("{key} must be a number, got {v:?}")),
        Err(_) => Ok(default),
    }
}

/// The `p` quantile (0 to 1) of `v`, nearest rank.
pub fn pct(v: &[Duration], p: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(i).copied().unwrap_or_default()
}

/// A kube client for the control plane of `kubeconfig`.
pub async fn kube_client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// An operator build under test: a label for the tables, the `kraken` binary, and arguments
/// of `kraken operator` it runs with besides the bench's own.
#[derive(Debug, Clone)]
pub struct OperatorBuild {
    pub label: String,
    pub bin: PathBuf,
    pub args: Vec<String>,
}

/// `KRAKEN_BENCH_OPERATORS`: `label=path [ARG ...]` entries, comma-separated (for example
/// `before=/tmp/kraken-821c9f7,after=target/release/kraken`, or one build two ways:
/// `inProcess=target/release/kraken --runner-placement inProcess,local=target/release/kraken`),
/// run interleaved so they are compared on the same machine in one session. Unset: this
/// checkout's release build, labelled `head`.
pub fn operator_builds() -> anyhow::Result<Vec<OperatorBuild>> {
    let Ok(spec) = std::env::var("KRAKEN_BENCH_OPERATORS") else {
        return Ok(vec![OperatorBuild {
            label: "head".to_string(),
            bin: crate::kraken_bin()?,
            args: Vec::new(),
        }]);
    };
    let mut builds = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((label, path)) = part.split_once('=') else {
            anyhow::bail!("KRAKEN_BENCH_OPERATORS: {part:?} is not label=path");
        };
        let mut words = path.split_whitespace();
        let bin = PathBuf::from(words.next().unwrap_or_default());
        let args = words.map(str::to_owned).collect();
        anyhow::ensure!(
            bin.is_file(),
            "KRAKEN_BENCH_OPERATORS: {} is not a file",
            bin.display()
        );
        builds.push(OperatorBuild {
            label: label.trim().to_string(),
            bin,
            args,
        });
    }
    anyhow::ensure!(!builds.is_empty(), "KRAKEN_BENCH_OPERATORS is empty");
    Ok(builds)
}

/// `apiserver_request_total` from the API server's own `/metrics`, summed per (verb,
/// resource): every client's requests, the operator's, kubectl's and the benchmark's watch.
pub fn apiserver_requests(
    cp: &crate::ControlPlane,
) -> anyhow::Result<std::collections::BTreeMap<(String, String), f64>> {
    let text = cp.kubectl(&["get", "--raw", "/metrics"])?;
    let mut out = std::collections::BTreeMap::new();
    for (labels, v) in crate::operator::metric_samples(&text, "apiserver_request_total") {
        let label = |k: &str| crate::operator::label(&labels, k).to_string();
        let mut resource = label("resource");
        let sub = label("subresource");
        if !sub.is_empty() {
            resource = format!("{resource}/{sub}");
        }
        *out.entry((label("verb"), resource)).or_insert(0.0) += v;
    }
    Ok(out)
}

/// The median of `v` (the upper one of an even count); NaN when empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `kraken_api_writes_total` summed over an operator's `/metrics` text, Lease renewals
/// excluded: the writes its reconciles made.
pub fn api_writes(metrics: &str) -> f64 {
    crate::operator::metric_samples(metrics, "kraken_api_writes_total")
        .iter()
        .filter(|(l, _)| !l.iter().any(|(k, v)| k == "resource" && v == "leases"))
        .map(|(_, v)| v)
        .sum()
}

/// The AWS provider test peer's binary and version (`scripts/testenv.sh install` builds it).
pub fn aws_provider() -> anyhow::Result<(PathBuf, String)> {
    let aws = crate::TestEnv::load()?.provider("aws")?;
    Ok((aws.path, aws.version))
}

/// Runs the test environment's Terraform CLI in `dir` (its CLI configuration points at the
/// test mirror, so `init` installs the providers the tests use); fails with its output.
pub fn terraform(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let env = crate::TestEnv::load()?;
    let out = std::process::Command::new(env.path("KRAKEN_TEST_TERRAFORM")?)
        .args(args)
        .current_dir(dir)
        .env("TF_CLI_CONFIG_FILE", env.path("KRAKEN_TEST_TF_CLI_CONFIG")?)
        .env("TF_IN_AUTOMATION", "1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .context("running terraform")?;
    if !out.status.success() {
        anyhow::bail!(
            "terraform {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// One timed run of a command under a [`Spy`]: its output, its wall time and the provider
/// processes it started.
pub struct Watched {
    pub out: std::process::Output,
    pub took: Duration,
    pub seen: BTreeSet<Seen>,
}

/// Runs `cmd` to its end (stdin closed, output captured) under a [`Spy`].
pub fn run_watched(cmd: &mut std::process::Command, what: &str) -> anyhow::Result<Watched> {
    use anyhow::Context as _;
    let started = Instant::now();
    let child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {what}"))?;
    let spy = Spy::start(child.id());
    let out = child.wait_with_output()?;
    let took = started.elapsed();
    Ok(Watched {
        out,
        took,
        seen: spy.finish(),
    })
}

/// `bin plan -f <manifests> --no-color` against `cp`, with the test mirror as plugin dir: its
/// output and how long it took.
pub fn kraken_plan(
    bin: &std::path::Path,
    cp: &crate::ControlPlane,
    manifests: &std::path::Path,
) -> anyhow::Result<(std::process::Output, std::time::Duration)> {
    let w = kraken_plan_at(bin, cp, manifests, None, Gogc::GoDefault)?;
    Ok((w.out, w.took))
}

/// [`kraken_plan`] with `--concurrency` (None: its default) and the providers' `GOGC`, watched.
pub fn kraken_plan_at(
    bin: &std::path::Path,
    cp: &crate::ControlPlane,
    manifests: &std::path::Path,
    concurrency: Option<usize>,
    gogc: Gogc,
) -> anyhow::Result<Watched> {
    let env = crate::TestEnv::load()?;
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("plan")
        .arg("--kubeconfig")
        .arg(cp.kubeconfig())
        .arg("--plugin-dir")
        .arg(env.path("KRAKEN_TEST_PLUGIN_DIR")?)
        .arg("-f")
        .arg(manifests)
        .arg("--no-color");
    if let Some(c) = concurrency {
        cmd.args(["--concurrency", &c.to_string()]);
    }
    gogc.kraken_cli(&mut cmd);
    run_watched(&mut cmd, "kraken plan")
}

/// The test environment's Terraform CLI in `dir` with its providers' `GOGC`, timed and watched;
/// fails with its output unless it exits with one of `ok_codes`.
pub fn terraform_watched(
    dir: &Path,
    args: &[&str],
    gogc: Gogc,
    ok_codes: &[i32],
) -> anyhow::Result<Watched> {
    let env = crate::TestEnv::load()?;
    let mut cmd = std::process::Command::new(env.path("KRAKEN_TEST_TERRAFORM")?);
    cmd.args(args)
        .current_dir(dir)
        .env("TF_CLI_CONFIG_FILE", env.path("KRAKEN_TEST_TF_CLI_CONFIG")?)
        .env("TF_IN_AUTOMATION", "1")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    gogc.terraform(&mut cmd);
    let w = run_watched(&mut cmd, "terraform")?;
    let code = w.out.status.code();
    if !code.is_some_and(|c| ok_codes.contains(&c)) {
        anyhow::bail!(
            "terraform {} failed ({}): {}{}",
            args.join(" "),
            w.out.status,
            String::from_utf8_lossy(&w.out.stdout),
            String::from_utf8_lossy(&w.out.stderr)
        );
    }
    Ok(w)
}

/// Samples the resident memory of groups of processes every 200 ms on a thread and keeps
/// each group's peak (its processes' VmRSS summed at one instant) and last sample.
pub struct RssSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<(u64, u64)>>>,
}

/// Which processes make up a group, asked again at every sample.
pub type Group = Box<dyn Fn() -> Vec<u32> + Send>;

impl RssSampler {
    pub fn start(groups: Vec<Group>) -> Self {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut seen = vec![(0u64, 0u64); groups.len()];
            loop {
                for (group, (peak, last)) in groups.iter().zip(seen.iter_mut()) {
                    // A process that exited between the listing and the read holds nothing.
                    let now: u64 = group()
                        .into_iter()
                        .map(|p| crate::rss_bytes(p).unwrap_or(0))
                        .sum();
                    *peak = (*peak).max(now);
                    *last = now;
                }
                if flag.load(Ordering::Relaxed) {
                    return seen;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops sampling: per group, (peak, last sample), bytes.
    pub fn finish(mut self) -> Vec<(u64, u64)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

/// Every process running the executable named `file` (its `/proc/<pid>/comm`, which the
/// kernel cuts at 15 bytes), with its descendants.
pub fn processes_named(file: &str) -> Vec<u32> {
    let comm: String = file.chars().take(15).collect();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let named =
            std::fs::read_to_string(entry.path().join("comm")).is_ok_and(|c| c.trim_end() == comm);
        if named {
            out.extend(crate::operator::descendants(pid).unwrap_or_default());
        }
    }
    out
}

/// The `terraform` and `provider "aws"` blocks of a configuration for the AWS provider test
/// peer `version` against moto at `endpoint`, for `services` (STS is always there).
pub fn aws_terraform_header(endpoint: &str, version: &str, services: &[&str]) -> String {
    let region = crate::moto::REGION;
    let mut endpoints: Vec<String> = services
        .iter()
        .chain(std::iter::once(&"sts"))
        .map(|s| format!("    {s} = \"{endpoint}\"\n"))
        .collect();
    endpoints.dedup();
    format!(
        r#"terraform {{
  required_providers {{
    aws = {{ source = "hashicorp/aws", version = "{version}" }}
  }}
}}
provider "aws" {{
  region                      = "{region}"
  access_key                  = "testing"
  secret_key                  = "testing"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
  endpoints {{
{}  }}
}}
"#,
        endpoints.concat()
    )
}

/// (added, changed, destroyed) of Terraform's `Apply complete! Resources: 1 added, 0 changed,
/// 0 destroyed.` line, or `None` without one.
pub fn apply_summary(out: &str) -> Option<(usize, usize, usize)> {
    let line = out.lines().find(|l| l.starts_with("Apply complete!"))?;
    let rest = line.split_once("Resources:")?.1;
    let mut nums = rest
        .split(',')
        .map(|part| part.split_whitespace().next()?.parse::<usize>().ok());
    Some((nums.next()??, nums.next()??, nums.next()??))
}

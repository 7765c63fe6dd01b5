//! Helpers the benchmarks share: knobs from the environment, percentiles, a kube client.

use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// An operator build under test: a label for the tables and the `kraken` binary.
#[derive(Debug, Clone)]
pub struct OperatorBuild {
    pub label: String,
    pub bin: PathBuf,
}

/// `KRAKEN_BENCH_OPERATORS`: `label=path` pairs, comma-separated (for example
/// `before=/tmp/kraken-821c9f7,after=target/release/kraken`), run interleaved so two builds
/// are compared on the same machine in one session. Unset: this checkout's release build,
/// labelled `head`.
pub fn operator_builds() -> anyhow::Result<Vec<OperatorBuild>> {
    let Ok(spec) = std::env::var("KRAKEN_BENCH_OPERATORS") else {
        return Ok(vec![OperatorBuild {
            label: "head".to_string(),
            bin: crate::kraken_bin()?,
        }]);
    };
    let mut builds = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((label, path)) = part.split_once('=') else {
            anyhow::bail!("KRAKEN_BENCH_OPERATORS: {part:?} is not label=path");
        };
        let bin = PathBuf::from(path.trim());
        anyhow::ensure!(
            bin.is_file(),
            "KRAKEN_BENCH_OPERATORS: {} is not a file",
            bin.display()
        );
        builds.push(OperatorBuild {
            label: label.trim().to_string(),
            bin,
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

//! Shared harness for Kraken's tests against real peers.
//!
//! The peers (kube-apiserver, etcd, kubectl, Terraform, moto, provider binaries) are installed by
//! `scripts/testenv.sh install`, which writes an env file of `export` lines. Tests read that file
//! rather than the process environment so that `cargo test` works from any shell; a missing
//! file or variable fails the test with the command that fixes it — a missing peer is never a
//! silent skip.

pub mod registry_server;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context as _, bail};

/// The repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Where `scripts/testenv.sh` keeps its cache and env file.
pub fn testenv_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("KRAKEN_TESTENV_DIR") {
        return PathBuf::from(dir);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".to_string());
    Path::new(&home).join(".cache/kraken-testenv")
}

/// The variables `scripts/testenv.sh install` exported.
#[derive(Debug, Clone)]
pub struct TestEnv {
    vars: HashMap<String, String>,
}

/// A provider binary from the test mirror.
#[derive(Debug, Clone)]
pub struct ProviderBin {
    /// Short name: `random`, `time`, `null`, `fixture`.
    pub name: String,
    pub path: PathBuf,
    pub version: String,
    /// The source address Terraform knows it by.
    pub address: String,
}

impl TestEnv {
    /// Load the env file; fails with instructions when the peers are not installed.
    pub fn load() -> anyhow::Result<Self> {
        static ENV: OnceLock<Result<TestEnv, String>> = OnceLock::new();
        ENV.get_or_init(|| Self::read(&testenv_dir().join("env")).map_err(|e| format!("{e:#}")))
            .clone()
            .map_err(anyhow::Error::msg)
    }

    fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "the test peers are not installed ({} is missing); run `scripts/testenv.sh install`",
                path.display()
            )
        })?;
        Ok(Self {
            vars: parse_env_file(&text),
        })
    }

    /// A variable from the env file.
    pub fn var(&self, key: &str) -> anyhow::Result<String> {
        match self.vars.get(key) {
            Some(v) if !v.is_empty() => Ok(v.clone()),
            _ => bail!(
                "{key} is not set in {}; run `scripts/testenv.sh install`",
                testenv_dir().join("env").display()
            ),
        }
    }

    /// A variable that names a file that must exist.
    pub fn path(&self, key: &str) -> anyhow::Result<PathBuf> {
        let p = PathBuf::from(self.var(key)?);
        if !p.exists() {
            bail!(
                "{key}={} does not exist; run `scripts/testenv.sh install`",
                p.display()
            );
        }
        Ok(p)
    }

    /// One of the test providers: `random`, `time`, `null` (protocol 5) or `fixture` (6).
    pub fn provider(&self, name: &str) -> anyhow::Result<ProviderBin> {
        let upper = name.to_uppercase();
        let path = self.path(&format!("KRAKEN_TEST_PROVIDER_{upper}"))?;
        let version = self.var(&format!("KRAKEN_TEST_PROVIDER_{upper}_VERSION"))?;
        let address = if name == "fixture" {
            FIXTURE_ADDRESS.to_string()
        } else {
            format!("registry.terraform.io/hashicorp/{name}")
        };
        Ok(ProviderBin {
            name: name.to_string(),
            path,
            version,
            address,
        })
    }

    /// Every test provider, protocol 5 ones first.
    pub fn all_providers(&self) -> anyhow::Result<Vec<ProviderBin>> {
        ["random", "time", "null", "fixture"]
            .iter()
            .map(|n| self.provider(n))
            .collect()
    }
}

/// The protocol 6 fixture provider's source address (tests/fixtures/terraform-provider-fixture).
pub const FIXTURE_ADDRESS: &str = "registry.kraken.dev/kraken/fixture";

/// Parse `export KEY=VALUE` lines, with optional single or double quotes around the value.
pub fn parse_env_file(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("export ").unwrap_or(line);
            if line.starts_with('#') {
                return None;
            }
            let (k, v) = line.split_once('=')?;
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
                .unwrap_or(v);
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

/// The `kraken` binary of this workspace, built on first use with the same profile as the tests.
pub fn kraken_bin() -> anyhow::Result<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| build_kraken().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn build_kraken() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let release = !cfg!(debug_assertions);
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo_root()).args([
        "build",
        "--quiet",
        "-p",
        "kraken-bridge",
        "--bin",
        "kraken",
    ]);
    if release {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .context("failed to run cargo to build kraken")?;
    if !status.success() {
        bail!("building the kraken binary failed ({status})");
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target"));
    let bin = target
        .join(if release { "release" } else { "debug" })
        .join("kraken");
    if !bin.exists() {
        bail!("kraken was built but {} does not exist", bin.display());
    }
    Ok(bin)
}

/// A temporary directory for one test, removed when dropped.
pub fn scratch_dir(prefix: &str) -> anyhow::Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix(prefix).tempdir()?)
}

/// Reading the fixture provider's ledger (`tests/fixtures/terraform-provider-fixture`): the
/// "cloud" that tests count objects in. `objects/<id>.json` are the live objects; `events.log`
/// records every real mutation as `<nanos> <op> <id> <name>`.
pub mod ledger {
    use std::path::Path;

    /// How many objects exist in the ledger at `dir`.
    pub fn live_objects(dir: &Path) -> usize {
        std::fs::read_dir(dir.join("objects"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Every recorded mutation, oldest first, as `(op, id)` with op in create|update|delete.
    pub fn events(dir: &Path) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(dir.join("events.log")).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace().skip(1);
                Some((it.next()?.to_string(), it.next()?.to_string()))
            })
            .collect()
    }
}

/// A local control plane (etcd + kube-apiserver) from `scripts/testenv.sh up`, stopped on drop.
pub struct ControlPlane {
    run_dir: PathBuf,
    pub kubeconfig: PathBuf,
}

impl ControlPlane {
    /// Start a fresh control plane in its own run directory.
    pub fn start(name: &str) -> anyhow::Result<Self> {
        let run_dir = testenv_dir()
            .join("run")
            .join(format!("{name}-{}", std::process::id()));
        let out = Command::new(repo_root().join("scripts/testenv.sh"))
            .arg("up")
            .arg(&run_dir)
            .output()
            .context("failed to run scripts/testenv.sh up")?;
        if !out.status.success() {
            bail!(
                "scripts/testenv.sh up failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(last) = stdout.lines().last() else {
            bail!("scripts/testenv.sh up printed no kubeconfig path");
        };
        Ok(Self {
            run_dir,
            kubeconfig: PathBuf::from(last.trim()),
        })
    }

    /// Run kubectl against this control plane, whatever its exit status.
    pub fn kubectl_output(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        let env = TestEnv::load()?;
        Command::new(env.path("KRAKEN_TEST_KUBECTL")?)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .context("failed to run kubectl")
    }

    /// The run directory (`scripts/testenv.sh up RUN_DIR`): logs, pid files, certificates.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The kube-apiserver's process id.
    pub fn apiserver_pid(&self) -> anyhow::Result<u32> {
        let text = std::fs::read_to_string(self.run_dir.join("kube-apiserver.pid"))?;
        Ok(text.trim().parse()?)
    }

    /// Resident memory of the kube-apiserver, in bytes.
    pub fn apiserver_rss(&self) -> anyhow::Result<u64> {
        rss_bytes(self.apiserver_pid()?)
    }

    /// Install the CRDs of a `kraken codegen --out` directory with server-side apply (large CRDs
    /// exceed what client-side apply can record) and wait until every CRD carrying `label`
    /// (a selector such as `tf.kraken.dev/provider=aws`) is Established. Returns how many there
    /// are.
    pub fn install_crds(&self, dir: &Path, label: &str) -> anyhow::Result<usize> {
        self.kubectl(&[
            "apply",
            "--server-side",
            "--field-manager=kraken-test",
            "-k",
            &dir.to_string_lossy(),
        ])
        .with_context(|| format!("installing the CRDs in {}", dir.display()))?;
        self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "crd",
            "-l",
            label,
            "--timeout=1800s",
        ])?;
        let names = self.kubectl(&["get", "crd", "-l", label, "-o", "name"])?;
        Ok(names.lines().count())
    }

    /// Run kubectl with `input` on its standard input, whatever its exit status.
    pub fn kubectl_stdin(
        &self,
        args: &[&str],
        input: &[u8],
    ) -> anyhow::Result<std::process::Output> {
        use std::io::Write as _;
        let env = TestEnv::load()?;
        let mut child = Command::new(env.path("KRAKEN_TEST_KUBECTL")?)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("failed to run kubectl")?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(input)?;
        }
        Ok(child.wait_with_output()?)
    }

    /// Run kubectl against this control plane and return its stdout; non-zero exit is an error.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.kubectl_output(args)?;
        if !out.status.success() {
            bail!(
                "kubectl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/testenv.sh"))
            .arg("down")
            .arg(&self.run_dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

/// A process's resident set size (VmRSS), in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status_kib(&status, "VmRSS:")
        .map(|kib| kib * 1024)
        .context("no VmRSS line in /proc status")
}

/// A `Key:   123 kB` line of /proc/<pid>/status, in KiB.
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_file_parsing() {
        let vars =
            parse_env_file("# comment\nexport A=1\nexport B=\"two words\"\nC='x=y'\n\nexport D=\n");
        assert_eq!(vars["A"], "1");
        assert_eq!(vars["B"], "two words");
        assert_eq!(vars["C"], "x=y");
        assert_eq!(vars["D"], "");
    }
}

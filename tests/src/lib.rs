//! Shared harness for Kraken's tests against real peers.
//!
//! The peers (kube-apiserver, etcd, kubectl, Terraform, moto, provider binaries) are installed by
//! `scripts/testenv.sh install`, which writes an env file of `export` lines. Tests read that file
//! rather than the process environment so that `cargo test` works from any shell; a missing
//! file or variable fails the test with the command that fixes it — a missing peer is never a
//! silent skip.

pub mod aws_api;
pub mod bench;
pub mod chaos;
mod control_plane;
pub mod delay_proxy;
pub mod image;
pub mod kubelet;
pub mod ledger;
pub mod moto;
pub mod operator;
pub mod registry_server;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context as _, bail};

pub use control_plane::ControlPlane;

/// The repository root (the workspace directory). From the `CARGO_MANIFEST_DIR` cargo sets
/// when it runs a test or bench, not the one compiled in: a build cache shared between two
/// checkouts may run a binary compiled in the other one.
pub fn repo_root() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest
        .parent()
        .map_or_else(|| manifest.clone(), Path::to_path_buf)
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

/// The `terraform` block requiring the fixture provider (1.0.0) and, with a ledger, its
/// `provider` block writing there: the head of a Terraform configuration over the fixture.
pub fn fixture_terraform_header(ledger: Option<&Path>) -> String {
    let mut text = format!(
        r#"terraform {{
  required_providers {{
    fixture = {{
      source  = "{FIXTURE_ADDRESS}"
      version = "1.0.0"
    }}
  }}
}}
"#
    );
    if let Some(ledger) = ledger {
        text.push_str(&format!(
            "provider \"fixture\" {{\n  ledger_dir = \"{}\"\n}}\n",
            ledger.display()
        ));
    }
    text
}

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

/// The time of day in UTC, to the millisecond, of `unix_nanos` (nanoseconds since the Unix
/// epoch): how the operators' log lines tell time, so a test's own timeline lines up with them.
pub fn clock(unix_nanos: u128) -> String {
    let millis = unix_nanos / 1_000_000;
    let secs = millis / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60,
        millis % 1000
    )
}

/// [`clock`] now.
pub fn clock_now() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    clock(nanos)
}

/// A temporary directory for one test, removed when dropped.
pub fn scratch_dir(prefix: &str) -> anyhow::Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix(prefix).tempdir()?)
}

/// Where the fixture provider may write (its ledger, its one-shot fault markers): the one
/// directory the test operators let their sandboxed runners write beneath
/// (`--runner-allow-write`), so nothing else of the test machine is writable to a provider.
pub fn fixture_root() -> anyhow::Result<PathBuf> {
    let root = std::env::temp_dir().join("kraken-fixture-files");
    std::fs::create_dir_all(&root)?;
    Ok(root)
}

/// A scratch directory the fixture provider may write, under [`fixture_root`].
pub fn fixture_dir(prefix: &str) -> anyhow::Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(fixture_root()?)?)
}

/// Poll `check` until it returns `Ok(Some(value))`, at most `timeout`.
///
/// `Ok(None)` means "not yet". An `Err` also means "not yet": it is the observation to report
/// if the wait times out (say what you saw: `bail!("Synced is False/ProviderError: ...")`),
/// and transient failures (kubectl during an API server restart) are retried the same way.
/// The timeout error names `what`, the time waited and the last observation.
pub fn wait_for<T>(
    timeout: std::time::Duration,
    what: &str,
    mut check: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let start = std::time::Instant::now();
    let mut last: Option<String> = None;
    let mut checks = 0u32;
    loop {
        checks += 1;
        match check() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = Some(format!("{e:#}")),
        }
        if start.elapsed() >= timeout {
            bail!(
                "timed out after {:.1}s ({checks} checks) waiting for {what}; last observation: {}",
                start.elapsed().as_secs_f64(),
                last.as_deref()
                    .unwrap_or("none (the check only said \"not yet\")")
            );
        }
        std::thread::sleep(WAIT_POLL_INTERVAL);
    }
}

/// How often [`wait_for`] polls: often enough that a test's wall time is dominated by the
/// system under test, rarely enough that two parallel tests' kubectl calls leave CPU for it.
pub const WAIT_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// `helm template kraken charts/kraken --namespace kraken-system ARGS...` with the real helm:
/// the chart as it would be installed (`--set k=v`, `--show-only templates/F.yaml`).
pub fn helm_template(args: &[&str]) -> anyhow::Result<String> {
    let env = TestEnv::load()?;
    let out = Command::new(env.path("KRAKEN_TEST_HELM")?)
        .args(["template", "kraken", "--namespace", "kraken-system"])
        .arg(repo_root().join("charts/kraken"))
        .args(args)
        .output()
        .context("failed to run helm")?;
    if !out.status.success() {
        bail!(
            "helm template failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// A process's resident set size (VmRSS), in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status_kib(&status, "VmRSS:")
        .map(|kib| kib * 1024)
        .context("no VmRSS line in /proc status")
}

/// A process's private anonymous memory (`RssAnon`: its heap and stacks, not the pages of its
/// binary and libraries, which are shared and can be read again from disk).
pub fn rss_anon_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status_kib(&status, "RssAnon:")
        .map(|kib| kib * 1024)
        .context("no RssAnon line in /proc status")
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

    #[test]
    fn ledger_readers_and_drift_writers() -> anyhow::Result<()> {
        let dir = scratch_dir("ledger-test-")?;
        let dir = dir.path();
        assert!(ledger::objects(dir)?.is_empty(), "no objects/ yet");
        assert!(ledger::event_log(dir)?.is_empty(), "no events.log yet");
        let obj = serde_json::json!({"id": "obj-00000000000000a1", "name": "alpha", "size": 3});
        ledger::write_object(dir, &obj)?;
        ledger::write_object(
            dir,
            &serde_json::json!({"id": "obj-00000000000000b1", "name": "beta"}),
        )?;
        std::fs::write(dir.join("objects/.tmp-obj-x-123"), "{half")?;
        assert_eq!(ledger::live_objects(dir), 2);
        assert_eq!(ledger::objects(dir)?.len(), 2);
        assert_eq!(ledger::objects_named(dir, "alpha")?, vec![obj]);
        ledger::edit_object(dir, "obj-00000000000000a1", |o| o["size"] = 7.into())?;
        let edited = ledger::object(dir, "obj-00000000000000a1")?;
        assert_eq!(edited.map(|o| o["size"].clone()), Some(7.into()));
        ledger::remove_object(dir, "obj-00000000000000b1")?;
        assert_eq!(ledger::object(dir, "obj-00000000000000b1")?, None);
        assert!(ledger::object(dir, "../escape").is_err());

        std::fs::write(
            dir.join("events.log"),
            "1700000000000000001 create obj-00000000000000a1 alpha\n\
             1700000000000000002 update obj-00000000000000a1 \"a b\"\n",
        )?;
        let events = ledger::event_log(dir)?;
        assert_eq!(events.len(), 2);
        assert_eq!(
            (events[1].op.as_str(), events[1].name.as_str()),
            ("update", "\"a b\"")
        );
        std::fs::write(dir.join("events.log"), "garbage\n")?;
        assert!(ledger::event_log(dir).is_err(), "a torn line is an error");
        Ok(())
    }

    #[test]
    fn apply_calls_pair_up_and_count_what_is_in_flight() -> anyhow::Result<()> {
        let dir = scratch_dir("applies-test-")?;
        let dir = dir.path();
        assert!(ledger::apply_calls(dir)?.is_empty(), "no applies.log yet");
        std::fs::write(
            dir.join("applies.log"),
            "10 begin create 7.1\n11 begin create 7.2\n20 end create 7.1\n\
             20 begin delete 7.3\n30 end create 7.2\n31 begin update 8.1\n",
        )?;
        let calls = ledger::apply_calls(dir)?;
        let summary: Vec<_> = calls
            .iter()
            .map(|c| (c.begin, c.end, c.op.as_str(), c.call.as_str()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (10, Some(20), "create", "7.1"),
                (11, Some(30), "create", "7.2"),
                (20, None, "delete", "7.3"),
                (31, None, "update", "8.1"),
            ]
        );
        // 7.1 ends at 20 as 7.3 begins, and 8.1 begins after 7.2 ended: never three at once.
        assert_eq!(ledger::max_in_flight(&calls), 2);
        assert_eq!(ledger::max_in_flight(&calls[..1]), 1);
        assert_eq!(ledger::max_in_flight(&[]), 0);
        let at = |t: u128| -> Vec<&str> {
            ledger::in_flight_at(&calls, "create", t)
                .iter()
                .map(|c| c.call.as_str())
                .collect()
        };
        assert_eq!(at(15), ["7.1", "7.2"]);
        assert_eq!(at(20), ["7.2"], "7.1 returned at 20");
        assert_eq!(at(10), Vec::<&str>::new(), "7.1 began at 10, not before");
        assert_eq!(
            ledger::in_flight_at(&calls, "update", 40).len(),
            1,
            "8.1 never ended"
        );
        for bad in [
            "5 end create 1.1\n",
            "5 begin create 1.1\n6 begin create 1.1\n",
            "x\n",
        ] {
            std::fs::write(dir.join("applies.log"), bad)?;
            assert!(ledger::apply_calls(dir).is_err(), "{bad:?} must be refused");
        }
        Ok(())
    }

    #[test]
    fn wait_for_reports_the_last_observation() {
        let mut n = 0;
        let err: anyhow::Error = wait_for::<()>(
            std::time::Duration::from_millis(600),
            "n to reach 100",
            || {
                n += 1;
                anyhow::bail!("n is {n}")
            },
        )
        .expect_err("must time out");
        let msg = format!("{err:#}");
        assert!(msg.contains("waiting for n to reach 100"), "{msg}");
        assert!(
            msg.contains(&format!("last observation: n is {n}")),
            "{msg}"
        );

        let mut polls = 0;
        let got = wait_for(std::time::Duration::from_secs(5), "third poll", || {
            polls += 1;
            Ok((polls == 3).then_some(polls))
        });
        assert_eq!(got.ok(), Some(3));
    }
}

//! `kraken operator` as a process under test, against a [`ControlPlane`].
//!
//! The end-to-end tests treat the operator as a black box with the interface of
//! `docs/operator.md`: its flags, its `/metrics`, `/readyz` and `/healthz`, the conditions,
//! Events and Secrets it writes. This module starts and kills it; [`bed`] builds a complete
//! test bed (control plane, CRDs, namespace, fixture ledger, ProviderConfig, operator).
//!
//! Killing takes the operator *and every process below it* (its provider plugins), as when a
//! container's main process dies: the operator is SIGKILLed, its providers finish the applies
//! in flight (the fixture on SIGTERM) or die at once, and the kill returns only once all of
//! them are gone, so none finishes an apply behind the back of its successor ([`kill_tree`]).

use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};

use crate::{ControlPlane, TestEnv, kraken_bin};

pub mod aws;
pub mod bed;
mod process;
mod scrape;

pub use bed::{
    FixtureBed, condition, events_for, object_manifest, provider_config_manifest,
    state_secret_name, yaml_documents,
};
use process::signal;
pub use process::{descendants, kill_tree, process_alive};
pub use scrape::{Labels, http_get, label, metric_samples, metric_sum, metric_sum_where};

/// How to run `kraken operator`.
#[derive(Debug, Clone)]
pub struct OperatorOptions {
    /// Names the log file: `<run dir>/operator-<label>.log`.
    pub label: String,
    /// `RUST_LOG` of the operator process.
    pub rust_log: String,
    /// Extra environment of the operator process; the `KRAKEN_FIXTURE_*` ones are passed on
    /// to the providers it starts with `--provider-env` (`KRAKEN_FIXTURE_CRASH_ONCE_FILE`, ...). `KRAKEN_FIXTURE_*`, `AWS_*`, `KRAKEN_PLUGIN_DIR`,
    /// `KUBECONFIG` and `POD_NAMESPACE` of the test process are never passed on.
    pub env: Vec<(String, String)>,
    /// Extra arguments after the standard ones.
    pub args: Vec<String>,
    /// Leader election on the Lease `kraken-operator` in `default` (the default). Off
    /// (`--no-leader-elect`) where a test restarts the operator faster than a Lease expires.
    pub leader_elect: bool,
    /// The `kraken` binary to run; `None` builds this checkout's ([`kraken_bin`]). Benchmarks
    /// set it to compare two builds side by side.
    pub bin: Option<PathBuf>,
    /// Run under this kubeconfig instead of the control plane's admin one (the chart test's
    /// ServiceAccount identity).
    pub kubeconfig: Option<PathBuf>,
    /// `--plugin-dir` instead of `$KRAKEN_TEST_PLUGIN_DIR` (a path inside a chroot).
    pub plugin_dir: Option<PathBuf>,
    /// Run the container image's entry point in its unpacked root file system instead of
    /// `bin` (the paths above are then the ones inside it).
    pub chroot: Option<crate::image::Chroot>,
    /// Off: only `operator --kubeconfig K --metrics-addr A` and [`Self::args`], as a
    /// deployment runs it (no `--plugin-dir`, no `--lease-namespace`: the chart test).
    pub standard_args: bool,
    /// The operator's working directory; `None`: the test's.
    pub current_dir: Option<PathBuf>,
}

impl OperatorOptions {
    /// One replica of several, named `identity` (its log label and `POD_NAME`): leader election
    /// on, `info` logs.
    pub fn replica(identity: &str) -> Self {
        Self {
            label: identity.into(),
            rust_log: "info".into(),
            leader_elect: true,
            env: vec![("POD_NAME".into(), identity.into())],
            ..Self::default()
        }
    }
}

impl Default for OperatorOptions {
    fn default() -> Self {
        Self {
            label: "main".to_string(),
            rust_log: "info,kraken=debug".to_string(),
            env: Vec::new(),
            args: Vec::new(),
            leader_elect: true,
            bin: None,
            kubeconfig: None,
            plugin_dir: None,
            chroot: None,
            standard_args: true,
            current_dir: None,
        }
    }
}

/// A running (or killed) `kraken operator`. Dropping it kills it.
pub struct Operator {
    bin: PathBuf,
    kubeconfig: PathBuf,
    plugin_dir: PathBuf,
    opts: OperatorOptions,
    log_path: PathBuf,
    child: Option<Child>,
    metrics_addr: SocketAddr,
    starts: u32,
}

impl Operator {
    /// Spawn `kraken operator --kubeconfig <cp> --plugin-dir $KRAKEN_TEST_PLUGIN_DIR
    /// --metrics-addr 127.0.0.1:<free port> --lease-namespace default [args]`, output appended
    /// to `<run dir>/operator-<label>.log`. Does not wait for readiness ([`Self::wait_ready`]).
    pub fn start(cp: &ControlPlane, opts: OperatorOptions) -> anyhow::Result<Self> {
        let env = TestEnv::load()?;
        let plugin_dir = env.path("KRAKEN_TEST_PLUGIN_DIR")?;
        let bin = match &opts.bin {
            Some(bin) => bin.clone(),
            None => kraken_bin()?,
        };
        let log_path = cp.run_dir().join(format!("operator-{}.log", opts.label));
        let mut op = Self {
            bin,
            kubeconfig: opts
                .kubeconfig
                .clone()
                .unwrap_or_else(|| cp.kubeconfig().to_path_buf()),
            plugin_dir: opts.plugin_dir.clone().unwrap_or(plugin_dir),
            opts,
            log_path,
            child: None,
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            starts: 0,
        };
        op.spawn()?;
        Ok(op)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        // A fresh port each time: the old one may linger in TIME_WAIT after a SIGKILL.
        let port = free_port()?;
        self.metrics_addr = SocketAddr::from(([127, 0, 0, 1], port));
        self.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("opening {}", self.log_path.display()))?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
        writeln!(
            log,
            "==== kraken-tests: operator start #{} at unix {}.{:03} (metrics {}) ====",
            self.starts,
            now.as_secs(),
            now.subsec_millis(),
            self.metrics_addr
        )?;
        let mut cmd = match &self.opts.chroot {
            Some(chroot) => chroot.command(),
            None => Command::new(&self.bin),
        };
        cmd.arg("operator")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--metrics-addr")
            .arg(self.metrics_addr.to_string());
        if self.opts.standard_args {
            cmd.arg("--plugin-dir")
                .arg(&self.plugin_dir)
                .arg("--lease-namespace")
                .arg("default")
                // The fixture's ledgers and fault markers: its only writable place.
                .arg("--runner-allow-write")
                .arg(crate::fixture_root()?);
        }
        if !self.opts.leader_elect {
            cmd.arg("--no-leader-elect");
        }
        cmd.args(&self.opts.args);
        if let Some(dir) = &self.opts.current_dir {
            cmd.current_dir(dir);
        }
        // A provider inherits nothing of the operator's environment unless the admin says so:
        // a test's fixture switches are that opt-in.
        for (key, _) in &self.opts.env {
            if key.starts_with("KRAKEN_FIXTURE_") {
                cmd.arg("--provider-env").arg(key);
            }
        }
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            // AWS_*: the operator's AWS environment (credentials, region, endpoints) is only
            // what a test gives it, never the developer's own.
            if k.starts_with("KRAKEN_FIXTURE_")
                || k.starts_with("AWS_")
                || matches!(&*k, "KRAKEN_PLUGIN_DIR" | "KUBECONFIG" | "POD_NAMESPACE")
            {
                cmd.env_remove(&key);
            }
        }
        cmd.env("RUST_LOG", &self.opts.rust_log)
            .envs(self.opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {} operator", self.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL the operator and its provider processes, and reap it. A no-op when not running.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if child.try_wait()?.is_none() {
            kill_tree(child.id())?;
        }
        child.wait().context("reaping the killed operator")?;
        Ok(())
    }

    /// SIGTERM the operator (a pod being deleted) and wait up to `timeout` for it to exit.
    pub fn terminate(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let pid = self.pid().context("the operator is not running")?;
        signal("-TERM", &[pid])?;
        let child = self.child.as_mut().context("the operator is not running")?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                return Ok(status);
            }
            if std::time::Instant::now() >= deadline {
                bail!("the operator did not exit within {timeout:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGSTOP the operator process alone (its providers keep running): a pause, as a frozen
    /// VM or a stalled process gives one.
    pub fn pause(&self) -> anyhow::Result<()> {
        let pid = self.pid().context("the operator is not running")?;
        signal("-STOP", &[pid])
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) -> anyhow::Result<()> {
        let pid = self.pid().context("the operator is not running")?;
        signal("-CONT", &[pid])
    }

    /// Kill (if running) and start again, with a new metrics port; the log is appended to.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill()?;
        self.spawn()
    }

    /// The operator's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// How many times this operator was started (1 + restarts).
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// None while the process runs; its exit status once it has exited on its own.
    pub fn exit_status(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(child) => Ok(child.try_wait()?),
            None => bail!("the operator is not started (killed and not restarted)"),
        }
    }

    /// The log file (all starts, appended).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Everything the operator wrote to stdout and stderr, over all its starts.
    pub fn logs(&self) -> anyhow::Result<String> {
        let bytes = std::fs::read(&self.log_path)
            .with_context(|| format!("reading {}", self.log_path.display()))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The operator's own last `n` log lines; the providers' relayed stderr is left out (at
    /// debug level it drowns everything else).
    pub fn log_tail(&self, n: usize) -> String {
        match self.logs() {
            Ok(text) => {
                let lines: Vec<&str> = text
                    .lines()
                    .filter(|l| !l.contains("provider::stdio"))
                    .collect();
                lines[lines.len().saturating_sub(n)..].join("\n")
            }
            Err(e) => format!("(no operator log: {e:#})"),
        }
    }

    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// `GET /metrics` (Prometheus text); anything but 200 is an error.
    pub fn metrics(&self) -> anyhow::Result<String> {
        let (status, body) = http_get(self.metrics_addr, "/metrics")?;
        if status != 200 {
            bail!("GET /metrics answered {status}: {body}");
        }
        Ok(body)
    }

    /// The sum of all samples of metric `name` (all label sets) in the current `/metrics`;
    /// an error when the operator exposes no sample of it.
    pub fn metric(&self, name: &str) -> anyhow::Result<f64> {
        let text = self.metrics()?;
        metric_sum(&text, name)
            .with_context(|| format!("the operator's /metrics has no sample of {name}:\n{text}"))
    }

    /// Like [`Self::metric`], over the samples whose labels satisfy `keep`.
    pub fn metric_where(
        &self,
        name: &str,
        keep: impl Fn(&[(String, String)]) -> bool,
    ) -> anyhow::Result<f64> {
        let text = self.metrics()?;
        metric_sum_where(&text, name, keep).with_context(|| {
            format!("the operator's /metrics has no matching sample of {name}:\n{text}")
        })
    }

    /// Poll `/readyz` until it answers 200. Fails at once, with the log tail, if the process
    /// exits meanwhile.
    pub fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        let mut last;
        loop {
            if let Some(status) = self.exit_status()? {
                bail!(
                    "the operator exited ({status}) before it was ready; log tail:\n{}",
                    self.log_tail(40)
                );
            }
            match http_get(self.metrics_addr, "/readyz") {
                Ok((200, _)) => return Ok(()),
                Ok((status, body)) => last = format!("/readyz answered {status}: {body}"),
                Err(e) => last = format!("{e:#}"),
            }
            if start.elapsed() >= timeout {
                bail!(
                    "the operator was not ready after {timeout:?} ({last}); log tail:\n{}",
                    self.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// A test's failure `e` with the log tails of the operators it ran (each with its label),
/// `lines` lines in all. The cause comes first and again at the end: CI shows the start of a
/// failure and cuts long output.
pub fn with_log_tails(e: anyhow::Error, ops: &[(&str, &Operator)], lines: usize) -> anyhow::Error {
    let each = lines / ops.len().max(1);
    let tails: Vec<String> = ops
        .iter()
        .map(|(label, op)| {
            format!(
                "{label} log tail, without provider output ({}):\n{}",
                op.log_path().display(),
                op.log_tail(each)
            )
        })
        .collect();
    anyhow::anyhow!("{e:#}\n\n{}\n\ncause again: {e:#}", tails.join("\n\n"))
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(listener.local_addr()?.port())
}

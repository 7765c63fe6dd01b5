//! `kraken operator` as a process under test, against a [`ControlPlane`].
//!
//! The end-to-end tests treat the operator as a black box with the interface of
//! `docs/operator.md`: its flags, its `/metrics`, `/readyz` and `/healthz`, the conditions,
//! Events and Secrets it writes. This module starts and kills it; [`bed`] builds a complete
//! test bed (control plane, CRDs, namespace, fixture ledger, ProviderConfig, operator).
//!
//! Killing is SIGKILL of the operator *and every process below it* (its provider plugins):
//! that is what happens to a container whose main process dies, and it keeps a killed
//! operator's providers from finishing applies behind the back of its successor.

use std::fs::OpenOptions;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};

use crate::{ControlPlane, TestEnv, kraken_bin};

pub mod aws;
pub mod bed;

pub use bed::{
    FixtureBed, condition, events_for, object_manifest, provider_config_manifest,
    state_secret_name, yaml_documents,
};

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
            rust_log: "info,kraken_bridge=debug".to_string(),
            env: Vec::new(),
            args: Vec::new(),
            leader_elect: true,
            bin: None,
            kubeconfig: None,
            plugin_dir: None,
            chroot: None,
            standard_args: true,
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
                .arg("default");
        }
        if !self.opts.leader_elect {
            cmd.arg("--no-leader-elect");
        }
        cmd.args(&self.opts.args);
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

/// Plain HTTP/1.0 GET (no chunked responses, the server closes the connection):
/// `(status, body)`.
pub fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("reading the answer to GET {path} from {addr}"))?;
    parse_http_response(&raw).with_context(|| format!("GET http://{addr}{path}"))
}

fn parse_http_response(raw: &[u8]) -> anyhow::Result<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("malformed HTTP response: {text:?}"))?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status in HTTP response: {head:?}"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Ok((status, body))
}

/// Decode a chunked body (a server may answer chunked even to HTTP/1.0).
fn dechunk(mut body: &str) -> anyhow::Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").context("truncated chunked body")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .with_context(|| format!("bad chunk size {size:?}"))?;
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..size).context("truncated chunk")?;
        out.push_str(chunk);
        body = rest
            .get(size..)
            .and_then(|r| r.strip_prefix("\r\n"))
            .context("chunk not followed by CRLF")?;
    }
}

/// A sample's labels as `(name, value)` pairs, in the order written.
pub type Labels = Vec<(String, String)>;

/// The value of label `key` of a sample, "" when it has none.
pub fn label<'a>(labels: &'a Labels, key: &str) -> &'a str {
    labels
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// The sum of every sample of metric `name` (any labels) in Prometheus text; None when there
/// is none. `name` is the full sample name (`kraken_reconcile_runs_total`).
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    metric_sum_where(text, name, |_| true)
}

/// Like [`metric_sum`], over the samples whose labels satisfy `keep` (given as `(name, value)`
/// pairs, values unescaped): e.g. API writes other than Lease renewals.
pub fn metric_sum_where(
    text: &str,
    name: &str,
    keep: impl Fn(&[(String, String)]) -> bool,
) -> Option<f64> {
    let mut sum = None;
    for (labels, v) in metric_samples(text, name) {
        if keep(&labels) {
            *sum.get_or_insert(0.0) += v;
        }
    }
    sum
}

/// Every sample of metric `name` in Prometheus text, as (labels, value), in the order written:
/// e.g. the API writes per `(resource, verb)`.
pub fn metric_samples(text: &str, name: &str) -> Vec<(Labels, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((sample_name, labels, rest)) = split_sample(line) else {
            continue;
        };
        if sample_name != name {
            continue;
        }
        if let Some(v) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            out.push((labels, v));
        }
    }
    out
}

/// `name{k="v",...} value [ts]` → (name, labels, "value [ts]"). Label values may hold `}`,
/// `,`, spaces and the escapes `\\`, `\"`, `\n`.
fn split_sample(line: &str) -> Option<(&str, Labels, &str)> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let rest = &line[name_end..];
    let Some(mut body) = rest.strip_prefix('{') else {
        return Some((name, Vec::new(), rest));
    };
    let mut labels = Vec::new();
    loop {
        body = body.trim_start_matches([',', ' ']);
        if let Some(after) = body.strip_prefix('}') {
            return Some((name, labels, after));
        }
        let (key, after_key) = body.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after_key.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim().to_string(), value));
        body = &after_key[end + 1..];
    }
}

/// How long the processes below a killed operator have to exit after SIGTERM.
const TERM_GRACE: Duration = Duration::from_secs(10);

/// Kill `pid` and all its descendants: an operator dying with its provider processes. The root
/// is stopped first, so that it cannot start a process between the look at /proc and the kill,
/// then SIGKILLed. The processes below it get SIGTERM, and SIGKILL if they are still there
/// after [`TERM_GRACE`]. On SIGTERM the fixture provider finishes the applies it has in flight
/// and exits, the way a cloud completes a request it has begun whatever happens to the caller,
/// so its ledger never holds half a mutation; HashiCorp's providers exit at once. Everything is
/// awaited (a process counts as gone once it is a zombie).
pub fn kill_tree(pid: u32) -> anyhow::Result<()> {
    signal("-STOP", &[pid])?;
    let below = descendants(pid)?;
    signal("-KILL", &[pid])?;
    if below.is_empty() {
        return Ok(());
    }
    signal("-TERM", &below)?;
    let gone = |deadline: Instant| {
        below.iter().all(|p| {
            while process_alive(*p) {
                if Instant::now() > deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            true
        })
    };
    if gone(Instant::now() + TERM_GRACE) {
        return Ok(());
    }
    signal("-KILL", &below)?;
    if !gone(Instant::now() + Duration::from_secs(5)) {
        bail!("a process below the operator {pid} survived SIGKILL: {below:?}");
    }
    Ok(())
}

/// Send a signal with kill(1) (the workspace forbids `unsafe`, so no libc). Processes that
/// are already gone are not an error.
fn signal(sig: &str, pids: &[u32]) -> anyhow::Result<()> {
    let out = Command::new("kill")
        .arg(sig)
        .args(pids.iter().map(u32::to_string))
        .output()
        .context("running kill(1)")?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let gone = pids.iter().all(|p| !process_alive(*p));
        if !gone && !stderr.contains("No such process") {
            bail!("kill {sig} {pids:?} failed: {stderr}");
        }
    }
    Ok(())
}

/// Every process below `root`, from /proc (parents before children).
pub fn descendants(root: u32) -> anyhow::Result<Vec<u32>> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").context("listing /proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // Gone between listing and reading: not our concern.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((ppid, _)) = parse_stat(&stat) {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parent_of
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    Ok(found)
}

/// (ppid, state) from /proc/<pid>/stat; the command name may hold spaces and parentheses,
/// so the fields are taken after its last `)`.
fn parse_stat(stat: &str) -> Option<(u32, char)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state))
}

/// True while `pid` exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| parse_stat(&s))
        .is_some_and(|(_, state)| state != 'Z' && state != 'X')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sums_over_label_sets() {
        let text = "# HELP kraken_reconcile_runs_total Reconciles.\n\
            # TYPE kraken_reconcile_runs_total counter\n\
            kraken_reconcile_runs_total{kind=\"Object\"} 3\n\
            kraken_reconcile_runs_total{kind=\"Pet\",error=\"a } b\"} 4.5\n\
            kraken_reconcile_runs_total_other 100\n\
            kraken_api_writes_total 7 1700000000000\n";
        assert_eq!(metric_sum(text, "kraken_reconcile_runs_total"), Some(7.5));
        assert_eq!(metric_sum(text, "kraken_api_writes_total"), Some(7.0));
        assert_eq!(metric_sum(text, "kraken_missing"), None);
        let pets = metric_sum_where(text, "kraken_reconcile_runs_total", |l| {
            l.iter().any(|(k, v)| k == "error" && v == "a } b")
        });
        assert_eq!(pets, Some(4.5));
        let escaped = "kraken_api_writes_total{resource=\"x\\\"y\",verb=\"patch\"} 2\n\
            kraken_api_writes_total{resource=\"leases\",verb=\"update\"} 40\n";
        let no_leases = metric_sum_where(escaped, "kraken_api_writes_total", |l| {
            !l.iter().any(|(k, v)| k == "resource" && v == "leases")
        });
        assert_eq!(no_leases, Some(2.0));
        let samples = metric_samples(escaped, "kraken_api_writes_total");
        assert_eq!(samples.len(), 2);
        assert_eq!(
            samples[1],
            (
                vec![
                    ("resource".into(), "leases".into()),
                    ("verb".into(), "update".into())
                ],
                40.0
            )
        );
        assert_eq!(
            split_sample("m{a=\"1\",b=\"x\\\"}\"} 3").map(|(_, l, r)| (l, r.trim().to_string())),
            Some((
                vec![("a".into(), "1".into()), ("b".into(), "x\"}".into())],
                "3".to_string()
            ))
        );
    }

    #[test]
    fn http_responses_plain_and_chunked() -> anyhow::Result<()> {
        let plain = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nok";
        assert_eq!(parse_http_response(plain)?, (200, "ok".to_string()));
        let chunked = b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n\
            4\r\nnot \r\n5\r\nready\r\n0\r\n\r\n";
        assert_eq!(
            parse_http_response(chunked)?,
            (503, "not ready".to_string())
        );
        Ok(())
    }

    #[test]
    fn proc_stat_with_odd_command_names() {
        let stat = "1234 (a) b (c)) S 42 1234 1234 0 -1 4194560";
        assert_eq!(parse_stat(stat), Some((42, 'S')));
    }

    #[test]
    fn kill_tree_kills_grandchildren() -> anyhow::Result<()> {
        // A shell with a background grandchild, like the operator with a provider plugin.
        let mut child = Command::new("sh")
            .args(["-c", "sleep 300 & sleep 300 & wait"])
            .spawn()?;
        let root = child.id();
        let below = crate::wait_for(Duration::from_secs(10), "two sleeps below sh", || {
            let d = descendants(root)?;
            Ok((d.len() == 2).then_some(d))
        })?;
        kill_tree(root)?;
        child.wait()?;
        for pid in below {
            assert!(!process_alive(pid), "{pid} survived kill_tree");
        }
        Ok(())
    }
}

//! Starting a provider binary the way Terraform does (go-plugin's handshake) and keeping watch
//! over the process.
//!
//! The sequence: make a private (0700) directory for the plugin's unix socket, generate our
//! AutoMTLS identity, start the binary with the magic cookie and the protocol versions we speak,
//! read the handshake line from its stdout, connect over the announced socket with the pinned
//! certificate, and from then on drain its stdout/stderr (and go-plugin's stdio stream) into
//! `tracing`. A supervisor task owns the child and publishes its exit, which every RPC races
//! against so that a crash fails the in-flight request instead of hanging it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use kraken_proto::plugin::{
    Empty, grpc_controller_client::GrpcControllerClient, grpc_stdio_client::GrpcStdioClient,
};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{oneshot, watch};
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info, warn};

use super::SUPPORTED_PROTOCOLS;
use super::tls::{ClientIdentity, TlsError, decode_server_cert};

/// Terraform's go-plugin handshake: a plugin refuses to run without this cookie.
pub const MAGIC_COOKIE_KEY: &str = "TF_PLUGIN_MAGIC_COOKIE";
pub const MAGIC_COOKIE_VALUE: &str =
    "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";

/// How many stderr lines to keep for error messages when a provider fails.
const STDERR_TAIL_LINES: usize = 20;

/// How to start a provider.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    pub binary: PathBuf,
    /// A name for logs and errors, e.g. the provider's source address.
    pub name: String,
    /// Extra environment for the process (the host's environment is inherited).
    pub env: Vec<(String, String)>,
    /// AutoMTLS on the plugin connection. Turn off only deliberately.
    pub tls: bool,
    pub handshake_timeout: Duration,
    /// How long `shutdown` waits after `GRPCController.Shutdown` before killing.
    pub shutdown_grace: Duration,
    /// Requests a pooled process may serve at once; `None` takes the pool's default.
    pub max_concurrency: Option<usize>,
}

impl LaunchOptions {
    pub fn new(binary: impl Into<PathBuf>) -> Self {
        let binary = binary.into();
        let name = binary
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| binary.display().to_string());
        Self {
            binary,
            name,
            env: Vec::new(),
            tls: true,
            handshake_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(5),
            max_concurrency: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("failed to start provider {name} ({path})")]
    Spawn {
        name: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to prepare the plugin socket directory")]
    SocketDir(#[source] std::io::Error),
    #[error("provider {name} exited before the plugin handshake ({status}){stderr}")]
    ExitedEarly {
        name: String,
        status: String,
        stderr: String,
    },
    #[error("provider {name} sent no plugin handshake within {timeout:?}{stderr}")]
    HandshakeTimeout {
        name: String,
        timeout: Duration,
        stderr: String,
    },
    #[error("provider {name} sent a malformed plugin handshake {line:?}: {reason}")]
    BadHandshake {
        name: String,
        line: String,
        reason: String,
    },
    #[error(
        "provider {name} speaks plugin protocol {version}; Kraken supports {}",
        SUPPORTED_PROTOCOLS.map(|v| v.to_string()).join(" and ")
    )]
    UnsupportedProtocol { name: String, version: u32 },
    #[error("provider {name} did not answer AutoMTLS with a certificate (it may be too old)")]
    NoServerCert { name: String },
    #[error("TLS setup with provider {name} failed")]
    Tls {
        name: String,
        #[source]
        source: TlsError,
    },
    #[error("could not connect to provider {name} at {address}")]
    Connect {
        name: String,
        address: String,
        #[source]
        source: tonic::transport::Error,
    },
}

/// The parsed go-plugin handshake line:
/// `CORE-VERSION|APP-PROTOCOL-VERSION|NETWORK|ADDRESS|PROTOCOL[|SERVER-CERT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    pub app_protocol: u32,
    pub network: Network,
    pub address: String,
    pub server_cert: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    Unix,
    Tcp,
}

impl Handshake {
    pub fn parse(line: &str) -> Result<Self, String> {
        let fields: Vec<&str> = line.trim().split('|').collect();
        if fields.len() < 5 {
            return Err(format!(
                "expected at least 5 fields, found {}",
                fields.len()
            ));
        }
        if fields[0] != "1" {
            return Err(format!(
                "unsupported go-plugin core protocol {:?}",
                fields[0]
            ));
        }
        let app_protocol = fields[1]
            .parse()
            .map_err(|_| format!("protocol version {:?} is not a number", fields[1]))?;
        let network = match fields[2] {
            "unix" => Network::Unix,
            "tcp" => Network::Tcp,
            other => return Err(format!("unsupported network type {other:?}")),
        };
        if fields[4] != "grpc" {
            return Err(format!(
                "plugin serves {:?}; only grpc is supported",
                fields[4]
            ));
        }
        let server_cert = fields
            .get(5)
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        Ok(Self {
            app_protocol,
            network,
            address: fields[3].to_string(),
            server_cert,
        })
    }
}

/// A running provider process and the gRPC channel to it.
#[derive(Clone)]
pub struct PluginClient {
    pub protocol: u32,
    pub channel: Channel,
    pub name: String,
    /// Where the plugin listens (a unix socket path, or host:port on platforms without them).
    pub address: String,
    /// Whether the connection is AutoMTLS (pinned certificates both ways).
    pub tls: bool,
    process: Arc<Process>,
}

struct Process {
    pid: Option<u32>,
    exit: watch::Receiver<Option<String>>,
    kill: Mutex<Option<oneshot::Sender<()>>>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// Becomes true when the provider's stderr reaches end of file.
    stderr_closed: watch::Receiver<bool>,
    shutdown_grace: Duration,
}

impl Drop for Process {
    fn drop(&mut self) {
        self.request_kill();
    }
}

impl Process {
    fn request_kill(&self) {
        if let Ok(mut guard) = self.kill.lock()
            && let Some(tx) = guard.take()
        {
            let _ = tx.send(());
        }
    }
}

/// Start `opts.binary` as a Terraform plugin and connect to it.
pub async fn launch(opts: &LaunchOptions) -> Result<PluginClient, LaunchError> {
    let socket_dir = private_socket_dir().map_err(LaunchError::SocketDir)?;
    let identity = if opts.tls {
        Some(
            ClientIdentity::generate().map_err(|source| LaunchError::Tls {
                name: opts.name.clone(),
                source,
            })?,
        )
    } else {
        None
    };
    let mut child = spawn(opts, socket_dir.path(), identity.as_ref())?;
    let pid = child.id();
    let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
    let (stderr_closed_tx, stderr_closed) = watch::channel(false);
    match child.stderr.take() {
        Some(stderr) => drain_stderr(
            stderr,
            opts.name.clone(),
            stderr_tail.clone(),
            stderr_closed_tx,
        ),
        None => drop(stderr_closed_tx.send(true)),
    }
    let Some(stdout) = child.stdout.take() else {
        return Err(LaunchError::BadHandshake {
            name: opts.name.clone(),
            line: String::new(),
            reason: "stdout was not captured".into(),
        });
    };
    let (exit_tx, exit_rx) = watch::channel(None);
    let (kill_tx, kill_rx) = oneshot::channel();
    let process = Arc::new(Process {
        pid,
        exit: exit_rx,
        kill: Mutex::new(Some(kill_tx)),
        stderr_tail,
        stderr_closed,
        shutdown_grace: opts.shutdown_grace,
    });
    supervise(child, socket_dir, opts.name.clone(), exit_tx, kill_rx);

    let mut lines = BufReader::new(stdout).lines();
    let handshake = read_handshake(opts, &mut lines, &process).await?;
    drain_stdout(lines, opts.name.clone());

    if !SUPPORTED_PROTOCOLS.contains(&handshake.app_protocol) {
        return Err(LaunchError::UnsupportedProtocol {
            name: opts.name.clone(),
            version: handshake.app_protocol,
        });
    }
    let tls = match (&identity, &handshake.server_cert) {
        (Some(id), Some(cert)) => {
            let der = decode_server_cert(cert).map_err(|source| LaunchError::Tls {
                name: opts.name.clone(),
                source,
            })?;
            let cfg = id.client_config(der).map_err(|source| LaunchError::Tls {
                name: opts.name.clone(),
                source,
            })?;
            Some(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
        }
        (Some(_), None) => {
            return Err(LaunchError::NoServerCert {
                name: opts.name.clone(),
            });
        }
        (None, _) => None,
    };
    let channel = connect(&handshake, tls)
        .await
        .map_err(|source| LaunchError::Connect {
            name: opts.name.clone(),
            address: handshake.address.clone(),
            source,
        })?;
    stream_stdio(channel.clone(), opts.name.clone());
    info!(provider = %opts.name, pid, protocol = handshake.app_protocol, "provider started");
    Ok(PluginClient {
        protocol: handshake.app_protocol,
        channel,
        name: opts.name.clone(),
        address: handshake.address.clone(),
        tls: identity.is_some(),
        process,
    })
}

fn private_socket_dir() -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::Builder::new()
        .prefix("kraken-plugin-")
        .tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

fn spawn(
    opts: &LaunchOptions,
    socket_dir: &Path,
    identity: Option<&ClientIdentity>,
) -> Result<Child, LaunchError> {
    let mut cmd = Command::new(&opts.binary);
    cmd.env(MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE)
        .env(
            "PLUGIN_PROTOCOL_VERSIONS",
            SUPPORTED_PROTOCOLS
                .iter()
                .rev()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(","),
        )
        .env("PLUGIN_UNIX_SOCKET_DIR", socket_dir)
        // go-plugin releases before PLUGIN_UNIX_SOCKET_DIR made their socket with the process
        // temp directory; pointing TMPDIR at the private directory covers them too (and the
        // provider's other temporary files are removed with it when the process exits).
        .env("TMPDIR", socket_dir)
        .env_remove("PLUGIN_CLIENT_CERT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(id) = identity {
        cmd.env("PLUGIN_CLIENT_CERT", &id.cert_pem);
    }
    for (key, value) in &opts.env {
        cmd.env(key, value);
    }
    cmd.spawn().map_err(|source| LaunchError::Spawn {
        name: opts.name.clone(),
        path: opts.binary.display().to_string(),
        source,
    })
}

/// Own the child: publish its exit status, and kill it when asked (or when the client is gone).
/// The socket directory lives exactly as long as the process.
fn supervise(
    mut child: Child,
    socket_dir: tempfile::TempDir,
    name: String,
    exit_tx: watch::Sender<Option<String>>,
    kill_rx: oneshot::Receiver<()>,
) {
    tokio::spawn(async move {
        let status = tokio::select! {
            status = child.wait() => status,
            _ = kill_rx => {
                let _ = child.start_kill();
                child.wait().await
            }
        };
        let text = match &status {
            Ok(s) => describe_exit(s),
            Err(err) => format!("unknown exit status: {err}"),
        };
        debug!(provider = %name, status = %text, "provider process exited");
        drop(socket_dir);
        let _ = exit_tx.send(Some(text));
    });
}

fn describe_exit(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => status.to_string(),
    }
}

async fn read_handshake<R>(
    opts: &LaunchOptions,
    lines: &mut tokio::io::Lines<BufReader<R>>,
    process: &Process,
) -> Result<Handshake, LaunchError>
where
    R: AsyncRead + Unpin,
{
    let read = async {
        loop {
            match lines.next_line().await {
                Ok(Some(line)) if line.starts_with("1|") => return Ok(line),
                Ok(Some(line)) => {
                    debug!(provider = %opts.name, %line, "provider stdout before handshake")
                }
                Ok(None) | Err(_) => return Err(()),
            }
        }
    };
    let line = match tokio::time::timeout(opts.handshake_timeout, read).await {
        Ok(Ok(line)) => line,
        Ok(Err(())) => {
            let mut exit = process.exit.clone();
            let status =
                tokio::time::timeout(Duration::from_secs(5), exit.wait_for(Option::is_some))
                    .await
                    .ok()
                    .and_then(|r| r.ok().and_then(|s| s.clone()))
                    .unwrap_or_else(|| "closed its stdout".to_string());
            // Let the stderr reader catch up so the error shows why the provider gave up.
            let mut closed = process.stderr_closed.clone();
            let _ = tokio::time::timeout(Duration::from_secs(1), closed.wait_for(|c| *c)).await;
            return Err(LaunchError::ExitedEarly {
                name: opts.name.clone(),
                status,
                stderr: stderr_suffix(process),
            });
        }
        Err(_) => {
            process.request_kill();
            return Err(LaunchError::HandshakeTimeout {
                name: opts.name.clone(),
                timeout: opts.handshake_timeout,
                stderr: stderr_suffix(process),
            });
        }
    };
    Handshake::parse(&line).map_err(|reason| LaunchError::BadHandshake {
        name: opts.name.clone(),
        line,
        reason,
    })
}

fn stderr_suffix(process: &Process) -> String {
    let tail = process
        .stderr_tail
        .lock()
        .map(|t| t.iter().cloned().collect::<Vec<_>>().join("\n"))
        .unwrap_or_default();
    if tail.is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with:\n{tail}")
    }
}

fn drain_stderr<R>(
    reader: R,
    name: String,
    tail: Arc<Mutex<VecDeque<String>>>,
    closed: watch::Sender<bool>,
) where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut lines = BufReader::new(reader).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            debug!(provider = %name, stream = "stderr", "{line}");
            if let Ok(mut t) = tail.lock() {
                if t.len() == STDERR_TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        }
        let _ = closed.send(true);
    });
}

fn drain_stdout<R>(mut lines: tokio::io::Lines<BufReader<R>>, name: String)
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            debug!(provider = %name, stream = "stdout", "{line}");
        }
    });
}

/// go-plugin forwards writes to the plugin's os.Stdout/os.Stderr over `GRPCStdio`.
fn stream_stdio(channel: Channel, name: String) {
    tokio::spawn(async move {
        let mut client = GrpcStdioClient::new(channel);
        let Ok(response) = client.stream_stdio(()).await else {
            return;
        };
        let mut stream = response.into_inner();
        while let Ok(Some(chunk)) = stream.message().await {
            let text = String::from_utf8_lossy(&chunk.data);
            for line in text.lines() {
                debug!(provider = %name, stream = "stdio", "{line}");
            }
        }
    });
}

async fn connect(
    handshake: &Handshake,
    tls: Option<tokio_rustls::TlsConnector>,
) -> Result<Channel, tonic::transport::Error> {
    // The URI is only a placeholder: the connector below decides where bytes go. The scheme is
    // http because TLS, when on, is layered by the connector, not by tonic.
    let endpoint = Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true);
    let network = handshake.network;
    let address = handshake.address.clone();
    let connector = tower::service_fn(move |_uri: tonic::transport::Uri| {
        let address = address.clone();
        let tls = tls.clone();
        async move {
            let io = open_stream(network, &address).await?;
            match tls {
                None => Ok::<_, std::io::Error>(TokioIo::new(io)),
                Some(tls) => {
                    let server = rustls::pki_types::ServerName::try_from("localhost")
                        .map_err(std::io::Error::other)?
                        .to_owned();
                    let stream = tls.connect(server, io).await?;
                    Ok(TokioIo::new(Box::new(stream) as BoxedIo))
                }
            }
        }
    });
    endpoint.connect_with_connector(connector).await
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}
type BoxedIo = Box<dyn Io>;

async fn open_stream(network: Network, address: &str) -> std::io::Result<BoxedIo> {
    Ok(match network {
        Network::Unix => Box::new(tokio::net::UnixStream::connect(address).await?),
        Network::Tcp => {
            let stream = tokio::net::TcpStream::connect(address).await?;
            stream.set_nodelay(true)?;
            Box::new(stream)
        }
    })
}

impl PluginClient {
    /// The provider's process id, for diagnostics and fault-injection tests.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid
    }

    /// Whether the process has exited.
    pub fn has_exited(&self) -> bool {
        self.process.exit.borrow().is_some()
    }

    /// The exit description once the process has exited.
    pub fn exit_status(&self) -> Option<String> {
        self.process.exit.borrow().clone()
    }

    /// Resolves when the process exits.
    pub async fn exited(&self) {
        let mut exit = self.process.exit.clone();
        let _ = exit.wait_for(Option::is_some).await;
    }

    /// The last lines the provider wrote to stderr.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.process
            .stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Ask the plugin to exit (`GRPCController.Shutdown`), then kill it after the grace period.
    pub async fn shutdown(&self) {
        if self.has_exited() {
            return;
        }
        let mut controller = GrpcControllerClient::new(self.channel.clone());
        let grace = self.process.shutdown_grace;
        if let Err(err) = tokio::time::timeout(grace, controller.shutdown(Empty {})).await {
            warn!(provider = %self.name, "shutdown RPC timed out: {err}");
        }
        if tokio::time::timeout(grace, self.exited()).await.is_err() {
            warn!(provider = %self.name, "provider did not exit after shutdown; killing it");
            self.kill().await;
        }
    }

    /// Kill the process at once and wait for it to be gone.
    pub async fn kill(&self) {
        self.process.request_kill();
        self.exited().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_handshake_lines() {
        let h = Handshake::parse("1|6|unix|/tmp/plugin1|grpc|AQID\n").expect("parse");
        assert_eq!(h.app_protocol, 6);
        assert_eq!(h.network, Network::Unix);
        assert_eq!(h.address, "/tmp/plugin1");
        assert_eq!(h.server_cert.as_deref(), Some("AQID"));
        let plain = Handshake::parse("1|5|tcp|127.0.0.1:1234|grpc|").expect("parse");
        assert_eq!(plain.server_cert, None);
        assert_eq!(plain.network, Network::Tcp);
    }

    #[test]
    fn rejects_bad_handshakes() {
        for (line, needle) in [
            ("1|5|unix", "at least 5"),
            ("2|5|unix|/x|grpc", "core protocol"),
            ("1|x|unix|/x|grpc", "not a number"),
            ("1|5|pipe|/x|grpc", "network"),
            ("1|5|unix|/x|netrpc", "only grpc"),
        ] {
            let err = Handshake::parse(line).expect_err(line);
            assert!(err.contains(needle), "{line}: {err}");
        }
    }

    #[tokio::test]
    async fn missing_binary_is_a_clear_error() {
        let err = launch(&LaunchOptions::new("/nonexistent/terraform-provider-x"))
            .await
            .err()
            .expect("must fail");
        assert!(
            err.to_string().contains("failed to start provider"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn non_plugin_binary_reports_early_exit_with_stderr() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("not-a-plugin");
        std::fs::write(
            &script,
            "#!/bin/sh\necho 'this is not a plugin' >&2\nexit 7\n",
        )
        .expect("write");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let err = launch(&LaunchOptions::new(&script))
            .await
            .err()
            .expect("must fail");
        let text = err.to_string();
        assert!(text.contains("exit code 7"), "{text}");
        assert!(text.contains("this is not a plugin"), "{text}");
    }
}

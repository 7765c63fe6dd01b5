//! Starting a provider binary the way Terraform does (go-plugin's handshake) and keeping watch
//! over the process.
//!
//! The sequence: make a private (0700) directory for the plugin's unix socket, generate our
//! AutoMTLS identity, start the binary with the magic cookie and the protocol versions we speak,
//! read the handshake line from its stdout, connect over the announced socket with the pinned
//! certificate, and from then on drain its stdout/stderr (and go-plugin's stdio stream) into
//! `tracing`. A supervisor task owns the child and publishes its exit, which every RPC races
//! against so that a crash fails the in-flight request instead of hanging it.
//!
//! This file holds the sequence and the process's life; the handshake line
//! ([`super::handshake`]), the output draining ([`super::stdio`]), the connection
//! ([`super::channel`]) and the client the rest of the host holds ([`super::client`]) live
//! beside it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::{oneshot, watch};
use tracing::{debug, info};

use super::SUPPORTED_PROTOCOLS;
use super::channel::connect;
use super::client::{PluginClient, Process};
use super::handshake::Handshake;
pub use super::handshake::{MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE};
use super::observe::Observer;
use super::stdio::{drain_stderr, drain_stdout, stream_stdio};
use super::tls::{ClientIdentity, TlsError, decode_server_cert};

/// How to start a provider.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    pub binary: PathBuf,
    /// A name for logs and errors, e.g. the provider's source address.
    pub name: String,
    /// Environment set for the process on top of the few variables it inherits
    /// ([`super::env`]: never the launcher's whole environment).
    pub env: Vec<(String, String)>,
    /// Variables of the launcher's environment the process may inherit besides the network
    /// settings: names, or prefixes ending in `*` (`kraken operator --provider-env`).
    pub inherit_env: Vec<String>,
    /// Set unless the process inherits the variable (`kraken operator --provider-gogc`: the
    /// administrator's own value, passed with `--provider-env`, wins).
    pub default_env: Vec<(String, String)>,
    /// AutoMTLS on the plugin connection. Turn off only deliberately.
    pub tls: bool,
    pub handshake_timeout: Duration,
    /// How long `shutdown` waits after `GRPCController.Shutdown` before killing.
    pub shutdown_grace: Duration,
    /// Requests a pooled process may serve at once; `None` takes the pool's default.
    pub max_concurrency: Option<usize>,
    /// Told the latency of every RPC to the process; a pool fills in its own when `None`.
    pub rpc_observer: Observer,
    /// How long each kind of RPC may take before the process is stopped and replaced.
    pub deadlines: super::deadline::Deadlines,
    /// Keep the descriptions in the schema the adapter holds. Generating CRDs needs them; a
    /// process serving resources does not, and drops them to hold less.
    pub docs: bool,
    /// A directory of schema answers per binary ([`super::schema_cache`]): a process whose
    /// provider allows it takes its schema from there instead of asking; one that asks stores
    /// the answer. `None`: always ask, store nothing.
    pub schema_cache: Option<PathBuf>,
    /// Start the binary through this program (`kraken runner`) instead of directly: the
    /// program is started as `PROGRAM ARGS... -- BINARY`, speaks go-plugin's handshake itself
    /// and relays the plugin's gRPC. Its stdin is a pipe the launcher never writes: it closes
    /// when the launcher is gone, and the runner then stops its provider.
    pub via: Option<Via>,
    /// Connect to a runner elsewhere instead of starting anything (the `pods` placement):
    /// `binary` and `via` are then only names. A [`super::ProviderHost`] dials; [`launch`]
    /// itself always starts a process.
    pub dial: Option<super::remote::Dial>,
    /// Stream the plugin's go-plugin stdio (`GRPCStdio`) into `tracing`. A runner turns it
    /// off for the provider it hosts: the launcher streams it through the runner instead.
    pub stream_stdio: bool,
    /// Write the plugin's stderr lines to this process's stderr as they are, instead of into
    /// `tracing`: a runner does, so its launcher sees the provider's own words.
    pub relay_stderr: bool,
}

/// A program a provider binary is started through (see [`LaunchOptions::via`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Via {
    pub program: PathBuf,
    pub args: Vec<std::ffi::OsString>,
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
            inherit_env: Vec::new(),
            default_env: Vec::new(),
            tls: true,
            handshake_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(5),
            max_concurrency: None,
            rpc_observer: None,
            deadlines: super::deadline::Deadlines::default(),
            docs: false,
            schema_cache: None,
            via: None,
            dial: None,
            stream_stdio: true,
            relay_stderr: false,
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
    #[error("provider {name}'s runner was not reachable within {timeout:?}: {last}")]
    Unreachable {
        name: String,
        timeout: Duration,
        last: String,
    },
    #[error("could not connect to provider {name} at {address}")]
    Connect {
        name: String,
        address: String,
        #[source]
        source: tonic::transport::Error,
    },
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
    let child = spawn(opts, socket_dir.path(), identity.as_ref())?;
    let (process, stdout) = watch_process(opts, child, socket_dir)?;

    let mut stdout = BufReader::new(stdout);
    let handshake = read_handshake(opts, &mut stdout, &process).await?;
    drain_stdout(stdout, opts.name.clone());

    if !SUPPORTED_PROTOCOLS.contains(&handshake.app_protocol) {
        return Err(LaunchError::UnsupportedProtocol {
            name: opts.name.clone(),
            version: handshake.app_protocol,
        });
    }
    let tls = tls_connector(opts, identity.as_ref(), &handshake)?;
    let channel = connect(&handshake, tls)
        .await
        .map_err(|source| LaunchError::Connect {
            name: opts.name.clone(),
            address: handshake.address.clone(),
            source,
        })?;
    if opts.stream_stdio {
        stream_stdio(channel.clone(), opts.name.clone());
    }
    let pid = process.pid;
    info!(provider = %opts.name, pid, protocol = handshake.app_protocol, "provider started");
    Ok(PluginClient {
        protocol: handshake.app_protocol,
        channel,
        name: opts.name.clone(),
        address: handshake.address.clone(),
        tls: identity.is_some(),
        process,
        observer: opts.rpc_observer.clone(),
        deadlines: opts.deadlines,
        docs: opts.docs,
        schema_cache: opts.schema_cache.as_deref().and_then(|dir| {
            super::schema_cache::file_for(dir, &opts.binary, handshake.app_protocol)
        }),
    })
}

/// Start draining the child's stderr, take its stdout (for the handshake) and hand the child to
/// its supervisor; the returned [`Process`] is the watch every RPC races against.
fn watch_process(
    opts: &LaunchOptions,
    mut child: Child,
    socket_dir: tempfile::TempDir,
) -> Result<(Arc<Process>, ChildStdout), LaunchError> {
    let pid = child.id();
    let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
    let (stderr_closed_tx, stderr_closed) = watch::channel(false);
    match child.stderr.take() {
        Some(stderr) => drain_stderr(
            stderr,
            opts.name.clone(),
            stderr_tail.clone(),
            stderr_closed_tx,
            opts.relay_stderr,
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
        remote: false,
    });
    supervise(child, socket_dir, opts.name.clone(), exit_tx, kill_rx);
    Ok((process, stdout))
}

/// The AutoMTLS connector pinned to the certificate the plugin announced, or `None` when TLS is
/// off; a plugin that answers AutoMTLS without a certificate is refused.
fn tls_connector(
    opts: &LaunchOptions,
    identity: Option<&ClientIdentity>,
    handshake: &Handshake,
) -> Result<Option<tokio_rustls::TlsConnector>, LaunchError> {
    let tls_error = |source| LaunchError::Tls {
        name: opts.name.clone(),
        source,
    };
    match (identity, &handshake.server_cert) {
        (Some(id), Some(cert)) => {
            let der = decode_server_cert(cert).map_err(tls_error)?;
            let cfg = id.client_config(der).map_err(tls_error)?;
            Ok(Some(tokio_rustls::TlsConnector::from(Arc::new(cfg))))
        }
        (Some(_), None) => Err(LaunchError::NoServerCert {
            name: opts.name.clone(),
        }),
        (None, _) => Ok(None),
    }
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
    let mut cmd = match &opts.via {
        None => Command::new(&opts.binary),
        Some(via) => {
            let mut cmd = Command::new(&via.program);
            cmd.args(&via.args).arg("--").arg(&opts.binary);
            cmd
        }
    };
    let inherited = super::env::inherited(std::env::vars_os(), &opts.inherit_env);
    let defaults = super::env::defaults_not_inherited(&inherited, &opts.default_env);
    cmd.env_clear()
        .envs(inherited)
        .envs(defaults.into_iter().map(|(k, v)| (k, v)))
        // A home of its own: no credentials file, kubeconfig or cache of the operator's.
        .env("HOME", socket_dir)
        .env(MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE)
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
        .stdin(if opts.via.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
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
        path: match &opts.via {
            None => opts.binary.display().to_string(),
            Some(via) => format!(
                "{} through {}",
                opts.binary.display(),
                via.program.display()
            ),
        },
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
        // A runner's stdin: held open while the child lives, closed with it.
        let stdin = child.stdin.take();
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
        drop(stdin);
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
    stdout: &mut BufReader<R>,
    process: &Process,
) -> Result<Handshake, LaunchError>
where
    R: AsyncRead + Unpin,
{
    let read = async {
        loop {
            match super::stdio::next_line(stdout, super::stdio::MAX_LINE).await {
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

#[cfg(test)]
mod tests {
    use super::*;

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

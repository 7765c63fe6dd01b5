//! `kraken runner`: hosts one provider process away from the operator and relays its plugin
//! protocol to the operator over mutual TLS.
//!
//! The operator starts `kraken runner [--sandbox landlock] -- BINARY` where it would have
//! started `BINARY`, with the same environment go-plugin gives a plugin. The runner confines
//! itself ([`sandbox`]), starts the provider with go-plugin's handshake and AutoMTLS, listens
//! on a socket of its own with a fresh certificate, accepts only the certificate the operator
//! sent in `PLUGIN_CLIENT_CERT`, prints the handshake line a plugin prints, and relays
//! ([`relay`]). It lives exactly as long as its provider: it exits when the provider exits, and
//! stops the provider when its stdin closes (the operator is gone).

pub mod relay;
pub mod sandbox;
pub mod serve;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use kraken_provider::handshake::{Handshake, Network};
use kraken_provider::launch::{MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE};
use kraken_provider::tls::{ClientIdentity, TlsError, decode_client_cert_pem};
use kraken_provider::{LaunchError, LaunchOptions, launch};
use tokio::io::AsyncWriteExt as _;
use tracing::{info, warn};

pub use sandbox::{Confinement, Enforced, SandboxError};

/// Variables of the runner's environment that are go-plugin's conversation with the runner
/// itself; the provider gets its own from the runner's launch.
const OWN_VARIABLES: &[&str] = &[
    MAGIC_COOKIE_KEY,
    "PLUGIN_CLIENT_CERT",
    "PLUGIN_PROTOCOL_VERSIONS",
    "PLUGIN_UNIX_SOCKET_DIR",
    "HOME",
    "TMPDIR",
];

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error(
        "kraken runner is started by the operator as a plugin (it needs {MAGIC_COOKIE_KEY} and \
         PLUGIN_UNIX_SOCKET_DIR); it is not meant to be run by hand"
    )]
    NotLaunched,
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("the provider could not be started")]
    Launch(#[from] LaunchError),
    #[error("the runner's TLS could not be set up")]
    Tls(#[from] TlsError),
    #[error("the runner cannot read {path}")]
    TlsFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the runner's work directory {path} cannot be made")]
    WorkDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the runner could not listen on its socket")]
    Listen(#[source] std::io::Error),
    #[error("the runner could not announce its handshake")]
    Announce(#[source] std::io::Error),
}

/// What `kraken runner` was asked to host.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    pub binary: PathBuf,
    /// Confine the runner and its provider with Landlock ([`sandbox`]).
    pub sandbox: bool,
    /// More paths the provider may read (`kraken operator --runner-allow-read`).
    pub allow_read: Vec<PathBuf>,
    /// Paths the provider may also write (`kraken operator --runner-allow-write`).
    pub allow_write: Vec<PathBuf>,
    /// Serve on the network, from a Pod of its own ([`serve`]), instead of to a launcher.
    pub serve: Option<serve::ServeOptions>,
}

/// The runner's private directory: the one its launcher made for it, or a served runner's
/// work directory.
fn private_dir(opts: &RunnerOptions) -> Result<PathBuf, RunnerError> {
    if let Some(serve) = &opts.serve {
        std::fs::create_dir_all(&serve.work_dir).map_err(|source| RunnerError::WorkDir {
            path: serve.work_dir.clone(),
            source,
        })?;
        return Ok(serve.work_dir.clone());
    }
    if std::env::var(MAGIC_COOKIE_KEY).as_deref() != Ok(MAGIC_COOKIE_VALUE) {
        return Err(RunnerError::NotLaunched);
    }
    std::env::var_os("PLUGIN_UNIX_SOCKET_DIR")
        .map(PathBuf::from)
        .ok_or(RunnerError::NotLaunched)
}

/// Confine this process before anything else runs in it: call it from `main`, before the
/// async runtime starts its threads. `None` when the sandbox is off.
pub fn confine(opts: &RunnerOptions) -> Result<Option<Enforced>, RunnerError> {
    if !opts.sandbox {
        return Ok(None);
    }
    let private = private_dir(opts)?;
    let enforced =
        Confinement::for_provider(&opts.binary, &private, &opts.allow_read, &opts.allow_write)
            .enforce()?;
    Ok(Some(enforced))
}

/// Start the provider, announce the runner and relay until one of them ends.
pub async fn run(
    opts: &RunnerOptions,
    enforced: Option<Enforced>,
) -> Result<ExitCode, RunnerError> {
    if let Some(serve) = &opts.serve {
        return serve::run(opts, serve, enforced).await;
    }
    let private = private_dir(opts)?;
    if enforced == Some(Enforced::Partially) {
        warn!(
            "this kernel enforces only part of the runner's Landlock sandbox (its file rules \
             hold; newer rights such as signal scoping are missing)"
        );
    }
    let client_cert = std::env::var("PLUGIN_CLIENT_CERT").ok();
    let provider = launch(&provider_launch(opts, client_cert.is_some())).await?;
    let (listener, address) = relay::bind(&private).map_err(RunnerError::Listen)?;
    let (tls, server_cert) = match &client_cert {
        Some(pem) => {
            let identity = ClientIdentity::generate()?;
            let config = identity.server_config(decode_client_cert_pem(pem)?)?;
            (Some(Arc::new(config)), Some(identity.cert_field()))
        }
        None => (None, None),
    };
    announce(&Handshake {
        app_protocol: provider.protocol,
        network: Network::Unix,
        address,
        server_cert,
    })
    .await?;
    info!(provider = %opts.binary.display(), "runner relaying");
    let serve = relay::serve(listener, tls, provider.channel.clone());
    Ok(relay_until(&provider, serve, launcher_gone(), false).await)
}

/// Relay until the provider exits (its exit status is the runner's), the relay fails, or
/// `stop` resolves: the provider is then stopped (`graceful`: `Shutdown` first, else killed).
pub(crate) async fn relay_until(
    provider: &kraken_provider::PluginClient,
    relay: impl Future<Output = std::io::Result<()>>,
    stop: impl Future<Output = ()>,
    graceful: bool,
) -> ExitCode {
    tokio::select! {
        result = relay => {
            if let Err(err) = result {
                warn!("the runner stopped accepting connections: {err}");
            }
            provider.kill().await;
            ExitCode::FAILURE
        }
        () = provider.exited() => {
            let status = provider.exit_status().unwrap_or_default();
            if status == "exit code 0" {
                ExitCode::SUCCESS
            } else {
                eprintln!("kraken runner: the provider exited ({status})");
                ExitCode::FAILURE
            }
        }
        () = stop => {
            if graceful {
                provider.shutdown().await;
            } else {
                provider.kill().await;
            }
            ExitCode::SUCCESS
        }
    }
}

/// The provider's launch: its environment is the runner's, less go-plugin's conversation
/// with the runner (the runner's own launch sets the provider's).
pub(crate) fn provider_launch(opts: &RunnerOptions, tls: bool) -> LaunchOptions {
    let mut launch = LaunchOptions::new(&opts.binary);
    launch.env = std::env::vars()
        .filter(|(k, _)| !OWN_VARIABLES.contains(&k.as_str()))
        .collect();
    launch.tls = tls;
    launch.stream_stdio = false;
    launch.relay_stderr = true;
    launch
}

async fn announce(handshake: &Handshake) -> Result<(), RunnerError> {
    let mut stdout = tokio::io::stdout();
    let line = format!("{}\n", handshake.line());
    stdout
        .write_all(line.as_bytes())
        .await
        .map_err(RunnerError::Announce)?;
    stdout.flush().await.map_err(RunnerError::Announce)
}

/// Resolves when stdin reaches its end: the launcher holds the other end of the pipe, and the
/// kernel closes it when the launcher exits, however it exits.
///
/// Read on a thread of its own, not tokio's `stdin` (whose read sits in the runtime's blocking
/// pool, and a runtime waits for its blocking pool when it shuts down): when the provider
/// exits first the runner must exit at once, or its launcher would take the runner for a
/// provider still alive and find nobody listening.
async fn launcher_gone() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("launcher-watch".into())
        .spawn(move || {
            use std::io::Read as _;
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 64];
            while let Ok(n) = stdin.read(&mut buf) {
                if n == 0 {
                    break;
                }
            }
            let _ = tx.send(());
        });
    match spawned {
        // A sender dropped without a send is the same end.
        Ok(_) => {
            let _ = rx.await;
        }
        Err(err) => {
            warn!(
                "cannot watch for the launcher's end ({err}); the runner stops with its provider only"
            );
            std::future::pending::<()>().await;
        }
    }
}

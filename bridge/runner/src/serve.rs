//! `kraken runner --listen`: a runner in a Pod of its own (the `pods` placement), started by
//! its Deployment rather than by a launcher, and serving every operator replica.
//!
//! What differs from the `local` runner: no go-plugin conversation with a parent (no magic
//! cookie, no handshake line, no stdin to watch), a TCP address instead of a socket, and its
//! certificates from files (the Secret the operator wrote: the runner's certificate and key,
//! and the one client certificate it accepts, the operator's, which every replica shares).
//! They are read before the sandbox is applied and are not in it: the provider cannot read
//! the runner's key. The runner lives as long as its provider: when the provider exits, so
//! does the runner, and its Pod's restart brings both back.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use kraken_provider::launch;
use kraken_provider::tls::ClientIdentity;
use tokio::net::TcpListener;
use tracing::{info, warn};

use super::{Enforced, RunnerError, RunnerOptions, provider_launch, relay};

use kraken_provider::remote::files::{OPERATOR_CERT, RUNNER_CERT, RUNNER_KEY};

/// The served runner's certificates, DER.
#[derive(Clone)]
pub struct ServeTls {
    pub runner_cert: Vec<u8>,
    pub runner_key: Vec<u8>,
    pub operator_cert: Vec<u8>,
}

impl std::fmt::Debug for ServeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeTls").finish_non_exhaustive()
    }
}

impl ServeTls {
    /// Read the three files of `dir`; an error names the missing one.
    pub fn read(dir: &Path) -> Result<Self, RunnerError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|source| RunnerError::TlsFile { path, source })
        };
        Ok(Self {
            runner_cert: read(RUNNER_CERT)?,
            runner_key: read(RUNNER_KEY)?,
            operator_cert: read(OPERATOR_CERT)?,
        })
    }
}

/// How a served runner listens.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    /// The runner's own directory: the provider's home, temporary files and socket.
    pub work_dir: PathBuf,
    pub tls: ServeTls,
}

/// Start the provider and serve it on `serve.listen` until the provider exits or the runner
/// is told to stop (SIGTERM, as a Pod's deletion sends it).
pub async fn run(
    opts: &RunnerOptions,
    serve: &ServeOptions,
    enforced: Option<Enforced>,
) -> Result<ExitCode, RunnerError> {
    if enforced == Some(Enforced::Partially) {
        warn!("this kernel enforces only part of the runner's Landlock sandbox");
    }
    let identity =
        ClientIdentity::from_der(serve.tls.runner_cert.clone(), serve.tls.runner_key.clone())?;
    let config = identity.server_config(serve.tls.operator_cert.clone())?;
    let listener = TcpListener::bind(serve.listen)
        .await
        .map_err(RunnerError::Listen)?;
    let provider = launch(&provider_launch(opts, true)).await?;
    info!(
        provider = %opts.binary.display(),
        listen = %serve.listen,
        protocol = provider.protocol,
        "runner serving"
    );
    let relay = relay::serve(
        relay::Listener::Tcp(listener),
        Some(Arc::new(config)),
        provider.channel.clone(),
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(RunnerError::Listen)?;
    let stop = async move {
        term.recv().await;
        info!("runner told to stop; stopping its provider");
    };
    Ok(super::relay_until(&provider, relay, stop, true).await)
}

//! A launched provider as the rest of the host holds it: the gRPC channel, what the handshake
//! said, and the watch over its process (exit, stderr tail, kill) that every RPC races against.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kraken_proto::plugin::{Empty, grpc_controller_client::GrpcControllerClient};
use tokio::sync::{oneshot, watch};
use tonic::transport::Channel;
use tracing::warn;

use super::observe::Observer;

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
    pub(super) process: Arc<Process>,
    pub(super) observer: Observer,
    pub(super) deadlines: super::deadline::Deadlines,
    /// [`super::LaunchOptions::docs`].
    pub(super) docs: bool,
    /// This binary's file in [`super::LaunchOptions::schema_cache`].
    pub(super) schema_cache: Option<std::path::PathBuf>,
}

pub(super) struct Process {
    pub(super) pid: Option<u32>,
    pub(super) exit: watch::Receiver<Option<String>>,
    pub(super) kill: Mutex<Option<oneshot::Sender<()>>>,
    pub(super) stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// Becomes true when the provider's stderr reaches end of file.
    pub(super) stderr_closed: watch::Receiver<bool>,
    pub(super) shutdown_grace: Duration,
    /// A runner elsewhere ([`super::dial`]), shared with other operator replicas: shutting
    /// down leaves it serving and only closes our connection.
    pub(super) remote: bool,
}

impl Drop for Process {
    fn drop(&mut self) {
        self.request_kill();
    }
}

impl Process {
    pub(super) fn request_kill(&self) {
        if let Ok(mut guard) = self.kill.lock()
            && let Some(tx) = guard.take()
        {
            let _ = tx.send(());
        }
    }
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
        if self.process.remote {
            self.kill().await;
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

    /// Report one finished RPC (`rpc` as the protocol spells it) to the launch's observer.
    pub fn observe_rpc(&self, rpc: &str, elapsed: Duration) {
        if let Some(observer) = &self.observer {
            observer.rpc_finished(&self.name, rpc, elapsed);
        }
    }

    /// Kill the process at once and wait for it to be gone.
    pub async fn kill(&self) {
        self.process.request_kill();
        self.exited().await;
    }
}

/// A client with no process behind it, for tests of what runs around an RPC: the channel
/// connects nowhere until used, and the process "exits" when the returned sender says so.
#[cfg(test)]
pub(crate) fn detached_client(
    name: &str,
    observer: Observer,
) -> (PluginClient, watch::Sender<Option<String>>) {
    let (exit_tx, exit) = watch::channel(None);
    let (_, stderr_closed) = watch::channel(true);
    let process = Process {
        pid: None,
        exit,
        kill: Mutex::new(None),
        stderr_tail: Arc::default(),
        stderr_closed,
        shutdown_grace: Duration::ZERO,
        remote: false,
    };
    let client = PluginClient {
        protocol: 6,
        channel: tonic::transport::Endpoint::from_static("http://localhost").connect_lazy(),
        name: name.to_string(),
        address: String::new(),
        tls: false,
        process: Arc::new(process),
        observer,
        deadlines: super::deadline::Deadlines::default(),
        docs: true,
        schema_cache: None,
    };
    (client, exit_tx)
}

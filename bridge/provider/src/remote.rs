//! A provider served by a runner somewhere else on the network (the `pods` placement): no
//! process of ours to start, a runner to find and to connect to over mutual TLS. These are the
//! types the placement gives the host ([`Dial`], in [`super::LaunchOptions::dial`]); the
//! connection itself is `dial`'s.

use std::sync::Arc;

use async_trait::async_trait;

use super::tls::ClientIdentity;

/// The files a served runner reads its certificates from (`kraken runner --tls-dir`), DER:
/// the keys of the Secret the operator writes for it.
pub mod files {
    pub const RUNNER_CERT: &str = "runner.crt";
    pub const RUNNER_KEY: &str = "runner.key";
    pub const OPERATOR_CERT: &str = "operator.crt";
}

/// Where a runner is, as its locator found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// `host:port`.
    pub address: String,
    /// The certificate the runner must present (DER): pinned, as a handshake's is.
    pub server_cert: Vec<u8>,
    /// The plugin protocol its provider speaks (5 or 6).
    pub protocol: u32,
    /// Which runner this is (its Pod's uid), for logs.
    pub instance: String,
}

/// Finds (and, where it may, starts) the runner a provider is served by.
#[async_trait]
pub trait Locate: Send + Sync {
    /// Where the runner is now; waits while it starts. The error says what is missing.
    async fn locate(&self) -> Result<Located, String>;

    /// Something to keep while a connection to `located` lasts, dropped when it ends (the
    /// `pods` placement's mark that the runner is in use). None by default.
    fn hold(&self, _located: &Located) -> Option<Held> {
        None
    }
}

/// What [`Locate::hold`] gives: kept with the connection, dropped with it.
pub type Held = Box<dyn Send + Sync>;

/// How to reach a provider served elsewhere: where it is, and who we are to it.
#[derive(Clone)]
pub struct Dial {
    pub locate: Arc<dyn Locate>,
    /// The client certificate the runner accepts (the operator's, shared by its replicas).
    pub identity: Arc<ClientIdentity>,
    /// What names the exact build the runner serves (a digest of the package hashes it is
    /// locked to): its schema answer is cached under it, as a local binary's is under its
    /// content. None: not cached.
    pub package: Option<String>,
}

impl std::fmt::Debug for Dial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dial").finish_non_exhaustive()
    }
}

//! A real HTTPS provider registry on loopback, for the registry-fetch tests and benchmark.
//!
//! It speaks HTTP/1.1 over TLS (a CA generated per server; clients trust it with `--ca-cert`)
//! and serves whatever routes a test sets: `publish` lays out the provider registry protocol
//! (service discovery, versions, download metadata, zip, SHA256SUMS and its OpenPGP signature)
//! and the network mirror protocol for a real provider binary. Every route can be replaced to
//! misbehave: wrong bodies, error statuses, delays, truncated bodies, redirect loops.
//! Hand-written rather than hyper-based so a test controls every byte and timing.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

mod publish;

pub use publish::{Publish, Published, SigningIdentity, package_zip, single_file_h1};

/// One canned response.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Arc<Vec<u8>>,
    /// Wait this long before sending anything.
    pub delay: Duration,
    /// Announce the full length but close the connection after this many body bytes.
    pub truncate_to: Option<usize>,
    /// Hold the response until another path has been requested often enough.
    pub hold: Option<Hold>,
}

/// Holding a response back until `path` has received `hits` requests (counting requests made
/// before and while this one waits), at most `timeout`: a way to force two clients to overlap.
/// Whether the condition or the timeout ended the wait is recorded ([`RegistryServer::holds`]).
#[derive(Debug, Clone)]
pub struct Hold {
    pub path: String,
    pub hits: usize,
    pub timeout: Duration,
}

/// How one held response was released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldOutcome {
    /// The path whose response was held.
    pub served: String,
    /// True when the awaited requests arrived; false when the timeout released it.
    pub condition_met: bool,
}

impl Reply {
    pub fn bytes(body: impl Into<Vec<u8>>) -> Self {
        Self {
            status: 200,
            headers: vec![("Content-Type".into(), "application/octet-stream".into())],
            body: Arc::new(body.into()),
            delay: Duration::ZERO,
            truncate_to: None,
            hold: None,
        }
    }

    pub fn json(value: &serde_json::Value) -> Self {
        let mut r = Self::bytes(value.to_string());
        r.headers = vec![("Content-Type".into(), "application/json".into())];
        r
    }

    pub fn status(status: u16) -> Self {
        Self {
            status,
            ..Self::bytes(format!("status {status}\n"))
        }
    }

    pub fn redirect(location: &str) -> Self {
        let mut r = Self::status(302);
        r.headers.push(("Location".into(), location.into()));
        r
    }

    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    pub fn truncated(mut self, len: usize) -> Self {
        self.truncate_to = Some(len);
        self
    }

    /// Answer only once `path` has received `hits` requests (at most after `timeout`).
    pub fn held_until(mut self, path: &str, hits: usize, timeout: Duration) -> Self {
        self.hold = Some(Hold {
            path: path.to_string(),
            hits,
            timeout,
        });
        self
    }
}

#[derive(Debug, Default)]
struct State {
    /// Path → replies; the front is served, and popped while more than one remains.
    routes: Mutex<HashMap<String, VecDeque<Reply>>>,
    hits: Mutex<HashMap<String, usize>>,
    /// TLS connections accepted (a request or not).
    connections: Mutex<usize>,
    holds: Mutex<Vec<HoldOutcome>>,
}

impl State {
    fn hits(&self, path: &str) -> usize {
        self.hits
            .lock()
            .ok()
            .and_then(|h| h.get(path).copied())
            .unwrap_or(0)
    }
}

/// The running server; stops when dropped.
pub struct RegistryServer {
    addr: SocketAddr,
    state: Arc<State>,
    ca_file: PathBuf,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
    pub(crate) published: Mutex<publish::Catalog>,
}

impl Drop for RegistryServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RegistryServer {
    /// Bind 127.0.0.1 on a free port and serve until dropped (needs a tokio runtime).
    pub async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("kraken-registry-")
            .tempdir()?;
        let (ca_pem, config) = tls_config()?;
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca_pem)?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State::default());
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let task = tokio::spawn(accept_loop(listener, acceptor, state.clone()));
        Ok(Self {
            addr,
            state,
            ca_file,
            _dir: dir,
            task,
            published: Mutex::default(),
        })
    }

    /// `https://localhost:PORT` (the certificate is valid for `localhost` and `127.0.0.1`).
    pub fn base_url(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }

    /// `localhost:PORT`, usable as the hostname of a provider address.
    pub fn host(&self) -> String {
        format!("localhost:{}", self.addr.port())
    }

    /// The PEM file of the CA that signed the server's certificate.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// Serve `reply` at `path` from now on.
    pub fn set(&self, path: &str, reply: Reply) {
        self.set_sequence(path, vec![reply]);
    }

    /// Serve these replies in order; the last one repeats.
    pub fn set_sequence(&self, path: &str, replies: Vec<Reply>) {
        if let Ok(mut routes) = self.state.routes.lock() {
            routes.insert(path.to_string(), replies.into());
        }
    }

    /// The reply currently served at `path`.
    pub fn get(&self, path: &str) -> Option<Reply> {
        self.state.routes.lock().ok()?.get(path)?.front().cloned()
    }

    /// How many requests `path` received.
    pub fn hits(&self, path: &str) -> usize {
        self.state.hits(path)
    }

    /// TCP connections accepted so far, whether or not they sent a request.
    pub fn connections(&self) -> usize {
        self.state.connections.lock().map(|c| *c).unwrap_or(0)
    }

    /// How each held response ([`Reply::held_until`]) was released, in release order.
    pub fn holds(&self) -> Vec<HoldOutcome> {
        self.state
            .holds
            .lock()
            .map(|h| h.clone())
            .unwrap_or_default()
    }

    /// Requests received in total.
    pub fn total_hits(&self) -> usize {
        self.state
            .hits
            .lock()
            .map(|h| h.values().sum())
            .unwrap_or(0)
    }
}

/// A throwaway CA and a server certificate for `localhost` / `127.0.0.1` signed by it.
fn tls_config() -> anyhow::Result<(String, rustls::ServerConfig)> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Kraken test registry CA");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;
    let leaf_key = rcgen::KeyPair::generate()?;
    let mut leaf_params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    leaf_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let leaf = leaf_params.signed_by(&leaf_key, &ca)?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)?;
    Ok((ca.pem(), config))
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    state: Arc<State>,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        if let Ok(mut c) = state.connections.lock() {
            *c += 1;
        }
        let (acceptor, state) = (acceptor.clone(), state.clone());
        tokio::spawn(async move {
            if let Ok(tls) = acceptor.accept(tcp).await {
                let _ = serve(tls, &state).await;
            }
        });
    }
}

/// Answer one request, then close (`Connection: close` keeps the server trivial).
async fn serve<S>(mut stream: S, state: &State) -> anyhow::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let path = read_request_path(&mut stream).await?;
    if let Ok(mut hits) = state.hits.lock() {
        *hits.entry(path.clone()).or_default() += 1;
    }
    let reply = state.routes.lock().ok().and_then(|mut routes| {
        let queue = routes.get_mut(&path)?;
        if queue.len() > 1 {
            queue.pop_front()
        } else {
            queue.front().cloned()
        }
    });
    let reply = reply.unwrap_or_else(|| Reply::status(404));
    if let Some(hold) = &reply.hold {
        let deadline = tokio::time::Instant::now() + hold.timeout;
        let condition_met = loop {
            if state.hits(&hold.path) >= hold.hits {
                break true;
            }
            if tokio::time::Instant::now() >= deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        if let Ok(mut holds) = state.holds.lock() {
            holds.push(HoldOutcome {
                served: path.clone(),
                condition_met,
            });
        }
    }
    tokio::time::sleep(reply.delay).await;
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reason(reply.status),
        reply.body.len()
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    let body = &reply.body[..reply
        .truncate_to
        .unwrap_or(reply.body.len())
        .min(reply.body.len())];
    for chunk in body.chunks(64 * 1024) {
        stream.write_all(chunk).await?;
    }
    stream.flush().await?;
    stream.shutdown().await?;
    Ok(())
}

async fn read_request_path<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
) -> anyhow::Result<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || buf.len() > 64 * 1024 {
            bail!("incomplete request");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    let line = text.lines().next().context("empty request")?;
    let mut parts = line.split_whitespace();
    let (Some("GET"), Some(target)) = (parts.next(), parts.next()) else {
        bail!("unsupported request {line:?}");
    };
    Ok(target.split('?').next().unwrap_or(target).to_string())
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        302 => "Found",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

//! Connecting to a provider served by a runner elsewhere ([`super::remote`]): the host's
//! other way to get a [`PluginClient`] besides starting a process ([`super::launch`]).
//!
//! The launcher starts a process and reads its handshake; this asks a
//! [`super::remote::Locate`] where the runner is now, connects to it pinning the certificate the locator
//! vouches for, and presents the identity every operator replica shares. What the rest of the
//! host holds is the same [`PluginClient`]: its "process" ends when the connection does (the
//! runner died, its Pod moved), so an RPC in flight then fails as a crashed provider's would,
//! and the host dials again, and configures the provider again, as it relaunches a process.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{oneshot, watch};
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info};

use super::client::{PluginClient, Process};
use super::launch::{LaunchError, LaunchOptions};
use super::remote::{Dial, Held, Located};

/// How long between attempts while a runner is not yet reachable.
const RETRY: Duration = Duration::from_millis(200);

/// Connect to the runner `dial` locates, retrying until `opts.handshake_timeout` (a runner
/// that was just scheduled still fetches its package); the last failure is the error.
pub(super) async fn dial(opts: &LaunchOptions, dial: &Dial) -> Result<PluginClient, LaunchError> {
    let deadline = Instant::now() + opts.handshake_timeout;
    let mut last = String::from("no attempt");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LaunchError::Unreachable {
                name: opts.name.clone(),
                timeout: opts.handshake_timeout,
                last,
            });
        }
        match tokio::time::timeout(left, dial.locate.locate()).await {
            Err(_) => last = "the runner did not become ready".into(),
            Ok(Err(why)) => last = why,
            Ok(Ok(located)) => match connect(opts, dial, &located).await {
                Ok(client) => return Ok(client),
                Err(why) => {
                    debug!(provider = %opts.name, address = %located.address, "runner not reachable yet: {why}");
                    last = format!("{} ({why})", located.address);
                }
            },
        }
        tokio::time::sleep(RETRY.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

async fn connect(
    opts: &LaunchOptions,
    dial: &Dial,
    located: &Located,
) -> Result<PluginClient, String> {
    let config = dial
        .identity
        .client_config(located.server_cert.clone())
        .map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config));
    let (exit_tx, exit) = watch::channel(None);
    let exit_tx = Arc::new(exit_tx);
    // One connection per instance: when it ends, the instance has; tonic's reconnect is
    // refused so the host dials (and configures) anew.
    let used = Arc::new(Mutex::new(false));
    let address = located.address.clone();
    let on_end = exit_tx.clone();
    let (locate, at) = (dial.locate.clone(), located.clone());
    let connector = tower::service_fn(move |_uri: tonic::transport::Uri| {
        let (address, tls, on_end, used) =
            (address.clone(), tls.clone(), on_end.clone(), used.clone());
        let (locate, at) = (locate.clone(), at.clone());
        async move {
            if std::mem::replace(&mut *used.lock().unwrap_or_else(|e| e.into_inner()), true) {
                return Err(std::io::Error::other("the runner's connection ended"));
            }
            let stream = tokio::net::TcpStream::connect(&address).await?;
            stream.set_nodelay(true)?;
            let server = rustls::pki_types::ServerName::try_from("localhost")
                .map_err(std::io::Error::other)?
                .to_owned();
            let stream = tls.connect(server, stream).await?;
            Ok::<_, std::io::Error>(TokioIo::new(Watched {
                inner: stream,
                on_end,
                _held: locate.hold(&at),
            }))
        }
    });
    let channel: Channel = Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .connect_with_connector(connector)
        .await
        .map_err(|e| kraken_kit::errors::chain(&e))?;
    let process = remote_process(opts, (exit_tx, exit));
    info!(provider = %opts.name, address = %located.address, runner = %located.instance, protocol = located.protocol, "connected to the provider's runner");
    Ok(PluginClient {
        protocol: located.protocol,
        channel,
        name: opts.name.clone(),
        address: located.address.clone(),
        tls: true,
        process,
        observer: opts.rpc_observer.clone(),
        deadlines: opts.deadlines,
        docs: opts.docs,
        schema_cache: opts
            .schema_cache
            .as_deref()
            .zip(dial.package.as_deref())
            .map(|(dir, package)| {
                super::schema_cache::file_for_package(dir, package, located.protocol)
            }),
    })
}

/// The "process" of a dialed client: it exits when the connection ends (`exit`), and killing
/// it only disconnects (the runner is shared).
fn remote_process(
    opts: &LaunchOptions,
    (exit_tx, exit): (
        Arc<watch::Sender<Option<String>>>,
        watch::Receiver<Option<String>>,
    ),
) -> Arc<Process> {
    let (kill_tx, kill_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        if kill_rx.await.is_ok() {
            let _ = exit_tx.send(Some("disconnected from its runner".into()));
        }
    });
    let (_, stderr_closed) = watch::channel(true);
    Arc::new(Process {
        pid: None,
        exit,
        kill: Mutex::new(Some(kill_tx)),
        stderr_tail: Arc::default(),
        stderr_closed,
        shutdown_grace: opts.shutdown_grace,
        remote: true,
    })
}

/// A connection that reports its end (end of file, or an error) once, as a process's exit,
/// and keeps what its locator holds while it lasts.
struct Watched<S> {
    inner: S,
    on_end: Arc<watch::Sender<Option<String>>>,
    _held: Option<Held>,
}

impl<S> Watched<S> {
    fn ended(&self, why: String) {
        self.on_end.send_if_modified(|exit| {
            if exit.is_none() {
                *exit = Some(why);
                true
            } else {
                false
            }
        });
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let room = buf.remaining();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if room > 0 && buf.filled().len() == before => {
                self.ended("the runner closed the connection".into());
            }
            Poll::Ready(Err(e)) => self.ended(format!("the runner's connection failed: {e}")),
            _ => {}
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Err(e)) = &polled {
            self.ended(format!("the runner's connection failed: {e}"));
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.ended("the connection to the runner was closed".into());
        polled
    }
}

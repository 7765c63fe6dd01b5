//! The runner's wire: it speaks go-plugin's side of the handshake to its launcher and relays
//! every gRPC request, unread, to the provider it hosts.
//!
//! Why a relay of go-plugin's own endpoint and not a Kraken service of its own: the launcher
//! already knows how to start, pin, call and stop a go-plugin server, and the runner looks
//! exactly like one (the handshake line, AutoMTLS with a certificate the launcher pins, the
//! launcher's certificate the only one accepted). So the operator's `Plugin` trait, its
//! adapters, deadlines and crash handling do not change, and a request crosses the runner as
//! HTTP/2 frames: no message is decoded or encoded again, whatever the protocol version or
//! the RPC (streams included: `GRPCStdio`, `GRPCBroker`). This is what Terraform's
//! `TF_REATTACH_PROVIDERS` does with a provider started elsewhere.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, UnixListener};
use tonic::transport::Channel;
use tower::ServiceExt as _;
use tracing::debug;

/// Where a runner accepts its launcher: a socket in its private directory (`local`), or a
/// TCP address (`pods`, where every operator replica connects).
pub enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

impl Listener {
    async fn accept(&self) -> std::io::Result<Box<dyn Io>> {
        Ok(match self {
            Self::Unix(l) => Box::new(l.accept().await?.0),
            Self::Tcp(l) => {
                let (stream, _) = l.accept().await?;
                stream.set_nodelay(true)?;
                Box::new(stream)
            }
        })
    }
}

/// Accept connections on `listener` for as long as the caller polls this, relaying each
/// request to `channel`; with `tls`, only a client presenting the pinned certificate gets in.
pub async fn serve(
    listener: Listener,
    tls: Option<Arc<rustls::ServerConfig>>,
    channel: Channel,
) -> std::io::Result<()> {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            // One client that gave up mid-accept is not the listener failing.
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                debug!("a connection was dropped before it was accepted: {err}");
                continue;
            }
            Err(err) => return Err(err),
        };
        let acceptor = acceptor.clone();
        let channel = channel.clone();
        tokio::spawn(async move {
            let result = match acceptor {
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(tls) => connection(TokioIo::new(tls), channel).await,
                    Err(err) => {
                        debug!("refused a connection: {err}");
                        return;
                    }
                },
                None => connection(TokioIo::new(stream), channel).await,
            };
            if let Err(err) = result {
                debug!("a relayed connection ended: {err}");
            }
        });
    }
}

async fn connection<I>(io: I, channel: Channel) -> Result<(), hyper::Error>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let channel = channel.clone();
        async move { Ok::<_, Infallible>(relay(channel, req).await) }
    });
    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(io, service)
        .await
}

/// One request to the provider and its answer back; a provider that cannot be reached is a
/// gRPC `UNAVAILABLE` the launcher reports like any failed RPC.
async fn relay(
    channel: Channel,
    req: hyper::Request<Incoming>,
) -> hyper::Response<tonic::body::Body> {
    let req = req.map(tonic::body::Body::new);
    match channel.oneshot(req).await {
        Ok(response) => response,
        Err(err) => {
            tonic::Status::unavailable(format!("the runner could not reach its provider: {err}"))
                .into_http()
        }
    }
}

/// The runner's socket in its private directory.
pub fn bind(dir: &Path) -> std::io::Result<(Listener, String)> {
    let path = dir.join("runner.sock");
    let listener = UnixListener::bind(&path)?;
    Ok((Listener::Unix(listener), path.display().to_string()))
}

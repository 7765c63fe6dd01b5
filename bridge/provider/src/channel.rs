//! The gRPC channel to a launched provider: over the unix socket (or TCP address) its handshake
//! announced, with AutoMTLS layered by our own connector when it is on.

use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use super::handshake::{Handshake, Network};

/// gRPC message limit for provider answers: large providers' schemas run to tens of MiB.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

pub async fn connect(
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

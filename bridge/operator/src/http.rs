//! The operator's HTTP endpoint (`--metrics-addr`): `/metrics` for Prometheus, `/healthz` for
//! the liveness probe and `/readyz` for the readiness probe.
//!
//! Three fixed routes do not need a web framework: this is hyper's HTTP/1 server on a tokio
//! listener, one task per connection.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use kraken_kit::metrics::Metrics;

/// What [`Metrics::encode`] writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// After a failed `accept` (e.g. out of file descriptors), wait before the next one rather
/// than spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// What one client may hold of the server.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// How long a client has to send its request headers (a slow-loris holds nothing longer).
    header_timeout: Duration,
    /// How long any connection may live, keep-alive included.
    connection: Duration,
    /// Connections served at once; more are closed at once (a scraper and two probes need 3).
    connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(5),
            connection: Duration::from_secs(30),
            connections: 64,
        }
    }
}

/// What the endpoints report.
#[derive(Debug, Clone)]
pub struct HttpState {
    pub metrics: Arc<Metrics>,
    /// What `/readyz` answers: 200 with the role, or 503 with what it waits for.
    pub ready: Arc<kraken_kit::readiness::Readiness>,
    /// Whether this listener serves `/metrics` (a health-only listener does not).
    pub with_metrics: bool,
}

/// The listening address could not be bound; names the address, the OS error is the source.
#[derive(Debug, thiserror::Error)]
#[error("failed to listen on {addr} for /metrics, /healthz and /readyz")]
struct BindError {
    addr: SocketAddr,
    #[source]
    source: io::Error,
}

/// Binds `addr` and serves until the returned task is aborted. Returns the bound address
/// (the real port when `addr` asked for port 0) and the serving task.
pub async fn serve(addr: SocketAddr, state: HttpState) -> io::Result<(SocketAddr, JoinHandle<()>)> {
    serve_with(addr, state, Limits::default()).await
}

async fn serve_with(
    addr: SocketAddr,
    state: HttpState,
    limits: Limits,
) -> io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| io::Error::new(source.kind(), BindError { addr, source }))?;
    let bound = listener.local_addr()?;
    info!(addr = %bound, "serving /metrics, /healthz and /readyz");
    let state = Arc::new(state);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    let task = tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                        debug!(%peer, "too many HTTP connections; closing this one");
                        continue;
                    };
                    let state = Arc::clone(&state);
                    tokio::spawn(async move {
                        let served = serve_connection(stream, peer, state, limits.header_timeout);
                        if tokio::time::timeout(limits.connection, served)
                            .await
                            .is_err()
                        {
                            debug!(%peer, "HTTP connection closed after {:?}", limits.connection);
                        }
                        drop(slot);
                    });
                }
                Err(err) => {
                    warn!(error = %err, "failed to accept an HTTP connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    });
    Ok((bound, task))
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    state: Arc<HttpState>,
    header_timeout: Duration,
) {
    let service = service_fn(move |req: Request<Incoming>| {
        let response = respond(&state, req.method(), req.uri().path());
        async move { Ok::<_, Infallible>(response) }
    });
    if let Err(err) = http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        debug!(%peer, error = %err, "HTTP connection ended with an error");
    }
}

/// The response to `method path`; pure apart from reading the metrics and the readiness.
fn respond(state: &HttpState, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let known =
        matches!(path, "/healthz" | "/readyz") || (path == "/metrics" && state.with_metrics);
    if !known {
        return text(StatusCode::NOT_FOUND, "not found\n");
    }
    if method != Method::GET && method != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match path {
        "/metrics" => {
            let mut response = Response::new(Full::new(Bytes::from(state.metrics.encode())));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
            response
        }
        "/readyz" => {
            let (ready, line) = state.ready.report();
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            let mut response = Response::new(Full::new(Bytes::from(line)));
            *response.status_mut() = status;
            response
        }
        _ => text(StatusCode::OK, "ok\n"),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT));
    response
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpStream;

    use super::*;

    /// One request over a fresh connection; the whole response as text.
    async fn request(addr: SocketAddr, method: &str, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream
            .write_all(req.as_bytes())
            .await
            .expect("send the request");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .expect("read the response");
        response
    }

    fn state() -> HttpState {
        HttpState {
            metrics: Arc::new(Metrics::new()),
            ready: Arc::default(),
            with_metrics: true,
        }
    }

    #[tokio::test]
    async fn routes_answer_with_status_and_body() {
        let state = state();
        state.metrics.api_write("leases", "update");
        let ready = Arc::clone(&state.ready);
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let (addr, task) = serve(loopback, state).await.expect("bind a free port");

        let cases = [
            ("GET", "/healthz", "HTTP/1.1 200 OK", "ok\n"),
            (
                "GET",
                "/readyz",
                "HTTP/1.1 503 Service Unavailable",
                "starting\n",
            ),
            ("GET", "/nope", "HTTP/1.1 404 Not Found", "not found\n"),
            (
                "POST",
                "/healthz",
                "HTTP/1.1 405 Method Not Allowed",
                "method not allowed\n",
            ),
        ];
        for (method, path, status, body) in cases {
            let response = request(addr, method, path).await;
            assert!(response.starts_with(status), "{method} {path}: {response}");
            assert!(response.ends_with(body), "{method} {path}: {response}");
        }

        ready.set_started();
        let response = request(addr, "GET", "/readyz").await;
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(
            response.ends_with("standby: another replica leads\n"),
            "{response}"
        );
        ready.set_leading(true);
        let cache = ready.cache("Object.fixture.tf.kraken.dev");
        let response = request(addr, "GET", "/readyz").await;
        assert!(response.starts_with("HTTP/1.1 503"), "{response}");
        assert!(
            response.contains("Object.fixture.tf.kraken.dev"),
            "{response}"
        );
        drop(cache);

        let response = request(addr, "GET", "/metrics").await;
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(
            response.contains("content-type: application/openmetrics-text"),
            "{response}"
        );
        assert!(
            response.contains(r#"kraken_api_writes_total{resource="leases",verb="update"} 1"#),
            "{response}"
        );
        assert!(response.ends_with("# EOF\n"), "{response}");
        task.abort();
    }

    #[tokio::test]
    async fn idle_clients_are_cut_off_and_cannot_crowd_out_the_probes() {
        use tokio::io::AsyncReadExt as _;
        let limits = Limits {
            header_timeout: Duration::from_millis(200),
            connection: Duration::from_secs(5),
            connections: 2,
        };
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let (addr, task) = serve_with(loopback, state(), limits).await.expect("bind");
        // Two clients connect and send nothing (a slow-loris): they hold both slots.
        let mut idle = Vec::new();
        for _ in 0..2 {
            idle.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A third is closed at once.
        let mut third = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(2), third.read(&mut buf)).await;
        assert!(
            matches!(n, Ok(Ok(0)) | Ok(Err(_))),
            "the third connection was served: {n:?}"
        );
        // The idle ones are dropped after the header timeout, and the probe answers again.
        for mut c in idle {
            let n = tokio::time::timeout(Duration::from_secs(2), c.read(&mut buf)).await;
            assert!(
                matches!(n, Ok(Ok(_)) | Ok(Err(_))),
                "an idle client was kept: {n:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            request(addr, "GET", "/healthz")
                .await
                .starts_with("HTTP/1.1 200")
        );
        task.abort();
    }

    #[tokio::test]
    async fn a_taken_address_is_named_in_the_error() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let addr = taken.local_addr().expect("bound address");
        let err = serve(addr, state()).await.expect_err("the port is taken");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(err.to_string().contains(&addr.to_string()), "{err}");
    }
}

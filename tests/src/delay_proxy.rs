//! A loopback HTTP proxy that holds chosen requests for a while before passing them on: the
//! window in which a test kills the operator. The held request still reaches the server after
//! its client is gone — exactly a create the server carried out whose answer nobody recorded.
//!
//! One request per connection: the proxy asks the server to close after answering
//! (`Connection: close`), so clients open a connection per request through it.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Counters and the knob of a running proxy; it stops when dropped.
pub struct DelayProxy {
    pub port: u16,
    /// How long requests containing the pattern are held, in milliseconds.
    pub delay_ms: Arc<AtomicU64>,
    /// Requests containing the pattern that arrived.
    pub held: Arc<AtomicU64>,
    /// Requests containing the pattern whose answer came back from the server.
    pub answered: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl DelayProxy {
    /// Proxies 127.0.0.1:<port> to `upstream`, holding requests whose text contains `pattern`.
    pub fn start(upstream: SocketAddr, pattern: &'static str) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let proxy = Self {
            port,
            delay_ms: Arc::default(),
            held: Arc::default(),
            answered: Arc::default(),
            stop: Arc::default(),
        };
        let (delay, held, answered, stop) = (
            proxy.delay_ms.clone(),
            proxy.held.clone(),
            proxy.answered.clone(),
            proxy.stop.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (delay, held, answered) =
                            (delay.clone(), held.clone(), answered.clone());
                        std::thread::spawn(move || {
                            let _ = serve(client, upstream, pattern, &delay, &held, &answered);
                        });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => break,
                }
            }
        });
        Ok(proxy)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    pattern: &str,
    delay: &AtomicU64,
    held: &AtomicU64,
    answered: &AtomicU64,
) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    let request = read_request(&mut client)?;
    let text = String::from_utf8_lossy(&request);
    let matched = text.contains(pattern);
    if matched {
        held.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(delay.load(Ordering::Relaxed)));
    }
    let mut server = TcpStream::connect(upstream)?;
    server.write_all(&close_after(&request))?;
    // Read the whole answer even when the client is gone: the server finishes either way.
    let mut response = Vec::new();
    server.read_to_end(&mut response)?;
    if matched {
        answered.fetch_add(1, Ordering::Relaxed);
    }
    let _ = client.write_all(&response);
    Ok(())
}

/// Reads one HTTP/1.1 request: the head, then Content-Length bytes of body.
fn read_request(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(buf)
}

/// The request with its Connection header replaced by `Connection: close`.
fn close_after(request: &[u8]) -> Vec<u8> {
    let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
        return request.to_vec();
    };
    let head = String::from_utf8_lossy(&request[..end]);
    let mut out: Vec<u8> = head
        .split("\r\n")
        .filter(|l| !l.to_lowercase().starts_with("connection:"))
        .collect::<Vec<_>>()
        .join("\r\n")
        .into_bytes();
    out.extend_from_slice(b"\r\nConnection: close\r\n\r\n");
    out.extend_from_slice(&request[end + 4..]);
    out
}

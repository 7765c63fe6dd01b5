//! Draining a provider's output into `tracing`: its stderr (keeping a tail for error messages),
//! its stdout after the handshake, and go-plugin's `GRPCStdio` stream. A provider blocks when a
//! pipe fills, so every stream is read to its end whether anyone logs it or not.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use kraken_proto::plugin::grpc_stdio_client::GrpcStdioClient;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::watch;
use tonic::transport::Channel;
use tracing::debug;

/// How many stderr lines to keep for error messages when a provider fails.
const STDERR_TAIL_LINES: usize = 20;

pub fn drain_stderr<R>(
    reader: R,
    name: String,
    tail: Arc<Mutex<VecDeque<String>>>,
    closed: watch::Sender<bool>,
) where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut lines = BufReader::new(reader).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            debug!(provider = %name, stream = "stderr", "{line}");
            if let Ok(mut t) = tail.lock() {
                if t.len() == STDERR_TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        }
        let _ = closed.send(true);
    });
}

pub fn drain_stdout<R>(mut lines: tokio::io::Lines<BufReader<R>>, name: String)
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            debug!(provider = %name, stream = "stdout", "{line}");
        }
    });
}

/// go-plugin forwards writes to the plugin's os.Stdout/os.Stderr over `GRPCStdio`.
pub fn stream_stdio(channel: Channel, name: String) {
    tokio::spawn(async move {
        let mut client = GrpcStdioClient::new(channel);
        let Ok(response) = client.stream_stdio(()).await else {
            return;
        };
        let mut stream = response.into_inner();
        while let Ok(Some(chunk)) = stream.message().await {
            let text = String::from_utf8_lossy(&chunk.data);
            for line in text.lines() {
                debug!(provider = %name, stream = "stdio", "{line}");
            }
        }
    });
}

//! Draining a provider's output into `tracing`: its stderr (keeping a tail for error messages),
//! its stdout after the handshake, and go-plugin's `GRPCStdio` stream. A provider blocks when a
//! pipe fills, so every stream is read to its end whether anyone logs it or not.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use kraken_proto::plugin::grpc_stdio_client::GrpcStdioClient;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::watch;
use tonic::transport::Channel;
use tracing::debug;

/// How many stderr lines to keep for error messages when a provider fails.
const STDERR_TAIL_LINES: usize = 20;
/// The longest line kept of a provider's output: a provider that writes a gigabyte without a
/// newline must not make the operator hold it.
pub const MAX_LINE: usize = 16 * 1024;

/// One line of `r` without its line ending, at most `max` bytes (the rest of a longer line is
/// read and dropped, and the line says so); `None` at the end of the stream.
pub async fn next_line<R>(r: &mut R, max: usize) -> std::io::Result<Option<String>>
where
    R: AsyncBufRead + Unpin,
{
    let mut line = Vec::new();
    let mut cut = false;
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok((!line.is_empty() || cut).then(|| finish_line(line, cut)));
        }
        let newline = buf.iter().position(|b| *b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        let room = max.saturating_sub(line.len());
        cut |= chunk.len() > room;
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = newline.map_or(buf.len(), |i| i + 1);
        r.consume(used);
        if newline.is_some() {
            return Ok(Some(finish_line(line, cut)));
        }
    }
}

fn finish_line(mut line: Vec<u8>, cut: bool) -> String {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    let mut s = String::from_utf8_lossy(&line).into_owned();
    if cut {
        s.push_str(" … [line cut at 16 KiB]");
    }
    s
}

pub fn drain_stderr<R>(
    reader: R,
    name: String,
    tail: Arc<Mutex<VecDeque<String>>>,
    closed: watch::Sender<bool>,
    relay: bool,
) where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut reader = BufReader::new(reader);
        while let Ok(Some(line)) = next_line(&mut reader, MAX_LINE).await {
            if relay {
                eprintln!("{line}");
            } else {
                debug!(provider = %name, stream = "stderr", "{line}");
            }
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

pub fn drain_stdout<R>(mut reader: BufReader<R>, name: String)
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok(Some(line)) = next_line(&mut reader, MAX_LINE).await {
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
                debug!(provider = %name, stream = "stdio", "{}", kraken_kit::text::truncate(line, MAX_LINE));
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_bounded_and_the_rest_of_a_long_one_is_dropped() {
        let mut input = b"short\r\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 100_000));
        input.extend_from_slice(b"\nafter\nlast-without-newline");
        let mut r = BufReader::with_capacity(1024, input.as_slice());
        let mut got = Vec::new();
        while let Some(line) = next_line(&mut r, 64).await.expect("read") {
            got.push(line);
        }
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[0], "short");
        assert!(got[1].starts_with(&"x".repeat(64)) && got[1].ends_with("[line cut at 16 KiB]"));
        assert!(got[1].len() < 100, "{}", got[1].len());
        assert_eq!(got[2], "after");
        assert_eq!(got[3], "last-without-newline");
    }
}

//! Reading what a running operator serves: `/metrics`, `/readyz` and `/healthz` over plain
//! HTTP, and Prometheus text.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::Context as _;

/// Plain HTTP/1.0 GET (no chunked responses, the server closes the connection):
/// `(status, body)`.
pub fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("reading the answer to GET {path} from {addr}"))?;
    parse_http_response(&raw).with_context(|| format!("GET http://{addr}{path}"))
}

fn parse_http_response(raw: &[u8]) -> anyhow::Result<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("malformed HTTP response: {text:?}"))?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status in HTTP response: {head:?}"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Ok((status, body))
}

/// Decode a chunked body (a server may answer chunked even to HTTP/1.0).
fn dechunk(mut body: &str) -> anyhow::Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").context("truncated chunked body")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .with_context(|| format!("bad chunk size {size:?}"))?;
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..size).context("truncated chunk")?;
        out.push_str(chunk);
        body = rest
            .get(size..)
            .and_then(|r| r.strip_prefix("\r\n"))
            .context("chunk not followed by CRLF")?;
    }
}

/// A sample's labels as `(name, value)` pairs, in the order written.
pub type Labels = Vec<(String, String)>;

/// The value of label `key` of a sample, "" when it has none.
pub fn label<'a>(labels: &'a Labels, key: &str) -> &'a str {
    labels
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// The sum of every sample of metric `name` (any labels) in Prometheus text; None when there
/// is none. `name` is the full sample name (`kraken_reconcile_runs_total`).
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    metric_sum_where(text, name, |_| true)
}

/// Like [`metric_sum`], over the samples whose labels satisfy `keep` (given as `(name, value)`
/// pairs, values unescaped): e.g. API writes other than Lease renewals.
pub fn metric_sum_where(
    text: &str,
    name: &str,
    keep: impl Fn(&[(String, String)]) -> bool,
) -> Option<f64> {
    let mut sum = None;
    for (labels, v) in metric_samples(text, name) {
        if keep(&labels) {
            *sum.get_or_insert(0.0) += v;
        }
    }
    sum
}

/// Every sample of metric `name` in Prometheus text, as (labels, value), in the order written:
/// e.g. the API writes per `(resource, verb)`.
pub fn metric_samples(text: &str, name: &str) -> Vec<(Labels, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((sample_name, labels, rest)) = split_sample(line) else {
            continue;
        };
        if sample_name != name {
            continue;
        }
        if let Some(v) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            out.push((labels, v));
        }
    }
    out
}

/// `name{k="v",...} value [ts]` → (name, labels, "value [ts]"). Label values may hold `}`,
/// `,`, spaces and the escapes `\\`, `\"`, `\n`.
fn split_sample(line: &str) -> Option<(&str, Labels, &str)> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let rest = &line[name_end..];
    let Some(mut body) = rest.strip_prefix('{') else {
        return Some((name, Vec::new(), rest));
    };
    let mut labels = Vec::new();
    loop {
        body = body.trim_start_matches([',', ' ']);
        if let Some(after) = body.strip_prefix('}') {
            return Some((name, labels, after));
        }
        let (key, after_key) = body.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after_key.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim().to_string(), value));
        body = &after_key[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sums_over_label_sets() {
        let text = "# HELP kraken_reconcile_runs_total Reconciles.\n\
            # TYPE kraken_reconcile_runs_total counter\n\
            kraken_reconcile_runs_total{kind=\"Object\"} 3\n\
            kraken_reconcile_runs_total{kind=\"Pet\",error=\"a } b\"} 4.5\n\
            kraken_reconcile_runs_total_other 100\n\
            kraken_api_writes_total 7 1700000000000\n";
        assert_eq!(metric_sum(text, "kraken_reconcile_runs_total"), Some(7.5));
        assert_eq!(metric_sum(text, "kraken_api_writes_total"), Some(7.0));
        assert_eq!(metric_sum(text, "kraken_missing"), None);
        let pets = metric_sum_where(text, "kraken_reconcile_runs_total", |l| {
            l.iter().any(|(k, v)| k == "error" && v == "a } b")
        });
        assert_eq!(pets, Some(4.5));
        let escaped = "kraken_api_writes_total{resource=\"x\\\"y\",verb=\"patch\"} 2\n\
            kraken_api_writes_total{resource=\"leases\",verb=\"update\"} 40\n";
        let no_leases = metric_sum_where(escaped, "kraken_api_writes_total", |l| {
            !l.iter().any(|(k, v)| k == "resource" && v == "leases")
        });
        assert_eq!(no_leases, Some(2.0));
        let samples = metric_samples(escaped, "kraken_api_writes_total");
        assert_eq!(samples.len(), 2);
        assert_eq!(
            samples[1],
            (
                vec![
                    ("resource".into(), "leases".into()),
                    ("verb".into(), "update".into())
                ],
                40.0
            )
        );
        assert_eq!(
            split_sample("m{a=\"1\",b=\"x\\\"}\"} 3").map(|(_, l, r)| (l, r.trim().to_string())),
            Some((
                vec![("a".into(), "1".into()), ("b".into(), "x\"}".into())],
                "3".to_string()
            ))
        );
    }

    #[test]
    fn http_responses_plain_and_chunked() -> anyhow::Result<()> {
        let plain = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nok";
        assert_eq!(parse_http_response(plain)?, (200, "ok".to_string()));
        let chunked = b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n\
            4\r\nnot \r\n5\r\nready\r\n0\r\n\r\n";
        assert_eq!(
            parse_http_response(chunked)?,
            (503, "not ready".to_string())
        );
        Ok(())
    }
}

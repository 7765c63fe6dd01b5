//! moto's recorder: every request moto serves, written as one JSON line to a file, read back
//! as `(service, action)` and, for EC2's query protocol, its form parameters. A test reads what
//! Kraken asked of the cloud from it: the actions of a pass, or the lookups a recovery made.

use std::io::{Read as _, Seek as _, SeekFrom};

use anyhow::Context as _;

use super::Moto;

/// Where a reader of the recording stopped; [`Moto::recorded_since`] reads on from there. The
/// default is the start of the recording.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cursor(u64);

impl Moto {
    /// From now on, moto records every request it serves (its recorder), for
    /// [`Moto::recorded`].
    pub fn record(&self) -> anyhow::Result<()> {
        self.post("/moto-api/recorder/start-recording")
    }

    /// The requests recorded since [`Moto::record`], oldest first, as `(service, action)`
    /// ([`recorded_action`]).
    pub fn recorded(&self) -> anyhow::Result<Vec<(String, String)>> {
        let text = self.recording_text()?;
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| recorded_action(&serde_json::from_str(l)?))
            .collect()
    }

    /// Every value the recorded query-protocol requests (EC2's) asked their filter `name`
    /// for, as `(action, value)`: `Filter.N.Name=name` with its `Filter.N.Value.M`.
    pub fn recorded_filter_values(&self, name: &str) -> anyhow::Result<Vec<(String, String)>> {
        let text = self.recording_text()?;
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let entry: serde_json::Value = serde_json::from_str(line)?;
            let (_, action) = recorded_action(&entry)?;
            let params = form_params(&recorded_body(&entry)?);
            for (key, value) in &params {
                let Some(filter) = key.strip_suffix(".Name").filter(|_| value == name) else {
                    continue;
                };
                let prefix = format!("{filter}.Value.");
                out.extend(
                    params
                        .iter()
                        .filter(|(k, _)| k.starts_with(&prefix))
                        .map(|(_, v)| (action.clone(), v.clone())),
                );
            }
        }
        Ok(out)
    }

    /// The requests recorded after `cursor`, oldest first, as `(service, action)`; moves the
    /// cursor past them. A line moto is still writing is left for the next call.
    pub fn recorded_since(&self, cursor: &mut Cursor) -> anyhow::Result<Vec<(String, String)>> {
        let mut file = match std::fs::File::open(&self.recording) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).context("opening moto's recording"),
        };
        file.seek(SeekFrom::Start(cursor.0))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        cursor.0 += u64::try_from(whole)?;
        String::from_utf8_lossy(&bytes[..whole])
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| recorded_action(&serde_json::from_str(l)?))
            .collect()
    }

    fn recording_text(&self) -> anyhow::Result<String> {
        match std::fs::read_to_string(&self.recording) {
            Ok(t) => Ok(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
            Err(e) => Err(e).context("reading moto's recording"),
        }
    }
}

/// The body of a request moto's recorder wrote, as text.
fn recorded_body(entry: &serde_json::Value) -> anyhow::Result<String> {
    use base64::Engine as _;
    let body = entry["body"].as_str().unwrap_or_default();
    if entry["body_encoded"] == true {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(body)
            .context("a recorded body is not base64")?;
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    Ok(body.to_owned())
}

/// The `key=value` pairs of a form-encoded body, decoded (`+` is a space, `%XX` a byte).
fn form_params(body: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
            match (bytes[i], hex) {
                (b'%', Some(b)) => {
                    out.push(b);
                    i += 3;
                    continue;
                }
                (b'+', _) => out.push(b' '),
                (b, _) => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    body.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// One request moto's recorder wrote, as `(service, action)`: the service from the request's
/// signature scope (`s3`, `ec2`, `iam`, `sqs`…), the action from its `X-Amz-Target` (JSON
/// protocols), its `Action` form parameter (query protocols), or for REST (S3) the method and
/// path.
pub fn recorded_action(entry: &serde_json::Value) -> anyhow::Result<(String, String)> {
    let header = |name: &str| {
        entry["headers"]
            .as_object()
            .and_then(|h| h.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)))
            .and_then(|(_, v)| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    // Credential=AKID/20261127/us-east-1/iam/aws4_request
    let service = header("Authorization")
        .split("Credential=")
        .nth(1)
        .and_then(|c| c.split('/').nth(3))
        .unwrap_or("unknown")
        .to_owned();
    let target = header("X-Amz-Target");
    if let Some((_, action)) = target.rsplit_once('.') {
        return Ok((service, action.to_owned()));
    }
    let body = recorded_body(entry)?;
    let url = entry["url"].as_str().unwrap_or_default();
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or_default();
    let action = body
        .split('&')
        .chain(query.split('&'))
        .find_map(|kv| kv.strip_prefix("Action="));
    let method = entry["method"].as_str().unwrap_or_default();
    Ok(match action {
        Some(a) => (service, a.to_owned()),
        None => {
            let path = url
                .split("://")
                .nth(1)
                .map_or(url, |rest| rest.find('/').map_or("/", |i| &rest[i..]));
            (service, format!("{method} {path}"))
        }
    })
}

/// Whether a recorded `(service, action)` only reads: `Describe*`, `Get*`, `List*`, or a REST
/// `GET`/`HEAD`.
pub fn reads_only(action: &str) -> bool {
    ["Describe", "Get", "List", "GET ", "HEAD "]
        .iter()
        .any(|p| action.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_bodies_decode_to_their_pairs() {
        let body = "Action=DescribeVpcs&Filter.1.Name=tag%3Akraken.dev%2Fowner-uid\
            &Filter.1.Value.1=3f1c-9a&Note=a+b%2Bc&Bad=%zz&Empty=";
        let params = form_params(body);
        let get = |k: &str| {
            params
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("Action"), Some("DescribeVpcs"));
        assert_eq!(get("Filter.1.Name"), Some("tag:kraken.dev/owner-uid"));
        assert_eq!(get("Filter.1.Value.1"), Some("3f1c-9a"));
        assert_eq!(get("Note"), Some("a b+c"));
        assert_eq!(get("Bad"), Some("%zz"), "a stray % is kept as it is");
        assert_eq!(get("Empty"), Some(""));
    }
}

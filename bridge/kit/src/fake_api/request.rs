//! Reading a request: its path (which collection, which object, which subresource), its
//! query parameters and a label selector.

use serde_json::Value as Json;

/// A parsed request path.
pub struct Target {
    pub prefix: String,
    pub plural: String,
    pub namespace: String,
    pub name: Option<String>,
    /// A request to the `/status` subresource.
    pub status: bool,
}

pub fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (prefix, rest) = match parts.first() {
        Some(&"api") if parts.len() >= 2 => (format!("/api/{}", parts[1]), &parts[2..]),
        Some(&"apis") if parts.len() >= 3 => {
            (format!("/apis/{}/{}", parts[1], parts[2]), &parts[3..])
        }
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => ((*ns).to_owned(), tail),
        _ => (String::new(), rest),
    };
    match rest {
        [plural] => Some(Target {
            prefix,
            plural: (*plural).to_owned(),
            namespace,
            name: None,
            status: false,
        }),
        [plural, name] => Some(Target {
            prefix,
            plural: (*plural).to_owned(),
            namespace,
            name: Some((*name).to_owned()),
            status: false,
        }),
        [plural, name, "status"] => Some(Target {
            prefix,
            plural: (*plural).to_owned(),
            namespace,
            name: Some((*name).to_owned()),
            status: true,
        }),
        _ => None,
    }
}

pub fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `labels` satisfy a selector of `k=v`, `k!=v`, `k` and `!k` terms.
pub fn selected(labels: &Json, selector: &str) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            labels[k].as_str() != Some(v)
        } else if let Some((k, v)) = term.split_once('=') {
            labels[k.trim_end_matches('=')].as_str() == Some(v)
        } else if let Some(k) = term.strip_prefix('!') {
            labels.get(k).is_none()
        } else {
            labels.get(term).is_some()
        }
    })
}

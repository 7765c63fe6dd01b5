//! The patches a client sends besides an apply: JSON merge patch (RFC 7386) and JSON patch
//! (RFC 6902: add, remove, replace, test).

use serde_json::{Value as Json, json};

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Json, patch: &Json) {
    match patch {
        Json::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            if let Json::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge_patch(t.entry(k.clone()).or_insert(Json::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// RFC 6902 JSON patch (add, remove, replace, test); `Err` with a message when an operation
/// fails.
pub fn json_patch(target: &mut Json, ops: &Json) -> Result<(), String> {
    for op in ops.as_array().into_iter().flatten() {
        let path = op["path"].as_str().unwrap_or_default();
        let pointer: Vec<String> = path
            .split('/')
            .skip(1)
            .map(|p| p.replace("~1", "/").replace("~0", "~"))
            .collect();
        match op["op"].as_str().unwrap_or_default() {
            "test" => {
                if target.pointer(path) != Some(&op["value"]) {
                    return Err(format!("test of {path} failed"));
                }
            }
            "remove" => {
                let (parent, last) = parent_of(target, &pointer)?;
                match parent {
                    Json::Object(m) => {
                        m.remove(&last).ok_or(format!("{path} not found"))?;
                    }
                    Json::Array(a) => {
                        let i: usize = last.parse().map_err(|_| format!("bad index {last}"))?;
                        if i >= a.len() {
                            return Err(format!("{path} not found"));
                        }
                        a.remove(i);
                    }
                    _ => return Err(format!("{path} not found")),
                }
            }
            kind @ ("add" | "replace") => {
                let value = op["value"].clone();
                if pointer.is_empty() {
                    *target = value;
                    continue;
                }
                let (parent, last) = parent_of(target, &pointer)?;
                match parent {
                    Json::Object(m) => {
                        if kind == "replace" && !m.contains_key(&last) {
                            return Err(format!("{path} not found"));
                        }
                        m.insert(last, value);
                    }
                    Json::Array(a) if last == "-" => a.push(value),
                    Json::Array(a) => {
                        let i: usize = last.parse().map_err(|_| format!("bad index {last}"))?;
                        if kind == "replace" && i < a.len() {
                            a[i] = value;
                        } else if i <= a.len() {
                            a.insert(i, value);
                        } else {
                            return Err(format!("{path} out of range"));
                        }
                    }
                    _ => return Err(format!("{path}: parent is not a container")),
                }
            }
            other => return Err(format!("unsupported op {other}")),
        }
    }
    Ok(())
}

fn parent_of<'a>(
    target: &'a mut Json,
    pointer: &[String],
) -> Result<(&'a mut Json, String), String> {
    let Some((last, parents)) = pointer.split_last() else {
        return Err("empty path".into());
    };
    let mut cur = target;
    for p in parents {
        cur = match cur {
            Json::Object(m) => m.get_mut(p).ok_or(format!("/{p} not found"))?,
            Json::Array(a) => {
                let i: usize = p.parse().map_err(|_| format!("bad index {p}"))?;
                a.get_mut(i).ok_or(format!("index {i} not found"))?
            }
            _ => return Err(format!("/{p}: not a container")),
        };
    }
    Ok((cur, last.clone()))
}

//! Terraform's built-in functions over known values, and the error and number helpers the
//! evaluator shares. [`super::eval`] evaluates the arguments (and `try`, `can` and `file`
//! itself); a call with an argument that is not known never reaches this module.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::Value as Json;

mod strings;
use strings::{format, join, replace, split};

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

pub type Result<T> = std::result::Result<T, EvalError>;

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(EvalError(message.into()))
}

/// Calls the built-in `name` with known arguments.
pub fn known_call(name: &str, a: &[Json]) -> Result<Json> {
    text(name, a)
        .or_else(|| conversion(name, a))
        .or_else(|| collections(name, a))
        .or_else(|| maps_and_numbers(name, a))
        .unwrap_or_else(|| {
            err(format!(
                "function {name}() is not supported by kraken convert"
            ))
        })
}

/// `Ok` when `name` was given exactly `n` arguments.
fn arity(name: &str, a: &[Json], n: usize) -> Result<()> {
    if a.len() == n {
        Ok(())
    } else {
        err(format!("{name}() takes {n} arguments, got {}", a.len()))
    }
}

/// Argument `i` as text.
fn text_arg(a: &[Json], i: usize) -> Result<String> {
    stringify(at(a, i)?)
}

/// Argument `i`, or an error naming the missing argument.
fn at(a: &[Json], i: usize) -> Result<&Json> {
    a.get(i)
        .ok_or_else(|| EvalError(format!("argument {} is missing", i + 1)))
}

/// String functions; `None` for another function.
fn text(name: &str, a: &[Json]) -> Option<Result<Json>> {
    let run = || -> Result<Option<Json>> {
        let arity = |n: usize| arity(name, a, n);
        let s = |i: usize| text_arg(a, i);
        Ok(Some(match name {
            "format" => {
                let Some(f) = a.first() else {
                    return err("format() needs a format string");
                };
                Json::String(format(&stringify(f)?, a.get(1..).unwrap_or_default())?)
            }
            "join" => {
                arity(2)?;
                let items: Vec<String> = list(at(a, 1)?)?
                    .iter()
                    .map(stringify)
                    .collect::<Result<_>>()?;
                Json::String(join(&items, &s(0)?)?)
            }
            "split" => {
                arity(2)?;
                split(&s(0)?, &s(1)?)?
            }
            "replace" => {
                arity(3)?;
                Json::String(replace(&s(0)?, &s(1)?, &s(2)?)?)
            }
            "lower" => Json::String(s(0)?.to_lowercase()),
            "upper" => Json::String(s(0)?.to_uppercase()),
            "trimspace" => Json::String(s(0)?.trim().to_owned()),
            "substr" => {
                arity(3)?;
                let chars: Vec<char> = s(0)?.chars().collect();
                let start = (to_f64(at(a, 1)?)? as usize).min(chars.len());
                let len = to_f64(at(a, 2)?)?;
                let end = if len < 0.0 {
                    chars.len()
                } else {
                    start.saturating_add(len as usize).min(chars.len())
                };
                Json::String(chars[start..end].iter().collect())
            }
            "startswith" => Json::Bool(s(0)?.starts_with(&s(1)?)),
            "endswith" => Json::Bool(s(0)?.ends_with(&s(1)?)),
            "base64encode" => {
                use base64::Engine as _;
                Json::String(base64::engine::general_purpose::STANDARD.encode(s(0)?))
            }
            _ => return Ok(None),
        }))
    };
    run().transpose()
}

/// Conversions, numbers and networks; `None` for another function.
fn conversion(name: &str, a: &[Json]) -> Option<Result<Json>> {
    let run = || -> Result<Option<Json>> {
        let arity = |n: usize| arity(name, a, n);
        let s = |i: usize| text_arg(a, i);
        Ok(Some(match name {
            "tostring" => {
                arity(1)?;
                if at(a, 0)?.is_null() {
                    Json::Null
                } else {
                    Json::String(s(0)?)
                }
            }
            "tonumber" => {
                arity(1)?;
                if at(a, 0)?.is_null() {
                    Json::Null
                } else {
                    num(to_f64(at(a, 0)?)?)
                }
            }
            "tobool" => {
                arity(1)?;
                match at(a, 0)? {
                    Json::Bool(_) | Json::Null => at(a, 0)?.clone(),
                    Json::String(x) if x == "true" || x == "false" => Json::Bool(x == "true"),
                    other => return err(format!("tobool({other})")),
                }
            }
            "tolist" => {
                arity(1)?;
                Json::Array(list(at(a, 0)?)?.clone())
            }
            "toset" => {
                arity(1)?;
                Json::Array(set(list(at(a, 0)?)?))
            }
            "tomap" => {
                arity(1)?;
                Json::Object(map(at(a, 0)?)?.clone())
            }
            "jsonencode" => {
                arity(1)?;
                Json::String(at(a, 0)?.to_string())
            }
            "jsondecode" => {
                arity(1)?;
                let text = s(0)?;
                // A decoded value holds about 16 times the bytes of its text at worst
                // (`[0,0,...]`): bounded before it is decoded.
                if text.len() as u64 > crate::guard::MAX_FILE_BYTES {
                    return err(format!(
                        "jsondecode() of {} bytes, over the {} MiB it decodes",
                        text.len(),
                        crate::guard::MAX_FILE_BYTES >> 20
                    ));
                }
                serde_json::from_str(&text).map_err(|e| EvalError(format!("jsondecode(): {e}")))?
            }
            "cidrsubnet" => {
                arity(3)?;
                Json::String(cidrsubnet(
                    &s(0)?,
                    to_f64(at(a, 1)?)? as u32,
                    to_f64(at(a, 2)?)? as u128,
                )?)
            }
            "cidrhost" => {
                arity(2)?;
                Json::String(cidrhost(&s(0)?, to_f64(at(a, 1)?)? as i128)?)
            }
            _ => return Ok(None),
        }))
    };
    run().transpose()
}

/// Maps and numbers; `None` for another function.
fn maps_and_numbers(name: &str, a: &[Json]) -> Option<Result<Json>> {
    let run = || -> Result<Option<Json>> {
        let arity = |n: usize| arity(name, a, n);
        let s = |i: usize| text_arg(a, i);
        Ok(Some(match name {
            "min" | "max" => {
                let ns = a.iter().map(to_f64).collect::<Result<Vec<_>>>()?;
                let pick = if name == "min" { f64::min } else { f64::max };
                num(ns
                    .into_iter()
                    .reduce(pick)
                    .ok_or_else(|| EvalError(format!("{name}() needs arguments")))?)
            }
            "abs" => num(to_f64(at(a, 0)?)?.abs()),
            "ceil" => num(to_f64(at(a, 0)?)?.ceil()),
            "floor" => num(to_f64(at(a, 0)?)?.floor()),
            "lookup" => {
                if !(2..=3).contains(&a.len()) {
                    return err("lookup() takes 2 or 3 arguments");
                }
                match map(at(a, 0)?)?.get(&s(1)?) {
                    Some(v) => v.clone(),
                    None => a
                        .get(2)
                        .cloned()
                        .ok_or_else(|| EvalError(format!("lookup(): no key {:?}", s(1).ok())))?,
                }
            }
            "merge" => {
                let mut out = serde_json::Map::new();
                for m in a {
                    if !m.is_null() {
                        out.extend(map(m)?.clone());
                    }
                }
                Json::Object(out)
            }
            "keys" => Json::Array(map(at(a, 0)?)?.keys().cloned().map(Json::String).collect()),
            "values" => Json::Array(map(at(a, 0)?)?.values().cloned().collect()),
            "range" => range(a)?,
            "zipmap" => {
                arity(2)?;
                let (k, v) = (list(at(a, 0)?)?, list(at(a, 1)?)?);
                Json::Object(
                    k.iter()
                        .zip(v)
                        .map(|(k, v)| Ok((stringify(k)?, v.clone())))
                        .collect::<Result<_>>()?,
                )
            }
            _ => return Ok(None),
        }))
    };
    run().transpose()
}

/// Collection functions; `None` for another function.
fn collections(name: &str, a: &[Json]) -> Option<Result<Json>> {
    let run = || -> Result<Option<Json>> {
        let arity = |n: usize| arity(name, a, n);
        Ok(Some(match name {
            "concat" => {
                let mut out = Vec::new();
                for l in a {
                    out.extend(list(l)?.iter().cloned());
                }
                Json::Array(out)
            }
            "length" => {
                arity(1)?;
                Json::from(match at(a, 0)? {
                    Json::Array(x) => x.len(),
                    Json::Object(x) => x.len(),
                    Json::String(x) => x.chars().count(),
                    other => return err(format!("length() of {other}")),
                })
            }
            "element" => {
                arity(2)?;
                let items = list(at(a, 0)?)?;
                if items.is_empty() {
                    return err("element() of an empty list");
                }
                let i = to_f64(at(a, 1)?)? as usize;
                items[i % items.len()].clone()
            }
            "coalesce" => a
                .iter()
                .find(|v| !v.is_null() && **v != Json::String(String::new()))
                .cloned()
                .ok_or_else(|| EvalError("coalesce(): every argument is null or empty".into()))?,
            "flatten" => {
                arity(1)?;
                let mut out = Vec::new();
                flatten(at(a, 0)?, &mut out);
                Json::Array(out)
            }
            "contains" => {
                arity(2)?;
                Json::Bool(list(at(a, 0)?)?.contains(at(a, 1)?))
            }
            "distinct" => Json::Array(set(list(at(a, 0)?)?)),
            "compact" => Json::Array(
                list(at(a, 0)?)?
                    .iter()
                    .filter(|v| !v.is_null() && **v != Json::String(String::new()))
                    .cloned()
                    .collect(),
            ),
            "sort" => {
                let mut items: Vec<String> = list(at(a, 0)?)?
                    .iter()
                    .map(stringify)
                    .collect::<Result<_>>()?;
                items.sort();
                Json::Array(items.into_iter().map(Json::String).collect())
            }
            "reverse" => Json::Array(list(at(a, 0)?)?.iter().rev().cloned().collect()),
            _ => return Ok(None),
        }))
    };
    run().transpose()
}

fn list(j: &Json) -> Result<&Vec<Json>> {
    match j {
        Json::Array(a) => Ok(a),
        other => err(format!("{other} is not a list")),
    }
}

fn map(j: &Json) -> Result<&serde_json::Map<String, Json>> {
    match j {
        Json::Object(m) => Ok(m),
        other => err(format!("{other} is not a map")),
    }
}

/// Distinct members, first occurrence kept; by their JSON text, so that a long list is not
/// compared member by member with every other.
fn set(items: &[Json]) -> Vec<Json> {
    let mut seen = std::collections::BTreeSet::new();
    items
        .iter()
        .filter(|i| seen.insert(i.to_string()))
        .cloned()
        .collect()
}

fn flatten(j: &Json, out: &mut Vec<Json>) {
    match j {
        Json::Array(a) => a.iter().for_each(|x| flatten(x, out)),
        other => out.push(other.clone()),
    }
}

fn range(a: &[Json]) -> Result<Json> {
    let n = a.iter().map(to_f64).collect::<Result<Vec<_>>>()?;
    let (start, end, step) = match n.as_slice() {
        [e] => (0.0, *e, 1.0),
        [s, e] => (*s, *e, if e >= s { 1.0 } else { -1.0 }),
        [s, e, st] => (*s, *e, *st),
        _ => return err("range() takes 1 to 3 arguments"),
    };
    if step == 0.0 {
        return err("range(): step 0");
    }
    let mut out = Vec::new();
    let mut x = start;
    while (step > 0.0 && x < end) || (step < 0.0 && x > end) {
        if out.len() >= 1024 {
            return err("range(): more than 1024 elements");
        }
        out.push(num(x));
        x += step;
    }
    Ok(Json::Array(out))
}

/// (address bits, prefix length, is IPv6) of a CIDR prefix.
fn parse_cidr(prefix: &str) -> Result<(u128, u32, bool)> {
    let (addr, len) = prefix
        .split_once('/')
        .ok_or_else(|| EvalError(format!("{prefix:?} is not a CIDR prefix")))?;
    let len: u32 = len
        .parse()
        .map_err(|_| EvalError(format!("{prefix:?}: bad prefix length")))?;
    if let Ok(v4) = addr.parse::<Ipv4Addr>() {
        if len > 32 {
            return err(format!("{prefix:?}: prefix length over 32"));
        }
        return Ok((u128::from(u32::from(v4)), len, false));
    }
    let v6: Ipv6Addr = addr
        .parse()
        .map_err(|_| EvalError(format!("{prefix:?}: bad address")))?;
    if len > 128 {
        return err(format!("{prefix:?}: prefix length over 128"));
    }
    Ok((u128::from(v6), len, true))
}

fn render_addr(bits: u128, v6: bool) -> String {
    if v6 {
        Ipv6Addr::from(bits).to_string()
    } else {
        Ipv4Addr::from(bits as u32).to_string()
    }
}

fn cidrsubnet(prefix: &str, newbits: u32, netnum: u128) -> Result<String> {
    let (addr, len, v6) = parse_cidr(prefix)?;
    let total = if v6 { 128 } else { 32 };
    let new_len = len.saturating_add(newbits);
    if new_len > total {
        return err(format!(
            "cidrsubnet({prefix:?}, {newbits}): would need {new_len} bits"
        ));
    }
    if newbits < 128 && netnum >= (1u128 << newbits) {
        return err(format!(
            "cidrsubnet({prefix:?}, {newbits}, {netnum}): netnum too large"
        ));
    }
    let host_bits = total - new_len;
    let mask = if len == 0 {
        0
    } else {
        (!0u128) << (128 - len) >> (128 - total)
    };
    let base = addr & mask;
    let net = base | netnum.checked_shl(host_bits).unwrap_or(0);
    Ok(format!("{}/{new_len}", render_addr(net, v6)))
}

fn cidrhost(prefix: &str, hostnum: i128) -> Result<String> {
    let (addr, len, v6) = parse_cidr(prefix)?;
    let total = if v6 { 128 } else { 32 };
    let host_bits = total - len;
    let size: i128 = if host_bits >= 127 {
        i128::MAX
    } else {
        1i128 << host_bits
    };
    let n = if hostnum < 0 { size + hostnum } else { hostnum };
    if n < 0 || n >= size {
        return err(format!("cidrhost({prefix:?}, {hostnum}): no such host"));
    }
    let mask = if len == 0 {
        0
    } else {
        (!0u128) << (128 - len) >> (128 - total)
    };
    Ok(render_addr((addr & mask) | n as u128, v6))
}

/// A float as JSON, integral ones as integers (`2 * 3` is `6`, not `6.0`).
pub fn num(f: f64) -> Json {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Json::from(f as i64)
    } else {
        serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number)
    }
}

/// A number from JSON, or from a string that holds one (Terraform converts).
pub fn to_f64(j: &Json) -> Result<f64> {
    match j {
        Json::Number(n) => n
            .as_f64()
            .ok_or_else(|| EvalError(format!("{n} is not a number"))),
        Json::String(s) => s
            .trim()
            .parse()
            .map_err(|_| EvalError(format!("{s:?} is not a number"))),
        other => err(format!("{other} is not a number")),
    }
}

/// A primitive as template text.
pub fn stringify(j: &Json) -> Result<String> {
    match j {
        Json::String(s) => Ok(s.clone()),
        Json::Number(n) => Ok(n.to_string()),
        Json::Bool(b) => Ok(b.to_string()),
        Json::Null => err("a null value in a template"),
        other => err(format!("{other} is not a string")),
    }
}

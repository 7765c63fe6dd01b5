//! The string functions whose result can be far larger than their arguments (`format`'s
//! widths, `join`'s separator repeated, `replace` into every position, `split` into every
//! character): each result's size is known or checked before it is built, so that a few
//! bytes of configuration cannot allocate gigabytes before the guard weighs the result.

use serde_json::Value as Json;

use super::{EvalError, Result, err, stringify, to_f64};
use crate::guard::MAX_VALUE_WEIGHT;

/// The widest width or precision a `format` verb may ask for.
const MAX_WIDTH: usize = 4096;

/// An error when a result of `len` bytes would be over [`MAX_VALUE_WEIGHT`].
fn fits(name: &str, len: u64) -> Result<()> {
    if len > MAX_VALUE_WEIGHT {
        return err(format!(
            "{name}() would make over {} MiB",
            MAX_VALUE_WEIGHT >> 20
        ));
    }
    Ok(())
}

/// `join(sep, items)`, its size counted first.
pub(super) fn join(items: &[String], sep: &str) -> Result<String> {
    let seps = items.len().saturating_sub(1) as u64;
    let len = items
        .iter()
        .map(|i| i.len() as u64)
        .fold(seps.saturating_mul(sep.len() as u64), u64::saturating_add);
    fits("join", len)?;
    Ok(items.join(sep))
}

/// `split(sep, s)`, the number of pieces counted first (an empty separator splits between
/// every character, as Rust's `split` does).
pub(super) fn split(sep: &str, s: &str) -> Result<Json> {
    let pieces = if sep.is_empty() {
        s.chars().count() as u64 + 2
    } else {
        s.matches(sep).count() as u64 + 1
    };
    fits(
        "split",
        pieces.saturating_mul(32).saturating_add(s.len() as u64),
    )?;
    Ok(Json::Array(s.split(sep).map(Json::from).collect()))
}

/// `replace(s, find, with)`: `/regex/` or plain text, each the size of its result checked as
/// it grows (an empty match is at every position).
pub(super) fn replace(s: &str, find: &str, with: &str) -> Result<String> {
    if find.len() > 1 && find.starts_with('/') && find.ends_with('/') {
        let re = regex::Regex::new(&find[1..find.len() - 1])
            .map_err(|e| EvalError(format!("replace(): {e}")))?;
        // Terraform's $1 references match the regex crate's; what replace_all does, one match
        // at a time.
        let mut out = String::new();
        let mut last = 0;
        for caps in re.captures_iter(s) {
            let Some(m) = caps.get(0) else { continue };
            out.push_str(&s[last..m.start()]);
            caps.expand(with, &mut out);
            last = m.end();
            fits("replace", out.len() as u64)?;
        }
        out.push_str(&s[last..]);
        return Ok(out);
    }
    let matches = if find.is_empty() {
        s.chars().count() as u64 + 1
    } else {
        s.matches(find).count() as u64
    };
    fits(
        "replace",
        matches
            .saturating_mul(with.len() as u64)
            .saturating_add(s.len() as u64),
    )?;
    Ok(s.replace(find, with))
}

/// `format` with the verbs configurations use: `%s %d %v %q %f %%`, width and precision
/// (each at most [`MAX_WIDTH`]).
pub(super) fn format(f: &str, args: &[Json]) -> Result<String> {
    let mut out = String::new();
    let mut chars = f.chars().peekable();
    let mut next = args.iter();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = String::new();
        while let Some(&d) = chars.peek() {
            if d.is_ascii_digit() || d == '.' || d == '-' || d == '+' || d == '#' {
                spec.push(d);
                chars.next();
            } else {
                break;
            }
        }
        let Some(verb) = chars.next() else {
            return err("format(): a trailing %");
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let arg = next
            .next()
            .ok_or_else(|| EvalError(format!("format(): too few arguments for {f:?}")))?;
        let (left, zero, width, precision) = parse_spec(&spec)?;
        let text = match verb {
            's' | 'v' => match arg {
                Json::String(x) => x.clone(),
                other => other.to_string(),
            },
            'd' => format!("{}", to_f64(arg)?.trunc() as i64),
            'f' => format!("{:.*}", precision.unwrap_or(6), to_f64(arg)?),
            'q' => Json::String(stringify(arg)?).to_string(),
            't' => arg.to_string(),
            other => return err(format!("format(): verb %{other} is not supported")),
        };
        let pad = width.saturating_sub(text.chars().count());
        if left {
            out.push_str(&text);
            out.extend(std::iter::repeat_n(' ', pad));
        } else {
            let fill = if zero { '0' } else { ' ' };
            out.extend(std::iter::repeat_n(fill, pad));
            out.push_str(&text);
        }
        fits("format", out.len() as u64)?;
    }
    Ok(out)
}

/// (left-justify, zero-pad, width, precision) of a format spec like `-08.2`.
fn parse_spec(spec: &str) -> Result<(bool, bool, usize, Option<usize>)> {
    let left = spec.contains('-');
    let body: String = spec
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let (w, p) = match body.split_once('.') {
        Some((w, p)) => (w.to_owned(), Some(p)),
        None => (body.clone(), None),
    };
    let zero = w.starts_with('0');
    let bounded = |digits: &str| -> Result<usize> {
        let n = if digits.is_empty() {
            0
        } else {
            digits.parse().unwrap_or(usize::MAX)
        };
        if n > MAX_WIDTH {
            return err(format!(
                "format(): a width or precision of {digits}, over {MAX_WIDTH}"
            ));
        }
        Ok(n)
    };
    let precision = match p {
        Some(p) if !p.is_empty() => Some(bounded(p)?),
        _ => None,
    };
    Ok((left, zero, bounded(&w)?, precision))
}

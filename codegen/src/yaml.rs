//! JSON values as block-style YAML that YAML 1.1 readers cannot misread.
//!
//! Generated CRDs are read by kubectl and kustomize, which parse YAML through
//! `sigs.k8s.io/yaml`, a YAML **1.1** parser: there `y`, `n`, `yes`, `no`, `on` and `off` are
//! booleans, also as map keys (a property named `y` would silently become `"true"`). Serde
//! YAML serializers (the `serde_yaml` family) quote by YAML 1.2 rules and print `y: n` bare,
//! so this small emitter is used instead. It is conservative: a string is printed plain only
//! when it starts with a letter, uses a small set of characters and is no YAML 1.1 keyword;
//! multi-line strings become literal blocks (`|`) when that is exact, everything else is
//! double-quoted with JSON escapes (a subset of YAML's) plus escapes for the characters YAML
//! treats as line breaks or non-printable.
//!
//! Output is deterministic for a given value; callers sort keys first.

use std::fmt::Write as _;

use serde_json::{Map, Value as Json};

/// The YAML text of `value` (a document without `---`), ending in a newline.
pub fn to_yaml(value: &Json) -> String {
    let mut out = String::new();
    match value {
        Json::Object(map) if !map.is_empty() => write_map(&mut out, map, 0, false),
        Json::Array(items) if !items.is_empty() => write_seq(&mut out, items, 0),
        scalar => write_scalar(&mut out, scalar, 2),
    }
    out
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// A map's entries at `indent`; with `first_inline` the first entry continues the line of
/// a sequence item's `- `.
fn write_map(out: &mut String, map: &Map<String, Json>, indent: usize, first_inline: bool) {
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 || !first_inline {
            pad(out, indent);
        }
        write_key(out, key);
        write_after_key(out, value, indent);
    }
}

fn write_after_key(out: &mut String, value: &Json, indent: usize) {
    match value {
        Json::Object(map) if !map.is_empty() => {
            out.push('\n');
            write_map(out, map, indent + 2, false);
        }
        // Sequences sit at their key's indentation, as kubectl prints them.
        Json::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_seq(out, items, indent);
        }
        scalar => {
            out.push(' ');
            write_scalar(out, scalar, indent + 2);
        }
    }
}

fn write_seq(out: &mut String, items: &[Json], indent: usize) {
    for item in items {
        pad(out, indent);
        match item {
            Json::Object(map) if !map.is_empty() => {
                out.push_str("- ");
                write_map(out, map, indent + 2, true);
            }
            Json::Array(inner) if !inner.is_empty() => {
                out.push_str("-\n");
                write_seq(out, inner, indent + 2);
            }
            scalar => {
                out.push_str("- ");
                write_scalar(out, scalar, indent + 2);
            }
        }
    }
}

fn write_key(out: &mut String, key: &str) {
    if is_plain_safe(key) {
        out.push_str(key);
    } else {
        write_double_quoted(out, key);
    }
    out.push(':');
}

/// A scalar (or empty container) and its line break; `indent` is for literal block lines.
fn write_scalar(out: &mut String, value: &Json, indent: usize) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => write_number(out, n),
        Json::String(s) if is_plain_safe(s) => out.push_str(s),
        Json::String(s) if is_literal_safe(s) => return write_literal(out, s, indent),
        Json::String(s) => write_double_quoted(out, s),
        Json::Array(_) => out.push_str("[]"),
        Json::Object(_) => out.push_str("{}"),
    }
    out.push('\n');
}

/// Integers as they are; other numbers in a form YAML 1.1 reads as a float (it needs a `.`
/// and a signed exponent: `1.0e+29`, not `1e29`).
fn write_number(out: &mut String, n: &serde_json::Number) {
    let text = n.to_string();
    if n.is_i64() || n.is_u64() {
        out.push_str(&text);
        return;
    }
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (text.as_str(), None),
    };
    out.push_str(mantissa);
    if !mantissa.contains('.') {
        out.push_str(".0");
    }
    if let Some(e) = exponent {
        out.push('e');
        if !e.starts_with(['+', '-']) {
            out.push('+');
        }
        out.push_str(e);
    }
}

/// Words YAML 1.1 resolves to booleans or null, compared case-insensitively (quoting a
/// few more spellings than necessary is harmless).
const KEYWORDS: [&str; 11] = [
    "y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf",
];

/// Whether `s` can be printed without quotes and read back as the same string by YAML 1.1
/// and 1.2 parsers.
fn is_plain_safe(s: &str) -> bool {
    let starts_with_letter = s.starts_with(|c: char| c.is_ascii_alphabetic());
    starts_with_letter
        && !s.ends_with(' ')
        && s.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(
                    c,
                    ' ' | '_'
                        | '-'
                        | '.'
                        | '/'
                        | '('
                        | ')'
                        | ','
                        | ';'
                        | '='
                        | '+'
                        | '?'
                        | '\''
                        | '"'
                )
        })
        && !KEYWORDS.iter().any(|k| s.eq_ignore_ascii_case(k))
}

/// Characters YAML does not allow raw in a scalar, or reads as a line break.
fn needs_escape(c: char) -> bool {
    (c < ' ' && c != '\n' && c != '\t')
        || ('\u{7f}'..='\u{9f}').contains(&c)
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}')
}

/// Whether a multi-line string can be printed exactly as a literal block.
fn is_literal_safe(s: &str) -> bool {
    s.contains('\n')
        && !s.starts_with([' ', '\n'])
        && !s.chars().any(|c| c == '\t' || c == '\r' || needs_escape(c))
}

fn write_literal(out: &mut String, s: &str, indent: usize) {
    let body = s.trim_end_matches('\n');
    let trailing = s.len() - body.len();
    out.push_str(match trailing {
        0 => "|-",
        1 => "|",
        _ => "|+",
    });
    out.push('\n');
    for line in body.split('\n') {
        if !line.is_empty() {
            pad(out, indent);
            out.push_str(line);
        }
        out.push('\n');
    }
    for _ in 1..trailing {
        out.push('\n');
    }
}

fn write_double_quoted(out: &mut String, s: &str) {
    // JSON string escapes are valid YAML escapes; JSON leaves a few characters raw that YAML
    // must not see raw, so those get \u escapes too.
    let json = serde_json::to_string(s).unwrap_or_default();
    for c in json.chars() {
        if needs_escape(c) {
            let _ = write!(out, "\\u{:04X}", u32::from(c));
        } else {
            out.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn yaml_1_1_keywords_and_indicators_are_quoted() {
        let cases = [
            ("y", "\"y\""),
            ("N", "\"N\""),
            ("on", "\"on\""),
            ("Off", "\"Off\""),
            ("yes", "\"yes\""),
            ("NULL", "\"NULL\""),
            ("true", "\"true\""),
            ("1e3", "\"1e3\""),
            ("2001-01-01", "\"2001-01-01\""),
            ("- a", "\"- a\""),
            ("a: b", "\"a: b\""),
            ("a #b", "\"a #b\""),
            ("<<", "\"<<\""),
            ("", "\"\""),
            (" lead", "\" lead\""),
            ("trail ", "\"trail \""),
            ("`code`", "\"`code`\""),
            ("ü", "\"ü\""),
            ("del\u{7f}", "\"del\\u007F\""),
            ("nel\u{85}ls\u{2028}", "\"nel\\u0085ls\\u2028\""),
            ("tab\tx", "\"tab\\tx\""),
            (
                "plain words, (even) with ; = + ? / . _ -",
                "plain words, (even) with ; = + ? / . _ -",
            ),
            ("fooBar2", "fooBar2"),
            ("yesterday", "yesterday"),
        ];
        for (s, want) in cases {
            assert_eq!(to_yaml(&json!(s)), format!("{want}\n"), "{s:?}");
        }
    }

    #[test]
    fn keys_are_quoted_like_values() {
        let text = to_yaml(&json!({"y": "n", "x": 1, "on": {"off": true}}));
        assert_eq!(text, "\"on\":\n  \"off\": true\nx: 1\n\"y\": \"n\"\n");
    }

    #[test]
    fn multi_line_strings_become_exact_literal_blocks() {
        let cases = [
            ("a\nb", "|-\n  a\n  b\n"),
            ("a\n\nb\n", "|\n  a\n\n  b\n"),
            (
                "a\n  indented # not a comment: ok\n\n\n",
                "|+\n  a\n    indented # not a comment: ok\n\n\n",
            ),
            (" a\nb", "\" a\\nb\"\n"),
            ("\nb", "\"\\nb\"\n"),
            ("a\r\nb", "\"a\\r\\nb\"\n"),
        ];
        for (s, want) in cases {
            let text = to_yaml(&json!({"k": s}));
            assert_eq!(text, format!("k: {want}"), "{s:?}");
        }
    }

    #[test]
    fn structure_is_block_style_with_sequences_at_key_level() {
        let value = json!({
            "a": [{"b": 1, "c": [true, null]}, [1, [2]], "s", {}, []],
            "d": {},
            "e": [],
            "f": {"g": {"h": 1.5, "i": -1e29, "j": 7}},
        });
        let want = "\
a:
- b: 1
  c:
  - true
  - null
-
  - 1
  -
    - 2
- s
- {}
- []
d: {}
e: []
f:
  g:
    h: 1.5
    i: -1.0e+29
    j: 7
";
        assert_eq!(to_yaml(&value), want);
    }

    /// Every output parses back (with an independent YAML parser) to the same JSON.
    #[test]
    fn output_parses_back_to_the_same_value() {
        let nasty = [
            "y",
            "n",
            "on",
            "",
            " ",
            "a: b",
            "- x",
            "#",
            "\"q\"",
            "'s'",
            "a\nb\n\n",
            "\t",
            "\u{85}",
            "\u{2028}",
            "\u{feff}x",
            "é\nü",
            "~",
            "0x1F",
            "0o17",
            "1_000",
            ".5",
            "+1",
            "[a]",
            "{a: b}",
            "*ref",
            "&anchor",
            "!tag",
            "%dir",
            "@at",
            "`tick`",
            "|",
            ">",
        ];
        let mut map = Map::new();
        for (i, s) in nasty.iter().enumerate() {
            map.insert((*s).to_owned(), json!([s, {"k": s}, i, 0.25, -3.5e-7]));
        }
        let value = Json::Object(map);
        let back: Json = yaml_serde::from_str(&to_yaml(&value)).expect("valid yaml");
        assert_eq!(back, value);
    }
}

//! A small JSON tree that keeps numbers as their text, with its own parser and writer.
//!
//! serde_json turns numbers into `f64` unless its `arbitrary_precision` feature is on,
//! and that feature is not harmless to turn on here: Cargo unifies features, so it would
//! change `serde_json::Number` for every crate in the binary and is known to break
//! numbers inside serde's buffered (untagged / flattened) deserialization, which
//! Kubernetes client types use. `RawValue` would need the `raw_value` feature and still
//! re-scan nested text per level. Terraform numbers must survive state round trips
//! exactly, so this module parses JSON itself — it is the only JSON the value layer
//! reads from raw bytes, and it is small.

use serde_json::Value as Json;

use super::Number;
use kraken_codegen::cty::write_json_string;

/// Nesting accepted by the parser, matching serde_json's default recursion limit.
const MAX_DEPTH: usize = 128;

/// A parsed JSON value; numbers keep their exact text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum JsonNode {
    Null,
    Bool(bool),
    /// Valid JSON number text, or canonical [`Number`] text.
    Number(String),
    /// A float that came from serde_json, already rounded to binary: as a number it is
    /// the float's exact value, as a string its shortest decimal text.
    Float(f64),
    String(String),
    Array(Vec<JsonNode>),
    /// Members in document order; duplicate keys are kept (the last one wins on use).
    Object(Vec<(String, JsonNode)>),
}

impl JsonNode {
    /// Converts from serde_json; integers keep their text, floats stay floats.
    pub(crate) fn from_serde(json: &Json) -> Self {
        match json {
            Json::Null => Self::Null,
            Json::Bool(b) => Self::Bool(*b),
            Json::Number(n) => match n.as_f64() {
                Some(f) if !n.is_i64() && !n.is_u64() => Self::Float(f),
                _ => Self::Number(n.to_string()),
            },
            Json::String(s) => Self::String(s.clone()),
            Json::Array(items) => Self::Array(items.iter().map(Self::from_serde).collect()),
            Json::Object(members) => Self::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.clone(), Self::from_serde(v)))
                    .collect(),
            ),
        }
    }

    /// Converts to serde_json; a number that is not an `i64`, `u64` or finite `f64`
    /// becomes the nearest `f64` (serde_json cannot hold more).
    pub(crate) fn to_serde(&self) -> Json {
        match self {
            Self::Null => Json::Null,
            Self::Bool(b) => Json::Bool(*b),
            Self::Number(text) => number_to_serde(text),
            Self::Float(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
            Self::String(s) => Json::String(s.clone()),
            Self::Array(items) => Json::Array(items.iter().map(Self::to_serde).collect()),
            Self::Object(members) => Json::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_serde()))
                    .collect(),
            ),
        }
    }

    /// Appends compact JSON text.
    pub(crate) fn write(&self, out: &mut String) {
        match self {
            Self::Null => out.push_str("null"),
            Self::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Self::Number(text) => out.push_str(text),
            Self::Float(f) => match Number::from_f64(*f) {
                Some(n) if !n.is_infinite() => out.push_str(n.as_str()),
                _ => out.push_str("null"),
            },
            Self::String(s) => write_json_string(s, out),
            Self::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Self::Object(members) => {
                out.push('{');
                for (i, (key, item)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_json_string(key, out);
                    out.push(':');
                    item.write(out);
                }
                out.push('}');
            }
        }
    }
}

fn number_to_serde(text: &str) -> Json {
    if let Ok(i) = text.parse::<i64>() {
        return Json::from(i);
    }
    if let Ok(u) = text.parse::<u64>() {
        return Json::from(u);
    }
    text.parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Json::Null, Json::Number)
}

/// Parses one JSON document.
pub(crate) fn parse(bytes: &[u8]) -> Result<JsonNode, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("json is not valid utf-8: {e}"))?;
    let mut parser = Parser { text, pos: 0 };
    let node = parser.value(0)?;
    parser.skip_ws();
    if parser.pos != text.len() {
        return Err(parser.error("trailing characters after the json value"));
    }
    Ok(node)
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, message: &str) -> String {
        format!("invalid json at byte {}: {message}", self.pos)
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect_literal(&mut self, literal: &str, node: JsonNode) -> Result<JsonNode, String> {
        if self.text[self.pos..].starts_with(literal) {
            self.pos += literal.len();
            Ok(node)
        } else {
            Err(self.error("unexpected token"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<JsonNode, String> {
        if depth > MAX_DEPTH {
            return Err(self.error("nesting too deep"));
        }
        self.skip_ws();
        match self.peek() {
            Some(b'n') => self.expect_literal("null", JsonNode::Null),
            Some(b't') => self.expect_literal("true", JsonNode::Bool(true)),
            Some(b'f') => self.expect_literal("false", JsonNode::Bool(false)),
            Some(b'"') => Ok(JsonNode::String(self.string()?)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[') => self.array(depth),
            Some(b'{') => self.object(depth),
            Some(_) => Err(self.error("unexpected character")),
            None => Err(self.error("unexpected end of input")),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, kept as text.
    fn number(&mut self) -> Result<JsonNode, String> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        let int_start = self.pos;
        let int_len = self.digits();
        if int_len == 0 || (int_len > 1 && self.text.as_bytes()[int_start] == b'0') {
            return Err(self.error("invalid number"));
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.error("invalid number"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.error("invalid number"));
            }
        }
        Ok(JsonNode::Number(self.text[start..self.pos].to_owned()))
    }

    fn string(&mut self) -> Result<String, String> {
        self.pos += 1; // opening quote
        let mut out = String::new();
        loop {
            let run_start = self.pos;
            while matches!(self.peek(), Some(b) if b != b'"' && b != b'\\' && b >= 0x20) {
                self.pos += 1;
            }
            // Runs end at ASCII bytes, so they are char boundaries.
            out.push_str(&self.text[run_start..self.pos]);
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
                Some(_) => return Err(self.error("control character in string")),
                None => return Err(self.error("unterminated string")),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), String> {
        let c = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.pos += 1;
                let c = self.unicode_escape()?;
                out.push(c);
                return Ok(());
            }
            _ => return Err(self.error("invalid escape")),
        };
        self.pos += 1;
        out.push(c);
        Ok(())
    }

    /// After `\u`: four hex digits, combining a surrogate pair when one follows.
    fn unicode_escape(&mut self) -> Result<char, String> {
        let high = self.hex4()?;
        if !(0xd800..0xdc00).contains(&high) {
            return char::from_u32(high).ok_or_else(|| self.error("lone low surrogate"));
        }
        if !self.text[self.pos..].starts_with("\\u") {
            return Err(self.error("lone high surrogate"));
        }
        self.pos += 2;
        let low = self.hex4()?;
        if !(0xdc00..0xe000).contains(&low) {
            return Err(self.error("invalid surrogate pair"));
        }
        char::from_u32(0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00))
            .ok_or_else(|| self.error("invalid surrogate pair"))
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let hex = self
            .text
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.error("short unicode escape"))?;
        let value =
            u32::from_str_radix(hex, 16).map_err(|_| self.error("invalid unicode escape"))?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.error("invalid unicode escape"));
        }
        self.pos += 4;
        Ok(value)
    }

    fn array(&mut self, depth: usize) -> Result<JsonNode, String> {
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(JsonNode::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(JsonNode::Array(items));
                }
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<JsonNode, String> {
        self.pos += 1;
        let mut members = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(JsonNode::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a string key"));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.error("expected ':'"));
            }
            self.pos += 1;
            members.push((key, self.value(depth + 1)?));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(JsonNode::Object(members));
                }
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_keeps_number_text() {
        let node = parse(
            br#" {"a": [1, -0.50, 1e400, 123456789012345678901234567890], "b": null, "c": true} "#,
        )
        .expect("valid json");
        let mut out = String::new();
        node.write(&mut out);
        assert_eq!(
            out,
            r#"{"a":[1,-0.50,1e400,123456789012345678901234567890],"b":null,"c":true}"#
        );
    }

    #[test]
    fn parses_string_escapes() {
        let node = parse(br#""a\"b\\c\/\n\t\u00e9\ud83d\ude00""#).expect("valid json");
        assert_eq!(node, JsonNode::String("a\"b\\c/\n\té😀".to_owned()));
        let mut out = String::new();
        JsonNode::String("q\"\u{1}é".to_owned()).write(&mut out);
        assert_eq!(out, r#""q\"\u0001é""#);
        assert_eq!(
            parse(out.as_bytes()),
            Ok(JsonNode::String("q\"\u{1}é".to_owned()))
        );
    }

    #[test]
    fn rejects_invalid_json() {
        let bad: &[&[u8]] = &[
            b"",
            b"01",
            b"1.",
            b"-",
            b"1e",
            b"[1,]",
            b"{\"a\"}",
            b"{a:1}",
            b"\"\\x\"",
            b"\"abc",
            b"[1] 2",
            b"\"\\ud800\"",
            b"\"\\udc00\"",
            b"nul",
            b"\"\x01\"",
            b"\xff",
        ];
        for text in bad {
            assert!(parse(text).is_err(), "{:?}", String::from_utf8_lossy(text));
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn serde_conversions() {
        let json: Json =
            serde_json::json!({"i": -3, "u": u64::MAX, "f": 0.5, "s": "x", "l": [null, false]});
        let node = JsonNode::from_serde(&json);
        assert_eq!(node.to_serde(), json);
        assert_eq!(number_to_serde("1e400"), Json::Null);
    }
}

//! Sensitivity follows the value, not only the argument it was given to.
//!
//! A value from a Secret (or a sensitive output, or a template using one) makes the top-level
//! attribute it sets sensitive ([`super::deps`]). Providers echo arguments elsewhere: hashicorp/aws
//! copies `tags` into the computed `tags_all`, an id may be made of a name, a diagnostic may
//! quote the value. So the values themselves are kept for the pass ([`Secrets`]), and any
//! attribute, id or message that contains one is treated as sensitive too: left out of
//! `status` and the StateDeclaration (published in the outputs Secret), and replaced by
//! `(sensitive)` in conditions, Events and logs.

use std::collections::BTreeSet;

use serde_json::Value as Json;

/// Values shorter than this are not looked for in what the provider returns: a two-letter
/// value would be found in unrelated attributes and hide them. They stay redacted where they
/// are set.
pub const MIN_ECHO_LEN: usize = 4;

/// What [`Secrets::redact`] puts in place of a sensitive value.
pub const REDACTED: &str = "(sensitive)";

/// The sensitive values one pass resolved (their text), never shown.
#[derive(Default, Clone)]
pub struct Secrets(Vec<String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} redacted)", self.0.len())
    }
}

impl Secrets {
    /// The text of every string (and number) inside the sensitive `values`, longest first
    /// (so a value containing another is replaced whole).
    pub fn from_values<'a>(values: impl IntoIterator<Item = &'a Json>) -> Self {
        let mut out = BTreeSet::new();
        for v in values {
            collect(v, &mut out);
        }
        let mut texts: Vec<String> = out.into_iter().collect();
        texts.sort_by_key(|t| std::cmp::Reverse(t.len()));
        Self(texts)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `text` contains a sensitive value.
    pub fn found_in(&self, text: &str) -> bool {
        self.0.iter().any(|s| text.contains(s.as_str()))
    }

    /// Whether any string inside `value` contains a sensitive value.
    pub fn shown_in(&self, value: &Json) -> bool {
        match value {
            Json::String(s) => self.found_in(s),
            Json::Number(n) => self.found_in(&n.to_string()),
            Json::Array(items) => items.iter().any(|v| self.shown_in(v)),
            Json::Object(m) => m.iter().any(|(k, v)| self.found_in(k) || self.shown_in(v)),
            Json::Null | Json::Bool(_) => false,
        }
    }

    /// The top-level members of `object` that show a sensitive value.
    pub fn echoed_in(&self, object: &Json) -> BTreeSet<String> {
        match object {
            Json::Object(m) if !self.is_empty() => m
                .iter()
                .filter(|(_, v)| self.shown_in(v))
                .map(|(k, _)| k.clone())
                .collect(),
            _ => BTreeSet::new(),
        }
    }

    /// `text` with every sensitive value replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.0 {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), REDACTED);
            }
        }
        out
    }
}

fn collect(v: &Json, out: &mut BTreeSet<String>) {
    match v {
        Json::String(s) if s.chars().count() >= MIN_ECHO_LEN => {
            out.insert(s.clone());
        }
        Json::Number(n) if n.to_string().len() >= MIN_ECHO_LEN => {
            out.insert(n.to_string());
        }
        Json::Array(items) => items.iter().for_each(|i| collect(i, out)),
        Json::Object(m) => m.values().for_each(|i| collect(i, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_echo_anywhere_in_an_attribute_is_found() {
        let s = Secrets::from_values([&json!("hunter22"), &json!({"k": "ab"})]);
        let state = json!({
            "name": "web",
            "tags": {"pw": "hunter22"},
            "tags_all": {"pw": "hunter22", "env": "prod"},
            "arn": "arn:aws:x:::hunter22-queue",
            "short": "ab",
        });
        let echoed: Vec<String> = s.echoed_in(&state).into_iter().collect();
        assert_eq!(
            echoed,
            ["arn", "tags", "tags_all"],
            "not a value under four characters"
        );
        assert_eq!(
            s.redact("invalid tag value \"hunter22\" for pw"),
            "invalid tag value \"(sensitive)\" for pw"
        );
        assert_eq!(format!("{s:?}"), "Secrets(1 redacted)");
    }

    #[test]
    fn a_longer_value_is_replaced_whole() {
        let s = Secrets::from_values([&json!("pass"), &json!("password1")]);
        assert_eq!(
            s.redact("password1 and pass"),
            "(sensitive) and (sensitive)"
        );
    }
}

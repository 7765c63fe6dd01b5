//! Values between objects: walking a dotted path, printing a value as text, and converting a
//! value to an argument's Terraform type with Terraform's rules. Pure.

use serde_json::Value as Json;

use kraken_value::Type;
use kraken_value::kube::{from_kube_json, to_kube_json};

/// The value at a dotted path (object keys, list indices) below `doc`.
pub fn lookup<'a>(doc: &'a Json, path: &str) -> Option<&'a Json> {
    let mut at = doc;
    for seg in path.split('.') {
        at = match at {
            Json::Object(m) => m.get(seg)?,
            Json::Array(items) => items.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

/// Text of a value for a template or a ConfigMap: strings as they are, other scalars as
/// Terraform prints them, structures as JSON.
pub fn to_text(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        Json::Null => String::new(),
        Json::Bool(_) | Json::Number(_) => v.to_string(),
        _ => v.to_string(),
    }
}

/// Converts `value` to the Terraform type `ty` (Terraform's JSON type description; none or
/// `"dynamic"` takes the value as it is) with Terraform's rules: numbers and bools to
/// strings, numeric and `true`/`false` strings back. Text read from a ConfigMap, Secret or
/// template is parsed as JSON when the type is a collection or object. A sensitive value is
/// not quoted in the error.
pub fn convert(value: &Json, ty: Option<&Json>, sensitive: bool) -> Result<Json, String> {
    let Some(ty_json) = ty else {
        return Ok(value.clone());
    };
    let ty = Type::from_json(ty_json).map_err(|e| format!("invalid type {ty_json}: {e}"))?;
    if ty == Type::Dynamic {
        return Ok(value.clone());
    }
    let parsed;
    let value = match value {
        Json::String(s) if !ty.is_primitive() => {
            parsed = serde_json::from_str::<Json>(s).unwrap_or_else(|_| value.clone());
            &parsed
        }
        _ => value,
    };
    match from_kube_json(value, &ty) {
        Ok(v) => Ok(to_kube_json(&v)),
        Err(_) if sensitive => Err(format!(
            "expected {}, got a {} (the value is sensitive and not shown)",
            type_name(&ty),
            json_kind(value)
        )),
        Err(e) => {
            let at = e.path.to_string();
            if at.is_empty() {
                Err(format!(
                    "expected {}, got {} {}",
                    type_name(&ty),
                    json_kind(value),
                    short(value)
                ))
            } else {
                Err(format!("at {at}: {}", e.message))
            }
        }
    }
}

fn type_name(ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::Number => "number".into(),
        Type::String => "string".into(),
        other => other.to_json_string(),
    }
}

/// The JSON kind of a value, as Terraform would name it.
pub fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "bool",
        Json::Number(_) => "number",
        Json::String(_) => "string",
        Json::Array(_) => "list",
        Json::Object(_) => "object",
    }
}

fn short(v: &Json) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conversion_follows_terraform() {
        let s = json!("string");
        let n = json!("number");
        assert_eq!(convert(&json!(5), Some(&s), false), Ok(json!("5")));
        assert_eq!(convert(&json!("7"), Some(&n), false), Ok(json!(7)));
        assert_eq!(
            convert(&json!("true"), Some(&json!("bool")), false),
            Ok(json!(true))
        );
        let err = convert(&json!("seven"), Some(&n), false).expect_err("must fail");
        assert!(
            err.contains("expected number") && err.contains("seven"),
            "{err}"
        );
        let hidden = convert(&json!("hunter2"), Some(&n), true).expect_err("must fail");
        assert!(!hidden.contains("hunter2"), "{hidden}");
        assert_eq!(
            convert(&json!("[1,2]"), Some(&json!(["list", "string"])), false),
            Ok(json!(["1", "2"]))
        );
        assert_eq!(convert(&json!({"a": 1}), None, false), Ok(json!({"a": 1})));
        assert_eq!(
            convert(&json!({"a": 1}), Some(&json!("dynamic")), false),
            Ok(json!({"a": 1}))
        );
    }

    #[test]
    fn lookup_walks_objects_and_lists() {
        let doc = json!({"instances": [{"privateIp": "10.0.0.1"}], "tags": {"a.b": 1}});
        assert_eq!(
            lookup(&doc, "instances.0.privateIp"),
            Some(&json!("10.0.0.1"))
        );
        assert_eq!(lookup(&doc, "instances.1"), None);
        assert_eq!(lookup(&doc, "missing"), None);
    }
}

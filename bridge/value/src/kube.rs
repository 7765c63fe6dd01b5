//! Kubernetes custom-resource JSON ↔ Terraform values.
//!
//! [`from_kube_json`] reads what a user wrote in a resource's spec (keyed by Terraform
//! attribute names for now) into a value of the schema's type, converting primitives the
//! way Terraform converts them where a user would expect it: `"5"` → 5, `5` → `"5"`,
//! `"true"` ↔ `true`; null or absent means null; an attribute the type does not have is
//! an error. Errors name the path (`rules[1].port: expected number, got "abc"`), which
//! callers anchor in the document with [`ConvertError::prefixed`].
//!
//! [`to_kube_json`] goes the other way for status output; unknowns become `null`.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use super::path::{LocateExt, Located};
use super::{AttrPath, Number, ObjectType, PathStep, Type, Value};

/// A spec value does not fit the attribute's type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConvertError {
    pub path: AttrPath,
    pub message: String,
}

impl ConvertError {
    /// Anchors the error's path under `base` (e.g. `spec.forProvider`).
    #[must_use]
    pub fn prefixed(self, base: &AttrPath) -> Self {
        Self {
            path: self.path.prefixed(base),
            message: self.message,
        }
    }
}

type Result<T> = std::result::Result<T, Located>;

/// Converts spec JSON to a value of type `ty`.
pub fn from_kube_json(json: &Json, ty: &Type) -> std::result::Result<Value, ConvertError> {
    convert(json, ty).map_err(|e| {
        let (path, message) = e.into_parts();
        ConvertError { path, message }
    })
}

/// Converts a value to plain JSON: unknowns become `null`, numbers the nearest JSON number
/// (exact for `i64`/`u64`/`f64` values; `null` for the infinities).
pub fn to_kube_json(value: &Value) -> Json {
    match value {
        Value::Null | Value::Unknown(_) => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Number(n) => number_to_json(n),
        Value::String(s) => Json::String(s.clone()),
        Value::List(items) | Value::Set(items) | Value::Tuple(items) => {
            Json::Array(items.iter().map(to_kube_json).collect())
        }
        Value::Map(items) | Value::Object(items) => Json::Object(
            items
                .iter()
                .map(|(k, v)| (k.clone(), to_kube_json(v)))
                .collect(),
        ),
        Value::Typed(_, inner) => to_kube_json(inner),
    }
}

fn number_to_json(n: &Number) -> Json {
    if let Some(i) = n.as_i64() {
        Json::from(i)
    } else if let Some(u) = n.as_u64() {
        Json::from(u)
    } else {
        serde_json::Number::from_f64(n.as_f64()).map_or(Json::Null, Json::Number)
    }
}

/// How a JSON value is shown in "got …": scalars by value, containers by kind.
fn got(json: &Json) -> String {
    match json {
        Json::Null => "null".to_owned(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => n.to_string(),
        Json::String(s) if s.chars().count() > 64 => {
            let clipped: String = s.chars().take(64).collect();
            format!("{clipped:?}…")
        }
        Json::String(s) => format!("{s:?}"),
        Json::Array(_) => "an array".to_owned(),
        Json::Object(_) => "an object".to_owned(),
    }
}

fn mismatch(json: &Json, ty: &Type) -> Located {
    Located::new(format!("expected {ty}, got {}", got(json)))
}

fn index_step(i: usize) -> PathStep {
    PathStep::Index(i64::try_from(i).unwrap_or(i64::MAX))
}

fn convert(json: &Json, ty: &Type) -> Result<Value> {
    let value = match (json, ty) {
        (Json::Null, _) => Value::Null,
        (_, Type::Dynamic) => implied(json),
        (Json::Bool(b), Type::Bool) => Value::Bool(*b),
        (Json::String(s), Type::Bool) => match s.as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(mismatch(json, ty)),
        },
        (Json::Number(n), Type::Number) => {
            Value::Number(json_number(n).ok_or_else(|| mismatch(json, ty))?)
        }
        (Json::String(s), Type::Number) => {
            Value::Number(Number::parse(s).map_err(|_| mismatch(json, ty))?)
        }
        (Json::String(s), Type::String) => Value::String(s.clone()),
        // Terraform renders a number as its full decimal text, never with an exponent.
        (Json::Number(n), Type::String) => {
            let text = json_number(n).map_or_else(|| n.to_string(), |n| n.as_str().to_owned());
            Value::String(text)
        }
        (Json::Bool(b), Type::String) => Value::String(b.to_string()),
        (Json::Array(items), Type::List(ety)) => Value::List(convert_items(items, ety)?),
        (Json::Array(items), Type::Set(ety)) => Value::Set(convert_items(items, ety)?),
        (Json::Array(items), Type::Tuple(etys)) => convert_tuple(items, etys)?,
        (Json::Object(members), Type::Map(ety)) => {
            let mut items = BTreeMap::new();
            for (key, member) in members {
                let item = convert(member, ety).at(|| PathStep::Key(key.clone()))?;
                items.insert(key.clone(), item);
            }
            Value::Map(items)
        }
        (Json::Object(members), Type::Object(oty)) => convert_object(members, oty)?,
        _ => return Err(mismatch(json, ty)),
    };
    Ok(value)
}

fn convert_tuple(items: &[Json], etys: &[Type]) -> Result<Value> {
    if items.len() != etys.len() {
        let msg = format!(
            "expected a tuple of {} elements, got {}",
            etys.len(),
            items.len()
        );
        return Err(Located::new(msg));
    }
    let items = items.iter().zip(etys).enumerate();
    let items = items.map(|(i, (j, t))| convert(j, t).at(|| index_step(i)));
    Ok(Value::Tuple(items.collect::<Result<_>>()?))
}

/// Attributes the type lacks are errors (typos must not be silently dropped); attributes
/// the spec leaves out are null.
fn convert_object(members: &serde_json::Map<String, Json>, oty: &ObjectType) -> Result<Value> {
    let mut attrs = BTreeMap::new();
    for (name, member) in members {
        let Some(aty) = oty.attributes.get(name) else {
            return Err(Located::new("unsupported attribute").at(PathStep::Attr(name.clone())));
        };
        let item = convert(member, aty).at(|| PathStep::Attr(name.clone()))?;
        attrs.insert(name.clone(), item);
    }
    for name in oty.attributes.keys() {
        attrs.entry(name.clone()).or_insert(Value::Null);
    }
    Ok(Value::Object(attrs))
}

fn convert_items(items: &[Json], ety: &Type) -> Result<Vec<Value>> {
    items
        .iter()
        .enumerate()
        .map(|(i, j)| convert(j, ety).at(|| index_step(i)))
        .collect()
}

/// A JSON number as the user wrote it: serde_json's shortest text for a float is the
/// decimal the user most plausibly typed (`0.1`, not its binary expansion), which is also
/// what Terraform would have parsed from configuration.
fn json_number(n: &serde_json::Number) -> Option<Number> {
    Number::parse(&n.to_string()).ok()
}

/// The value JSON implies at a dynamic position, as cty's JSON `ImpliedType` reads it:
/// arrays are tuples, objects are objects.
fn implied(json: &Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => json_number(n).map_or(Value::Null, Value::Number),
        Json::String(s) => Value::String(s.clone()),
        Json::Array(items) => Value::Tuple(items.iter().map(implied).collect()),
        Json::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), implied(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ty(json: &str) -> Type {
        Type::from_json_bytes(json.as_bytes()).expect("valid type json")
    }

    #[test]
    fn converts_primitives_like_terraform() {
        assert_eq!(
            from_kube_json(&json!("5"), &Type::Number),
            Ok(Value::int(5))
        );
        assert_eq!(
            from_kube_json(&json!(" 5"), &Type::Number).map_err(|e| e.message),
            Err("expected number, got \" 5\"".to_owned())
        );
        assert_eq!(
            from_kube_json(&json!(5), &Type::String),
            Ok(Value::string("5"))
        );
        assert_eq!(
            from_kube_json(&json!(1e21), &Type::String),
            Ok(Value::string("1000000000000000000000"))
        );
        assert_eq!(
            from_kube_json(&json!(0.1), &Type::Number),
            Ok(Value::Number(Number::parse("0.1").expect("valid")))
        );
        assert_eq!(
            from_kube_json(&json!(true), &Type::String),
            Ok(Value::string("true"))
        );
        assert_eq!(
            from_kube_json(&json!("false"), &Type::Bool),
            Ok(Value::Bool(false))
        );
        assert!(from_kube_json(&json!("yes"), &Type::Bool).is_err());
        assert!(from_kube_json(&json!(1), &Type::Bool).is_err());
        assert_eq!(
            from_kube_json(&json!(null), &Type::list(Type::String)),
            Ok(Value::Null)
        );
    }

    #[test]
    fn converts_structures_and_fills_absent_attributes() {
        let t = ty(
            r#"["object",{"name":"string","ports":["list","number"],"tags":["map","string"],"x":"bool"}]"#,
        );
        let got = from_kube_json(
            &json!({"name": "web", "ports": [80, "443"], "tags": {"env": "prod"}}),
            &t,
        );
        let want = Value::object([
            ("name", Value::string("web")),
            ("ports", Value::List(vec![Value::int(80), Value::int(443)])),
            (
                "tags",
                Value::Map([("env".to_owned(), Value::string("prod"))].into()),
            ),
            ("x", Value::Null),
        ]);
        assert_eq!(got, Ok(want));
    }

    #[test]
    fn dynamic_positions_take_the_json_shape() {
        let got = from_kube_json(&json!({"a": [1, "x", null]}), &Type::Dynamic).expect("converts");
        let want = Value::object([(
            "a",
            Value::Tuple(vec![Value::int(1), Value::string("x"), Value::Null]),
        )]);
        assert_eq!(got, want);
    }

    #[test]
    fn errors_name_the_attribute_path() {
        let t = ty(
            r#"["object",{"rules":["list",["object",{"port":"number"}]],"tags":["map","number"]}]"#,
        );
        let base = AttrPath::root().attr("spec").attr("forProvider");
        let err = from_kube_json(&json!({"rules": [{"port": 1}, {"port": "abc"}]}), &t)
            .expect_err("bad port");
        assert_eq!(
            err.clone().prefixed(&base).to_string(),
            "spec.forProvider.rules[1].port: expected number, got \"abc\""
        );
        assert_eq!(
            err.to_string(),
            "rules[1].port: expected number, got \"abc\""
        );
        let err = from_kube_json(&json!({"rules": [{"prot": 1}]}), &t).expect_err("typo");
        assert_eq!(err.to_string(), "rules[0].prot: unsupported attribute");
        let err =
            from_kube_json(&json!({"tags": {"a.b": true}}), &t).expect_err("bool in map of number");
        assert_eq!(err.to_string(), "tags[\"a.b\"]: expected number, got true");
        let err = from_kube_json(&json!({"rules": {"port": 1}}), &t).expect_err("object for list");
        assert_eq!(
            err.to_string(),
            "rules: expected list of object, got an object"
        );
        let err = from_kube_json(&json!([1]), &Type::Tuple(vec![])).expect_err("tuple length");
        assert_eq!(
            err.to_string(),
            "(root): expected a tuple of 0 elements, got 1"
        );
    }

    #[test]
    fn to_kube_json_flattens_values() {
        let v = Value::object([
            ("u", Value::unknown()),
            ("n", Value::Number(Number::from_f64(0.1).expect("finite"))),
            ("big", Value::Number(Number::from_u64(u64::MAX))),
            (
                "s",
                Value::Set(vec![Value::Typed(Type::String, Box::new(Value::Null))]),
            ),
        ]);
        assert_eq!(
            to_kube_json(&v),
            json!({"u": null, "n": 0.1, "big": u64::MAX, "s": [null]})
        );
        assert_eq!(
            to_kube_json(&Value::Number(Number::infinity(true))),
            Json::Null
        );
    }
}

//! cty's JSON value encoding: what `RawState.json` holds and how state is persisted.
//!
//! Objects are JSON objects with every attribute of the type (absent ones `null`), lists,
//! sets and tuples are arrays, maps are objects. A value at a dynamic position is
//! `{"value": …, "type": <type JSON>}` unless it is null. Unknown values cannot be
//! represented (an error), nor can infinite numbers.
//!
//! Numbers keep full precision through [`encode_json_bytes`] / [`decode_json_bytes`],
//! which read and write the JSON text themselves (see `json_text` for why). The
//! `serde_json::Value` variants are conveniences: serde_json holds only `i64`, `u64` and
//! `f64`, so a number beyond those is rounded on the way out, and a float coming in
//! is taken at its exact binary value.
//!
//! Decoding is as lenient as cty's: a string is accepted for a number or bool and a
//! number or bool for a string, converted as Terraform converts them.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use super::json_text::{self, JsonNode};
use super::path::{LocateExt, Located};
use super::{AttrPath, Number, ObjectType, PathStep, Type, Value};

/// A value could not be converted to or from JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at {path}: {message}")]
pub struct JsonError {
    pub path: AttrPath,
    pub message: String,
}

impl From<Located> for JsonError {
    fn from(located: Located) -> Self {
        let (path, message) = located.into_parts();
        Self { path, message }
    }
}

type Result<T> = std::result::Result<T, Located>;

/// Encodes `value` of type `ty` as a `serde_json::Value` (numbers beyond `f64` are rounded;
/// use [`encode_json_bytes`] to keep them exact).
pub fn encode_json(value: &Value, ty: &Type) -> std::result::Result<Json, JsonError> {
    Ok(encode_node(value, ty)?.to_serde())
}

/// Encodes `value` of type `ty` as compact JSON text, numbers exact.
pub fn encode_json_bytes(value: &Value, ty: &Type) -> std::result::Result<Vec<u8>, JsonError> {
    let mut out = String::new();
    encode_node(value, ty)?.write(&mut out);
    Ok(out.into_bytes())
}

/// Decodes a `serde_json::Value` as a value of type `ty`.
pub fn decode_json(json: &Json, ty: &Type) -> std::result::Result<Value, JsonError> {
    Ok(decode_node(&JsonNode::from_serde(json), ty)?)
}

/// Decodes JSON text as a value of type `ty`, numbers exact.
pub fn decode_json_bytes(bytes: &[u8], ty: &Type) -> std::result::Result<Value, JsonError> {
    let node = json_text::parse(bytes).map_err(Located::new)?;
    Ok(decode_node(&node, ty)?)
}

fn index_step(i: usize) -> PathStep {
    PathStep::Index(i64::try_from(i).unwrap_or(i64::MAX))
}

fn encode_node(value: &Value, ty: &Type) -> Result<JsonNode> {
    if *ty == Type::Dynamic {
        return match value {
            Value::Null => Ok(JsonNode::Null),
            Value::Unknown(_) => Err(Located::new("value is not known")),
            Value::Typed(t, inner) => encode_dynamic(inner, t),
            _ => {
                let t = value.implied_type().ok_or_else(|| {
                    Located::new(
                        "cannot infer a type for dynamic value: elements have different types",
                    )
                })?;
                encode_dynamic(value, &t)
            }
        };
    }
    let node = match (value, ty) {
        (Value::Typed(_, inner), _) => encode_node(inner, ty)?,
        (Value::Null, _) => JsonNode::Null,
        (Value::Unknown(_), _) => return Err(Located::new("value is not known")),
        (Value::Bool(b), Type::Bool) => JsonNode::Bool(*b),
        (Value::Number(n), Type::Number) if n.is_infinite() => {
            return Err(Located::new(
                "infinite numbers cannot be represented in json",
            ));
        }
        (Value::Number(n), Type::Number) => JsonNode::Number(n.as_str().to_owned()),
        (Value::String(s), Type::String) => JsonNode::String(s.clone()),
        (Value::List(items), Type::List(ety)) | (Value::Set(items), Type::Set(ety)) => {
            let items = items
                .iter()
                .enumerate()
                .map(|(i, v)| encode_node(v, ety).at(|| index_step(i)));
            JsonNode::Array(items.collect::<Result<_>>()?)
        }
        (Value::Tuple(items), Type::Tuple(etys)) if items.len() == etys.len() => {
            let items = items.iter().zip(etys).enumerate();
            JsonNode::Array(
                items
                    .map(|(i, (v, t))| encode_node(v, t).at(|| index_step(i)))
                    .collect::<Result<_>>()?,
            )
        }
        (Value::Map(items), Type::Map(ety)) => {
            let members = items.iter().map(|(k, v)| {
                Ok((
                    k.clone(),
                    encode_node(v, ety).at(|| PathStep::Key(k.clone()))?,
                ))
            });
            JsonNode::Object(members.collect::<Result<_>>()?)
        }
        (Value::Object(attrs), Type::Object(oty)) => {
            if let Some(extra) = attrs.keys().find(|k| !oty.attributes.contains_key(*k)) {
                return Err(Located::new("unsupported attribute").at(PathStep::Attr(extra.clone())));
            }
            let members = oty.attributes.iter().map(|(name, aty)| {
                let node = match attrs.get(name) {
                    Some(v) => encode_node(v, aty).at(|| PathStep::Attr(name.clone()))?,
                    None => JsonNode::Null,
                };
                Ok((name.clone(), node))
            });
            JsonNode::Object(members.collect::<Result<_>>()?)
        }
        _ => {
            return Err(Located::new(format!(
                "expected {ty}, found {}",
                value.kind_name()
            )));
        }
    };
    Ok(node)
}

/// cty writes `"value"` first, then `"type"`.
fn encode_dynamic(value: &Value, ty: &Type) -> Result<JsonNode> {
    Ok(JsonNode::Object(vec![
        ("value".to_owned(), encode_node(value, ty)?),
        ("type".to_owned(), JsonNode::from_serde(&ty.to_json())),
    ]))
}

fn found(node: &JsonNode) -> &'static str {
    match node {
        JsonNode::Null => "null",
        JsonNode::Bool(_) => "bool",
        JsonNode::Number(_) | JsonNode::Float(_) => "number",
        JsonNode::String(_) => "string",
        JsonNode::Array(_) => "array",
        JsonNode::Object(_) => "object",
    }
}

fn decode_node(node: &JsonNode, ty: &Type) -> Result<Value> {
    let mismatch = || Located::new(format!("expected {ty}, found {}", found(node)));
    let value = match (node, ty) {
        (JsonNode::Null, _) => Value::Null,
        (_, Type::Dynamic) => decode_dynamic(node)?,
        (JsonNode::Bool(b), Type::Bool) => Value::Bool(*b),
        (JsonNode::String(s), Type::Bool) => match s.as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(Located::new(format!("expected bool, found string {s:?}"))),
        },
        (JsonNode::Number(text) | JsonNode::String(text), Type::Number) => Value::Number(
            Number::parse(text).map_err(|e| Located::new(format!("expected number: {e}")))?,
        ),
        (JsonNode::Float(f), Type::Number) => Value::Number(
            Number::from_f64(*f).ok_or_else(|| Located::new("expected number, found NaN"))?,
        ),
        (JsonNode::Float(f), Type::String) => Value::String(f.to_string()),
        (JsonNode::String(s), Type::String) => Value::String(s.clone()),
        // cty keeps a JSON number's own text when a string is wanted.
        (JsonNode::Number(text), Type::String) => Value::String(text.clone()),
        (JsonNode::Bool(b), Type::String) => Value::String(b.to_string()),
        (JsonNode::Array(items), Type::List(ety)) => Value::List(decode_items(items, ety)?),
        (JsonNode::Array(items), Type::Set(ety)) => Value::Set(decode_items(items, ety)?),
        (JsonNode::Array(items), Type::Tuple(etys)) => decode_tuple(items, etys)?,
        (JsonNode::Object(members), Type::Map(ety)) => {
            let mut items = BTreeMap::new();
            for (key, member) in members {
                let item = decode_node(member, ety).at(|| PathStep::Key(key.clone()))?;
                items.insert(key.clone(), item);
            }
            Value::Map(items)
        }
        (JsonNode::Object(members), Type::Object(oty)) => decode_object(members, oty)?,
        _ => return Err(mismatch()),
    };
    Ok(value)
}

fn decode_tuple(items: &[JsonNode], etys: &[Type]) -> Result<Value> {
    if items.len() != etys.len() {
        let msg = format!(
            "expected tuple of {} elements, found {}",
            etys.len(),
            items.len()
        );
        return Err(Located::new(msg));
    }
    let items = items.iter().zip(etys).enumerate();
    let items = items.map(|(i, (n, t))| decode_node(n, t).at(|| index_step(i)));
    Ok(Value::Tuple(items.collect::<Result<_>>()?))
}

/// Attributes the type lacks are errors; attributes the JSON lacks are null.
fn decode_object(members: &[(String, JsonNode)], oty: &ObjectType) -> Result<Value> {
    let mut attrs = BTreeMap::new();
    for (name, member) in members {
        let Some(aty) = oty.attributes.get(name) else {
            return Err(Located::new("unsupported attribute").at(PathStep::Attr(name.clone())));
        };
        let item = decode_node(member, aty).at(|| PathStep::Attr(name.clone()))?;
        attrs.insert(name.clone(), item);
    }
    for name in oty.attributes.keys() {
        attrs.entry(name.clone()).or_insert(Value::Null);
    }
    Ok(Value::Object(attrs))
}

fn decode_items(items: &[JsonNode], ety: &Type) -> Result<Vec<Value>> {
    items
        .iter()
        .enumerate()
        .map(|(i, n)| decode_node(n, ety).at(|| index_step(i)))
        .collect()
}

/// `{"value": …, "type": …}` in either order.
fn decode_dynamic(node: &JsonNode) -> Result<Value> {
    let JsonNode::Object(members) = node else {
        return Err(Located::new(format!(
            "expected an object with \"value\" and \"type\" for a dynamic value, found {}",
            found(node)
        )));
    };
    let (mut value, mut ty) = (None, None);
    for (key, member) in members {
        match key.as_str() {
            "value" => value = Some(member),
            "type" => {
                let parsed = Type::from_json(&member.to_serde())
                    .map_err(|e| Located::new(format!("dynamic value: {e}")))?;
                ty = Some(parsed);
            }
            other => {
                return Err(Located::new(format!(
                    "invalid key {other:?} in dynamic value"
                )));
            }
        }
    }
    let ty = ty.ok_or_else(|| Located::new("dynamic value has no \"type\""))?;
    let value = value.ok_or_else(|| Located::new("dynamic value has no \"value\""))?;
    Ok(decode_node(value, &ty)?.with_dynamic_type(ty))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(json: &str) -> Type {
        Type::from_json_bytes(json.as_bytes()).expect("valid type json")
    }

    #[test]
    fn golden_object_with_dynamic_and_precise_numbers() {
        let t = ty(r#"["object",{"d":"dynamic","n":"number","s":["set","string"],"z":"bool"}]"#);
        let v = Value::object([
            ("d", Value::Typed(Type::String, Box::new(Value::Null))),
            (
                "n",
                Value::Number(Number::parse("123456789012345678901234567890.5").expect("valid")),
            ),
            ("s", Value::Set(vec![Value::string("a")])),
            ("z", Value::Null),
        ]);
        let text = r#"{"d":{"value":null,"type":"string"},"n":123456789012345678901234567890.5,"s":["a"],"z":null}"#;
        let bytes = encode_json_bytes(&v, &t).expect("encodes");
        assert_eq!(String::from_utf8_lossy(&bytes), text);
        assert_eq!(decode_json_bytes(text.as_bytes(), &t).expect("decodes"), v);
    }

    #[test]
    fn dynamic_values_decode_in_either_key_order() {
        let text = br#"{"type":["object",{"a":"number"}],"value":{"a":1}}"#;
        let v = decode_json_bytes(text, &Type::Dynamic).expect("decodes");
        assert_eq!(v, Value::object([("a", Value::int(1))]));
        let back = encode_json_bytes(&v, &Type::Dynamic).expect("encodes");
        assert_eq!(
            back,
            br#"{"value":{"a":1},"type":["object",{"a":"number"}]}"#
        );
    }

    #[test]
    fn serde_variants_round_trip_ordinary_values() {
        let t = ty(
            r#"["object",{"f":"number","i":"number","m":["map","string"],"t":["tuple",["bool"]]}]"#,
        );
        let v = Value::object([
            ("f", Value::Number(Number::from_f64(0.1).expect("finite"))),
            ("i", Value::int(-7)),
            (
                "m",
                Value::Map([("k".to_owned(), Value::string("v"))].into()),
            ),
            ("t", Value::Tuple(vec![Value::Bool(true)])),
        ]);
        let json = encode_json(&v, &t).expect("encodes");
        assert_eq!(
            json,
            serde_json::json!({"f": 0.1, "i": -7, "m": {"k": "v"}, "t": [true]})
        );
        assert_eq!(decode_json(&json, &t).expect("decodes"), v);
        // A serde float wanted as a string reads as its shortest decimal.
        let s = decode_json(&serde_json::json!(0.1), &Type::String).expect("decodes");
        assert_eq!(s, Value::string("0.1"));
    }

    #[test]
    fn lenient_primitive_decoding_like_cty() {
        assert_eq!(
            decode_json_bytes(br#""5""#, &Type::Number).expect("ok"),
            Value::int(5)
        );
        assert_eq!(
            decode_json_bytes(b"1.50", &Type::String).expect("ok"),
            Value::string("1.50")
        );
        assert_eq!(
            decode_json_bytes(br#""true""#, &Type::Bool).expect("ok"),
            Value::Bool(true)
        );
        assert_eq!(
            decode_json_bytes(b"false", &Type::String).expect("ok"),
            Value::string("false")
        );
        let obj = decode_json_bytes(b"{}", &ty(r#"["object",{"a":"string"}]"#)).expect("ok");
        assert_eq!(obj, Value::object([("a", Value::Null)]));
    }

    #[test]
    fn errors_name_the_path() {
        let t = ty(r#"["object",{"rules":["list",["object",{"port":"number"}]]}]"#);
        let err =
            decode_json_bytes(br#"{"rules":[{"port":1},{"port":"x"}]}"#, &t).expect_err("bad port");
        assert_eq!(
            err.to_string(),
            "at rules[1].port: expected number: invalid number syntax \"x\""
        );
        let err = decode_json_bytes(br#"{"rulez":[]}"#, &t).expect_err("bad attr");
        assert_eq!(err.to_string(), "at rulez: unsupported attribute");
        let unknown = Value::object([("rules", Value::List(vec![Value::unknown()]))]);
        let err = encode_json_bytes(&unknown, &t).expect_err("unknown");
        assert_eq!(err.to_string(), "at rules[0]: value is not known");
        let inf = Value::Number(Number::infinity(true));
        assert!(encode_json_bytes(&inf, &Type::Number).is_err());
        assert!(decode_json_bytes(br#"{"value":1}"#, &Type::Dynamic).is_err());
        assert!(decode_json_bytes(b"[1,", &Type::list(Type::Number)).is_err());
    }
}

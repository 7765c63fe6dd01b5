//! Terraform (cty) types and their JSON encoding.
//!
//! This lives in codegen, the lowest crate that needs it (schemas carry these types), and the
//! bridge re-exports it as `kraken_bridge::value::Type`.
//!
//! Provider schemas describe attribute types as JSON (`"string"`, `["list","number"]`,
//! `["object",{"a":"bool"},["a"]]` …), and dynamically-typed values carry the same JSON
//! next to the value on the wire. [`Type::from_json`] and [`Type::to_json`] implement that
//! encoding exactly; [`fmt::Display`] gives cty's friendly names for messages.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};

use serde_json::Value as Json;

/// A Terraform type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Type {
    Bool,
    Number,
    String,
    /// cty's `DynamicPseudoType`: any type, decided by the value (which then carries its
    /// concrete type on the wire).
    Dynamic,
    List(Box<Type>),
    Set(Box<Type>),
    Map(Box<Type>),
    Object(ObjectType),
    Tuple(Vec<Type>),
}

/// The attributes of an object type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ObjectType {
    /// Attribute types by name.
    pub attributes: BTreeMap<String, Type>,
    /// Names of attributes that are optional in a type *constraint*. Only meaningful to
    /// type conversion; every attribute is still present (possibly null) in a value.
    pub optional: BTreeSet<String>,
}

impl ObjectType {
    /// An object type with the given attributes and none optional.
    pub fn new(attributes: impl IntoIterator<Item = (String, Type)>) -> Self {
        Self {
            attributes: attributes.into_iter().collect(),
            optional: BTreeSet::new(),
        }
    }
}

/// Why a JSON type description was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TypeError {
    #[error("type description is not valid json: {0}")]
    Json(String),
    #[error("invalid type description: {0}")]
    Invalid(String),
}

fn invalid(message: impl Into<String>) -> TypeError {
    TypeError::Invalid(message.into())
}

impl Type {
    /// `list(element)`.
    pub fn list(element: Type) -> Self {
        Self::List(Box::new(element))
    }

    /// `set(element)`.
    pub fn set(element: Type) -> Self {
        Self::Set(Box::new(element))
    }

    /// `map(element)`.
    pub fn map(element: Type) -> Self {
        Self::Map(Box::new(element))
    }

    /// `object({...})` with no optional attributes.
    pub fn object<K: Into<String>>(attributes: impl IntoIterator<Item = (K, Type)>) -> Self {
        Self::Object(ObjectType::new(
            attributes.into_iter().map(|(k, t)| (k.into(), t)),
        ))
    }

    /// Whether this is bool, number or string.
    pub fn is_primitive(&self) -> bool {
        matches!(self, Self::Bool | Self::Number | Self::String)
    }

    /// Whether this is a list, set or map (the types length refinements apply to).
    pub fn is_collection(&self) -> bool {
        matches!(self, Self::List(_) | Self::Set(_) | Self::Map(_))
    }

    /// The element type of a list, set or map.
    pub fn element_type(&self) -> Option<&Type> {
        match self {
            Self::List(e) | Self::Set(e) | Self::Map(e) => Some(e),
            _ => None,
        }
    }

    /// Parses the JSON bytes of a type description.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<Self, TypeError> {
        let json: Json =
            serde_json::from_slice(bytes).map_err(|e| TypeError::Json(e.to_string()))?;
        Self::from_json(&json)
    }

    /// Parses a type description.
    pub fn from_json(json: &Json) -> Result<Self, TypeError> {
        match json {
            Json::String(name) => match name.as_str() {
                "bool" => Ok(Self::Bool),
                "number" => Ok(Self::Number),
                "string" => Ok(Self::String),
                "dynamic" => Ok(Self::Dynamic),
                other => Err(invalid(format!("unknown primitive type {other:?}"))),
            },
            Json::Array(items) => Self::complex_from_json(items),
            _ => Err(invalid("expected a string or an array")),
        }
    }

    fn complex_from_json(items: &[Json]) -> Result<Self, TypeError> {
        let Some(Json::String(kind)) = items.first() else {
            return Err(invalid("complex type must start with its kind name"));
        };
        let arity_ok = match kind.as_str() {
            "object" => items.len() == 2 || items.len() == 3,
            _ => items.len() == 2,
        };
        if !arity_ok {
            return Err(invalid(format!("wrong number of elements for {kind:?}")));
        }
        let arg = &items[1];
        match kind.as_str() {
            "list" => Ok(Self::list(Self::from_json(arg)?)),
            "set" => Ok(Self::set(Self::from_json(arg)?)),
            "map" => Ok(Self::map(Self::from_json(arg)?)),
            "tuple" => {
                let Json::Array(elems) = arg else {
                    return Err(invalid("tuple element types must be an array"));
                };
                Ok(Self::Tuple(
                    elems
                        .iter()
                        .map(Self::from_json)
                        .collect::<Result<_, _>>()?,
                ))
            }
            "object" => object_from_json(arg, items.get(2)),
            other => Err(invalid(format!("unknown complex type kind {other:?}"))),
        }
    }

    /// The JSON type description (as found in provider schemas).
    pub fn to_json(&self) -> Json {
        let complex = |kind: &str, arg: Json| Json::Array(vec![Json::String(kind.to_owned()), arg]);
        match self {
            Self::Bool => Json::String("bool".to_owned()),
            Self::Number => Json::String("number".to_owned()),
            Self::String => Json::String("string".to_owned()),
            Self::Dynamic => Json::String("dynamic".to_owned()),
            Self::List(e) => complex("list", e.to_json()),
            Self::Set(e) => complex("set", e.to_json()),
            Self::Map(e) => complex("map", e.to_json()),
            Self::Tuple(elems) => complex(
                "tuple",
                Json::Array(elems.iter().map(Self::to_json).collect()),
            ),
            Self::Object(obj) => {
                let attrs = obj
                    .attributes
                    .iter()
                    .map(|(k, t)| (k.clone(), t.to_json()))
                    .collect();
                let mut items = vec![Json::String("object".to_owned()), Json::Object(attrs)];
                if !obj.optional.is_empty() {
                    items.push(Json::Array(
                        obj.optional.iter().cloned().map(Json::String).collect(),
                    ));
                }
                Json::Array(items)
            }
        }
    }

    /// The compact JSON text of the type description, attributes in sorted order (the
    /// bytes cty writes). Written directly so the output never depends on serde_json's
    /// map-ordering feature flags.
    pub fn to_json_string(&self) -> String {
        let mut out = String::with_capacity(16);
        self.write_json(&mut out);
        out
    }

    /// Appends the compact JSON text of the type description to `out`.
    pub fn write_json(&self, out: &mut String) {
        match self {
            Self::Bool => out.push_str("\"bool\""),
            Self::Number => out.push_str("\"number\""),
            Self::String => out.push_str("\"string\""),
            Self::Dynamic => out.push_str("\"dynamic\""),
            Self::List(e) | Self::Set(e) | Self::Map(e) => {
                let kind = match self {
                    Self::List(_) => "[\"list\",",
                    Self::Set(_) => "[\"set\",",
                    _ => "[\"map\",",
                };
                out.push_str(kind);
                e.write_json(out);
                out.push(']');
            }
            Self::Tuple(elems) => {
                out.push_str("[\"tuple\",[");
                for (i, e) in elems.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    e.write_json(out);
                }
                out.push_str("]]");
            }
            Self::Object(obj) => write_object_json(obj, out),
        }
    }
}

fn object_from_json(attrs: &Json, optional: Option<&Json>) -> Result<Type, TypeError> {
    let Json::Object(attrs) = attrs else {
        return Err(invalid("object attribute types must be a json object"));
    };
    let attributes = attrs
        .iter()
        .map(|(k, t)| Ok((k.clone(), Type::from_json(t)?)))
        .collect::<Result<BTreeMap<_, _>, TypeError>>()?;
    let mut opt = BTreeSet::new();
    if let Some(names) = optional {
        let Json::Array(names) = names else {
            return Err(invalid("optional attribute names must be an array"));
        };
        for name in names {
            let Json::String(name) = name else {
                return Err(invalid("optional attribute names must be strings"));
            };
            if !attributes.contains_key(name) {
                return Err(invalid(format!(
                    "optional attribute {name:?} is not an attribute"
                )));
            }
            opt.insert(name.clone());
        }
    }
    Ok(Type::Object(ObjectType {
        attributes,
        optional: opt,
    }))
}

fn write_object_json(obj: &ObjectType, out: &mut String) {
    out.push_str("[\"object\",{");
    for (i, (name, ty)) in obj.attributes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_json_string(name, out);
        out.push(':');
        ty.write_json(out);
    }
    out.push('}');
    if !obj.optional.is_empty() {
        out.push_str(",[");
        for (i, name) in obj.optional.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_json_string(name, out);
        }
        out.push(']');
    }
    out.push(']');
}

/// Appends `s` as a JSON string literal.
pub fn write_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl fmt::Display for Type {
    /// cty's friendly type names: `string`, `list of number`, `object`, `tuple`, ….
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bool => f.write_str("bool"),
            Self::Number => f.write_str("number"),
            Self::String => f.write_str("string"),
            Self::Dynamic => f.write_str("dynamic"),
            Self::List(e) => write!(f, "list of {e}"),
            Self::Set(e) => write!(f, "set of {e}"),
            Self::Map(e) => write!(f, "map of {e}"),
            Self::Object(_) => f.write_str("object"),
            Self::Tuple(_) => f.write_str("tuple"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUND_TRIPS: &[&str] = &[
        r#""string""#,
        r#""number""#,
        r#""bool""#,
        r#""dynamic""#,
        r#"["list","string"]"#,
        r#"["set","number"]"#,
        r#"["map","bool"]"#,
        r#"["list",["set",["map","dynamic"]]]"#,
        r#"["object",{}]"#,
        r#"["object",{"a":"string","b":["list","number"]}]"#,
        r#"["object",{"a":"string","b":"number"},["a","b"]]"#,
        r#"["tuple",[]]"#,
        r#"["tuple",["string",["object",{"x":"bool"}]]]"#,
        r#"["object",{"a\"b":"string"}]"#,
    ];

    #[test]
    fn parse_print_round_trip_is_exact() {
        for text in ROUND_TRIPS {
            let ty = Type::from_json_bytes(text.as_bytes()).expect("valid type");
            assert_eq!(ty.to_json_string(), *text);
            let json: Json = serde_json::from_str(text).expect("json");
            assert_eq!(ty.to_json(), json);
            assert_eq!(Type::from_json(&ty.to_json()).expect("reparse"), ty);
        }
    }

    #[test]
    fn parse_reads_structure() {
        let ty = Type::from_json_bytes(br#"["object",{"a":"string","b":"number"},["b"]]"#)
            .expect("valid");
        let Type::Object(obj) = ty else {
            panic!("not an object")
        };
        assert_eq!(obj.attributes.get("a"), Some(&Type::String));
        assert!(obj.optional.contains("b"));
        assert!(!obj.optional.contains("a"));
    }

    #[test]
    fn parse_rejects_malformed_descriptions() {
        let bad = [
            r#""str""#,
            r#"5"#,
            r#"[]"#,
            r#"["list"]"#,
            r#"["list","string","x"]"#,
            r#"["vector","string"]"#,
            r#"["object",["a"]]"#,
            r#"["object",{"a":"string"},["b"]]"#,
            r#"["object",{"a":"string"},[1]]"#,
            r#"["tuple","string"]"#,
            r#"["list","string""#,
        ];
        for text in bad {
            assert!(Type::from_json_bytes(text.as_bytes()).is_err(), "{text}");
        }
    }

    #[test]
    fn display_uses_friendly_names() {
        assert_eq!(Type::list(Type::String).to_string(), "list of string");
        assert_eq!(
            Type::map(Type::set(Type::Number)).to_string(),
            "map of set of number"
        );
        assert_eq!(Type::object([("a", Type::Bool)]).to_string(), "object");
        assert_eq!(Type::Tuple(vec![]).to_string(), "tuple");
        assert_eq!(Type::Dynamic.to_string(), "dynamic");
    }
}

//! Resource identity (protocol 5.9 / 6.9): a provider may declare, per managed resource type, a
//! small versioned object that names an instance — hashicorp/aws's `{account_id, region, id}`
//! for most types — and import by it instead of by an id string whose format each type
//! defines for itself. [`IdentitySchema`] is that declaration; [`ImportBy`] is what an import
//! names.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value as Json};

use kraken_value::{ObjectType, Type, Value};

/// One attribute of an identity.
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityAttribute {
    pub name: String,
    pub ty: Type,
    /// An import by identity must give it.
    pub required_for_import: bool,
}

/// A resource type's identity: its attributes, and the version they were written with.
#[derive(Debug, Clone, PartialEq)]
pub struct IdentitySchema {
    pub version: i64,
    pub attributes: Vec<IdentityAttribute>,
}

/// The identity schemas a provider declares, by resource type (none: it declares none, or
/// speaks a protocol before identities).
pub type IdentitySchemas = BTreeMap<String, IdentitySchema>;

impl IdentitySchema {
    /// The object type identity values have.
    pub fn ty(&self) -> Type {
        Type::Object(ObjectType {
            attributes: self
                .attributes
                .iter()
                .map(|a| (a.name.clone(), a.ty.clone()))
                .collect(),
            optional: Default::default(),
        })
    }

    /// The identity `given` names, as a value of [`IdentitySchema::ty`]: attributes it leaves
    /// out are null (the provider fills in the optional ones). Refused, with the reason: an
    /// attribute the identity does not have, a required one missing, a value of the wrong type.
    pub fn value_of(&self, given: &Map<String, Json>) -> Result<Value, String> {
        let names: Vec<&str> = self.attributes.iter().map(|a| a.name.as_str()).collect();
        if let Some(unknown) = given.keys().find(|k| !names.contains(&k.as_str())) {
            return Err(format!(
                "the identity has no attribute {unknown:?}; it has {}",
                names.join(", ")
            ));
        }
        let mut attrs = Vec::with_capacity(self.attributes.len());
        for a in &self.attributes {
            let value = match given.get(&a.name) {
                None | Some(Json::Null) if a.required_for_import => {
                    return Err(format!("the identity's {:?} is required", a.name));
                }
                None | Some(Json::Null) => Value::Null,
                Some(v) => kraken_value::json::decode_json(v, &a.ty)
                    .map_err(|e| format!("the identity's {:?}: {e}", a.name))?,
            };
            attrs.push((a.name.clone(), value));
        }
        Ok(Value::object(attrs))
    }

    /// The identity of an object from its state's attributes of the same names, when the state
    /// has every attribute an import requires; the others it has are kept too.
    pub fn from_state(&self, state: &Json) -> Option<Map<String, Json>> {
        let mut out = Map::new();
        for a in &self.attributes {
            match state.get(&a.name) {
                Some(v) if !v.is_null() && v != "" => {
                    out.insert(a.name.clone(), v.clone());
                }
                _ if a.required_for_import => return None,
                _ => {}
            }
        }
        (!out.is_empty()).then_some(out)
    }
}

/// What an import names: the type's import id, or the object's resource identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportBy {
    Id(String),
    Identity(Map<String, Json>),
}

impl fmt::Display for ImportBy {
    /// `"vpc-1"`, or `identity {id="vpc-1", region="us-east-1"}` (JSON values).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImportBy::Id(id) => write!(f, "{id:?}"),
            ImportBy::Identity(attrs) => {
                let parts: Vec<String> = attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "identity {{{}}}", parts.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn aws_like() -> IdentitySchema {
        let attr = |name: &str, required| IdentityAttribute {
            name: name.into(),
            ty: Type::String,
            required_for_import: required,
        };
        IdentitySchema {
            version: 0,
            attributes: vec![
                attr("account_id", false),
                attr("id", true),
                attr("region", false),
            ],
        }
    }

    fn map(j: Json) -> Map<String, Json> {
        j.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn an_identity_fills_what_it_leaves_out_with_null() {
        let v = aws_like()
            .value_of(&map(json!({"id": "vpc-1"})))
            .expect("valid");
        assert_eq!(v.get("id"), Some(&Value::string("vpc-1")));
        assert_eq!(v.get("region"), Some(&Value::Null));
        assert_eq!(v.get("account_id"), Some(&Value::Null));
    }

    #[test]
    fn a_bad_identity_is_refused_with_the_reason() {
        let s = aws_like();
        let err = s
            .value_of(&map(json!({"region": "eu-west-1"})))
            .expect_err("no id");
        assert!(err.contains("\"id\" is required"), "{err}");
        let err = s
            .value_of(&map(json!({"id": "x", "vpc": "y"})))
            .expect_err("unknown");
        assert!(err.contains("no attribute \"vpc\"") && err.contains("account_id, id, region"));
        let err = s.value_of(&map(json!({"id": ["x"]}))).expect_err("a list");
        assert!(err.contains("\"id\""), "{err}");
    }

    #[test]
    fn the_identity_of_a_state_takes_the_attributes_of_the_same_names() {
        let s = aws_like();
        let state = json!({"id": "vpc-1", "region": "us-east-1", "cidr_block": "10.0.0.0/16"});
        assert_eq!(
            s.from_state(&state),
            Some(map(json!({"id": "vpc-1", "region": "us-east-1"})))
        );
        assert_eq!(s.from_state(&json!({"region": "us-east-1"})), None, "no id");
        assert_eq!(s.from_state(&json!({"id": ""})), None, "an empty id");
    }

    #[test]
    fn an_import_names_itself_in_messages() {
        assert_eq!(ImportBy::Id("vpc-1".into()).to_string(), "\"vpc-1\"");
        let by = ImportBy::Identity(map(json!({"id": "vpc-1", "region": "r"})));
        assert_eq!(by.to_string(), "identity {id=\"vpc-1\", region=\"r\"}");
    }
}

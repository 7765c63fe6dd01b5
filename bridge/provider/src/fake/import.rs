//! The fake's `ImportResourceState`, by import id or by resource identity (`{id}`).

use super::{FakePlugin, TYPE, error, get, schema, set};
use crate::identity::{IdentityAttribute, IdentitySchema, IdentitySchemas};
use crate::{ImportBy, ImportResponse, ImportedResource};
use kraken_value::{Type, Value};

/// The fake's identity schemas: [`TYPE`]'s is its `id`, required.
pub(super) fn identity_schemas() -> IdentitySchemas {
    let id = IdentityAttribute {
        name: "id".into(),
        ty: Type::String,
        required_for_import: true,
    };
    IdentitySchemas::from([(
        TYPE.to_owned(),
        IdentitySchema {
            version: 0,
            attributes: vec![id],
        },
    )])
}

impl FakePlugin {
    pub(super) fn import(&self, type_name: &str, by: &ImportBy) -> ImportResponse {
        let refused = |summary: &str| ImportResponse {
            imported: Vec::new(),
            diagnostics: vec![error(summary, None)],
        };
        if self.lock().import_error {
            return refused("import failed in the fake");
        }
        let id = match by {
            ImportBy::Id(id) => id.clone(),
            ImportBy::Identity(given) => {
                let schemas = identity_schemas();
                let fitted = schemas.get(type_name).map(|s| s.value_of(given));
                match fitted {
                    Some(Ok(v)) => match v.get("id") {
                        Some(Value::String(id)) => id.clone(),
                        _ => return refused("the identity has no id"),
                    },
                    Some(Err(reason)) => return refused(&reason),
                    None => return refused("no identity for this type"),
                }
            }
        };
        let mut state = match schema().resource(type_name) {
            Some(r) => Value::Object(
                r.block
                    .attributes
                    .keys()
                    .map(|k| (k.clone(), Value::Null))
                    .collect(),
            ),
            None => Value::Null,
        };
        // An import id is the object's id, or (with fresh ids) its name.
        let id = {
            let s = self.lock();
            let by_name = s.objects.iter().find(|(_, o)| {
                matches!(get(o, "name").map(Value::untyped), Some(Value::String(n)) if *n == id)
            });
            match by_name {
                Some((key, _)) if !s.objects.contains_key(&id) => key.clone(),
                _ => id,
            }
        };
        set(&mut state, "id", Value::string(id));
        ImportResponse {
            imported: vec![ImportedResource {
                type_name: type_name.to_owned(),
                state,
                private: super::IMPORTED.to_vec(),
            }],
            diagnostics: Vec::new(),
        }
    }
}

//! Setting a value at a dotted path of field names, as `configFrom` and `valuesFrom` merge
//! values into a document.

use serde_json::{Map, Value as Json};

use super::FieldError;

/// Highest list index [`set_json_path`] creates: bounds what one path can allocate.
const MAX_CREATED_INDEX: usize = 1023;

/// Sets `value` at a dotted path of field names below `doc` (`assumeRole.0.roleArn`), as
/// ProviderConfig's `configFrom` merges a Secret value into `config`.
///
/// A numeric segment indexes an existing list, or creates one where nothing is yet (missing
/// elements before it are null until another path fills them); on an existing object it is
/// a key, as in a map. Objects are created as needed. A value already present at the path
/// (anything but null) is not overwritten: that is an [`FieldError::AlreadySet`] error.
pub fn set_json_path(doc: &mut Json, dotted: &str, value: Json) -> Result<(), FieldError> {
    let segments: Vec<&str> = dotted.split('.').collect();
    let invalid = |upto: usize, message: &str| FieldError::Invalid {
        path: match segments[..upto].join(".") {
            p if p.is_empty() => "(root)".to_owned(),
            p => p,
        },
        message: message.to_owned(),
    };
    if segments.iter().any(|s| s.is_empty()) {
        return Err(FieldError::Invalid {
            path: dotted.to_owned(),
            message: "empty path segment".to_owned(),
        });
    }
    let mut at = doc;
    for (i, segment) in segments.iter().enumerate() {
        let index = segment.parse::<usize>().ok();
        if at.is_null() {
            *at = match index {
                Some(_) => Json::Array(Vec::new()),
                None => Json::Object(Map::new()),
            };
        }
        at = match at {
            Json::Object(members) => members.entry(*segment).or_insert(Json::Null),
            Json::Array(items) => {
                let Some(index) = index else {
                    return Err(invalid(i + 1, "expected a list index"));
                };
                if index >= items.len() {
                    if index > MAX_CREATED_INDEX {
                        return Err(invalid(i + 1, "list index too large"));
                    }
                    items.resize(index + 1, Json::Null);
                }
                &mut items[index]
            }
            _ => {
                return Err(invalid(
                    i,
                    "already set to a value that is not an object or list",
                ));
            }
        };
    }
    if !at.is_null() {
        return Err(FieldError::AlreadySet {
            path: dotted.to_owned(),
        });
    }
    *at = value;
    Ok(())
}

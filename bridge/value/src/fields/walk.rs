//! The walks of a value along the field tree: the Secret references in a spec, a
//! configuration's arguments as a spec (`args_to_spec`), and state as `status.atProvider`.

use serde_json::{Map, Value as Json};

use super::SecretRef;
use super::tree::{Level, Node};

/// `{name, key}` with both non-empty strings.
pub(super) fn secret_ref(value: &Json) -> Option<SecretRef> {
    let text = |field: &str| {
        value
            .get(field)
            .and_then(Json::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    Some(SecretRef {
        name: text("name")?,
        key: text("key")?,
    })
}

pub(super) fn refs_in_object(level: &Level, members: &Map<String, Json>, out: &mut Vec<SecretRef>) {
    for (name, value) in members {
        if let Some(slot) = level.by_name(name) {
            refs_in_value(&slot.node, value, out);
        }
    }
}

pub(super) fn refs_in_value(node: &Node, value: &Json, out: &mut Vec<SecretRef>) {
    match (node, value) {
        (Node::Secret { .. }, _) => {
            if let Some(reference) = secret_ref(value)
                && !out.contains(&reference)
            {
                out.push(reference);
            }
        }
        (Node::Object(level), Json::Object(members)) => refs_in_object(level, members, out),
        (Node::List(item), Json::Array(items)) => {
            items.iter().for_each(|v| refs_in_value(item, v, out));
        }
        (Node::Map(item), Json::Object(members)) => {
            members.values().for_each(|v| refs_in_value(item, v, out));
        }
        _ => {}
    }
}

/// What [`FieldMap::args_to_spec`] made of a configuration's arguments.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArgsToSpec {
    pub for_provider: Json,
    /// Arguments the schema does not have, dotted Terraform paths.
    pub unknown: Vec<String>,
    /// Sensitive arguments: the dotted Kubernetes path of the `xSecretRef` field and the value.
    pub sensitive: Vec<(String, Json)>,
}

pub(super) fn args_object(
    level: &Level,
    members: &Map<String, Json>,
    at: &str,
    out: &mut ArgsToSpec,
) -> Json {
    let mut obj = Map::new();
    for (tf_name, value) in members {
        let here = if at.is_empty() {
            tf_name.clone()
        } else {
            format!("{at}.{tf_name}")
        };
        let Some(slot) = level.by_tf(tf_name) else {
            out.unknown.push(here);
            continue;
        };
        if value.is_null() {
            continue;
        }
        let kube = if at.is_empty() {
            slot.name.clone()
        } else {
            format!("{at}.{}", slot.name)
        };
        match &slot.node {
            Node::Secret { .. } => out.sensitive.push((kube, value.clone())),
            node => {
                obj.insert(slot.name.clone(), args_value(node, value, &kube, out));
            }
        }
    }
    Json::Object(obj)
}

pub(super) fn args_value(node: &Node, value: &Json, at: &str, out: &mut ArgsToSpec) -> Json {
    match (node, value) {
        (Node::Object(level), Json::Object(members)) => args_object(level, members, at, out),
        // A single nested block is written as a one-element list in a configuration.
        (Node::Object(level), Json::Array(items)) if items.len() == 1 => match &items[0] {
            Json::Object(members) => args_object(level, members, at, out),
            other => other.clone(),
        },
        (Node::List(item), Json::Array(items)) => Json::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| args_value(item, v, &format!("{at}.{i}"), out))
                .collect(),
        ),
        (Node::Map(item), Json::Object(members)) => Json::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), args_value(item, v, &format!("{at}.{k}"), out)))
                .collect(),
        ),
        _ => value.clone(),
    }
}

pub(super) fn status_object(level: &Level, members: &Map<String, Json>) -> Json {
    let mut out = Map::new();
    for (tf_name, value) in members {
        // Attributes the status view lacks are sensitive or write-only: never published.
        let Some(slot) = level.by_tf(tf_name) else {
            continue;
        };
        if value.is_null() || matches!(slot.node, Node::Secret { .. }) {
            continue;
        }
        out.insert(slot.name.clone(), status_value(&slot.node, value));
    }
    Json::Object(out)
}

pub(super) fn status_value(node: &Node, value: &Json) -> Json {
    match (node, value) {
        (Node::Object(level), Json::Object(members)) => status_object(level, members),
        (Node::List(item), Json::Array(items)) => {
            Json::Array(items.iter().map(|v| status_value(item, v)).collect())
        }
        (Node::Map(item), Json::Object(members)) => Json::Object(
            members
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), status_value(item, v)))
                .collect(),
        ),
        _ => value.clone(),
    }
}

//! Small checkers standing in for the API server in unit tests: the structural-schema rules,
//! value validation against a schema, and the required-argument rules. The end-to-end tests
//! run the real API server; these keep the rules checked on every `cargo test`.

use serde_json::Value as Json;

const TYPES: [&str; 6] = ["string", "number", "integer", "boolean", "array", "object"];

fn preserves_unknown(node: &Json) -> bool {
    node.get("x-kubernetes-preserve-unknown-fields") == Some(&Json::Bool(true))
}

/// Structural-schema rules for `node` and everything below it: a valid type on every node
/// unless it preserves unknown fields; arrays have items; properties and
/// additionalProperties exclusive; `required` names existing properties; `set` lists hold
/// scalars; `map` lists have required scalar keys; defaults only on typed nodes.
pub fn structural(node: &Json, path: &str, errors: &mut Vec<String>) {
    let mut err = |m: &str| errors.push(format!("{path}: {m}"));
    let ty = node.get("type").and_then(Json::as_str);
    match ty {
        Some(t) if TYPES.contains(&t) => {}
        Some(t) => err(&format!("unknown type {t}")),
        None if preserves_unknown(node) => {}
        None => err("no type"),
    }
    if ty == Some("array") && node.get("items").is_none() {
        err("array without items");
    }
    if node.get("properties").is_some() && node.get("additionalProperties").is_some() {
        err("both properties and additionalProperties");
    }
    if let Some(Json::Array(required)) = node.get("required") {
        for r in required {
            let name = r.as_str().unwrap_or_default();
            if node["properties"].get(name).is_none() {
                err(&format!("required {name} is not a property"));
            }
        }
    }
    match node.get("x-kubernetes-list-type").and_then(Json::as_str) {
        Some("set") => {
            let item = node["items"]["type"].as_str().unwrap_or_default();
            if !["string", "number", "integer", "boolean"].contains(&item) {
                err("set list of non-scalars");
            }
        }
        Some("map") => {
            for key in node["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let key = key.as_str().unwrap_or_default();
                let required = node["items"]["required"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|k| k == key));
                if !required {
                    err(&format!("map key {key} not required"));
                }
            }
        }
        _ => {}
    }
    if let Some(Json::Object(props)) = node.get("properties") {
        for (name, child) in props {
            structural(child, &format!("{path}.{name}"), errors);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = node.get(key) {
            structural(child, &format!("{path}.{key}"), errors);
        }
    }
}

/// Validates `value` against `schema` as the API server would (types, unknown fields,
/// required properties, item counts, set uniqueness, enums).
pub fn value(value: &Json, schema: &Json, path: &str, errors: &mut Vec<String>) {
    if preserves_unknown(schema) && schema.get("type").is_none() {
        return;
    }
    let ty = schema["type"].as_str().unwrap_or_default();
    let ok = match ty {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    };
    if !ok {
        errors.push(format!("{path}: expected {ty}, got {value}"));
        return;
    }
    if let Some(Json::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        errors.push(format!("{path}: {value} not allowed"));
    }
    match value {
        Json::Array(items) => array(items, schema, path, errors),
        Json::Object(map) => {
            for (k, v) in map {
                let sub = format!("{path}.{k}");
                match (
                    schema["properties"].get(k),
                    schema.get("additionalProperties"),
                ) {
                    (Some(s), _) | (None, Some(s)) => self::value(v, s, &sub, errors),
                    (None, None) => errors.push(format!("{sub}: unknown field")),
                }
            }
            for r in schema["required"].as_array().into_iter().flatten() {
                if !map.contains_key(r.as_str().unwrap_or_default()) {
                    errors.push(format!("{path}.{r}: required"));
                }
            }
        }
        _ => {}
    }
}

fn array(items: &[Json], schema: &Json, path: &str, errors: &mut Vec<String>) {
    let len = items.len() as u64;
    if schema["minItems"].as_u64().is_some_and(|m| len < m) {
        errors.push(format!("{path}: fewer than minItems"));
    }
    if schema["maxItems"].as_u64().is_some_and(|m| len > m) {
        errors.push(format!("{path}: more than maxItems"));
    }
    if schema["x-kubernetes-list-type"] == "set" {
        for (i, item) in items.iter().enumerate() {
            if items[..i].contains(item) {
                errors.push(format!("{path}[{i}]: duplicate"));
            }
        }
    }
    for (i, item) in items.iter().enumerate() {
        value(item, &schema["items"], &format!("{path}[{i}]"), errors);
    }
}

/// The required-argument rules on `spec`, for objects that set everything literally: each
/// rule's `fieldPath` (`.forProvider.<field>`) must be present. Other rules (the conflict
/// rule on `.valuesFrom`) hold for any object without `valuesFrom`.
pub fn required_rules(spec: &Json, spec_schema: &Json, errors: &mut Vec<String>) {
    for rule in spec_schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["reason"] == "FieldValueRequired")
    {
        let field_path = rule["fieldPath"].as_str().unwrap_or_default();
        let Some(field) = field_path.strip_prefix(".forProvider.") else {
            errors.push(format!("unexpected fieldPath {field_path}"));
            continue;
        };
        if spec["forProvider"].get(field).is_none() {
            errors.push(format!("{}", rule["message"]));
        }
    }
}

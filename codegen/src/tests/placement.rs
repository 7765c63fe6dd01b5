//! Where every Terraform attribute lands: sensitive ones never in spec or status, and every
//! name at every level mapped losslessly (checked against the generated schemas and the
//! field-names annotation).

use std::collections::{BTreeMap, BTreeSet};

use heck::ToSnakeCase;
use serde_json::{Value as Json, json};

use super::open_api;
use super::schemas::{all_schemas, with_data_sources};
use crate::cty::Type;
use crate::names::{self, SECRET_REF_SUFFIX, field_names};
use crate::schema::{Attribute, Block};
use crate::{Options, crd, generate};

/// Walks the Terraform block and the generated `forProvider`/`atProvider` schemas side by
/// side and checks every attribute's placement: arguments in spec, sensitive ones only as
/// `…SecretRef`, nothing sensitive or write-only in status.
#[test]
fn sensitive_attributes_never_appear_in_spec_or_status() {
    let mut checked = 0;
    for (address, schema) in all_schemas() {
        let generated = generate(&address, &schema, &Options::default()).expect("generate");
        for crd in &generated.crds {
            let block = &schema.resources[&crd.type_name].block;
            let root = open_api(crd);
            let spec = &root["properties"]["spec"]["properties"]["forProvider"];
            let status = &root["properties"]["status"]["properties"]["atProvider"];
            checked += check_block(block, spec, status, &crd.type_name);
        }
    }
    assert!(checked > 100, "only {checked} attributes checked");
}

/// The element schema below a field: through list items and map values.
fn element(node: &Json) -> Json {
    node.get("items")
        .or_else(|| node.get("additionalProperties"))
        .map_or_else(|| node.clone(), element)
}

fn check_block(block: &Block, spec: &Json, status: &Json, at: &str) -> usize {
    let names = field_names(
        block
            .attributes
            .keys()
            .chain(block.block_types.keys())
            .map(String::as_str),
    );
    let mut checked = check_attrs(&block.attributes, &names, spec, status, at);
    for name in block.block_types.keys() {
        let field = names.to_kube(name).expect("mapped");
        let s = element(&spec["properties"][field]);
        let t = element(&status["properties"][field]);
        assert!(s.is_object() && t.is_object(), "{at}.{name}: block in both");
        checked += check_block(
            &block.block_types[name].block,
            &s,
            &t,
            &format!("{at}.{name}"),
        );
    }
    checked
}

fn check_attrs(
    attrs: &BTreeMap<String, Attribute>,
    names: &names::FieldNames,
    spec: &Json,
    status: &Json,
    at: &str,
) -> usize {
    let mut checked = 0;
    for (tf_name, attr) in attrs {
        checked += 1;
        let field = names.to_kube(tf_name).expect("mapped");
        let secret_ref = format!("{field}{SECRET_REF_SUFFIX}");
        let in_spec = |f: &str| spec["properties"].get(f).is_some();
        let in_status = status["properties"].get(field).is_some();
        let path = format!("{at}.{tf_name}");
        if attr.sensitive {
            assert!(!in_spec(field) && !in_status, "{path} leaked");
            assert_eq!(
                in_spec(&secret_ref),
                attr.is_argument(),
                "{path} secret ref"
            );
            if attr.is_argument() {
                let node = &spec["properties"][&secret_ref];
                assert_eq!(node["required"], json!(["name", "key"]), "{path}");
                let keys: Vec<&String> = node["properties"]
                    .as_object()
                    .map(|m| m.keys().collect())
                    .unwrap_or_default();
                assert_eq!(keys, ["key", "name"], "{path}");
            }
            continue;
        }
        assert!(
            !in_spec(&secret_ref),
            "{path}: no secret ref for a plain attribute"
        );
        assert_eq!(in_spec(field), attr.is_argument(), "{path} in spec");
        assert_eq!(in_status, !attr.write_only, "{path} in status");
        if let (Some(nested), true) = (&attr.nested_type, attr.is_argument() && !attr.write_only) {
            let inner = field_names(nested.attributes.keys().map(String::as_str));
            let s = element(&spec["properties"][field]);
            let t = element(&status["properties"][field]);
            checked += check_attrs(&nested.attributes, &inner, &s, &t, &path);
        }
    }
    checked
}

/// Every name at every level — block attributes, nested blocks, nested attributes and the
/// attributes of object types — maps to a unique field and back; the generated schema uses
/// exactly those fields; and the annotation plus the snake_case rule recover every
/// Terraform name from the schema's field paths.
#[test]
fn field_names_round_trip_at_every_level() {
    let mut levels = 0;
    for (address, schema) in all_schemas() {
        let generated = generate(&address, &schema, &with_data_sources()).expect("generate");
        for crd in &generated.crds {
            let type_schema = if crd.data_source {
                &schema.data_sources[&crd.type_name]
            } else {
                &schema.resources[&crd.type_name]
            };
            let annotation: BTreeMap<String, String> = crd.crd["metadata"]["annotations"]
                .get(crd::ANNOTATION_FIELD_NAMES)
                .and_then(Json::as_str)
                .map(|s| serde_json::from_str(s).expect("annotation is json"))
                .unwrap_or_default();
            let status = &open_api(crd)["properties"]["status"]["properties"]["atProvider"];
            levels += round_trip_block(&type_schema.block, status, "", &annotation);
        }
    }
    assert!(levels >= 30, "only {levels} levels checked");
}

fn assert_level(
    names: &[&str],
    status: &Json,
    prefix: &str,
    annotation: &BTreeMap<String, String>,
) {
    let mapping = field_names(names.iter().copied());
    let mut seen = BTreeSet::new();
    for name in names {
        let field = mapping.to_kube(name).expect("mapped");
        assert_eq!(mapping.to_tf(field), Some(*name), "{prefix}{name}");
        assert!(seen.insert(field), "{field} used twice");
        assert!(field.chars().all(|c| c.is_ascii_alphanumeric()), "{field}");
        assert!(!field.ends_with(SECRET_REF_SUFFIX), "{field}");
        let path = if prefix.is_empty() {
            field.to_owned()
        } else {
            format!("{prefix}.{field}")
        };
        let recovered = annotation
            .get(&path)
            .cloned()
            .unwrap_or_else(|| field.to_snake_case());
        assert_eq!(&recovered, name, "annotation for {path}");
    }
    if let Some(Json::Object(props)) = status.get("properties") {
        for key in props.keys() {
            assert!(
                mapping.to_tf(key).is_some(),
                "{prefix}: unexpected field {key}"
            );
        }
    }
}

fn child(status: &Json, field: &str) -> Json {
    let node = status["properties"]
        .get(field)
        .cloned()
        .unwrap_or(Json::Null);
    // Descend through lists, sets and maps to the element schema.
    let mut node = node;
    loop {
        if let Some(items) = node.get("items") {
            node = items.clone();
        } else if let Some(values) = node.get("additionalProperties") {
            node = values.clone();
        } else {
            return node;
        }
    }
}

fn join(prefix: &str, field: &str) -> String {
    if prefix.is_empty() {
        field.to_owned()
    } else {
        format!("{prefix}.{field}")
    }
}

fn round_trip_block(
    block: &Block,
    status: &Json,
    prefix: &str,
    annotation: &BTreeMap<String, String>,
) -> usize {
    let names: Vec<&str> = block
        .attributes
        .keys()
        .chain(block.block_types.keys())
        .map(String::as_str)
        .collect();
    assert_level(&names, status, prefix, annotation);
    let mapping = field_names(names.iter().copied());
    let mut levels = 1;
    for (name, nested) in &block.block_types {
        let field = mapping.to_kube(name).expect("mapped");
        let path = join(prefix, field);
        levels += round_trip_block(&nested.block, &child(status, field), &path, annotation);
    }
    levels + round_trip_attrs(&block.attributes, &mapping, status, prefix, annotation)
}

fn round_trip_attrs(
    attrs: &BTreeMap<String, Attribute>,
    mapping: &names::FieldNames,
    status: &Json,
    prefix: &str,
    annotation: &BTreeMap<String, String>,
) -> usize {
    let mut levels = 0;
    for (name, attr) in attrs {
        let field = mapping.to_kube(name).expect("mapped");
        let path = join(prefix, field);
        let node = child(status, field);
        if let Some(nested) = &attr.nested_type {
            let inner: Vec<&str> = nested.attributes.keys().map(String::as_str).collect();
            assert_level(&inner, &node, &path, annotation);
            let m = field_names(inner.iter().copied());
            levels += 1 + round_trip_attrs(&nested.attributes, &m, &node, &path, annotation);
        } else if let Some(ty) = &attr.ty {
            levels += round_trip_type(ty, &node, &path, annotation);
        }
    }
    levels
}

fn round_trip_type(
    ty: &Type,
    status: &Json,
    prefix: &str,
    annotation: &BTreeMap<String, String>,
) -> usize {
    match ty {
        Type::List(e) | Type::Set(e) | Type::Map(e) => {
            round_trip_type(e, status, prefix, annotation)
        }
        Type::Object(obj) => {
            let names: Vec<&str> = obj.attributes.keys().map(String::as_str).collect();
            assert_level(&names, status, prefix, annotation);
            let mapping = field_names(names.iter().copied());
            let mut levels = 1;
            for (name, t) in &obj.attributes {
                let field = mapping.to_kube(name).expect("mapped");
                let node = child(status, field);
                levels += round_trip_type(t, &node, &join(prefix, field), annotation);
            }
            levels
        }
        _ => 0,
    }
}

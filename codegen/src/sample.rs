//! Example objects for generated kinds: every required argument filled in.
//!
//! Used by tests (a sample of every kind must pass the API server's validation) and for
//! documentation. Values are chosen by type only — `"sample"`, `1`, `true`, one-element
//! lists and maps — so they satisfy the CRD, not necessarily the provider. Sensitive
//! arguments are references to a Secret named `<object name>-secrets`, keyed by the
//! Terraform name.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json, json};

use crate::GeneratedCrd;
use crate::crd::VERSION;
use crate::cty::Type;
use crate::names::{SECRET_REF_SUFFIX, field_names};
use crate::schema::{Attribute, Block, BlockNesting, NestedObject, ObjectNesting, Schema};

/// A valid object of the kind in `crd`, for the resource `schema` it was generated from.
pub fn sample_object(crd: &GeneratedCrd, schema: &Schema, name: &str, namespace: &str) -> Json {
    let secret = format!("{name}-secrets");
    json!({
        "apiVersion": format!("{}/{VERSION}", crd.group),
        "kind": crd.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"forProvider": sample_block(&schema.block, &secret)},
    })
}

fn sample_block(block: &Block, secret: &str) -> Json {
    let names = field_names(
        block
            .attributes
            .keys()
            .chain(block.block_types.keys())
            .map(String::as_str),
    );
    let mut out = sample_attributes(&block.attributes, secret, |n| names.to_kube(n));
    for (tf_name, nested) in &block.block_types {
        if nested.min_items < 1 {
            continue;
        }
        let field = names.to_kube(tf_name).unwrap_or(tf_name).to_owned();
        let object = sample_block(&nested.block, secret);
        let count = usize::try_from(nested.min_items).unwrap_or(1);
        let value = match nested.nesting {
            BlockNesting::Single => object,
            BlockNesting::List | BlockNesting::Set => Json::Array(vec![object; count]),
            // Never required in Terraform, so never filled.
            BlockNesting::Group | BlockNesting::Map => continue,
        };
        out.insert(field, value);
    }
    Json::Object(out)
}

fn sample_attributes<'a>(
    attributes: &BTreeMap<String, Attribute>,
    secret: &str,
    to_kube: impl Fn(&str) -> Option<&'a str>,
) -> Map<String, Json> {
    let mut out = Map::new();
    for (tf_name, attr) in attributes.iter().filter(|(_, a)| a.required) {
        let field = to_kube(tf_name).unwrap_or(tf_name);
        if attr.sensitive {
            out.insert(
                format!("{field}{SECRET_REF_SUFFIX}"),
                json!({"name": secret, "key": tf_name}),
            );
        } else {
            out.insert(field.to_owned(), sample_attribute(attr, secret));
        }
    }
    out
}

fn sample_attribute(attr: &Attribute, secret: &str) -> Json {
    match (&attr.nested_type, &attr.ty) {
        (Some(nested), _) => sample_nested(nested, secret),
        (None, Some(ty)) => sample_value(ty),
        (None, None) => json!("sample"),
    }
}

fn sample_nested(nested: &NestedObject, secret: &str) -> Json {
    let names = field_names(nested.attributes.keys().map(String::as_str));
    let object = Json::Object(sample_attributes(&nested.attributes, secret, |n| {
        names.to_kube(n)
    }));
    match nested.nesting {
        ObjectNesting::Single => object,
        ObjectNesting::List | ObjectNesting::Set => json!([object]),
        ObjectNesting::Map => json!({"key": object}),
    }
}

/// A value of a cty type; objects get every attribute.
fn sample_value(ty: &Type) -> Json {
    match ty {
        Type::String | Type::Dynamic => json!("sample"),
        Type::Number => json!(1),
        Type::Bool => json!(true),
        Type::List(e) | Type::Set(e) => json!([sample_value(e)]),
        Type::Map(e) => json!({"key": sample_value(e)}),
        Type::Tuple(elems) => Json::Array(elems.iter().map(sample_value).collect()),
        Type::Object(obj) => {
            let names = field_names(obj.attributes.keys().map(String::as_str));
            let fields = obj
                .attributes
                .iter()
                .map(|(n, t)| {
                    let field = names.to_kube(n).unwrap_or(n).to_owned();
                    (field, sample_value(t))
                })
                .collect();
            Json::Object(fields)
        }
    }
}

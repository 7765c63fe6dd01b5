//! A provider schema rendered exactly as `terraform providers schema -json` prints it, and
//! parsed back ([`parse_provider_schemas`]).
//!
//! `kraken schema` uses this so that its output can be diffed against Terraform's, and so that
//! tools written for Terraform's format (documentation generators, editors) read Kraken's too.
//! Codegen reads the format back, so CRDs can be generated from a schema file that either
//! Terraform or Kraken printed.
//! The shape follows Terraform's `internal/command/jsonprovider` and `jsonfunction` packages,
//! fed by the protocol-to-`configschema` conversion in `internal/plugin{,6}/convert`, which
//! copies every field through unchanged (min/max items included, for every nesting mode).
//!
//! # Format
//!
//! ```text
//! { "format_version": "1.0",
//!   "provider_schemas": { "<source address>": <provider> } }
//!
//! <provider> = { "provider": <schema>,
//!                "resource_schemas": { "<type>": <schema> },             omitted if empty
//!                "data_source_schemas": { "<type>": <schema> },          omitted if empty
//!                "ephemeral_resource_schemas": { "<type>": <schema> },   omitted if empty
//!                "list_resource_schemas": { "<type>": <schema> },        omitted if empty
//!                "functions": { "<name>": <function> } }                 omitted if empty
//! <schema>   = { "version": N, "block": <block> }                        version always printed
//! <block>    = { "attributes": { "<name>": <attribute> },                omitted if empty
//!                "block_types": { "<name>": <block type> },              omitted if empty
//!                "description": "…", "description_kind": "plain"|"markdown",
//!                "deprecated": true }
//! <block type> = { "nesting_mode": "single"|"group"|"list"|"set"|"map", "block": <block>,
//!                  "min_items": N, "max_items": N }                      zero counts omitted
//! <attribute>  = { "type": <cty type JSON>, "nested_type": <nested type>,
//!                  "description": "…", "description_kind": "plain"|"markdown",
//!                  "deprecated", "required", "optional", "computed", "sensitive",
//!                  "write_only": true }
//! <nested type> = { "attributes": { "<name>": <attribute> },
//!                   "nesting_mode": "single"|"list"|"set"|"map" }
//! <function>  = { "description": "…", "summary": "…", "deprecation_message": "…",
//!                 "return_type": <cty type JSON>,                        always printed
//!                 "parameters": [<parameter>], "variadic_parameter": <parameter> }
//! <parameter> = { "name": "…", "description": "…", "is_nullable": true,
//!                 "type": <cty type JSON> }                              type always printed
//! ```
//!
//! Terraform marshals with Go's `omitempty` almost everywhere, so a key is absent when its
//! value is `false`, `0`, `""`, or an empty map or list. `description_kind` is the exception
//! in practice: it is never empty (`"plain"` by default), so every block and attribute
//! carries it even without a description. Functions and parameters carry no
//! `description_kind`, and `allow_unknown_values` is not printed. Neither `provider_meta`,
//! the server capabilities nor the schema diagnostics appear anywhere in the output.
//!
//! # Differences between Terraform releases
//!
//! Every release from 1.5 on prints `format_version` `"1.0"`; newer releases only add keys.
//! Kraken renders the newest format it can, so comparing with an older Terraform means
//! removing the keys that release does not know yet:
//!
//! | key                                    | first printed by |
//! |----------------------------------------|------------------|
//! | `functions` (provider-defined)         | 1.8.0            |
//! | `ephemeral_resource_schemas`           | 1.10.0           |
//! | `write_only` (attribute)               | 1.11.0           |
//! | `resource_identity_schemas`            | 1.12.0           |
//! | `list_resource_schemas`                | 1.14.0 (1.13 only with experiments enabled) |
//! | `action_schemas`                       | after 1.13 (likely 1.14; not verified) |
//! | `state_store_schemas`                  | unreleased (experimental) |
//! | `deprecation_message` (attribute)      | after 1.14 (Terraform's main branch) |
//!
//! Terraform 1.14 stores a list resource's schema wrapped in a `config` block and unwraps it
//! again for this output, so `list_resource_schemas` shows the provider's block as sent.
//!
//! Up to 1.5 the provider block's `version` was always printed as 0 and a data source's as
//! the version of the managed resource type with the same name (or 0); from 1.6 on each
//! schema prints its own version, as Kraken does.
//!
//! Not rendered, because [`ProviderSchema`] does not carry them yet: resource identity
//! schemas (from the separate `GetResourceIdentitySchemas` call), action and state store
//! schemas, and attribute deprecation messages.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json};

mod parse;

pub use parse::{ParseError, parse_provider, parse_provider_schemas};

use crate::schema::{
    Attribute, Block, Function, NestedBlock, NestedObject, Parameter, ProviderSchema, Schema,
};

/// The `format_version` Terraform has printed since the format was declared stable.
pub const FORMAT_VERSION: &str = "1.0";

/// The complete `terraform providers schema -json` document for one provider, keyed by its
/// source address (e.g. `registry.terraform.io/hashicorp/random`).
pub fn provider_schemas_json(address: &str, schema: &ProviderSchema) -> Json {
    let mut providers = Map::new();
    providers.insert(address.to_owned(), provider_json(schema));
    let mut doc = Map::new();
    doc.insert("format_version".into(), FORMAT_VERSION.into());
    doc.insert("provider_schemas".into(), Json::Object(providers));
    Json::Object(doc)
}

/// One provider's entry in `provider_schemas`.
pub fn provider_json(schema: &ProviderSchema) -> Json {
    let mut out = Map::new();
    // Terraform always has a provider schema (possibly an empty block), so it is always printed.
    out.insert("provider".into(), schema_json(&schema.provider));
    put(
        &mut out,
        "resource_schemas",
        map_json(&schema.resources, schema_json),
    );
    put(
        &mut out,
        "data_source_schemas",
        map_json(&schema.data_sources, schema_json),
    );
    put(
        &mut out,
        "ephemeral_resource_schemas",
        map_json(&schema.ephemeral_resources, schema_json),
    );
    put(
        &mut out,
        "list_resource_schemas",
        map_json(&schema.list_resources, schema_json),
    );
    put(
        &mut out,
        "functions",
        map_json(&schema.functions, function_json),
    );
    Json::Object(out)
}

fn schema_json(schema: &Schema) -> Json {
    let mut out = Map::new();
    // Terraform converts with Go's uint64(), which reinterprets the bits exactly as `as` does.
    // It refuses negative versions for providers, resources and data sources before printing.
    out.insert("version".into(), Json::from(schema.version as u64));
    out.insert("block".into(), block_json(&schema.block));
    Json::Object(out)
}

fn block_json(block: &Block) -> Json {
    let mut out = Map::new();
    put(
        &mut out,
        "attributes",
        map_json(&block.attributes, attribute_json),
    );
    put(
        &mut out,
        "block_types",
        map_json(&block.block_types, nested_block_json),
    );
    put(&mut out, "description", block.description.as_str().into());
    put(
        &mut out,
        "description_kind",
        block.description_kind.as_str().into(),
    );
    put(&mut out, "deprecated", block.deprecated.into());
    Json::Object(out)
}

fn nested_block_json(nested: &NestedBlock) -> Json {
    let mut out = Map::new();
    put(&mut out, "nesting_mode", nested.nesting.as_str().into());
    out.insert("block".into(), block_json(&nested.block));
    // Printed as given for every nesting mode: Terraform neither drops nor normalizes the
    // 1/1 that SDKs send for required single blocks. Go's uint64() wraps negatives (which
    // Terraform's schema validation rejects anyway), and so does `as`.
    put(&mut out, "min_items", (nested.min_items as u64).into());
    put(&mut out, "max_items", (nested.max_items as u64).into());
    Json::Object(out)
}

fn attribute_json(attr: &Attribute) -> Json {
    let mut out = Map::new();
    if let Some(ty) = &attr.ty {
        out.insert("type".into(), ty.to_json());
    }
    if let Some(nested) = &attr.nested_type {
        out.insert("nested_type".into(), nested_object_json(nested));
    }
    put(&mut out, "description", attr.description.as_str().into());
    put(
        &mut out,
        "description_kind",
        attr.description_kind.as_str().into(),
    );
    put(&mut out, "deprecated", attr.deprecated.into());
    put(&mut out, "required", attr.required.into());
    put(&mut out, "optional", attr.optional.into());
    put(&mut out, "computed", attr.computed.into());
    put(&mut out, "sensitive", attr.sensitive.into());
    put(&mut out, "write_only", attr.write_only.into());
    Json::Object(out)
}

fn nested_object_json(nested: &NestedObject) -> Json {
    // The protocol's deprecated min_items/max_items of nested attributes never reach
    // Terraform's configschema, so they are not printed (Kraken does not keep them either).
    let mut out = Map::new();
    put(
        &mut out,
        "attributes",
        map_json(&nested.attributes, attribute_json),
    );
    put(&mut out, "nesting_mode", nested.nesting.as_str().into());
    Json::Object(out)
}

fn function_json(function: &Function) -> Json {
    let mut out = Map::new();
    // The description is printed as written, whatever its kind: the function format has no
    // `description_kind`.
    put(
        &mut out,
        "description",
        function.description.as_str().into(),
    );
    put(&mut out, "summary", function.summary.as_str().into());
    put(
        &mut out,
        "deprecation_message",
        function.deprecation_message.as_str().into(),
    );
    out.insert("return_type".into(), function.return_type.to_json());
    let parameters = function.parameters.iter().map(parameter_json).collect();
    put(&mut out, "parameters", Json::Array(parameters));
    if let Some(variadic) = &function.variadic_parameter {
        out.insert("variadic_parameter".into(), parameter_json(variadic));
    }
    Json::Object(out)
}

fn parameter_json(param: &Parameter) -> Json {
    let mut out = Map::new();
    put(&mut out, "name", param.name.as_str().into());
    put(&mut out, "description", param.description.as_str().into());
    put(&mut out, "is_nullable", param.allow_null_value.into());
    out.insert("type".into(), param.ty.to_json());
    Json::Object(out)
}

fn map_json<T>(items: &BTreeMap<String, T>, render: fn(&T) -> Json) -> Json {
    Json::Object(
        items
            .iter()
            .map(|(name, item)| (name.clone(), render(item)))
            .collect(),
    )
}

/// Insert `value` unless Go's `omitempty` would drop it: `false`, `0`, `""`, `null`, and
/// empty lists and maps.
fn put(out: &mut Map<String, Json>, key: &str, value: Json) {
    let empty = match &value {
        Json::Null => true,
        Json::Bool(b) => !b,
        Json::Number(n) => n.as_u64() == Some(0),
        Json::String(s) => s.is_empty(),
        Json::Array(items) => items.is_empty(),
        Json::Object(items) => items.is_empty(),
    };
    if !empty {
        out.insert(key.to_owned(), value);
    }
}

#[cfg(test)]
mod tests;

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
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::*;
    use crate::cty::{ObjectType, Type};
    use crate::schema::{BlockNesting, ObjectNesting, ServerCapabilities, StringKind};

    fn attr(ty: Type) -> Attribute {
        Attribute::optional_of(ty)
    }

    fn block(attributes: impl IntoIterator<Item = (&'static str, Attribute)>) -> Block {
        Block {
            attributes: attributes
                .into_iter()
                .map(|(name, a)| (name.to_owned(), a))
                .collect(),
            ..Default::default()
        }
    }

    fn nested(nesting: BlockNesting, min_items: i64, max_items: i64) -> NestedBlock {
        NestedBlock {
            block: block([("value", attr(Type::String))]),
            nesting,
            min_items,
            max_items,
        }
    }

    /// A resource exercising every attribute flag, every block nesting mode and every
    /// nested-attribute nesting mode.
    /// Plain attributes with every flag and every cty type kind.
    fn flag_attributes() -> Vec<(&'static str, Attribute)> {
        vec![
            (
                "id",
                Attribute {
                    ty: Some(Type::String),
                    computed: true,
                    description: "The `id`.".into(),
                    description_kind: StringKind::Markdown,
                    ..Default::default()
                },
            ),
            (
                "name",
                Attribute {
                    ty: Some(Type::String),
                    required: true,
                    ..Default::default()
                },
            ),
            (
                "password",
                Attribute {
                    ty: Some(Type::String),
                    optional: true,
                    sensitive: true,
                    write_only: true,
                    ..Default::default()
                },
            ),
            (
                "labels",
                Attribute {
                    ty: Some(Type::list(Type::String)),
                    optional: true,
                    computed: true,
                    deprecated: true,
                    description: "Use tags.".into(),
                    ..Default::default()
                },
            ),
            ("tags", attr(Type::map(Type::String))),
            ("ports", attr(Type::set(Type::Number))),
            ("anything", attr(Type::Dynamic)),
            (
                "pair",
                attr(Type::Tuple(vec![
                    Type::Bool,
                    Type::object([("x", Type::Number)]),
                ])),
            ),
        ]
    }

    fn everything_resource() -> Schema {
        let mut b = block(flag_attributes());
        for (name, nesting) in [
            ("one", ObjectNesting::Single),
            ("many", ObjectNesting::List),
            ("unique", ObjectNesting::Set),
            ("named", ObjectNesting::Map),
        ] {
            b.attributes.insert(name.into(), nested_attr(nesting));
        }
        b.block_types = [
            ("single_required", nested(BlockNesting::Single, 1, 1)),
            ("single_optional", nested(BlockNesting::Single, 0, 0)),
            ("group", nested(BlockNesting::Group, 0, 0)),
            ("list", nested(BlockNesting::List, 1, 3)),
            ("set", nested(BlockNesting::Set, 0, 2)),
            ("map", nested(BlockNesting::Map, 0, 0)),
        ]
        .into_iter()
        .map(|(name, nb)| (name.to_owned(), nb))
        .collect();
        b.description = "A **thing**.".into();
        b.description_kind = StringKind::Markdown;
        b.deprecated = true;
        Schema {
            version: 3,
            block: b,
        }
    }

    /// A protocol 6 nested attribute; the single one nests another nested attribute.
    fn nested_attr(nesting: ObjectNesting) -> Attribute {
        let mut attributes = BTreeMap::new();
        attributes.insert(
            "port".to_owned(),
            Attribute {
                ty: Some(Type::Number),
                required: true,
                ..Default::default()
            },
        );
        if nesting == ObjectNesting::Single {
            let inner = NestedObject {
                attributes: attributes.clone(),
                nesting: ObjectNesting::List,
            };
            attributes.insert(
                "inner".to_owned(),
                Attribute {
                    nested_type: Some(inner),
                    computed: true,
                    sensitive: true,
                    ..Default::default()
                },
            );
        }
        Attribute {
            nested_type: Some(NestedObject {
                attributes,
                nesting,
            }),
            optional: true,
            ..Default::default()
        }
    }

    fn param(name: &str, ty: Type, nullable: bool, description: &str) -> Parameter {
        Parameter {
            name: name.into(),
            ty,
            allow_null_value: nullable,
            // Never printed: Terraform's JSON has no place for it.
            allow_unknown_values: true,
            description: description.into(),
            description_kind: StringKind::Markdown,
        }
    }

    /// Two functions: one using every signature feature, one using none.
    fn functions() -> BTreeMap<String, Function> {
        let mut optional_attr = ObjectType::new([
            ("a".to_owned(), Type::String),
            ("b".to_owned(), Type::Number),
        ]);
        optional_attr.optional = BTreeSet::from(["b".to_owned()]);
        let split = Function {
            parameters: vec![
                param("input", Type::String, false, "The `input`."),
                param("options", Type::Object(optional_attr), true, ""),
            ],
            variadic_parameter: Some(param("rest", Type::Dynamic, false, "")),
            return_type: Type::list(Type::String),
            summary: "Splits things".into(),
            description: "Splits **things**.".into(),
            description_kind: StringKind::Markdown,
            deprecation_message: "Use split2.".into(),
        };
        let bare = Function {
            parameters: Vec::new(),
            variadic_parameter: None,
            return_type: Type::Bool,
            summary: String::new(),
            description: String::new(),
            description_kind: StringKind::Plain,
            deprecation_message: String::new(),
        };
        BTreeMap::from([("split".to_owned(), split), ("bare".to_owned(), bare)])
    }

    pub(super) fn everything_provider() -> ProviderSchema {
        let mut provider = block([("token", attr(Type::String))]);
        provider.description = "The provider.".into();
        ProviderSchema {
            provider: Schema {
                version: 2,
                block: provider,
            },
            provider_meta: Some(Schema {
                version: 0,
                block: block([("module_name", attr(Type::String))]),
            }),
            resources: BTreeMap::from([("fx_thing".to_owned(), everything_resource())]),
            data_sources: BTreeMap::from([(
                "fx_lookup".to_owned(),
                Schema {
                    version: 0,
                    block: block([("id", attr(Type::String))]),
                },
            )]),
            ephemeral_resources: BTreeMap::from([(
                "fx_secret".to_owned(),
                Schema {
                    version: 0,
                    block: block([("value", attr(Type::String))]),
                },
            )]),
            list_resources: BTreeMap::from([(
                "fx_thing".to_owned(),
                Schema {
                    version: 1,
                    block: block([("filter", attr(Type::String))]),
                },
            )]),
            functions: functions(),
            capabilities: ServerCapabilities {
                plan_destroy: true,
                get_provider_schema_optional: true,
                move_resource_state: true,
            },
        }
    }

    fn expected_nested_block() -> Json {
        json!({"attributes": {"value": {"type": "string", "description_kind": "plain", "optional": true}},
               "description_kind": "plain"})
    }

    fn expected_everything_resource() -> Json {
        let port = json!({"type": "number", "description_kind": "plain", "required": true});
        let nested_type = |mode: &str| {
            json!({"nested_type": {"attributes": {"port": port}, "nesting_mode": mode},
                   "description_kind": "plain", "optional": true})
        };
        let block_type = |mode: &str, min: u64, max: u64| {
            let mut bt = json!({"nesting_mode": mode, "block": expected_nested_block()});
            if min > 0 {
                bt["min_items"] = min.into();
            }
            if max > 0 {
                bt["max_items"] = max.into();
            }
            bt
        };
        let mut one = nested_type("single");
        one["nested_type"]["attributes"]["inner"] = json!({
            "nested_type": {"attributes": {"port": port}, "nesting_mode": "list"},
            "description_kind": "plain", "computed": true, "sensitive": true,
        });
        json!({
            "version": 3,
            "block": {
                "attributes": {
                    "id": {"type": "string", "description": "The `id`.", "description_kind": "markdown",
                           "computed": true},
                    "name": {"type": "string", "description_kind": "plain", "required": true},
                    "password": {"type": "string", "description_kind": "plain", "optional": true,
                                 "sensitive": true, "write_only": true},
                    "labels": {"type": ["list", "string"], "description": "Use tags.",
                               "description_kind": "plain", "deprecated": true, "optional": true,
                               "computed": true},
                    "tags": {"type": ["map", "string"], "description_kind": "plain", "optional": true},
                    "ports": {"type": ["set", "number"], "description_kind": "plain", "optional": true},
                    "anything": {"type": "dynamic", "description_kind": "plain", "optional": true},
                    "pair": {"type": ["tuple", ["bool", ["object", {"x": "number"}]]],
                             "description_kind": "plain", "optional": true},
                    "one": one,
                    "many": nested_type("list"),
                    "unique": nested_type("set"),
                    "named": nested_type("map"),
                },
                "block_types": {
                    "single_required": block_type("single", 1, 1),
                    "single_optional": block_type("single", 0, 0),
                    "group": block_type("group", 0, 0),
                    "list": block_type("list", 1, 3),
                    "set": block_type("set", 0, 2),
                    "map": block_type("map", 0, 0),
                },
                "description": "A **thing**.",
                "description_kind": "markdown",
                "deprecated": true,
            },
        })
    }

    #[test]
    fn renders_every_feature_like_terraform() {
        let got =
            provider_schemas_json("registry.kraken.dev/kraken/fixture", &everything_provider());
        let plain_string = json!({"type": "string", "description_kind": "plain", "optional": true});
        let want = json!({
            "format_version": "1.0",
            "provider_schemas": {
                "registry.kraken.dev/kraken/fixture": {
                    "provider": {
                        "version": 2,
                        "block": {"attributes": {"token": plain_string}, "description": "The provider.",
                                  "description_kind": "plain"},
                    },
                    "resource_schemas": {"fx_thing": expected_everything_resource()},
                    "data_source_schemas": {
                        "fx_lookup": {"version": 0, "block": {"attributes": {"id": plain_string},
                                                              "description_kind": "plain"}},
                    },
                    "ephemeral_resource_schemas": {
                        "fx_secret": {"version": 0, "block": {"attributes": {"value": plain_string},
                                                              "description_kind": "plain"}},
                    },
                    "list_resource_schemas": {
                        "fx_thing": {"version": 1, "block": {"attributes": {"filter": plain_string},
                                                             "description_kind": "plain"}},
                    },
                    "functions": {
                        "bare": {"return_type": "bool"},
                        "split": {
                            "description": "Splits **things**.",
                            "summary": "Splits things",
                            "deprecation_message": "Use split2.",
                            "return_type": ["list", "string"],
                            "parameters": [
                                {"name": "input", "description": "The `input`.", "type": "string"},
                                {"name": "options", "is_nullable": true,
                                 "type": ["object", {"a": "string", "b": "number"}, ["b"]]},
                            ],
                            "variadic_parameter": {"name": "rest", "type": "dynamic"},
                        },
                    },
                },
            },
        });
        assert_eq!(got, want, "got:\n{got:#}");
    }

    #[test]
    fn empty_provider_prints_only_its_empty_provider_block() {
        let got = provider_schemas_json(
            "registry.terraform.io/hashicorp/null",
            &ProviderSchema::default(),
        );
        let want = json!({
            "format_version": "1.0",
            "provider_schemas": {
                "registry.terraform.io/hashicorp/null": {
                    "provider": {"version": 0, "block": {"description_kind": "plain"}},
                },
            },
        });
        assert_eq!(got, want);
    }

    #[test]
    fn empty_nested_containers_are_omitted() {
        let mut b = Block::default();
        b.attributes.insert(
            "empty".into(),
            Attribute {
                nested_type: Some(NestedObject::default()),
                optional: true,
                ..Default::default()
            },
        );
        b.block_types.insert(
            "bare".into(),
            NestedBlock {
                nesting: BlockNesting::List,
                ..Default::default()
            },
        );
        let want = json!({
            "attributes": {
                "empty": {"nested_type": {"nesting_mode": "single"}, "description_kind": "plain",
                          "optional": true},
            },
            "block_types": {"bare": {"nesting_mode": "list", "block": {"description_kind": "plain"}}},
            "description_kind": "plain",
        });
        assert_eq!(block_json(&b), want);
    }

    #[test]
    fn negative_numbers_wrap_like_go_uint64_conversion() {
        let schema = Schema {
            version: -1,
            block: Block::default(),
        };
        assert_eq!(schema_json(&schema)["version"], json!(u64::MAX));
        let nb = NestedBlock {
            min_items: -1,
            ..Default::default()
        };
        assert_eq!(nested_block_json(&nb)["min_items"], json!(u64::MAX));
    }
}

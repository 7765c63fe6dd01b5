//! Rendering a provider schema the way `terraform providers schema -json` prints it.

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
    let got = provider_schemas_json("registry.kraken.dev/kraken/fixture", &everything_provider());
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

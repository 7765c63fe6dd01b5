//! The inverse of the renderer: `terraform providers schema -json` back into
//! [`ProviderSchema`]s.
//!
//! Accepts what Terraform 1.5 through 1.14 and `kraken schema` print (see the format in the
//! parent module). Keys this parser does not know — newer sections such as
//! `resource_identity_schemas` or `action_schemas`, or attribute keys added later — are
//! ignored, so a newer Terraform's output still parses. Keys it does know must have the
//! documented types; anything else is an error naming the JSON path, because a silently
//! misread schema would become a silently wrong CRD.
//!
//! Parts of [`ProviderSchema`] that the format does not carry come back as their defaults:
//! `provider_meta` is `None`, the server capabilities are all `false`, functions and
//! parameters have plain descriptions, and parameters do not allow unknown values.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json};

use crate::cty::Type;
use crate::schema::{
    Attribute, Block, BlockNesting, Function, NestedBlock, NestedObject, ObjectNesting, Parameter,
    ProviderSchema, Schema, StringKind,
};

/// Why a schema document was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("unsupported format_version {0:?} (expected 1.x)")]
    FormatVersion(String),
    #[error("invalid provider schema at {path}: {message}")]
    Invalid { path: String, message: String },
}

type Result<T, E = ParseError> = std::result::Result<T, E>;

fn invalid(path: &str, message: impl Into<String>) -> ParseError {
    ParseError::Invalid {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// Parses a whole `providers schema -json` document: provider schemas by source address.
pub fn parse_provider_schemas(doc: &Json) -> Result<BTreeMap<String, ProviderSchema>> {
    let root = object(doc, "$")?;
    if let Some(version) = root.get("format_version") {
        let Json::String(version) = version else {
            return Err(invalid("$.format_version", "expected a string"));
        };
        if version.split('.').next() != Some("1") {
            return Err(ParseError::FormatVersion(version.clone()));
        }
    }
    let mut out = BTreeMap::new();
    if let Some(providers) = root.get("provider_schemas") {
        for (address, provider) in object(providers, "$.provider_schemas")? {
            let path = format!("$.provider_schemas[{address:?}]");
            out.insert(address.clone(), parse_provider(provider, &path)?);
        }
    }
    Ok(out)
}

/// Parses one provider's entry of `provider_schemas`.
pub fn parse_provider(json: &Json, path: &str) -> Result<ProviderSchema> {
    let map = object(json, path)?;
    let provider = match map.get("provider") {
        Some(p) => parse_schema(p, &format!("{path}.provider"))?,
        None => Schema::default(),
    };
    let schemas = |key: &str| named(map, key, path, parse_schema);
    Ok(ProviderSchema {
        provider,
        provider_meta: None,
        resources: schemas("resource_schemas")?,
        data_sources: schemas("data_source_schemas")?,
        ephemeral_resources: schemas("ephemeral_resource_schemas")?,
        list_resources: schemas("list_resource_schemas")?,
        functions: named(map, "functions", path, parse_function)?,
        capabilities: Default::default(),
    })
}

/// A map of named items under `key`, each parsed by `parse`; absent means empty.
fn named<T>(
    map: &Map<String, Json>,
    key: &str,
    path: &str,
    parse: fn(&Json, &str) -> Result<T>,
) -> Result<BTreeMap<String, T>> {
    let mut out = BTreeMap::new();
    if let Some(items) = map.get(key) {
        let path = format!("{path}.{key}");
        for (name, item) in object(items, &path)? {
            out.insert(name.clone(), parse(item, &format!("{path}[{name:?}]"))?);
        }
    }
    Ok(out)
}

fn parse_schema(json: &Json, path: &str) -> Result<Schema> {
    let map = object(json, path)?;
    // Printed as Go's uint64 of the int64 version; `as` undoes that reinterpretation.
    let version = int(map, "version", path)?.unwrap_or(0);
    let block = match map.get("block") {
        Some(b) => parse_block(b, &format!("{path}.block"))?,
        None => Block::default(),
    };
    Ok(Schema { version, block })
}

fn parse_block(json: &Json, path: &str) -> Result<Block> {
    let map = object(json, path)?;
    Ok(Block {
        attributes: named(map, "attributes", path, parse_attribute)?,
        block_types: named(map, "block_types", path, parse_nested_block)?,
        description: string(map, "description", path)?,
        description_kind: description_kind(map, path)?,
        deprecated: flag(map, "deprecated", path)?,
    })
}

fn parse_nested_block(json: &Json, path: &str) -> Result<NestedBlock> {
    let map = object(json, path)?;
    let nesting = match string(map, "nesting_mode", path)?.as_str() {
        "single" => BlockNesting::Single,
        "list" => BlockNesting::List,
        "set" => BlockNesting::Set,
        "map" => BlockNesting::Map,
        "group" => BlockNesting::Group,
        other => {
            return Err(invalid(
                path,
                format!("unknown block nesting_mode {other:?}"),
            ));
        }
    };
    let block = match map.get("block") {
        Some(b) => parse_block(b, &format!("{path}.block"))?,
        None => Block::default(),
    };
    Ok(NestedBlock {
        block,
        nesting,
        min_items: int(map, "min_items", path)?.unwrap_or(0),
        max_items: int(map, "max_items", path)?.unwrap_or(0),
    })
}

fn parse_attribute(json: &Json, path: &str) -> Result<Attribute> {
    let map = object(json, path)?;
    let ty = map
        .get("type")
        .map(|t| cty(t, &format!("{path}.type")))
        .transpose()?;
    let nested_type = map
        .get("nested_type")
        .map(|n| parse_nested_object(n, &format!("{path}.nested_type")))
        .transpose()?;
    if ty.is_some() == nested_type.is_some() {
        return Err(invalid(path, "needs exactly one of type and nested_type"));
    }
    Ok(Attribute {
        ty,
        nested_type,
        description: string(map, "description", path)?,
        description_kind: description_kind(map, path)?,
        required: flag(map, "required", path)?,
        optional: flag(map, "optional", path)?,
        computed: flag(map, "computed", path)?,
        sensitive: flag(map, "sensitive", path)?,
        deprecated: flag(map, "deprecated", path)?,
        write_only: flag(map, "write_only", path)?,
    })
}

fn parse_nested_object(json: &Json, path: &str) -> Result<NestedObject> {
    let map = object(json, path)?;
    let nesting = match string(map, "nesting_mode", path)?.as_str() {
        // Omitted only if empty, which Go's omitempty never does for a set mode; treat
        // absence like the protocol's zero value.
        "" | "single" => ObjectNesting::Single,
        "list" => ObjectNesting::List,
        "set" => ObjectNesting::Set,
        "map" => ObjectNesting::Map,
        other => {
            return Err(invalid(
                path,
                format!("unknown nested nesting_mode {other:?}"),
            ));
        }
    };
    Ok(NestedObject {
        attributes: named(map, "attributes", path, parse_attribute)?,
        nesting,
    })
}

fn parse_function(json: &Json, path: &str) -> Result<Function> {
    let map = object(json, path)?;
    let return_type = match map.get("return_type") {
        Some(t) => cty(t, &format!("{path}.return_type"))?,
        None => return Err(invalid(path, "missing return_type")),
    };
    let mut parameters = Vec::new();
    if let Some(params) = map.get("parameters") {
        let params_path = format!("{path}.parameters");
        let Json::Array(items) = params else {
            return Err(invalid(&params_path, "expected an array"));
        };
        for (i, p) in items.iter().enumerate() {
            parameters.push(parse_parameter(p, &format!("{params_path}[{i}]"))?);
        }
    }
    let variadic_parameter = map
        .get("variadic_parameter")
        .map(|p| parse_parameter(p, &format!("{path}.variadic_parameter")))
        .transpose()?;
    Ok(Function {
        parameters,
        variadic_parameter,
        return_type,
        summary: string(map, "summary", path)?,
        description: string(map, "description", path)?,
        description_kind: StringKind::Plain,
        deprecation_message: string(map, "deprecation_message", path)?,
    })
}

fn parse_parameter(json: &Json, path: &str) -> Result<Parameter> {
    let map = object(json, path)?;
    let ty = match map.get("type") {
        Some(t) => cty(t, &format!("{path}.type"))?,
        None => return Err(invalid(path, "missing type")),
    };
    Ok(Parameter {
        name: string(map, "name", path)?,
        ty,
        allow_null_value: flag(map, "is_nullable", path)?,
        allow_unknown_values: false,
        description: string(map, "description", path)?,
        description_kind: StringKind::Plain,
    })
}

fn object<'a>(json: &'a Json, path: &str) -> Result<&'a Map<String, Json>> {
    match json {
        Json::Object(map) => Ok(map),
        _ => Err(invalid(path, "expected an object")),
    }
}

fn cty(json: &Json, path: &str) -> Result<Type> {
    Type::from_json(json).map_err(|e| invalid(path, e.to_string()))
}

/// A string member; absent (Go's omitempty) means empty.
fn string(map: &Map<String, Json>, key: &str, path: &str) -> Result<String> {
    match map.get(key) {
        None => Ok(String::new()),
        Some(Json::String(s)) => Ok(s.clone()),
        Some(_) => Err(invalid(&format!("{path}.{key}"), "expected a string")),
    }
}

/// A boolean member; absent (Go's omitempty) means false.
fn flag(map: &Map<String, Json>, key: &str, path: &str) -> Result<bool> {
    match map.get(key) {
        None => Ok(false),
        Some(Json::Bool(b)) => Ok(*b),
        Some(_) => Err(invalid(&format!("{path}.{key}"), "expected a boolean")),
    }
}

/// An integer member printed through Go's `uint64()`; reinterpreted as the `i64` it came from.
fn int(map: &Map<String, Json>, key: &str, path: &str) -> Result<Option<i64>> {
    let Some(value) = map.get(key) else {
        return Ok(None);
    };
    let n = value.as_u64().map(|u| u as i64).or_else(|| value.as_i64());
    n.map(Some)
        .ok_or_else(|| invalid(&format!("{path}.{key}"), "expected an integer"))
}

fn description_kind(map: &Map<String, Json>, path: &str) -> Result<StringKind> {
    match string(map, "description_kind", path)?.as_str() {
        "" | "plain" => Ok(StringKind::Plain),
        "markdown" => Ok(StringKind::Markdown),
        other => Err(invalid(
            &format!("{path}.description_kind"),
            format!("unknown description kind {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tfjson::provider_schemas_json;
    use crate::tfjson::tests::everything_provider;

    const ADDRESS: &str = "registry.kraken.dev/kraken/fixture";

    /// `everything_provider` without the parts the JSON format cannot carry.
    fn representable() -> ProviderSchema {
        let mut schema = everything_provider();
        schema.provider_meta = None;
        schema.capabilities = Default::default();
        for function in schema.functions.values_mut() {
            function.description_kind = StringKind::Plain;
            let params = function
                .parameters
                .iter_mut()
                .chain(function.variadic_parameter.as_mut());
            for p in params {
                p.allow_unknown_values = false;
                p.description_kind = StringKind::Plain;
            }
        }
        schema
    }

    #[test]
    fn parse_inverts_render() {
        let schema = representable();
        let doc = provider_schemas_json(ADDRESS, &schema);
        let parsed = parse_provider_schemas(&doc).expect("parses");
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[ADDRESS], schema);
        // And back again, byte for byte.
        assert_eq!(provider_schemas_json(ADDRESS, &parsed[ADDRESS]), doc);
    }

    #[test]
    fn negative_versions_survive_the_uint64_wrap() {
        let mut schema = ProviderSchema::default();
        schema.resources.insert(
            "x_y".into(),
            Schema {
                version: -1,
                block: Block::default(),
            },
        );
        let doc = provider_schemas_json(ADDRESS, &schema);
        assert_eq!(
            parse_provider_schemas(&doc).expect("parses")[ADDRESS],
            schema
        );
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let doc = json!({
            "format_version": "1.0",
            "provider_schemas": {"a/b/c": {
                "provider": {"version": 0, "block": {"description_kind": "plain", "future": 1}},
                "resource_identity_schemas": {"c_x": {"version": 0, "attributes": {}}},
                "action_schemas": {},
                "resource_schemas": {"c_x": {"version": 2, "block": {
                    "attributes": {"id": {"type": "string", "computed": true,
                                          "deprecation_message": "gone"}},
                    "description_kind": "plain"}}},
            }},
        });
        let parsed = parse_provider_schemas(&doc).expect("parses");
        let resource = &parsed["a/b/c"].resources["c_x"];
        assert_eq!(resource.version, 2);
        assert!(resource.block.attributes["id"].computed);
    }

    #[test]
    fn empty_documents_parse() {
        let parsed = parse_provider_schemas(&json!({"format_version": "1.0"})).expect("parses");
        assert!(parsed.is_empty());
        let parsed =
            parse_provider_schemas(&json!({"provider_schemas": {"a/b/c": {}}})).expect("parses");
        assert_eq!(parsed["a/b/c"], ProviderSchema::default());
    }

    #[test]
    fn malformed_documents_name_the_path() {
        let attr = |a: Json| {
            json!({"provider_schemas": {"p": {"resource_schemas": {"r": {"version": 0,
                "block": {"attributes": {"a": a}}}}}}})
        };
        let cases = [
            (json!([]), "$"),
            (json!({"format_version": "2.0"}), "format_version"),
            (json!({"format_version": 1}), "$.format_version"),
            (json!({"provider_schemas": []}), "$.provider_schemas"),
            (attr(json!({"type": "strin"})), "[\"a\"].type"),
            (
                attr(json!({"type": "string", "required": "yes"})),
                ".required",
            ),
            (attr(json!({"optional": true})), "[\"a\"]"),
            (
                attr(json!({"type": "string", "nested_type": {"nesting_mode": "list"}})),
                "[\"a\"]",
            ),
            (
                attr(json!({"nested_type": {"nesting_mode": "group"}})),
                "nested_type",
            ),
            (
                attr(json!({"type": "string", "description_kind": "html"})),
                "description_kind",
            ),
        ];
        for (doc, want) in cases {
            let err = parse_provider_schemas(&doc).expect_err("must be rejected");
            assert!(
                err.to_string().contains(want),
                "{err} should mention {want}"
            );
        }
    }

    #[test]
    fn parses_the_committed_test_schemas() {
        let dir = crate::tests::manifest_dir().join("testdata/schemas");
        for name in ["random", "time", "null", "fixture"] {
            let text = std::fs::read_to_string(dir.join(format!("{name}.json"))).expect("read");
            let doc: Json = serde_json::from_str(&text).expect("json");
            let parsed = parse_provider_schemas(&doc).expect("parses");
            let (address, schema) = parsed.iter().next().expect("one provider");
            // Kraken printed these files, so rendering must give the same document back.
            assert_eq!(provider_schemas_json(address, schema), doc, "{name}");
        }
    }
}

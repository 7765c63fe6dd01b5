//! The message conversions shared by the protocol 5 and 6 adapters: dynamic values (msgpack or
//! JSON against the schema's types), diagnostics and attribute paths, and the provider schema.
//!
//! tfplugin5 and tfplugin6 are the same protocol with renamed messages, plus nested attributes
//! in 6. Rather than write the translation twice, [`proto_conversions!`] expands it once per
//! protocol module, from inside [`super::grpc::provider_adapter!`].

/// Expand the conversions for one protocol module.
///
/// `$proto` is the generated module, `$get_schema` the RPC schema errors are reported for, and
/// `$nested_type` the protocol's nested-attribute conversion (protocol 5 has none).
macro_rules! proto_conversions {
    (
        proto = $proto:ident,
        get_schema = $get_schema:ident,
        nested_type = $nested_type:path $(,)?
    ) => {
        use kraken_proto::$proto as proto;

        use crate::schema::{self as domain, Block, BlockNesting, NestedBlock, Schema, StringKind};
        use crate::{Diagnostic, ProviderError, Result, Severity};
        use kraken_value::{AttrPath, PathStep, Type, Value, json, msgpack};

        fn encode(
            rpc: &'static str,
            what: &str,
            v: &Value,
            ty: &Type,
        ) -> Result<proto::DynamicValue> {
            let bytes = msgpack::encode(v, ty).map_err(|source| ProviderError::Encode {
                rpc,
                what: what.to_string(),
                source,
            })?;
            Ok(proto::DynamicValue {
                msgpack: bytes,
                json: Vec::new(),
            })
        }

        fn decode(
            rpc: &'static str,
            what: &str,
            v: Option<proto::DynamicValue>,
            ty: &Type,
        ) -> Result<Value> {
            let err = |source: Box<dyn std::error::Error + Send + Sync>| ProviderError::Decode {
                rpc,
                what: what.to_string(),
                source,
            };
            match v {
                None => Ok(Value::Null),
                Some(dv) if !dv.msgpack.is_empty() => {
                    msgpack::decode(&dv.msgpack, ty).map_err(|e| err(Box::new(e)))
                }
                Some(dv) if !dv.json.is_empty() => {
                    json::decode_json_bytes(&dv.json, ty).map_err(|e| err(Box::new(e)))
                }
                Some(_) => Ok(Value::Null),
            }
        }

        fn attribute_path(path: proto::AttributePath) -> AttrPath {
            use proto::attribute_path::step::Selector;
            let steps = path
                .steps
                .into_iter()
                .filter_map(|s| s.selector)
                .map(|sel| match sel {
                    Selector::AttributeName(n) => PathStep::Attr(n),
                    Selector::ElementKeyString(k) => PathStep::Key(k),
                    Selector::ElementKeyInt(i) => PathStep::Index(i),
                })
                .collect();
            AttrPath { steps }
        }

        fn diagnostics(list: Vec<proto::Diagnostic>) -> Vec<Diagnostic> {
            list.into_iter()
                .map(|d| Diagnostic {
                    severity: if d.severity == proto::diagnostic::Severity::Warning as i32 {
                        Severity::Warning
                    } else {
                        // INVALID counts as an error: an unclassified problem must not pass.
                        Severity::Error
                    },
                    summary: d.summary,
                    detail: d.detail,
                    attribute: d.attribute.map(attribute_path),
                })
                .collect()
        }

        pub(super) fn string_kind(kind: i32) -> StringKind {
            if kind == proto::StringKind::Markdown as i32 {
                StringKind::Markdown
            } else {
                StringKind::Plain
            }
        }

        pub(super) fn parse_type(rpc: &'static str, what: &str, bytes: &[u8]) -> Result<Type> {
            Type::from_json_bytes(bytes).map_err(|e| ProviderError::Decode {
                rpc,
                what: what.to_string(),
                source: Box::new(e),
            })
        }

        fn schema(s: proto::Schema) -> Result<Schema> {
            Ok(Schema {
                version: s.version,
                block: block(s.block.unwrap_or_default())?,
            })
        }

        fn block(b: proto::schema::Block) -> Result<Block> {
            let mut out = Block {
                description: b.description,
                description_kind: string_kind(b.description_kind),
                deprecated: b.deprecated,
                ..Default::default()
            };
            for a in b.attributes {
                let (name, attr) = attribute(a)?;
                out.attributes.insert(name, attr);
            }
            for nb in b.block_types {
                use proto::schema::nested_block::NestingMode;
                let nesting = match NestingMode::try_from(nb.nesting) {
                    Ok(NestingMode::Single) => BlockNesting::Single,
                    Ok(NestingMode::List) => BlockNesting::List,
                    Ok(NestingMode::Set) => BlockNesting::Set,
                    Ok(NestingMode::Map) => BlockNesting::Map,
                    Ok(NestingMode::Group) => BlockNesting::Group,
                    _ => {
                        return Err(ProviderError::Protocol {
                            rpc: stringify!($get_schema),
                            reason: format!(
                                "block type {:?} has invalid nesting mode {}",
                                nb.type_name, nb.nesting
                            ),
                        });
                    }
                };
                out.block_types.insert(
                    nb.type_name,
                    NestedBlock {
                        block: block(nb.block.unwrap_or_default())?,
                        nesting,
                        min_items: nb.min_items,
                        max_items: nb.max_items,
                    },
                );
            }
            Ok(out)
        }

        pub(super) fn attribute(
            a: proto::schema::Attribute,
        ) -> Result<(String, domain::Attribute)> {
            let nested = $nested_type(&a)?;
            let ty = if a.r#type.is_empty() {
                None
            } else {
                Some(parse_type(
                    stringify!($get_schema),
                    &format!("the type of attribute {:?}", a.name),
                    &a.r#type,
                )?)
            };
            Ok((
                a.name,
                domain::Attribute {
                    ty,
                    nested_type: nested,
                    description: a.description,
                    description_kind: string_kind(a.description_kind),
                    required: a.required,
                    optional: a.optional,
                    computed: a.computed,
                    sensitive: a.sensitive,
                    deprecated: a.deprecated,
                    write_only: a.write_only,
                },
            ))
        }

        fn function(f: proto::Function) -> Result<domain::Function> {
            let rpc = stringify!($get_schema);
            let param = |p: proto::function::Parameter| -> Result<domain::Parameter> {
                Ok(domain::Parameter {
                    ty: parse_type(rpc, &format!("function parameter {:?}", p.name), &p.r#type)?,
                    name: p.name,
                    allow_null_value: p.allow_null_value,
                    allow_unknown_values: p.allow_unknown_values,
                    description: p.description,
                    description_kind: string_kind(p.description_kind),
                })
            };
            Ok(domain::Function {
                parameters: f.parameters.into_iter().map(param).collect::<Result<_>>()?,
                variadic_parameter: f.variadic_parameter.map(param).transpose()?,
                return_type: match f.r#return {
                    Some(r) => parse_type(rpc, "function return type", &r.r#type)?,
                    None => Type::Dynamic,
                },
                summary: f.summary,
                description: f.description,
                description_kind: string_kind(f.description_kind),
                deprecation_message: f.deprecation_message,
            })
        }
    };
}

pub(crate) use proto_conversions;

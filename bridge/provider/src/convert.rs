//! The conversions between one protocol's prost messages and the neutral ones of
//! [`super::wire`] and the domain's: diagnostics and attribute paths, dynamic values, the
//! provider schema, and each RPC's request and response.
//!
//! tfplugin5 and tfplugin6 are the same protocol with renamed messages, plus nested attributes
//! in 6: the messages Kraken uses have the same fields under the same names in both, but are
//! distinct Rust types. These conversions only move fields, so rather than write each one
//! twice, [`proto_conversions!`] expands them once per protocol module (in [`super::v5`] and
//! [`super::v6`]). Only conversions live here: what the adapter does with the messages is
//! ordinary generic Rust in [`super::grpc`].

/// Expand the conversions for one protocol module.
///
/// `$proto` is the generated module; `get_schema` the RPC schema errors are reported for;
/// `nested_type` the protocol's nested-attribute conversion (protocol 5 has none); the rest
/// name the message modules of the RPCs the protocols name differently.
macro_rules! proto_conversions {
    (
        proto = $proto:ident,
        get_schema = $get_schema:ident,
        nested_type = $nested_type:path,
        validate_provider = $validate_provider:ident,
        validate_resource = $validate_resource:ident,
        validate_data = $validate_data:ident,
        configure = $configure:ident,
        stop = $stop:ident $(,)?
    ) => {
        use kraken_proto::$proto as proto;

        use crate::schema::{self as domain, Block, BlockNesting, NestedBlock, Schema, StringKind};
        use crate::wire::{self, parse_type};
        use crate::{Diagnostic, ProviderError, Result, Severity};
        use kraken_value::{AttrPath, PathStep, Type};

        fn malformed(e: prost::DecodeError) -> ProviderError {
            crate::schema_store::malformed(e)
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

        impl From<proto::Diagnostic> for Diagnostic {
            fn from(d: proto::Diagnostic) -> Self {
                Diagnostic {
                    severity: if d.severity == proto::diagnostic::Severity::Warning as i32 {
                        Severity::Warning
                    } else {
                        // INVALID counts as an error: an unclassified problem must not pass.
                        Severity::Error
                    },
                    summary: d.summary,
                    detail: d.detail,
                    attribute: d.attribute.map(attribute_path),
                }
            }
        }

        fn diagnostics(list: Vec<proto::Diagnostic>) -> Vec<Diagnostic> {
            list.into_iter().map(Diagnostic::from).collect()
        }

        impl From<wire::Dynamic> for proto::DynamicValue {
            fn from(v: wire::Dynamic) -> Self {
                proto::DynamicValue {
                    msgpack: v.msgpack,
                    json: v.json,
                }
            }
        }

        impl From<proto::DynamicValue> for wire::Dynamic {
            fn from(v: proto::DynamicValue) -> Self {
                wire::Dynamic {
                    msgpack: v.msgpack,
                    json: v.json,
                }
            }
        }

        fn dynamic(v: Option<proto::DynamicValue>) -> Option<wire::Dynamic> {
            v.map(wire::Dynamic::from)
        }

        // ---- the schema answer's parts ----

        fn decode_diagnostic(bytes: bytes::Bytes) -> Result<Diagnostic> {
            use prost::Message as _;
            Ok(proto::Diagnostic::decode(bytes).map_err(malformed)?.into())
        }

        fn decode_capabilities(bytes: &[u8]) -> Result<domain::ServerCapabilities> {
            use prost::Message as _;
            let caps = proto::ServerCapabilities::decode(bytes).map_err(malformed)?;
            Ok(domain::ServerCapabilities {
                plan_destroy: caps.plan_destroy,
                get_provider_schema_optional: caps.get_provider_schema_optional,
                move_resource_state: caps.move_resource_state,
            })
        }

        fn decode_function(bytes: bytes::Bytes) -> Result<domain::Function> {
            use prost::Message as _;
            function(proto::Function::decode(bytes).map_err(malformed)?)
        }

        fn decode_schema(bytes: &[u8]) -> Result<Schema> {
            use prost::Message as _;
            let s = proto::Schema::decode(bytes).map_err(malformed)?;
            Ok(Schema {
                version: s.version,
                block: block(s.block.unwrap_or_default())?,
            })
        }

        fn string_kind(kind: i32) -> StringKind {
            if kind == proto::StringKind::Markdown as i32 {
                StringKind::Markdown
            } else {
                StringKind::Plain
            }
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

        fn attribute(a: proto::schema::Attribute) -> Result<(String, domain::Attribute)> {
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

        // ---- requests ----
        // Each ends in `..Default::default()` even where every field is set today, so that
        // fields a newer protocol minor adds keep their zero value without touching this code.

        #[allow(clippy::needless_update)]
        impl From<wire::ProviderConfig> for proto::$validate_provider::Request {
            fn from(r: wire::ProviderConfig) -> Self {
                Self {
                    config: Some(r.config.into()),
                    ..Default::default()
                }
            }
        }

        #[allow(clippy::needless_update)]
        impl From<wire::TypedConfig> for proto::$validate_resource::Request {
            fn from(r: wire::TypedConfig) -> Self {
                Self {
                    type_name: r.type_name,
                    config: Some(r.config.into()),
                    ..Default::default()
                }
            }
        }

        #[allow(clippy::needless_update)]
        impl From<wire::TypedConfig> for proto::$validate_data::Request {
            fn from(r: wire::TypedConfig) -> Self {
                Self {
                    type_name: r.type_name,
                    config: Some(r.config.into()),
                    ..Default::default()
                }
            }
        }

        #[allow(clippy::needless_update)]
        impl From<wire::Configure> for proto::$configure::Request {
            fn from(r: wire::Configure) -> Self {
                Self {
                    terraform_version: r.terraform_version,
                    config: Some(r.config.into()),
                    ..Default::default()
                }
            }
        }

        #[allow(clippy::needless_update)]
        impl From<wire::Upgrade> for proto::upgrade_resource_state::Request {
            fn from(r: wire::Upgrade) -> Self {
                Self {
                    type_name: r.type_name,
                    version: r.version,
                    raw_state: Some(proto::RawState {
                        json: r.raw_state_json,
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            }
        }

        #[allow(clippy::needless_update)]
        impl From<wire::Read> for proto::read_resource::Request {
            fn from(r: wire::Read) -> Self {
                Self {
                    type_name: r.type_name,
                    current_state: Some(r.current_state.into()),
                    private: r.private,
                    ..Default::default()
                }
            }
        }

        #[allow(clippy::needless_update)]
        impl From<wire::Plan> for proto::plan_resource_change::Request {
            fn from(r: wire::Plan) -> Self {
                Self {
                    type_name: r.type_name,
                    prior_state: Some(r.prior_state.into()),
                    proposed_new_state: Some(r.proposed_new_state.into()),
                    config: Some(r.config.into()),
                    prior_private: r.prior_private,
                    ..Default::default()
                }
            }
        }

        #[allow(clippy::needless_update)]
        impl From<wire::Apply> for proto::apply_resource_change::Request {
            fn from(r: wire::Apply) -> Self {
                Self {
                    type_name: r.type_name,
                    prior_state: Some(r.prior_state.into()),
                    planned_state: Some(r.planned_state.into()),
                    config: Some(r.config.into()),
                    planned_private: r.planned_private,
                    ..Default::default()
                }
            }
        }

        #[allow(clippy::needless_update)]
        impl From<wire::Import> for proto::import_resource_state::Request {
            fn from(r: wire::Import) -> Self {
                Self {
                    type_name: r.type_name,
                    id: r.id,
                    identity: r.identity.map(|v| proto::ResourceIdentityData {
                        identity_data: Some(v.into()),
                    }),
                    ..Default::default()
                }
            }
        }

        #[allow(clippy::needless_update)]
        impl From<wire::TypedConfig> for proto::read_data_source::Request {
            fn from(r: wire::TypedConfig) -> Self {
                Self {
                    type_name: r.type_name,
                    config: Some(r.config.into()),
                    ..Default::default()
                }
            }
        }

        #[allow(clippy::needless_update)]
        impl From<wire::List> for proto::list_resource::Request {
            fn from(r: wire::List) -> Self {
                Self {
                    type_name: r.type_name,
                    config: Some(r.config.into()),
                    include_resource_object: r.include_resource_object,
                    limit: r.limit,
                    ..Default::default()
                }
            }
        }

        // ---- responses ----

        impl From<proto::$validate_provider::Response> for wire::Checked {
            fn from(r: proto::$validate_provider::Response) -> Self {
                wire::Checked {
                    diagnostics: diagnostics(r.diagnostics),
                }
            }
        }

        impl From<proto::$validate_resource::Response> for wire::Checked {
            fn from(r: proto::$validate_resource::Response) -> Self {
                wire::Checked {
                    diagnostics: diagnostics(r.diagnostics),
                }
            }
        }

        impl From<proto::$validate_data::Response> for wire::Checked {
            fn from(r: proto::$validate_data::Response) -> Self {
                wire::Checked {
                    diagnostics: diagnostics(r.diagnostics),
                }
            }
        }

        impl From<proto::$configure::Response> for wire::Checked {
            fn from(r: proto::$configure::Response) -> Self {
                wire::Checked {
                    diagnostics: diagnostics(r.diagnostics),
                }
            }
        }

        impl From<proto::upgrade_resource_state::Response> for wire::Upgraded {
            fn from(r: proto::upgrade_resource_state::Response) -> Self {
                wire::Upgraded {
                    upgraded_state: dynamic(r.upgraded_state),
                    diagnostics: diagnostics(r.diagnostics),
                }
            }
        }

        impl From<proto::read_resource::Response> for wire::ReadAnswer {
            fn from(r: proto::read_resource::Response) -> Self {
                wire::ReadAnswer {
                    new_state: dynamic(r.new_state),
                    private: r.private,
                    diagnostics: diagnostics(r.diagnostics),
                }
            }
        }

        impl From<proto::plan_resource_change::Response> for wire::Planned {
            fn from(r: proto::plan_resource_change::Response) -> Self {
                wire::Planned {
                    planned_state: dynamic(r.planned_state),
                    requires_replace: r.requires_replace.into_iter().map(attribute_path).collect(),
                    planned_private: r.planned_private,
                    diagnostics: diagnostics(r.diagnostics),
                    legacy_type_system: r.legacy_type_system,
                }
            }
        }

        impl From<proto::apply_resource_change::Response> for wire::Applied {
            fn from(r: proto::apply_resource_change::Response) -> Self {
                wire::Applied {
                    new_state: dynamic(r.new_state),
                    private: r.private,
                    diagnostics: diagnostics(r.diagnostics),
                    legacy_type_system: r.legacy_type_system,
                }
            }
        }

        impl From<proto::import_resource_state::Response> for wire::Imported {
            fn from(r: proto::import_resource_state::Response) -> Self {
                let imported = r
                    .imported_resources
                    .into_iter()
                    .map(|i| wire::ImportedObject {
                        type_name: i.type_name,
                        state: dynamic(i.state),
                        private: i.private,
                    });
                wire::Imported {
                    imported: imported.collect(),
                    diagnostics: diagnostics(r.diagnostics),
                }
            }
        }

        impl From<proto::get_resource_identity_schemas::Response> for wire::IdentitySchemas {
            fn from(r: proto::get_resource_identity_schemas::Response) -> Self {
                let schema = |s: proto::ResourceIdentitySchema| wire::IdentitySchema {
                    version: s.version,
                    attributes: s
                        .identity_attributes
                        .into_iter()
                        .map(|a| wire::IdentityAttribute {
                            name: a.name,
                            ty: a.r#type,
                            required_for_import: a.required_for_import,
                        })
                        .collect(),
                };
                wire::IdentitySchemas {
                    schemas: r
                        .identity_schemas
                        .into_iter()
                        .map(|(n, s)| (n, schema(s)))
                        .collect(),
                    diagnostics: diagnostics(r.diagnostics),
                }
            }
        }

        impl From<proto::read_data_source::Response> for wire::DataRead {
            fn from(r: proto::read_data_source::Response) -> Self {
                wire::DataRead {
                    state: dynamic(r.state),
                    diagnostics: diagnostics(r.diagnostics),
                }
            }
        }

        impl From<proto::list_resource::Event> for wire::ListEvent {
            fn from(e: proto::list_resource::Event) -> Self {
                wire::ListEvent {
                    display_name: e.display_name,
                    resource_object: dynamic(e.resource_object),
                    diagnostics: diagnostics(e.diagnostic),
                }
            }
        }

        impl From<proto::$stop::Response> for wire::Stopped {
            fn from(r: proto::$stop::Response) -> Self {
                wire::Stopped { error: r.error }
            }
        }
    };
}

pub(crate) use proto_conversions;

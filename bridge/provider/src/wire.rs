//! The plugin protocol's messages in protocol-neutral form: what the generic adapter
//! ([`super::grpc`]) builds and reads, and what each protocol's prost messages convert from and
//! to ([`super::convert`]).
//!
//! Values stay encoded here, as on the wire: encoding a value needs its schema type, which the
//! adapter holds, so a conversion only moves fields. Diagnostics and attribute paths are
//! already the domain's: they need no schema.

use super::{Diagnostic, ProviderError, Result};
use kraken_value::{AttrPath, Type, Value, json, msgpack};

/// A `DynamicValue`: a value as msgpack (what Kraken sends) or JSON (what a provider may send).
#[derive(Debug, Default)]
pub struct Dynamic {
    pub msgpack: Vec<u8>,
    pub json: Vec<u8>,
}

/// `value` encoded against `ty` for `rpc` (`what` names it in the error).
pub fn encode(rpc: &'static str, what: &str, value: &Value, ty: &Type) -> Result<Dynamic> {
    let msgpack = msgpack::encode(value, ty).map_err(|source| ProviderError::Encode {
        rpc,
        what: what.to_string(),
        source,
    })?;
    Ok(Dynamic {
        msgpack,
        json: Vec::new(),
    })
}

/// The value a provider sent, decoded against `ty`; absent or empty is null.
pub fn decode(rpc: &'static str, what: &str, value: Option<Dynamic>, ty: &Type) -> Result<Value> {
    let err = |source: Box<dyn std::error::Error + Send + Sync>| ProviderError::Decode {
        rpc,
        what: what.to_string(),
        source,
    };
    match value {
        None => Ok(Value::Null),
        Some(v) if !v.msgpack.is_empty() => {
            msgpack::decode(&v.msgpack, ty).map_err(|e| err(Box::new(e)))
        }
        Some(v) if !v.json.is_empty() => {
            json::decode_json_bytes(&v.json, ty).map_err(|e| err(Box::new(e)))
        }
        Some(_) => Ok(Value::Null),
    }
}

/// A JSON-encoded cty type of a schema or identity answer.
pub fn parse_type(rpc: &'static str, what: &str, bytes: &[u8]) -> Result<Type> {
    Type::from_json_bytes(bytes).map_err(|e| ProviderError::Decode {
        rpc,
        what: what.to_string(),
        source: Box::new(e),
    })
}

/// `ValidateProviderConfig` (tfplugin5 `PrepareProviderConfig`).
pub struct ProviderConfig {
    pub config: Dynamic,
}

/// A configuration of one type: `ValidateResourceConfig`, `ValidateDataResourceConfig` and
/// `ReadDataSource` (tfplugin5 `ValidateResourceTypeConfig`, `ValidateDataSourceConfig`).
pub struct TypedConfig {
    pub type_name: String,
    pub config: Dynamic,
}

/// `ConfigureProvider` (tfplugin5 `Configure`).
pub struct Configure {
    pub terraform_version: String,
    pub config: Dynamic,
}

/// `UpgradeResourceState`: the stored state as cty JSON.
pub struct Upgrade {
    pub type_name: String,
    pub version: i64,
    pub raw_state_json: Vec<u8>,
}

/// `ReadResource`.
pub struct Read {
    pub type_name: String,
    pub current_state: Dynamic,
    pub private: Vec<u8>,
}

/// `PlanResourceChange`.
pub struct Plan {
    pub type_name: String,
    pub prior_state: Dynamic,
    pub proposed_new_state: Dynamic,
    pub config: Dynamic,
    pub prior_private: Vec<u8>,
}

/// `ApplyResourceChange`.
pub struct Apply {
    pub type_name: String,
    pub prior_state: Dynamic,
    pub planned_state: Dynamic,
    pub config: Dynamic,
    pub planned_private: Vec<u8>,
}

/// `ImportResourceState`, by id or by identity (`id` empty).
pub struct Import {
    pub type_name: String,
    pub id: String,
    pub identity: Option<Dynamic>,
}

/// `ListResource`.
pub struct List {
    pub type_name: String,
    pub config: Dynamic,
    pub include_resource_object: bool,
    pub limit: i64,
}

/// The answer of an RPC that answers with diagnostics only (the validations, configure).
pub struct Checked {
    pub diagnostics: Vec<Diagnostic>,
}

/// `UpgradeResourceState`'s answer.
pub struct Upgraded {
    pub upgraded_state: Option<Dynamic>,
    pub diagnostics: Vec<Diagnostic>,
}

/// `ReadResource`'s answer.
pub struct ReadAnswer {
    pub new_state: Option<Dynamic>,
    pub private: Vec<u8>,
    pub diagnostics: Vec<Diagnostic>,
}

/// `PlanResourceChange`'s answer.
pub struct Planned {
    pub planned_state: Option<Dynamic>,
    pub requires_replace: Vec<AttrPath>,
    pub planned_private: Vec<u8>,
    pub diagnostics: Vec<Diagnostic>,
    pub legacy_type_system: bool,
}

/// `ApplyResourceChange`'s answer.
pub struct Applied {
    pub new_state: Option<Dynamic>,
    pub private: Vec<u8>,
    pub diagnostics: Vec<Diagnostic>,
    pub legacy_type_system: bool,
}

/// `ImportResourceState`'s answer.
pub struct Imported {
    pub imported: Vec<ImportedObject>,
    pub diagnostics: Vec<Diagnostic>,
}

/// One object an import found.
pub struct ImportedObject {
    pub type_name: String,
    pub state: Option<Dynamic>,
    pub private: Vec<u8>,
}

/// `GetResourceIdentitySchemas`' answer.
pub struct IdentitySchemas {
    pub schemas: Vec<(String, IdentitySchema)>,
    pub diagnostics: Vec<Diagnostic>,
}

/// One type's identity schema, its attribute types still JSON.
pub struct IdentitySchema {
    pub version: i64,
    pub attributes: Vec<IdentityAttribute>,
}

pub struct IdentityAttribute {
    pub name: String,
    pub ty: Vec<u8>,
    pub required_for_import: bool,
}

/// `ReadDataSource`'s answer.
pub struct DataRead {
    pub state: Option<Dynamic>,
    pub diagnostics: Vec<Diagnostic>,
}

/// One event of `ListResource`'s answer stream.
pub struct ListEvent {
    pub display_name: String,
    pub resource_object: Option<Dynamic>,
    pub diagnostics: Vec<Diagnostic>,
}

/// `StopProvider`'s answer (tfplugin5 `Stop`): the provider's error text, empty when it
/// stopped cleanly.
pub struct Stopped {
    pub error: String,
}

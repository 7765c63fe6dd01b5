//! The plugin host: Terraform providers behind one protocol-neutral trait.
//!
//! [`Plugin`] speaks Kraken's domain types ([`Value`], [`ProviderSchema`], [`Diagnostic`]);
//! one generic adapter (`grpc::Adapter`) translates to and from the gRPC protocol, over a
//! crate-private `Protocol` trait implemented once for tfplugin5 (`v5`) and once for tfplugin6
//! (`v6`), so prost types never leave this crate. [`launch`] starts an unmodified provider binary with go-plugin's
//! handshake (AutoMTLS by default) and hands back a connected [`PluginClient`].
//!
//! Error model (as in OpenTofu's `providers.Interface`): what the provider says about the
//! request — validation errors, apply failures — comes back as [`Diagnostic`]s inside an `Ok`
//! response. `Err(ProviderError)` means the conversation itself failed: transport, a crashed
//! process, or a message we could not decode. A crashed provider therefore never produces an
//! `Ok`, so a lost apply is never mistaken for a successful one.

mod channel;
mod client;
mod convert;
mod deadline;
mod dial;
pub mod env;
pub mod fake;
mod grpc;
pub mod handshake;
pub mod host;
pub mod identity;
pub mod launch;
pub mod lifecycle;
pub mod observe;
pub mod pins;
pub mod pool;
pub mod proposed;
mod protocol;
pub mod remote;
pub mod resolve;
mod rpc;
pub mod schema_cache;
mod schema_store;
mod stdio;
pub mod tls;
mod v5;
mod v6;
mod wire;

use std::fmt;

use async_trait::async_trait;

pub use client::PluginClient;
pub use deadline::Deadlines;
pub use host::ProviderHost;
pub use identity::{IdentitySchema, IdentitySchemas, ImportBy};
pub use kraken_codegen::schema;
pub use launch::{LaunchError, LaunchOptions, Via, launch};
pub use observe::RpcObserver;
pub use schema::ProviderSchema;

use kraken_value::{AttrPath, Value};

/// The `terraform_version` Kraken reports to providers in `Configure`. Providers use it only
/// for log lines and user agents; a recent 1.x keeps version checks in providers happy.
pub const REPORTED_TERRAFORM_VERSION: &str = "1.13.0";

/// The plugin protocol major versions Kraken speaks, in order of preference.
pub const SUPPORTED_PROTOCOLS: [u32; 2] = [6, 5];

/// Which of a schema's maps a type name is looked up in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TypeOf {
    Resource,
    DataSource,
    ListResource,
    EphemeralResource,
}

impl TypeOf {
    pub fn what(self) -> &'static str {
        match self {
            TypeOf::Resource => "resource",
            TypeOf::DataSource => "data source",
            TypeOf::ListResource => "list resource",
            TypeOf::EphemeralResource => "ephemeral resource",
        }
    }
}

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// A message from the provider about a request: the data half of the error model.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub summary: String,
    pub detail: String,
    /// The attribute the diagnostic is about, in Terraform attribute names.
    pub attribute: Option<AttrPath>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{level}: {}", self.summary)?;
        if let Some(path) = &self.attribute {
            write!(f, " (at {path})")?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// Helpers on a list of diagnostics.
pub trait DiagnosticsExt {
    fn has_errors(&self) -> bool;
    /// Every error, one per line, for condition messages and CLI output.
    fn error_summary(&self) -> String;
}

impl DiagnosticsExt for [Diagnostic] {
    fn has_errors(&self) -> bool {
        self.iter().any(|d| d.severity == Severity::Error)
    }

    fn error_summary(&self) -> String {
        self.iter()
            .filter(|d| d.severity == Severity::Error)
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Failures of the conversation with a provider (never the provider's verdict on a request).
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("provider process exited during {rpc}")]
    Crashed { rpc: &'static str },
    /// No answer by the RPC's deadline: the process was stopped and killed, and a fresh one
    /// serves the next request. Whether the provider acted is unknown (like a crash).
    #[error("{rpc} got no answer within {after:?}; the provider was stopped and will be restarted")]
    Timeout {
        rpc: &'static str,
        after: std::time::Duration,
    },
    #[error("{rpc} failed: {status}")]
    Rpc {
        rpc: &'static str,
        status: Box<tonic::Status>,
    },
    #[error("could not encode {what} for {rpc}")]
    Encode {
        rpc: &'static str,
        what: String,
        #[source]
        source: kraken_value::msgpack::EncodeError,
    },
    #[error("could not decode {what} from {rpc}")]
    Decode {
        rpc: &'static str,
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("provider has no {kind} type named {type_name:?}")]
    UnknownType {
        kind: &'static str,
        type_name: String,
    },
    #[error("provider could not be started")]
    Launch(#[source] Box<launch::LaunchError>),
    #[error("restarted provider rejected its configuration: {0}")]
    Reconfigure(String),
    #[error("provider did not return a schema: {0}")]
    Schema(String),
    #[error("the provider's answer to {rpc} is malformed: {reason}")]
    Protocol { rpc: &'static str, reason: String },
}

pub type Result<T, E = ProviderError> = std::result::Result<T, E>;

/// Request to read the live object behind a resource's state (`ReadResource`).
#[derive(Debug, Clone)]
pub struct ReadRequest {
    pub type_name: String,
    pub current_state: Value,
    pub private: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct ReadResponse {
    /// `Value::Null` means the object is gone.
    pub new_state: Value,
    pub private: Vec<u8>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Request to plan a change (`PlanResourceChange`). A null `config` plans a destroy.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    pub type_name: String,
    pub prior_state: Value,
    pub proposed_new_state: Value,
    pub config: Value,
    pub prior_private: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct PlanResponse {
    pub planned_state: Value,
    /// Attribute paths whose change forces the object to be replaced.
    pub requires_replace: Vec<AttrPath>,
    pub planned_private: Vec<u8>,
    pub diagnostics: Vec<Diagnostic>,
    /// The provider is on the legacy SDK and may return slightly inconsistent plans.
    pub legacy_type_system: bool,
}

/// Request to carry out a planned change (`ApplyResourceChange`).
#[derive(Debug, Clone)]
pub struct ApplyRequest {
    pub type_name: String,
    pub prior_state: Value,
    pub planned_state: Value,
    pub config: Value,
    pub planned_private: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct ApplyResponse {
    pub new_state: Value,
    pub private: Vec<u8>,
    pub diagnostics: Vec<Diagnostic>,
    pub legacy_type_system: bool,
}

/// One object found by `ImportResourceState`.
#[derive(Debug, Clone)]
pub struct ImportedResource {
    pub type_name: String,
    pub state: Value,
    pub private: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct ImportResponse {
    pub imported: Vec<ImportedResource>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Request to upgrade stored state written under an older schema version.
#[derive(Debug, Clone)]
pub struct UpgradeRequest {
    pub type_name: String,
    pub version: i64,
    /// The state as cty JSON, exactly as it was stored.
    pub raw_state_json: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct UpgradeResponse {
    pub upgraded_state: Value,
    pub diagnostics: Vec<Diagnostic>,
}

#[derive(Debug, Clone)]
pub struct ReadDataResponse {
    pub state: Value,
    pub diagnostics: Vec<Diagnostic>,
}

/// A `ListResource` request (protocol 5.10 / 6.10): the objects of the list resource
/// `type_name` that `config` (a value of its list resource schema) selects.
#[derive(Debug, Clone)]
pub struct ListRequest {
    pub type_name: String,
    pub config: Value,
    /// Ask for each object's full state, not only its identity.
    pub include_resource_object: bool,
    /// Stop after this many objects.
    pub limit: i64,
}

/// One object a list found.
#[derive(Debug, Clone)]
pub struct Listed {
    pub display_name: String,
    /// Its state, when asked for (a value of the resource type of the same name).
    pub resource_object: Option<Value>,
}

#[derive(Debug, Clone)]
pub struct ListResponse {
    pub items: Vec<Listed>,
    pub diagnostics: Vec<Diagnostic>,
}

/// A running Terraform provider plugin, whatever protocol it speaks. (Named `Plugin` so that
/// `Provider` means one thing in this crate: the cluster-scoped kind in [`kraken_core_kinds`].)
///
/// Values are Kraken [`Value`]s conforming to the schema the provider itself declared; the
/// adapter encodes them with the types from that schema, which it fetches once and caches.
#[async_trait]
pub trait Plugin: Send + Sync {
    /// The plugin protocol major version (5 or 6) negotiated at launch.
    fn protocol_version(&self) -> u32;

    /// The provider's whole schema. Fetched once; later calls return the cached copy (a
    /// process serving resources keeps its types encoded and decodes them all for this call).
    async fn schema(&self) -> Result<std::sync::Arc<ProviderSchema>>;

    /// The schema with the provider block and those of `wanted`'s types the provider has:
    /// what serving a type needs. Cheaper than [`Plugin::schema`] on a process that serves
    /// resources, which decodes a type only when first asked about it (hashicorp/aws has
    /// 2,300; decoded whole they take about 120 MiB).
    async fn schema_for(
        &self,
        wanted: &[(TypeOf, &str)],
    ) -> Result<std::sync::Arc<ProviderSchema>> {
        let _ = wanted;
        self.schema().await
    }

    async fn validate_provider_config(&self, config: &Value) -> Result<Vec<Diagnostic>>;

    async fn validate_resource_config(
        &self,
        type_name: &str,
        config: &Value,
    ) -> Result<Vec<Diagnostic>>;

    async fn validate_data_source_config(
        &self,
        type_name: &str,
        config: &Value,
    ) -> Result<Vec<Diagnostic>>;

    /// Configure the provider. `terraform_version` is what the provider sees as the caller.
    async fn configure(&self, terraform_version: &str, config: &Value) -> Result<Vec<Diagnostic>>;

    async fn upgrade_resource_state(&self, req: UpgradeRequest) -> Result<UpgradeResponse>;

    async fn read_resource(&self, req: ReadRequest) -> Result<ReadResponse>;

    async fn plan_resource_change(&self, req: PlanRequest) -> Result<PlanResponse>;

    async fn apply_resource_change(&self, req: ApplyRequest) -> Result<ApplyResponse>;

    /// `ImportResourceState` of the object `by` names: by import id, or by resource identity
    /// (refused before the call when the provider declares none for the type, or `by` does not
    /// fit it).
    async fn import_resource_state(&self, type_name: &str, by: &ImportBy)
    -> Result<ImportResponse>;

    /// `GetResourceIdentitySchemas`, fetched once: the resource types that have an identity.
    /// Empty for a provider that declares none, or that predates them (the RPC unimplemented).
    async fn identity_schemas(&self) -> Result<std::sync::Arc<IdentitySchemas>> {
        Ok(std::sync::Arc::default())
    }

    async fn read_data_source(&self, type_name: &str, config: &Value) -> Result<ReadDataResponse>;

    /// `ListResource`: the objects a list resource finds (providers that declare list
    /// resources in their schema; see [`ProviderSchema::list_resources`]).
    async fn list_resource(&self, req: ListRequest) -> Result<ListResponse>;

    /// Ask the provider to cancel in-flight work (`StopProvider`). Returns the provider's error
    /// text, empty when it stopped cleanly.
    async fn stop(&self) -> Result<String>;
}

//! Generated bindings for the gRPC protocols Kraken speaks to unmodified
//! Terraform provider binaries. This crate contains no logic: only the prost
//! messages and tonic clients/servers produced at build time from the
//! `.proto` files in this crate's `proto/` directory.
//!
//! Modules:
//!
//! - [`tfplugin5`]: Terraform plugin protocol 5.10 (package `tfplugin5`,
//!   services `Provider` and `Provisioner`), used by SDKv2-era providers.
//! - [`tfplugin6`]: Terraform plugin protocol 6.10 (package `tfplugin6`,
//!   service `Provider`), used by plugin-framework providers.
//! - [`plugin`]: HashiCorp go-plugin's side services (package `plugin`):
//!   `GRPCController` (graceful `Shutdown`), `GRPCStdio` (forwarded plugin
//!   stdout/stderr) and `GRPCBroker` (connection brokering).
//!
//! Protocol 5.10/6.10 are the versions that Terraform v1.14 shipped with
//! (resource identity, list resources, actions, `GenerateResourceConfig`, and
//! for protocol 6 the state store RPCs), plus the additive
//! `deprecation_message` schema fields published later under the same
//! version number. The `.proto` files are written for Kraken but are
//! wire compatible with the upstream definitions: every package, service,
//! RPC, message, field name, field number and enum value matches.
//!
//! Generated code layout (standard prost/tonic naming): messages nested in a
//! proto message live in a snake-case module, e.g.
//! `tfplugin6::plan_resource_change::Response`; clients are
//! `tfplugin6::provider_client::ProviderClient` and servers
//! `tfplugin6::provider_server::{Provider, ProviderServer}`. Server traits
//! are generated with default method bodies that return
//! `Status::unimplemented`, so test fakes implement only what they need;
//! server-streaming methods return `tonic::codegen::BoxStream<T>`.
//!
//! `google.protobuf.Timestamp` maps to [`prost_types::Timestamp`] and
//! `google.protobuf.Empty` to `()`.

/// Re-exported so users can build `Timestamp` values without depending on
/// `prost-types` themselves.
pub use prost_types;

/// Terraform plugin protocol version implemented by [`tfplugin5`].
pub const TFPLUGIN5_VERSION: &str = "5.10";

/// Terraform plugin protocol version implemented by [`tfplugin6`].
pub const TFPLUGIN6_VERSION: &str = "6.10";

/// Terraform plugin protocol 5.10 (package `tfplugin5`).
#[allow(
    clippy::all,
    clippy::pedantic,
    clippy::nursery,
    clippy::unwrap_used,
    missing_docs,
    rust_2018_idioms,
    unused_qualifications
)]
pub mod tfplugin5 {
    tonic::include_proto!("tfplugin5");
}

/// Terraform plugin protocol 6.10 (package `tfplugin6`).
#[allow(
    clippy::all,
    clippy::pedantic,
    clippy::nursery,
    clippy::unwrap_used,
    missing_docs,
    rust_2018_idioms,
    unused_qualifications
)]
pub mod tfplugin6 {
    tonic::include_proto!("tfplugin6");
}

/// HashiCorp go-plugin services (package `plugin`): `GRPCController`,
/// `GRPCStdio` and `GRPCBroker`.
#[allow(
    clippy::all,
    clippy::pedantic,
    clippy::nursery,
    clippy::unwrap_used,
    missing_docs,
    rust_2018_idioms,
    unused_qualifications
)]
pub mod plugin {
    tonic::include_proto!("plugin");
}

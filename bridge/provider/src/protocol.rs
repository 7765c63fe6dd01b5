//! One major version of the plugin protocol, as the generic adapter ([`super::grpc`]) needs
//! it: the generated client, the request and response messages of each RPC Kraken makes, and
//! how they convert from and to the neutral messages of [`super::wire`]. Implemented once per
//! protocol ([`super::v5::V5`], [`super::v6::V6`]); the adapter logic exists once, over this.
//!
//! Crate-private, so the prost types it names never leave the crate: outside it a provider is
//! only a [`super::Plugin`].

use std::future::Future;

use bytes::Bytes;
use tonic::transport::Channel;

use super::schema::{Function, Schema, ServerCapabilities};
use super::wire;
use super::{Diagnostic, Result};

/// What a client call resolves to.
pub type Reply<T> = std::result::Result<tonic::Response<T>, tonic::Status>;

/// The client method names of the RPCs the two protocols name differently, as spans, metrics
/// and errors spell them ([`super::observe::grpc_method`] makes `PrepareProviderConfig` of
/// `prepare_provider_config`).
pub struct Names {
    pub get_schema: &'static str,
    pub validate_provider: &'static str,
    pub validate_resource: &'static str,
    pub validate_data: &'static str,
    pub configure: &'static str,
    pub stop: &'static str,
}

/// One protocol: its messages as associated types, its client's calls, and the decoding of the
/// schema answer's parts (which the adapter reads encoded, see [`super::schema_store`]).
///
/// Each request converts from its neutral message and each response into one; a call takes
/// the client by value (tonic clients are cheap clones of one channel) so its future borrows
/// nothing.
pub trait Protocol: Send + Sync + 'static {
    /// The protocol major version, as negotiated at launch.
    const VERSION: u32;
    const NAMES: Names;
    /// The gRPC path of the schema RPC, whose answer is read as
    /// [`super::schema_store::SchemaParts`].
    const GET_SCHEMA_PATH: &'static str;

    type Client: Clone + Send + Sync + 'static;

    type ValidateProviderRequest: From<wire::ProviderConfig> + Send;
    type ValidateProviderResponse: Into<wire::Checked> + Send;
    type ValidateResourceRequest: From<wire::TypedConfig> + Send;
    type ValidateResourceResponse: Into<wire::Checked> + Send;
    type ValidateDataRequest: From<wire::TypedConfig> + Send;
    type ValidateDataResponse: Into<wire::Checked> + Send;
    type ConfigureRequest: From<wire::Configure> + Send;
    type ConfigureResponse: Into<wire::Checked> + Send;
    type UpgradeRequest: From<wire::Upgrade> + Send;
    type UpgradeResponse: Into<wire::Upgraded> + Send;
    type ReadRequest: From<wire::Read> + Send;
    type ReadResponse: Into<wire::ReadAnswer> + Send;
    type PlanRequest: From<wire::Plan> + Send;
    type PlanResponse: Into<wire::Planned> + Send;
    type ApplyRequest: From<wire::Apply> + Send;
    type ApplyResponse: Into<wire::Applied> + Send;
    type ImportRequest: From<wire::Import> + Send;
    type ImportResponse: Into<wire::Imported> + Send;
    type IdentitySchemasRequest: Default + Send;
    type IdentitySchemasResponse: Into<wire::IdentitySchemas> + Send;
    type ReadDataRequest: From<wire::TypedConfig> + Send;
    type ReadDataResponse: Into<wire::DataRead> + Send;
    type ListRequest: From<wire::List> + Send;
    /// One message of `ListResource`'s answer stream.
    type ListEvent: Into<wire::ListEvent> + Send + 'static;
    type StopRequest: Default + Send;
    type StopResponse: Into<wire::Stopped> + Send;

    /// A client over the process's channel.
    fn client(channel: Channel) -> Self::Client;

    fn validate_provider_config(
        client: Self::Client,
        req: Self::ValidateProviderRequest,
    ) -> impl Future<Output = Reply<Self::ValidateProviderResponse>> + Send;
    fn validate_resource_config(
        client: Self::Client,
        req: Self::ValidateResourceRequest,
    ) -> impl Future<Output = Reply<Self::ValidateResourceResponse>> + Send;
    fn validate_data_config(
        client: Self::Client,
        req: Self::ValidateDataRequest,
    ) -> impl Future<Output = Reply<Self::ValidateDataResponse>> + Send;
    fn configure(
        client: Self::Client,
        req: Self::ConfigureRequest,
    ) -> impl Future<Output = Reply<Self::ConfigureResponse>> + Send;
    fn upgrade_resource_state(
        client: Self::Client,
        req: Self::UpgradeRequest,
    ) -> impl Future<Output = Reply<Self::UpgradeResponse>> + Send;
    fn read_resource(
        client: Self::Client,
        req: Self::ReadRequest,
    ) -> impl Future<Output = Reply<Self::ReadResponse>> + Send;
    fn plan_resource_change(
        client: Self::Client,
        req: Self::PlanRequest,
    ) -> impl Future<Output = Reply<Self::PlanResponse>> + Send;
    fn apply_resource_change(
        client: Self::Client,
        req: Self::ApplyRequest,
    ) -> impl Future<Output = Reply<Self::ApplyResponse>> + Send;
    fn import_resource_state(
        client: Self::Client,
        req: Self::ImportRequest,
    ) -> impl Future<Output = Reply<Self::ImportResponse>> + Send;
    fn get_resource_identity_schemas(
        client: Self::Client,
        req: Self::IdentitySchemasRequest,
    ) -> impl Future<Output = Reply<Self::IdentitySchemasResponse>> + Send;
    fn read_data_source(
        client: Self::Client,
        req: Self::ReadDataRequest,
    ) -> impl Future<Output = Reply<Self::ReadDataResponse>> + Send;
    fn list_resource(
        client: Self::Client,
        req: Self::ListRequest,
    ) -> impl Future<Output = Reply<tonic::Streaming<Self::ListEvent>>> + Send;
    fn stop(
        client: Self::Client,
        req: Self::StopRequest,
    ) -> impl Future<Output = Reply<Self::StopResponse>> + Send;

    /// One encoded `Diagnostic` of the schema answer.
    fn diagnostic(bytes: Bytes) -> Result<Diagnostic>;
    /// The schema answer's encoded `ServerCapabilities` (empty: none).
    fn capabilities(bytes: &[u8]) -> Result<ServerCapabilities>;
    /// One encoded `Function`.
    fn function(bytes: Bytes) -> Result<Function>;
    /// One encoded `Schema` (the provider block, or one type's).
    fn schema(bytes: &[u8]) -> Result<Schema>;
}

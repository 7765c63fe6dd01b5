//! Protocol 5 (tfplugin5: providers on terraform-plugin-sdk/v2 and most of the registry
//! today) as a [`Protocol`]: its messages, its client's calls. Protocol 5 has no nested
//! attributes; its conversions are expanded by [`super::convert::proto_conversions!`], and
//! the adapter over it is [`super::grpc::Adapter`].

use bytes::Bytes;
use kraken_proto::tfplugin5::provider_client::ProviderClient;
use tonic::transport::Channel;

use crate::channel::MAX_MESSAGE_BYTES;
use crate::protocol::{Names, Protocol, Reply};
use crate::schema::{Function, NestedObject, ServerCapabilities};

/// The tfplugin5 protocol.
pub struct V5;

fn no_nested_type(_: &proto::schema::Attribute) -> Result<Option<NestedObject>> {
    Ok(None)
}

super::convert::proto_conversions! {
    proto = tfplugin5,
    get_schema = get_schema,
    nested_type = no_nested_type,
    validate_provider = prepare_provider_config,
    validate_resource = validate_resource_type_config,
    validate_data = validate_data_source_config,
    configure = configure,
    stop = stop,
}

impl Protocol for V5 {
    const VERSION: u32 = 5;
    const NAMES: Names = Names {
        get_schema: "get_schema",
        validate_provider: "prepare_provider_config",
        validate_resource: "validate_resource_type_config",
        validate_data: "validate_data_source_config",
        configure: "configure",
        stop: "stop",
    };
    const GET_SCHEMA_PATH: &'static str = "/tfplugin5.Provider/GetSchema";

    type Client = ProviderClient<Channel>;

    type ValidateProviderRequest = proto::prepare_provider_config::Request;
    type ValidateProviderResponse = proto::prepare_provider_config::Response;
    type ValidateResourceRequest = proto::validate_resource_type_config::Request;
    type ValidateResourceResponse = proto::validate_resource_type_config::Response;
    type ValidateDataRequest = proto::validate_data_source_config::Request;
    type ValidateDataResponse = proto::validate_data_source_config::Response;
    type ConfigureRequest = proto::configure::Request;
    type ConfigureResponse = proto::configure::Response;
    type UpgradeRequest = proto::upgrade_resource_state::Request;
    type UpgradeResponse = proto::upgrade_resource_state::Response;
    type ReadRequest = proto::read_resource::Request;
    type ReadResponse = proto::read_resource::Response;
    type PlanRequest = proto::plan_resource_change::Request;
    type PlanResponse = proto::plan_resource_change::Response;
    type ApplyRequest = proto::apply_resource_change::Request;
    type ApplyResponse = proto::apply_resource_change::Response;
    type ImportRequest = proto::import_resource_state::Request;
    type ImportResponse = proto::import_resource_state::Response;
    type IdentitySchemasRequest = proto::get_resource_identity_schemas::Request;
    type IdentitySchemasResponse = proto::get_resource_identity_schemas::Response;
    type ReadDataRequest = proto::read_data_source::Request;
    type ReadDataResponse = proto::read_data_source::Response;
    type ListRequest = proto::list_resource::Request;
    type ListEvent = proto::list_resource::Event;
    type StopRequest = proto::stop::Request;
    type StopResponse = proto::stop::Response;

    fn client(channel: Channel) -> Self::Client {
        ProviderClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    async fn validate_provider_config(
        mut client: Self::Client,
        req: Self::ValidateProviderRequest,
    ) -> Reply<Self::ValidateProviderResponse> {
        client.prepare_provider_config(req).await
    }

    async fn validate_resource_config(
        mut client: Self::Client,
        req: Self::ValidateResourceRequest,
    ) -> Reply<Self::ValidateResourceResponse> {
        client.validate_resource_type_config(req).await
    }

    async fn validate_data_config(
        mut client: Self::Client,
        req: Self::ValidateDataRequest,
    ) -> Reply<Self::ValidateDataResponse> {
        client.validate_data_source_config(req).await
    }

    async fn configure(
        mut client: Self::Client,
        req: Self::ConfigureRequest,
    ) -> Reply<Self::ConfigureResponse> {
        client.configure(req).await
    }

    async fn upgrade_resource_state(
        mut client: Self::Client,
        req: Self::UpgradeRequest,
    ) -> Reply<Self::UpgradeResponse> {
        client.upgrade_resource_state(req).await
    }

    async fn read_resource(
        mut client: Self::Client,
        req: Self::ReadRequest,
    ) -> Reply<Self::ReadResponse> {
        client.read_resource(req).await
    }

    async fn plan_resource_change(
        mut client: Self::Client,
        req: Self::PlanRequest,
    ) -> Reply<Self::PlanResponse> {
        client.plan_resource_change(req).await
    }

    async fn apply_resource_change(
        mut client: Self::Client,
        req: Self::ApplyRequest,
    ) -> Reply<Self::ApplyResponse> {
        client.apply_resource_change(req).await
    }

    async fn import_resource_state(
        mut client: Self::Client,
        req: Self::ImportRequest,
    ) -> Reply<Self::ImportResponse> {
        client.import_resource_state(req).await
    }

    async fn get_resource_identity_schemas(
        mut client: Self::Client,
        req: Self::IdentitySchemasRequest,
    ) -> Reply<Self::IdentitySchemasResponse> {
        client.get_resource_identity_schemas(req).await
    }

    async fn read_data_source(
        mut client: Self::Client,
        req: Self::ReadDataRequest,
    ) -> Reply<Self::ReadDataResponse> {
        client.read_data_source(req).await
    }

    async fn list_resource(
        mut client: Self::Client,
        req: Self::ListRequest,
    ) -> Reply<tonic::Streaming<Self::ListEvent>> {
        client.list_resource(req).await
    }

    async fn stop(mut client: Self::Client, req: Self::StopRequest) -> Reply<Self::StopResponse> {
        client.stop(req).await
    }

    fn diagnostic(bytes: Bytes) -> Result<Diagnostic> {
        decode_diagnostic(bytes)
    }

    fn capabilities(bytes: &[u8]) -> Result<ServerCapabilities> {
        decode_capabilities(bytes)
    }

    fn function(bytes: Bytes) -> Result<Function> {
        decode_function(bytes)
    }

    fn schema(bytes: &[u8]) -> Result<Schema> {
        decode_schema(bytes)
    }
}

//! The tfplugin5 adapter (protocol 5: providers on terraform-plugin-sdk/v2 and most of the
//! registry today). Protocol 5 has no nested attributes; everything else is shared with v6 in
//! [`super::grpc`] and [`super::convert`].

use crate::schema::NestedObject;

fn no_nested_type(_: &kraken_proto::tfplugin5::schema::Attribute) -> Result<Option<NestedObject>> {
    Ok(None)
}

super::grpc::provider_adapter! {
    proto = tfplugin5,
    adapter = V5Provider,
    version = 5,
    nested_type = no_nested_type,
    get_schema = (get_schema, "/tfplugin5.Provider/GetSchema"),
    validate_provider = (prepare_provider_config, prepare_provider_config),
    validate_resource = (validate_resource_type_config, validate_resource_type_config),
    validate_data = (validate_data_source_config, validate_data_source_config),
    configure = (configure, configure),
    stop = (stop, stop),
}

//! The tfplugin6 adapter (protocol 6: providers on terraform-plugin-framework). Beyond the
//! shared translation in [`super::grpc`] and [`super::convert`], protocol 6 adds nested
//! attributes: attributes whose type is an object schema of its own, repeated
//! single/list/set/map.

use crate::schema::{NestedObject, ObjectNesting};

fn nested_type(a: &kraken_proto::tfplugin6::schema::Attribute) -> Result<Option<NestedObject>> {
    use kraken_proto::tfplugin6::schema::object::NestingMode;
    let Some(obj) = &a.nested_type else {
        return Ok(None);
    };
    let nesting = match NestingMode::try_from(obj.nesting) {
        Ok(NestingMode::Single) => ObjectNesting::Single,
        Ok(NestingMode::List) => ObjectNesting::List,
        Ok(NestingMode::Set) => ObjectNesting::Set,
        Ok(NestingMode::Map) => ObjectNesting::Map,
        _ => {
            return Err(ProviderError::Protocol {
                rpc: "get_provider_schema",
                reason: format!(
                    "nested attribute {:?} has invalid nesting mode {}",
                    a.name, obj.nesting
                ),
            });
        }
    };
    let mut attributes = std::collections::BTreeMap::new();
    for inner in obj.attributes.iter().cloned() {
        let (name, attr) = attribute(inner)?;
        attributes.insert(name, attr);
    }
    Ok(Some(NestedObject {
        attributes,
        nesting,
    }))
}

super::grpc::provider_adapter! {
    proto = tfplugin6,
    adapter = V6Provider,
    version = 6,
    nested_type = nested_type,
    get_schema = (get_provider_schema, "/tfplugin6.Provider/GetProviderSchema"),
    validate_provider = (validate_provider_config, validate_provider_config),
    validate_resource = (validate_resource_config, validate_resource_config),
    validate_data = (validate_data_resource_config, validate_data_resource_config),
    configure = (configure_provider, configure_provider),
    stop = (stop_provider, stop_provider),
}

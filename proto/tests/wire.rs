//! Wire-format checks for the generated bindings.
//!
//! Expected bytes are computed by hand from the field numbers of the
//! published protocol, so these tests document (and pin) the numbers that
//! matter most. A protobuf tag byte is `(field_number << 3) | wire_type`,
//! with wire type 0 = varint (bool, enum, int64) and 2 = length-delimited
//! (string, bytes, message, map entry). All field numbers used here are below
//! 16, so every tag fits in a single byte.

use kraken_proto::{TFPLUGIN5_VERSION, TFPLUGIN6_VERSION, plugin, tfplugin5, tfplugin6};
use prost::Message;

/// Tag byte for `field` with wire type varint.
const fn varint(field: u8) -> u8 {
    field << 3
}

/// Tag byte for `field` with wire type length-delimited.
const fn len(field: u8) -> u8 {
    (field << 3) | 2
}

#[test]
fn versions_are_exported() {
    assert_eq!(TFPLUGIN5_VERSION, "5.10");
    assert_eq!(TFPLUGIN6_VERSION, "6.10");
}

#[test]
fn tag_helpers_match_hand_computed_bytes() {
    assert_eq!(varint(5), 0x28);
    assert_eq!(len(6), 0x32);
    assert_eq!(len(11), 0x5A);
    assert_eq!(len(12), 0x62);
}

// ---------------------------------------------------------------------------
// PlanResourceChange / ApplyResourceChange responses
// ---------------------------------------------------------------------------

#[test]
fn v6_plan_resource_change_response_high_fields() {
    use tfplugin6::{DynamicValue, ResourceIdentityData, deferred};
    let msg = tfplugin6::plan_resource_change::Response {
        legacy_type_system: true,
        deferred: Some(tfplugin6::Deferred {
            reason: deferred::Reason::AbsentPrereq as i32,
        }),
        planned_identity: Some(ResourceIdentityData {
            identity_data: Some(DynamicValue {
                msgpack: vec![0x80],
                json: vec![],
            }),
        }),
        ..Default::default()
    };
    let expected = [
        // legacy_type_system = 5 (bool true)
        0x28, 0x01, //
        // deferred = 6 -> Deferred { reason = 1 (ABSENT_PREREQ = 3) }
        0x32, 0x02, 0x08, 0x03, //
        // planned_identity = 7 -> { identity_data = 1 -> { msgpack = 1 } }
        0x3A, 0x05, 0x0A, 0x03, 0x0A, 0x01, 0x80,
    ];
    assert_eq!(msg.encode_to_vec(), expected);
    assert_eq!(
        tfplugin6::plan_resource_change::Response::decode(&expected[..]).expect("decode"),
        msg
    );
}

#[test]
fn v5_plan_resource_change_response_high_fields() {
    let msg = tfplugin5::plan_resource_change::Response {
        legacy_type_system: true,
        deferred: Some(tfplugin5::Deferred {
            reason: tfplugin5::deferred::Reason::ProviderConfigUnknown as i32,
        }),
        ..Default::default()
    };
    // legacy_type_system = 5, deferred = 6 { reason = 1 (PROVIDER_CONFIG_UNKNOWN = 2) }
    assert_eq!(msg.encode_to_vec(), [0x28, 0x01, 0x32, 0x02, 0x08, 0x02]);
}

#[test]
fn plan_resource_change_request_identity_and_capabilities() {
    let msg = tfplugin6::plan_resource_change::Request {
        client_capabilities: Some(tfplugin6::ClientCapabilities {
            deferral_allowed: false,
            write_only_attributes_allowed: true,
        }),
        prior_identity: Some(tfplugin6::ResourceIdentityData::default()),
        ..Default::default()
    };
    let expected = [
        // client_capabilities = 7 -> { write_only_attributes_allowed = 2 }
        0x3A, 0x02, 0x10, 0x01, //
        // prior_identity = 8 -> empty message (presence still encoded)
        0x42, 0x00,
    ];
    assert_eq!(msg.encode_to_vec(), expected);
}

#[test]
fn apply_resource_change_response_numbers() {
    let msg = tfplugin5::apply_resource_change::Response {
        private: vec![0xAA],
        legacy_type_system: true,
        new_identity: Some(tfplugin5::ResourceIdentityData::default()),
        ..Default::default()
    };
    let expected = [
        0x12, 0x01, 0xAA, // private = 2
        0x20, 0x01, // legacy_type_system = 4
        0x2A, 0x00, // new_identity = 5
    ];
    assert_eq!(msg.encode_to_vec(), expected);
}

// ---------------------------------------------------------------------------
// Schema attributes and blocks
// ---------------------------------------------------------------------------

#[test]
fn v6_schema_attribute_high_fields() {
    use tfplugin6::schema::{Attribute, Object, object};
    let msg = Attribute {
        sensitive: true,
        deprecated: true,
        nested_type: Some(Object {
            nesting: object::NestingMode::List as i32,
            ..Default::default()
        }),
        write_only: true,
        deprecation_message: "x".to_owned(),
        ..Default::default()
    };
    let expected = [
        0x38, 0x01, // sensitive = 7
        0x48, 0x01, // deprecated = 9
        0x52, 0x02, 0x18, 0x02, // nested_type = 10 -> Object { nesting = 3 (LIST = 2) }
        0x58, 0x01, // write_only = 11
        0x62, 0x01, b'x', // deprecation_message = 12
    ];
    assert_eq!(msg.encode_to_vec(), expected);
    assert_eq!(Attribute::decode(&expected[..]).expect("decode"), msg);
}

#[test]
fn v5_schema_attribute_high_fields() {
    let msg = tfplugin5::schema::Attribute {
        computed: true,
        description_kind: tfplugin5::StringKind::Markdown as i32,
        write_only: true,
        deprecation_message: "x".to_owned(),
        ..Default::default()
    };
    let expected = [
        0x30, 0x01, // computed = 6
        0x40, 0x01, // description_kind = 8 (MARKDOWN = 1)
        0x50, 0x01, // write_only = 10 (protocol 5 has no nested_type)
        0x5A, 0x01, b'x', // deprecation_message = 11
    ];
    assert_eq!(msg.encode_to_vec(), expected);
}

#[test]
fn schema_block_and_nested_block() {
    let block = tfplugin6::schema::Block {
        deprecated: true,
        deprecation_message: "d".to_owned(),
        block_types: vec![tfplugin6::schema::NestedBlock {
            type_name: "b".to_owned(),
            nesting: tfplugin6::schema::nested_block::NestingMode::Group as i32,
            max_items: 1,
            ..Default::default()
        }],
        ..Default::default()
    };
    let expected = [
        // block_types = 3 -> { type_name = 1 "b", nesting = 3 (GROUP = 5), max_items = 5 }
        0x1A, 0x07, 0x0A, 0x01, b'b', 0x18, 0x05, 0x28, 0x01, //
        0x30, 0x01, // deprecated = 6
        0x3A, 0x01, b'd', // deprecation_message = 7
    ];
    assert_eq!(block.encode_to_vec(), expected);
    // Protocol 5 uses the same numbers for Block.
    let v5 = tfplugin5::schema::Block {
        deprecated: true,
        deprecation_message: "d".to_owned(),
        ..Default::default()
    };
    assert_eq!(v5.encode_to_vec(), [0x30, 0x01, 0x3A, 0x01, b'd']);
}

// ---------------------------------------------------------------------------
// Diagnostics and attribute paths
// ---------------------------------------------------------------------------

#[test]
fn diagnostic_with_attribute_path() {
    use tfplugin6::attribute_path::{Step, step::Selector};
    let msg = tfplugin6::Diagnostic {
        severity: tfplugin6::diagnostic::Severity::Error as i32,
        summary: "s".to_owned(),
        detail: "d".to_owned(),
        attribute: Some(tfplugin6::AttributePath {
            steps: vec![
                Step {
                    selector: Some(Selector::AttributeName("a".to_owned())),
                },
                Step {
                    selector: Some(Selector::ElementKeyInt(2)),
                },
                Step {
                    selector: Some(Selector::ElementKeyString("k".to_owned())),
                },
            ],
        }),
    };
    let expected = [
        0x08, 0x01, // severity = 1 (ERROR = 1)
        0x12, 0x01, b's', // summary = 2
        0x1A, 0x01, b'd', // detail = 3
        // attribute = 4 -> AttributePath { steps = 1 (repeated) }
        0x22, 0x0E, //
        0x0A, 0x03, 0x0A, 0x01, b'a', // Step { attribute_name = 1 }
        0x0A, 0x02, 0x18, 0x02, // Step { element_key_int = 3 }
        0x0A, 0x03, 0x12, 0x01, b'k', // Step { element_key_string = 2 }
    ];
    assert_eq!(msg.encode_to_vec(), expected);
    assert_eq!(
        tfplugin6::Diagnostic::decode(&expected[..]).expect("decode"),
        msg
    );

    // Same layout in protocol 5.
    let v5 = tfplugin5::Diagnostic::decode(&expected[..]).expect("decode v5");
    assert_eq!(v5.severity, tfplugin5::diagnostic::Severity::Error as i32);
    assert_eq!(v5.attribute.map(|p| p.steps.len()), Some(3));
}

#[test]
fn v6_validate_provider_config_diagnostics_is_field_2() {
    // Historical quirk: the response has no field 1.
    let msg = tfplugin6::validate_provider_config::Response {
        diagnostics: vec![tfplugin6::Diagnostic {
            severity: tfplugin6::diagnostic::Severity::Warning as i32,
            ..Default::default()
        }],
    };
    assert_eq!(msg.encode_to_vec(), [0x12, 0x02, 0x08, 0x02]);
}

#[test]
fn function_error_optional_argument_index() {
    let msg = tfplugin6::FunctionError {
        text: String::new(),
        function_argument: Some(0),
    };
    // function_argument = 2 is `optional`, so an explicit zero is still sent.
    assert_eq!(msg.encode_to_vec(), [0x10, 0x00]);
}

#[test]
fn stop_responses_error_field() {
    let v6 = tfplugin6::stop_provider::Response {
        error: "e".to_owned(),
    };
    let v5 = tfplugin5::stop::Response {
        error: "e".to_owned(),
    };
    assert_eq!(v6.encode_to_vec(), [0x0A, 0x01, b'e']);
    assert_eq!(v5.encode_to_vec(), [0x0A, 0x01, b'e']);
}

// ---------------------------------------------------------------------------
// Schemas / metadata maps
// ---------------------------------------------------------------------------

#[test]
fn get_provider_schema_response_high_maps() {
    let mut msg = tfplugin6::get_provider_schema::Response::default();
    msg.action_schemas.insert(
        "a".to_owned(),
        tfplugin6::ActionSchema {
            schema: Some(tfplugin6::Schema {
                version: 1,
                block: None,
            }),
        },
    );
    let expected = [
        // action_schemas = 11, entry { key = 1 "a", value = 2 ActionSchema { schema = 1 { version = 1 } } }
        0x5A, 0x09, 0x0A, 0x01, b'a', 0x12, 0x04, 0x0A, 0x02, 0x08, 0x01,
    ];
    assert_eq!(msg.encode_to_vec(), expected);

    let mut msg = tfplugin6::get_provider_schema::Response::default();
    msg.state_store_schemas.insert(
        "s".to_owned(),
        tfplugin6::Schema {
            version: 2,
            block: None,
        },
    );
    // state_store_schemas = 10 (protocol 6 only)
    assert_eq!(
        msg.encode_to_vec(),
        [0x52, 0x07, 0x0A, 0x01, b's', 0x12, 0x02, 0x08, 0x02]
    );

    let mut v5 = tfplugin5::get_provider_schema::Response::default();
    v5.list_resource_schemas.insert(
        "l".to_owned(),
        tfplugin5::Schema {
            version: 3,
            block: None,
        },
    );
    // list_resource_schemas = 9
    assert_eq!(
        v5.encode_to_vec(),
        [0x4A, 0x07, 0x0A, 0x01, b'l', 0x12, 0x02, 0x08, 0x03]
    );
}

#[test]
fn get_metadata_actions_differ_between_protocols() {
    let v6 = tfplugin6::get_metadata::Response {
        state_stores: vec![tfplugin6::get_metadata::StateStoreMetadata {
            type_name: "s".to_owned(),
        }],
        actions: vec![tfplugin6::get_metadata::ActionMetadata {
            type_name: "a".to_owned(),
        }],
        ..Default::default()
    };
    // v6: state_stores = 8, actions = 9
    assert_eq!(
        v6.encode_to_vec(),
        [0x42, 0x03, 0x0A, 0x01, b's', 0x4A, 0x03, 0x0A, 0x01, b'a']
    );

    let v5 = tfplugin5::get_metadata::Response {
        actions: vec![tfplugin5::get_metadata::ActionMetadata {
            type_name: "a".to_owned(),
        }],
        ..Default::default()
    };
    // v5: actions = 8
    assert_eq!(v5.encode_to_vec(), [0x42, 0x03, 0x0A, 0x01, b'a']);
}

#[test]
fn server_capabilities_numbers() {
    let msg = tfplugin6::ServerCapabilities {
        plan_destroy: true,
        get_provider_schema_optional: false,
        move_resource_state: true,
        generate_resource_config: true,
    };
    assert_eq!(msg.encode_to_vec(), [0x08, 0x01, 0x18, 0x01, 0x20, 0x01]);
}

// ---------------------------------------------------------------------------
// State handling, ephemeral resources, lists, actions, state stores
// ---------------------------------------------------------------------------

#[test]
fn upgrade_resource_state_raw_flatmap() {
    let mut raw = tfplugin5::RawState::default();
    raw.flatmap.insert("a".to_owned(), "b".to_owned());
    let msg = tfplugin5::upgrade_resource_state::Request {
        type_name: String::new(),
        version: 1,
        raw_state: Some(raw),
    };
    let expected = [
        0x10, 0x01, // version = 2
        // raw_state = 3 -> RawState { flatmap = 2 -> entry { key = 1, value = 2 } }
        0x1A, 0x08, 0x12, 0x06, 0x0A, 0x01, b'a', 0x12, 0x01, b'b',
    ];
    assert_eq!(msg.encode_to_vec(), expected);
}

#[test]
fn move_resource_state_identity_fields() {
    let msg = tfplugin6::move_resource_state::Request {
        source_private: vec![0x01],
        source_identity: Some(tfplugin6::RawState {
            json: b"{}".to_vec(),
            ..Default::default()
        }),
        source_identity_schema_version: 5,
        ..Default::default()
    };
    let expected = [
        0x32, 0x01, 0x01, // source_private = 6
        0x3A, 0x04, 0x0A, 0x02, b'{', b'}', // source_identity = 7 -> { json = 1 }
        0x40, 0x05, // source_identity_schema_version = 8
    ];
    assert_eq!(msg.encode_to_vec(), expected);
}

#[test]
fn open_ephemeral_resource_optional_fields() {
    let msg = tfplugin6::open_ephemeral_resource::Response {
        renew_at: Some(prost_types::Timestamp {
            seconds: 1,
            nanos: 0,
        }),
        private: Some(Vec::new()),
        ..Default::default()
    };
    let expected = [
        0x12, 0x02, 0x08, 0x01, // renew_at = 2 -> Timestamp { seconds = 1 }
        0x22, 0x00, // private = 4 is `optional bytes`: empty but present
    ];
    assert_eq!(msg.encode_to_vec(), expected);
}

#[test]
fn list_resource_request_and_event() {
    let req = tfplugin5::list_resource::Request {
        include_resource_object: true,
        limit: 10,
        ..Default::default()
    };
    assert_eq!(req.encode_to_vec(), [0x18, 0x01, 0x20, 0x0A]);

    let event = tfplugin6::list_resource::Event {
        display_name: "n".to_owned(),
        resource_object: Some(tfplugin6::DynamicValue::default()),
        diagnostic: vec![tfplugin6::Diagnostic::default()],
        ..Default::default()
    };
    let expected = [
        0x12, 0x01, b'n', // display_name = 2
        0x1A, 0x00, // resource_object = 3
        0x22, 0x00, // diagnostic = 4 (singular name upstream)
    ];
    assert_eq!(event.encode_to_vec(), expected);

    let validate = tfplugin6::validate_list_resource_config::Request {
        limit: Some(tfplugin6::DynamicValue::default()),
        ..Default::default()
    };
    // limit = 4 is a DynamicValue in the validate request.
    assert_eq!(validate.encode_to_vec(), [0x22, 0x00]);
}

#[test]
fn invoke_action_event_oneof() {
    use tfplugin6::invoke_action::{Event, event};
    let progress = Event {
        r#type: Some(event::Type::Progress(event::Progress {
            message: "hi".to_owned(),
        })),
    };
    assert_eq!(
        progress.encode_to_vec(),
        [0x0A, 0x04, 0x0A, 0x02, b'h', b'i']
    );
    let done = Event {
        r#type: Some(event::Type::Completed(event::Completed::default())),
    };
    assert_eq!(done.encode_to_vec(), [0x12, 0x00]);

    let plan = tfplugin5::plan_action::Response {
        diagnostics: vec![],
        deferred: Some(tfplugin5::Deferred {
            reason: tfplugin5::deferred::Reason::ResourceConfigUnknown as i32,
        }),
    };
    assert_eq!(plan.encode_to_vec(), [0x12, 0x02, 0x08, 0x01]);
}

#[test]
fn state_store_chunks() {
    let chunk = tfplugin6::read_state_bytes::Response {
        bytes: b"ab".to_vec(),
        total_length: 2,
        range: Some(tfplugin6::StateRange { start: 0, end: 2 }),
        diagnostics: vec![],
    };
    let expected = [
        0x0A, 0x02, b'a', b'b', // bytes = 1
        0x10, 0x02, // total_length = 2
        0x1A, 0x02, 0x10, 0x02, // range = 3 -> { end = 2 }
    ];
    assert_eq!(chunk.encode_to_vec(), expected);

    let write = tfplugin6::write_state_bytes::RequestChunk {
        meta: Some(tfplugin6::RequestChunkMeta {
            type_name: "t".to_owned(),
            state_id: "s".to_owned(),
        }),
        ..Default::default()
    };
    assert_eq!(
        write.encode_to_vec(),
        [0x0A, 0x06, 0x0A, 0x01, b't', 0x12, 0x01, b's']
    );

    let configured = tfplugin6::configure_state_store::Response {
        diagnostics: vec![],
        capabilities: Some(tfplugin6::StateStoreServerCapabilities { chunk_size: 300 }),
    };
    // capabilities = 2 -> { chunk_size = 1 (300 = varint AC 02) }
    assert_eq!(configured.encode_to_vec(), [0x12, 0x03, 0x08, 0xAC, 0x02]);

    let lock = tfplugin6::lock_state::Response {
        lock_id: "l".to_owned(),
        diagnostics: vec![],
    };
    assert_eq!(lock.encode_to_vec(), [0x0A, 0x01, b'l']);
}

// ---------------------------------------------------------------------------
// go-plugin services
// ---------------------------------------------------------------------------

#[test]
fn go_plugin_messages() {
    let stdio = plugin::StdioData {
        channel: plugin::stdio_data::Channel::Stderr as i32,
        data: b"hi".to_vec(),
    };
    assert_eq!(stdio.encode_to_vec(), [0x08, 0x02, 0x12, 0x02, b'h', b'i']);

    let conn = plugin::ConnInfo {
        service_id: 1,
        network: "tcp".to_owned(),
        address: String::new(),
        knock: Some(plugin::conn_info::Knock {
            knock: true,
            ack: false,
            error: String::new(),
        }),
    };
    assert_eq!(
        conn.encode_to_vec(),
        [
            0x08, 0x01, 0x12, 0x03, b't', b'c', b'p', 0x22, 0x02, 0x08, 0x01
        ]
    );

    assert!(plugin::Empty {}.encode_to_vec().is_empty());
}

// ---------------------------------------------------------------------------
// Generated clients
// ---------------------------------------------------------------------------

#[tokio::test]
async fn generated_clients_exist() {
    // A lazy channel never dials until the first request, so nothing needs to
    // listen on this address.
    let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:1").connect_lazy();

    let _v5: tfplugin5::provider_client::ProviderClient<tonic::transport::Channel> =
        tfplugin5::provider_client::ProviderClient::new(channel.clone());
    let _provisioner = tfplugin5::provisioner_client::ProvisionerClient::new(channel.clone());
    let _v6: tfplugin6::provider_client::ProviderClient<tonic::transport::Channel> =
        tfplugin6::provider_client::ProviderClient::new(channel.clone());
    let _controller = plugin::grpc_controller_client::GrpcControllerClient::new(channel.clone());
    let _stdio = plugin::grpc_stdio_client::GrpcStdioClient::new(channel.clone());
    let _broker = plugin::grpc_broker_client::GrpcBrokerClient::new(channel);
}

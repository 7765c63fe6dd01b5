use std::collections::BTreeMap;

use kraken_codegen::schema::{Attribute, Block, BlockNesting, NestedBlock, ProviderSchema, Schema};
use serde_json::{Value as Json, json};

use super::*;
use crate::Type;
use crate::kube::from_kube_json;

fn optional(ty: Type) -> Attribute {
    Attribute::optional_of(ty)
}

fn computed(ty: Type) -> Attribute {
    Attribute {
        ty: Some(ty),
        computed: true,
        ..Default::default()
    }
}

fn sensitive(attr: Attribute) -> Attribute {
    Attribute {
        sensitive: true,
        ..attr
    }
}

fn block<'a>(
    attributes: impl IntoIterator<Item = (&'a str, Attribute)>,
    blocks: impl IntoIterator<Item = (&'a str, BlockNesting, Block)>,
) -> Block {
    Block {
        attributes: attributes
            .into_iter()
            .map(|(n, a)| (n.to_owned(), a))
            .collect(),
        block_types: blocks
            .into_iter()
            .map(|(n, nesting, block)| {
                let nested = NestedBlock {
                    block,
                    nesting,
                    ..Default::default()
                };
                (n.to_owned(), nested)
            })
            .collect(),
        ..Default::default()
    }
}

/// A resource exercising every kind of level: irregular names, sensitive arguments of
/// primitive and map type, a write-only argument, dynamic and object types, and nested
/// blocks of every nesting mode.
fn schema() -> Schema {
    let matcher = block([("header_name", optional(Type::String))], []);
    let rule = block(
        [
            (
                "port",
                Attribute {
                    required: true,
                    ..optional(Type::Number)
                },
            ),
            ("source_cidr", optional(Type::String)),
            ("auth_key", sensitive(optional(Type::String))),
            ("rule_id", computed(Type::String)),
        ],
        [("match", BlockNesting::Set, matcher)],
    );
    let hook = block([("cmd", optional(Type::String))], []);
    let attributes = [
        (
            "name",
            Attribute {
                required: true,
                ..optional(Type::String)
            },
        ),
        ("foo_bar", optional(Type::String)),
        ("foo__bar", optional(Type::String)),
        ("ipv6_cidr", optional(Type::String)),
        ("x_secret_ref", optional(Type::String)),
        ("password", sensitive(optional(Type::String))),
        ("extra_env", sensitive(optional(Type::map(Type::String)))),
        (
            "write_key",
            Attribute {
                write_only: true,
                ..optional(Type::String)
            },
        ),
        ("payload", optional(Type::Dynamic)),
        (
            "endpoint",
            optional(Type::object([
                ("host_name", Type::String),
                ("port", Type::Number),
            ])),
        ),
        ("id", computed(Type::String)),
        ("created_at", computed(Type::String)),
        ("token_out", sensitive(computed(Type::String))),
    ];
    let blocks = [
        ("rule", BlockNesting::List, rule),
        (
            "limit",
            BlockNesting::Map,
            block([("max_count", optional(Type::Number))], []),
        ),
        (
            "options",
            BlockNesting::Single,
            block([("verbose", optional(Type::Bool))], []),
        ),
        (
            "timeouts_group",
            BlockNesting::Group,
            block(
                [("create_after", optional(Type::String))],
                [("hook", BlockNesting::List, hook)],
            ),
        ),
    ];
    Schema {
        version: 0,
        block: block(attributes, blocks),
    }
}

fn fixture() -> ProviderSchema {
    let text = include_str!("../../../../codegen/testdata/schemas/fixture.json");
    let doc: Json = serde_json::from_str(text).expect("fixture schema is JSON");
    let all = kraken_codegen::tfjson::parse_provider_schemas(&doc).expect("fixture schema parses");
    all.into_values().next().expect("one provider")
}

fn fixture_object() -> (Schema, FieldMap) {
    let schema = fixture()
        .resource("fixture_object")
        .expect("fixture_object")
        .clone();
    let map = FieldMap::for_resource("fixture_object", &schema);
    (schema, map)
}

/// Secrets by (name, key), as a caller would hold them after fetching `secret_refs`.
fn secrets() -> impl FnMut(&SecretRef) -> Result<String, FieldError> {
    let data: BTreeMap<(&str, &str), &str> = [
        (("db", "pw"), "hunter2"),
        (("env", "json"), r#"{"A": "1"}"#),
        (("creds", "token"), "t0k"),
    ]
    .into();
    move |r: &SecretRef| {
        if !data.keys().any(|(name, _)| *name == r.name) {
            return Err(FieldError::SecretNotFound {
                name: r.name.clone(),
            });
        }
        let value = data.get(&(r.name.as_str(), r.key.as_str()));
        value
            .map(|v| (*v).to_owned())
            .ok_or_else(|| FieldError::SecretKeyNotFound {
                name: r.name.clone(),
                key: r.key.clone(),
            })
    }
}

/// What every spec of [`schema`] becomes when it writes no blocks.
fn absent_blocks() -> Json {
    json!({"limit": {}, "rule": [], "timeouts_group": {"hook": []}})
}

fn merged(a: Json, b: Json) -> Json {
    let (Json::Object(mut a), Json::Object(b)) = (a, b) else {
        panic!("objects only");
    };
    a.extend(b);
    Json::Object(a)
}

#[test]
fn spec_to_tf_renames_resolves_and_fills_blocks() {
    let cases = [
        ("empty spec", json!({}), json!({})),
        ("null spec", Json::Null, json!({})),
        (
            "camel and irregular names",
            json!({
                "name": "n", "fooBar": "a", "fooBar2": "b", "ipv6Cidr": "c", "xSecretRef2": "d",
            }),
            json!({
                "name": "n", "foo_bar": "a", "foo__bar": "b", "ipv6_cidr": "c", "x_secret_ref": "d",
            }),
        ),
        (
            "nested blocks, objects and maps",
            json!({
                "rule": [
                    {"port": 80, "sourceCidr": "10.0.0.0/8", "match": [{"headerName": "h"}]},
                    {"port": "443"},
                ],
                "limit": {"a.b": {"maxCount": 1}},
                "options": {"verbose": true},
                "endpoint": {"hostName": "example.com", "port": 1},
                "timeoutsGroup": {"createAfter": "1m"},
            }),
            json!({
                "rule": [
                    {"port": 80, "source_cidr": "10.0.0.0/8", "match": [{"header_name": "h"}]},
                    {"port": "443", "match": []},
                ],
                "limit": {"a.b": {"max_count": 1}},
                "options": {"verbose": true},
                "endpoint": {"host_name": "example.com", "port": 1},
                "timeouts_group": {"create_after": "1m", "hook": []},
            }),
        ),
        (
            "dynamic values keep their keys",
            json!({"payload": {"someKey": [1, {"a_b": null}]}}),
            json!({"payload": {"someKey": [1, {"a_b": null}]}}),
        ),
        (
            "null fields count as absent",
            json!({"name": null, "rule": null, "limit": null, "options": null}),
            json!({}),
        ),
        (
            "secret references",
            json!({
                "passwordSecretRef": {"name": "db", "key": "pw"},
                "extraEnvSecretRef": {"name": "env", "key": "json"},
                "rule": [{"port": 1, "authKeySecretRef": {"name": "db", "key": "pw"}}],
            }),
            json!({
                "password": "hunter2",
                "extra_env": {"A": "1"},
                "rule": [{"port": 1, "auth_key": "hunter2", "match": []}],
            }),
        ),
        (
            "mismatched shapes are left to from_kube_json",
            json!({"rule": {"port": 1}, "name": ["x"]}),
            json!({"rule": {"port": 1}, "name": ["x"]}),
        ),
    ];
    let map = FieldMap::for_resource("kraken_thing", &schema());
    for (name, spec, want) in cases {
        let got = map.spec_to_tf(&spec, &mut secrets());
        assert_eq!(got, Ok(merged(absent_blocks(), want)), "{name}");
    }
}

#[test]
fn spec_to_tf_errors_name_the_kubernetes_path() {
    let cases = [
        (json!({"nmae": "x"}), "spec.forProvider.nmae: unknown field"),
        (
            json!({"rule": [{"port": 1}, {"prot": 2}]}),
            "spec.forProvider.rule[1].prot: unknown field",
        ),
        (
            json!({"limit": {"k.1": {"maxCnt": 1}}}),
            "spec.forProvider.limit[\"k.1\"].maxCnt: unknown field",
        ),
        (
            json!({"timeoutsGroup": {"hook": [{"command": "x"}]}}),
            "spec.forProvider.timeoutsGroup.hook[0].command: unknown field",
        ),
        (
            json!({"endpoint": {"host_name": "x"}}),
            "spec.forProvider.endpoint.host_name: unknown field",
        ),
        // A resource takes sensitive arguments only from Secrets; computed ones not at all.
        (
            json!({"password": "x"}),
            "spec.forProvider.password: unknown field",
        ),
        (
            json!({"tokenOut": "x"}),
            "spec.forProvider.tokenOut: unknown field",
        ),
        (
            json!({"createdAt": "x"}),
            "spec.forProvider.createdAt: unknown field",
        ),
        (
            json!({"passwordSecretRef": {"name": "db"}}),
            "spec.forProvider.passwordSecretRef: expected a secret reference with name and key",
        ),
        (
            json!({"passwordSecretRef": "db"}),
            "spec.forProvider.passwordSecretRef: expected a secret reference with name and key",
        ),
        (
            json!({"extraEnvSecretRef": {"name": "db", "key": "pw"}}),
            "spec.forProvider.extraEnvSecretRef: key pw of secret db must hold JSON for this \
             argument's type",
        ),
        (json!("x"), "spec.forProvider: expected an object"),
    ];
    let map = FieldMap::for_resource("kraken_thing", &schema());
    for (spec, want) in cases {
        let got = map
            .spec_to_tf(&spec, &mut secrets())
            .map_err(|e| e.to_string());
        assert_eq!(got, Err(want.to_owned()), "{spec}");
    }
}

#[test]
fn secret_lookup_errors_pass_through() {
    let map = FieldMap::for_resource("kraken_thing", &schema());
    let cases = [
        (
            json!({"passwordSecretRef": {"name": "nope", "key": "pw"}}),
            FieldError::SecretNotFound {
                name: "nope".into(),
            },
        ),
        (
            json!({"rule": [{"port": 1, "authKeySecretRef": {"name": "db", "key": "other"}}]}),
            FieldError::SecretKeyNotFound {
                name: "db".into(),
                key: "other".into(),
            },
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(map.spec_to_tf(&spec, &mut secrets()), Err(want));
    }
}

#[test]
fn secret_refs_lists_each_reference_once() {
    let map = FieldMap::for_resource("kraken_thing", &schema());
    let spec = json!({
        "passwordSecretRef": {"name": "db", "key": "pw"},
        "extraEnvSecretRef": {"name": "env", "key": "json"},
        "xSecretRef2": "not a reference",
        "unknownSecretRef": {"name": "u", "key": "k"},
        "rule": [
            {"authKeySecretRef": {"name": "db", "key": "pw"}},
            {"authKeySecretRef": {"name": "env", "key": "k2"}},
            {"authKeySecretRef": {"name": "incomplete"}},
        ],
    });
    let r = |name: &str, key: &str| SecretRef {
        name: name.into(),
        key: key.into(),
    };
    assert_eq!(
        map.secret_refs(&spec),
        vec![r("env", "json"), r("db", "pw"), r("env", "k2")]
    );
    assert!(map.secret_refs(&Json::Null).is_empty());
}

#[test]
fn state_to_status_renames_and_drops_secrets_and_nulls() {
    let (_, map) = fixture_object();
    let state = json!({
        "created_at": "2024-01-01T00:00:00Z", "description": null, "id": "obj-1",
        "labels": ["a"], "name": "n", "password": "p", "ports": [80], "revision": 3,
        "rules": [{"port": 80, "protocol": null}], "secret_token": "s",
        "settings": {"enabled": false, "mode": null, "retries": 2}, "size": null,
        "tags": {"a": "1", "b": null},
    });
    let want = json!({
        "createdAt": "2024-01-01T00:00:00Z", "id": "obj-1", "labels": ["a"], "name": "n",
        "ports": [80], "revision": 3, "rules": [{"port": 80}],
        "settings": {"enabled": false, "retries": 2}, "tags": {"a": "1"},
    });
    assert_eq!(map.state_to_status(&state), want);
    assert_eq!(map.state_to_status(&Json::Null), json!({}));

    let map = FieldMap::for_resource("kraken_thing", &schema());
    let state = json!({
        "foo__bar": "b", "write_key": null, "token_out": "t", "extra_env": {"A": "1"},
        "rule": [{"port": 1, "auth_key": "k", "rule_id": "r1", "match": []}],
        "timeouts_group": {"create_after": null, "hook": []},
        "payload": {"some_key": null},
    });
    let want = json!({
        "fooBar2": "b",
        "rule": [{"port": 1, "ruleId": "r1", "match": []}],
        "timeoutsGroup": {"hook": []},
        "payload": {"some_key": null},
    });
    assert_eq!(map.state_to_status(&state), want);
}

#[test]
fn kube_path_prefers_the_argument() {
    let map = FieldMap::for_resource("kraken_thing", &schema());
    let root = AttrPath::root;
    let cases = [
        (root(), "spec.forProvider"),
        (root().attr("name"), "spec.forProvider.name"),
        (root().attr("foo__bar"), "spec.forProvider.fooBar2"),
        (root().attr("x_secret_ref"), "spec.forProvider.xSecretRef2"),
        (
            root().attr("password"),
            "spec.forProvider.passwordSecretRef",
        ),
        (
            root().attr("extra_env").key("A"),
            "spec.forProvider.extraEnvSecretRef",
        ),
        (root().attr("write_key"), "spec.forProvider.writeKey"),
        (
            root().attr("rule").index(1).attr("port"),
            "spec.forProvider.rule[1].port",
        ),
        (
            root()
                .attr("rule")
                .index(0)
                .attr("match")
                .index(2)
                .attr("header_name"),
            "spec.forProvider.rule[0].match[2].headerName",
        ),
        (
            root().attr("rule").index(0).attr("auth_key"),
            "spec.forProvider.rule[0].authKeySecretRef",
        ),
        (
            root().attr("limit").key("a").attr("max_count"),
            "spec.forProvider.limit[\"a\"].maxCount",
        ),
        (
            root().attr("endpoint").attr("host_name"),
            "spec.forProvider.endpoint.hostName",
        ),
        (
            root().attr("payload").attr("some_key").index(0),
            "spec.forProvider.payload.some_key[0]",
        ),
        (
            root()
                .attr("timeouts_group")
                .attr("hook")
                .index(0)
                .attr("cmd"),
            "spec.forProvider.timeoutsGroup.hook[0].cmd",
        ),
        (root().attr("created_at"), "status.atProvider.createdAt"),
        (root().attr("id"), "status.atProvider.id"),
        (
            root().attr("rule").index(0).attr("rule_id"),
            "status.atProvider.rule[0].ruleId",
        ),
        // In neither view: the rest keeps its Terraform names.
        (root().attr("token_out"), "status.atProvider.token_out"),
        (
            root().attr("rule").key("x").attr("port"),
            "status.atProvider.rule[\"x\"].port",
        ),
    ];
    for (path, want) in cases {
        assert_eq!(map.kube_path(&path), want, "{path}");
    }
}

#[test]
fn fixture_spec_converts_and_errors_map_back() {
    let (schema, map) = fixture_object();
    let ty = schema.block.implied_type();
    let spec = json!({
        "name": "web", "size": 3, "tags": {"env": "prod"}, "labels": ["a"], "ports": [80, 443],
        "settings": {"mode": "fast", "retries": 2, "enabled": true},
        "rules": [{"port": 80, "protocol": "tcp"}],
        "passwordSecretRef": {"name": "db", "key": "pw"}, "description": "d",
    });
    let tf = map
        .spec_to_tf(&spec, &mut secrets())
        .expect("spec converts");
    assert_eq!(tf["password"], json!("hunter2"));
    from_kube_json(&tf, &ty).expect("the converted spec fits the schema");

    let spec = json!({"name": "web", "rules": [{"port": 1}, {"port": "abc"}]});
    let tf = map.spec_to_tf(&spec, &mut secrets()).expect("renames");
    let err = from_kube_json(&tf, &ty).expect_err("port is not a number");
    assert_eq!(map.kube_path(&err.path), "spec.forProvider.rules[1].port");
    let path = AttrPath::root().attr("secret_token");
    assert_eq!(map.kube_path(&path), "status.atProvider.secret_token");
}

#[test]
fn provider_config_takes_sensitive_arguments_by_either_name() {
    let provider = fixture().provider;
    let map = FieldMap::for_provider_config(&provider);
    let ty = provider.block.implied_type();
    let cases = [
        (
            json!({"ledgerDir": "/l", "token": "plain", "applyDelayMs": 5}),
            Ok(json!({"ledger_dir": "/l", "token": "plain", "apply_delay_ms": 5})),
        ),
        (
            json!({"tokenSecretRef": {"name": "creds", "key": "token"}}),
            Ok(json!({"token": "t0k"})),
        ),
        (
            json!({"token": "a", "tokenSecretRef": {"name": "creds", "key": "token"}}),
            Err("spec.config.tokenSecretRef: set twice, as token and as tokenSecretRef"),
        ),
        (
            json!({"ledger_dir": "/l"}),
            Err("spec.config.ledger_dir: unknown field"),
        ),
    ];
    for (config, want) in cases {
        let got = map.spec_to_tf(&config, &mut secrets());
        if let Ok(tf) = &got {
            from_kube_json(tf, &ty).expect("fits the provider block");
        }
        let want = want.map_err(str::to_owned);
        assert_eq!(got.map_err(|e| e.to_string()), want, "{config}");
    }
    let r = SecretRef {
        name: "creds".into(),
        key: "token".into(),
    };
    let config = json!({"tokenSecretRef": {"name": "creds", "key": "token"}, "token": "x"});
    assert_eq!(map.secret_refs(&config), vec![r]);
    let path = |name: &str| map.kube_path(&AttrPath::root().attr(name));
    assert_eq!(path("token"), "spec.config.token");
    assert_eq!(path("ledger_dir"), "spec.config.ledgerDir");
    assert_eq!(path("nope"), "spec.config.nope");
}

#[test]
fn set_json_path_creates_and_refuses_to_overwrite() {
    let v = || json!("v");
    let cases = [
        (json!({}), "region", Ok(json!({"region": "v"}))),
        (Json::Null, "region", Ok(json!({"region": "v"}))),
        (
            json!({"region": null}),
            "region",
            Ok(json!({"region": "v"})),
        ),
        (
            Json::Null,
            "assumeRole.0.roleArn",
            Ok(json!({"assumeRole": [{"roleArn": "v"}]})),
        ),
        (
            json!({"assumeRole": [{"sessionName": "s"}]}),
            "assumeRole.0.roleArn",
            Ok(json!({"assumeRole": [{"sessionName": "s", "roleArn": "v"}]})),
        ),
        (json!({}), "l.1.a", Ok(json!({"l": [null, {"a": "v"}]}))),
        // On an existing object a number is a map key.
        (
            json!({"tags": {"0": "x"}}),
            "tags.1",
            Ok(json!({"tags": {"0": "x", "1": "v"}})),
        ),
        (
            json!({"assumeRole": [{"roleArn": "a"}]}),
            "assumeRole.0.roleArn",
            Err("assumeRole.0.roleArn: already set"),
        ),
        (json!({"a": {"b": 1}}), "a", Err("a: already set")),
        (
            json!({"region": "x"}),
            "region.sub",
            Err("region: already set to a value that is not an object or list"),
        ),
        (
            json!("x"),
            "a",
            Err("(root): already set to a value that is not an object or list"),
        ),
        (json!({"l": []}), "l.a", Err("l.a: expected a list index")),
        (json!({}), "a..b", Err("a..b: empty path segment")),
        (json!({}), "l.5000.a", Err("l.5000: list index too large")),
    ];
    for (mut doc, path, want) in cases {
        let got = set_json_path(&mut doc, path, v()).map(|()| doc);
        assert_eq!(
            got.map_err(|e| e.to_string()),
            want.map_err(str::to_owned),
            "{path}"
        );
    }

    // Order does not matter: a later path fills the hole an earlier one left.
    let mut doc = json!({});
    set_json_path(&mut doc, "x.1.a", v()).expect("creates the list");
    set_json_path(&mut doc, "x.0.b", v()).expect("fills the hole");
    assert_eq!(doc, json!({"x": [{"b": "v"}, {"a": "v"}]}));
}

#[test]
fn field_map_is_shareable() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<FieldMap>();
}

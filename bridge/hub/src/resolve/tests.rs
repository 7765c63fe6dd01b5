//! Table-driven tests of the pure resolution: references against fixed sources.

use super::*;
use crate::parse;
use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kraken_core_kinds::hub::{
    KeySource, ObjectReference, ResourceSource, SensitiveOutputs, StateDeclarationSpec,
};
use serde_json::json;

fn sources() -> Sources {
    let mut pet = StateDeclaration::new(
        "pet-a.random",
        StateDeclarationSpec {
            producer: ObjectReference {
                api_version: "random.tf.kraken.dev/v1alpha1".into(),
                kind: "Pet".into(),
                name: "a".into(),
                uid: "u-a".into(),
            },
            outputs: json!({"id": "i-1", "n": 5, "ips": ["10.0.0.1"]}),
            sensitive: Some(SensitiveOutputs {
                secret_name: "pet-a.random-outputs".into(),
                keys: vec!["password".into(), "conn".into()],
            }),
        },
    );
    pet.metadata.namespace = Some("ns".into());
    let owner = OwnerReference {
        api_version: "random.tf.kraken.dev/v1alpha1".into(),
        kind: "Pet".into(),
        name: "a".into(),
        uid: "u-a".into(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    pet.metadata.owner_references = Some(vec![owner.clone()]);
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ports"}, "data": {"http": "8080", "word": "seven"},
    }))
    .expect("config map");
    let secret = |owners: Option<Vec<OwnerReference>>, data: &[(&str, &str)]| Secret {
        metadata: kube::api::ObjectMeta {
            owner_references: owners,
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    };
    Sources {
        declarations: [
            ("pet-a.random".to_owned(), Some(pet)),
            ("pet-gone.random".to_owned(), None),
        ]
        .into(),
        config_maps: [("ports".to_owned(), Some(cm))].into(),
        secrets: [
            ("db".to_owned(), Some(secret(None, &[("pw", "hunter2")]))),
            (
                "pet-a.random-outputs".to_owned(),
                Some(secret(
                    Some(vec![owner.clone()]),
                    &[("password", "\"s3cret\""), ("conn", "{\"host\":\"h\"}")],
                )),
            ),
        ]
        .into(),
    }
}

/// Every kind the references here name is random's.
fn random(_kind: &str) -> Vec<String> {
    vec!["random.tf.kraken.dev".into()]
}

fn output(kind: &str, name: &str, path: &str) -> ValueReference {
    ValueReference {
        path: "arg".into(),
        resource: Some(ResourceSource {
            api_version: None,
            kind: kind.into(),
            name: name.into(),
            path: path.into(),
            namespace: None,
        }),
        ..Default::default()
    }
}

fn key(name: &str, key: &str) -> Option<KeySource> {
    Some(KeySource {
        name: name.into(),
        key: key.into(),
        namespace: None,
    })
}

fn typed(mut r: ValueReference, ty: Json) -> ValueReference {
    r.r#type = Some(ty);
    r
}

/// What one reference should resolve to.
#[derive(Debug)]
enum Want {
    Value(Json),
    /// Sensitive: its JSON text.
    Sensitive(&'static str),
    Fails(&'static str, &'static str),
}

#[test]
fn one_reference_resolves_from_its_sources() {
    use Want::*;
    let cm = |k: &str| ValueReference {
        path: "arg".into(),
        config_map_key_ref: key("ports", k),
        ..Default::default()
    };
    let secret = |n: &str, k: &str| ValueReference {
        path: "arg".into(),
        secret_key_ref: key(n, k),
        ..Default::default()
    };
    let template = |t: &str| ValueReference {
        path: "arg".into(),
        template: Some(t.into()),
        ..Default::default()
    };
    let marked = ValueReference {
        sensitive: true,
        ..output("Pet", "a", "id")
    };
    let cases: Vec<(&str, ValueReference, Want)> = vec![
        ("output", output("Pet", "a", "id"), Value(json!("i-1"))),
        (
            "output in a list",
            output("Pet", "a", "ips.0"),
            Value(json!("10.0.0.1")),
        ),
        (
            "number to string",
            typed(output("Pet", "a", "n"), json!("string")),
            Value(json!("5")),
        ),
        ("config map key", cm("http"), Value(json!("8080"))),
        (
            "config map key to number",
            typed(cm("http"), json!("number")),
            Value(json!(8080)),
        ),
        ("secret key", secret("db", "pw"), Sensitive("\"hunter2\"")),
        ("marked sensitive", marked, Sensitive("\"i-1\"")),
        (
            "sensitive output",
            output("Pet", "a", "password"),
            Sensitive("\"s3cret\""),
        ),
        (
            "inside a sensitive output",
            output("Pet", "a", "conn.host"),
            Sensitive("\"h\""),
        ),
        (
            "template",
            template("http://${resource:Pet/a:id}:${configMap:ports:http}"),
            Value(json!("http://i-1:8080")),
        ),
        (
            "template with a secret",
            template("${secret:db:pw}!"),
            Sensitive("\"hunter2!\""),
        ),
        (
            "no producer",
            output("Pet", "gone", "id"),
            Fails(reason::NOT_FOUND, "has not published"),
        ),
        (
            "never read",
            output("Pet", "other", "id"),
            Fails(reason::NOT_FOUND, "not found"),
        ),
        (
            "no output",
            output("Pet", "a", "nope"),
            Fails(
                reason::PATH_NOT_FOUND,
                "pet-a.random has no output nope (it has: ",
            ),
        ),
        (
            "no config map",
            ValueReference {
                config_map_key_ref: key("x", "k"),
                ..cm("http")
            },
            Fails(reason::NOT_FOUND, "ConfigMap x not found"),
        ),
        (
            "no key",
            cm("nope"),
            Fails(reason::PATH_NOT_FOUND, "has no key nope"),
        ),
        (
            "no secret",
            secret("x", "pw"),
            Fails(reason::NOT_FOUND, "Secret x not found"),
        ),
        (
            "no secret key",
            secret("db", "x"),
            Fails(reason::PATH_NOT_FOUND, "Secret db has no key x"),
        ),
        (
            "type mismatch",
            typed(cm("word"), json!("number")),
            Fails(reason::TYPE_MISMATCH, "expected number, got \"seven\""),
        ),
        (
            "sensitive mismatch hides the value",
            typed(secret("db", "pw"), json!("number")),
            Fails(reason::TYPE_MISMATCH, "not shown"),
        ),
        (
            "template part missing",
            template("${configMap:ports:nope}"),
            Fails(reason::PATH_NOT_FOUND, "has no key nope"),
        ),
        (
            "invalid reference",
            ValueReference {
                path: "arg".into(),
                ..Default::default()
            },
            Fails(reason::INVALID_REFERENCE, "exactly one source"),
        ),
    ];
    let sources = sources();
    for (name, r, want) in cases {
        let parsed = parse(&r, "ns", &random);
        let got = resolve(&[(&r, parsed)], &sources);
        match want {
            Value(v) => {
                let want = vec![ResolvedValue {
                    path: "arg".into(),
                    value: v,
                }];
                assert_eq!((got.values, got.failures.len()), (want, 0), "{name}");
                assert!(got.sensitive.is_empty(), "{name}");
            }
            Sensitive(text) => {
                assert_eq!(
                    got.sensitive.get("arg").map(String::as_str),
                    Some(text),
                    "{name}"
                );
                assert!(got.values.is_empty() && got.failures.is_empty(), "{name}");
            }
            Fails(reason, part) => {
                assert_eq!(got.failures.len(), 1, "{name}: {got:?}");
                assert_eq!(got.failures[0].reason, reason, "{name}");
                assert!(
                    got.failures[0].message.contains(part),
                    "{name}: {}",
                    got.failures[0].message
                );
                assert!(!got.failures[0].message.contains("hunter2"), "{name}");
            }
        }
    }
}

#[test]
fn every_reference_is_resolved_and_failures_keep_their_order() {
    let refs = [
        output("Pet", "gone", "id"),
        output("Pet", "a", "id"),
        output("Pet", "a", "nope"),
    ];
    let parsed: Vec<_> = refs.iter().map(|r| (r, parse(r, "ns", &random))).collect();
    let got = resolve(&parsed, &sources());
    assert_eq!(got.values.len(), 1);
    let reasons: Vec<_> = got.failures.iter().map(|f| f.reason).collect();
    assert_eq!(reasons, [reason::NOT_FOUND, reason::PATH_NOT_FOUND]);
}

#[test]
fn missing_outputs_secret_is_reported_not_found() {
    let mut s = sources();
    s.secrets.remove("pet-a.random-outputs");
    let r = output("Pet", "a", "password");
    let got = resolve(&[(&r, parse(&r, "ns", &random))], &s);
    assert_eq!(got.failures[0].reason, reason::NOT_FOUND);
    assert!(
        got.failures[0]
            .message
            .contains("sensitive outputs of pet-a.random")
    );
}

#[test]
fn values_and_templates_have_a_size_bound() {
    let mut s = sources();
    let big = "x".repeat(40 * 1024);
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "big"}, "data": {"k": big, "huge": "y".repeat(100 * 1024)},
    }))
    .expect("config map");
    s.config_maps.insert("big".into(), Some(cm));
    let template = |path: &str, t: &str| ValueReference {
        path: path.into(),
        template: Some(t.into()),
        ..ValueReference::default()
    };
    let from_cm = |path: &str, k: &str| ValueReference {
        path: path.into(),
        config_map_key_ref: key("big", k),
        ..ValueReference::default()
    };
    let refs = [
        // Alone, one 40 KiB value is fine.
        from_cm("one", "k"),
        // One value past 64 KiB.
        from_cm("huge", "huge"),
        // A template that repeats a 40 KiB value.
        template("twice", "${configMap:big:k}${configMap:big:k}"),
        // Together past 256 KiB: the 7th 40 KiB value.
        from_cm("a", "k"),
        from_cm("b", "k"),
        from_cm("c", "k"),
        from_cm("d", "k"),
        from_cm("e", "k"),
        from_cm("f", "k"),
    ];
    let parsed: Vec<_> = refs.iter().map(|r| (r, parse(r, "ns", &random))).collect();
    let got = resolve(&parsed, &s);
    let failed: Vec<_> = got
        .failures
        .iter()
        .map(|f| {
            (
                f.reason,
                f.message.split(':').next().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        failed,
        [
            (reason::TOO_LARGE, "huge".to_string()),
            (reason::TOO_LARGE, "twice".to_string()),
            (reason::TOO_LARGE, "f".to_string()),
        ],
        "{:?}",
        got.failures
    );
    assert_eq!(got.values.len(), 6);
}

//! Which StateDeclarations the hub believes, purely.
//!
//! A StateDeclaration is an ordinary object in the tenant's namespace. The chart's admission
//! policy `kraken-hub-writers` lets only the operator write one, but the hub does not rely on
//! it: it reads a declaration only when everything about it says Kraken published it for its
//! producer, and reads a sensitive output only from that producer's own outputs Secret. A
//! declaration made by hand that names another Secret (a state Secret, someone's credentials)
//! is refused, and nothing is read from that Secret.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::{Failure, group_of, object_key, outputs_secret_name};
use kraken_core_kinds::STATE_SECRET_TYPE;
use kraken_core_kinds::hub::{ObjectReference, StateDeclaration};
use kraken_kit::conditions::reason::FORBIDDEN;

/// API groups whose objects publish StateDeclarations: generated kinds (`<provider>.tf.kraken.dev`
/// and `data.<provider>.tf.kraken.dev`) and the native EC2 kinds.
fn is_producer_group(group: &str) -> bool {
    group.ends_with(".tf.kraken.dev") || group == kraken_core_kinds::ec2::GROUP
}

/// The controller owner of an object, if it has exactly one.
fn controller(owners: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    let mut controllers = owners
        .into_iter()
        .flatten()
        .filter(|o| o.controller == Some(true));
    match (controllers.next(), controllers.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

fn refused(declaration: &str, why: &str) -> Failure {
    Failure::new(
        FORBIDDEN,
        format!(
            "StateDeclaration {declaration} was not published by Kraken for its producer ({why}); \
             its outputs are not read"
        ),
    )
}

/// Whether `sd` (read as `declaration`) is one Kraken published: its name is its producer's
/// key, the producer is of a kind that publishes, the producer (by UID) is its only controller,
/// and its sensitive outputs live in the producer's own outputs Secret.
pub fn vouch(sd: &StateDeclaration, declaration: &str) -> Result<(), Failure> {
    let producer = &sd.spec.producer;
    let group = group_of(&producer.api_version);
    if !is_producer_group(group) {
        return Err(refused(
            declaration,
            &format!("{} is not a managed kind", producer.api_version),
        ));
    }
    if object_key(group, &producer.kind, &producer.name) != declaration {
        return Err(refused(
            declaration,
            &format!(
                "the name does not match its producer {} {}",
                producer.kind, producer.name
            ),
        ));
    }
    let owner = controller(sd.metadata.owner_references.as_ref());
    let owned = owner.is_some_and(|o| {
        !producer.uid.is_empty()
            && o.uid == producer.uid
            && o.kind == producer.kind
            && o.name == producer.name
            && o.api_version == producer.api_version
    });
    if !owned {
        return Err(refused(
            declaration,
            "its producer, by UID, is not its controller",
        ));
    }
    if let Some(s) = &sd.spec.sensitive
        && s.secret_name != outputs_secret_name(declaration)
    {
        return Err(refused(
            declaration,
            &format!("Secret {} is not its producer's outputs", s.secret_name),
        ));
    }
    Ok(())
}

/// Whether `secret` is the outputs Secret Kraken wrote for `sd`'s producer: controlled by the
/// producer (by UID) and not a state Secret.
pub fn vouch_outputs(
    sd: &StateDeclaration,
    declaration: &str,
    secret: &Secret,
) -> Result<(), Failure> {
    let uid = &sd.spec.producer.uid;
    let owned = controller(secret.metadata.owner_references.as_ref())
        .is_some_and(|o| !uid.is_empty() && &o.uid == uid);
    if !owned || secret.type_.as_deref() == Some(STATE_SECRET_TYPE) {
        return Err(refused(
            declaration,
            "its outputs Secret is not its producer's",
        ));
    }
    Ok(())
}

/// What the producer `producer` would publish (`outputs`, none sensitive), for a dry run
/// (`kraken plan`) where it has not published yet: as Kraken would write it, so [`vouch`]
/// believes it. A producer not created yet gets a stand-in UID.
pub fn stand_in(
    name: &str,
    mut producer: ObjectReference,
    outputs: serde_json::Value,
) -> StateDeclaration {
    if producer.uid.is_empty() {
        producer.uid = format!("planned:{name}");
    }
    let owner = OwnerReference {
        api_version: producer.api_version.clone(),
        kind: producer.kind.clone(),
        name: producer.name.clone(),
        uid: producer.uid.clone(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let mut sd = StateDeclaration::new(
        name,
        kraken_core_kinds::hub::StateDeclarationSpec {
            producer,
            outputs,
            sensitive: None,
        },
    );
    sd.metadata.owner_references = Some(vec![owner]);
    sd
}

/// What a producer of kind `kind` named `name` in `group` and `ns` (uid `u-<name>`) publishes, as
/// stored: for the tests of what reads declarations.
#[cfg(test)]
pub(crate) fn published_json(
    (ns, group): (&str, &str),
    kind: &str,
    name: &str,
    outputs: serde_json::Value,
) -> serde_json::Value {
    let api_version = format!("{group}/v1alpha1");
    let uid = format!("u-{name}");
    serde_json::json!({
        "apiVersion": "core.kraken.dev/v1alpha1", "kind": "StateDeclaration",
        "metadata": {"name": object_key(group, kind, name), "namespace": ns,
                     "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": name,
                                          "uid": uid, "controller": true}]},
        "spec": {"producer": {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid},
                 "outputs": outputs},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kraken_core_kinds::hub::{SensitiveOutputs, StateDeclarationSpec};

    const NAME: &str = "object-web.fixture";

    fn owner(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "fixture.tf.kraken.dev/v1alpha1".into(),
            kind: "Object".into(),
            name: "web".into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    /// What the producer `web` publishes.
    fn published() -> StateDeclaration {
        let mut sd = StateDeclaration::new(
            NAME,
            StateDeclarationSpec {
                producer: ObjectReference {
                    api_version: "fixture.tf.kraken.dev/v1alpha1".into(),
                    kind: "Object".into(),
                    name: "web".into(),
                    uid: "u-web".into(),
                },
                outputs: serde_json::json!({"id": "x"}),
                sensitive: Some(SensitiveOutputs {
                    secret_name: outputs_secret_name(NAME),
                    keys: vec!["password".into()],
                }),
            },
        );
        sd.metadata.owner_references = Some(vec![owner("u-web")]);
        sd
    }

    fn secret(owners: Vec<OwnerReference>, type_: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.owner_references = Some(owners);
        s.type_ = Some(type_.into());
        s
    }

    #[test]
    fn what_the_producer_published_is_believed() {
        assert_eq!(object_key("fixture.tf.kraken.dev", "Object", "web"), NAME);
        let sd = published();
        assert_eq!(vouch(&sd, NAME), Ok(()));
        let outputs = secret(vec![owner("u-web")], "Opaque");
        assert_eq!(vouch_outputs(&sd, NAME, &outputs), Ok(()));
    }

    #[test]
    fn a_dry_runs_stand_in_is_believed() {
        let producer = published().spec.producer;
        let mut unborn = producer.clone();
        unborn.uid.clear();
        for p in [producer, unborn] {
            let sd = stand_in(NAME, p, serde_json::json!({"id": "x"}));
            assert_eq!(vouch(&sd, NAME), Ok(()));
        }
    }

    #[test]
    fn forged_declarations_are_refused() {
        type Forge = fn(&mut StateDeclaration);
        let cases: Vec<(&str, Forge)> = vec![
            ("another Secret", |sd| {
                if let Some(s) = sd.spec.sensitive.as_mut() {
                    s.secret_name = "object-db.fixture-tfstate".into();
                }
            }),
            ("no owner", |sd| sd.metadata.owner_references = None),
            ("another owner", |sd| {
                sd.metadata.owner_references = Some(vec![owner("u-other")])
            }),
            ("two controllers", |sd| {
                sd.metadata.owner_references = Some(vec![owner("u-web"), owner("u-web")])
            }),
            ("no uid", |sd| sd.spec.producer.uid.clear()),
            ("renamed", |sd| sd.spec.producer.name = "db".into()),
            ("not a managed kind", |sd| {
                sd.spec.producer.api_version = "v1".into()
            }),
        ];
        for (what, forge) in cases {
            let mut sd = published();
            forge(&mut sd);
            let got = vouch(&sd, NAME);
            assert!(
                got.as_ref().is_err_and(
                    |f| f.reason == FORBIDDEN && f.message.contains("not published by Kraken")
                ),
                "{what}: {got:?}"
            );
        }
    }

    #[test]
    fn only_the_producers_outputs_secret_is_read() {
        let sd = published();
        for (what, s) in [
            ("state", secret(vec![owner("u-web")], STATE_SECRET_TYPE)),
            ("someone else's", secret(vec![owner("u-db")], "Opaque")),
            ("nobody's", secret(vec![], "Opaque")),
        ] {
            assert!(vouch_outputs(&sd, NAME, &s).is_err(), "{what}");
        }
    }
}

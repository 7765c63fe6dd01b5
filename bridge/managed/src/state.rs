//! The state Secret: where a managed resource's full Terraform state lives between reconciles.
//!
//! One Secret per resource, `<kind>-<name>.<group>-tfstate`, owned by the resource, holds the state as
//! Terraform's JSON (exact numbers, sensitive values included), the provider's private bytes
//! untouched, the schema version it was written under (for `UpgradeResourceState`), and the
//! create attempt it completed (see the create fence in docs/operator.md), and during a
//! create-before-destroy replacement the old ("deposed") object until it is destroyed.
//! `status.atProvider` is only a projection of it for users, without sensitive values.
//!
//! Keeping the whole state in one Secret (rather than splitting it between status and Secret)
//! makes "persist state" a single write that is either entirely there or not at all.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use kraken_kit::fence::Epoch;

pub use kraken_core_kinds::{MANAGED_BY_LABEL, STATE_SECRET_TYPE as SECRET_TYPE};

pub use kraken_core_kinds::state_secret::is_seeded;
use kraken_core_kinds::state_secret::{
    KEY_CREATE_ATTEMPT, KEY_PRIVATE, KEY_SCHEMA_VERSION, KEY_STATE,
};
const KEY_DEPOSED_STATE: &str = "deposedState";
const KEY_DEPOSED_PRIVATE: &str = "deposedPrivate";
const KEY_DEPOSED_SCHEMA_VERSION: &str = "deposedSchemaVersion";
/// The policy fields in force (`deletionPolicy`, `managementPolicy`, `replacePolicy`,
/// `ignoreChanges`), as JSON: under a `Manual` plan policy a change of them waits for approval
/// like any other ([`crate::spec::Policies`]).
const KEY_POLICIES: &str = "policies";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("state secret {name} is not a Kraken state secret (type {found:?})")]
    WrongType { name: String, found: String },
    #[error("state secret {name} has an invalid {key}")]
    Invalid { name: String, key: &'static str },
    /// Not as Kraken wrote it ([`crate::seal`]): nothing is done with it.
    #[error(
        "the state Secret {name} was changed by someone other than Kraken ({why}); nothing is \
         applied, destroyed or written over until an administrator restores it from a backup \
         or deletes it (then set spec.importId to adopt the object again)"
    )]
    Tampered { name: String, why: String },
    /// A seeded state where seeding is not authorized ([`crate::seal::SEEDING_POLICY`]).
    #[error(
        "the seeded state Secret {name} is not taken: seeding is authorized only where the \
         admission policy {policy} is installed (it admits such Secrets only from users who may \
         `seed` states.kraken.dev in the namespace)"
    )]
    SeedNotAuthorized { name: String, policy: &'static str },
}

/// What the state Secret holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stored {
    /// The state as cty JSON; `None` when no object exists (never created, or destroyed).
    pub state: Option<Vec<u8>>,
    pub private: Vec<u8>,
    pub schema_version: i64,
    /// The `kraken.dev/create-attempt` this state completed.
    pub create_attempt: Option<String>,
    /// The object a create-before-destroy replacement replaced, until it is destroyed.
    pub deposed: Option<Deposed>,
    /// The policy fields in force, as JSON (`None`: written before they were recorded).
    pub policies: Option<Vec<u8>>,
}

/// The old object of a create-before-destroy replacement (Terraform's "deposed" object): kept
/// from before its replacement is created until it is destroyed, so neither a crash nor a
/// failed destroy in between leaves it behind unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deposed {
    /// Its state as cty JSON.
    pub state: Vec<u8>,
    pub private: Vec<u8>,
    pub schema_version: i64,
}

impl Deposed {
    /// The provider's `id` of the deposed object, if its state has one.
    pub fn id(&self) -> Option<String> {
        let state: serde_json::Value = serde_json::from_slice(&self.state).ok()?;
        state.get("id")?.as_str().map(str::to_owned)
    }
}

/// The leader epoch (`kit::fence`) whose replica last wrote a state Secret.
pub const EPOCH_ANNOTATION: &str = "kraken.dev/leader-epoch";

/// The epoch recorded on a state Secret; `None` when none is (written without leader
/// election, or before epochs were recorded).
pub fn epoch_of(secret: &Secret) -> Option<Epoch> {
    secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EPOCH_ANNOTATION))
        .and_then(|v| Epoch::parse(v))
}

/// Records `epoch` on the state Secret about to be written (nothing without leader election).
pub fn stamp_epoch(secret: &mut Secret, epoch: Option<&Epoch>) {
    if let Some(epoch) = epoch {
        secret
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(EPOCH_ANNOTATION.to_owned(), epoch.to_string());
    }
}

/// The state Secret's name for resource `name` of `kind` in API `group`:
/// `<kind>-<name>.<group>-tfstate` ([`kraken_kit::names`]).
pub fn secret_name(group: &str, kind: &str, name: &str) -> String {
    kraken_core_kinds::state_secret::name(group, kind, name)
}

/// The name state Secrets had before derived names carried the API group:
/// `<kind>-<name>-tfstate`, lowercased, cut and hashed past 253 characters. Read once per
/// object that was created before (and renamed on its next write), so an upgrade neither
/// loses a state nor creates an object again.
pub fn legacy_secret_name(kind: &str, name: &str) -> String {
    let full = format!("{}-{}-tfstate", kind.to_lowercase(), name);
    if full.len() <= kraken_kit::names::MAX_NAME {
        return full;
    }
    let hash = format!("{:016x}", kraken_kit::hash::fnv1a(full.as_bytes()));
    let keep = kraken_kit::names::MAX_NAME - hash.len() - "--tfstate".len();
    let head: String = format!("{}-{}", kind.to_lowercase(), name)
        .chars()
        .take(keep)
        .collect();
    format!("{}-{hash}-tfstate", head.trim_end_matches(['-', '.']))
}

impl Stored {
    pub fn from_secret(secret: &Secret) -> Result<Self, StateError> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let found = secret.type_.clone().unwrap_or_default();
        if found != SECRET_TYPE {
            return Err(StateError::WrongType { name, found });
        }
        let empty = BTreeMap::new();
        let data = secret.data.as_ref().unwrap_or(&empty);
        let text = |key: &'static str| -> Result<Option<String>, StateError> {
            data.get(key)
                .map(|b| {
                    String::from_utf8(b.0.clone()).map_err(|_| StateError::Invalid {
                        name: name.clone(),
                        key,
                    })
                })
                .transpose()
        };
        let version = |key: &'static str| -> Result<i64, StateError> {
            match text(key)? {
                Some(v) => v.trim().parse().map_err(|_| StateError::Invalid {
                    name: name.clone(),
                    key,
                }),
                None => Ok(0),
            }
        };
        let schema_version = version(KEY_SCHEMA_VERSION)?;
        let deposed = match data.get(KEY_DEPOSED_STATE).filter(|b| !b.0.is_empty()) {
            Some(state) => Some(Deposed {
                state: state.0.clone(),
                private: data
                    .get(KEY_DEPOSED_PRIVATE)
                    .map(|b| b.0.clone())
                    .unwrap_or_default(),
                schema_version: version(KEY_DEPOSED_SCHEMA_VERSION)?,
            }),
            None => None,
        };
        Ok(Self {
            // Empty: no object (written so, an apply drops nothing by omission).
            state: data
                .get(KEY_STATE)
                .filter(|b| !b.0.is_empty())
                .map(|b| b.0.clone()),
            private: data
                .get(KEY_PRIVATE)
                .map(|b| b.0.clone())
                .unwrap_or_default(),
            schema_version,
            create_attempt: text(KEY_CREATE_ATTEMPT)?.filter(|s| !s.is_empty()),
            deposed,
            policies: data
                .get(KEY_POLICIES)
                .filter(|b| !b.0.is_empty())
                .map(|b| b.0.clone()),
        })
    }

    /// The Secret for server-side apply: every key Kraken owns is always present (empty when
    /// unset), so applying drops nothing by omission.
    pub fn to_secret(&self, name: &str, namespace: &str, owner: OwnerReference) -> Secret {
        let mut data = BTreeMap::new();
        data.insert(
            KEY_STATE.to_owned(),
            ByteString(self.state.clone().unwrap_or_default()),
        );
        data.insert(KEY_PRIVATE.to_owned(), ByteString(self.private.clone()));
        data.insert(
            KEY_SCHEMA_VERSION.to_owned(),
            ByteString(self.schema_version.to_string().into_bytes()),
        );
        data.insert(
            KEY_CREATE_ATTEMPT.to_owned(),
            ByteString(self.create_attempt.clone().unwrap_or_default().into_bytes()),
        );
        let deposed = self.deposed.clone().unwrap_or_default();
        data.insert(KEY_DEPOSED_STATE.to_owned(), ByteString(deposed.state));
        data.insert(KEY_DEPOSED_PRIVATE.to_owned(), ByteString(deposed.private));
        let deposed_version = self
            .deposed
            .as_ref()
            .map(|d| d.schema_version.to_string())
            .unwrap_or_default();
        data.insert(
            KEY_DEPOSED_SCHEMA_VERSION.to_owned(),
            ByteString(deposed_version.into_bytes()),
        );
        data.insert(
            KEY_POLICIES.to_owned(),
            ByteString(self.policies.clone().unwrap_or_default()),
        );
        Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                owner_references: Some(vec![owner]),
                labels: Some(BTreeMap::from([(
                    MANAGED_BY_LABEL.to_owned(),
                    "kraken".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            type_: Some(SECRET_TYPE.to_owned()),
            data: Some(data),
            ..Secret::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kraken_kit::names::MAX_NAME;

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "fixture.tf.kraken.dev/v1alpha1".into(),
            kind: "Object".into(),
            name: "a".into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    #[test]
    fn round_trips_through_a_secret() {
        for stored in [
            Stored::default(),
            Stored {
                state: Some(br#"{"id":"x"}"#.to_vec()),
                private: vec![0, 159, 146, 150],
                schema_version: 3,
                create_attempt: Some("2026-11-22T10:00:00Z".into()),
                deposed: None,
                policies: Some(br#"{"deletionPolicy":"Orphan"}"#.to_vec()),
            },
            Stored {
                state: None,
                private: Vec::new(),
                schema_version: 1,
                create_attempt: None,
                deposed: Some(Deposed {
                    state: br#"{"id":"old"}"#.to_vec(),
                    private: vec![7],
                    schema_version: 0,
                }),
                policies: None,
            },
        ] {
            let secret = stored.to_secret("object-a-tfstate", "ns", owner());
            assert_eq!(Stored::from_secret(&secret), Ok(stored));
        }
    }

    #[test]
    fn reads_hand_written_and_legacy_keys() {
        let with = |edit: &dyn Fn(&mut BTreeMap<String, ByteString>)| {
            let mut secret = Stored::default().to_secret("object-a-tfstate", "ns", owner());
            edit(secret.data.as_mut().expect("data"));
            Stored::from_secret(&secret)
        };
        let set = |key: &'static str, value: &'static [u8]| {
            move |d: &mut BTreeMap<String, ByteString>| {
                d.insert(key.into(), ByteString(value.to_vec()));
            }
        };
        // No schemaVersion reads as version 0 (the next reconcile asks the provider to
        // upgrade from it, as Terraform does for state without a version).
        let legacy = with(&|d| {
            d.remove(KEY_SCHEMA_VERSION);
        });
        assert_eq!(legacy.map(|s| s.schema_version), Ok(0));
        // What `kubectl create secret --from-file` or `echo` leave: surrounding whitespace.
        let edited = with(&set(KEY_SCHEMA_VERSION, b" 1\n"));
        assert_eq!(edited.map(|s| s.schema_version), Ok(1));
        let bad = StateError::Invalid {
            name: "object-a-tfstate".into(),
            key: KEY_SCHEMA_VERSION,
        };
        assert_eq!(with(&set(KEY_SCHEMA_VERSION, b"one")), Err(bad.clone()));
        assert_eq!(with(&set(KEY_SCHEMA_VERSION, b"")), Err(bad));
        // An empty createAttempt records no attempt; one that is not text is refused.
        let attempt = with(&set(KEY_CREATE_ATTEMPT, b""));
        assert_eq!(attempt.map(|s| s.create_attempt), Ok(None));
        assert_eq!(
            with(&set(KEY_CREATE_ATTEMPT, &[0xff, 0xfe])),
            Err(StateError::Invalid {
                name: "object-a-tfstate".into(),
                key: KEY_CREATE_ATTEMPT,
            })
        );
    }

    #[test]
    fn refuses_secrets_it_did_not_write() {
        let mut secret = Stored::default().to_secret("s", "ns", owner());
        secret.type_ = Some("Opaque".into());
        assert!(matches!(
            Stored::from_secret(&secret),
            Err(StateError::WrongType { .. })
        ));
    }

    #[test]
    fn names_are_bounded_and_stable() {
        let group = "fixture.tf.kraken.dev";
        assert_eq!(
            secret_name(group, "Object", "web"),
            "object-web.fixture-tfstate"
        );
        let long = "a".repeat(253);
        let name = secret_name(group, "Object", &long);
        assert!(name.len() <= MAX_NAME, "{}", name.len());
        assert!(name.ends_with("-tfstate"));
        assert_eq!(name, secret_name(group, "Object", &long));
        assert_ne!(name, secret_name(group, "Object", &"a".repeat(252)));
        assert_ne!(name, secret_name("other.tf.kraken.dev", "Object", &long));
    }
}

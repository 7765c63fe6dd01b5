//! The state Secret's shape (written and read by `managed::state`), for those who write one for
//! the operator: `kraken convert --state --seed-state` seeds each adopted object's state from
//! `terraform.tfstate`, so the operator refreshes that state instead of importing the object.

/// The keys of a state Secret's data.
pub const KEY_STATE: &str = "state";
pub const KEY_PRIVATE: &str = "private";
pub const KEY_SCHEMA_VERSION: &str = "schemaVersion";
pub const KEY_CREATE_ATTEMPT: &str = "createAttempt";

/// Label on a state Secret seeded from Terraform's state (value `terraform`). The operator takes
/// such a Secret as the state of the object of its name while no object owns it yet (then it
/// owns it); any other Secret of that name that it does not own is refused.
pub const SEEDED_LABEL: &str = "kraken.dev/seeded-from";

/// The state Secret's name for resource `name` of `kind` in API `group`:
/// `<kind>-<name>.<group>-tfstate` (`kit::names`).
pub fn name(group: &str, kind: &str, name: &str) -> String {
    kraken_kit::names::Origin::new(group, kind, name).with_suffix("-tfstate")
}

/// Whether `secret` is a seeded state Secret no object owns yet.
pub fn is_seeded(secret: &k8s_openapi::api::core::v1::Secret) -> bool {
    let m = &secret.metadata;
    secret.type_.as_deref() == Some(super::STATE_SECRET_TYPE)
        && m.owner_references.as_ref().is_none_or(Vec::is_empty)
        && m.labels
            .as_ref()
            .and_then(|l| l.get(SEEDED_LABEL))
            .is_some_and(|v| v == "terraform")
}

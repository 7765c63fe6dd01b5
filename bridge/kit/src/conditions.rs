//! `Ready` and `Synced`: the two conditions every managed resource reports.
//!
//! `Synced` says whether the last reconcile did what the spec asks (and if not, why, in a
//! reason a user can look up); `Ready` says whether the external object exists and is usable.
//! `lastTransitionTime` changes only when a condition's status flips, so a reconcile that
//! learns nothing new produces the same status and writes nothing.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One aspect of the object's state, as in metav1.Condition.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition's type (Ready).
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// A CamelCase word saying why the condition last changed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// A human-readable explanation.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the status last flipped (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: Option<String>,
    /// The metadata.generation the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A condition's status.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// The longest condition message written (a provider's diagnostics, a list of failures):
/// longer ones are cut, so no input makes a status grow without bound.
pub const MAX_MESSAGE: usize = 4096;

pub const READY: &str = "Ready";
pub const SYNCED: &str = "Synced";

/// Reasons, as documented in docs/operator.md.
pub mod reason {
    pub const AVAILABLE: &str = "Available";
    pub const CREATING: &str = "Creating";
    pub const DELETING: &str = "Deleting";
    pub const UNAVAILABLE: &str = "Unavailable";

    pub const RECONCILE_SUCCESS: &str = "ReconcileSuccess";
    pub const RECONCILE_PAUSED: &str = "ReconcilePaused";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const PROVIDER_CONFIG_MISSING: &str = "ProviderConfigMissing";
    pub const SECRET_MISSING: &str = "SecretMissing";
    /// A reference names something Kraken will not read for a namespace user (a service
    /// account token, Kraken's own Secrets).
    pub const FORBIDDEN: &str = "Forbidden";
    pub const PROVIDER_CONFIG_INVALID: &str = "ProviderConfigInvalid";
    pub const PROVIDER_ERROR: &str = "ProviderError";
    pub const REPLACE_REFUSED: &str = "ReplaceRefused";
    /// An object Kraken derives for this one (its state Secret, StateDeclaration, outputs
    /// Secret) exists and is someone else's.
    pub const NOT_OWNED: &str = "NotOwned";
    /// The state Secret is not as Kraken wrote it (its seal): nothing is done with it.
    pub const STATE_TAMPERED: &str = "StateTampered";
    /// A seeded state Secret where no admission policy authorizes seeding.
    pub const SEED_NOT_AUTHORIZED: &str = "SeedNotAuthorized";
    pub const CREATE_INTERRUPTED: &str = "CreateInterrupted";
    pub const EXTERNAL_OBJECT_MISSING: &str = "ExternalObjectMissing";
    /// An existing object was not adopted: nothing shows the namespace may take it.
    pub const ADOPTION_REFUSED: &str = "AdoptionRefused";
    pub const PROVIDER_UNAVAILABLE: &str = "ProviderUnavailable";
    /// The provider did not answer in time; it was replaced and the request is retried.
    pub const PROVIDER_TIMEOUT: &str = "ProviderTimeout";
    pub const API_ERROR: &str = "ApiError";
    /// A replica whose leadership is not current tried to write (`kit::fence`); only in
    /// metrics and logs, never on an object.
    pub const FENCED: &str = "Fenced";
    /// A deletion waits for the objects that still need this one (its users, its readers).
    pub const IN_USE: &str = "InUse";
    /// The object's kind is not reconciled: its Provider was deleted (forced) with it in place.
    pub const KIND_SUSPENDED: &str = "KindSuspended";
}

/// Whether `status.conditions` (of a status object as JSON) has `type_` with status `True`.
pub fn is_true(status: &serde_json::Value, type_: &str) -> bool {
    status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

/// Now, as a condition's `lastTransitionTime` (RFC 3339, whole seconds).
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// A condition to set: type, status, reason, message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    pub type_: &'static str,
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Set {
    pub fn new(
        type_: &'static str,
        status: bool,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason,
            message: super::text::truncate(&message.into(), MAX_MESSAGE),
        }
    }
}

/// The conditions after applying `updates` to `current`, keeping the transition time of any
/// condition whose status did not change. Conditions of other types are kept as they are.
pub fn merge(
    current: &[Condition],
    updates: &[Set],
    generation: Option<i64>,
    now: &str,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = current.to_vec();
    for u in updates {
        let status = if u.status {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        };
        let existing = out.iter_mut().find(|c| c.type_ == u.type_);
        let transition = match &existing {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => Some(now.to_owned()),
        };
        let cond = Condition {
            type_: u.type_.to_owned(),
            status,
            reason: u.reason.to_owned(),
            message: u.message.clone(),
            last_transition_time: transition,
            observed_generation: generation,
        };
        match existing {
            Some(c) => *c = cond,
            None => out.push(cond),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let t0 = "2026-01-01T00:00:00Z";
        let t1 = "2026-01-01T00:01:00Z";
        let first = merge(
            &[],
            &[Set::new(READY, false, reason::CREATING, "creating")],
            Some(1),
            t0,
        );
        assert_eq!(first[0].last_transition_time.as_deref(), Some(t0));
        let same = merge(
            &first,
            &[Set::new(READY, false, reason::UNAVAILABLE, "x")],
            Some(2),
            t1,
        );
        assert_eq!(same[0].last_transition_time.as_deref(), Some(t0));
        assert_eq!(same[0].reason, reason::UNAVAILABLE);
        assert_eq!(same[0].observed_generation, Some(2));
        let flipped = merge(
            &same,
            &[Set::new(READY, true, reason::AVAILABLE, "")],
            Some(2),
            t1,
        );
        assert_eq!(flipped[0].last_transition_time.as_deref(), Some(t1));
        let both = merge(
            &flipped,
            &[Set::new(SYNCED, true, reason::RECONCILE_SUCCESS, "")],
            Some(2),
            t1,
        );
        assert_eq!(both.len(), 2);
        assert_eq!(merge(&both, &[], Some(2), t1), both);
    }
}

//! The fields of a generated kind's spec the controller reads, and the policies they set.

use kube::runtime::controller::Action;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

pub use kraken_core_kinds::PlanPolicy;
use kraken_provider::ImportBy;
use kraken_source::Configured;

/// Why an ObserveOnly object without an import is refused.
pub const OBSERVE_NEEDS_IMPORT: &str = "managementPolicy ObserveOnly needs spec.importId (the id of the object to observe) or spec.importIdentity";

/// The fields of a generated kind's spec the controller reads (forProvider stays JSON).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedSpec {
    #[serde(default)]
    provider_config_ref: Option<NameRef>,
    #[serde(default)]
    pub for_provider: Json,
    #[serde(default)]
    pub values_from: Vec<Json>,
    #[serde(default)]
    pub management_policy: Option<String>,
    #[serde(default)]
    pub deletion_policy: Option<String>,
    #[serde(default)]
    pub replace_policy: Option<String>,
    #[serde(default)]
    pub import_id: Option<String>,
    /// `spec.importIdentity`: the resource identity to adopt the object by (preferred over
    /// `importId`).
    #[serde(default)]
    pub import_identity: Option<serde_json::Map<String, Json>>,
    /// Arguments whose changes are not applied once the object exists (`ignore`).
    #[serde(default)]
    pub ignore_changes: Vec<String>,
    #[serde(default)]
    pub drift_interval: Option<String>,
    /// A data source kind's `spec.refreshInterval`.
    #[serde(default)]
    pub refresh_interval: Option<String>,
    /// Unset: the ProviderConfig's and the namespace's ([`ManagedSpec::plan_policy`]).
    #[serde(default)]
    plan_policy: Option<PlanPolicy>,
}

/// The spec fields that decide what Kraken may do to the external object, apart from the
/// object's own arguments: whether it is managed or only observed, whether deleting the
/// resource destroys it, how a replacement goes, which changes are not applied. Under a
/// `Manual` plan policy a change of them waits for approval like a change of the object
/// (an editor could otherwise release an object whose delete waits, or stop a held change by
/// ignoring it); the ones in force are recorded in the sealed state.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policies {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_changes: Vec<String>,
}

impl Policies {
    /// What the state recorded (`None`: nothing readable, written before they were recorded).
    pub fn parse(recorded: Option<&[u8]>) -> Option<Self> {
        serde_json::from_slice(recorded?).ok()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Each field that differs from `before`, as a change of `status.plan`: `spec.<field>`,
    /// and the values as JSON (`null` when unset).
    pub fn changes_from(&self, before: &Self) -> Vec<Json> {
        let shown = |v: &Option<String>| match v {
            Some(v) => Json::String(v.clone()).to_string(),
            None => "null".to_owned(),
        };
        let list = |v: &[String]| serde_json::to_string(v).unwrap_or_default();
        let mut out = Vec::new();
        let mut push = |field: &str, b: String, a: String| {
            if b != a {
                out.push(
                    serde_json::json!({"path": format!("spec.{field}"), "before": b, "after": a}),
                );
            }
        };
        push(
            "deletionPolicy",
            shown(&before.deletion_policy),
            shown(&self.deletion_policy),
        );
        push(
            "ignoreChanges",
            list(&before.ignore_changes),
            list(&self.ignore_changes),
        );
        push(
            "managementPolicy",
            shown(&before.management_policy),
            shown(&self.management_policy),
        );
        push(
            "replacePolicy",
            shown(&before.replace_policy),
            shown(&self.replace_policy),
        );
        out
    }
}

#[derive(Debug, Default, Clone, Deserialize)]
struct NameRef {
    name: String,
}

impl ManagedSpec {
    /// The policy fields as the spec sets them.
    pub fn policies(&self) -> Policies {
        Policies {
            management_policy: self.management_policy.clone(),
            deletion_policy: self.deletion_policy.clone(),
            replace_policy: self.replace_policy.clone(),
            ignore_changes: self.ignore_changes.clone(),
        }
    }

    /// This spec with the policy fields `policies` (those in force while a change of them
    /// waits for approval).
    pub fn with_policies(&self, policies: Policies) -> Self {
        Self {
            management_policy: policies.management_policy,
            deletion_policy: policies.deletion_policy,
            replace_policy: policies.replace_policy,
            ignore_changes: policies.ignore_changes,
            ..self.clone()
        }
    }

    pub fn observe_only(&self) -> bool {
        self.management_policy.as_deref() == Some("ObserveOnly")
    }

    /// `replacePolicy: Refuse`: a change that needs a replacement is refused.
    pub fn refuses_replace(&self) -> bool {
        self.replace_policy.as_deref() == Some("Refuse")
    }

    /// `replacePolicy: CreateBeforeDestroy`: a replacement creates the new object first.
    pub fn creates_first(&self) -> bool {
        self.replace_policy.as_deref() == Some("CreateBeforeDestroy")
    }

    pub fn provider_config(&self) -> &str {
        self.provider_config_ref
            .as_ref()
            .map_or("default", |r| r.name.as_str())
    }

    /// What adopts an existing object: `importIdentity`, else `importId` (empty ones unset).
    pub fn import(&self) -> Option<ImportBy> {
        match (&self.import_identity, &self.import_id) {
            (Some(identity), _) if !identity.is_empty() => {
                Some(ImportBy::Identity(identity.clone()))
            }
            (_, Some(id)) if !id.is_empty() => Some(ImportBy::Id(id.clone())),
            _ => None,
        }
    }

    /// Whether the object is adopted (`importId` or `importIdentity`), not created.
    pub fn adopts(&self) -> bool {
        self.import().is_some()
    }

    /// Which changes wait for approval: the strictest of the namespace's `floor` (set by
    /// administrators, [`crate::floor`]), the ProviderConfig `p` came from and
    /// `spec.planPolicy`. A resource may ask for more review, never less.
    pub fn plan_policy(&self, p: &Configured, floor: PlanPolicy) -> PlanPolicy {
        crate::floor::effective(floor, p.plan_policy, self.plan_policy)
    }

    /// When to read a data source again.
    pub fn refresh_action(&self) -> Action {
        kraken_kit::time::drift_after(self.refresh_interval.as_deref())
            .map_or_else(Action::await_change, Action::requeue)
    }

    /// When to look for drift next.
    pub fn drift_action(&self) -> Action {
        kraken_kit::time::drift_after(self.drift_interval.as_deref())
            .map_or_else(Action::await_change, Action::requeue)
    }
}

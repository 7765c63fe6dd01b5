//! The fields of a generated kind's spec the controller reads, and the policies they set.

use kube::runtime::controller::Action;
use serde::Deserialize;
use serde_json::Value as Json;

pub use kraken_core_kinds::PlanPolicy;
use kraken_provider::ImportBy;
use kraken_source::Configured;

/// Why an ObserveOnly object without an import is refused.
pub const OBSERVE_NEEDS_IMPORT: &str = "managementPolicy ObserveOnly needs spec.importId (the id of the object to observe) or spec.importIdentity";

/// The fields of a generated kind's spec the controller reads (forProvider stays JSON).
#[derive(Debug, Default, Deserialize)]
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

#[derive(Debug, Default, Deserialize)]
struct NameRef {
    name: String,
}

impl ManagedSpec {
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

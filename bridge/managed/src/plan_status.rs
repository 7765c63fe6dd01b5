//! `status.plan` and `status.lastAppliedPlan` read back, for clients (the kubectl plugin) that
//! show and approve plans. It sits beside [`plan`](super::plan), which writes them, so that one
//! unit test holds the writer and the reader to the same field names.
//!
//! Lenient where the writer may grow (unknown fields are ignored, optional ones default), strict
//! where a client relies on a field: a plan without an `id` or `action` is malformed, since
//! approving it would be a guess.

use serde::Deserialize;
use serde_json::Value as Json;

/// How the writer shows values it does not know or will not show, and how many changes it lists.
pub use super::plan::{MAX_CHANGES, MAX_PLAN_BYTES, SENSITIVE, UNKNOWN};

/// The plan held for approval: `status.plan`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingPlan {
    /// What `kraken.dev/approve-plan` must name for the change to be applied.
    pub id: String,
    /// `Create`, `Update` or `Replace`.
    pub action: String,
    /// The attribute-level changes, at most `plan::MAX_CHANGES` of them.
    #[serde(default)]
    pub changes: Vec<Change>,
    /// How many further changes were left out of `changes`.
    #[serde(default)]
    pub omitted: u64,
    /// An approval given that no longer matches (and why), while this plan waits.
    #[serde(default)]
    pub stale_approval: Option<StaleApproval>,
}

/// One top-level attribute that changes, in Kubernetes field names. Values are compact JSON,
/// `(sensitive)` or `(known after apply)`, as the writer shows them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    pub path: String,
    /// Absent when nothing existed before (a create).
    #[serde(default)]
    pub before: Option<String>,
    pub after: String,
    /// Some of the new value is known only after apply.
    #[serde(default)]
    pub unknown: bool,
    /// Changing this attribute replaces the object.
    #[serde(default)]
    pub forces_replacement: bool,
}

/// `status.plan.staleApproval`: the approved id and why it does not apply.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct StaleApproval {
    pub id: String,
    #[serde(default)]
    pub why: String,
}

/// `status.lastAppliedPlan`: the approved plan applied last.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AppliedPlan {
    pub id: String,
    #[serde(default)]
    pub action: String,
}

/// What an object's status says about plans.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanStatus {
    /// The plan waiting for approval, if any.
    pub pending: Option<PendingPlan>,
    /// The approved plan applied last, if any.
    pub last_applied: Option<AppliedPlan>,
}

/// A plan field of a status that is not what Kraken writes.
#[derive(Debug, thiserror::Error)]
#[error("status.{field} is malformed")]
pub struct Malformed {
    pub field: &'static str,
    #[source]
    pub source: serde_json::Error,
}

/// Reads the plan fields of an object's `status` (`Null` when the object has none yet).
pub fn read(status: &Json) -> Result<PlanStatus, Malformed> {
    Ok(PlanStatus {
        pending: field(status, "plan")?,
        last_applied: field(status, "lastAppliedPlan")?,
    })
}

fn field<T: serde::de::DeserializeOwned>(
    status: &Json,
    field: &'static str,
) -> Result<Option<T>, Malformed> {
    match status.get(field) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => T::deserialize(v)
            .map(Some)
            .map_err(|source| Malformed { field, source }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::{self, Basis};
    use crate::plan_key::PlanKey;
    use kraken_provider::fake::{TYPE, schema};
    use kraken_provider::lifecycle::{Action, Plan};
    use kraken_value::fields::FieldMap;
    use kraken_value::{AttrPath, Value};

    /// What `plan::view` writes, `read` reads: ids, actions, markers and redactions.
    #[test]
    fn reads_what_the_writer_writes() -> Result<(), Malformed> {
        let p = Plan {
            action: Action::Replace,
            type_name: TYPE.into(),
            prior_state: Value::object([
                ("zone", Value::string("z1")),
                ("password", Value::string("a")),
                ("id", Value::string("x")),
            ]),
            prior_private: Vec::new(),
            config: Value::Null,
            planned_state: Value::object([
                ("zone", Value::string("z2")),
                ("password", Value::string("b")),
                ("id", Value::unknown()),
            ]),
            planned_private: Vec::new(),
            requires_replace: vec![AttrPath::root().attr("zone")],
            diagnostics: Vec::new(),
        };
        let s = schema();
        let fields = FieldMap::for_resource(TYPE, &s.resources[TYPE]);
        let key = PlanKey::from_bytes([3; 32]);
        let basis = Basis::of(&key, &p, 2, "fake 0.0.0", "pc");
        let id = basis.id(&key, TYPE);
        let mut view = plan::view(&p, &id, &basis, &fields, &|a: &str| a == "password");
        view["staleApproval"] = json!({"id": "old", "why": "the spec changed"});
        let status = json!({"plan": view, "lastAppliedPlan": {"id": "old0", "action": "Create"}});

        let got = read(&status)?;
        let pending = got
            .pending
            .as_ref()
            .map(|p| (p.id.as_str(), p.action.as_str()));
        assert_eq!(pending, Some((id.as_str(), "Replace")));
        let changes = got.pending.map(|p| p.changes).unwrap_or_default();
        let show = |c: &Change| {
            (
                c.path.clone(),
                c.before.clone(),
                c.after.clone(),
                c.unknown,
                c.forces_replacement,
            )
        };
        let shown: Vec<_> = changes.iter().map(show).collect();
        let s = |v: &str| v.to_owned();
        assert_eq!(
            shown,
            [
                (
                    s("spec.forProvider.passwordSecretRef"),
                    Some(s(SENSITIVE)),
                    s(SENSITIVE),
                    false,
                    false
                ),
                (
                    s("spec.forProvider.zone"),
                    Some(s("\"z1\"")),
                    s("\"z2\""),
                    false,
                    true
                ),
                (
                    s("status.atProvider.id"),
                    Some(s("\"x\"")),
                    s(UNKNOWN),
                    true,
                    false
                ),
            ]
        );
        assert_eq!(
            got.last_applied,
            Some(AppliedPlan {
                id: s("old0"),
                action: s("Create")
            })
        );
        Ok(())
    }

    #[test]
    fn no_plan_fields_and_malformed_ones() {
        assert_eq!(read(&Json::Null).ok(), Some(PlanStatus::default()));
        assert_eq!(
            read(&json!({"plan": null, "conditions": []})).ok(),
            Some(PlanStatus::default())
        );
        let err = read(&json!({"plan": {"action": "Create"}})).err();
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some("status.plan is malformed")
        );
    }
}

//! Step: the gate `spec.planPolicy` puts before a change — identify the plan just made
//! ([`plan::Basis`]), compare it with the approval annotation, and either let the change go
//! ahead or hold it: nothing applied, `status.plan` showing what would change, `Ready` still
//! describing the live object, `Synced=False` with a reason saying what waits (a change,
//! drift to put back, or a delete), and an Event when the plan pending (or the staleness of an
//! approval) is new. A change approved and carried out is recorded with who approved it
//! (`status.lastAppliedPlan`, `status.planHistory`) and announced in Events.

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use kube::Api;
use serde_json::{Value as Json, json};

use super::decide::{Act, Gate};
use super::error::Result;
use super::plan::{self, Basis};
use super::report::condition;
use super::target::{Target, plan_paths};
use super::write::Run;
use super::{APPROVE_PLAN_ANNOTATION, APPROVED_BY_ANNOTATION};
use kraken_kit::conditions::{READY, SYNCED, Set, reason};
use kraken_provider::lifecycle::Plan;
use kraken_value::Value;

/// `Synced=False` reason while a change of the spec waits for approval of its plan.
pub const PLAN_PENDING: &str = "PlanPending";
/// `Synced=False` reason while putting back a change made outside Kraken waits for approval.
pub const DRIFT_PENDING: &str = "DriftPending";
/// `Synced=False` reason while the destroy of a deleted object waits for approval.
pub const DELETE_PENDING: &str = "DeletePending";
/// Event reason when an approval names a plan that is no longer the one planned.
pub const PLAN_STALE: &str = "PlanStale";
/// Event reason when an approved plan is about to be carried out, naming who approved it.
pub const PLAN_APPROVED: &str = "PlanApproved";
/// Event reason when an approved plan was carried out, naming who approved it.
pub const PLAN_APPLIED: &str = "PlanApplied";
/// How many applied plans `status.planHistory` keeps, newest first.
pub const HISTORY: usize = 10;
/// The admission policy (and its binding, same name) that makes `kraken.dev/approved-by`
/// trustworthy: it admits the annotation only as the requesting user's own name, from a user
/// allowed to `approve` plans in the namespace.
pub const APPROVAL_POLICY: &str = "kraken-plan-approval";

/// What a held plan would do, which names the reason it waits under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// The spec changed (or the object is new).
    Change,
    /// The object changed outside Kraken; the plan puts it back.
    Drift,
    /// The object was deleted; the plan destroys the external object.
    Delete,
}

impl Held {
    /// What a held step of a live object's pass is.
    pub fn of(act: Act) -> Self {
        match act {
            Act::Update { drift: true } | Act::Create { recreate: true } => Self::Drift,
            _ => Self::Change,
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            Self::Change => PLAN_PENDING,
            Self::Drift => DRIFT_PENDING,
            Self::Delete => DELETE_PENDING,
        }
    }
}

/// The plan just made, identified, and what the gate decided about it.
pub(super) struct Gated {
    pub(super) gate: Gate,
    pub(super) id: String,
    /// What the plan was made from (empty when the policy does not hold the step: then the
    /// plan is neither shown nor identified).
    basis: Basis,
    /// The approval annotation, unless it names the plan applied last (spent).
    approval: Option<String>,
}

/// Identifies `plan` and asks `decide` (given whether the approval annotation names this very
/// plan) whether it goes ahead. A step the policy does not hold is not identified at all: under
/// `Auto` no digest is computed.
pub(super) fn gate(
    run: &Run<'_>,
    t: &Target<'_>,
    plan: &Plan,
    decide: impl Fn(bool) -> Gate,
) -> Gated {
    if decide(false) == Gate::Go {
        return Gated {
            gate: Gate::Go,
            id: String::new(),
            basis: Basis::default(),
            approval: None,
        };
    }
    let generation = run.generation().unwrap_or_default();
    let basis = Basis::of(
        &run.k.ctx.plan_key,
        plan,
        generation,
        &t.p.label,
        &t.p.config_digest,
    );
    let id = basis.id(&run.k.ctx.plan_key, t.type_name);
    let spent = run
        .status
        .pointer("/lastAppliedPlan/id")
        .and_then(Json::as_str);
    let approval = run
        .annotation(APPROVE_PLAN_ANNOTATION)
        .filter(|a| Some(*a) != spent)
        .map(str::to_owned);
    let gate = decide(approval.as_deref() == Some(id.as_str()));
    Gated {
        gate,
        id,
        basis,
        approval,
    }
}

/// Who approved, as `kraken.dev/approved-by` says; marked unverified unless the admission
/// policy that vouches for it is bound in the cluster (looked up per approval: approvals are
/// rare, and the policy may be installed after the operator started).
async fn approver(run: &Run<'_>) -> String {
    let named = run
        .annotation(APPROVED_BY_ANNOTATION)
        .filter(|s| !s.is_empty());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(run.k.ctx.client.clone());
    let enforced = matches!(bindings.get_opt(APPROVAL_POLICY).await, Ok(Some(_)));
    match (named, enforced) {
        (Some(user), true) => user.to_owned(),
        (Some(user), false) => {
            format!("{user} (unverified: the admission policy {APPROVAL_POLICY} is not installed)")
        }
        (None, _) => format!("an unnamed user (no {APPROVED_BY_ANNOTATION} annotation)"),
    }
}

/// Before an approved plan is carried out: an Event naming who approved it. Returns the
/// approver, for [`went_ahead`].
pub(super) async fn approved(run: &Run<'_>, gated: &Gated, plan: &Plan) -> Option<String> {
    if gated.gate != Gate::Approved {
        return None;
    }
    let who = approver(run).await;
    let note = format!(
        "plan {} ({}) approved by {who}: carrying it out",
        gated.id, plan.action
    );
    run.event(false, PLAN_APPROVED, note).await;
    Some(who)
}

/// After a change went ahead: no plan is pending; an approved one is recorded as applied (so
/// its annotation is not mistaken later for a stale approval) with who approved it, in
/// `status.lastAppliedPlan` and the bounded `status.planHistory`, and announced.
pub(super) async fn went_ahead(
    run: &mut Run<'_>,
    gated: &Gated,
    plan: &Plan,
    approver: Option<String>,
) {
    run.set_status_field("plan", Json::Null);
    let Some(who) = approver else {
        return;
    };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let applied = json!({"id": gated.id, "action": plan.action.to_string(),
                         "approvedBy": who, "appliedAt": now});
    let mut history = vec![applied.clone()];
    if let Some(Json::Array(old)) = run.status.get("planHistory") {
        history.extend(old.iter().take(HISTORY - 1).cloned());
    }
    run.set_status_field("lastAppliedPlan", applied);
    run.set_status_field("planHistory", Json::Array(history));
    let note = format!(
        "applied plan {} ({}), approved by {who}",
        gated.id, plan.action
    );
    run.event(false, PLAN_APPLIED, note).await;
}

/// Holds the change: shows the plan (with the changes of the spec's policy fields
/// `policy_changes`, which wait with it) and the live object `state`, and says what waits
/// (and why an approval given is stale).
pub(super) async fn hold(
    run: &mut Run<'_>,
    t: &Target<'_>,
    plan: &Plan,
    state: &Value,
    gated: &Gated,
    (held, policy_changes): (Held, &[Json]),
) -> Result<()> {
    let (mut view, stale) = plan_view(run, t, plan, gated)?;
    view["reason"] = json!(held.reason());
    if let Some(changes) = view["changes"].as_array_mut() {
        changes.splice(0..0, policy_changes.iter().cloned());
    }
    run.set_status_field("plan", view);
    let mut updates = Vec::new();
    if state.is_null() {
        let note = format!(
            "nothing exists yet: the create waits for approval of plan {}",
            gated.id
        );
        updates.push(Set::new(READY, false, reason::CREATING, note));
    } else {
        super::deps::show_live(run, t.fields(), state);
        updates.push(Set::new(READY, true, reason::AVAILABLE, ""));
    }
    let what = match held {
        Held::Change => String::new(),
        Held::Drift => format!(
            "changed outside Kraken ({}); ",
            plan_paths(plan, t.fields()).join(", ")
        ),
        Held::Delete => "deleted: destroying the external object waits for approval \
            (kraken.dev/force-delete does not skip it); "
            .to_owned(),
    };
    let message = format!(
        "{what}{}",
        pending_message(run, plan, &gated.id, stale.as_deref())
    );
    let before = condition(&run.status, SYNCED);
    updates.push(Set::new(SYNCED, false, held.reason(), message.clone()));
    run.set_conditions(&updates);
    let repeated =
        before.is_some_and(|(s, r, m)| s == "False" && r == held.reason() && m == message);
    if !repeated {
        let r = if stale.is_some() {
            PLAN_STALE
        } else {
            held.reason()
        };
        run.event(stale.is_some(), r, message).await;
    }
    Ok(())
}

/// `status.plan` for the held plan, and why the approval given (if any) is stale.
fn plan_view(
    run: &Run<'_>,
    t: &Target<'_>,
    plan: &Plan,
    gated: &Gated,
) -> Result<(Json, Option<String>)> {
    let previous = run.status.get("plan");
    let schema = t.p.resource(t.type_name)?;
    let mut echoed = run
        .sensitive_values
        .echoed_in(&kraken_value::kube::to_kube_json(&plan.prior_state));
    echoed.extend(
        run.sensitive_values
            .echoed_in(&kraken_value::kube::to_kube_json(&plan.planned_state)),
    );
    let sensitive = |a: &str| {
        run.sensitive_inputs.contains(a)
            || echoed.contains(a)
            || schema.block.attributes.get(a).is_some_and(|x| x.sensitive)
    };
    let mut view = plan::view(plan, &gated.id, &gated.basis, t.fields(), &sensitive);
    let Some(approved) = gated.approval.as_deref() else {
        return Ok((view, None));
    };
    let why = staleness(approved, previous, &gated.basis);
    let stale = format!("the approved plan {approved} is stale: {why}");
    view["staleApproval"] = json!({"id": approved, "why": why});
    Ok((view, Some(stale)))
}

/// Why the approval of plan `approved` does not apply to the plan whose basis is `now`, from
/// the plan that was pending before (`previous`, `status.plan`): what moved since the approved
/// plan, or what an earlier pass found about the same approval.
fn staleness(approved: &str, previous: Option<&Json>, now: &Basis) -> String {
    let known = previous
        .and_then(|p| p.get("staleApproval"))
        .filter(|s| s.get("id").and_then(Json::as_str) == Some(approved))
        .and_then(|s| s.get("why"))
        .and_then(Json::as_str);
    if let Some(why) = known {
        return why.to_owned();
    }
    let was = previous
        .filter(|p| p.get("id").and_then(Json::as_str) == Some(approved))
        .and_then(|p| p.get("basis"))
        .and_then(Basis::from_json);
    match was {
        Some(was) => {
            let moved = now.moved_since(&was);
            if moved.is_empty() {
                "it was planned from other inputs".to_owned()
            } else {
                moved.join("; ")
            }
        }
        None => "it is not the plan pending".to_owned(),
    }
}

fn pending_message(run: &Run<'_>, plan: &Plan, id: &str, stale: Option<&str>) -> String {
    let r = &run.k.kind.resource;
    let object = format!(
        "{}.{}/{}",
        r.plural,
        r.group,
        run.obj.metadata.name.as_deref().unwrap_or_default()
    );
    let waits = format!(
        "plan {id} ({}) waits for approval: `kubectl kraken show-plan {object}` shows it, \
         `kubectl kraken approve {object} --id {id}` applies it (it annotates \
         {APPROVE_PLAN_ANNOTATION}={id} and {APPROVED_BY_ANNOTATION}=<your user name>)",
        plan.action
    );
    match stale {
        Some(stale) => format!("{stale}; {waits}"),
        None => waits,
    }
}

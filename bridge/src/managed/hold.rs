//! Step: the gate `spec.planPolicy` puts before a change — identify the plan just made
//! ([`plan::Basis`]), compare it with the approval annotation, and either let the change go
//! ahead or hold it: nothing applied, `status.plan` showing what would change, `Ready` still
//! describing the live object, `Synced=False` with reason `PlanPending`, and an Event when the
//! plan pending (or the staleness of an approval) is new.

use serde_json::{Value as Json, json};

use super::APPROVE_PLAN_ANNOTATION;
use super::decide::{self, Act, Gate};
use super::error::Result;
use super::observe::Observed;
use super::plan::{self, Basis};
use super::report::condition;
use super::spec::PlanPolicy;
use super::target::Target;
use super::write::Run;
use crate::kit::conditions::{READY, SYNCED, Set, reason};
use crate::provider::lifecycle::Plan;

/// `Synced=False` reason while a change waits for approval of its plan.
pub const PLAN_PENDING: &str = "PlanPending";
/// Event reason when an approval names a plan that is no longer the one planned.
pub const PLAN_STALE: &str = "PlanStale";

/// The plan just made, identified, and what the gate decided about it.
pub(super) struct Gated {
    pub(super) gate: Gate,
    pub(super) id: String,
    basis: Basis,
    /// The approval annotation, unless it names the plan applied last (spent).
    approval: Option<String>,
}

/// Identifies `plan` and decides whether step `act` goes ahead under `policy`.
pub(super) fn gate(
    run: &Run<'_>,
    t: &Target<'_>,
    policy: PlanPolicy,
    plan: &Plan,
    act: Act,
) -> Gated {
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
    let gate = decide::gate(policy, act, approval.as_deref() == Some(id.as_str()));
    Gated {
        gate,
        id,
        basis,
        approval,
    }
}

/// After a change went ahead: no plan is pending; an approved one is recorded as applied, so
/// its annotation is not mistaken later for a stale approval.
pub(super) fn went_ahead(run: &mut Run<'_>, gated: &Gated, plan: &Plan) {
    run.set_status_field("plan", Json::Null);
    if gated.gate == Gate::Approved {
        let applied = json!({"id": gated.id, "action": plan.action.to_string()});
        run.set_status_field("lastAppliedPlan", applied);
    }
}

/// Holds the change: persists the refreshed state, shows the plan and the live object, and
/// says what waits (and why an approval given is stale).
pub(super) async fn hold(
    run: &mut Run<'_>,
    t: &Target<'_>,
    plan: &Plan,
    observed: Observed,
    gated: &Gated,
) -> Result<()> {
    let Observed {
        state,
        private,
        completed,
        mut saved,
        ..
    } = observed;
    saved
        .write_if_changed(run, t, &state, &private, completed)
        .await?;
    let (view, stale) = plan_view(run, t, plan, gated)?;
    run.set_status_field("plan", view);
    let mut updates = Vec::new();
    if state.is_null() {
        let note = format!(
            "nothing exists yet: the create waits for approval of plan {}",
            gated.id
        );
        updates.push(Set::new(READY, false, reason::CREATING, note));
    } else {
        super::deps::show_live(run, t.fields(), &state);
        updates.push(Set::new(READY, true, reason::AVAILABLE, ""));
    }
    let message = pending_message(plan, &gated.id, stale.as_deref());
    let before = condition(&run.status, SYNCED);
    updates.push(Set::new(SYNCED, false, PLAN_PENDING, message.clone()));
    run.set_conditions(&updates);
    let repeated =
        before.is_some_and(|(s, r, m)| s == "False" && r == PLAN_PENDING && m == message);
    if !repeated {
        let r = if stale.is_some() {
            PLAN_STALE
        } else {
            PLAN_PENDING
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
    let sensitive = |a: &str| {
        run.sensitive_inputs.contains(a)
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

fn pending_message(plan: &Plan, id: &str, stale: Option<&str>) -> String {
    let waits = format!(
        "plan {id} ({}) waits for approval: annotate {APPROVE_PLAN_ANNOTATION}={id} to apply it \
         (kubectl get -o jsonpath='{{.status.plan}}' shows the changes)",
        plan.action
    );
    match stale {
        Some(stale) => format!("{stale}; {waits}"),
        None => waits,
    }
}

//! Step: a deleted object — wait while others read its outputs, then destroy the external
//! object (or orphan it), drop the state and the hub objects, and release the finalizer. Under
//! `planPolicy: Manual` or `ManualForDestructive` the destroy is planned and held until that
//! plan is approved ([`hold`]), like any other change; `kraken.dev/force-delete` does not skip
//! the hold (it only skips waiting for readers).

use kube::runtime::controller::Action;

use super::decide::{self, Gate, OnDelete};
use super::deposed::{self, Current};
use super::error::Result;
use super::hold::{self, Held};
use super::observe::{owner, recover};
use super::report::condition;
use super::spec::{ManagedSpec, PlanPolicy, Policies};
use super::target::{Saved, Target, apply_plan, fail_on_errors};
use super::write::Run;
use super::{CREATE_ATTEMPT_ANNOTATION, deps};
use kraken_kit::conditions::{READY, Set};
use kraken_kit::finalizer::Phase;
use kraken_provider::DiagnosticsExt as _;
use kraken_provider::lifecycle;
use kraken_value::Value;

/// Cleans up after a deleted object, as [`decide::on_delete`] says.
pub(super) async fn cleanup(run: &mut Run<'_>, spec: &ManagedSpec) -> Result<Action> {
    if run.finalizer_phase() == Phase::Released {
        return Ok(Action::await_change());
    }
    let readers = deps::readers(run).await?;
    let in_force = in_force(run, spec).await?;
    let spec = &in_force;
    // A data source has no external object of its own: its deletion only waits for readers.
    let data_source = run.k.kind.data_source;
    let orphan_policy = data_source || spec.deletion_policy.as_deref() == Some("Orphan");
    let step = decide::on_delete(!readers.is_empty(), orphan_policy, spec.observe_only());
    match step {
        OnDelete::Wait => return wait_for_readers(run, &readers).await,
        OnDelete::Orphan => {}
        OnDelete::Destroy => {
            if destroy(run, spec).await? == Destroyed::Held {
                run.flush_status().await?;
                return Ok(Action::await_change());
            }
        }
    }
    run.delete_state().await?;
    deps::retire(run).await?;
    run.set_finalizer(false).await?;
    if data_source {
        return Ok(Action::await_change());
    }
    if step == OnDelete::Orphan {
        run.event(
            false,
            "Orphaned",
            "released the external object without destroying it",
        )
        .await;
    } else {
        run.event(
            false,
            "Deleted",
            format!("destroyed {}", run.k.kind.type_name),
        )
        .await;
    }
    Ok(Action::await_change())
}

/// The spec the deletion goes by: under a plan policy that holds deletes (`Manual`,
/// `ManualForDestructive`), with the policy fields in force as the state recorded them, not
/// as edited since: a `deletionPolicy: Orphan` or `ObserveOnly` set without approval does not
/// release an object whose destroy waits for it.
async fn in_force(run: &Run<'_>, spec: &ManagedSpec) -> Result<ManagedSpec> {
    if run.k.kind.data_source || !run.has_finalizer() {
        return Ok(spec.clone());
    }
    let p = super::apply::provider(run, spec).await?;
    let policy = spec.plan_policy(&p, run.k.ctx.floors.of(&run.namespace).await);
    if policy == PlanPolicy::Auto {
        return Ok(spec.clone());
    }
    let recorded = run
        .load_state()
        .await?
        .and_then(|s| Policies::parse(s.policies.as_deref()));
    Ok(match recorded {
        Some(policies) => spec.with_policies(policies),
        None => spec.clone(),
    })
}

/// Deletion waits while `readers` still read the object's outputs: `Ready=False InUse`, an
/// Event the first time, and a look again shortly.
async fn wait_for_readers(run: &mut Run<'_>, readers: &[String]) -> Result<Action> {
    let message = kraken_hub::producer::in_use_message(readers);
    let first = condition(&run.status, READY)
        .is_none_or(|(_, r, m)| r != kraken_hub::consumer::IN_USE || m != message);
    run.set_conditions(&[Set::new(
        READY,
        false,
        kraken_hub::consumer::IN_USE,
        message.clone(),
    )]);
    run.flush_status().await?;
    if first {
        run.event(false, kraken_hub::consumer::IN_USE, message)
            .await;
    }
    Ok(Action::requeue(std::time::Duration::from_secs(2)))
}

/// Whether the external object is gone (or never existed), or its destroy waits for approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Destroyed {
    Done,
    Held,
}

/// Destroys the external object: the one the stored state names, or the one an interrupted
/// create made; nothing when neither exists. Then the deposed object an unfinished
/// create-before-destroy replacement left, if any.
async fn destroy(run: &mut Run<'_>, spec: &ManagedSpec) -> Result<Destroyed> {
    let kind = run.k.kind.clone();
    let p = super::apply::provider(run, spec).await?;
    let t = Target::new(&p, &kind.type_name)?;
    let destroyed = destroy_own(run, spec, &t).await?;
    if destroyed == Destroyed::Done {
        deposed::destroy_deposed(run, &t, &Current::gone()).await?;
    }
    Ok(destroyed)
}

/// Destroys the object of the resource's own (not a deposed one).
async fn destroy_own(run: &mut Run<'_>, spec: &ManagedSpec, t: &Target<'_>) -> Result<Destroyed> {
    let ctx = run.k.ctx.clone();
    let p = t.p;
    let kind = run.k.kind.clone();
    let restored = t.restore(run.load_state().await?).await?;
    let completed = restored
        .stored
        .as_ref()
        .and_then(|s| s.create_attempt.clone());
    let unresolved = run
        .annotation(CREATE_ATTEMPT_ANNOTATION)
        .map(str::to_owned)
        .filter(|a| Some(a) != completed.as_ref());
    let (mut state, mut private) = (restored.state, restored.private);
    if state.is_null() {
        let Some(attempt) = unresolved else {
            return Ok(Destroyed::Done);
        };
        // The configuration is only needed for the name to recover by; without it, recovery
        // falls back to importId.
        let config = ctx
            .source
            .resource_config(
                p,
                &kind.type_name,
                &run.namespace,
                &spec.for_provider,
                false,
            )
            .await
            .unwrap_or(Value::Null);
        let replaced = run.deposed().and_then(|d| d.id());
        let tags = (owner(run, spec), replaced.as_deref());
        let sealed = super::observe::Pass::fence_holds(run, &attempt);
        match recover(t, spec, &config, tags, (&attempt, sealed)).await? {
            Some(found) => (state, private) = (found.new_state, found.private),
            None => return Ok(Destroyed::Done),
        }
    }
    let policy = spec.plan_policy(p, run.k.ctx.floors.of(&run.namespace).await);
    destroy_state(run, t, policy, (&state, &private), completed).await
}

/// Reads the object `state` describes and, if it still exists, plans its destroy, and applies
/// it unless `policy` holds it for approval; what a failed destroy leaves is stored so a retry
/// destroys it.
async fn destroy_state(
    run: &mut Run<'_>,
    t: &Target<'_>,
    policy: PlanPolicy,
    (state, private): (&Value, &[u8]),
    completed: Option<String>,
) -> Result<Destroyed> {
    let read = lifecycle::read(t.host(), t.type_name, state, private)
        .await
        .map_err(|e| t.lifecycle_err("read", e))?;
    if read.new_state.is_null() {
        return Ok(Destroyed::Done);
    }
    let plan = lifecycle::plan(
        t.host(),
        t.type_name,
        &read.new_state,
        &read.private,
        &Value::Null,
    )
    .await
    .map_err(|e| t.lifecycle_err("plan destroy", e))?;
    let gated = hold::gate(run, t, &plan, |ok| decide::gate_delete(policy, ok));
    if gated.gate == Gate::Hold {
        hold::hold(run, t, &plan, &read.new_state, &gated, (Held::Delete, &[])).await?;
        return Ok(Destroyed::Held);
    }
    let approver = hold::approved(run, &gated, &plan).await;
    let applied = apply_plan(run, t, &plan).await?;
    if !applied.new_state.is_null() || applied.diagnostics.has_errors() {
        Saved::default()
            .write(run, t, &applied.new_state, &applied.private, completed)
            .await?;
        fail_on_errors(run, t, &applied).await?;
    }
    hold::went_ahead(run, &gated, &plan, approver).await;
    Ok(Destroyed::Done)
}

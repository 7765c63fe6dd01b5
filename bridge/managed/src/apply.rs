//! Step: bring the object to its spec — configuration, observe, plan, the plan policy's gate
//! ([`hold`](super::hold)), then what [`decide`] says: settle, create (fenced), update,
//! replace (destroy first, or create first: [`deposed`]); then persist, publish and report
//! success.

use kube::runtime::controller::Action;
use serde_json::{Value as Json, json};

use super::CREATE_ATTEMPT_ANNOTATION;
use super::decide::Gate;
use super::decide::{self, Act, Facts};
use super::deposed::{self, Current};
use super::deps;
use super::error::{Error, Result};
use super::hold;
use super::observe::{Adoption, Observed, Pass, Planned, up_to_plan};
use super::spec::{ManagedSpec, Policies};
use super::state::Stored;
use super::target::{
    OWNER_TAG_ANNOTATION, Saved, Target, apply_plan, destroy_object, fail_on_errors, plan_paths,
};
use super::write::Run;
use kraken_kit::conditions::{READY, SYNCED, Set, reason};
use kraken_provider::lifecycle::{self, Action as PlanAction, Plan};
use kraken_source::Configured;
use kraken_value::Value;

/// Brings a live object to its spec.
pub(super) async fn apply(run: &mut Run<'_>, spec: &ManagedSpec) -> Result<Action> {
    let observe_only = spec.observe_only();
    if observe_only && !spec.adopts() {
        return Err(Error::InvalidSpec(super::spec::OBSERVE_NEEDS_IMPORT.into()));
    }
    let kind = run.k.kind.clone();
    let p = provider(run, spec).await?;
    let t = Target::new(&p, &kind.type_name)?;
    let Some(Planned {
        config,
        mut observed,
        plan,
    }) = up_to_plan(run, &t, spec).await?
    else {
        return Ok(Action::await_change());
    };
    // The policy fields the state recorded as in force (loaded with it), and what the spec
    // asks for now.
    let wanted = spec.policies();
    let recorded = Policies::parse(run.policies().as_deref());
    let policy_changes = recorded
        .as_ref()
        .map(|r| wanted.changes_from(r))
        .unwrap_or_default();
    if plan.action != PlanAction::NoOp {
        let paths = plan_paths(&plan, t.fields());
        run.set_status_field(
            "lastPlan",
            json!({"action": plan.action.to_string(), "paths": paths}),
        );
    }
    let facts = Facts {
        observe_only,
        refuse_replace: spec.refuses_replace(),
        create_first: spec.creates_first(),
        recreate: observed.recreate,
        drifted: decide::drifted(
            observed.moved,
            run.status.get("observedGeneration").and_then(Json::as_i64) == run.generation(),
            match held_reason(run) {
                None => decide::Held::Nothing,
                Some(hold::DRIFT_PENDING) => decide::Held::Drift,
                Some(_) => decide::Held::Change,
            },
        ),
    };
    let act = decide::act(plan.action, facts);
    let policy = spec.plan_policy(&p, run.k.ctx.floors.of(&run.namespace).await);
    let changed = !policy_changes.is_empty();
    let gated = hold::gate(run, &t, &plan, |ok| {
        decide::gate(policy, (act, changed), ok)
    });
    if gated.gate == Gate::Hold {
        let Observed {
            state,
            private,
            completed,
            mut saved,
            ..
        } = observed;
        saved
            .write_if_changed(run, &t, &state, &private, completed)
            .await?;
        let held = (hold::Held::of(act), policy_changes.as_slice());
        hold::hold(run, &t, &plan, &state, &gated, held).await?;
    } else {
        // The spec's policy fields are in force from here; a change of them is recorded
        // even when nothing else is written.
        run.set_policies(Some(wanted.to_bytes()));
        if changed {
            observed.saved.must_write();
        }
        let approver = hold::approved(run, &gated, &plan).await;
        carry_out(run, &t, &plan, &config, observed, act).await?;
        hold::went_ahead(run, &gated, &plan, approver).await;
    }
    publish(run, &t).await?;
    run.flush_status().await?;
    Ok(spec.drift_action())
}

/// The configured provider of the object's ProviderConfig.
pub(super) async fn provider(run: &Run<'_>, spec: &ManagedSpec) -> Result<Configured> {
    let ctx = run.k.ctx.clone();
    let kind = &run.k.kind;
    Ok(ctx
        .source
        .provider(kind, &run.namespace, spec.provider_config())
        .await?)
}

/// The reason the plan pending (`status.plan`) waits under, if one does.
fn held_reason<'a>(run: &'a Run<'_>) -> Option<&'a str> {
    let plan = run.status.get("plan").filter(|p| !p.is_null())?;
    Some(
        plan.get("reason")
            .and_then(Json::as_str)
            .unwrap_or(hold::PLAN_PENDING),
    )
}

/// The resource's configuration value: `spec.forProvider` with the values of `spec.valuesFrom`
/// merged in and Secret references resolved; `None` while those values are not resolved (the
/// status then says why).
pub(super) async fn configuration(
    run: &mut Run<'_>,
    t: &Target<'_>,
    spec: &ManagedSpec,
) -> Result<Option<Value>> {
    let inputs = deps::inputs(run, t.p, t.type_name, &spec.for_provider, &spec.values_from);
    let Some(for_provider) = inputs.await? else {
        return Ok(None);
    };
    let ctx = run.k.ctx.clone();
    let config = ctx
        .source
        .resource_config(
            t.p,
            t.type_name,
            &run.namespace,
            &for_provider,
            !spec.values_from.is_empty(),
        )
        .await?;
    Ok(Some(owned(run, t, spec, config)))
}

/// `config` with the owner tag of an object Kraken creates (none for one adopted by importId).
pub(super) fn owned(run: &Run<'_>, t: &Target<'_>, spec: &ManagedSpec, config: Value) -> Value {
    if spec.adopts() || run.annotation(OWNER_TAG_ANNOTATION) == Some("off") {
        return config;
    }
    let uid = kube::ResourceExt::uid(&run.obj).unwrap_or_default();
    t.with_owner_tag(config, Value::string(uid))
}

/// The reconcile's pass: reads the cluster through the hub and the object's state Secret, and
/// makes what it adopts the object's (the finalizer, the state Secret, an Event).
impl Pass for Run<'_> {
    async fn provider(&self, spec: &ManagedSpec) -> Result<Configured> {
        provider(self, spec).await
    }

    async fn configuration(&mut self, t: &Target<'_>, spec: &ManagedSpec) -> Result<Option<Value>> {
        configuration(self, t, spec).await
    }

    async fn load_state(&mut self) -> Result<Option<Stored>> {
        Run::load_state(self).await
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        Run::annotation(self, key)
    }

    fn uid(&self) -> Option<&str> {
        self.obj.metadata.uid.as_deref()
    }

    fn who(&self) -> (&str, &str) {
        (
            &self.namespace,
            self.obj.metadata.name.as_deref().unwrap_or_default(),
        )
    }

    async fn namespace_policy(&self) -> crate::floor::NamespacePolicy {
        self.k.ctx.floors.policy(&self.namespace).await
    }

    fn fence_holds(&self, fence: &str) -> bool {
        let uid = self.obj.metadata.uid.as_deref().unwrap_or_default();
        super::fence::holds(&self.k.ctx.plan_key, uid, fence)
    }

    async fn adopt(
        &mut self,
        t: &Target<'_>,
        how: Adoption<'_>,
        found: &mut Observed,
    ) -> Result<()> {
        let note = match how {
            Adoption::Imported(by) => {
                self.set_finalizer(true).await?;
                (
                    "Imported",
                    format!("adopted the existing {} {by}", t.type_name),
                )
            }
            Adoption::Recovered(attempt) => (
                "Recovered",
                format!(
                    "found the {} an interrupted create (at {attempt}) had made, and adopted it",
                    t.type_name
                ),
            ),
        };
        let completed = found.completed.clone();
        found
            .saved
            .write(self, t, &found.state, &found.private, completed)
            .await?;
        self.event(false, note.0, note.1).await;
        Ok(())
    }
}

/// Carries out what [`decide::act`] chose for `plan`; then, with the object as its spec says,
/// destroys the deposed object a create-before-destroy replacement left ([`deposed`]).
async fn carry_out(
    run: &mut Run<'_>,
    t: &Target<'_>,
    plan: &Plan,
    config: &Value,
    observed: Observed,
    act: Act,
) -> Result<()> {
    if let Some(current) = carry_out_act(run, t, plan, config, observed, act).await? {
        deposed::destroy_deposed(run, t, &current).await?;
    }
    Ok(())
}

/// Carries out `act`: the object it leaves in place, unless it only observes.
async fn carry_out_act(
    run: &mut Run<'_>,
    t: &Target<'_>,
    plan: &Plan,
    config: &Value,
    observed: Observed,
    act: Act,
) -> Result<Option<Current>> {
    let Observed {
        state,
        private,
        completed,
        mut saved,
        ..
    } = observed;
    let current = match act {
        Act::Observe { drifted } => {
            if drifted && last_plan_changed(run) {
                let note = format!(
                    "the observed object differs from spec ({}); ObserveOnly never changes it",
                    plan.action
                );
                run.event(false, "DriftDetected", note).await;
            }
            saved
                .write_if_changed(run, t, &state, &private, completed)
                .await?;
            succeed(run, t, &state);
            return Ok(None);
        }
        Act::Settle => {
            saved
                .write_if_changed(run, t, &state, &private, completed.clone())
                .await?;
            succeed(run, t, &state);
            Current {
                state,
                private,
                completed,
            }
        }
        Act::Create { recreate } => {
            let why = if recreate {
                let note = format!(
                    "the {} was deleted outside Kraken; created it again",
                    t.type_name
                );
                ("DriftCorrected", note)
            } else {
                ("Created", format!("created {}", t.type_name))
            };
            create(run, t, plan, why).await?
        }
        Act::Update { drift } => update(run, t, plan, saved, completed, drift).await?,
        Act::Replace {
            create_first: false,
        } => replace(run, t, plan, config, completed).await?,
        Act::Replace { create_first: true } => {
            deposed::depose(run, t, plan, completed).await?;
            let note = format!(
                "created the new {} before destroying the old one: {} changed",
                t.type_name,
                plan_paths(plan, t.fields()).join(", ")
            );
            create(run, t, &create_plan(t, config).await?, ("Replaced", note)).await?
        }
        Act::RefuseReplace => {
            let paths = plan_paths(plan, t.fields()).join(", ");
            return Err(Error::ReplaceRefused(format!(
                "changing {paths} needs the {} replaced, and spec.replacePolicy is Refuse; revert the change or allow replacement",
                t.type_name
            )));
        }
    };
    Ok(Some(current))
}

/// An update in place; `drift` when it puts back a change made outside Kraken.
async fn update(
    run: &mut Run<'_>,
    t: &Target<'_>,
    plan: &Plan,
    mut saved: Saved,
    completed: Option<String>,
    drift: bool,
) -> Result<Current> {
    let applied = apply_plan(run, t, plan).await?;
    saved
        .write(
            run,
            t,
            &applied.new_state,
            &applied.private,
            completed.clone(),
        )
        .await?;
    fail_on_errors(run, t, &applied).await?;
    let (r, note) = if drift {
        (
            "DriftCorrected",
            format!(
                "changed outside Kraken; updated {} back to spec",
                t.type_name
            ),
        )
    } else {
        ("Updated", format!("updated {} in place", t.type_name))
    };
    run.event(false, r, note).await;
    succeed(run, t, &applied.new_state);
    Ok(Current {
        state: applied.new_state,
        private: applied.private,
        completed,
    })
}

/// Publishes the outputs [`succeed`] recorded, as the object's StateDeclaration.
pub(super) async fn publish(run: &mut Run<'_>, t: &Target<'_>) -> Result<()> {
    if let Some(state) = run.outputs.take() {
        deps::publish(run, t.p, t.type_name, &state).await?;
    }
    Ok(())
}

/// The status of a pass that left the object as the spec says.
pub(super) fn succeed(run: &mut Run<'_>, t: &Target<'_>, state: &Value) {
    deps::show_live(run, t.fields(), state);
    run.set_conditions(&[
        Set::new(READY, true, reason::AVAILABLE, ""),
        Set::new(SYNCED, true, reason::RECONCILE_SUCCESS, ""),
    ]);
}

fn last_plan_changed(run: &Run<'_>) -> bool {
    run.obj.data.get("status").and_then(|s| s.get("lastPlan")) != run.status.get("lastPlan")
}

/// The plan of a replacement's create of `config`.
async fn create_plan(t: &Target<'_>, config: &Value) -> Result<Plan> {
    lifecycle::plan(t.host(), t.type_name, &Value::Null, &[], config)
        .await
        .map_err(|e| t.lifecycle_err("plan", e))
}

/// A fenced create: the attempt is recorded on the object before the provider is asked, and
/// the state Secret records it as completed after.
async fn create(
    run: &mut Run<'_>,
    t: &Target<'_>,
    plan: &Plan,
    why: (&str, String),
) -> Result<Current> {
    // Sealed, so a fence planted by hand is never taken for Kraken's ([`super::fence`]).
    let uid = run.obj.metadata.uid.clone().unwrap_or_default();
    let time = k8s_openapi::jiff::Timestamp::now().to_string();
    let attempt = super::fence::seal(&run.k.ctx.plan_key, &uid, &time);
    run.patch_metadata(&[(CREATE_ATTEMPT_ANNOTATION, Some(&attempt))], true)
        .await?;
    let applied = apply_plan(run, t, plan).await?;
    Saved::default()
        .write(
            run,
            t,
            &applied.new_state,
            &applied.private,
            Some(attempt.clone()),
        )
        .await?;
    fail_on_errors(run, t, &applied).await?;
    run.event(false, why.0, why.1).await;
    succeed(run, t, &applied.new_state);
    Ok(Current {
        state: applied.new_state,
        private: applied.private,
        completed: Some(attempt),
    })
}

/// A replacement: destroy, then a fenced create.
async fn replace(
    run: &mut Run<'_>,
    t: &Target<'_>,
    plan: &Plan,
    config: &Value,
    completed: Option<String>,
) -> Result<Current> {
    let paths = plan_paths(plan, t.fields()).join(", ");
    // Visible before it happens.
    run.set_conditions(&[Set::new(
        READY,
        false,
        reason::CREATING,
        format!("replacing: {paths} changed"),
    )]);
    run.flush_status().await?;
    let destroyed = destroy_object(run, t, &plan.prior_state, &plan.prior_private).await?;
    Saved::default()
        .write(run, t, &destroyed.new_state, &destroyed.private, completed)
        .await?;
    fail_on_errors(run, t, &destroyed).await?;
    create(
        run,
        t,
        &create_plan(t, config).await?,
        (
            "Replaced",
            format!("replaced {}: {paths} changed", t.type_name),
        ),
    )
    .await
}

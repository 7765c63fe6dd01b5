//! One managed object's plan: the reconcile's own steps up to the plan
//! ([`crate::observe::up_to_plan`]: configuration → state → import/read → plan), run through a
//! pass that reads only ([`super::pass::DryRun`]), then the changes as `status.plan` lists them
//! ([`plan::changes`]) and what the operator would do with them besides.

use std::collections::BTreeSet;

use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject};
use serde_json::{Value as Json, json};

use super::pass::DryRun;
use super::values::Inputs;
use super::{ObjectPlan, Outcome, Shared};
use crate::PAUSED_ANNOTATION;
use crate::decide::{self, Act, Facts, Gate};
use crate::error::{Error, Result};
use crate::observe::{Pass as _, Planned, up_to_plan};
use crate::plan;
use crate::spec::{ManagedSpec, OBSERVE_NEEDS_IMPORT, PlanPolicy};
use crate::target::Target;
use kraken_core_kinds::KindInfo;
use kraken_provider::lifecycle::{self, Plan};
use kraken_value::Value;

/// Plans the object `doc` of `kind` named `name` in `ns`.
pub(super) async fn plan_object(
    shared: &Shared,
    unknown: &BTreeSet<(String, String)>,
    (kind, doc): (&KindInfo, &Json),
    (ns, name): (&str, &str),
) -> Outcome {
    match plan_one(shared, unknown, (kind, doc), (ns, name)).await {
        Ok(p) => Outcome::Planned(p),
        Err(e) => Outcome::Failed(match &e {
            Error::Api(inner) => format!("{e}: {}", kraken_kit::errors::chain(inner)),
            other => other.to_string(),
        }),
    }
}

/// What administrators set on the namespace ([`crate::floor`]), as far as the user may read
/// the Namespace (namespace users often may not: then no floor is shown, and no type is
/// adoptable untagged).
async fn namespace_policy(shared: &Shared, ns: &str) -> crate::floor::NamespacePolicy {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(shared.client.clone());
    match api.get_metadata_opt(ns).await {
        Ok(Some(n)) => crate::floor::policy_of(&n).1,
        _ => crate::floor::NamespacePolicy::default(),
    }
}

async fn plan_one(
    shared: &Shared,
    unknown: &BTreeSet<(String, String)>,
    (kind, doc): (&KindInfo, &Json),
    (ns, name): (&str, &str),
) -> Result<ObjectPlan> {
    let spec: ManagedSpec =
        serde_json::from_value(doc.get("spec").cloned().unwrap_or_else(|| json!({})))
            .map_err(|e| Error::InvalidSpec(format!("spec: {e}")))?;
    if spec.observe_only() && !spec.adopts() {
        return Err(Error::InvalidSpec(OBSERVE_NEEDS_IMPORT.into()));
    }
    let live = Api::<DynamicObject>::namespaced_with(shared.client.clone(), ns, &kind.resource)
        .get_opt(name)
        .await?;
    let policy = namespace_policy(shared, ns).await;
    let floor = policy.floor;
    let mut pass = DryRun::new(shared, unknown, (kind, doc), (ns, name), (live, policy));
    let p = pass.provider(&spec).await?;
    let t = Target::new(&p, &kind.type_name)?;
    if kind.data_source {
        let config = pass.resolve(&t, &spec).await?;
        return read_data(&t, pass.inputs, &config).await;
    }
    let Some(Planned { observed, plan, .. }) = up_to_plan(&mut pass, &t, &spec).await? else {
        // A dry run's configuration always resolves (what is not known yet is unknown).
        return Err(Error::InvalidSpec(
            "its inputs could not be resolved".into(),
        ));
    };
    let (prior, recreate) = (observed.state, observed.recreate);
    let (inputs, live, seeded) = (pass.inputs, pass.live, pass.seeded);
    let policies_changed = crate::spec::Policies::parse(pass.policies.as_deref())
        .is_some_and(|r| r != spec.policies());
    let schema = p.resource(t.type_name)?;
    let sensitive = |a: &str| {
        inputs.sensitive.contains(a) || schema.block.attributes.get(a).is_some_and(|x| x.sensitive)
    };
    let changes = plan::changes(&plan, t.fields(), &sensitive);
    let mut notes = notes(
        &spec,
        spec.plan_policy(&p, floor),
        live.as_ref(),
        (&plan, recreate, policies_changed),
    );
    if seeded {
        notes.retain(|n| !n.starts_with("adopts the existing object"));
        notes.push("adopts the state seeded from Terraform's (refreshed, not imported)".into());
    }
    // ObserveOnly never changes the object: drift is reported, the plan applies nothing.
    let action = if spec.observe_only() {
        lifecycle::Action::NoOp
    } else {
        plan.action
    };
    let outputs = (action == lifecycle::Action::NoOp && !prior.is_null())
        .then(|| would_publish(&t, &prior, &inputs.sensitive));
    Ok(ObjectPlan {
        action,
        changes,
        values_from: inputs.shown,
        notes,
        outputs,
    })
}

/// A data source of the set: read now, as the operator would, so a configuration the provider
/// refuses shows here and consumers of the set plan against what it reads; nothing changes.
/// One whose inputs are not known until the set is applied is read then (no outputs).
async fn read_data(t: &Target<'_>, inputs: Inputs, config: &Value) -> Result<ObjectPlan> {
    let mut plan = ObjectPlan {
        action: lifecycle::Action::NoOp,
        changes: Vec::new(),
        values_from: inputs.shown,
        notes: Vec::new(),
        outputs: None,
    };
    if !config.is_wholly_known() {
        plan.notes
            .push("a data source: read once the values it reads are known (after apply)".into());
        return Ok(plan);
    }
    let (state, _) = lifecycle::read_data(t.host(), t.type_name, config)
        .await
        .map_err(|e| t.lifecycle_err("read", e))?;
    plan.notes.push("a data source: read, never changed".into());
    plan.outputs = Some(would_publish(t, &state, &inputs.sensitive));
    Ok(plan)
}

/// What an object left unchanged would publish: its `status.atProvider`, without the
/// attributes set from sensitive inputs.
fn would_publish(t: &Target<'_>, state: &Value, sensitive: &BTreeSet<String>) -> Json {
    let mut state = kraken_value::kube::to_kube_json(state);
    if let Some(o) = state.as_object_mut() {
        o.retain(|k, _| !sensitive.contains(k));
    }
    t.fields().state_to_status(&state)
}

/// What the operator would do with the plan besides carrying it out.
fn notes(
    spec: &ManagedSpec,
    policy: PlanPolicy,
    live: Option<&DynamicObject>,
    (plan, recreate, policies_changed): (&Plan, bool, bool),
) -> Vec<String> {
    let mut notes = Vec::new();
    if live
        .is_some_and(|o| o.annotations().get(PAUSED_ANNOTATION).map(String::as_str) == Some("true"))
    {
        notes.push(format!(
            "reconciliation is paused ({PAUSED_ANNOTATION}): nothing is applied while it is"
        ));
    }
    if recreate {
        notes.push("the object was deleted outside Kraken: it would be created again".to_owned());
    }
    if let Some(by) = spec.import().filter(|_| live.is_none()) {
        notes.push(format!("adopts the existing object {by}"));
    }
    let facts = Facts {
        observe_only: spec.observe_only(),
        refuse_replace: spec.refuses_replace(),
        create_first: spec.creates_first(),
        recreate,
        drifted: false,
    };
    let act = decide::act(plan.action, facts);
    match act {
        Act::Observe { drifted: true } => notes
            .push("managementPolicy ObserveOnly: the drift is reported, never changed".to_owned()),
        Act::Replace { create_first: true } => notes.push(
            "spec.replacePolicy is CreateBeforeDestroy: the new object is created before the old one is destroyed"
                .to_owned(),
        ),
        Act::RefuseReplace => notes.push(
            "spec.replacePolicy is Refuse: the replacement would be refused (ReplaceRefused)"
                .to_owned(),
        ),
        _ => {}
    }
    if decide::gate(policy, (act, policies_changed), false) == Gate::Hold {
        notes.push(format!(
            "planPolicy {policy:?}: the change waits for approval (status.plan)"
        ));
    }
    notes
}

//! One managed object's plan: the reconcile's steps up to the plan, reading only — the
//! ProviderConfig (the set's, else the cluster's), the configuration ([`super::values`] and the
//! Secrets `spec.forProvider` names), the stored state (the state Secret, if the object exists)
//! refreshed, imported or recovered as a pass would ([`decide::origin`]), then
//! `lifecycle::plan`, and the changes as `status.plan` lists them ([`plan::changes`]).

use std::collections::BTreeSet;

use kube::api::{Api, DynamicObject};
use kube::{Resource as _, ResourceExt as _};
use serde_json::{Value as Json, json};

use super::super::target::OWNER_TAG_ANNOTATION;
use super::values::{self, Inputs};
use super::{ObjectPlan, Outcome, Shared};
use crate::decide::{self, Act, Facts, Gate, Origin};
use crate::error::{Error, Result};
use crate::observe::recover;
use crate::plan;
use crate::spec::{ManagedSpec, OBSERVE_NEEDS_IMPORT, PlanPolicy};
use crate::state::{self, Stored};
use crate::target::Target;
use crate::{CREATE_ATTEMPT_ANNOTATION, PAUSED_ANNOTATION};
use kraken_core_kinds::KindInfo;
use kraken_kit::ownership::{self, Claim};
use kraken_provider::lifecycle::{self, Plan};
use kraken_source::{config_value, provider_from, read_provider_config, secret_text};
use kraken_value::{PathStep, Value};

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
    let pc = provider_config(shared, ns, spec.provider_config()).await?;
    let p = provider_from(&shared.source, kind, ns, &pc).await?;
    let t = Target::new(&p, &kind.type_name)?;
    let inputs = values::inputs(
        shared,
        unknown,
        (&p, &kind.type_name),
        ns,
        (&spec.for_provider, &spec.values_from),
    )
    .await?;
    let config = configuration(shared, &t, ns, &spec, &inputs).await?;
    let config = owned(&t, &spec, doc, live.as_ref(), config);
    if kind.data_source {
        return read_data(&t, inputs, &config).await;
    }
    let stored = match &live {
        Some(obj) => load_state(shared, kind, obj).await?,
        None => seeded_state(shared, kind, (ns, name)).await?,
    };
    let seeded = live.is_none() && stored.is_some();
    let (prior, private, recreate) = observe(&t, &spec, &config, live.as_ref(), stored).await?;
    let config = ignoring(&t, &spec, &prior, config)?;
    let plan = lifecycle::plan(t.host(), t.type_name, &prior, &private, &config)
        .await
        .map_err(|e| t.lifecycle_err("plan", e))?;
    let schema = p.resource(t.type_name)?;
    let sensitive = |a: &str| {
        inputs.sensitive.contains(a) || schema.block.attributes.get(a).is_some_and(|x| x.sensitive)
    };
    let changes = plan::changes(&plan, t.fields(), &sensitive);
    let mut notes = notes(
        &spec,
        spec.plan_policy(&p),
        live.as_ref(),
        (&plan, recreate),
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

/// What an object left unchanged would publish: its `status.atProvider`, without the
/// attributes set from sensitive inputs.
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

fn would_publish(t: &Target<'_>, state: &Value, sensitive: &BTreeSet<String>) -> Json {
    let mut state = kraken_value::kube::to_kube_json(state);
    if let Some(o) = state.as_object_mut() {
        o.retain(|k, _| !sensitive.contains(k));
    }
    t.fields().state_to_status(&state)
}

/// `config` with the owner tag the operator would add: the live object's uid, unknown before
/// it exists (none for an object adopted by importId or with the tag turned off).
fn owned(
    t: &Target<'_>,
    spec: &ManagedSpec,
    doc: &Json,
    live: Option<&DynamicObject>,
    config: Value,
) -> Value {
    let tag_off = doc["metadata"]["annotations"][OWNER_TAG_ANNOTATION] == "off";
    if spec.adopts() || tag_off {
        return config;
    }
    let uid = live
        .and_then(|o| o.metadata.uid.clone())
        .map_or_else(|| Value::Unknown(Default::default()), Value::string);
    t.with_owner_tag(config, uid)
}

/// The ProviderConfig `name`: the set's, else the cluster's (read once).
async fn provider_config(
    shared: &Shared,
    ns: &str,
    name: &str,
) -> Result<kraken_core_kinds::ProviderConfig> {
    let key = (ns.to_owned(), name.to_owned());
    if let Some(pc) = shared.provider_configs.get(&key) {
        return Ok(pc.clone());
    }
    let cached = shared
        .cluster_provider_configs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned();
    if let Some(pc) = cached {
        return Ok(pc);
    }
    let pc = read_provider_config(&shared.client, ns, name).await?;
    shared
        .cluster_provider_configs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, pc.clone());
    Ok(pc)
}

/// The configuration value, with the arguments fed by outputs not known yet unknown.
async fn configuration(
    shared: &Shared,
    t: &Target<'_>,
    ns: &str,
    spec: &ManagedSpec,
    inputs: &Inputs,
) -> Result<Value> {
    // The Secrets spec.forProvider names: the set's stand in for the cluster's.
    let mut secrets = std::collections::HashMap::new();
    for r in t.fields().secret_refs(&inputs.for_provider) {
        let Some(secret) = values::secret(shared, ns, &r.name).await? else {
            let missing = format!("Secret {} not found", r.name);
            return Err(kraken_source::Error::SecretMissing(missing).into());
        };
        let text = secret_text(&secret, &r.name, &r.key)?;
        secrets.insert(r, text);
    }
    let with_values = !spec.values_from.is_empty();
    let mut config = config_value(
        t.p,
        t.type_name,
        &inputs.for_provider,
        with_values,
        &secrets,
    )?;
    for steps in &inputs.unknown {
        set_unknown(&mut config, steps);
    }
    Ok(config)
}

/// Makes the value at `steps` unknown; where the path runs through a null or a map key not
/// there yet, the value above it becomes unknown as a whole (what it will hold is not known
/// either, and a change shows an unknown whole value as `(known after apply)`, where a
/// partly unknown one would print its unknown parts as null).
fn set_unknown(v: &mut Value, steps: &[PathStep]) {
    let Some((first, rest)) = steps.split_first() else {
        *v = Value::unknown();
        return;
    };
    if let Value::Typed(_, inner) = v {
        return set_unknown(inner, steps);
    }
    let is_object = matches!(v, Value::Object(_));
    let child = match (first, &mut *v) {
        (PathStep::Attr(k) | PathStep::Key(k), Value::Object(m) | Value::Map(m)) => m.get_mut(k),
        (PathStep::Index(i), Value::List(items) | Value::Tuple(items)) => {
            usize::try_from(*i).ok().and_then(|i| items.get_mut(i))
        }
        _ => None,
    };
    match child {
        Some(c) if c.is_null() => *c = Value::unknown(),
        Some(c) => set_unknown(c, rest),
        // A map key not there yet; an object always holds every attribute (never reached).
        None if !is_object => *v = Value::unknown(),
        None => {}
    }
}

/// The state seeded from Terraform's for an object not applied yet (`kraken convert --state
/// --seed-state`): the pass will take it as its own.
async fn seeded_state(
    shared: &Shared,
    kind: &KindInfo,
    (ns, name): (&str, &str),
) -> Result<Option<Stored>> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(shared.client.clone(), ns);
    let r = &kind.resource;
    match secrets
        .get_opt(&state::secret_name(&r.group, &r.kind, name))
        .await?
    {
        Some(s) if state::is_seeded(&s) => Ok(Some(Stored::from_secret(&s)?)),
        _ => Ok(None),
    }
}

/// The state the live object stored, read as a pass reads it (a Secret of its predecessor is
/// not its state; one of someone else stops the plan as it would stop the pass).
async fn load_state(
    shared: &Shared,
    kind: &KindInfo,
    obj: &DynamicObject,
) -> Result<Option<Stored>> {
    let (ns, name) = (
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default(),
    );
    let r = &kind.resource;
    let owner = obj
        .controller_owner_ref(r)
        .ok_or_else(|| Error::InvalidSpec("the live object has no uid".into()))?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(shared.client.clone(), &ns);
    let current = state::secret_name(&r.group, &r.kind, &name);
    if let Some(secret) = secrets.get_opt(&current).await? {
        if state::is_seeded(&secret) {
            return Ok(Some(Stored::from_secret(&secret)?));
        }
        return match ownership::claim(&secret.metadata, &owner) {
            Claim::Mine => Ok(Some(Stored::from_secret(&secret)?)),
            Claim::Predecessor => Ok(None),
            Claim::Foreign(whose) => Err(Error::NotOwned(ownership::refused(
                &format!("Secret {current}"),
                &whose,
            ))),
        };
    }
    let created = obj.annotations().contains_key(CREATE_ATTEMPT_ANNOTATION)
        || obj
            .data
            .pointer("/status/externalId")
            .is_some_and(|v| !v.is_null());
    if !created {
        return Ok(None);
    }
    let legacy = state::legacy_secret_name(&r.kind, &name);
    match secrets.get_opt(&legacy).await? {
        Some(s) if ownership::claim(&s.metadata, &owner) == Claim::Mine => {
            Ok(Some(Stored::from_secret(&s)?))
        }
        _ => Ok(None),
    }
}

/// What exists, as a pass would establish it: the prior state, its private data, and whether
/// the object was deleted outside Kraken.
async fn observe(
    t: &Target<'_>,
    spec: &ManagedSpec,
    config: &Value,
    live: Option<&DynamicObject>,
    stored: Option<Stored>,
) -> Result<(Value, Vec<u8>, bool)> {
    let restored = t.restore(stored).await?;
    let completed = restored
        .stored
        .as_ref()
        .and_then(|s| s.create_attempt.clone());
    let fence = live.and_then(|o| o.annotations().get(CREATE_ATTEMPT_ANNOTATION).cloned());
    let owner = live
        .filter(|o| {
            o.annotations()
                .get(OWNER_TAG_ANNOTATION)
                .map(String::as_str)
                != Some("off")
        })
        .and_then(|o| o.metadata.uid.as_deref())
        .filter(|_| !spec.adopts());
    let replaced = restored
        .stored
        .as_ref()
        .and_then(|s| s.deposed.as_ref())
        .and_then(|d| d.id());
    let tags = (owner, replaced.as_deref());
    let origin = decide::origin(
        !restored.state.is_null(),
        spec.import(),
        fence.as_deref(),
        completed.as_deref(),
    );
    match origin {
        Origin::Refresh { pending } => {
            let read = lifecycle::read(t.host(), t.type_name, &restored.state, &restored.private)
                .await
                .map_err(|e| t.lifecycle_err("read", e))?;
            if read.new_state.is_null()
                && let Some(attempt) = pending
                && let Some(found) = recover(t, spec, config, tags, &attempt).await?
            {
                return Ok((found.new_state, found.private, false));
            }
            let gone = read.new_state.is_null();
            Ok((read.new_state, read.private, gone))
        }
        Origin::Import(by) => {
            let imported = lifecycle::import(t.host(), t.type_name, &by)
                .await
                .map_err(|e| t.lifecycle_err("import", e))?;
            if imported.new_state.is_null() {
                return Err(Error::Provider(format!("no {} {by} exists", t.type_name)));
            }
            Ok((imported.new_state, imported.private, false))
        }
        Origin::Recover(attempt) => match recover(t, spec, config, tags, &attempt).await? {
            Some(found) => Ok((found.new_state, found.private, false)),
            None => Ok((Value::Null, Vec::new(), false)),
        },
        Origin::Nothing => Ok((Value::Null, Vec::new(), false)),
    }
}

/// What the operator would do with the plan besides carrying it out.
fn notes(
    spec: &ManagedSpec,
    policy: PlanPolicy,
    live: Option<&DynamicObject>,
    (plan, recreate): (&Plan, bool),
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
    if decide::gate(policy, act, false) == Gate::Hold {
        notes.push(format!(
            "planPolicy {policy:?}: the change waits for approval (status.plan)"
        ));
    }
    notes
}

/// `config` with `spec.ignoreChanges` taken from `prior`, as the controller plans it.
fn ignoring(t: &Target<'_>, spec: &ManagedSpec, prior: &Value, config: Value) -> Result<Value> {
    crate::ignore::keep_prior(config, prior, t.fields(), &spec.ignore_changes)
        .map_err(Error::InvalidSpec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_values_land_at_their_path_or_replace_the_null_above_it() {
        let attr = |n: &str| PathStep::Attr(n.into());
        let key = |k: &str| PathStep::Key(k.into());
        let mut v = Value::object([
            ("name", Value::string("d")),
            (
                "tags",
                Value::Map([("mode".into(), Value::string("fast"))].into()),
            ),
            ("settings", Value::Null),
            ("labels", Value::List(vec![Value::string("x")])),
        ]);
        set_unknown(&mut v, &[attr("labels"), PathStep::Index(0)]);
        set_unknown(&mut v, &[attr("tags"), key("src")]);
        set_unknown(&mut v, &[attr("settings"), attr("mode")]);
        set_unknown(&mut v, &[attr("name")]);
        let want = Value::object([
            ("name", Value::unknown()),
            ("tags", Value::unknown()),
            ("settings", Value::unknown()),
            ("labels", Value::List(vec![Value::unknown()])),
        ]);
        assert_eq!(v, want);
    }
}

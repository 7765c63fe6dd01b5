//! The reconcile pipeline for one managed resource, as named steps:
//! [`reconcile`] reads the object and dispatches to [`apply`] (dereference → configuration →
//! restore state → import / read → plan → apply → persist → status) or [`cleanup`] (destroy or
//! orphan, then release the finalizer). Failures end up in [`report`], which turns them into
//! a `Synced` condition and an Event and decides between backoff and waiting for a change.

use std::sync::Arc;

use kube::api::{Api, DynamicObject, GetParams, PartialObjectMeta};
use kube::runtime::controller::Action;
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::deps;
use super::error::{Error, Result};
use super::state::Stored;
use super::write::Run;
use super::{CREATE_ATTEMPT_ANNOTATION, KindContext, PAUSED_ANNOTATION};
use crate::kit::conditions::{READY, SYNCED, Set, reason};
use crate::kit::errors::chain as anyhow_chain;
use crate::kit::time::{jitter, parse_duration};
use crate::provider::lifecycle::{self, Action as PlanAction, Applied, LifecycleError, Plan};
use crate::provider::{Diagnostic, DiagnosticsExt as _, Severity, UpgradeRequest};
use crate::source::Configured;
use crate::value::fields::FieldMap;
use crate::value::json::{decode_json_bytes, encode_json_bytes};
use crate::value::kube::to_kube_json;
use crate::value::{AttrPath, Type, Value};

/// The fields of a generated kind's spec the controller reads (forProvider stays JSON).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManagedSpec {
    #[serde(default)]
    provider_config_ref: Option<NameRef>,
    #[serde(default)]
    for_provider: Json,
    #[serde(default)]
    values_from: Vec<Json>,
    #[serde(default)]
    management_policy: Option<String>,
    #[serde(default)]
    deletion_policy: Option<String>,
    #[serde(default)]
    replace_policy: Option<String>,
    #[serde(default)]
    import_id: Option<String>,
    #[serde(default)]
    drift_interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct NameRef {
    name: String,
}

impl ManagedSpec {
    fn observe_only(&self) -> bool {
        self.management_policy.as_deref() == Some("ObserveOnly")
    }

    fn provider_config(&self) -> &str {
        self.provider_config_ref
            .as_ref()
            .map_or("default", |r| r.name.as_str())
    }

    fn import_id(&self) -> Option<&str> {
        self.import_id.as_deref().filter(|s| !s.is_empty())
    }

    /// When to look for drift next.
    fn drift_action(&self) -> Action {
        match parse_duration(self.drift_interval.as_deref().unwrap_or("10m")) {
            Some(d) if d.is_zero() => Action::await_change(),
            Some(d) => Action::requeue(jitter(d, 0.1)),
            None => Action::requeue(jitter(std::time::Duration::from_secs(600), 0.1)),
        }
    }
}

pub async fn reconcile(
    meta: Arc<PartialObjectMeta<DynamicObject>>,
    k: Arc<KindContext>,
) -> Result<Action> {
    let _timer = k.ctx.metrics.reconcile(&k.label);
    let Some(namespace) = meta.metadata.namespace.clone() else {
        return Ok(Action::await_change());
    };
    let name = meta.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(k.ctx.client.clone(), &namespace, &k.kind.resource);
    // At least as new as the watch event that woke this reconcile: the API server answers
    // from its watch cache instead of a quorum read of etcd.
    // Or as new as this controller's own last write, if the watch has not brought that yet.
    let seen_uid = meta.metadata.uid.clone().unwrap_or_default();
    let got = match meta.metadata.resource_version.as_deref() {
        Some(rv) => {
            let at = k.read_version(&seen_uid, rv);
            api.get_with(&name, &GetParams::at(&at)).await
        }
        None => api.get(&name).await,
    };
    let obj = match got {
        Ok(obj) => obj,
        Err(kube::Error::Api(e)) if e.code == 404 => {
            k.wrote(&seen_uid, None);
            return Ok(Action::await_change());
        }
        Err(e) => return Err(e.into()),
    };
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let mut run = Run::new(&k, obj, namespace);
    let spec = serde_json::from_value::<ManagedSpec>(
        run.obj
            .data
            .get("spec")
            .cloned()
            .unwrap_or_else(|| json!({})),
    )
    .map_err(|e| Error::InvalidSpec(format!("spec: {e}")));
    let result = match spec {
        Ok(spec) => pass(&mut run, &spec).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(action) => {
            k.ctx.backoff.succeeded(&uid);
            Ok(action)
        }
        Err(Error::Api(e)) => Err(Error::Api(e)),
        Err(err) => {
            k.ctx.metrics.reconcile_failed(&k.label, err.reason());
            report(&mut run, &err).await?;
            Ok(if err.is_transient() {
                Action::requeue(k.ctx.backoff.failed(&uid))
            } else {
                Action::await_change()
            })
        }
    }
}

async fn pass(run: &mut Run<'_>, spec: &ManagedSpec) -> Result<Action> {
    if run.annotation(PAUSED_ANNOTATION) == Some("true") {
        run.set_conditions(&[Set::new(
            SYNCED,
            false,
            reason::RECONCILE_PAUSED,
            format!("reconciliation is paused by the annotation {PAUSED_ANNOTATION}"),
        )]);
        run.flush_status().await?;
        return Ok(Action::await_change());
    }
    if run.obj.metadata.deletion_timestamp.is_some() {
        return cleanup(run, spec).await;
    }
    apply(run, spec).await
}

/// Reports a failed pass: `Synced=False` with the error, `Ready` unchanged if the object
/// exists and works, an Event when the error is new.
async fn report(run: &mut Run<'_>, err: &Error) -> Result<()> {
    let message = err.to_string();
    let previous = condition(&run.status, SYNCED);
    let mut updates = vec![Set::new(SYNCED, false, err.reason(), message.clone())];
    let deleting = run.obj.metadata.deletion_timestamp.is_some();
    let ready = condition(&run.status, READY).is_some_and(|(s, _, _)| s == "True");
    if deleting {
        updates.push(Set::new(
            READY,
            false,
            reason::DELETING,
            format!("deletion is waiting: {}", err.reason()),
        ));
    } else if !ready {
        let r = if run.status.get("externalId").is_some() {
            reason::UNAVAILABLE
        } else {
            reason::CREATING
        };
        updates.push(Set::new(
            READY,
            false,
            r,
            format!("waiting: {}; see the Synced condition", err.reason()),
        ));
    }
    run.set_conditions(&updates);
    run.flush_status().await?;
    let repeated =
        previous.is_some_and(|(s, r, m)| s == "False" && r == err.reason() && m == message);
    tracing::info!(kind = %run.k.label, namespace = %run.namespace, name = %run.name, reason = err.reason(), "reconcile failed: {message}");
    if !repeated {
        run.event(true, err.reason(), message).await;
    }
    Ok(())
}

fn condition(status: &Json, type_: &str) -> Option<(String, String, String)> {
    let c = status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Json::as_str) == Some(type_))?;
    let s = |k: &str| {
        c.get(k)
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Some((s("status"), s("reason"), s("message")))
}

/// What the state Secret held, restored to a value of the current schema.
struct Restored {
    state: Value,
    private: Vec<u8>,
    stored: Option<Stored>,
    /// The state must be written back even if unchanged (it was upgraded).
    upgraded: bool,
}

/// Everything one pass needs about the resource's provider and type.
struct Target<'p> {
    p: &'p Configured,
    type_name: &'p str,
    ty: Type,
    version: i64,
}

impl Target<'_> {
    fn host(&self) -> &dyn crate::provider::Plugin {
        self.p.host.as_ref()
    }

    fn fields(&self) -> &FieldMap {
        &self.p.fields
    }

    fn lifecycle_err(&self, what: &str, e: LifecycleError) -> Error {
        match e {
            LifecycleError::Rejected(diags) => Error::Provider(describe(&diags, self.fields())),
            LifecycleError::Provider(pe) => Error::ProviderUnavailable(format!(
                "{what} {}: {}",
                self.type_name,
                anyhow_chain(&pe)
            )),
        }
    }

    fn encode(&self, state: &Value) -> Result<Option<Vec<u8>>> {
        if state.is_null() {
            return Ok(None);
        }
        encode_json_bytes(state, &self.ty).map(Some).map_err(|e| {
            Error::Provider(format!(
                "the provider returned a state Kraken cannot store: {e}"
            ))
        })
    }

    async fn restore(&self, stored: Option<Stored>) -> Result<Restored> {
        let Some(bytes) = stored.as_ref().and_then(|s| s.state.clone()) else {
            return Ok(Restored {
                state: Value::Null,
                private: stored
                    .as_ref()
                    .map(|s| s.private.clone())
                    .unwrap_or_default(),
                stored,
                upgraded: false,
            });
        };
        let private = stored
            .as_ref()
            .map(|s| s.private.clone())
            .unwrap_or_default();
        let from_version = stored.as_ref().map_or(0, |s| s.schema_version);
        if from_version == self.version
            && let Ok(state) = decode_json_bytes(&bytes, &self.ty)
        {
            {
                return Ok(Restored {
                    state,
                    private,
                    stored,
                    upgraded: false,
                });
            }
        }
        let resp = self
            .host()
            .upgrade_resource_state(UpgradeRequest {
                type_name: self.type_name.to_owned(),
                version: from_version,
                raw_state_json: bytes,
            })
            .await
            .map_err(|e| {
                Error::ProviderUnavailable(format!("upgrading state: {}", anyhow_chain(&e)))
            })?;
        if resp.diagnostics.has_errors() {
            return Err(Error::Provider(describe(&resp.diagnostics, self.fields())));
        }
        Ok(Restored {
            state: resp.upgraded_state,
            private,
            stored,
            upgraded: true,
        })
    }
}

async fn apply(run: &mut Run<'_>, spec: &ManagedSpec) -> Result<Action> {
    let observe_only = spec.observe_only();
    if observe_only && spec.import_id().is_none() {
        return Err(Error::InvalidSpec(
            "managementPolicy ObserveOnly needs spec.importId: the id of the object to observe"
                .into(),
        ));
    }
    let ctx = run.k.ctx.clone();
    let kind = run.k.kind.clone();
    let p = ctx
        .source
        .provider(&kind, &run.namespace, spec.provider_config())
        .await?;
    let resource = p.resource(&kind.type_name)?;
    let t = Target {
        p: &p,
        type_name: &kind.type_name,
        ty: resource.block.implied_type(),
        version: resource.version,
    };
    let Some(for_provider) = deps::inputs(
        run,
        &p,
        &kind.type_name,
        &spec.for_provider,
        &spec.values_from,
    )
    .await?
    else {
        return Ok(Action::await_change());
    };
    let config = ctx
        .source
        .resource_config(
            &p,
            &kind.type_name,
            &run.namespace,
            &for_provider,
            !spec.values_from.is_empty(),
        )
        .await?;
    let Observed {
        state,
        private,
        recreate,
        completed,
        mut saved,
    } = observe(run, &t, spec, &config).await?;

    let plan = lifecycle::plan(t.host(), t.type_name, &state, &private, &config)
        .await
        .map_err(|e| t.lifecycle_err("plan", e))?;
    if plan.action != PlanAction::NoOp {
        let paths = plan_paths(&plan, t.fields());
        run.set_status_field(
            "lastPlan",
            json!({"action": plan.action.to_string(), "paths": paths}),
        );
    }
    if observe_only {
        if plan.action != PlanAction::NoOp && last_plan_changed(run) {
            run.event(
                false,
                "DriftDetected",
                format!(
                    "the observed object differs from spec ({}); ObserveOnly never changes it",
                    plan.action
                ),
            )
            .await;
        }
        saved
            .write_if_changed(run, &t, &state, &private, completed)
            .await?;
        succeed(run, &t, &state);
        publish(run, &t).await?;
        run.flush_status().await?;
        return Ok(spec.drift_action());
    }
    let drift = run.status.get("observedGeneration").and_then(Json::as_i64) == run.generation();
    match plan.action {
        PlanAction::NoOp | PlanAction::Delete => {
            saved
                .write_if_changed(run, &t, &state, &private, completed)
                .await?;
            succeed(run, &t, &state);
        }
        PlanAction::Create => {
            let why = if recreate {
                (
                    "DriftCorrected",
                    format!(
                        "the {} was deleted outside Kraken; created it again",
                        t.type_name
                    ),
                )
            } else {
                ("Created", format!("created {}", t.type_name))
            };
            create(run, &t, &plan, why).await?;
        }
        PlanAction::Update => {
            let applied = apply_plan(run, &t, &plan).await?;
            saved
                .write(run, &t, &applied.new_state, &applied.private, completed)
                .await?;
            fail_on_errors(run, &t, &applied).await?;
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
            succeed(run, &t, &applied.new_state);
        }
        PlanAction::Replace => replace(run, spec, &t, &plan, &config, completed).await?,
    }
    publish(run, &t).await?;
    run.flush_status().await?;
    Ok(spec.drift_action())
}

/// What exists now, as the pass found it.
struct Observed {
    state: Value,
    private: Vec<u8>,
    /// The object was deleted outside Kraken and must be created again.
    recreate: bool,
    /// The create attempt the stored state completed.
    completed: Option<String>,
    saved: Saved,
}

/// Step: establish what exists — restore the stored state and refresh it, or (no state yet)
/// adopt the object `importId` names, or find the object an interrupted create made.
async fn observe(
    run: &mut Run<'_>,
    t: &Target<'_>,
    spec: &ManagedSpec,
    config: &Value,
) -> Result<Observed> {
    let restored = t.restore(run.load_state().await?).await?;
    let completed = restored
        .stored
        .as_ref()
        .and_then(|s| s.create_attempt.clone());
    let mut saved = Saved::from(&restored);
    let mut found = Observed {
        state: Value::Null,
        private: Vec::new(),
        recreate: false,
        completed: completed.clone(),
        saved: Saved::default(),
    };
    if !restored.state.is_null() {
        let read = lifecycle::read(t.host(), t.type_name, &restored.state, &restored.private)
            .await
            .map_err(|e| t.lifecycle_err("read", e))?;
        if read.new_state.is_null() {
            if spec.observe_only() {
                return Err(Error::ExternalObjectMissing(format!(
                    "the observed {} no longer exists",
                    t.type_name
                )));
            }
            found.recreate = true;
        } else {
            (found.state, found.private) = (read.new_state, read.private);
        }
    } else if let Some(id) = spec.import_id() {
        let imported = lifecycle::import(t.host(), t.type_name, id)
            .await
            .map_err(|e| t.lifecycle_err("import", e))?;
        if imported.new_state.is_null() {
            return Err(Error::Provider(format!(
                "no {} with import id {id:?} exists",
                t.type_name
            )));
        }
        if !run.has_finalizer() {
            run.patch_metadata(&[], true).await?;
        }
        saved
            .write(run, t, &imported.new_state, &imported.private, completed)
            .await?;
        let note = format!("adopted the existing {} {id:?}", t.type_name);
        run.event(false, "Imported", note).await;
        (found.state, found.private) = (imported.new_state, imported.private);
    } else if let Some(attempt) = run
        .annotation(CREATE_ATTEMPT_ANNOTATION)
        .map(str::to_owned)
        .filter(|a| Some(a) != completed.as_ref())
        && let Some(recovered) = recover(t, spec, config, &attempt).await?
    {
        saved
            .write(
                run,
                t,
                &recovered.new_state,
                &recovered.private,
                Some(attempt.clone()),
            )
            .await?;
        found.completed = Some(attempt.clone());
        let note = format!(
            "found the {} an interrupted create (at {attempt}) had made, and adopted it",
            t.type_name
        );
        run.event(false, "Recovered", note).await;
        (found.state, found.private) = (recovered.new_state, recovered.private);
    }
    found.saved = saved;
    Ok(found)
}

/// Publishes the outputs [`succeed`] recorded, as the object's StateDeclaration.
async fn publish(run: &mut Run<'_>, t: &Target<'_>) -> Result<()> {
    if let Some(state) = run.outputs.take() {
        deps::publish(run, t.p, t.type_name, &state).await?;
    }
    Ok(())
}

/// The status of a pass that left the object as the spec says.
fn succeed(run: &mut Run<'_>, t: &Target<'_>, state: &Value) {
    run.outputs = Some(state.clone());
    let json = to_kube_json(state);
    run.set_status_field("atProvider", t.fields().state_to_status(&json));
    let id = json.get("id").and_then(Json::as_str).map(|s| json!(s));
    run.set_status_field("externalId", id.unwrap_or(Json::Null));
    run.set_conditions(&[
        Set::new(READY, true, reason::AVAILABLE, ""),
        Set::new(SYNCED, true, reason::RECONCILE_SUCCESS, ""),
    ]);
}

fn last_plan_changed(run: &Run<'_>) -> bool {
    run.obj.data.get("status").and_then(|s| s.get("lastPlan")) != run.status.get("lastPlan")
}

/// Carries out a plan; a failed conversation (crash, transport) is an `ApplyFailed` Event
/// and a transient error: the provider may or may not have acted.
async fn apply_plan(run: &Run<'_>, t: &Target<'_>, plan: &Plan) -> Result<Applied> {
    match lifecycle::apply(t.host(), plan).await {
        Ok(applied) => Ok(applied),
        Err(e) => {
            let err = t.lifecycle_err(&format!("{} of", plan.action), e);
            run.event(true, "ApplyFailed", err.to_string()).await;
            Err(err)
        }
    }
}

async fn fail_on_errors(run: &Run<'_>, t: &Target<'_>, applied: &Applied) -> Result<()> {
    if applied.diagnostics.has_errors() {
        let message = describe(&applied.diagnostics, t.fields());
        run.event(true, "ApplyFailed", message.clone()).await;
        return Err(Error::Provider(message));
    }
    Ok(())
}

/// A fenced create: the attempt is recorded on the object before the provider is asked, and
/// the state Secret records it as completed after.
async fn create(run: &mut Run<'_>, t: &Target<'_>, plan: &Plan, why: (&str, String)) -> Result<()> {
    let attempt = k8s_openapi::jiff::Timestamp::now().to_string();
    run.patch_metadata(&[(CREATE_ATTEMPT_ANNOTATION, Some(&attempt))], true)
        .await?;
    let applied = apply_plan(run, t, plan).await?;
    Saved::default()
        .write(run, t, &applied.new_state, &applied.private, Some(attempt))
        .await?;
    fail_on_errors(run, t, &applied).await?;
    run.event(false, why.0, why.1).await;
    succeed(run, t, &applied.new_state);
    Ok(())
}

async fn replace(
    run: &mut Run<'_>,
    spec: &ManagedSpec,
    t: &Target<'_>,
    plan: &Plan,
    config: &Value,
    completed: Option<String>,
) -> Result<()> {
    let paths = plan_paths(plan, t.fields()).join(", ");
    if spec.replace_policy.as_deref() == Some("Refuse") {
        return Err(Error::ReplaceRefused(format!(
            "changing {paths} needs the {} replaced, and spec.replacePolicy is Refuse; revert the change or allow replacement",
            t.type_name
        )));
    }
    // Visible before it happens.
    run.set_conditions(&[Set::new(
        READY,
        false,
        reason::CREATING,
        format!("replacing: {paths} changed"),
    )]);
    run.flush_status().await?;
    let destroy = lifecycle::plan(
        t.host(),
        t.type_name,
        &plan.prior_state,
        &plan.prior_private,
        &Value::Null,
    )
    .await
    .map_err(|e| t.lifecycle_err("plan destroy", e))?;
    let destroyed = apply_plan(run, t, &destroy).await?;
    Saved::default()
        .write(run, t, &destroyed.new_state, &destroyed.private, completed)
        .await?;
    fail_on_errors(run, t, &destroyed).await?;
    let create_plan = lifecycle::plan(t.host(), t.type_name, &Value::Null, &[], config)
        .await
        .map_err(|e| t.lifecycle_err("plan", e))?;
    create(
        run,
        t,
        &create_plan,
        (
            "Replaced",
            format!("replaced {}: {paths} changed", t.type_name),
        ),
    )
    .await
}

/// After a create was interrupted: find out whether it made the object, by importing the
/// identities the spec gives (`importId`, then the `name` argument). `Ok(Some)` found it,
/// `Ok(None)` proved it absent, `Err(CreateInterrupted)` could not tell.
async fn recover(
    t: &Target<'_>,
    spec: &ManagedSpec,
    config: &Value,
    attempt: &str,
) -> Result<Option<Applied>> {
    let mut candidates: Vec<String> = spec.import_id().map(str::to_owned).into_iter().collect();
    if let Some(Value::String(name)) = lifecycle::lookup(config, &AttrPath::root().attr("name"))
        && !candidates.contains(name)
    {
        candidates.push(name.clone());
    }
    let mut why =
        String::from("the spec gives no identity to look it up by (importId or a name argument)");
    for id in &candidates {
        match lifecycle::import(t.host(), t.type_name, id).await {
            Ok(found) if found.new_state.is_null() => return Ok(None),
            Ok(found) => return Ok(Some(found)),
            Err(LifecycleError::Rejected(diags)) => {
                why = format!("importing {id:?} failed: {}", describe(&diags, t.fields()));
            }
            Err(e) => return Err(t.lifecycle_err("import", e)),
        }
    }
    Err(Error::CreateInterrupted(format!(
        "a create of this {} was interrupted at {attempt}, and Kraken cannot tell whether it made the object: {why}. \
         Check the provider for it, then set spec.importId to adopt it, or remove the annotation {CREATE_ATTEMPT_ANNOTATION} to create a new one",
        t.type_name
    )))
}

async fn cleanup(run: &mut Run<'_>, spec: &ManagedSpec) -> Result<Action> {
    if !run.has_finalizer() {
        return Ok(Action::await_change());
    }
    let readers = deps::readers(run).await?;
    if !readers.is_empty() {
        let message = crate::hub::producer::in_use_message(&readers);
        let first = condition(&run.status, READY)
            .is_none_or(|(_, r, m)| r != crate::hub::consumer::IN_USE || m != message);
        run.set_conditions(&[Set::new(
            READY,
            false,
            crate::hub::consumer::IN_USE,
            message.clone(),
        )]);
        run.flush_status().await?;
        if first {
            run.event(false, crate::hub::consumer::IN_USE, message)
                .await;
        }
        return Ok(Action::requeue(std::time::Duration::from_secs(2)));
    }
    let orphan = spec.deletion_policy.as_deref() == Some("Orphan") || spec.observe_only();
    if !orphan {
        destroy(run, spec).await?;
    }
    run.delete_state().await?;
    deps::retire(run).await?;
    run.patch_metadata(&[], false).await?;
    if orphan {
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

async fn destroy(run: &mut Run<'_>, spec: &ManagedSpec) -> Result<()> {
    let ctx = run.k.ctx.clone();
    let kind = run.k.kind.clone();
    let p = ctx
        .source
        .provider(&kind, &run.namespace, spec.provider_config())
        .await?;
    let resource = p.resource(&kind.type_name)?;
    let t = Target {
        p: &p,
        type_name: &kind.type_name,
        ty: resource.block.implied_type(),
        version: resource.version,
    };
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
            return Ok(());
        };
        // The configuration is only needed for the name to recover by; without it, recovery
        // falls back to importId.
        let config = ctx
            .source
            .resource_config(
                &p,
                &kind.type_name,
                &run.namespace,
                &spec.for_provider,
                false,
            )
            .await
            .unwrap_or(Value::Null);
        match recover(&t, spec, &config, &attempt).await? {
            Some(found) => (state, private) = (found.new_state, found.private),
            None => return Ok(()),
        }
    }
    let read = lifecycle::read(t.host(), t.type_name, &state, &private)
        .await
        .map_err(|e| t.lifecycle_err("read", e))?;
    if read.new_state.is_null() {
        return Ok(());
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
    let applied = apply_plan(run, &t, &plan).await?;
    if !applied.new_state.is_null() || applied.diagnostics.has_errors() {
        // Keep what is left so a retry destroys it.
        Saved::default()
            .write(run, &t, &applied.new_state, &applied.private, completed)
            .await?;
        fail_on_errors(run, &t, &applied).await?;
    }
    Ok(())
}

/// The state Secret's content as last written, so unchanged state is not written again.
struct Saved {
    state: Value,
    private: Vec<u8>,
    upgraded: bool,
}

impl Default for Saved {
    fn default() -> Self {
        Self {
            state: Value::Null,
            private: Vec::new(),
            upgraded: false,
        }
    }
}

impl Saved {
    fn from(r: &Restored) -> Self {
        Self {
            state: r.state.clone(),
            private: r.private.clone(),
            upgraded: r.upgraded,
        }
    }

    async fn write(
        &mut self,
        run: &Run<'_>,
        t: &Target<'_>,
        state: &Value,
        private: &[u8],
        attempt: Option<String>,
    ) -> Result<()> {
        let stored = Stored {
            state: t.encode(state)?,
            private: private.to_vec(),
            schema_version: t.version,
            create_attempt: attempt,
        };
        run.save_state(&stored).await?;
        self.state = state.clone();
        self.private = private.to_vec();
        self.upgraded = false;
        Ok(())
    }

    async fn write_if_changed(
        &mut self,
        run: &Run<'_>,
        t: &Target<'_>,
        state: &Value,
        private: &[u8],
        attempt: Option<String>,
    ) -> Result<()> {
        if !self.upgraded && self.state == *state && self.private == private {
            return Ok(());
        }
        self.write(run, t, state, private, attempt).await
    }
}

/// The paths a plan changes, as Kubernetes field paths: for a replacement the ones forcing it,
/// for an update every top-level attribute whose value changes, for a create or delete none
/// (the whole object).
fn plan_paths(plan: &Plan, fields: &FieldMap) -> Vec<String> {
    if matches!(plan.action, PlanAction::Create | PlanAction::Delete) {
        return Vec::new();
    }
    let mut paths: Vec<String> = if plan.action == PlanAction::Replace {
        plan.requires_replace
            .iter()
            .map(|p| fields.kube_path(p))
            .collect()
    } else {
        let empty = Default::default();
        let before = match plan.prior_state.untyped() {
            Value::Object(m) => m,
            _ => &empty,
        };
        match plan.planned_state.untyped() {
            Value::Object(after) => after
                .iter()
                .filter(|(k, v)| before.get(*k) != Some(*v))
                .map(|(k, _)| fields.kube_path(&AttrPath::root().attr(k.clone())))
                .collect(),
            _ => Vec::new(),
        }
    };
    paths.sort();
    paths.dedup();
    paths
}

/// Error diagnostics as one message, attribute paths in Kubernetes field names.
fn describe(diags: &[Diagnostic], fields: &FieldMap) -> String {
    let parts: Vec<String> = diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| {
            let mut s = d.summary.clone();
            if !d.detail.is_empty() {
                s.push_str(": ");
                s.push_str(d.detail.trim());
            }
            if let Some(path) = &d.attribute {
                s.push_str(&format!(" (at {})", fields.kube_path(path)));
            }
            s
        })
        .collect();
    if parts.is_empty() {
        "the provider reported an error without a message".into()
    } else {
        parts.join("; ")
    }
}

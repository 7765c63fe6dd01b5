//! `spec.planPolicy`, `status.plan` and approvals bound to the plan, over the fakes.

use super::*;
use crate::spec::PlanPolicy;

/// `name`'s pending plan (`status.plan`), or null.
fn pending(env: &Env, name: &str) -> Json {
    env.object(name).unwrap_or_default()["status"]["plan"].clone()
}

fn plan_id(env: &Env, name: &str) -> String {
    pending(env, name)["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The Synced condition's message on `name`.
pub(super) fn synced_message(env: &Env, name: &str) -> String {
    let obj = env.object(name).unwrap_or_default();
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Synced")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_owned()
}

impl Env {
    async fn approve(&self, name: &str, id: &str) -> anyhow::Result<()> {
        let patch = json!({"metadata": {"annotations": {APPROVE_PLAN_ANNOTATION: id,
                                                        APPROVED_BY_ANNOTATION: "alice"}}});
        self.things()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }
}

fn manual(name: &str) -> Json {
    let mut spec = thing(name);
    spec["planPolicy"] = json!("Manual");
    spec
}

#[tokio::test]
async fn manual_holds_a_create_until_its_exact_plan_is_approved() -> anyhow::Result<()> {
    let env = Env::new();
    env.api.insert(
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pw", "namespace": NS},
               "data": {"k": "aHVudGVyMg=="}}),
    );
    let mut spec = manual("a");
    spec["forProvider"]["passwordSecretRef"] = json!({"name": "pw", "key": "k"});
    env.create("a", spec);
    env.pass("a").await?;
    assert_eq!(env.plugin.calls("ApplyResourceChange"), 0);
    assert_eq!(env.condition("a", "Synced"), no("PlanPending"));
    assert_eq!(env.condition("a", "Ready"), no("Creating"));
    let plan = pending(&env, "a");
    assert_eq!(plan["action"], "Create");
    let text = plan.to_string();
    assert!(
        !text.contains("hunter2"),
        "a sensitive value is stored: {text}"
    );
    let change = |path: &str| {
        plan["changes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["path"] == path)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(change("spec.forProvider.name")["after"], "\"a\"");
    assert_eq!(
        change("spec.forProvider.passwordSecretRef")["after"],
        "(sensitive)"
    );
    assert_eq!(change("status.atProvider.id")["unknown"], true);
    let id = plan_id(&env, "a");
    assert!(synced_message(&env, "a").contains(&id));
    // Held and unchanged: another pass writes nothing.
    let before = env.writes();
    env.pass("a").await?;
    assert_eq!(env.writes(), before, "a held plan costs no write per pass");

    env.approve("a", "0000000000000000").await?;
    env.pass("a").await?;
    assert_eq!(
        env.plugin.creates(),
        0,
        "an approval of another plan applies nothing"
    );
    env.approve("a", &id).await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.creates(), 1);
    assert_eq!(env.condition("a", "Synced"), yes("ReconcileSuccess"));
    let obj = env.object("a").unwrap_or_default();
    assert!(obj["status"].get("plan").is_none(), "no plan pending");
    assert_eq!(obj["status"]["lastAppliedPlan"]["id"], id.as_str());
    assert_eq!(
        env.events().await,
        [
            "PlanPending",
            "PlanStale",
            "PlanApproved",
            "Created",
            "PlanApplied"
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_held_update_keeps_ready_describing_the_live_object() -> anyhow::Result<()> {
    let env = Env::new();
    created(&env, "a", thing("a")).await?;
    let change = json!({"planPolicy": "Manual", "forProvider": {"description": "new"}});
    env.edit("a", change).await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.updates(), 0);
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    assert_eq!(env.condition("a", "Synced"), no("PlanPending"));
    let obj = env.object("a").unwrap_or_default();
    assert!(obj["status"]["atProvider"].get("description").is_none());
    assert_eq!(
        pending(&env, "a")["changes"],
        json!([{"path": "spec.forProvider.description", "before": "null", "after": "\"new\""}])
    );
    // The previous approval (the annotation stays) is spent once applied, not stale.
    let id = plan_id(&env, "a");
    env.approve("a", &id).await?;
    env.pass("a").await?;
    env.edit("a", json!({"forProvider": {"description": "newer"}}))
        .await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.updates(), 1);
    assert_eq!(env.condition("a", "Synced"), no("PlanPending"));
    let events = env.events().await;
    assert_eq!(
        events,
        [
            "Created",
            "PlanPending",
            "PlanApproved",
            "Updated",
            "PlanApplied",
            "PlanPending"
        ]
    );
    Ok(())
}

#[tokio::test]
async fn manual_for_destructive_applies_updates_and_holds_replacements() -> anyhow::Result<()> {
    let env = Env::new();
    let mut spec = thing("a");
    spec["planPolicy"] = json!("ManualForDestructive");
    created(&env, "a", spec).await?;
    env.edit("a", json!({"forProvider": {"description": "d"}}))
        .await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.updates(), 1);
    env.edit("a", json!({"forProvider": {"zone": "z2"}}))
        .await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.deletes(), 0);
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    let plan = pending(&env, "a");
    assert_eq!(plan["action"], "Replace");
    assert_eq!(
        plan["changes"],
        json!([{"path": "spec.forProvider.zone", "before": "\"z1\"", "after": "\"z2\"",
                "forcesReplacement": true}])
    );
    env.approve("a", &plan_id(&env, "a")).await?;
    env.pass("a").await?;
    assert_eq!((env.plugin.deletes(), env.plugin.creates()), (1, 2));
    assert_eq!(env.condition("a", "Synced"), yes("ReconcileSuccess"));
    Ok(())
}

#[tokio::test]
async fn a_spec_change_after_approval_makes_it_stale() -> anyhow::Result<()> {
    let env = Env::new();
    env.create("a", manual("a"));
    env.pass("a").await?;
    let approved = plan_id(&env, "a");
    env.approve("a", &approved).await?;
    env.edit("a", json!({"forProvider": {"description": "late"}}))
        .await?;
    env.pass("a").await?;
    assert_eq!(
        env.plugin.calls("ApplyResourceChange"),
        0,
        "applied a stale approval"
    );
    assert_eq!(env.condition("a", "Synced"), no("PlanPending"));
    let fresh = plan_id(&env, "a");
    assert_ne!(fresh, approved);
    let message = synced_message(&env, "a");
    assert!(
        message.contains(&format!(
            "the approved plan {approved} is stale: the spec changed (generation 1 → 2)"
        )),
        "{message}"
    );
    assert_eq!(env.events().await, ["PlanPending", "PlanStale"]);
    // The same stale approval on the next pass: no second Event.
    env.pass("a").await?;
    assert_eq!(env.events().await, ["PlanPending", "PlanStale"]);
    env.approve("a", &fresh).await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.creates(), 1);
    Ok(())
}

#[tokio::test]
async fn a_changed_provider_config_makes_an_approval_stale() -> anyhow::Result<()> {
    let env = Env::new();
    env.create("a", manual("a"));
    env.pass("a").await?;
    let approved = plan_id(&env, "a");
    let pcs = Api::<DynamicObject>::namespaced_with(
        env.api.client(),
        NS,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("core.kraken.dev", "v1alpha1", "ProviderConfig"),
            "providerconfigs",
        ),
    );
    let patch = Patch::Merge(json!({"spec": {"maxConcurrency": 3}}));
    pcs.patch("default", &PatchParams::default(), &patch)
        .await?;
    env.approve("a", &approved).await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.creates(), 0);
    let message = synced_message(&env, "a");
    assert!(message.contains("the ProviderConfig changed"), "{message}");
    Ok(())
}

#[test]
fn an_approval_wakes_the_controller() -> anyhow::Result<()> {
    let meta = |ann: Json| -> anyhow::Result<PartialObjectMeta<DynamicObject>> {
        let mut m: PartialObjectMeta<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": "a", "namespace": NS, "uid": "u", "generation": 1,
                         "annotations": ann}}))?;
        strip(&mut m);
        Ok(m)
    };
    let none = trigger_hash(&meta(json!({"other": "x"}))?);
    let approved = trigger_hash(&meta(json!({APPROVE_PLAN_ANNOTATION: "abc"}))?);
    assert_ne!(none, approved);
    Ok(())
}

#[tokio::test]
async fn drift_under_manual_is_held_as_drift_pending_not_reverted() -> anyhow::Result<()> {
    let env = Env::new();
    let mut spec = thing("a");
    spec["planPolicy"] = json!("Manual");
    env.create("a", spec);
    env.pass("a").await?;
    env.approve("a", &plan_id(&env, "a")).await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.creates(), 1);
    let mut changed = env.plugin.objects()["a"].clone();
    if let Value::Object(m) = &mut changed {
        m.insert("description".into(), Value::string("edited by hand"));
    }
    env.plugin.put("a", Some(changed));
    env.pass("a").await?;
    assert_eq!(
        env.plugin.updates(),
        0,
        "drift was reverted without approval"
    );
    assert_eq!(env.condition("a", "Synced"), no("DriftPending"));
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    let message = synced_message(&env, "a");
    assert!(
        message.contains("changed outside Kraken (spec.forProvider.description)"),
        "{message}"
    );
    assert_eq!(pending(&env, "a")["reason"], "DriftPending");
    // Still drift on the next pass (the pending plan is not mistaken for a spec change).
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("DriftPending"));
    env.approve("a", &plan_id(&env, "a")).await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.updates(), 1);
    assert_eq!(env.condition("a", "Synced"), yes("ReconcileSuccess"));
    let history = env.object("a").unwrap_or_default()["status"]["planHistory"].clone();
    assert_eq!(history.as_array().map(Vec::len), Some(2), "{history}");
    assert_eq!(history[0]["action"], "Update");
    assert_eq!(history[1]["action"], "Create");
    let events = env.events().await;
    assert_eq!(
        events[events.len() - 4..],
        [
            "DriftPending",
            "PlanApproved",
            "DriftCorrected",
            "PlanApplied"
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_delete_waits_for_approval_and_force_delete_does_not_skip_it() -> anyhow::Result<()> {
    let env = Env::new();
    let mut spec = thing("a");
    spec["planPolicy"] = json!("ManualForDestructive");
    created(&env, "a", spec).await?;
    env.delete("a").await?;
    let force = json!({"metadata": {"annotations": {"kraken.dev/force-delete": "true"}}});
    env.things()
        .patch("a", &PatchParams::default(), &Patch::Merge(force))
        .await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.deletes(), 0, "destroyed without approval");
    assert!(env.object("a").is_some(), "the finalizer was released");
    assert_eq!(env.condition("a", "Synced"), no("DeletePending"));
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    let plan = pending(&env, "a");
    assert_eq!(
        (plan["action"].as_str(), plan["reason"].as_str()),
        (Some("Delete"), Some("DeletePending"))
    );
    let id = plan_id(&env, "a");
    env.approve("a", &id).await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.deletes(), 1);
    assert!(
        env.object("a").is_none(),
        "finalizer released after the approved destroy"
    );
    let events = env.events().await;
    assert_eq!(
        events,
        [
            "Created",
            "DeletePending",
            "PlanApproved",
            "PlanApplied",
            "Deleted"
        ]
    );
    Ok(())
}

#[tokio::test]
async fn history_keeps_the_last_ten_applied_plans_and_names_the_approver() -> anyhow::Result<()> {
    let env = Env::new();
    env.create("a", manual("a"));
    for i in 0..12 {
        if i > 0 {
            env.edit(
                "a",
                json!({"forProvider": {"description": format!("v{i}")}}),
            )
            .await?;
        }
        env.pass("a").await?;
        env.approve("a", &plan_id(&env, "a")).await?;
        env.pass("a").await?;
    }
    let status = env.object("a").unwrap_or_default()["status"].clone();
    let history = status["planHistory"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(history.len(), hold::HISTORY);
    assert_eq!(history[0], status["lastAppliedPlan"]);
    assert_eq!(env.plugin.updates(), 11);
    // Without the admission policy bound, the name is reported but marked unverified.
    let who = history[0]["approvedBy"].as_str().unwrap_or_default();
    assert!(
        who.starts_with("alice (unverified: the admission policy kraken-plan-approval"),
        "{who}"
    );
    Ok(())
}

#[tokio::test]
async fn the_provider_config_and_the_namespace_set_floors_a_resource_may_only_raise()
-> anyhow::Result<()> {
    let env = Env::new();
    let pcs = Api::<DynamicObject>::namespaced_with(
        env.api.client(),
        NS,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("core.kraken.dev", "v1alpha1", "ProviderConfig"),
            "providerconfigs",
        ),
    );
    let patch = Patch::Merge(json!({"spec": {"planPolicy": "Manual"}}));
    pcs.patch("default", &PatchParams::default(), &patch)
        .await?;
    env.create("held", thing("held"));
    env.pass("held").await?;
    assert_eq!(env.condition("held", "Synced"), no("PlanPending"));
    // Asking for less than the ProviderConfig's is not getting it.
    let mut spec = thing("auto");
    spec["planPolicy"] = json!("Auto");
    env.create("auto", spec.clone());
    env.pass("auto").await?;
    assert_eq!(env.condition("auto", "Synced"), no("PlanPending"));
    assert_eq!(env.plugin.creates(), 0);

    // With the ProviderConfig lowered, the namespace's floor (an administrator's label) holds.
    let patch = Patch::Merge(json!({"spec": {"planPolicy": "Auto"}}));
    pcs.patch("default", &PatchParams::default(), &patch)
        .await?;
    env.k.ctx.floors.set(NS, PlanPolicy::ManualForDestructive);
    env.create("floored", spec);
    env.pass("floored").await?;
    assert_eq!(
        env.condition("floored", "Ready"),
        yes("Available"),
        "a create is not destructive"
    );
    env.delete("floored").await?;
    env.pass("floored").await?;
    assert_eq!(
        env.condition("floored", "Synced"),
        no("DeletePending"),
        "a delete waits"
    );
    assert_eq!(env.plugin.deletes(), 0);
    // A resource asking for more than the floor gets it.
    let mut strict = thing("strict");
    strict["planPolicy"] = json!("Manual");
    env.create("strict", strict);
    env.pass("strict").await?;
    assert_eq!(env.condition("strict", "Synced"), no("PlanPending"));
    assert_eq!(env.plugin.creates(), 1, "only floored");
    Ok(())
}

/// Approves `name`'s pending plan after `moved` changed something, and returns the Synced
/// message of the pass that follows (nothing may be applied).
async fn stale_after(
    env: &Env,
    name: &str,
    moved: impl AsyncFnOnce(&Env) -> anyhow::Result<()>,
) -> anyhow::Result<String> {
    let approved = plan_id(env, name);
    moved(env).await?;
    env.approve(name, &approved).await?;
    env.pass(name).await?;
    assert_ne!(plan_id(env, name), approved, "the id did not move");
    Ok(synced_message(env, name))
}

#[tokio::test]
async fn a_changed_secret_input_makes_an_approval_stale() -> anyhow::Result<()> {
    let env = Env::new();
    let secret = |v: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pw", "namespace": NS},
               "data": {"k": v}})
    };
    env.api.insert("secrets", secret("aHVudGVyMg=="));
    let mut spec = manual("a");
    spec["forProvider"]["passwordSecretRef"] = json!({"name": "pw", "key": "k"});
    env.create("a", spec);
    env.pass("a").await?;
    let message = stale_after(&env, "a", async |env: &Env| {
        env.api.insert("secrets", secret("aHVudGVyMw=="));
        Ok(())
    })
    .await?;
    assert_eq!(env.plugin.creates(), 0);
    assert!(message.contains("the resolved inputs changed"), "{message}");
    Ok(())
}

#[tokio::test]
async fn drift_after_approval_makes_it_stale() -> anyhow::Result<()> {
    let env = Env::new();
    created(&env, "a", thing("a")).await?;
    env.edit(
        "a",
        json!({"planPolicy": "Manual", "forProvider": {"description": "x"}}),
    )
    .await?;
    env.pass("a").await?;
    let message = stale_after(&env, "a", async |env: &Env| {
        let mut changed = env.plugin.objects()["a"].clone();
        if let Value::Object(m) = &mut changed {
            m.insert("zone".into(), Value::string("moved by hand"));
        }
        env.plugin.put("a", Some(changed));
        Ok(())
    })
    .await?;
    assert_eq!(env.plugin.updates(), 0);
    assert!(
        message.contains("the external object changed (drift)"),
        "{message}"
    );
    Ok(())
}

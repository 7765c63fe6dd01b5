//! The policy fields (`deletionPolicy`, `managementPolicy`, `replacePolicy`, `ignoreChanges`)
//! under a plan policy that reviews changes: under `Manual` a change of them waits for approval
//! like a change of the object, and a deletion goes by the ones in force (recorded in the
//! sealed state), not by an edit made since.

use super::*;
use crate::spec::PlanPolicy;

fn plan(env: &Env, name: &str) -> Json {
    env.object(name).unwrap_or_default()["status"]["plan"].clone()
}

impl Env {
    async fn approve_pending(&self, name: &str) -> anyhow::Result<()> {
        let id = plan(self, name)["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let patch = json!({"metadata": {"annotations": {APPROVE_PLAN_ANNOTATION: id,
                                                        APPROVED_BY_ANNOTATION: "alice"}}});
        self.things()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }
}

#[tokio::test]
async fn under_manual_a_policy_change_waits_and_a_delete_goes_by_the_one_in_force()
-> anyhow::Result<()> {
    let env = Env::new();
    created(&env, "a", thing("a")).await?;
    env.k.ctx.floors.set(NS, PlanPolicy::Manual);
    // The editor releases the object in the same breath as deleting it.
    env.edit("a", json!({"deletionPolicy": "Orphan"})).await?;
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("PlanPending"));
    let held = plan(&env, "a");
    let change = held["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["path"] == "spec.deletionPolicy")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (change["before"].as_str(), change["after"].as_str()),
        (Some("null"), Some("\"Orphan\"")),
        "{held}"
    );
    env.delete("a").await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.deletes(), 0);
    assert!(env.object("a").is_some(), "not released as an orphan");
    assert_eq!(env.condition("a", "Synced"), no("DeletePending"));
    Ok(())
}

#[tokio::test]
async fn an_approved_policy_change_is_in_force() -> anyhow::Result<()> {
    let env = Env::new();
    created(&env, "a", thing("a")).await?;
    env.k.ctx.floors.set(NS, PlanPolicy::Manual);
    env.edit("a", json!({"deletionPolicy": "Orphan"})).await?;
    env.pass("a").await?;
    env.approve_pending("a").await?;
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), yes("ReconcileSuccess"));
    assert!(plan(&env, "a").is_null());
    // Recorded: the next pass holds nothing, and deleting releases the object.
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), yes("ReconcileSuccess"));
    env.delete("a").await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.deletes(), 0);
    assert!(env.object("a").is_none(), "released");
    assert_eq!(env.plugin.objects().len(), 1, "orphaned, not destroyed");
    Ok(())
}

#[tokio::test]
async fn under_auto_a_policy_change_is_recorded_at_once() -> anyhow::Result<()> {
    let env = Env::new();
    created(&env, "a", thing("a")).await?;
    env.edit("a", json!({"ignoreChanges": ["description"]}))
        .await?;
    let before = env.api.writes("/secrets/");
    env.pass("a").await?;
    assert_eq!(
        env.api.writes("/secrets/") - before,
        1,
        "one state write records it"
    );
    // A Manual floor set later finds nothing pending: the change was in force before it.
    env.k.ctx.floors.set(NS, PlanPolicy::Manual);
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), yes("ReconcileSuccess"));
    Ok(())
}

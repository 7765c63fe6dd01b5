//! Changes after the create: an update in place, a replacement (destroy first, or create first
//! with `CreateBeforeDestroy`, or refused with `Refuse`), a delete through the finalizer, and
//! `deletionPolicy: Orphan`.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::condition;
use serde_json::json;

use super::{
    CONVERGE, RECOVER, default_run, delete_object, expect_ops, external_id, has_finalizer,
    last_plan, ledger_ops, num, sole_object, spec, wait_state_secret_gone,
};

#[test]
fn size_change_updates_in_place() -> anyhow::Result<()> {
    default_run("update", |bed| {
        bed.apply_object("web", spec("web", 3, json!({})))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        bed.apply_object("web", spec("web", 5, json!({})))?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        ensure!(obj["metadata"]["generation"] == 2);
        ensure!(external_id(&obj)? == id, "an in-place update keeps the id");
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == id.as_str() && num(&live["size"]) == Some(5.0),
            "{live}"
        );
        ensure!(num(&live["revision"]) == Some(2.0), "{live}");
        ensure!(num(&obj["status"]["atProvider"]["size"]) == Some(5.0));
        expect_ops(
            bed,
            &[format!("create {id} web"), format!("update {id} web")],
        )?;
        let (action, paths) = last_plan(&obj);
        ensure!(action == "Update", "lastPlan {}", obj["status"]["lastPlan"]);
        ensure!(
            paths.iter().any(|p| p == "spec.forProvider.size"),
            "lastPlan.paths must name spec.forProvider.size: {paths:?}"
        );
        bed.wait_event("web", "Updated", CONVERGE)?;
        Ok(())
    })
}

#[test]
fn name_change_replaces_the_object() -> anyhow::Result<()> {
    default_run("replace", |bed| {
        bed.apply_object("web", spec("alpha", 3, json!({})))?;
        let old = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        bed.apply_object("web", spec("beta", 3, json!({})))?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        let new = external_id(&obj)?;
        ensure!(new != old, "a replacement gives a new id");
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == new.as_str() && live["name"] == "beta",
            "{live}"
        );
        let mut ops = ledger_ops(bed)?;
        ensure!(
            ops.first() == Some(&format!("create {old} alpha")),
            "{ops:?}"
        );
        ops.sort();
        let mut want = vec![
            format!("create {old} alpha"),
            format!("delete {old} alpha"),
            format!("create {new} beta"),
        ];
        want.sort();
        ensure!(ops == want, "ledger events {ops:?}, want {want:?}");
        let (action, paths) = last_plan(&obj);
        ensure!(
            action == "Replace",
            "lastPlan {}",
            obj["status"]["lastPlan"]
        );
        ensure!(
            paths.iter().any(|p| p == "spec.forProvider.name"),
            "{paths:?}"
        );
        bed.wait_event("web", "Replaced", CONVERGE)?;
        Ok(())
    })
}

/// `replacePolicy: CreateBeforeDestroy` (Terraform's create_before_destroy): the new object
/// exists before the old one is destroyed, in the ledger's own order.
#[test]
fn create_before_destroy_makes_the_new_object_first() -> anyhow::Result<()> {
    default_run("replace-create-first", |bed| {
        let first = json!({"replacePolicy": "CreateBeforeDestroy"});
        bed.apply_object("web", spec("alpha", 3, first.clone()))?;
        let old = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        bed.apply_object("web", spec("beta", 3, first))?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        let new = external_id(&obj)?;
        ensure!(new != old, "a replacement gives a new id");
        bed.wait_event("web", "DeposedDestroyed", CONVERGE)?;
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == new.as_str() && live["name"] == "beta",
            "{live}"
        );
        expect_ops(
            bed,
            &[
                format!("create {old} alpha"),
                format!("create {new} beta"),
                format!("delete {old} alpha"),
            ],
        )?;
        let secret = bed.state_secret("web")?.context("no state Secret")?;
        ensure!(
            secret["data"]["deposedState"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "the deposed object's entry is dropped once it is destroyed: {}",
            secret["data"]
        );
        bed.wait_event("web", "Replaced", CONVERGE)?;
        Ok(())
    })
}

#[test]
fn replace_policy_refuse_stops_a_replacement() -> anyhow::Result<()> {
    default_run("replace-refused", |bed| {
        let refuse = json!({"replacePolicy": "Refuse"});
        bed.apply_object("web", spec("alpha", 3, refuse.clone()))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        bed.apply_object("web", spec("beta", 3, refuse))?;
        let obj = bed.wait_synced("web", "False", "ReplaceRefused", CONVERGE)?;
        let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
        ensure!(
            !message.trim().is_empty(),
            "ReplaceRefused needs a message saying what to do"
        );
        let (action, paths) = last_plan(&obj);
        ensure!(
            action == "Replace",
            "lastPlan {}",
            obj["status"]["lastPlan"]
        );
        ensure!(
            paths.iter().any(|p| p == "spec.forProvider.name"),
            "{paths:?}"
        );
        bed.wait_event("web", "ReplaceRefused", CONVERGE)?;
        // Only the user can fix it: the operator waits for a change and retries nothing.
        bed.expect_idle(Duration::from_secs(3), "a refused replacement")?;
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == id.as_str() && live["name"] == "alpha",
            "{live}"
        );
        expect_ops(bed, &[format!("create {id} alpha")])?;
        ensure!(external_id(&bed.object("web")?)? == id);

        // Allowing it lets the pending replacement through.
        bed.apply_object("web", spec("beta", 3, json!({"replacePolicy": "Allow"})))?;
        let obj = bed.wait_reconciled("web", RECOVER)?;
        let live = sole_object(bed)?;
        ensure!(
            live["name"] == "beta" && live["id"] != id.as_str(),
            "{live}"
        );
        ensure!(external_id(&obj)? == live["id"].as_str().unwrap_or_default());
        Ok(())
    })
}

#[test]
fn delete_destroys_through_the_finalizer() -> anyhow::Result<()> {
    default_run("delete", |bed| {
        bed.apply_object("web", spec("web", 3, json!({})))?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        let id = external_id(&obj)?;
        ensure!(has_finalizer(&obj), "no finalizer: {}", obj["metadata"]);
        ensure!(
            bed.state_secret("web")?.is_some(),
            "no state Secret before the delete"
        );
        delete_object(bed, "web")?;
        bed.wait_gone("web", CONVERGE)?;
        ensure!(
            ledger::objects(bed.ledger_dir())?.is_empty(),
            "the ledger still has objects"
        );
        expect_ops(
            bed,
            &[format!("create {id} web"), format!("delete {id} web")],
        )?;
        wait_state_secret_gone(bed, "web")?;
        bed.wait_event("web", "Deleted", CONVERGE)?;
        Ok(())
    })
}

#[test]
fn deletion_policy_orphan_leaves_the_object() -> anyhow::Result<()> {
    default_run("orphan", |bed| {
        bed.apply_object("web", spec("web", 3, json!({"deletionPolicy": "Orphan"})))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        delete_object(bed, "web")?;
        bed.wait_gone("web", CONVERGE)?;
        let live = sole_object(bed)?;
        ensure!(live["id"] == id.as_str(), "{live}");
        expect_ops(bed, &[format!("create {id} web")]).context("nothing destroyed")?;
        // A stale state Secret would make a new Object of the same name adopt the orphan.
        wait_state_secret_gone(bed, "web")?;
        bed.wait_event("web", "Orphaned", CONVERGE)?;
        Ok(())
    })
}

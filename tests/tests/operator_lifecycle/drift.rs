//! When the operator acts on a difference and when it leaves it: the pause annotation,
//! `ignoreChanges`, drift corrected on the drift interval, and drift checks that find nothing
//! and write nothing.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{OBJECTS, describe};
use kraken_tests::operator::{FixtureBed, OperatorOptions, condition};
use kraken_tests::wait_for;
use serde_json::{Value, json};

use super::{
    CONVERGE, default_run, expect_ops, external_id, ledger_ops, num, run, sole_object, spec,
};

fn annotate(bed: &FixtureBed, name: &str, annotation: &str) -> anyhow::Result<()> {
    bed.cp.kubectl(&[
        "annotate",
        OBJECTS,
        name,
        "-n",
        &bed.ns,
        "--overwrite",
        annotation,
    ])?;
    Ok(())
}

#[test]
fn pause_annotation_holds_changes_until_removed() -> anyhow::Result<()> {
    default_run("pause", |bed| {
        bed.apply_object("web", spec("web", 3, json!({})))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        annotate(bed, "web", "kraken.dev/paused=true")?;
        bed.apply_object("web", spec("web", 5, json!({})))?;
        bed.wait_synced("web", "False", "ReconcilePaused", CONVERGE)?;
        // Paused: nothing is retried until the annotation goes.
        bed.expect_idle(Duration::from_secs(3), "a paused object")?;
        let live = sole_object(bed)?;
        ensure!(
            num(&live["size"]) == Some(3.0),
            "a paused object was changed: {live}"
        );
        expect_ops(bed, &[format!("create {id} web")])?;
        let obj = bed.object("web")?;
        ensure!(
            condition(&obj, "Synced")
                .is_some_and(|(s, r, _)| s == "False" && r == "ReconcilePaused"),
            "still paused: {}",
            describe(&obj)
        );

        annotate(bed, "web", "kraken.dev/paused-")?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        ensure!(external_id(&obj)? == id);
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == id.as_str() && num(&live["size"]) == Some(5.0),
            "{live}"
        );
        expect_ops(
            bed,
            &[format!("create {id} web"), format!("update {id} web")],
        )?;
        Ok(())
    })
}

/// `spec.ignoreChanges` (Terraform's `ignore_changes`): once the object exists, neither a
/// change of the ignored argument in the spec nor drift of it outside is acted on; a path the
/// kind does not have is refused; dropping it from the list applies the spec again.
#[test]
fn ignore_changes_leaves_an_argument_alone() -> anyhow::Result<()> {
    default_run("ignore", |bed| {
        let ignoring = json!({"driftInterval": "2s", "ignoreChanges": ["size"]});
        bed.apply_object("web", spec("web", 3, ignoring.clone()))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;

        bed.apply_object("web", spec("web", 5, ignoring.clone()))?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        ensure!(obj["metadata"]["generation"] == 2, "{}", obj["metadata"]);
        ensure!(
            num(&obj["status"]["atProvider"]["size"]) == Some(3.0),
            "atProvider: {}",
            obj["status"]["atProvider"]
        );
        ledger::edit_object(bed.ledger_dir(), &id, |o| o["size"] = json!(77))?;
        // Several drift checks later the outside change is still there.
        bed.wait_reconciles(3, Duration::from_secs(30))?;
        let live = sole_object(bed)?;
        ensure!(num(&live["size"]) == Some(77.0), "ledger {live}");
        expect_ops(bed, &[format!("create {id} web")])?;

        let wrong = json!({"driftInterval": "2s", "ignoreChanges": ["sise"]});
        bed.apply_object("web", spec("web", 5, wrong))?;
        let refused = bed.wait_synced("web", "False", "InvalidSpec", CONVERGE)?;
        let (_, _, message) = condition(&refused, "Synced").unwrap_or_default();
        ensure!(
            message.contains("spec.ignoreChanges[0]") && message.contains("sise"),
            "{message}"
        );

        bed.apply_object("web", spec("web", 5, json!({"driftInterval": "2s"})))?;
        wait_for(CONVERGE, "size 5 applied once nothing is ignored", || {
            let live = sole_object(bed)?;
            Ok((num(&live["size"]) == Some(5.0)).then_some(()))
        })?;
        expect_ops(
            bed,
            &[format!("create {id} web"), format!("update {id} web")],
        )?;
        Ok(())
    })
}

#[test]
fn drift_is_corrected_on_the_drift_interval() -> anyhow::Result<()> {
    default_run("drift", |bed| {
        bed.apply_object("web", spec("web", 3, json!({"driftInterval": "2s"})))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;

        // Edited behind Kraken's back: corrected in place.
        ledger::edit_object(bed.ledger_dir(), &id, |o| o["size"] = json!(77))?;
        wait_for(
            Duration::from_secs(30),
            "the drifted size to be corrected",
            || {
                let live = sole_object(bed)?;
                if num(&live["size"]) == Some(3.0) {
                    Ok(Some(()))
                } else {
                    bail!("ledger {live}")
                }
            },
        )?;
        expect_ops(
            bed,
            &[format!("create {id} web"), format!("update {id} web")],
        )?;
        bed.wait_event("web", "DriftCorrected", CONVERGE)?;

        // Deleted behind Kraken's back: created again, and status follows the new id.
        ledger::remove_object(bed.ledger_dir(), &id)?;
        let new = wait_for(
            Duration::from_secs(30),
            "the deleted object to be recreated",
            || {
                let objects = ledger::objects(bed.ledger_dir())?;
                match objects.as_slice() {
                    [o] => Ok(Some(o["id"].as_str().unwrap_or_default().to_string())),
                    _ => bail!("ledger objects {objects:?}"),
                }
            },
        )?;
        ensure!(new != id);
        wait_for(
            Duration::from_secs(30),
            "status.externalId to be the new id",
            || {
                let obj = bed.object("web")?;
                if external_id(&obj)? == new {
                    Ok(Some(()))
                } else {
                    bail!("{}", describe(&obj))
                }
            },
        )?;
        let ops = ledger_ops(bed)?;
        ensure!(
            ops == vec![
                format!("create {id} web"),
                format!("update {id} web"),
                format!("create {new} web")
            ],
            "{ops:?}"
        );
        // Two more drift checks (every 2 s) find the new object and create no other.
        bed.wait_reconciles(2, Duration::from_secs(30))?;
        ensure!(
            sole_object(bed)?["id"] == new.as_str(),
            "exactly one object after the recreate"
        );
        ensure!(ledger_ops(bed)?.len() == 3, "{:?}", ledger_ops(bed)?);
        Ok(())
    })
}

/// What a no-op drift check must leave untouched.
#[derive(Debug, PartialEq)]
struct Quiet {
    object_rv: Value,
    secret_rv: Value,
    events: usize,
    api_writes: f64,
    ledger_ops: usize,
}

#[test]
fn noop_drift_checks_write_nothing() -> anyhow::Result<()> {
    // Lease renewals are API writes too: without leader election every write is a reconcile's.
    let opts = OperatorOptions {
        leader_elect: false,
        ..OperatorOptions::default()
    };
    run("noop-drift", opts, |bed| {
        bed.apply_object("web", spec("web", 3, json!({"driftInterval": "1s"})))?;
        bed.wait_reconciled("web", CONVERGE)?;
        bed.wait_event("web", "Created", CONVERGE)?;
        let quiet = |bed: &FixtureBed| -> anyhow::Result<Quiet> {
            let secret = bed.state_secret("web")?.context("no state Secret")?;
            Ok(Quiet {
                object_rv: bed.object("web")?["metadata"]["resourceVersion"].clone(),
                secret_rv: secret["metadata"]["resourceVersion"].clone(),
                events: bed.events("web")?.len(),
                api_writes: bed.op.metric("kraken_api_writes_total")?,
                ledger_ops: ledger_ops(bed)?.len(),
            })
        };
        // The create's trailing writes (status, Events, the StateDeclaration) are over once a
        // whole drift check has passed without any.
        let before = wait_for(CONVERGE, "a drift check that changed nothing", || {
            let before = quiet(bed)?;
            bed.wait_reconciles(2, Duration::from_secs(30))?;
            let after = quiet(bed)?;
            if after == before {
                Ok(Some(after))
            } else {
                bail!("still settling:\nbefore {before:?}\nafter  {after:?}")
            }
        })?;
        // Three more drift checks, each a full read and plan: nothing written.
        bed.wait_reconciles(3, Duration::from_secs(30))?;
        let after = quiet(bed)?;
        ensure!(
            after == before,
            "a no-op drift check wrote something:\nbefore {before:?}\nafter  {after:?}"
        );
        Ok(())
    })
}

//! Objects Kraken did not create: adopted by `importId` or `importIdentity`, or only observed
//! (`managementPolicy: ObserveOnly`), which never writes. Each carries its owner's consent, the
//! tag `kraken.dev/adoptable-by=<namespace>/<name>` of the resource that adopts it
//! (tests/tests/tenant_boundaries/adoption.rs shows what happens without it).

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{OBJECTS, describe};
use kraken_tests::operator::{FixtureBed, condition};
use kraken_tests::wait_for;
use serde_json::json;

use super::{
    CONVERGE, default_run, delete_object, expect_ops, external_id, num, sole_object, spec,
};

#[test]
fn import_id_adopts_an_existing_object() -> anyhow::Result<()> {
    default_run("import", |bed| {
        // Make an object that Kraken no longer manages: create it, then orphan it.
        let consent = json!({"kraken.dev/adoptable-by": format!("{}/adopter", bed.ns)});
        bed.apply_object(
            "seed",
            spec(
                "adopted",
                1,
                json!({"deletionPolicy": "Orphan", "forProvider": {"tags": consent}}),
            ),
        )?;
        let id = external_id(&bed.wait_reconciled("seed", CONVERGE)?)?;
        delete_object(bed, "seed")?;
        bed.wait_gone("seed", CONVERGE)?;
        expect_ops(bed, &[format!("create {id} adopted")])?;

        // Adopt it under another resource, with a different size to prove it is managed.
        bed.apply_object("adopter", spec("adopted", 2, json!({"importId": id})))?;
        let obj = bed.wait_reconciled("adopter", CONVERGE)?;
        ensure!(external_id(&obj)? == id, "the adopter must take over {id}");
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == id.as_str() && num(&live["size"]) == Some(2.0),
            "{live}"
        );
        expect_ops(
            bed,
            &[
                format!("create {id} adopted"),
                format!("update {id} adopted"),
            ],
        )
        .context("an import must not create")?;
        bed.wait_event("adopter", "Imported", CONVERGE)?;
        ensure!(
            !bed.events("adopter")?.iter().any(|(r, _)| r == "Created"),
            "an adopted object is not Created: {:?}",
            bed.events("adopter")?
        );
        Ok(())
    })
}

/// An object that exists in the cloud without Kraken having made it, tagged as adoptable by
/// the resource `adopter` of the bed's namespace.
fn hand_made_object(
    bed: &FixtureBed,
    (id, name, size): (&str, &str, u32),
    adopter: &str,
) -> anyhow::Result<()> {
    let consent = json!({"kraken.dev/adoptable-by": format!("{}/{adopter}", bed.ns)});
    ledger::write_object(
        bed.ledger_dir(),
        &json!({
            "id": id, "name": name, "size": size, "tags": consent, "labels": null, "ports": null,
            "settings": null, "rules": null, "password": null, "description": "made by hand",
            "created_at": "2024-01-01T00:00:00Z", "revision": 1, "secret_token": "feedface00",
        }),
    )
}

/// `importIdentity` adopts through the fixture's resource identity (protocol 6.9): the import
/// names `{id}`, not an import id. An identity the schema does not have is refused with the
/// reason, and nothing is created in its place.
#[test]
fn import_identity_adopts_by_the_providers_identity() -> anyhow::Result<()> {
    default_run("import-identity", |bed| {
        let id = "obj-1de000000000000a";
        hand_made_object(bed, (id, "by-identity", 4), "identified")?;
        let observe = json!({"managementPolicy": "ObserveOnly", "importIdentity": {"id": id}});
        bed.apply_object("identified", spec("by-identity", 4, observe))?;
        let obj = bed.wait_reconciled("identified", CONVERGE)?;
        ensure!(external_id(&obj)? == id, "{obj}");
        let imported = bed.wait_event("identified", "Imported", CONVERGE)?;
        ensure!(
            imported.contains(&format!("identity {{id=\"{id}\"}}")),
            "the import named the identity: {imported}"
        );

        let wrong = json!({"importIdentity": {"ident": id}});
        bed.apply_object("misnamed", spec("by-identity", 4, wrong))?;
        wait_for(CONVERGE, "the misnamed identity refused", || {
            let obj = bed.object("misnamed")?;
            let said = ["Ready", "Synced"]
                .into_iter()
                .filter_map(|c| condition(&obj, c))
                .find(|(s, _, m)| s == "False" && m.contains("no attribute \"ident\""));
            match said {
                Some(c) => Ok(Some(c)),
                None => bail!("{}", obj["status"]),
            }
        })?;
        expect_ops(bed, &[]).context("adopting and refusing write nothing")
    })
}

#[test]
fn observe_only_reads_and_never_writes() -> anyhow::Result<()> {
    default_run("observe-only", |bed| {
        let id = "obj-0b5e0000000000aa";
        hand_made_object(bed, (id, "observed", 4), "watcher")?;
        let observe =
            json!({"managementPolicy": "ObserveOnly", "importId": id, "driftInterval": "2s"});
        // The spec says size 9; the object has 4. ObserveOnly reports, never corrects.
        bed.apply_object("watcher", spec("observed", 9, observe))?;
        let obj = bed.wait_reconciled("watcher", CONVERGE)?;
        ensure!(external_id(&obj)? == id);
        let at = &obj["status"]["atProvider"];
        ensure!(
            num(&at["size"]) == Some(4.0),
            "atProvider shows what exists: {at}"
        );
        ensure!(at["description"] == "made by hand", "{at}");
        bed.wait_event("watcher", "DriftDetected", CONVERGE)?;

        // The object changes in the cloud: observed on the next drift check.
        ledger::edit_object(bed.ledger_dir(), id, |o| o["size"] = json!(6))?;
        wait_for(
            Duration::from_secs(30),
            "atProvider.size to become 6",
            || {
                let obj = bed.object("watcher")?;
                let size = num(&obj["status"]["atProvider"]["size"]);
                if size == Some(6.0) {
                    Ok(Some(()))
                } else {
                    bail!("atProvider.size {size:?}")
                }
            },
        )?;
        ensure!(num(&ledger::object(bed.ledger_dir(), id)?.context("gone")?["size"]) == Some(6.0));

        // The object disappears: reported, never recreated.
        ledger::remove_object(bed.ledger_dir(), id)?;
        let obj = bed.wait_synced(
            "watcher",
            "False",
            "ExternalObjectMissing",
            Duration::from_secs(30),
        )?;
        eprintln!("ExternalObjectMissing: {}", describe(&obj));
        // Two more drift checks (every 2 s) find it missing and still create nothing.
        bed.wait_reconciles(2, Duration::from_secs(30))?;
        ensure!(
            ledger::objects(bed.ledger_dir())?.is_empty(),
            "ObserveOnly recreated the object"
        );
        ensure!(
            ledger::apply_calls(bed.ledger_dir())?.is_empty(),
            "ObserveOnly asked the provider to apply"
        );

        // Deleting the resource destroys nothing (there is nothing, and it would not anyway).
        delete_object(bed, "watcher")?;
        bed.wait_gone("watcher", CONVERGE)?;
        expect_ops(bed, &[]).context("ObserveOnly wrote to the ledger")?;
        Ok(())
    })
}

#[test]
fn observe_only_without_import_id_is_invalid() -> anyhow::Result<()> {
    default_run("observe-no-id", |bed| {
        let crd = bed.cp.get_json("", "crd", OBJECTS)?;
        let rules = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["x-kubernetes-validations"]
            .to_string();
        let bad = spec("observed", 1, json!({"managementPolicy": "ObserveOnly"}));
        if rules.contains("ObserveOnly") {
            // The CRD enforces it with a CEL rule: refused at admission.
            let err = bed.apply_object_refused("watcher", bad)?;
            ensure!(
                err.contains("importId"),
                "the refusal must name importId: {err}"
            );
            ensure!(bed.object_opt("watcher")?.is_none());
        } else {
            // The CRD has no rule for it: the operator must refuse it.
            eprintln!("the CRD has no ObserveOnly rule; expecting Synced=False/InvalidSpec");
            bed.apply_object("watcher", bad)?;
            let obj = bed.wait_synced("watcher", "False", "InvalidSpec", CONVERGE)?;
            let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
            ensure!(
                message.contains("importId"),
                "InvalidSpec must name importId: {message:?}"
            );
            bed.wait_event("watcher", "InvalidSpec", CONVERGE)?;
        }
        // Refused at admission there is nothing to reconcile; refused by the operator it waits
        // for a change. Either way nothing happens from here on.
        bed.expect_idle(Duration::from_secs(2), "an invalid ObserveOnly spec")?;
        expect_ops(bed, &[])?;
        ensure!(ledger::objects(bed.ledger_dir())?.is_empty());
        ensure!(ledger::apply_calls(bed.ledger_dir())?.is_empty());
        Ok(())
    })
}

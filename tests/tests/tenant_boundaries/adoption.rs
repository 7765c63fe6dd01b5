//! Adoption needs consent: the tenant names another team's object in `importId`; without the
//! owner's tag `kraken.dev/adoptable-by=<namespace>/<name>` (or the administrators' allow-list
//! on the Namespace, which the tenant cannot write) it is refused as `AdoptionRefused`, and
//! deleting the resource destroys nothing. With the owner's tag, it adopts.

use anyhow::{Context as _, ensure};
use serde_json::json;

use super::{CONVERGE, TENANT, apply_as_tenant, bind_tenant};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{OBJECTS, object_manifest, wait_condition};
use kraken_tests::operator::{FixtureBed, OperatorOptions};

const PAYROLL: &str = "obj-9a7e000000000001";

#[test]
fn another_teams_object_is_adopted_only_with_its_owners_consent() -> anyhow::Result<()> {
    let bed = FixtureBed::start("adoption", OperatorOptions::default())?;
    let result = scenario(&bed);
    bed.finish(result)
}

fn scenario(bed: &FixtureBed) -> anyhow::Result<()> {
    bind_tenant(bed)?;
    // Another team's object, in the cloud the ProviderConfig's credentials reach.
    ledger::write_object(
        bed.ledger_dir(),
        &json!({
            "id": PAYROLL, "name": "payroll", "size": 3, "tags": {"team": "payroll"},
            "labels": null, "ports": null, "settings": null, "rules": null, "password": null,
            "description": "not the tenant's", "created_at": "2024-01-01T00:00:00Z",
            "revision": 1, "secret_token": "feedface00",
        }),
    )?;
    let grab = |name: &str| {
        object_manifest(
            &bed.ns,
            name,
            json!({"importId": PAYROLL, "forProvider": {"name": "payroll", "size": 3}}),
        )
    };
    apply_as_tenant(bed, &grab("grab"))?.map_err(anyhow::Error::msg)?;
    let message = wait_condition(
        &bed.cp,
        (&bed.ns, OBJECTS, "grab"),
        ("Synced", "False", "AdoptionRefused"),
        &format!("kraken.dev/adoptable-by={}/grab", bed.ns),
        CONVERGE,
    )?;
    ensure!(message.contains("kraken.dev/adoptable-types"), "{message}");
    // Deleting it destroys nothing: nothing was taken.
    let as_tenant = format!("--as={TENANT}");
    bed.cp
        .kubectl(&[&as_tenant, "delete", OBJECTS, "grab", "-n", &bed.ns])?;
    bed.wait_gone("grab", CONVERGE)?;
    ensure!(
        ledger::event_log(bed.ledger_dir())?.is_empty(),
        "nothing was written to or destroyed in the cloud"
    );
    // The tenant cannot vouch for themselves on the Namespace.
    let annotate = bed.cp.kubectl(&[
        &as_tenant,
        "annotate",
        "namespace",
        &bed.ns,
        "kraken.dev/adoptable-types=*",
    ]);
    ensure!(annotate.is_err(), "the tenant annotated the Namespace");

    // The owner consents: the next resource of that name adopts it.
    ledger::edit_object(bed.ledger_dir(), PAYROLL, |o| {
        o["tags"]["kraken.dev/adoptable-by"] = json!(format!("{}/taken", bed.ns));
    })?;
    apply_as_tenant(bed, &grab("taken"))?.map_err(anyhow::Error::msg)?;
    let obj = bed.wait_reconciled("taken", CONVERGE)?;
    let id = obj["status"]["externalId"].as_str().context("externalId")?;
    ensure!(id == PAYROLL, "adopted the owner's object: {id}");
    Ok(())
}

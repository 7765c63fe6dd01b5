//! Only Kraken writes the hub's objects, and the hub believes only what Kraken published.

use anyhow::{Context as _, ensure};
use serde_json::{Value, json};

use super::{CONVERGE, apply_as_tenant, bind_tenant, install_chart_template, refused_to_tenant};
use kraken_tests::operator::bed::{OBJECT_API_VERSION, state_secret_name, wait_condition};
use kraken_tests::operator::{FixtureBed, OperatorOptions};

const HUB: &str = "core.kraken.dev/v1alpha1";

#[test]
fn only_kraken_writes_the_hubs_objects_and_forgeries_read_nothing() -> anyhow::Result<()> {
    let bed = FixtureBed::start("hub-writers", OperatorOptions::default())?;
    let result = scenario(&bed);
    bed.finish(result)
}

fn scenario(bed: &FixtureBed) -> anyhow::Result<()> {
    bind_tenant(bed)?;
    install_chart_template(bed, "templates/hub-writers.yaml")?;
    bed.apply_object("db", json!({"forProvider": {"name": "db", "size": 1}}))?;
    let db = bed.wait_reconciled("db", CONVERGE)?;
    let uid = db["metadata"]["uid"].as_str().context("db's uid")?;

    // The tenant's forgery: db's declaration, owned by db, naming db's state Secret.
    let forged = declaration(bed, "object-db.fixture", uid)?;
    expect_tenant_refused(bed, &forged)?;
    let request = json!({"apiVersion": HUB, "kind": "DependencyRequest",
        "metadata": {"name": "object-db.fixture", "namespace": bed.ns},
        "spec": {"consumer": {"apiVersion": OBJECT_API_VERSION, "kind": "Object", "name": "db"},
                 "references": []}});
    let refused = apply_as_tenant(bed, &request)?.err().unwrap_or_default();
    ensure!(
        refused.contains("only the Kraken operator writes dependencyrequests"),
        "the tenant wrote a DependencyRequest: {refused:?}"
    );

    // Where the policy is missing (written here as the administrator): the hub reads neither
    // forgery, whether named as db's own declaration or as any other.
    bed.apply(&forged.to_string())?;
    bed.apply(&declaration(bed, "spy", uid)?.to_string())?;
    for (export, read) in [("loot-own", "object-db.fixture"), ("loot-spy", "spy")] {
        let ce = json!({"apiVersion": HUB, "kind": "ConfigExport",
            "metadata": {"name": export, "namespace": bed.ns},
            "spec": {"target": {"kind": "Secret", "name": export},
                     "data": [{"key": "state",
                               "stateDeclaration": {"name": read, "path": "state"}}]}});
        apply_as_tenant(bed, &ce)?.map_err(anyhow::Error::msg)?;
    }
    for export in ["loot-own", "loot-spy"] {
        let message = wait_condition(
            &bed.cp,
            (&bed.ns, "configexport", export),
            ("Ready", "False", "WaitingForDependencies"),
            "not published by Kraken",
            CONVERGE,
        )?;
        ensure!(message.contains("Forbidden"), "{export}: {message}");
        ensure!(
            bed.cp.get_json_opt(&bed.ns, "secret", export)?.is_none(),
            "{export}: a Secret was written from a forged declaration"
        );
    }
    Ok(())
}

/// A StateDeclaration `name` claiming to be db's (owned by `uid`), its sensitive outputs in
/// db's state Secret.
fn declaration(bed: &FixtureBed, name: &str, uid: &str) -> anyhow::Result<Value> {
    let producer = json!({"apiVersion": OBJECT_API_VERSION, "kind": "Object", "name": "db"});
    let mut owner = producer.clone();
    owner["uid"] = json!(uid);
    owner["controller"] = json!(true);
    let mut claimed = producer;
    claimed["uid"] = json!(uid);
    Ok(json!({"apiVersion": HUB, "kind": "StateDeclaration",
        "metadata": {"name": name, "namespace": bed.ns, "ownerReferences": [owner]},
        "spec": {"producer": claimed, "outputs": {},
                 "sensitive": {"secretName": state_secret_name("Object", "db"),
                               "keys": ["state"]}}}))
}

/// The tenant's write of `forged` is refused, naming who may write.
fn expect_tenant_refused(bed: &FixtureBed, forged: &Value) -> anyhow::Result<()> {
    let message = refused_to_tenant(bed, forged, "a StateDeclaration")?;
    ensure!(
        message.contains("only the Kraken operator writes statedeclarations")
            && message.contains("mallory"),
        "the refusal must say who may write: {message}"
    );
    Ok(())
}

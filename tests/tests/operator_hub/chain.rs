//! A chain of values across providers and protocols: random_pet → fixture Object (name from a
//! template over the pet, size from a ConfigMap, password from a Secret) → fixture Object →
//! null_resource triggers, and ConfigExports to a ConfigMap and a Secret. A change upstream
//! propagates; deleting everything at once tears down in dependency order.

use anyhow::{Context as _, bail, ensure};
use kraken_tests::operator::FixtureBed;
use kraken_tests::operator::bed::{OBJECTS, describe, secret_data};
use kraken_tests::{ledger, repo_root, wait_for};
use serde_json::{Value, json};

use super::{
    CONVERGE, NULLS, PETS, apply, get, ledger_object, object, run, wait_condition, wait_reconciled,
};

const SECRET_PASSWORD: &str = "hunter2-never-in-status";

/// The ids along the chain, and obj as the cloud holds it.
struct Chain {
    pet_id: String,
    obj_id: String,
    obj2_id: String,
    in_cloud: Value,
}

/// random_pet → fixture Object (name from a template over the pet, size from a ConfigMap,
/// password from a Secret) → fixture Object → null_resource triggers, and ConfigExports to a
/// ConfigMap and a Secret. A change upstream propagates; deleting everything at once tears
/// down in dependency order.
#[test]
fn a_chain_across_providers_and_protocols_propagates_and_tears_down_in_order() -> anyhow::Result<()>
{
    run("hub-chain", |bed| {
        apply_the_chain(bed)?;
        let chain = expect_values_flow(bed)?;
        expect_exports(bed, &chain)?;
        expect_nothing_sensitive_outside(bed, &chain.in_cloud)?;
        expect_changes_propagate(bed, &chain)?;
        let (obj_id, obj2_id) = expect_a_replacement_propagates(bed, &chain)?;
        expect_teardown_in_dependency_order(bed, &obj_id, &obj2_id)
    })
}

fn apply_the_chain(bed: &FixtureBed) -> anyhow::Result<()> {
    let ns = bed.ns.clone();
    for (dir, label) in [("random", "random"), ("null", "null")] {
        bed.cp.install_crds(
            &repo_root().join("generated-crds").join(dir),
            &format!("tf.kraken.dev/provider={label}"),
        )?;
    }
    apply(
        bed,
        &[
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
               "metadata": {"name": "random", "namespace": ns}, "spec": {"source": "hashicorp/random"}}),
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
               "metadata": {"name": "null", "namespace": ns}, "spec": {"source": "hashicorp/null"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "inputs", "namespace": ns},
               "data": {"size": "3"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns},
               "stringData": {"password": SECRET_PASSWORD}}),
            json!({"apiVersion": "random.tf.kraken.dev/v1alpha1", "kind": "Pet",
               "metadata": {"name": "pet", "namespace": ns},
               "spec": {"providerConfigRef": {"name": "random"}, "forProvider": {"length": 2}}}),
            object(
                "obj",
                &ns,
                json!({}),
                json!([
                    {"path": "name", "template": "${resource:Pet/pet:id}-obj"},
                    {"path": "size", "configMapKeyRef": {"name": "inputs", "key": "size"}},
                    {"path": "password", "secretKeyRef": {"name": "creds", "key": "password"}},
                ]),
            ),
            object(
                "obj2",
                &ns,
                json!({"size": 1}),
                json!([
                    {"path": "name", "resource": {"kind": "Object", "name": "obj", "path": "id"}},
                ]),
            ),
            json!({"apiVersion": "null.tf.kraken.dev/v1alpha1", "kind": "Resource",
               "metadata": {"name": "trig", "namespace": ns},
               "spec": {"providerConfigRef": {"name": "null"}, "forProvider": {},
                        "valuesFrom": [{"path": "triggers.obj", "resource": {"kind": "Object", "name": "obj2", "path": "id"}}]}}),
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ConfigExport",
            "metadata": {"name": "out", "namespace": ns},
            "spec": {"target": {"kind": "ConfigMap", "name": "exported"}, "data": [
                {"key": "pet", "resource": {"kind": "Pet", "name": "pet", "path": "id"}},
                {"key": "obj2", "stateDeclaration": {"name": "object-obj2.fixture", "path": "id"}},
                {"key": "url", "template": "https://${resource:Object/obj:name}:${configMap:inputs:size}"},
            ]}}),
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ConfigExport",
            "metadata": {"name": "sec", "namespace": ns},
            "spec": {"target": {"kind": "Secret", "name": "exported-secret"}, "data": [
                {"key": "token", "resource": {"kind": "Object", "name": "obj", "path": "secretToken"}},
            ]}}),
        ],
    )
}

/// Every link reconciled, each value where it was sent, and the hand-overs timed.
fn expect_values_flow(bed: &FixtureBed) -> anyhow::Result<Chain> {
    let pet = wait_reconciled(bed, PETS, "pet")?;
    let pet_id = pet["status"]["atProvider"]["id"]
        .as_str()
        .context("pet id")?
        .to_owned();
    let obj = wait_reconciled(bed, OBJECTS, "obj")?;
    let obj_id = obj["status"]["externalId"]
        .as_str()
        .context("obj id")?
        .to_owned();
    let obj2 = wait_reconciled(bed, OBJECTS, "obj2")?;
    let obj2_id = obj2["status"]["externalId"]
        .as_str()
        .context("obj2 id")?
        .to_owned();
    let trig = wait_reconciled(bed, NULLS, "trig")?;
    ensure!(
        trig["status"]["atProvider"]["triggers"]["obj"] == obj2_id,
        "null_resource triggers must carry obj2's id {obj2_id}: {}",
        trig["status"]
    );
    let in_cloud = ledger_object(bed, &obj_id)?;
    ensure!(
        in_cloud["name"] == format!("{pet_id}-obj"),
        "obj's name from the template: {in_cloud}"
    );
    ensure!(
        in_cloud["size"] == 3,
        "obj's size from the ConfigMap (converted to a number): {in_cloud}"
    );
    ensure!(
        in_cloud["password"] == SECRET_PASSWORD,
        "obj's password from the Secret: {in_cloud}"
    );
    ensure!(
        ledger_object(bed, &obj2_id)?["name"] == obj_id,
        "obj2's name is obj's id"
    );
    // The hub timed each of those hand-overs (producer published → request resolved).
    let propagated = bed.op.metric("kraken_hub_propagation_seconds_count")?;
    ensure!(
        propagated >= 2.0,
        "kraken_hub_propagation_seconds observed {propagated} propagations"
    );
    Ok(Chain {
        pet_id,
        obj_id,
        obj2_id,
        in_cloud,
    })
}

/// The token in the exported Secret, as a JSON string.
fn exported_token(bed: &FixtureBed) -> anyhow::Result<Value> {
    let token = secret_data(
        &bed.cp.get_json(&bed.ns, "secret", "exported-secret")?,
        "token",
    )?
    .context("token in the exported Secret")?;
    Ok(Value::String(String::from_utf8(token)?))
}

/// Both ConfigExports wrote what they say.
fn expect_exports(bed: &FixtureBed, chain: &Chain) -> anyhow::Result<()> {
    let Chain {
        pet_id, obj2_id, ..
    } = chain;
    wait_condition(bed, "configexport", "out", "Ready", "True", "Exported")?;
    let cm = bed.cp.get_json(&bed.ns, "configmap", "exported")?;
    ensure!(
        cm["data"]["pet"] == *pet_id && cm["data"]["obj2"] == *obj2_id,
        "exported: {}",
        cm["data"]
    );
    ensure!(
        cm["data"]["url"] == format!("https://{pet_id}-obj:3"),
        "exported url: {}",
        cm["data"]
    );
    wait_condition(bed, "configexport", "sec", "Ready", "True", "Exported")?;
    ensure!(
        exported_token(bed)? == chain.in_cloud["secret_token"],
        "the exported token is the object's secret_token"
    );
    Ok(())
}

/// Sensitive values stay out of status, StateDeclarations and Events.
fn expect_nothing_sensitive_outside(bed: &FixtureBed, in_cloud: &Value) -> anyhow::Result<()> {
    let token = in_cloud["secret_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .with_context(|| format!("the ledger object has no secret_token: {in_cloud}"))?;
    for what in ["dependencyrequests", "statedeclarations", "events", OBJECTS] {
        let text = bed
            .cp
            .kubectl(&["get", what, "-n", &bed.ns, "-o", "json"])?;
        ensure!(
            !text.contains(SECRET_PASSWORD),
            "the Secret's password leaked into {what}"
        );
        ensure!(
            !text.contains(token),
            "the sensitive secret_token leaked into {what}"
        );
    }
    Ok(())
}

/// An upstream change propagates by watch: ConfigMap → obj (update) → export. So does a
/// changed Secret, though the request's status (which holds no sensitive value) stays as it
/// was.
fn expect_changes_propagate(bed: &FixtureBed, chain: &Chain) -> anyhow::Result<()> {
    let (ns, pet_id, obj_id) = (&bed.ns, &chain.pet_id, &chain.obj_id);
    bed.cp.kubectl(&[
        "patch",
        "configmap",
        "inputs",
        "-n",
        ns,
        "--type=merge",
        "-p",
        r#"{"data":{"size":"5"}}"#,
    ])?;
    wait_for(CONVERGE, "obj's size 5 in the ledger", || {
        let o = ledger_object(bed, obj_id)?;
        if o["size"] == 5 {
            Ok(Some(()))
        } else {
            bail!("size {}", o["size"])
        }
    })?;
    wait_for(CONVERGE, "the export's url to end in :5", || {
        let cm = bed.cp.get_json(ns, "configmap", "exported")?;
        if cm["data"]["url"] == format!("https://{pet_id}-obj:5") {
            Ok(Some(()))
        } else {
            bail!("{}", cm["data"])
        }
    })?;
    bed.cp.kubectl(&[
        "patch",
        "secret",
        "creds",
        "-n",
        ns,
        "--type=merge",
        "-p",
        r#"{"stringData":{"password":"rotated-never-in-status"}}"#,
    ])?;
    wait_for(CONVERGE, "obj's password rotated in the ledger", || {
        let o = ledger_object(bed, obj_id)?;
        if o["password"] == "rotated-never-in-status" {
            Ok(Some(()))
        } else {
            bail!("not yet")
        }
    })?;
    Ok(())
}

/// A sensitive output that changes reaches its readers too: a longer pet name replaces the
/// Pet, so obj (named after it) is replaced, with a new secret_token that the exported Secret
/// must then hold; and obj2 (named after obj's id) follows. Returns the new ids of obj and
/// obj2.
fn expect_a_replacement_propagates(
    bed: &FixtureBed,
    chain: &Chain,
) -> anyhow::Result<(String, String)> {
    let old_token = chain.in_cloud["secret_token"].clone();
    bed.cp.kubectl(&[
        "patch",
        PETS,
        "pet",
        "-n",
        &bed.ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"forProvider":{"length":3}}}"#,
    ])?;
    let obj_id = wait_for(CONVERGE, "obj replaced under the new pet name", || {
        let o = get(bed, OBJECTS, "obj")?.context("obj")?;
        let id = o["status"]["externalId"].as_str().unwrap_or_default();
        if id.is_empty() || id == chain.obj_id {
            bail!("still {id:?}");
        }
        Ok(Some(id.to_owned()))
    })?;
    let in_cloud = ledger_object(bed, &obj_id)?;
    ensure!(
        in_cloud["secret_token"] != old_token,
        "a replaced object has a new token"
    );
    wait_for(
        CONVERGE,
        "the exported Secret to hold the new token",
        || {
            if exported_token(bed)? == in_cloud["secret_token"] {
                Ok(Some(()))
            } else {
                bail!("the old token")
            }
        },
    )?;
    let obj2_id = wait_for(CONVERGE, "obj2 renamed after the new obj", || {
        let o = get(bed, OBJECTS, "obj2")?.context("obj2")?;
        let id = o["status"]["externalId"].as_str().unwrap_or_default();
        if ledger_object(bed, id).is_ok_and(|l| l["name"] == obj_id) {
            Ok(Some(id.to_owned()))
        } else {
            bail!("obj2 {id:?} not yet named {obj_id}")
        }
    })?;
    Ok((obj_id, obj2_id))
}

/// Deleting everything at once tears down in reverse dependency order, and what the exports
/// and the hub made goes with its owner.
fn expect_teardown_in_dependency_order(
    bed: &FixtureBed,
    obj_id: &str,
    obj2_id: &str,
) -> anyhow::Result<()> {
    let ns = &bed.ns;
    let before_teardown = ledger::event_log(bed.ledger_dir())?.len();
    bed.cp.kubectl(&["delete", "-n", ns, "--wait=false", "configexports.core.kraken.dev,resources.null.tf.kraken.dev,objects.fixture.tf.kraken.dev,pets.random.tf.kraken.dev", "--all"])?;
    for (res, name) in [
        (NULLS, "trig"),
        (OBJECTS, "obj2"),
        (OBJECTS, "obj"),
        (PETS, "pet"),
    ] {
        wait_for(CONVERGE, &format!("{res} {name} gone"), || {
            match get(bed, res, name)? {
                None => Ok(Some(())),
                Some(o) => bail!("{}", describe(&o)),
            }
        })?;
    }
    let deletes: Vec<String> = ledger::event_log(bed.ledger_dir())?
        .into_iter()
        .skip(before_teardown)
        .filter(|e| e.op == "delete")
        .map(|e| e.id)
        .collect();
    ensure!(
        deletes == vec![obj2_id.to_owned(), obj_id.to_owned()],
        "obj2 (the consumer) is destroyed before obj: {deletes:?}"
    );
    for (what, name) in [
        ("configmap", "exported"),
        ("secret", "exported-secret"),
        ("statedeclaration", "object-obj.fixture"),
        ("dependencyrequest", "object-obj2.fixture"),
    ] {
        ensure!(
            bed.cp.get_json_opt(ns, what, name)?.is_none(),
            "{what} {name} must be gone with its owner"
        );
    }
    Ok(())
}

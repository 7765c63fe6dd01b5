//! State is Kraken's, not the tenant's: a state Secret edited by the tenant is refused as
//! `StateTampered` and nothing is destroyed on its word; seeding a state takes a right of its
//! own; states written before sealing are sealed on the first start.

use anyhow::{Context as _, ensure};
use serde_json::{Value, json};

use super::{CONVERGE, TENANT, bind_tenant, install_chart_template, refused_to_tenant};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{OBJECTS, secret_data, state_secret_name, wait_condition};
use kraken_tests::operator::{FixtureBed, OperatorOptions};

fn ops(bed: &FixtureBed) -> anyhow::Result<Vec<String>> {
    Ok(ledger::event_log(bed.ledger_dir())?
        .into_iter()
        .map(|e| format!("{} {}", e.op, e.name))
        .collect())
}

/// `kubectl --as=TENANT patch` of a Secret's data (base64 values); the refusal if any.
fn patch_secret_as_tenant(bed: &FixtureBed, name: &str, data: &Value) -> anyhow::Result<()> {
    let as_tenant = format!("--as={TENANT}");
    let patch = json!({"data": data}).to_string();
    bed.cp.kubectl(&[
        &as_tenant,
        "patch",
        "secret",
        name,
        "-n",
        &bed.ns,
        "--type=merge",
        "-p",
        &patch,
    ])?;
    Ok(())
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn a_tenants_edit_of_the_state_is_refused_and_destroys_nothing() -> anyhow::Result<()> {
    let bed = FixtureBed::start("sealed-state", OperatorOptions::default())?;
    let result = tampering(&bed);
    bed.finish(result)
}

fn tampering(bed: &FixtureBed) -> anyhow::Result<()> {
    bind_tenant(bed)?;
    install_chart_template(bed, "templates/state-seeding.yaml")?;
    for name in ["web", "victim"] {
        bed.apply_object(
            name,
            json!({"driftInterval": "2s", "forProvider": {"name": name, "size": 1}}),
        )?;
    }
    for name in ["web", "victim"] {
        bed.wait_reconciled(name, CONVERGE)?;
    }
    let victim_secret = bed
        .state_secret("victim")?
        .context("victim's state Secret")?;
    let victim_state = secret_data(&victim_secret, "state")?.context("victim's state")?;

    // The tenant plants victim as web's deposed object: the next pass would destroy it.
    let web_state = state_secret_name("Object", "web");
    patch_secret_as_tenant(
        bed,
        &web_state,
        &json!({"deposedState": b64(&victim_state), "deposedSchemaVersion": b64(b"0")}),
    )?;
    let message = wait_condition(
        &bed.cp,
        (&bed.ns, OBJECTS, "web"),
        ("Synced", "False", "StateTampered"),
        "changed by someone other than Kraken",
        CONVERGE,
    )?;
    ensure!(message.contains(&web_state), "names the Secret: {message}");
    // And deleting web destroys nothing either: not victim, not web.
    bed.cp
        .kubectl(&["delete", OBJECTS, "web", "-n", &bed.ns, "--wait=false"])?;
    bed.wait_reconciles(3, CONVERGE)?;
    let done = ops(bed)?;
    ensure!(
        done == ["create web", "create victim"] || done == ["create victim", "create web"],
        "only the two creates: {done:?}"
    );
    ensure!(
        bed.object_opt("web")?.is_some(),
        "web waits, finalizer kept"
    );

    // Seeding a state is a right of its own: the tenant's seeded Secret is refused.
    let seeded = json!({"apiVersion": "v1", "kind": "Secret", "type": "kraken.dev/tfstate",
        "metadata": {"name": state_secret_name("Object", "adopted"), "namespace": bed.ns,
                     "labels": {"kraken.dev/seeded-from": "terraform"}},
        "data": {"state": b64(&victim_state), "schemaVersion": b64(b"0")}});
    let refused = refused_to_tenant(bed, &seeded, "a seeded state Secret")?;
    ensure!(
        refused.contains("may not seed state in namespace")
            && refused.contains("kraken-state-seeder"),
        "the tenant seeded a state: {refused:?}"
    );
    Ok(())
}

#[test]
fn states_written_before_sealing_are_sealed_on_the_first_start() -> anyhow::Result<()> {
    let mut bed = FixtureBed::start("seal-migration", OperatorOptions::default())?;
    let result = migration(&mut bed);
    bed.finish(result)
}

/// States as a version before sealing left them (no seal, no mark on the key Secret): the
/// next start seals them, and the objects carry on without a create or an update.
fn migration(bed: &mut FixtureBed) -> anyhow::Result<()> {
    let names: Vec<String> = (0..3).map(|i| format!("old-{i}")).collect();
    for name in &names {
        bed.apply_object(name, json!({"forProvider": {"name": name, "size": 1}}))?;
    }
    for name in &names {
        bed.wait_reconciled(name, CONVERGE)?;
    }
    bed.op.kill()?;
    for name in &names {
        let secret = state_secret_name("Object", name);
        bed.cp.kubectl(&[
            "patch",
            "secret",
            &secret,
            "-n",
            &bed.ns,
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/data/seal"}]"#,
        ])?;
    }
    bed.unmark_states_sealed()?;
    bed.op.restart()?;
    bed.op.wait_ready(CONVERGE)?;
    // A change on each: applied, so each state was read as Kraken's.
    bed.patch_objects(&names, &json!({"spec": {"forProvider": {"size": 2}}}))?;
    bed.wait_all_at_size(names.len(), 2, CONVERGE)?;
    for name in &names {
        let secret = bed.state_secret(name)?.context("state Secret")?;
        ensure!(
            secret_data(&secret, "seal")?.is_some(),
            "{name}: sealed by the migration"
        );
    }
    let key = bed.cp.get_json("default", "secret", "kraken-plan-key")?;
    let mark = key["metadata"]["annotations"]["kraken.dev/states-sealed"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        mark.contains("(3 sealed)"),
        "the key Secret records it: {mark:?}"
    );
    let creates = ops(bed)?.iter().filter(|o| o.starts_with("create")).count();
    ensure!(creates == 3, "no object created again: {:?}", ops(bed)?);
    Ok(())
}

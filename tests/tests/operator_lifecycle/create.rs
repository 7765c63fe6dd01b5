//! A create end to end: the conditions, `status.atProvider`, the state Secret and its create
//! fence, the printer columns, and exactly one object in the ledger.

use anyhow::{Context as _, ensure};
use kraken_tests::operator::bed::{OBJECTS, secret_data};
use kraken_tests::operator::{FixtureBed, condition};
use kraken_tests::wait_for;
use serde_json::{Value, json};

use super::{
    CONVERGE, all_keys, default_run, expect_ops, external_id, has_finalizer, num, sole_object,
};

#[test]
fn create_reports_status_and_creates_exactly_one_object() -> anyhow::Result<()> {
    default_run("create", |bed| {
        let full = json!({"forProvider": {
            "name": "web", "size": 3, "tags": {"env": "test"}, "labels": ["a", "b"],
            "ports": [443, 80], "settings": {"mode": "fast", "retries": 2},
            "rules": [{"port": 80, "protocol": "tcp"}, {"port": 443}],
        }});
        bed.apply_object("web", full)?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        expect_provider_config_reports(bed)?;

        // Conditions and generation.
        let (_, _, ready_msg) = condition(&obj, "Ready").context("no Ready")?;
        eprintln!("Ready message: {ready_msg:?}");
        ensure!(obj["status"]["observedGeneration"] == obj["metadata"]["generation"]);
        ensure!(
            has_finalizer(&obj),
            "finalizer kraken.dev/finalizer missing: {}",
            obj["metadata"]
        );

        // The ledger: exactly one object, created once, and it is the one status names.
        let live = sole_object(bed)?;
        let id = external_id(&obj)?;
        ensure!(
            live["id"] == id.as_str(),
            "status.externalId {id} != ledger {live}"
        );
        expect_ops(bed, &[format!("create {id} web")])?;
        ensure!(live["name"] == "web" && num(&live["size"]) == Some(3.0));

        expect_at_provider(&obj, &live, &id)?;
        expect_nothing_sensitive_in_status(&obj, &live)?;
        expect_state_secret(bed, &obj, &id)?;
        bed.wait_event("web", "Created", CONVERGE)?;
        expect_printer_columns(bed, &id)
    })
}

/// The ProviderConfig reports the provider it brought up.
fn expect_provider_config_reports(bed: &FixtureBed) -> anyhow::Result<()> {
    let pc = wait_for(CONVERGE, "ProviderConfig Ready=True", || {
        let pc = bed
            .cp
            .get_json(&bed.ns, "providerconfigs.core.kraken.dev", "default")?;
        Ok(condition(&pc, "Ready")
            .filter(|(s, _, _)| s == "True")
            .map(|_| pc))
    })?;
    ensure!(
        pc["status"]["version"] == "1.0.0",
        "status.version: {}",
        pc["status"]
    );
    ensure!(
        pc["status"]["protocol"] == 6,
        "status.protocol: {}",
        pc["status"]
    );
    Ok(())
}

/// `status.atProvider`: non-sensitive state in Kubernetes field names, as the ledger's object
/// `live` (whose id is `id`) has it.
fn expect_at_provider(obj: &Value, live: &Value, id: &str) -> anyhow::Result<()> {
    let at = &obj["status"]["atProvider"];
    ensure!(at["id"] == id, "atProvider.id: {at}");
    ensure!(at["name"] == "web" && num(&at["size"]) == Some(3.0), "{at}");
    ensure!(
        at["createdAt"] == live["created_at"] && at["createdAt"].is_string(),
        "atProvider.createdAt {} != ledger created_at {}",
        at["createdAt"],
        live["created_at"]
    );
    ensure!(at["description"] == "managed by kraken", "{at}");
    ensure!(num(&at["revision"]) == Some(1.0), "{at}");
    ensure!(at["tags"] == json!({"env": "test"}) && at["labels"] == json!(["a", "b"]));
    let mut ports: Vec<f64> = at["ports"]
        .as_array()
        .context("atProvider.ports")?
        .iter()
        .filter_map(num)
        .collect();
    ports.sort_by(f64::total_cmp);
    ensure!(ports == vec![80.0, 443.0], "ports {}", at["ports"]);
    ensure!(
        at["settings"]["mode"] == "fast"
            && num(&at["settings"]["retries"]) == Some(2.0)
            && at["settings"]["enabled"] == false,
        "settings {}",
        at["settings"]
    );
    ensure!(
        num(&at["rules"][0]["port"]) == Some(80.0)
            && at["rules"][0]["protocol"] == "tcp"
            && num(&at["rules"][1]["port"]) == Some(443.0)
            && at["rules"][1]["protocol"].is_null(),
        "rules {}",
        at["rules"]
    );
    Ok(())
}

/// No sensitive attribute in the status, and the ledger object's secret token nowhere in the
/// object.
fn expect_nothing_sensitive_in_status(obj: &Value, live: &Value) -> anyhow::Result<()> {
    let mut keys = Vec::new();
    all_keys(&obj["status"], &mut keys);
    for banned in ["password", "secretToken", "secret_token", "created_at"] {
        ensure!(
            !keys.iter().any(|k| k == banned),
            "status must not have a {banned} field: {}",
            obj["status"]
        );
    }
    let token = live["secret_token"]
        .as_str()
        .context("ledger secret_token")?;
    ensure!(
        !obj.to_string().contains(token),
        "secret_token leaked into the object"
    );
    Ok(())
}

/// The state Secret: owned by the Object, typed, the documented keys, the state holding `id`,
/// and the create fence completed.
fn expect_state_secret(bed: &FixtureBed, obj: &Value, id: &str) -> anyhow::Result<()> {
    let secret = bed
        .state_secret("web")?
        .context("no state Secret object-web.fixture-tfstate")?;
    ensure!(
        secret["type"] == "kraken.dev/tfstate",
        "type {}",
        secret["type"]
    );
    let owners = secret["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(
        owners
            .iter()
            .any(|o| o["uid"] == obj["metadata"]["uid"] && o["kind"] == "Object"),
        "the state Secret must be owned by the Object: {owners:?}"
    );
    let data_keys: Vec<&String> = secret["data"]
        .as_object()
        .context("Secret data")?
        .keys()
        .collect();
    for k in &data_keys {
        ensure!(
            [
                "state",
                "private",
                "schemaVersion",
                "createAttempt",
                "deposedState",
                "deposedPrivate",
                "deposedSchemaVersion",
                "policies",
                "seal",
            ]
            .contains(&k.as_str()),
            "undocumented key {k} in the state Secret"
        );
    }
    let state: Value =
        serde_json::from_slice(&secret_data(&secret, "state")?.context("no state key")?)?;
    ensure!(
        state.to_string().contains(id),
        "the stored state does not hold the id {id}: {state}"
    );
    let schema_version = secret_data(&secret, "schemaVersion")?.context("no schemaVersion key")?;
    ensure!(
        schema_version == b"1",
        "schemaVersion {:?}",
        String::from_utf8_lossy(&schema_version)
    );
    expect_fence_completed(obj, &secret)
}

/// The create fence: the attempt announced on the object before the create is the one the
/// Secret records as completed.
fn expect_fence_completed(obj: &Value, secret: &Value) -> anyhow::Result<()> {
    let attempt = obj["metadata"]["annotations"]["kraken.dev/create-attempt"]
        .as_str()
        .with_context(|| {
            format!(
                "no kraken.dev/create-attempt annotation: {}",
                obj["metadata"]["annotations"]
            )
        })?;
    let recorded = secret_data(secret, "createAttempt")?.context("no createAttempt key")?;
    ensure!(
        recorded == attempt.as_bytes(),
        "the Secret records create attempt {:?}, the annotation says {attempt}",
        String::from_utf8_lossy(&recorded)
    );
    Ok(())
}

/// The printer columns of `kubectl get`.
fn expect_printer_columns(bed: &FixtureBed, id: &str) -> anyhow::Result<()> {
    let table = bed.cp.kubectl(&["get", OBJECTS, "-n", &bed.ns])?;
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        header == ["NAME", "READY", "SYNCED", "EXTERNAL-ID", "PLAN", "AGE"],
        "kubectl get columns: {table}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        // PLAN is blank: no plan waits.
        row.len() == 5 && row[..4] == ["web", "True", "True", id],
        "kubectl get row: {table}"
    );
    Ok(())
}

//! The readers the operator tests assert with, checked against a real API server with the
//! operator's writes played by hand: status through the status subresource, Events through
//! both Event APIs (kube-rs's recorder writes events.k8s.io/v1), the printer columns, and
//! multi-document applies. If these readers were wrong, the operator tests would fail (or
//! pass) for the wrong reason.

use anyhow::{Context as _, ensure};
use kraken_tests::ControlPlane;
use kraken_tests::operator::bed::{OBJECTS, describe, is_reconciled};
use kraken_tests::operator::{
    condition, events_for, object_manifest, provider_config_manifest, state_secret_name,
    yaml_documents,
};
use serde_json::json;

const NS: &str = "harness";

#[test]
fn readers_see_what_an_operator_writes() -> anyhow::Result<()> {
    let cp = ControlPlane::with_fixture_kinds("operator-harness", NS)?;

    // Several documents in one apply, a ProviderConfig among them.
    let docs = [
        provider_config_manifest(NS, "default", json!({"ledgerDir": "/nonexistent"})),
        object_manifest(
            NS,
            "web",
            json!({"forProvider": {"name": "web", "size": 3}}),
        ),
        object_manifest(NS, "db", json!({"forProvider": {"name": "db"}})),
    ];
    cp.apply_yaml(NS, &yaml_documents(&docs))?;
    ensure!(cp.list_json(NS, OBJECTS)?.len() == 2);
    let pc = cp.get_json(NS, "providerconfigs.core.kraken.dev", "default")?;
    ensure!(pc["spec"]["config"]["ledgerDir"] == "/nonexistent", "{pc}");

    let obj = cp.get_json(NS, OBJECTS, "web")?;
    ensure!(!is_reconciled(&obj), "no status yet: {}", describe(&obj));
    ensure!(condition(&obj, "Ready").is_none());
    status_and_printer_columns(&cp)?;

    // A spec change makes the status stale until observedGeneration catches up.
    cp.apply_yaml(
        NS,
        &object_manifest(
            NS,
            "web",
            json!({"forProvider": {"name": "web", "size": 4}}),
        )
        .to_string(),
    )?;
    ensure!(!is_reconciled(&cp.get_json(NS, OBJECTS, "web")?));
    events_through_both_apis(&cp, &obj)?;
    ensure!(state_secret_name("Object", "Web") == "object-web.fixture-tfstate");
    Ok(())
}

/// The status an operator would write after a create, read back as reconciled and in the
/// printer columns.
fn status_and_printer_columns(cp: &ControlPlane) -> anyhow::Result<()> {
    let status = json!({"status": {
        "observedGeneration": 1,
        "externalId": "obj-0123456789abcdef",
        "atProvider": {"id": "obj-0123456789abcdef", "createdAt": "2024-01-01T00:00:00Z"},
        "lastPlan": {"action": "Create", "paths": ["spec.forProvider.name"]},
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Available", "message": "",
             "lastTransitionTime": "2024-01-01T00:00:00Z"},
            {"type": "Synced", "status": "True", "reason": "ReconcileSuccess", "message": "ok",
             "lastTransitionTime": "2024-01-01T00:00:00Z"},
        ],
    }});
    cp.kubectl(&[
        "patch",
        OBJECTS,
        "web",
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ])?;
    let obj = cp.get_json(NS, OBJECTS, "web")?;
    ensure!(is_reconciled(&obj), "{}", describe(&obj));
    ensure!(
        condition(&obj, "Synced") == Some(("True".into(), "ReconcileSuccess".into(), "ok".into()))
    );
    let table = cp.kubectl(&["get", OBJECTS, "web", "-n", NS])?;
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        header == ["NAME", "READY", "SYNCED", "EXTERNAL-ID", "PLAN", "AGE"],
        "{table}"
    );
    ensure!(
        row[..4] == ["web", "True", "True", "obj-0123456789abcdef"],
        "{table}"
    );
    Ok(())
}

/// Events: one through events.k8s.io/v1 (as kube-rs's Recorder writes them), one through
/// core/v1, one about another object; the reader sees the two about `obj`, oldest first.
fn events_through_both_apis(cp: &ControlPlane, obj: &serde_json::Value) -> anyhow::Result<()> {
    let uid = obj["metadata"]["uid"].as_str().context("uid")?;
    let new_api = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "web.created", "namespace": NS},
        "eventTime": "2024-01-01T00:00:01.000000Z",
        "reportingController": "kraken.dev/operator", "reportingInstance": "test",
        "action": "Reconcile", "reason": "Created", "note": "created obj-0123456789abcdef",
        "type": "Normal",
        "regarding": {"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
                      "name": "web", "namespace": NS, "uid": uid},
    });
    let core = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "web.updated", "namespace": NS},
        "firstTimestamp": "2024-01-01T00:00:02Z", "lastTimestamp": "2024-01-01T00:00:02Z",
        "reason": "Updated", "message": "size 3 -> 4", "type": "Normal", "count": 1,
        "source": {"component": "kraken"},
        "involvedObject": {"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
                           "name": "web", "namespace": NS, "uid": uid},
    });
    let other = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "db.failed", "namespace": NS},
        "firstTimestamp": "2024-01-01T00:00:03Z", "lastTimestamp": "2024-01-01T00:00:03Z",
        "reason": "ApplyFailed", "message": "no", "type": "Warning", "count": 1,
        "involvedObject": {"kind": "Object", "name": "db", "namespace": NS},
    });
    cp.apply_yaml(NS, &yaml_documents(&[new_api, core, other]))?;
    let events = events_for(cp, NS, "web")?;
    ensure!(
        events
            == vec![
                (
                    "Created".to_string(),
                    "created obj-0123456789abcdef".to_string()
                ),
                ("Updated".to_string(), "size 3 -> 4".to_string()),
            ],
        "{events:?}"
    );
    ensure!(events_for(cp, NS, "nobody")?.is_empty());
    Ok(())
}

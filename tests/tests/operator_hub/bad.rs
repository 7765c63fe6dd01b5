//! What goes wrong between producers and consumers: every bad reference gives its condition
//! on the DependencyRequest and a waiting consumer; a cycle is named; a cross-namespace
//! reference is refused; a ConfigExport neither overwrites what it did not make nor leaks a
//! Secret's value; a fix is picked up by watch; a producer in use waits in deletion unless
//! forced.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::bed::OBJECTS;
use kraken_tests::operator::{FixtureBed, condition};
use serde_json::{Value, json};

use super::{CONVERGE, apply, get, object, run, wait_condition, wait_reconciled};

fn from(kind: &str, name: &str, path: &str) -> Value {
    json!({"kind": kind, "name": name, "path": path})
}

/// Every bad reference gives its condition on the DependencyRequest and a waiting consumer;
/// a cycle is named; a cross-namespace reference is refused; a fix is picked up by watch; a
/// producer in use waits in deletion unless forced.
#[test]
fn bad_references_cycles_and_deletion_in_use() -> anyhow::Result<()> {
    run("hub-bad", |bed| {
        apply_bad_references(bed)?;
        expect_refused("nf", "NotFound", "object-missing", bed)?;
        expect_refused("pnf", "PathNotFound", "nosuch", bed)?;
        expect_refused("tm", "TypeMismatch", "expected number", bed)?;
        expect_refused("cx", "CrossNamespace", "default", bed)?;
        let (cycle, _) = wait_condition(
            bed,
            "dependencyrequest",
            "object-ca.fixture",
            "Ready",
            "False",
            "Cycle",
        )?;
        ensure!(
            cycle.contains("object-ca") && cycle.contains("object-cb"),
            "the cycle is named: {cycle}"
        );
        expect_only_the_good_in_the_cloud(bed)?;
        expect_exports_refused(bed)?;

        // Waiting consumers (and the refused exports) do not poll: they wait for a watch
        // event, so once settled the operator makes no reconcile and no write at all. Then
        // fixing the ConfigMap is picked up by watch.
        bed.expect_idle(
            Duration::from_secs(5),
            "consumers waiting for their dependencies",
        )?;
        bed.cp.kubectl(&[
            "patch",
            "configmap",
            "sizes",
            "-n",
            &bed.ns,
            "--type=merge",
            "-p",
            r#"{"data":{"bad":"7"}}"#,
        ])?;
        wait_reconciled(bed, OBJECTS, "tm")?;
        expect_a_producer_in_use_waits(bed)?;
        expect_a_forced_delete_goes(bed)
    })
}

fn apply_bad_references(bed: &FixtureBed) -> anyhow::Result<()> {
    let ns = bed.ns.clone();
    apply(
        bed,
        &[
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sizes", "namespace": ns},
               "data": {"bad": "abc"}}),
            object("p1", &ns, json!({"name": "p1", "size": 1}), json!([])),
            object(
                "nf",
                &ns,
                json!({"size": 1}),
                json!([{"path": "name", "resource": from("Object", "missing", "id")}]),
            ),
            object(
                "pnf",
                &ns,
                json!({"size": 1}),
                json!([{"path": "name", "resource": from("Object", "p1", "nosuch")}]),
            ),
            object(
                "tm",
                &ns,
                json!({"name": "tm"}),
                json!([{"path": "size", "configMapKeyRef": {"name": "sizes", "key": "bad"}}]),
            ),
            object(
                "cx",
                &ns,
                json!({"size": 1}),
                json!([{"path": "name", "resource": {"kind": "Object", "name": "p1", "path": "id", "namespace": "default"}}]),
            ),
            object(
                "ca",
                &ns,
                json!({"size": 1}),
                json!([{"path": "name", "resource": from("Object", "cb", "id")}]),
            ),
            object(
                "cb",
                &ns,
                json!({"size": 1}),
                json!([{"path": "name", "resource": from("Object", "ca", "id")}]),
            ),
            object(
                "user",
                &ns,
                json!({"size": 1}),
                json!([{"path": "name", "resource": from("Object", "p1", "id")}]),
            ),
        ],
    )
}

/// The DependencyRequest of `name` is Ready=False/`reason` saying `needle`, and the consumer
/// waits for its dependencies, saying why.
fn expect_refused(name: &str, reason: &str, needle: &str, bed: &FixtureBed) -> anyhow::Result<()> {
    let (message, _) = wait_condition(
        bed,
        "dependencyrequest",
        &format!("object-{name}.fixture"),
        "Ready",
        "False",
        reason,
    )?;
    ensure!(
        message.contains(needle),
        "{name}: {reason} message {message:?} must mention {needle:?}"
    );
    let (_, obj) = wait_condition(
        bed,
        OBJECTS,
        name,
        "Ready",
        "False",
        "WaitingForDependencies",
    )?;
    let synced = condition(&obj, "Synced").map(|c| c.2).unwrap_or_default();
    ensure!(
        synced.contains(reason),
        "{name}: the consumer's Synced message says {reason}: {synced:?}"
    );
    Ok(())
}

/// Once the two that can be created are, they are all the cloud holds.
fn expect_only_the_good_in_the_cloud(bed: &FixtureBed) -> anyhow::Result<()> {
    let p1 = wait_reconciled(bed, OBJECTS, "p1")?;
    let p1_id = p1["status"]["externalId"].as_str().context("p1 id")?;
    wait_reconciled(bed, OBJECTS, "user")?;
    let mut names: Vec<String> = ledger::objects(bed.ledger_dir())?
        .iter()
        .map(|o| o["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    let mut want = vec!["p1".to_owned(), p1_id.to_owned()];
    want.sort();
    ensure!(
        names == want,
        "only p1 and user (named after p1's id) exist in the cloud: {names:?}"
    );
    Ok(())
}

/// A ConfigExport never overwrites what it did not make, and never puts a Secret's value into
/// a ConfigMap.
fn expect_exports_refused(bed: &FixtureBed) -> anyhow::Result<()> {
    let ns = bed.ns.clone();
    apply(
        bed,
        &[
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns},
                   "stringData": {"token": "s3cr3t-token"}}),
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ConfigExport",
                   "metadata": {"name": "clash", "namespace": ns},
                   "spec": {"target": {"kind": "ConfigMap", "name": "sizes"},
                            "data": [{"key": "x", "template": "literal"}]}}),
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ConfigExport",
                   "metadata": {"name": "leak", "namespace": ns},
                   "spec": {"target": {"kind": "ConfigMap", "name": "leak"},
                            "data": [{"key": "t", "secretKeyRef": {"name": "creds", "key": "token"}}]}}),
        ],
    )?;
    let (m, _) = wait_condition(
        bed,
        "configexport",
        "clash",
        "Ready",
        "False",
        "TargetNotOwned",
    )?;
    ensure!(m.contains("sizes"), "TargetNotOwned names the target: {m}");
    ensure!(
        bed.cp.get_json(&ns, "configmap", "sizes")?["data"]["x"].is_null(),
        "the unowned ConfigMap is untouched"
    );
    wait_condition(
        bed,
        "configexport",
        "leak",
        "Ready",
        "False",
        "SensitiveValue",
    )?;
    ensure!(
        bed.cp.get_json_opt(&ns, "configmap", "leak")?.is_none(),
        "no ConfigMap with a Secret's value"
    );
    Ok(())
}

/// A producer waits in deletion while a consumer reads it, and goes once its readers do.
fn expect_a_producer_in_use_waits(bed: &FixtureBed) -> anyhow::Result<()> {
    let ns = &bed.ns;
    wait_reconciled(bed, OBJECTS, "user")?;
    bed.cp
        .kubectl(&["delete", OBJECTS, "p1", "-n", ns, "--wait=false"])?;
    let (message, _) = wait_condition(bed, OBJECTS, "p1", "Ready", "False", "InUse")?;
    ensure!(
        message.contains("object-user"),
        "InUse names the consumer: {message}"
    );
    // Waiting in deletion re-checks the readers every 2 s: after two re-checks (the InUse
    // report's writes are long done by then), two more find user still reading and write
    // nothing, call the provider for nothing, destroy nothing.
    bed.wait_reconciles(2, CONVERGE)?;
    let before = bed.activity()?;
    bed.wait_reconciles(2, CONVERGE)?;
    let after = bed.activity()?;
    ensure!(
        after.writes == before.writes
            && after.apply_calls == before.apply_calls
            && after.ledger_events == before.ledger_events,
        "p1's re-checks while in use must change nothing:\n  before {before:?}\n  after  \
         {after:?}"
    );
    ensure!(
        get(bed, OBJECTS, "p1")?.is_some(),
        "p1 must wait while user reads it"
    );
    ensure!(
        ledger::objects_named(bed.ledger_dir(), "p1")?.len() == 1,
        "p1 must not be destroyed while user reads it"
    );
    // pnf reads p1 too (a path p1 does not have): it counts as a reader.
    ensure!(
        message.contains("object-pnf"),
        "InUse names every reader: {message}"
    );
    bed.cp
        .kubectl(&["delete", OBJECTS, "user", "pnf", "-n", ns, "--wait=false"])?;
    bed.wait_gone("user", CONVERGE)?;
    bed.wait_gone("p1", CONVERGE)?;
    Ok(())
}

/// ... unless forced: the producer goes, the consumer stays.
fn expect_a_forced_delete_goes(bed: &FixtureBed) -> anyhow::Result<()> {
    let ns = bed.ns.clone();
    apply(
        bed,
        &[
            object("p2", &ns, json!({"name": "p2", "size": 1}), json!([])),
            object(
                "u2",
                &ns,
                json!({"size": 1}),
                json!([{"path": "name", "resource": from("Object", "p2", "id")}]),
            ),
        ],
    )?;
    wait_reconciled(bed, OBJECTS, "u2")?;
    bed.cp.kubectl(&[
        "annotate",
        OBJECTS,
        "p2",
        "-n",
        &ns,
        "kraken.dev/force-delete=true",
    ])?;
    bed.cp
        .kubectl(&["delete", OBJECTS, "p2", "-n", &ns, "--wait=false"])?;
    bed.wait_gone("p2", CONVERGE)?;
    ensure!(get(bed, OBJECTS, "u2")?.is_some(), "the consumer stays");
    Ok(())
}

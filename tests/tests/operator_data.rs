//! Data source kinds end to end (docs/operator.md, "Data sources"): a real kube-apiserver +
//! etcd, `kraken operator` as a process, the fixture provider (protocol 6: `fixture_lookup`
//! reads its ledger) and HashiCorp's null provider (protocol 5: `null_data_source`). A data
//! source reads on create and on its `refreshInterval`, shows what it read in
//! `status.atProvider`, feeds other objects through `valuesFrom` like any resource, and never
//! writes outside: the ledger records no operation of its own.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::operator::bed::{OBJECTS, describe, yaml_documents};
use kraken_tests::operator::{FixtureBed, OperatorOptions, condition};
use kraken_tests::{ledger, repo_root, wait_for};
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(90);
const LOOKUPS: &str = "datalookups.data.fixture.tf.kraken.dev";
const NULL_DATA: &str = "datadatasources.data.null.tf.kraken.dev";

fn wait_reconciled(bed: &FixtureBed, resource: &str, name: &str) -> anyhow::Result<Value> {
    kraken_tests::operator::bed::wait_reconciled(&bed.cp, (&bed.ns, resource, name), CONVERGE)
}

fn get(bed: &FixtureBed, resource: &str, name: &str) -> anyhow::Result<Option<Value>> {
    bed.cp.get_json_opt(&bed.ns, resource, name)
}

/// The ledger's operations as `op id name`, in order.
fn ledger_ops(bed: &FixtureBed) -> anyhow::Result<Vec<String>> {
    Ok(ledger::event_log(bed.ledger_dir())?
        .into_iter()
        .map(|e| format!("{} {} {}", e.op, e.id, e.name))
        .collect())
}

#[test]
fn data_sources_read_refresh_feed_others_and_never_write() -> anyhow::Result<()> {
    let opts = OperatorOptions {
        rust_log: "info,kraken=debug,kraken_provider::launch=info".into(),
        ..OperatorOptions::default()
    };
    let mut bed = FixtureBed::start("data", opts)?;
    let result = scenario(&mut bed);
    bed.finish(result)
}

fn scenario(bed: &mut FixtureBed) -> anyhow::Result<()> {
    let ns = bed.ns.clone();
    bed.cp.install_crds(
        &repo_root().join("generated-crds/null"),
        "tf.kraken.dev/provider=null",
    )?;
    let docs = [
        json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
               "metadata": {"name": "null", "namespace": ns}, "spec": {"source": "hashicorp/null"}}),
        json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
               "metadata": {"name": "src", "namespace": ns},
               "spec": {"forProvider": {"name": "src", "size": 3}}}),
        // Reads the object `src` by the id it got, every 2 s.
        json!({"apiVersion": "data.fixture.tf.kraken.dev/v1alpha1", "kind": "DataLookup",
               "metadata": {"name": "look", "namespace": ns},
               "spec": {"refreshInterval": "2s", "forProvider": {},
                        "valuesFrom": [{"path": "id", "resource": {"kind": "Object", "name": "src", "path": "id"}}]}}),
        // A resource fed by the data source: its name is what the lookup read.
        json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
               "metadata": {"name": "copy", "namespace": ns},
               "spec": {"forProvider": {"size": 1},
                        "valuesFrom": [{"path": "name", "template": "${resource:DataLookup/look:name}-copy"}]}}),
        // A protocol-5 data source whose inputs come from the lookup.
        json!({"apiVersion": "data.null.tf.kraken.dev/v1alpha1", "kind": "DataDataSource",
               "metadata": {"name": "echo", "namespace": ns},
               "spec": {"providerConfigRef": {"name": "null"}, "forProvider": {},
                        "valuesFrom": [{"path": "inputs.size", "resource": {"kind": "DataLookup", "name": "look", "path": "size"}},
                                       {"path": "inputs.name", "resource": {"kind": "DataLookup", "name": "look", "path": "name"}}]}}),
    ];
    bed.apply(&yaml_documents(&docs))?;
    let src_id = expect_reads_feed_others(bed)?;

    // Changed outside: the lookup reads it on its interval and the change flows on.
    ledger::edit_object(bed.ledger_dir(), &src_id, |o| o["size"] = json!(7))?;
    wait_for(
        CONVERGE,
        "the refreshed size to reach the null data source",
        || {
            let obj = get(bed, NULL_DATA, "echo")?.context("echo")?;
            if obj["status"]["atProvider"]["outputs"]["size"] == "7" {
                Ok(Some(()))
            } else {
                bail!("{}", describe(&obj))
            }
        },
    )?;

    // No data source wrote anything: the ledger holds only the two creates (src's own drift
    // check, every 10 minutes, has not come round).
    let ops = ledger_ops(bed)?;
    let by_data: Vec<&String> = ops
        .iter()
        .filter(|o| !o.ends_with(" src") && !o.ends_with(" src-copy"))
        .collect();
    ensure!(
        by_data.is_empty(),
        "operations not made by a resource: {ops:?}"
    );
    ensure!(
        ops.iter().filter(|o| o.starts_with("create")).count() == 2,
        "{ops:?}"
    );
    expect_a_failed_lookup_says_why(bed)?;
    expect_deletion_waits_for_readers(bed, &src_id)
}

/// The lookup reads `src`, shows what it read, and feeds a resource and a protocol-5 data
/// source; returns src's id.
fn expect_reads_feed_others(bed: &FixtureBed) -> anyhow::Result<String> {
    let src = wait_reconciled(bed, OBJECTS, "src")?;
    let src_id = src["status"]["externalId"]
        .as_str()
        .context("src id")?
        .to_owned();
    let look = wait_reconciled(bed, LOOKUPS, "look")?;
    ensure!(
        look["status"]["atProvider"]["name"] == "src"
            && look["status"]["atProvider"]["id"] == src_id.as_str(),
        "the lookup shows what it read: {}",
        describe(&look)
    );
    ensure!(
        look["metadata"]["finalizers"].as_array().is_some(),
        "a data source reading through valuesFrom holds the finalizer for its request"
    );
    let copy = wait_reconciled(bed, OBJECTS, "copy")?;
    ensure!(
        copy["status"]["atProvider"]["name"] == "src-copy",
        "{}",
        describe(&copy)
    );
    let echo = wait_for(CONVERGE, "the null data source to echo size 3", || {
        let obj = get(bed, NULL_DATA, "echo")?.context("echo")?;
        let outputs = &obj["status"]["atProvider"]["outputs"];
        if outputs["size"] == "3" && outputs["name"] == "src" {
            Ok(Some(obj))
        } else {
            bail!("{}", describe(&obj))
        }
    })?;
    ensure!(
        echo["status"]["atProvider"]["random"].is_string(),
        "{}",
        describe(&echo)
    );
    Ok(src_id)
}

/// A bad input: the lookup of an id that does not exist says why, in the condition.
fn expect_a_failed_lookup_says_why(bed: &FixtureBed) -> anyhow::Result<()> {
    let ns = &bed.ns;
    let missing = json!({"apiVersion": "data.fixture.tf.kraken.dev/v1alpha1", "kind": "DataLookup",
        "metadata": {"name": "missing", "namespace": ns},
        "spec": {"forProvider": {"id": "no-such-id"}}});
    bed.apply(&yaml_documents(&[missing]))?;
    let message = wait_for(CONVERGE, "the failed lookup to say why", || {
        let obj = get(bed, LOOKUPS, "missing")?.context("missing")?;
        match condition(&obj, "Synced") {
            Some((s, _, m)) if s == "False" && m.contains("no-such-id") => Ok(Some(m)),
            other => bail!("Synced is {other:?}"),
        }
    })?;
    ensure!(message.contains("spec.forProvider.id"), "{message}");
    Ok(())
}

/// Deleting the lookup waits while `copy` and `echo` read it, then goes without touching the
/// ledger (src, whose id is `src_id`, untouched).
fn expect_deletion_waits_for_readers(bed: &FixtureBed, src_id: &str) -> anyhow::Result<()> {
    let ns = &bed.ns;
    bed.cp
        .kubectl(&["delete", "-n", ns, LOOKUPS, "look", "--wait=false"])?;
    let (_, reason, _) = wait_for(CONVERGE, "the lookup to wait for its readers", || {
        let obj = get(bed, LOOKUPS, "look")?.context("look")?;
        match condition(&obj, "Ready") {
            Some(c) if c.1 == "InUse" => Ok(Some(c)),
            other => bail!("Ready is {other:?}"),
        }
    })?;
    ensure!(reason == "InUse");
    bed.cp.kubectl(&["delete", "-n", ns, NULL_DATA, "echo"])?;
    bed.cp.kubectl(&["delete", "-n", ns, OBJECTS, "copy"])?;
    wait_for(CONVERGE, "the lookup to go", || {
        match get(bed, LOOKUPS, "look")? {
            None => Ok(Some(())),
            Some(obj) => bail!("{}", describe(&obj)),
        }
    })?;
    ensure!(
        ledger::object(bed.ledger_dir(), src_id)?.is_some(),
        "the object the lookup read is untouched"
    );
    let ops = ledger_ops(bed)?;
    ensure!(
        ops.iter()
            .filter(|o| o.starts_with("delete"))
            .all(|o| o.ends_with(" src-copy")),
        "only copy was destroyed: {ops:?}"
    );
    Ok(())
}

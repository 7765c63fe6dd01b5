//! The dependency hub end to end (docs/operator.md, "Dependency hub"): a real kube-apiserver +
//! etcd, `kraken operator` as a process, and three real providers — HashiCorp's random and null
//! (protocol 5) and the fixture (protocol 6, whose ledger is the "cloud"). Values flow by
//! `spec.valuesFrom` through DependencyRequests resolved by the hub, outputs are published as
//! StateDeclarations, and a ConfigExport writes them into a ConfigMap and a Secret.

#[path = "operator_hub/bad.rs"]
mod bad;
#[path = "operator_hub/chain.rs"]
mod chain;

use std::time::Duration;

use anyhow::{Context as _, bail};
use kraken_tests::operator::{FixtureBed, OperatorOptions, condition};
use kraken_tests::{ledger, wait_for};
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(90);
const PETS: &str = "pets.random.tf.kraken.dev";
const NULLS: &str = "resources.null.tf.kraken.dev";

fn run(
    name: &str,
    scenario: impl FnOnce(&mut FixtureBed) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let opts = OperatorOptions {
        rust_log: "info,kraken=debug,kraken_provider::launch=info".into(),
        ..OperatorOptions::default()
    };
    let mut bed = FixtureBed::start(name, opts)?;
    let result = scenario(&mut bed);
    bed.finish(result)
}

fn get(bed: &FixtureBed, resource: &str, name: &str) -> anyhow::Result<Option<Value>> {
    bed.cp.get_json_opt(&bed.ns, resource, name)
}

/// Waits until `resource/name` is Ready and Synced at its generation.
fn wait_reconciled(bed: &FixtureBed, resource: &str, name: &str) -> anyhow::Result<Value> {
    kraken_tests::operator::bed::wait_reconciled(&bed.cp, (&bed.ns, resource, name), CONVERGE)
}

/// Waits until `resource/name` has condition `type_` with this status and reason.
fn wait_condition(
    bed: &FixtureBed,
    resource: &str,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> anyhow::Result<(String, Value)> {
    wait_for(
        CONVERGE,
        &format!("{resource} {name} {type_}={status}/{reason}"),
        || {
            let obj = get(bed, resource, name)?.context("does not exist")?;
            match condition(&obj, type_) {
                Some((s, r, m)) if s == status && r == reason => Ok(Some((m, obj))),
                other => bail!("{type_} is {other:?}"),
            }
        },
    )
}

fn object(name: &str, ns: &str, for_provider: Value, values_from: Value) -> Value {
    json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"forProvider": for_provider, "valuesFrom": values_from}})
}

fn apply(bed: &FixtureBed, docs: &[Value]) -> anyhow::Result<()> {
    bed.apply(&kraken_tests::operator::bed::yaml_documents(docs))?;
    Ok(())
}

fn ledger_object(bed: &FixtureBed, id: &str) -> anyhow::Result<Value> {
    ledger::objects(bed.ledger_dir())?
        .into_iter()
        .find(|o| o["id"] == id)
        .with_context(|| format!("no object {id} in the ledger"))
}

//! A runner no replica holds is scaled to zero, and the next request starts it again: the
//! operator runs with `--provider-idle-timeout 2s` (its host lets go of the connection) and
//! `--runner-idle-after 4s`.

use std::time::Instant;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::ledger;
use kraken_tests::wait_for;
use serde_json::Value;

use super::bed::{NS, PodsBed, RUNNER, WAIT};

/// The Deployment goes to zero replicas and its Pod away, with the operator saying why.
pub fn expect_scaled_to_zero(bed: &PodsBed) -> anyhow::Result<()> {
    let started = Instant::now();
    wait_for(WAIT, "the idle runner scaled to zero", || {
        let d = bed.cp.get_json(NS, "deployments", RUNNER)?;
        let pods = bed.cp.list_json(NS, "pods")?;
        if d["spec"]["replicas"] == 0 && pods.is_empty() {
            Ok(Some(()))
        } else {
            bail!(
                "replicas {}, {} Pods, last used {}",
                d["spec"]["replicas"],
                pods.len(),
                d["metadata"]["annotations"]["kraken.dev/runner-last-used"]
            )
        }
    })?;
    eprintln!(
        "the runner was at zero {:.1} s after its object was Ready",
        started.elapsed().as_secs_f64()
    );
    let log = bed.op.logs()?;
    ensure!(
        log.contains("shutting down idle provider")
            && log.contains("scaled an idle runner to zero"),
        "the operator let go of the runner, then scaled it away"
    );
    ensure!(
        bed.kubelet.running().is_empty(),
        "the runner's process is stopped: {:?}",
        bed.kubelet.running()
    );
    Ok(())
}

/// A change of the object starts the runner again (a new Pod) and is applied through it.
pub fn expect_started_on_demand(bed: &PodsBed, first: &Value) -> anyhow::Result<()> {
    let before = ledger::apply_calls(bed.ledger())?.len();
    let started = Instant::now();
    bed.apply_object("one", 2)?;
    let obj = bed.wait_reconciled("one")?;
    eprintln!(
        "the change was applied {:.1} s after it was made, through a runner started for it",
        started.elapsed().as_secs_f64()
    );
    ensure!(obj["metadata"]["generation"] == 2, "{}", obj["metadata"]);
    let pod = bed.runner_pod()?;
    ensure!(
        pod["metadata"]["uid"] != first["metadata"]["uid"],
        "a new runner Pod"
    );
    let d = bed.cp.get_json(NS, "deployments", RUNNER)?;
    ensure!(d["spec"]["replicas"] == 1, "{}", d["spec"]);
    let calls = ledger::apply_calls(bed.ledger())?;
    ensure!(
        calls.len() > before,
        "the change was applied: {:?}",
        calls.get(before..)
    );
    ensure!(
        ledger::live_objects(bed.ledger()) == 1,
        "one object in the ledger"
    );
    let name = pod["metadata"]["name"].as_str().context("pod name")?;
    ensure!(
        bed.kubelet
            .log(NS, name)
            .contains("\"tf_rpc\":\"ApplyResourceChange\""),
        "the update ran in the new runner"
    );
    Ok(())
}

//! The `pods` placement against the real parts: the kube-apiserver, kube-controller-manager and
//! kube-scheduler, and the test kubelet playing the node (`kraken_tests::kubelet`).
//!
//! A ProviderConfig asking for `pods` gets a runner Deployment in its own namespace, under the
//! namespace's `kraken-runner` ServiceAccount (no token), whose Pod fetches the package the
//! Provider recorded, locked to its hashes, and serves it to the operator over mutual TLS. The
//! operator reconciles through it; a runner killed in the middle of a create converges to one
//! object (the create fence holds across the hop); a restarted operator reconnects to the same
//! runner (its client certificate is the installation's, not the process's); a tenant naming a
//! ServiceAccount the administrator did not allow is refused (`tenant`); deleting the
//! ProviderConfig removes its runner. Beside it, hashicorp/aws in a runner whose account names
//! a role acts in moto as that role (`irsa`), and a runner nobody holds is scaled to zero and
//! started again by the next change (`idle`).

#[path = "runner_pods/bed.rs"]
mod bed;
#[path = "runner_pods/boundary.rs"]
mod boundary;
#[path = "runner_pods/idle.rs"]
mod idle;
#[path = "runner_pods/irsa.rs"]
mod irsa;
#[path = "runner_pods/tenant.rs"]
mod tenant;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::ledger;
use kraken_tests::wait_for;
use serde_json::{Value, json};

use bed::{NS, PodsBed, RUNNER, WAIT};

#[test]
fn a_provider_config_in_pods_placement_runs_its_provider_in_a_runner_pod() -> anyhow::Result<()> {
    let mut bed = PodsBed::start("runner-pods")?;
    let result = (|| {
        bed.apply_provider_config(json!({}), json!({"placement": "pods"}))?;
        let first = expect_a_runner_pod_reconciles(&bed)?;
        boundary::expect_the_operators_files_out_of_reach(&bed)?;
        expect_a_runner_killed_mid_create_makes_one_object(&bed)?;
        expect_a_restarted_operator_reuses_the_runner(&mut bed, &first)?;
        tenant::expect_the_tenant_cannot_choose_the_runners_identity(&bed)?;
        boundary::expect_an_allowed_account_is_the_runners_identity(&bed)?;
        expect_deleting_the_provider_config_removes_its_runner(&bed)
    })();
    bed.finish(result)
}

#[test]
fn a_runner_whose_account_names_a_role_acts_as_that_role_in_the_cloud() -> anyhow::Result<()> {
    let mut bed = PodsBed::start_with("runner-pods-irsa", &[], irsa::operator_env())?;
    let result = (|| {
        let moto = kraken_tests::moto::Moto::start(bed.cp.run_dir())?;
        irsa::expect_the_runner_acts_as_its_role(&bed, &moto)
    })();
    bed.finish(result)
}

#[test]
fn an_idle_runner_is_scaled_to_zero_and_started_again_on_demand() -> anyhow::Result<()> {
    let args = ["--provider-idle-timeout", "2s", "--runner-idle-after", "4s"];
    let mut bed = PodsBed::start_with("runner-pods-idle", &args, Vec::new())?;
    let result = (|| {
        bed.apply_provider_config(json!({}), json!({"placement": "pods"}))?;
        bed.apply_object("one", 1)?;
        bed.wait_reconciled("one")?;
        let first = bed.runner_pod()?;
        idle::expect_scaled_to_zero(&bed)?;
        idle::expect_started_on_demand(&bed, &first)
    })();
    bed.finish(result)
}

/// The first object through the runner: the Deployment, its Pod under `kraken-runner` with no
/// token, the NetworkPolicy, and the ledger's object. The Pod's uid.
fn expect_a_runner_pod_reconciles(bed: &PodsBed) -> anyhow::Result<String> {
    bed.apply_object("one", 1)?;
    bed.wait_reconciled("one")?;
    let deployment = bed.cp.get_json(NS, "deployments", RUNNER)?;
    ensure!(
        deployment["metadata"]["ownerReferences"][0]["kind"] == "ProviderConfig",
        "{}",
        deployment["metadata"]
    );
    let pod = bed.runner_pod()?;
    let spec = &pod["spec"];
    ensure!(
        spec["serviceAccountName"] == "kraken-runner"
            && spec["automountServiceAccountToken"] == false,
        "the default runner runs as kraken-runner without a token: {spec}"
    );
    let account = bed.cp.get_json(NS, "serviceaccounts", "kraken-runner")?;
    ensure!(
        account["automountServiceAccountToken"] == false,
        "{account}"
    );
    let name = pod["metadata"]["name"].as_str().context("pod name")?;
    ensure!(
        !bed.kubelet.pod_dir(NS, name).join("kubeconfig").exists(),
        "the test kubelet gave the runner a token"
    );
    let policy = bed.cp.get_json(NS, "networkpolicies", RUNNER)?;
    ensure!(
        policy.to_string().contains("169.254.169.254/32"),
        "the NetworkPolicy denies the metadata endpoint: {policy}"
    );
    ensure!(
        ledger::live_objects(bed.ledger()) == 1,
        "one object in the ledger"
    );
    let log = bed.kubelet.log(NS, name);
    // The provider's own log lines, relayed by its runner: the apply ran in the Pod.
    ensure!(
        log.contains("\"tf_rpc\":\"ApplyResourceChange\""),
        "the runner's provider served no apply: {}",
        log.lines().take(20).collect::<Vec<_>>().join("\n")
    );
    ensure!(
        schema_requests(&log) == 1,
        "the first dial reads the schema from the runner once"
    );
    let op_log = bed.op.logs()?;
    ensure!(
        op_log.contains("connected to the provider's runner"),
        "the operator dialed the runner"
    );
    let uid = pod["metadata"]["uid"].as_str().context("pod uid")?;
    Ok(uid.to_owned())
}

/// A create whose apply is delayed; the runner's process (its provider with it) is killed
/// while the apply is in flight. The object converges with one create in the ledger.
fn expect_a_runner_killed_mid_create_makes_one_object(bed: &PodsBed) -> anyhow::Result<()> {
    bed.apply_provider_config(json!({"applyDelayMs": 1500}), json!({"placement": "pods"}))?;
    // The new configuration is a new provider process: the first object is read through it.
    bed.wait_reconciled("one")?;
    let before = ledger::apply_calls(bed.ledger())?.len();
    bed.apply_object("two", 2)?;
    wait_for(WAIT, "the create of two in flight", || {
        let calls = ledger::apply_calls(bed.ledger())?;
        match calls.get(before..).unwrap_or_default() {
            [.., last] if last.op == "create" && last.end.is_none() => Ok(Some(())),
            other => bail!("calls since: {other:?}"),
        }
    })?;
    let pod = bed.runner_pod()?;
    let name = pod["metadata"]["name"].as_str().context("pod name")?;
    bed.kubelet.crash(NS, name)?;
    eprintln!("killed the runner {name} while the create of two was in flight");
    bed.wait_reconciled("two")?;
    let creates: Vec<_> = ledger::event_log(bed.ledger())?
        .into_iter()
        .filter(|e| e.op == "create" && e.name == "two")
        .collect();
    ensure!(creates.len() == 1, "one create of two: {creates:?}");
    ensure!(
        ledger::live_objects(bed.ledger()) == 2,
        "two objects in the ledger"
    );
    let restarts = bed.runner_pod()?["status"]["containerStatuses"][0]["restartCount"].clone();
    ensure!(restarts == 1, "the runner was restarted once: {restarts}");
    Ok(())
}

/// The operator is killed and started again: it dials the runner that is there (no new Pod),
/// presenting the installation's client certificate from its Secret.
fn expect_a_restarted_operator_reuses_the_runner(
    bed: &mut PodsBed,
    first: &str,
) -> anyhow::Result<()> {
    let schema_reads = |bed: &PodsBed| -> anyhow::Result<usize> {
        let pod = bed.runner_pod()?;
        let name = pod["metadata"]["name"].as_str().context("pod name")?;
        Ok(schema_requests(&bed.kubelet.log(NS, name)))
    };
    let before = schema_reads(bed)?;
    bed.op.kill()?;
    bed.op.restart()?;
    bed.op.wait_ready(WAIT)?;
    bed.apply_object("three", 3)?;
    bed.wait_reconciled("three")?;
    let pod = bed.runner_pod()?;
    ensure!(
        pod["metadata"]["uid"] == first,
        "the same runner Pod serves the restarted operator"
    );
    // The restarted operator took the schema of the build the runner is locked to from its
    // cache: the runner was not asked again.
    let after = schema_reads(bed)?;
    ensure!(
        after == before,
        "GetProviderSchema served {before} times before the restart, {after} after"
    );
    let pods = bed.cp.list_json(NS, "pods")?;
    ensure!(pods.len() == 1, "one runner Pod: {}", pods.len());
    ensure!(
        bed.op
            .logs()?
            .contains("created the runner client certificate")
            && bed
                .op
                .logs()?
                .matches("created the runner client certificate")
                .count()
                == 1,
        "the restarted operator read the client certificate it had made, not a new one"
    );
    Ok(())
}

/// The objects deleted, then the ProviderConfig: its Deployment, Secret, NetworkPolicy and
/// Pod go with it (the garbage collector follows their owner reference).
fn expect_deleting_the_provider_config_removes_its_runner(bed: &PodsBed) -> anyhow::Result<()> {
    bed.cp.kubectl(&[
        "-n",
        NS,
        "delete",
        "objects.fixture.tf.kraken.dev",
        "--all",
        "--wait=true",
        "--timeout=90s",
    ])?;
    ensure!(
        ledger::live_objects(bed.ledger()) == 0,
        "the objects were destroyed"
    );
    bed.cp.kubectl(&[
        "-n",
        NS,
        "delete",
        "providerconfig",
        "--all",
        "--wait=true",
        "--timeout=60s",
    ])?;
    wait_for(WAIT, "the runner's objects gone", || {
        let left: Vec<String> = [
            ("deployments", RUNNER.to_owned()),
            ("networkpolicies", RUNNER.to_owned()),
            ("secrets", format!("{RUNNER}-tls")),
        ]
        .into_iter()
        .filter_map(|(kind, name)| match bed.cp.get_json_opt(NS, kind, &name) {
            Ok(Some(_)) => Some(format!("{kind}/{name}")),
            _ => None,
        })
        .chain(["deployments", "replicasets"].iter().flat_map(|kind| {
            bed.cp
                .list_json(NS, kind)
                .unwrap_or_default()
                .into_iter()
                .map(move |o| {
                    format!(
                        "{kind}/{}",
                        o["metadata"]["name"].as_str().unwrap_or_default()
                    )
                })
        }))
        .chain(bed.cp.list_json(NS, "pods")?.iter().map(|p: &Value| {
            format!(
                "pod/{} (deleting since {}, owners {}, finalizers {})",
                p["metadata"]["name"].as_str().unwrap_or_default(),
                p["metadata"]["deletionTimestamp"],
                p["metadata"]["ownerReferences"],
                p["metadata"]["finalizers"]
            )
        }))
        .collect();
        if left.is_empty() {
            Ok(Some(()))
        } else {
            bail!("left: {left:?}")
        }
    })?;
    ensure!(
        bed.kubelet.running().is_empty(),
        "the runner's process was stopped: {:?}",
        bed.kubelet.running()
    );
    Ok(())
}

/// How many GetProviderSchema requests a runner's provider logged.
fn schema_requests(log: &str) -> usize {
    log.lines()
        .filter(|l| {
            l.contains("\"tf_rpc\":\"GetProviderSchema\"")
                && l.contains("\"@message\":\"Received request\"")
        })
        .count()
}

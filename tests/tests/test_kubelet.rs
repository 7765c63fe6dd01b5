//! The test kubelet (`kraken_tests::kubelet`) with the real kube-controller-manager and
//! kube-scheduler: a Deployment becomes a ReplicaSet and a Pod, the scheduler binds it to the
//! test Node, the test kubelet runs its container as a local process with a token the API
//! server minted for the Pod's ServiceAccount (and a projected one with an audience, as IRSA
//! mounts it), restarts it when it dies, and stops it when the garbage collector deletes the
//! Pod with its Deployment. What the process may do is what the real API server allows its
//! ServiceAccount: here, nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::kubelet::{Controllers, Images, NODE, TestKubelet};
use kraken_tests::{ControlPlane, TestEnv, wait_for};
use serde_json::{Value, json};

const NS: &str = "team-a";
const WAIT: Duration = Duration::from_secs(60);
const ROLE: &str = "arn:aws:iam::123456789012:role/team-a";

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "whoami", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "whoami"}},
            "template": {"metadata": {"labels": {"app": "whoami"}},
                "spec": {"serviceAccountName": "runner",
                    "containers": [{"name": "main", "image": "registry.example/kubectl:1.35",
                        "command": ["kubectl"], "args": ["auth", "whoami", "-o", "json"],
                        "env": [
                            {"name": "AWS_ROLE_ARN", "value": ROLE},
                            {"name": "AWS_WEB_IDENTITY_TOKEN_FILE",
                             "value": "/var/run/secrets/eks.amazonaws.com/serviceaccount/token"},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "volumeMounts": [{"name": "aws-token",
                            "mountPath": "/var/run/secrets/eks.amazonaws.com/serviceaccount"}]}],
                    "volumes": [{"name": "aws-token", "projected": {"sources": [
                        {"serviceAccountToken": {"audience": "sts.amazonaws.com",
                                                 "expirationSeconds": 3600, "path": "token"}}]}}]}}}})
}

/// The one Pod of the Deployment, once it is bound and Running.
fn running_pod(cp: &ControlPlane) -> anyhow::Result<Value> {
    wait_for(WAIT, "the Deployment's Pod bound and Running", || {
        let pods = cp.list_json(NS, "pods")?;
        let Some(pod) = pods.into_iter().next() else {
            bail!("no Pod yet");
        };
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        let phase = pod["status"]["phase"].as_str().unwrap_or_default();
        if node == NODE && phase == "Running" {
            Ok(Some(pod))
        } else {
            bail!("node {node:?}, phase {phase:?}")
        }
    })
}

#[test]
fn deployments_run_under_their_service_accounts_token() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let kubectl = env.path("KRAKEN_TEST_KUBECTL")?;
    let cp = ControlPlane::start("test-kubelet")?;
    let mut controllers = Controllers::start(&cp)?;
    let kubelet = TestKubelet::start(
        &cp,
        Images(BTreeMap::from([("kubectl".to_owned(), kubectl.clone())])),
    )?;
    cp.kubectl(&["create", "namespace", NS])?;
    // The ServiceAccount controller makes each namespace's `default`.
    wait_for(WAIT, "the default ServiceAccount", || {
        cp.get_json_opt(NS, "serviceaccounts", "default")
    })?;
    cp.kubectl(&["-n", NS, "create", "serviceaccount", "runner"])?;
    cp.apply_yaml(NS, &deployment().to_string())?;
    let pod = running_pod(&cp)?;
    let name = pod["metadata"]["name"]
        .as_str()
        .context("pod name")?
        .to_owned();
    ensure!(
        pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet",
        "the Pod was not made by a ReplicaSet: {}",
        pod["metadata"]
    );

    // The process authenticated as the Pod's ServiceAccount.
    let user = format!("system:serviceaccount:{NS}:runner");
    wait_for(WAIT, "the process's whoami in its log", || {
        Ok(kubelet.log(NS, &name).contains(&user).then_some(()))
    })?;
    let log = kubelet.log(NS, &name);
    ensure!(
        log.contains("authentication.kubernetes.io/pod-name") && log.contains(&name),
        "the token is not bound to the Pod: {log}"
    );

    may_do_nothing(&kubectl, &kubelet.pod_dir(NS, &name).join("kubeconfig"))?;
    projected_token_is_real(&cp, &kubelet.pod_dir(NS, &name), &user)?;

    // A crash is a restart, counted on the Pod.
    kubelet.crash(NS, &name)?;
    wait_for(WAIT, "the restart counted", || {
        let pod = cp.get_json(NS, "pods", &name)?;
        let restarts = pod["status"]["containerStatuses"][0]["restartCount"]
            .as_u64()
            .unwrap_or(0);
        Ok((restarts >= 1).then_some(()))
    })?;

    // Deleting the Deployment: the garbage collector deletes the ReplicaSet and the Pod, and
    // the test kubelet stops the process and confirms the deletion.
    cp.kubectl(&["-n", NS, "delete", "deployment", "whoami", "--wait=false"])?;
    wait_for(WAIT, "the Pod gone and its process stopped", || {
        let pods = cp.list_json(NS, "pods")?;
        let running = kubelet.running();
        if pods.is_empty() && running.is_empty() {
            Ok(Some(()))
        } else {
            bail!("{} Pods, processes {running:?}", pods.len())
        }
    })?;
    controllers.check()?;
    Ok(())
}

/// The Pod's token can do nothing its ServiceAccount cannot (it has no RBAC at all).
fn may_do_nothing(
    kubectl: &std::path::Path,
    pod_kubeconfig: &std::path::Path,
) -> anyhow::Result<()> {
    for (verb, resource) in [
        ("get", "secrets"),
        ("list", "pods"),
        ("create", "deployments.apps"),
    ] {
        let out = std::process::Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(pod_kubeconfig)
            .args(["auth", "can-i", verb, resource, "-n", NS])
            .output()?;
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        ensure!(
            answer == "no",
            "the Pod's token may {verb} {resource}: {answer:?}"
        );
    }

    Ok(())
}

/// The projected token has the audience IRSA asks for, and the API server vouches for it.
fn projected_token_is_real(
    cp: &ControlPlane,
    pod_dir: &std::path::Path,
    user: &str,
) -> anyhow::Result<()> {
    let token_file = pod_dir.join("volumes/aws-token/token");
    let token = std::fs::read_to_string(&token_file)
        .with_context(|| format!("reading {}", token_file.display()))?;
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token.trim(), "audiences": ["sts.amazonaws.com"]}});
    let out = cp.kubectl_stdin(
        &["create", "-o", "json", "-f", "-"],
        review.to_string().as_bytes(),
    )?;
    let reviewed: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| String::from_utf8_lossy(&out.stderr).into_owned())?;
    ensure!(
        reviewed["status"]["authenticated"] == true
            && reviewed["status"]["user"]["username"] == user
            && reviewed["status"]["audiences"][0] == "sts.amazonaws.com",
        "the projected token: {}",
        reviewed["status"]
    );

    Ok(())
}

//! What the test kubelet reports: its Node, and each Pod's status.

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::NODE;

pub(super) async fn register_node(client: &kube::Client) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux"}},
    }))?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let room = json!({"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"});
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "capacity": room, "allocatable": room,
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": NODE}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                         "message": "the test kubelet runs Pods as local processes",
                         "lastHeartbeatTime": now, "lastTransitionTime": now}],
    }});
    nodes
        .patch_status(NODE, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    // Admission taints a new Node not-ready; the node lifecycle controller, which would lift
    // the taint once the Node is Ready, is off (no heartbeats here): lift it now.
    nodes
        .patch(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": null}})),
        )
        .await?;
    Ok(())
}

pub(super) async fn report_running(
    client: &kube::Client,
    pod: &Pod,
    restarts: u32,
    ip: &str,
) -> anyhow::Result<()> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .context("a Pod without containers")?;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
    let status = json!({"status": {
        "phase": "Running",
        "hostIP": "127.0.0.1", "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": now,
        "conditions": [condition("PodScheduled"), condition("Initialized"),
                       condition("ContainersReady"), condition("Ready")],
        "containerStatuses": [{
            "name": container.name, "image": container.image.clone().unwrap_or_default(),
            "imageID": "", "ready": true, "started": true, "restartCount": restarts,
            "state": {"running": {"startedAt": now}},
        }],
    }});
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

pub(super) async fn report_failed(
    client: &kube::Client,
    ns: &str,
    name: &str,
    why: &str,
) -> anyhow::Result<()> {
    eprintln!("test kubelet: cannot start Pod {ns}/{name}: {why}");
    let status: Value = json!({"status": {"phase": "Pending", "conditions": [{
        "type": "Ready", "status": "False", "reason": "TestKubeletRefused", "message": why}]}});
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

//! The local control plane from `scripts/testenv.sh up`: a real etcd + kube-apiserver on
//! loopback with client-certificate auth, RBAC and service-account keys, as envtest runs them.

use std::time::Instant;

use anyhow::ensure;
use kraken_tests::ControlPlane;

#[test]
fn control_plane_serves_rbac_and_service_accounts() -> anyhow::Result<()> {
    let started = Instant::now();
    let cp = ControlPlane::start("control-plane-test")?;
    eprintln!(
        "control plane up in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    let version = cp.kubectl(&["version", "-o", "json"])?;
    let version: serde_json::Value = serde_json::from_str(&version)?;
    let minor: u32 = version["serverVersion"]["minor"]
        .as_str()
        .unwrap_or("0")
        .trim_end_matches('+')
        .parse()?;
    ensure!(
        minor >= 33,
        "kube-apiserver 1.33 or newer required, got 1.{minor}"
    );

    cp.kubectl(&["create", "namespace", "kraken-smoke"])?;
    let ns = cp.kubectl(&["get", "namespace", "kraken-smoke", "-o", "name"])?;
    assert_eq!(ns.trim(), "namespace/kraken-smoke");

    // RBAC is on: the admin may do anything, an unbound service account may not.
    assert_eq!(
        cp.kubectl(&["auth", "can-i", "create", "pods"])?.trim(),
        "yes"
    );
    cp.kubectl(&["create", "serviceaccount", "robot", "-n", "kraken-smoke"])?;
    // `can-i` answers on stdout and exits 1 when the answer is no.
    let denied = cp.kubectl_output(&[
        "auth",
        "can-i",
        "list",
        "secrets",
        "-n",
        "kraken-smoke",
        "--as",
        "system:serviceaccount:kraken-smoke:robot",
    ])?;
    let answer = String::from_utf8_lossy(&denied.stdout);
    assert_eq!(
        answer.trim(),
        "no",
        "an unbound service account must be denied"
    );

    // Service-account signing keys are configured: tokens can be issued.
    let token = cp.kubectl(&["create", "token", "robot", "-n", "kraken-smoke"])?;
    assert_eq!(token.trim().split('.').count(), 3, "a JWT has three parts");
    Ok(())
}

/// The harness pieces the operator tests rely on: namespaces with their default
/// ServiceAccount, apply/get/list helpers, and an API server outage that loses nothing
/// because etcd keeps running.
#[test]
fn apiserver_outage_and_restart_keep_every_object() -> anyhow::Result<()> {
    let cp = ControlPlane::start("apiserver-restart")?;
    cp.create_namespace("outage")?;
    ensure!(
        cp.get_json_opt("outage", "serviceaccount", "default")?
            .is_some(),
        "create_namespace must create the default ServiceAccount"
    );
    cp.apply_yaml(
        "outage",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: before}\ndata: {k: v}\n",
    )?;
    ensure!(cp.get_json("outage", "configmap", "before")?["data"]["k"] == "v");
    ensure!(cp.get_json_opt("outage", "configmap", "missing")?.is_none());
    ensure!(cp.list_json("outage", "configmaps")?.len() >= 1);
    let refused = cp.try_apply_yaml(
        "outage",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n",
    )?;
    ensure!(
        refused.is_err(),
        "an invalid name must be refused: {refused:?}"
    );
    ensure!(
        cp.get_json("", "namespace", "outage")?["metadata"]["name"] == "outage",
        "an empty namespace means cluster-scoped"
    );

    let pid = cp.apiserver_pid()?;
    let stopped = Instant::now();
    cp.stop_apiserver()?;
    ensure!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true),
        "kube-apiserver {pid} still runs after stop_apiserver"
    );
    let down = cp.kubectl_output(&["--request-timeout=3s", "get", "namespaces"])?;
    ensure!(
        !down.status.success(),
        "kubectl must fail while the API server is down"
    );
    let stderr = String::from_utf8_lossy(&down.stderr);
    ensure!(
        stderr.contains("refused"),
        "expected connection refused, got: {stderr}"
    );

    cp.start_apiserver()?;
    eprintln!(
        "outage and restart took {:.1}s",
        stopped.elapsed().as_secs_f64()
    );
    ensure!(cp.apiserver_pid()? != pid, "a new kube-apiserver process");
    ensure!(
        cp.get_json("outage", "configmap", "before")?["data"]["k"] == "v",
        "objects written before the outage survive it"
    );
    cp.apply_yaml(
        "outage",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: after}\n",
    )?;
    ensure!(cp.list_json("outage", "configmaps")?.len() >= 2);
    // Idempotent: starting a running server is a no-op, stopping twice too.
    cp.start_apiserver()?;
    cp.stop_apiserver()?;
    cp.stop_apiserver()?;
    cp.start_apiserver()?;
    ensure!(cp.get_json_opt("outage", "configmap", "after")?.is_some());
    Ok(())
}

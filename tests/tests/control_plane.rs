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

//! RBAC that follows installs, checked as the chart's ServiceAccounts against the real API
//! server: the RBAC manager run as the chart's Deployment would run it (its own ServiceAccount's
//! token, the Deployment's arguments), and `kubectl auth can-i` asked with the operator's token.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kraken_tests::{ControlPlane, TestEnv, kraken_bin, wait_for};
use serde_json::json;

use super::{CONVERGE, RELEASE, SYSTEM, TEAM};

/// The RBAC manager's Deployment and ServiceAccount.
pub const MANAGER: &str = "kraken-rbac-manager";

/// `kraken rbac-manager` as a process, stopped on drop; its log in the run directory.
pub struct RbacManager {
    child: Child,
    pub log: PathBuf,
}

impl Drop for RbacManager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RbacManager {
    /// Its log, for a failure's message.
    pub fn tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// Starts the RBAC manager with the arguments of the chart's Deployment, under `kubeconfig`
/// (its ServiceAccount's token).
pub fn start(cp: &ControlPlane, kubeconfig: &Path, label: &str) -> anyhow::Result<RbacManager> {
    let deploy = cp.get_json(SYSTEM, "deployments", MANAGER)?;
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .context("no container args")?
        .iter()
        .map(|a| a.as_str().map(str::to_owned).context("a non-string arg"))
        .collect::<anyhow::Result<_>>()?;
    ensure!(
        args.first().map(String::as_str) == Some("rbac-manager"),
        "args: {args:?}"
    );
    let log = cp.run_dir().join(format!("rbac-manager-{label}.log"));
    let out = std::fs::File::create(&log)?;
    let child = Command::new(kraken_bin()?)
        .args(&args)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("starting kraken rbac-manager")?;
    let manager = RbacManager { child, log };
    wait_for(Duration::from_secs(60), "the RBAC manager started", || {
        let text = std::fs::read_to_string(&manager.log).unwrap_or_default();
        Ok(text.contains("RBAC manager started").then_some(()))
    })
    .map_err(|e| anyhow::anyhow!("{e}\n{}", manager.tail(30)))?;
    Ok(manager)
}

/// `kubectl auth can-i VERB RESOURCE` under `kubeconfig`, in `namespace` (or all of them).
pub fn can_i(
    kubeconfig: &Path,
    verb: &str,
    resource: &str,
    namespace: Option<&str>,
) -> anyhow::Result<bool> {
    let env = TestEnv::load()?;
    let mut cmd = Command::new(env.path("KRAKEN_TEST_KUBECTL")?);
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["auth", "can-i", verb, resource]);
    match namespace {
        Some(ns) => cmd.args(["-n", ns]),
        None => cmd.arg("--all-namespaces"),
    };
    let out = cmd.output().context("running kubectl auth can-i")?;
    match String::from_utf8_lossy(&out.stdout).trim() {
        "yes" => Ok(true),
        "no" => Ok(false),
        other => bail!(
            "kubectl auth can-i {verb} {resource}: {other:?} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// What the operator's ServiceAccount must not be able to do, whatever is installed.
pub fn operator_is_confined(operator: &Path) -> anyhow::Result<()> {
    for (verb, resource, ns) in [
        ("patch", "deployments.apps", Some("kube-system")),
        ("get", "secrets", Some("kube-system")),
        ("list", "secrets", None),
        ("get", "secrets", None),
        (
            "create",
            "clusterrolebindings.rbac.authorization.k8s.io",
            None,
        ),
        ("escalate", "clusterroles.rbac.authorization.k8s.io", None),
        (
            "patch",
            "validatingadmissionpolicybindings.admissionregistration.k8s.io",
            None,
        ),
        ("get", "pods", Some("kube-system")),
    ] {
        ensure!(
            !can_i(operator, verb, resource, ns)?,
            "the operator's ServiceAccount may {verb} {resource} in {}",
            ns.unwrap_or("every namespace")
        );
    }
    Ok(())
}

/// Waits until the operator may `verb` `resource` in `namespace`; how long that took.
pub fn until_granted(
    operator: &Path,
    verb: &str,
    resource: &str,
    namespace: &str,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    wait_for(
        CONVERGE,
        &format!("the operator granted {verb} {resource} in {namespace}"),
        || Ok(can_i(operator, verb, resource, Some(namespace))?.then_some(())),
    )?;
    Ok(start.elapsed())
}

/// A Provider installed and deleted again (hashicorp/null, nothing of its kinds created): the
/// operator may manage its kinds within seconds of it being Ready, and may not once it is gone.
pub fn follows_an_install_and_its_removal(
    cp: &ControlPlane,
    operator: &Path,
) -> anyhow::Result<()> {
    let resource = "resources.null.tf.kraken.dev";
    ensure!(
        !can_i(operator, "patch", resource, Some(TEAM))?,
        "the operator may patch {resource} before hashicorp/null is installed"
    );
    cp.apply_yaml(
        "",
        &json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "Provider",
            "metadata": {"name": "null"},
            "spec": {"source": "registry.terraform.io/hashicorp/null", "version": "2.1.2",
                     "resources": ["null_resource"]}})
        .to_string(),
    )?;
    super::wait_provider_ready(cp, "null")?;
    let after_ready = until_granted(operator, "patch", resource, TEAM)?;
    println!(
        "hashicorp/null: the operator may patch its kinds {} ms after the Provider is Ready",
        after_ready.as_millis()
    );
    ensure!(
        after_ready < Duration::from_secs(10),
        "granted {} ms after Ready",
        after_ready.as_millis()
    );
    cp.kubectl(&[
        "delete",
        "providers.core.kraken.dev",
        "null",
        "--wait=true",
        "--timeout=120s",
    ])?;
    let start = Instant::now();
    wait_for(CONVERGE, "hashicorp/null's groups revoked", || {
        Ok((!can_i(operator, "patch", resource, Some(TEAM))?).then_some(()))
    })?;
    println!(
        "hashicorp/null: revoked {} ms after the Provider is gone",
        start.elapsed().as_millis()
    );
    ensure!(
        cp.get_json_opt(
            "",
            "clusterroles.rbac.authorization.k8s.io",
            &format!("{RELEASE}-provider-null")
        )?
        .is_none(),
        "the ClusterRole of the deleted Provider is still there"
    );
    Ok(())
}

/// A change of a Secret reaches the object that takes a value from it: the hub's watch of
/// Secrets, which under the chart's RBAC runs namespace by namespace.
pub fn a_rotated_secret_reaches_its_object(
    cp: &ControlPlane,
    ledger_dir: &Path,
) -> anyhow::Result<()> {
    let writes = kraken_tests::ledger::event_log(ledger_dir)?.len();
    let rotated = r#"{"stringData":{"password":"rotated-in-the-secret"}}"#;
    cp.kubectl(&[
        "-n",
        TEAM,
        "patch",
        "secret",
        "creds",
        "--type=merge",
        "-p",
        rotated,
    ])?;
    wait_for(CONVERGE, "the rotated password applied", || {
        let log = kraken_tests::ledger::event_log(ledger_dir)?;
        let applied = log.len() > writes && log[writes..].iter().any(|e| e.name == "first");
        Ok(applied.then_some(()))
    })?;
    Ok(())
}

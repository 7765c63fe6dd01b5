//! The Helm chart installed for real: `helm install` into the test kube-apiserver, then the
//! operator run with the chart's own identity — a TokenRequest token of the chart's
//! ServiceAccount in a kubeconfig — and the arguments and environment of the chart's
//! Deployment. (There is no kubelet here, so the Deployment's pod never starts; the operator
//! runs as a process with exactly what the pod would get.)
//!
//! Under that identity: a Provider installs from the chart's provider mirror (CRDs created at
//! runtime), a managed resource reconciles through it with a credential from a Secret, a second
//! takes the first's output through the hub (`valuesFrom`), a ConfigExport writes a ConfigMap,
//! leader election takes the chart's Lease. A permission the chart lacks fails the test: the
//! scenario stalls, and any "forbidden" in the operator's log fails it outright.
//!
//! The native EC2 path runs under it too: an EC2Instance launched in moto and deleted.
//!
//! RBAC follows installs (`helm_install/rbac.rs`): the chart's RBAC manager runs the same way,
//! with its own ServiceAccount's token. Asked with the operator's token, the API server must
//! refuse what the operator never needs (Deployments and Secrets in kube-system, Secrets across
//! namespaces, RBAC writes), and grant a Provider's kinds within seconds of it being Ready and
//! revoke them once it is gone.
//!
//! Then `helm upgrade` (CRDs untouched, the Deployment changed) and `helm uninstall`: the
//! chart's objects go, the CRDs and every custom resource stay, the cloud objects stay; a
//! reinstall with `operator.shards=auto` (the operator then runs sharded, under the chart's
//! Role for its ring of Leases) picks them up again without creating anything twice.

#[path = "helm_install/ec2.rs"]
mod ec2;
#[path = "helm_install/rbac.rs"]
mod rbac;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::operator::bed::{OBJECTS, describe, is_reconciled, yaml_documents};
use kraken_tests::operator::{Operator, OperatorOptions, free_port, with_log_tails};
use kraken_tests::{
    ControlPlane, FIXTURE_ADDRESS, TestEnv, ledger, repo_root, scratch_dir, wait_for,
};
use serde_json::{Value, json};

const RELEASE: &str = "kraken";
const SYSTEM: &str = "kraken-system";
const TEAM: &str = "team-a";
const CONVERGE: Duration = Duration::from_secs(120);

struct Helm<'a> {
    cp: &'a ControlPlane,
    bin: std::path::PathBuf,
}

impl Helm<'_> {
    fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = std::process::Command::new(&self.bin)
            .args(args)
            .arg("--kubeconfig")
            .arg(self.cp.kubeconfig())
            .output()
            .context("running helm")?;
        ensure!(
            out.status.success(),
            "helm {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    }
}

/// A kubeconfig for one of the chart's ServiceAccounts: a token from the TokenRequest API, the
/// cluster's address and CA from the admin kubeconfig.
fn service_account_kubeconfig(
    cp: &ControlPlane,
    dir: &Path,
    account: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let token = cp.kubectl(&["-n", SYSTEM, "create", "token", account, "--duration=2h"])?;
    let admin = std::fs::read_to_string(cp.kubeconfig())?;
    let field = |key: &str| -> anyhow::Result<String> {
        admin
            .lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .map(|v| v.trim().to_owned())
            .with_context(|| format!("no {key} in the admin kubeconfig"))
    };
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": field("server:")?,
            "certificate-authority-data": field("certificate-authority-data:")?}}],
        "users": [{"name": "kraken-sa", "user": {"token": token.trim()}}],
        "contexts": [{"name": "kraken-sa", "context": {"cluster": "test", "user": "kraken-sa"}}],
        "current-context": "kraken-sa",
    });
    let path = dir.join(format!("{account}.kubeconfig"));
    std::fs::write(&path, config.to_string())?;
    Ok(path)
}

/// The operator as the chart's Deployment runs it: its args (the ports and the plugin cache
/// moved to this machine's free ones and a scratch directory), its environment, the
/// ServiceAccount's kubeconfig.
fn start_as_deployed(
    cp: &ControlPlane,
    kubeconfig: &Path,
    plugin_cache: &Path,
    label: &str,
) -> anyhow::Result<Operator> {
    let deploy = cp.get_json(SYSTEM, "deployments", RELEASE)?;
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    let mut args = Vec::new();
    for arg in container["args"].as_array().context("no container args")? {
        let arg = arg.as_str().context("a non-string arg")?;
        let name = arg.split('=').next().unwrap_or(arg);
        match name {
            "operator" | "--metrics-addr" => {}
            "--health-addr" => args.push(format!("--health-addr=127.0.0.1:{}", free_port()?)),
            "--plugin-cache" => args.push(format!("--plugin-cache={}", plugin_cache.display())),
            _ => args.push(arg.to_owned()),
        }
    }
    let mut env = vec![("POD_NAME".to_owned(), format!("{RELEASE}-{label}"))];
    for var in container["env"].as_array().context("no container env")? {
        let name = var["name"].as_str().context("env name")?;
        let value = match name {
            "POD_NAMESPACE" => SYSTEM.to_owned(),
            "POD_NAME" | "TMPDIR" => continue,
            _ => var["value"].as_str().context("env value")?.to_owned(),
        };
        env.push((name.to_owned(), value));
    }
    let mut op = Operator::start(
        cp,
        OperatorOptions {
            label: label.into(),
            rust_log: "info".into(),
            kubeconfig: Some(kubeconfig.to_path_buf()),
            standard_args: false,
            args,
            env,
            ..OperatorOptions::default()
        },
    )?;
    op.wait_ready(Duration::from_secs(90))?;
    Ok(op)
}

fn reconciled(cp: &ControlPlane, resource: &str, name: &str) -> anyhow::Result<Value> {
    wait_for(CONVERGE, &format!("{resource} {name} reconciled"), || {
        let obj = cp.get_json(TEAM, resource, name)?;
        if is_reconciled(&obj) {
            Ok(Some(obj))
        } else {
            bail!("{}", describe(&obj))
        }
    })
}

fn no_forbidden(op: &Operator) -> anyhow::Result<()> {
    let logs = op.logs()?;
    let denied: Vec<&str> = logs
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("forbidden"))
        .take(5)
        .collect();
    ensure!(
        denied.is_empty(),
        "the chart's ServiceAccount was refused:\n{}",
        denied.join("\n")
    );
    Ok(())
}

fn scenario(ledger_dir: &Path) -> Vec<Value> {
    let object = |name: &str, for_provider: Value, values_from: Value| {
        json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
               "metadata": {"name": name, "namespace": TEAM},
               "spec": {"providerConfigRef": {"name": "default"}, "forProvider": for_provider,
                        "valuesFrom": values_from}})
    };
    vec![
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": TEAM},
               "stringData": {"password": "hunter2-from-a-secret"}}),
        json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
               "metadata": {"name": "default", "namespace": TEAM},
               "spec": {"providerRef": {"name": "fixture"},
                        "config": {"ledgerDir": ledger_dir.to_string_lossy()}}}),
        object(
            "first",
            json!({"name": "first", "size": 2}),
            json!([{"path": "password", "secretKeyRef": {"name": "creds", "key": "password"}}]),
        ),
        object(
            "second",
            json!({"size": 1}),
            json!([{"path": "name", "template": "after-${resource:Object/first:id}"}]),
        ),
        json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ConfigExport",
               "metadata": {"name": "out", "namespace": TEAM},
               "spec": {"target": {"kind": "ConfigMap", "name": "exported"},
                        "data": [{"key": "first", "resource": {"kind": "Object", "name": "first", "path": "id"}}]}}),
    ]
}

/// The chart as installed: the release name, the chart's path and the mirror it is given.
struct Release<'a> {
    helm: Helm<'a>,
    chart: String,
    mirror_set: String,
}

impl Release<'_> {
    /// `helm install` with the mirror and `extra` values; the namespace is created (or kept).
    fn install(&self, extra: &[&str]) -> anyhow::Result<String> {
        let mut args = vec![
            "install",
            RELEASE,
            &self.chart,
            "-n",
            SYSTEM,
            "--create-namespace",
        ];
        args.extend(["--set", &self.mirror_set]);
        for set in extra {
            args.extend(["--set", set]);
        }
        self.helm.run(&args)
    }
}

/// Waits until the Provider `name` is Ready (Installed).
fn wait_provider_ready(cp: &ControlPlane, name: &str) -> anyhow::Result<()> {
    wait_for(CONVERGE, &format!("Provider {name} installed"), || {
        let p = cp.get_json("", "providers.core.kraken.dev", name)?;
        let ready = kraken_tests::operator::condition(&p, "Ready");
        match ready {
            Some((s, r, _)) if s == "True" && r == "Installed" => Ok(Some(())),
            other => bail!("Ready {other:?}"),
        }
    })
}

/// The resourceVersion of the Provider CRD: changed by any write to it.
fn crd_version(cp: &ControlPlane) -> anyhow::Result<String> {
    cp.kubectl(&[
        "get",
        "crd",
        "providers.core.kraken.dev",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ])
}

#[test]
fn the_chart_installs_and_the_operator_works_under_its_own_identity() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let mirror = env.path("KRAKEN_TEST_PLUGIN_DIR")?;
    let cp = ControlPlane::start("helm-install")?;
    let release = Release {
        helm: Helm {
            cp: &cp,
            bin: env.path("KRAKEN_TEST_HELM")?,
        },
        chart: repo_root()
            .join("charts/kraken")
            .to_string_lossy()
            .into_owned(),
        mirror_set: format!("operator.providerMirror={}", mirror.display()),
    };
    let scratch = scratch_dir("kraken-helm-")?;

    let ledger_dir = scratch.path().join("ledger");
    std::fs::create_dir_all(&ledger_dir)?;
    // The fixture's ledger stands for the provider's cloud: the one place outside its own
    // directory its sandbox lets it write (`runner.allowWrite`).
    let allow_ledger = format!("runner.allowWrite[0]={}", ledger_dir.display());

    // The same install twice (the second after `helm uninstall`); the namespace stays.
    // EC2Instances may reach moto on loopback (and nothing else).
    release.install(&["aws.endpoints[0]=http://127.0.0.1:*", &allow_ledger])?;
    expect_the_release_objects(&release)?;
    let crds_before = crd_version(&cp)?;

    let cache = scratch.path().join("plugins");
    let kubeconfig = service_account_kubeconfig(&cp, scratch.path(), RELEASE)?;
    let manager_kubeconfig = service_account_kubeconfig(&cp, scratch.path(), rbac::MANAGER)?;
    let manager = rbac::start(&cp, &manager_kubeconfig, "first")?;
    rbac::operator_is_confined(&kubeconfig)?;
    let op = start_as_deployed(&cp, &kubeconfig, &cache, "first")?;
    let result = works_under_its_own_identity(&cp, &op, &kubeconfig, &ledger_dir)
        .and_then(|()| rbac::follows_an_install_and_its_removal(&cp, &kubeconfig))
        .and_then(|()| rbac::operator_is_confined(&kubeconfig))
        .and_then(|()| no_forbidden(&op));
    let result = result.map_err(|e| with_log_tails(e, &[("operator", &op)], 60));
    result.map_err(|e| anyhow::anyhow!("{e:#}\n--- rbac-manager ---\n{}", manager.tail(40)))?;
    upgrade_follows_the_values(&release, &crds_before)?;
    let events_before = ledger::event_log(&ledger_dir)?.len();
    release.helm.run(&["uninstall", RELEASE, "-n", SYSTEM])?;
    drop(op);
    drop(manager);
    expect_uninstall_leaves_what_is_not_its_own(&cp, &ledger_dir)?;

    // Reinstalled, sharded this time (the chart's Role then also lets it list and delete
    // Leases): a new operator adopts what is there, nothing created or changed twice.
    release.install(&["operator.shards=auto", &allow_ledger])?;
    let kubeconfig = service_account_kubeconfig(&cp, scratch.path(), RELEASE)?;
    let manager_kubeconfig = service_account_kubeconfig(&cp, scratch.path(), rbac::MANAGER)?;
    let _manager = rbac::start(&cp, &manager_kubeconfig, "again")?;
    let op = start_as_deployed(&cp, &kubeconfig, &cache, "again")?;
    let result = reinstalled_adopts_what_is_there(&cp, &op, &ledger_dir, events_before);
    result.map_err(|e| with_log_tails(e, &[("operator", &op)], 60))
}

/// Every object the release rendered exists, and the core CRDs are Established.
fn expect_the_release_objects(release: &Release<'_>) -> anyhow::Result<()> {
    let cp = release.helm.cp;
    // kubectl fails on the first that does not exist.
    let manifest = release
        .helm
        .run(&["get", "manifest", RELEASE, "-n", SYSTEM])?;
    let got = cp.kubectl_stdin(&["get", "-f", "-", "-o", "name"], manifest.as_bytes())?;
    ensure!(
        got.status.success(),
        "release objects missing: {}",
        String::from_utf8_lossy(&got.stderr)
    );
    let names = String::from_utf8_lossy(&got.stdout).into_owned();
    for kind in [
        "serviceaccount/",
        "clusterrole.rbac",
        "clusterrolebinding.rbac",
        "role.rbac",
        "rolebinding.rbac",
        "deployment.apps/",
    ] {
        ensure!(names.contains(kind), "no {kind} in the release: {names}");
    }
    cp.wait_established("kraken.dev/core=true", "60s")?;
    Ok(())
}

/// A Provider from the chart's mirror, objects reconciled through it, a ConfigExport, the
/// Lease held, Events recorded and EC2Instances on moto: all under the chart's
/// ServiceAccount, with nothing forbidden.
fn works_under_its_own_identity(
    cp: &ControlPlane,
    op: &Operator,
    operator_kubeconfig: &Path,
    ledger_dir: &Path,
) -> anyhow::Result<()> {
    // A Provider with no mirror of its own installs from the chart's providerMirror.
    cp.apply_yaml(
        "",
        &json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "Provider",
        "metadata": {"name": "fixture"},
        "spec": {"source": FIXTURE_ADDRESS, "version": "1.0.0", "resources": ["fixture_object"]}})
        .to_string(),
    )?;
    wait_provider_ready(cp, "fixture")?;
    // RBAC follows the install: the fixture's kinds, and the new namespace's Secrets.
    let granted = rbac::until_granted(operator_kubeconfig, "patch", OBJECTS, "default")?;
    println!(
        "fixture: the operator may patch its kinds {} ms after the Provider is Ready",
        granted.as_millis()
    );
    cp.create_namespace(TEAM)?;
    let granted = rbac::until_granted(operator_kubeconfig, "get", "secrets", TEAM)?;
    println!(
        "{TEAM}: the operator may read its Secrets {} ms after it was created",
        granted.as_millis()
    );
    cp.apply_yaml(TEAM, &yaml_documents(&scenario(ledger_dir)))?;
    let first = reconciled(cp, OBJECTS, "first")?;
    let second = reconciled(cp, OBJECTS, "second")?;
    let first_id = first["status"]["atProvider"]["id"]
        .as_str()
        .context("first has no id")?
        .to_owned();
    ensure!(
        second["status"]["atProvider"]["name"] == format!("after-{first_id}"),
        "second: {}",
        second["status"]
    );
    let exported = wait_for(CONVERGE, "the ConfigMap exported", || {
        cp.get_json_opt(TEAM, "configmaps", "exported")
    })?;
    ensure!(
        exported["data"]["first"] == first_id.as_str(),
        "exported: {}",
        exported["data"]
    );
    ensure!(
        ledger::live_objects(ledger_dir) == 2,
        "the ledger holds {}",
        ledger::live_objects(ledger_dir)
    );
    rbac::a_rotated_secret_reaches_its_object(cp, ledger_dir)?;
    let lease = cp.get_json(SYSTEM, "leases.coordination.k8s.io", RELEASE)?;
    ensure!(
        lease["spec"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| h.contains("kraken-first")),
        "lease: {}",
        lease["spec"]
    );
    let events = cp.kubectl(&["-n", TEAM, "get", "events", "-o", "name"])?;
    ensure!(!events.trim().is_empty(), "no Events recorded in {TEAM}");
    ec2::native_ec2(cp)?;
    no_forbidden(op)?;
    Ok(())
}

/// helm upgrade: the Deployment follows the values; CRDs are Helm's to install, never to
/// upgrade (docs/operations.md says how to upgrade them).
fn upgrade_follows_the_values(release: &Release<'_>, crds_before: &str) -> anyhow::Result<()> {
    let cp = release.helm.cp;
    let chart = &release.chart;
    let mirror_set = &release.mirror_set;
    release.helm.run(&[
        "upgrade",
        RELEASE,
        chart,
        "-n",
        SYSTEM,
        "--reuse-values",
        "--set",
        "replicas=2",
        "--set",
        "operator.concurrency=8",
    ])?;
    let deploy = cp.get_json(SYSTEM, "deployments", RELEASE)?;
    ensure!(
        deploy["spec"]["replicas"] == 2,
        "replicas after upgrade: {}",
        deploy["spec"]["replicas"]
    );
    let args = deploy["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    ensure!(
        args.contains("--concurrency=8")
            && args.contains(&mirror_set["operator.providerMirror=".len()..]),
        "args after upgrade: {args}"
    );
    ensure!(
        crd_version(cp)? == crds_before,
        "helm upgrade touched the CRDs"
    );
    Ok(())
}

/// helm uninstall: the chart's objects go; CRDs, custom resources and cloud objects stay.
fn expect_uninstall_leaves_what_is_not_its_own(
    cp: &ControlPlane,
    ledger_dir: &Path,
) -> anyhow::Result<()> {
    for gone in ["serviceaccount", "deployment", "role"] {
        ensure!(
            cp.get_json_opt(SYSTEM, gone, RELEASE)?.is_none(),
            "{gone} {RELEASE} is still there"
        );
    }
    ensure!(
        cp.get_json_opt("", "clusterrole", RELEASE)?.is_none(),
        "the ClusterRole is still there"
    );
    ensure!(
        cp.get_json_opt("", "crd", "providers.core.kraken.dev")?
            .is_some(),
        "helm uninstall removed the CRDs"
    );
    for name in ["first", "second"] {
        ensure!(
            cp.get_json_opt(TEAM, OBJECTS, name)?.is_some(),
            "{name} went with the release"
        );
    }
    ensure!(
        ledger::live_objects(ledger_dir) == 2,
        "the cloud objects went with the release"
    );
    Ok(())
}

/// The reinstalled operator reconciles both objects without a write to the cloud (still
/// `events_before` events), and tears them down in the hub's order.
fn reinstalled_adopts_what_is_there(
    cp: &ControlPlane,
    op: &Operator,
    ledger_dir: &Path,
    events_before: usize,
) -> anyhow::Result<()> {
    // Both objects passed through the new operator (its first reconciles after it took
    // the Lease), then the ledger is read.
    wait_for(
        CONVERGE,
        "the new operator's reconciles of both objects",
        || {
            // Finished reconciles (the duration is observed at the end of one).
            let runs = op.metric_where("kraken_reconcile_duration_seconds_count", |labels| {
                labels
                    .iter()
                    .any(|(k, v)| k == "kind" && v == "Object.fixture.tf.kraken.dev")
            });
            Ok(runs.is_ok_and(|n| n >= 2.0).then_some(()))
        },
    )?;
    reconciled(cp, OBJECTS, "first")?;
    reconciled(cp, OBJECTS, "second")?;
    let members = op.metric("kraken_shard_members")?;
    ensure!(
        members == 1.0,
        "the sharded operator sees {members} members"
    );
    let events = ledger::event_log(ledger_dir)?;
    ensure!(
        events.len() == events_before,
        "the reinstalled operator wrote to the cloud: {:?}",
        &events[events_before..]
    );
    // Everything at once: the hub tears down consumers before what they consume.
    let out = "configexports.core.kraken.dev";
    cp.kubectl(&["-n", TEAM, "delete", out, "out", "--wait=false"])?;
    let objects = ["second", "first"];
    cp.kubectl(&[
        "-n",
        TEAM,
        "delete",
        OBJECTS,
        objects[0],
        objects[1],
        "--wait=false",
    ])?;
    wait_for(CONVERGE, "both objects deleted in the ledger", || {
        let live = ledger::live_objects(ledger_dir);
        if live == 0 {
            return Ok(Some(()));
        }
        let left: Vec<String> = objects
            .iter()
            .filter_map(|n| cp.get_json_opt(TEAM, OBJECTS, n).ok().flatten())
            .map(|o| describe(&o))
            .collect();
        bail!("{live} left in the ledger; objects: {left:?}")
    })?;
    no_forbidden(op)?;
    Ok(())
}

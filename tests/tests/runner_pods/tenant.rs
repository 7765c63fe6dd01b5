//! The namespace user against the `pods` placement, through impersonation: a tenant who may
//! edit Kraken's kinds, Secrets, ServiceAccounts, Pods and Deployments of its namespace (what a
//! namespace editor has) tries to give its runner a ServiceAccount with rights of its own, to
//! allow that account itself, and to take the operator's client key. Each fails.

use anyhow::{Context as _, ensure};
use kraken_tests::operator::bed::wait_condition;
use serde_json::json;

use super::bed::{NS, PodsBed, WAIT};

const TENANT: &str = "mallory";
/// A ServiceAccount the administrator made for something else, with rights worth having.
const PRIVILEGED: &str = "ci-deployer";

fn bind_tenant(bed: &PodsBed) -> anyhow::Result<()> {
    let verbs = json!([
        "get", "list", "watch", "create", "update", "patch", "delete"
    ]);
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "tenant", "namespace": NS},
        "rules": [
            {"apiGroups": ["core.kraken.dev", "fixture.tf.kraken.dev", "data.fixture.tf.kraken.dev"],
             "resources": ["*"], "verbs": verbs},
            {"apiGroups": [""], "resources": ["secrets", "configmaps", "serviceaccounts", "pods"],
             "verbs": verbs},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": verbs}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "tenant", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": TENANT}]});
    // The administrator's account: it may read every Secret of the cluster.
    let reader = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "ci-deployer-reads-secrets"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": PRIVILEGED, "namespace": NS}]});
    for doc in [role, binding, reader] {
        bed.cp.apply_yaml(NS, &doc.to_string())?;
    }
    bed.cp
        .kubectl(&["-n", NS, "create", "serviceaccount", PRIVILEGED])?;
    Ok(())
}

/// `kubectl --as=mallory ARGS`: Ok(stdout) when it succeeds, else Err(stderr).
fn as_tenant(bed: &PodsBed, args: &[&str], input: &str) -> anyhow::Result<Result<String, String>> {
    let who = format!("--as={TENANT}");
    let mut all = vec![who.as_str()];
    all.extend(args);
    let out = bed.cp.kubectl_stdin(&all, input.as_bytes())?;
    Ok(if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

pub fn expect_the_tenant_cannot_choose_the_runners_identity(bed: &PodsBed) -> anyhow::Result<()> {
    bind_tenant(bed)?;
    // A ProviderConfig naming the privileged account: admitted (the tenant may write
    // ProviderConfigs), refused by the operator, and no runner is made for it.
    let pc = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
        "metadata": {"name": "stolen", "namespace": NS},
        "spec": {"providerRef": {"name": "fixture"}, "config": {"ledgerDir": bed.ledger()},
                 "runner": {"placement": "pods", "serviceAccountName": PRIVILEGED}}});
    as_tenant(bed, &["apply", "-f", "-"], &pc.to_string())?
        .map_err(|e| anyhow::anyhow!("the tenant may write ProviderConfigs: {e}"))?;
    let message = wait_condition(
        &bed.cp,
        (NS, "providerconfigs.core.kraken.dev", "stolen"),
        ("Ready", "False", "ProviderConfigInvalid"),
        "kraken.dev/runner-service-accounts",
        WAIT,
    )?;
    eprintln!("the tenant's ProviderConfig: {message}");
    ensure!(
        bed.cp
            .get_json_opt(NS, "deployments", "kraken-runner-stolen")?
            .is_none(),
        "a runner was made under {PRIVILEGED}"
    );
    // Allowing the account itself: the Namespace is the administrator's.
    let annotate = format!("kraken.dev/runner-service-accounts={PRIVILEGED}");
    let refused = as_tenant(bed, &["annotate", "namespace", NS, &annotate], "")?
        .err()
        .context("the tenant annotated its Namespace")?;
    ensure!(refused.contains("forbidden"), "{refused}");
    // The operator's client key lives in the operator's namespace.
    let refused = as_tenant(
        bed,
        &["-n", "default", "get", "secret", "kraken-runner-client"],
        "",
    )?
    .err()
    .context("the tenant read the operator's runner client key")?;
    ensure!(refused.contains("forbidden"), "{refused}");
    as_tenant(
        bed,
        &[
            "-n",
            NS,
            "delete",
            "providerconfig",
            "stolen",
            "--wait=false",
        ],
        "",
    )?
    .map_err(|e| anyhow::anyhow!("deleting the refused ProviderConfig: {e}"))?;
    Ok(())
}

//! `kraken rbac-manager`: RBAC that follows installs (the chart runs it beside the operator).

use std::path::PathBuf;

use clap::Args;

pub const RBAC_MANAGER_ABOUT: &str =
    "Grant the operator what its installed Providers need, and nothing else.

The operator's own ClusterRole names only Kraken's fixed groups. Each Provider installs API groups
at runtime (<provider>.tf.kraken.dev, data.<provider>.tf.kraken.dev), and RBAC has no wildcard
for a group suffix. This process, under a ServiceAccount of its own, keeps for each Provider a
ClusterRole `<release>-provider-<name>` over the groups of its CRDs (only groups ending in
.tf.kraken.dev are ever granted) and a ClusterRoleBinding to the operator's ServiceAccount, and
deletes both once the Provider is gone. The operator waits for the grant before it starts a new
kind's controller.

It also grants the operator Secrets and ConfigMaps namespace by namespace: a RoleBinding
`<release>-tenant` to the ClusterRole --tenant-role in every namespace --tenant-namespaces
selects, except --exclude-namespace (by default the cluster's own: kube-system, kube-public,
kube-node-lease). A label selector cannot narrow what RBAC lets one read, so the namespaces are
chosen here instead. Each RoleBinding carries the finalizer kraken.dev/tenant-access: when a
namespace is deleted it stays until no Kraken finalizer remains on the namespace's content, so
the managed resources there can still read their state and destroy what they created.

Every object it writes is labelled kraken.dev/rbac-manager=<release>. Creating RBAC objects that
grant what it does not hold needs the `escalate` and `bind` verbs: the chart gives them to this
process only (docs/security.md says who may grant what).";

#[derive(Debug, Args)]
pub struct RbacManagerArgs {
    /// Kubeconfig to use; defaults to KUBECONFIG, ~/.kube/config, then the in-cluster account.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The release it writes for: the prefix of the names it writes and its label's value.
    #[arg(long, default_value = "kraken", value_name = "NAME")]
    pub release: String,
    /// The operator's ServiceAccount, as NAMESPACE/NAME.
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_account)]
    pub operator_service_account: (String, String),
    /// The ClusterRole each tenant RoleBinding names (default: <release>-tenant).
    #[arg(long, value_name = "NAME")]
    pub tenant_role: Option<String>,
    /// A label selector: only namespaces it matches are granted (default: every namespace).
    #[arg(long, value_name = "SELECTOR")]
    pub tenant_namespaces: Option<String>,
    /// A namespace never granted. Repeatable; when given, replaces the default list
    /// (kube-system, kube-public, kube-node-lease).
    #[arg(long, value_name = "NAME")]
    pub exclude_namespace: Vec<String>,
    /// A full pass at least this often, whatever the watches say.
    #[arg(long, default_value = "5m", value_parser = super::operator::parse_duration, value_name = "DURATION")]
    pub resync: std::time::Duration,
}

fn parse_account(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!(
            "{s:?} is not NAMESPACE/NAME (e.g. kraken-system/kraken)"
        )),
    }
}

pub async fn run(args: RbacManagerArgs) -> anyhow::Result<()> {
    let client = kraken_operator::client(args.kubeconfig.as_deref(), 0).await?;
    let exclude = if args.exclude_namespace.is_empty() {
        kraken_rbac::default_excluded()
    } else {
        args.exclude_namespace.into_iter().collect()
    };
    let (operator_namespace, operator_name) = args.operator_service_account;
    let opts = kraken_rbac::Options {
        tenant_role: args
            .tenant_role
            .unwrap_or_else(|| format!("{}-tenant", args.release)),
        release: args.release,
        operator_namespace,
        operator_name,
        namespace_selector: args.tenant_namespaces.filter(|s| !s.trim().is_empty()),
        policy: kraken_rbac::NamespacePolicy { exclude },
        resync: args.resync,
    };
    tokio::select! {
        result = kraken_rbac::run(client, opts) => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
        () = terminated() => Ok(()),
    }
}

async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operator_account_is_namespace_slash_name() {
        assert_eq!(
            parse_account("kraken-system/kraken"),
            Ok(("kraken-system".into(), "kraken".into()))
        );
        for bad in ["kraken", "/kraken", "ns/", "a/b/c"] {
            assert!(parse_account(bad).is_err(), "{bad}");
        }
    }
}

//! `kraken rbac-manager`: RBAC that follows installs.
//!
//! The operator's own ClusterRole (the chart's) names only Kraken's fixed groups. A Provider
//! installs API groups at runtime (`<provider>.tf.kraken.dev`, `data.<provider>.tf.kraken.dev`)
//! and RBAC has no wildcard for a group suffix, so this process, under an identity of its own,
//! grants the operator each installed Provider's groups (a ClusterRole and a ClusterRoleBinding
//! per Provider, from the CRDs labelled as the Provider's, only for groups ending in
//! `.tf.kraken.dev`) and takes them away when the Provider is gone. It also grants the operator
//! Secrets and ConfigMaps namespace by namespace (a RoleBinding to the tenant ClusterRole in each
//! namespace the policy selects, never in the excluded ones), since a label selector cannot
//! narrow what RBAC lets one read. A tenant RoleBinding carries a finalizer: while a namespace
//! is deleted, its managed resources still need their Secrets to be destroyed.
//!
//! It reads only cluster-scoped objects an administrator writes (Providers), CRDs (metadata)
//! and Namespaces, and runs no provider code: it is the one component allowed to `escalate`
//! and `bind`, apart from the operator, which is not.

pub mod apply;
pub mod desired;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt as _, stream};
use k8s_openapi::api::core::v1::Namespace as CoreNamespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};
use tokio::sync::Notify;

use kraken_core_kinds::Provider;
use kraken_core_kinds::generated::PROVIDER_NAME_LABEL;

pub use desired::{Crd, Desired, Namespace, NamespacePolicy, desired};

/// What the manager grants, and to whom.
#[derive(Debug, Clone)]
pub struct Options {
    /// The release it writes for: the prefix of what it names, and the value of its label.
    pub release: String,
    /// The operator's ServiceAccount.
    pub operator_namespace: String,
    pub operator_name: String,
    /// The ClusterRole a tenant RoleBinding names (Secrets and ConfigMaps).
    pub tenant_role: String,
    /// Which namespaces are granted: a label selector (`None`: all of them).
    pub namespace_selector: Option<String>,
    pub policy: NamespacePolicy,
    /// A full pass at least this often, whatever the watches say.
    pub resync: Duration,
}

impl Options {
    /// The name of the RoleBinding in each tenant namespace.
    pub fn tenant_binding(&self) -> String {
        format!("{}-tenant", self.release)
    }
}

/// After a change, how long to gather more before a pass (an install creates many CRDs).
const SETTLE: Duration = Duration::from_millis(200);
/// After a failed pass, when to try again.
const RETRY: Duration = Duration::from_secs(5);

/// Runs until the process is stopped: watches Providers, Provider CRDs and Namespaces, and after
/// each change (and every `resync`) makes the cluster hold what [`desired`] decides.
pub async fn run(client: Client, opts: Options) -> anyhow::Result<()> {
    let changed = Arc::new(Notify::new());
    let (providers, crds, namespaces) = watch_all(&client, &opts, &changed);
    for (what, ready) in [
        ("Providers", providers.wait_until_ready().await),
        ("CRDs", crds.wait_until_ready().await),
        ("Namespaces", namespaces.wait_until_ready().await),
    ] {
        ready.map_err(|e| anyhow::anyhow!("watching {what}: {e}"))?;
    }
    tracing::info!(release = %opts.release, operator = %format!("{}/{}", opts.operator_namespace, opts.operator_name), "RBAC manager started");
    loop {
        let want = desired(
            &providers.state().iter().map(|p| p.name_any()).collect(),
            &crds_of(&crds),
            &namespaces_of(&namespaces),
            &opts.policy,
        );
        let wait = match apply::sync(&client, &opts, &want).await {
            Ok(changes) => {
                if !changes.is_empty() {
                    tracing::info!(
                        granted = changes.granted.len(),
                        revoked = changes.revoked.len(),
                        "RBAC follows the installs"
                    );
                }
                opts.resync
            }
            Err(e) => {
                tracing::warn!("an RBAC pass failed (again in {}s): {e:#}", RETRY.as_secs());
                RETRY
            }
        };
        tokio::select! {
            () = changed.notified() => tokio::time::sleep(SETTLE).await,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

type Meta<K> = Store<PartialObjectMeta<K>>;

/// Starts the three watches; each event wakes `changed`.
fn watch_all(
    client: &Client,
    opts: &Options,
    changed: &Arc<Notify>,
) -> (
    Meta<Provider>,
    Meta<CustomResourceDefinition>,
    Store<CoreNamespace>,
) {
    let (providers, p_writer) = reflector::store();
    let (crds, c_writer) = reflector::store();
    let (namespaces, n_writer) = reflector::store();
    let p_api: Api<PartialObjectMeta<Provider>> = Api::all(client.clone());
    let c_api: Api<PartialObjectMeta<CustomResourceDefinition>> = Api::all(client.clone());
    let n_api: Api<CoreNamespace> = Api::all(client.clone());
    let n_config = match &opts.namespace_selector {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    let events = stream::select_all([
        watcher(p_api, watcher::Config::default())
            .default_backoff()
            .reflect(p_writer)
            .map(|e| e.map(|_| ()))
            .boxed(),
        watcher(
            c_api,
            watcher::Config::default().labels(PROVIDER_NAME_LABEL),
        )
        .default_backoff()
        .reflect(c_writer)
        .map(|e| e.map(|_| ()))
        .boxed(),
        watcher(n_api, n_config)
            .default_backoff()
            .reflect(n_writer)
            .map(|e| e.map(|_| ()))
            .boxed(),
    ]);
    let changed = changed.clone();
    tokio::spawn(events.for_each(move |event| {
        let changed = changed.clone();
        async move {
            match event {
                Ok(()) => changed.notify_one(),
                Err(e) => tracing::warn!("watching what RBAC follows: {e}"),
            }
        }
    }));
    (providers, crds, namespaces)
}

/// The Provider CRDs as the core reads them: a CRD's name is `<plural>.<group>`.
fn crds_of(store: &Meta<CustomResourceDefinition>) -> Vec<Crd> {
    store
        .state()
        .iter()
        .filter_map(|crd| {
            let provider = crd.labels().get(PROVIDER_NAME_LABEL)?.clone();
            let name = crd.name_any();
            let (plural, group) = name.split_once('.')?;
            Some(Crd {
                provider,
                group: group.to_owned(),
                plural: plural.to_owned(),
            })
        })
        .collect()
}

fn namespaces_of(store: &Store<CoreNamespace>) -> Vec<Namespace> {
    store
        .state()
        .iter()
        .map(|ns| Namespace {
            name: ns.name_any(),
            terminating: ns.metadata.deletion_timestamp.is_some(),
            finalizers_remaining: ns
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c.type_ == "NamespaceFinalizersRemaining" && c.status == "True")
                })
                .and_then(|c| c.message.clone()),
        })
        .collect()
}

/// The names excluded by default: the cluster's own namespaces.
pub fn default_excluded() -> BTreeSet<String> {
    ["kube-system", "kube-public", "kube-node-lease"]
        .into_iter()
        .map(str::to_owned)
        .collect()
}

//! Making the cluster hold what [`desired`](crate::desired) decided: the Providers' ClusterRoles
//! and their bindings, the tenant RoleBindings; and taking away what it no longer holds.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

use super::Options;
use super::desired::{Desired, TENANT_FINALIZER};

/// Field manager of everything the RBAC manager writes.
pub const FIELD_MANAGER: &str = "kraken-rbac-manager";
/// Label on everything the RBAC manager writes: the release it writes for.
pub const RELEASE_LABEL: &str = "kraken.dev/rbac-manager";
/// Label on a Provider's ClusterRole and binding: the Provider's name.
const PROVIDER_LABEL: &str = kraken_core_kinds::generated::PROVIDER_NAME_LABEL;

/// What one pass changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub granted: Vec<String>,
    pub revoked: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.granted.is_empty() && self.revoked.is_empty()
    }
}

/// The name of a Provider's ClusterRole and of its binding.
pub fn provider_role_name(release: &str, provider: &str) -> String {
    format!("{release}-provider-{provider}")
}

fn labels(opts: &Options, provider: Option<&str>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (RELEASE_LABEL.to_owned(), opts.release.clone()),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            FIELD_MANAGER.to_owned(),
        ),
    ]);
    if let Some(p) = provider {
        labels.insert(PROVIDER_LABEL.to_owned(), p.to_owned());
    }
    labels
}

fn operator_subject(opts: &Options) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: opts.operator_name.clone(),
        namespace: Some(opts.operator_namespace.clone()),
        api_group: None,
    }
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// One pass: writes what `want` has and the cluster lacks, deletes what it has and `want` does
/// not. Errors of one object are logged and the others still written; the first is returned.
pub async fn sync(client: &Client, opts: &Options, want: &Desired) -> anyhow::Result<Changes> {
    let mut changes = Changes::default();
    let mut first_error = None;
    let mut note = |r: anyhow::Result<()>| {
        if let Err(e) = r {
            tracing::warn!("{e:#}");
            first_error.get_or_insert(e);
        }
    };
    let selector = ListParams::default().labels(&format!("{RELEASE_LABEL}={}", opts.release));
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role_bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let held: BTreeMap<String, Option<Vec<PolicyRule>>> = roles
        .list(&selector)
        .await?
        .into_iter()
        .map(|r| (r.name_any(), r.rules))
        .collect();
    let bound: Vec<String> = role_bindings
        .list_metadata(&selector)
        .await?
        .into_iter()
        .map(|b| b.name_any())
        .collect();
    for (provider, rules) in &want.provider_roles {
        let name = provider_role_name(&opts.release, provider);
        let same = held.get(&name).is_some_and(|r| r.as_ref() == Some(rules));
        if same && bound.contains(&name) {
            continue;
        }
        note(grant_provider(client, opts, provider, rules).await);
        changes
            .granted
            .push(format!("Provider {provider}'s groups (ClusterRole {name})"));
    }
    let wanted: Vec<String> = want
        .provider_roles
        .keys()
        .map(|p| provider_role_name(&opts.release, p))
        .collect();
    let present: std::collections::BTreeSet<&String> = held.keys().chain(&bound).collect();
    for name in present {
        if wanted.contains(name) {
            continue;
        }
        note(revoke_provider(client, name).await);
        changes
            .revoked
            .push(format!("a Provider's groups (ClusterRole {name})"));
    }
    note(sync_tenants(client, opts, want, &selector, &mut changes).await);
    match first_error {
        Some(e) => Err(e),
        None => Ok(changes),
    }
}

async fn grant_provider(
    client: &Client,
    opts: &Options,
    provider: &str,
    rules: &[PolicyRule],
) -> anyhow::Result<()> {
    let name = provider_role_name(&opts.release, provider);
    let meta = ObjectMeta {
        name: Some(name.clone()),
        labels: Some(labels(opts, Some(provider))),
        ..ObjectMeta::default()
    };
    let role = ClusterRole {
        metadata: meta.clone(),
        rules: Some(rules.to_vec()),
        aggregation_rule: None,
    };
    let binding = ClusterRoleBinding {
        metadata: meta,
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: name.clone(),
        },
        subjects: Some(vec![operator_subject(opts)]),
    };
    Api::<ClusterRole>::all(client.clone())
        .patch(
            &name,
            &apply_params(),
            &Patch::Apply(&with_kind(&role, "ClusterRole")?),
        )
        .await
        .map_err(|e| anyhow::anyhow!("writing ClusterRole {name}: {e}"))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(
            &name,
            &apply_params(),
            &Patch::Apply(&with_kind(&binding, "ClusterRoleBinding")?),
        )
        .await
        .map_err(|e| anyhow::anyhow!("writing ClusterRoleBinding {name}: {e}"))?;
    tracing::info!(provider, role = %name, "granted the operator a Provider's groups");
    Ok(())
}

/// The binding goes first: the grant ends with it.
async fn revoke_provider(client: &Client, name: &str) -> anyhow::Result<()> {
    let dp = DeleteParams::default();
    for result in [
        Api::<ClusterRoleBinding>::all(client.clone())
            .delete(name, &dp)
            .await
            .map(|_| ()),
        Api::<ClusterRole>::all(client.clone())
            .delete(name, &dp)
            .await
            .map(|_| ()),
    ] {
        match result {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => anyhow::bail!("revoking {name}: {e}"),
        }
    }
    tracing::info!(role = %name, "revoked a Provider's groups from the operator: the Provider is gone");
    Ok(())
}

/// The tenant RoleBindings: one per granted namespace, each with [`TENANT_FINALIZER`].
async fn sync_tenants(
    client: &Client,
    opts: &Options,
    want: &Desired,
    selector: &ListParams,
    changes: &mut Changes,
) -> anyhow::Result<()> {
    let all: Api<RoleBinding> = Api::all(client.clone());
    let existing: BTreeMap<String, RoleBinding> = all
        .list(selector)
        .await?
        .into_iter()
        .filter(|b| b.name_any() == opts.tenant_binding())
        .filter_map(|b| Some((b.namespace()?, b)))
        .collect();
    for ns in &want.tenant_namespaces {
        let current = existing.get(ns);
        if current.is_some_and(|b| is_current(b, opts)) {
            continue;
        }
        write_tenant(client, opts, ns).await?;
        changes
            .granted
            .push(format!("Secrets and ConfigMaps of namespace {ns}"));
    }
    for (ns, binding) in &existing {
        if want.tenant_namespaces.contains(ns) || want.held_namespaces.contains(ns) {
            continue;
        }
        release_tenant(client, opts, ns, binding).await?;
        changes
            .revoked
            .push(format!("Secrets and ConfigMaps of namespace {ns}"));
    }
    Ok(())
}

fn is_current(b: &RoleBinding, opts: &Options) -> bool {
    b.metadata.deletion_timestamp.is_none()
        && b.role_ref.name == opts.tenant_role
        && b.role_ref.kind == "ClusterRole"
        && b.subjects.as_deref() == Some(&[operator_subject(opts)][..])
        && b.finalizers().iter().any(|f| f == TENANT_FINALIZER)
}

async fn write_tenant(client: &Client, opts: &Options, ns: &str) -> anyhow::Result<()> {
    let name = opts.tenant_binding();
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.to_owned()),
            labels: Some(labels(opts, None)),
            finalizers: Some(vec![TENANT_FINALIZER.to_owned()]),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: opts.tenant_role.clone(),
        },
        subjects: Some(vec![operator_subject(opts)]),
    };
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .patch(
            &name,
            &apply_params(),
            &Patch::Apply(&with_kind(&binding, "RoleBinding")?),
        )
        .await
        .map_err(|e| anyhow::anyhow!("writing RoleBinding {ns}/{name}: {e}"))?;
    tracing::info!(namespace = ns, role = %opts.tenant_role, "granted the operator the namespace's Secrets and ConfigMaps");
    Ok(())
}

/// Takes the finalizer off (nothing in the namespace waits for Kraken any more, or the policy
/// no longer selects it) and deletes the binding.
async fn release_tenant(
    client: &Client,
    opts: &Options,
    ns: &str,
    binding: &RoleBinding,
) -> anyhow::Result<()> {
    let name = opts.tenant_binding();
    let api: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    if binding.finalizers().iter().any(|f| f == TENANT_FINALIZER) {
        let kept: Vec<&String> = binding
            .finalizers()
            .iter()
            .filter(|f| *f != TENANT_FINALIZER)
            .collect();
        let patch = json!({"metadata": {
            "finalizers": kept,
            "resourceVersion": binding.metadata.resource_version,
        }});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => anyhow::bail!("releasing RoleBinding {ns}/{name}: {e}"),
        }
    }
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => anyhow::bail!("deleting RoleBinding {ns}/{name}: {e}"),
    }
    tracing::info!(
        namespace = ns,
        "revoked the operator's access to the namespace's Secrets and ConfigMaps"
    );
    Ok(())
}

/// `object` as JSON with its `apiVersion` and `kind` (server-side apply needs both).
fn with_kind<T: serde::Serialize>(object: &T, kind: &str) -> anyhow::Result<serde_json::Value> {
    let mut value = serde_json::to_value(object)?;
    value["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
    value["kind"] = json!(kind);
    Ok(value)
}

//! What the cluster serves a document as: a generated managed kind (planned through its
//! provider), another kind it serves (applied as-is), or a kind it does not serve (an error:
//! applying it would fail too). One aggregated discovery answers all of them; a managed kind's
//! CRD is read once for its resource type.

use std::collections::HashMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Discovery, Scope};
use serde_json::Value as Json;

use super::{Shared, Subject};
use kraken_core_kinds::KindInfo;

/// The kinds the cluster serves, and the managed kinds' CRDs read so far.
pub(super) struct Kinds {
    discovery: Discovery,
    managed: HashMap<(String, String), Result<KindInfo, String>>,
}

/// What a document is.
pub(super) enum Class {
    Managed(KindInfo),
    AsIs(String),
    Failed(String),
}

impl Kinds {
    pub(super) async fn discover(client: &kube::Client) -> Result<Self, kube::Error> {
        // Aggregated discovery is one or two requests; an API server older than 1.26 has
        // none, and is asked group by group instead.
        let discovery = match Discovery::new(client.clone()).run_aggregated().await {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!("aggregated discovery failed ({e}); discovering group by group");
                Discovery::new(client.clone()).run().await?
            }
        };
        Ok(Self {
            discovery,
            managed: HashMap::new(),
        })
    }

    /// The API groups with a producer kind named `kind` (any case): what a `resource`
    /// reference without `apiVersion` can mean, as the hub's index answers it in the operator.
    pub(super) fn groups_of(&self, kind: &str) -> Vec<String> {
        let mut groups: Vec<String> = self
            .discovery
            .groups()
            .filter(|g| producer_group(g.name()))
            .filter(|g| {
                g.recommended_resources()
                    .iter()
                    .any(|(r, _)| r.kind.eq_ignore_ascii_case(kind))
            })
            .map(|g| g.name().to_owned())
            .collect();
        groups.sort();
        groups
    }

    /// The resource of `kind` in `group`, at the version the cluster prefers.
    pub(super) fn resource(&self, group: &str, kind: &str) -> Option<ApiResource> {
        let g = self.discovery.get(group)?;
        g.recommended_kind(kind).map(|(r, _)| r)
    }
}

/// Groups whose kinds publish outputs: the generated ones (data source kinds too: what they
/// read is published like a resource's state) and the native EC2 kind's.
fn producer_group(group: &str) -> bool {
    group.ends_with(kraken_codegen::GROUP_SUFFIX) || group == kraken_core_kinds::ec2::GROUP
}

/// The subject of `doc` and what it is; `namespace` for namespaced documents naming none.
pub(super) async fn classify(
    shared: &mut Shared,
    doc: &Json,
    namespace: &str,
) -> (Option<Subject>, Class) {
    fn text(v: Option<&Json>) -> Option<&str> {
        v.and_then(Json::as_str).filter(|s| !s.is_empty())
    }
    let (Some(api_version), Some(kind)) = (text(doc.get("apiVersion")), text(doc.get("kind")))
    else {
        return (
            None,
            Class::Failed("apiVersion and kind must be set".to_owned()),
        );
    };
    let Some(name) = text(doc.pointer("/metadata/name")) else {
        let why = format!(
            "{kind} ({api_version}) has no metadata.name (generateName cannot be planned: the name is chosen at creation)"
        );
        return (None, Class::Failed(why));
    };
    let (group, version) = match api_version.rsplit_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let Some((resource, caps)) = shared.kinds.discovery.resolve_gvk(&gvk) else {
        let subject = Subject {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: text(doc.pointer("/metadata/namespace")).map(str::to_owned),
            name: name.to_owned(),
        };
        let why = format!(
            "the cluster does not serve kind {kind} in {api_version}: check apiVersion and kind, or install \
             its CRD first (a Provider installs the kinds of its spec.resources)"
        );
        return (Some(subject), Class::Failed(why));
    };
    let namespace = match caps.scope {
        Scope::Namespaced => Some(
            text(doc.pointer("/metadata/namespace"))
                .unwrap_or(namespace)
                .to_owned(),
        ),
        Scope::Cluster => None,
    };
    let subject = Subject {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        namespace,
        name: name.to_owned(),
    };
    let class = if group.ends_with(kraken_codegen::GROUP_SUFFIX) {
        match managed_kind(shared, &resource).await {
            Ok(kind) => Class::Managed(kind),
            Err(why) => Class::Failed(why),
        }
    } else {
        Class::AsIs(as_is_why(group, kind))
    };
    (Some(subject), class)
}

fn as_is_why(group: &str, kind: &str) -> String {
    if group == kraken_core_kinds::ec2::GROUP && kind == "EC2Instance" {
        "a native EC2 kind: its controller plans against EC2 itself; not planned (applied as-is)"
            .to_owned()
    } else {
        "not a managed kind: not planned (applied as-is)".to_owned()
    }
}

/// The managed kind `resource` is, from its CRD (read once per kind).
async fn managed_kind(shared: &mut Shared, resource: &ApiResource) -> Result<KindInfo, String> {
    let key = (resource.group.clone(), resource.kind.clone());
    if let Some(known) = shared.kinds.managed.get(&key) {
        return known.clone();
    }
    let name = format!("{}.{}", resource.plural, resource.group);
    let crds: Api<CustomResourceDefinition> = Api::all(shared.client.clone());
    let found = match crds.get_opt(&name).await {
        Ok(Some(crd)) => KindInfo::from_crd(&crd).ok_or_else(|| {
            format!(
                "the kind {} ({}) is not reconciled: its CRD {name} is suspended (its Provider was deleted) \
                 or not established, or lacks the tf.kraken.dev annotations",
                resource.kind, resource.api_version
            )
        }),
        Ok(None) => Err(format!("the CRD {name} of kind {} is gone", resource.kind)),
        Err(e) => Err(format!(
            "cannot read the CRD {name}: {}",
            kraken_kit::errors::chain(&e)
        )),
    };
    shared.kinds.managed.insert(key, found.clone());
    found
}

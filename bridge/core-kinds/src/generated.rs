//! Which kinds the operator reconciles, read from their CRDs.
//!
//! A generated CRD says everything the generic controller needs in its annotations
//! (`tf.kraken.dev/provider`, `tf.kraken.dev/resource-type`, `tf.kraken.dev/schema-version`):
//! the controller never needs per-kind code. Data-source kinds (`data.<provider>.tf.kraken.dev`,
//! kind `Data<Name>`) are read-only views: the same controller reads them and never writes
//! outside.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::{ApiResource, GroupVersionKind};

/// Label on each CRD a Provider installed: the Provider's name (the RBAC manager grants the
/// operator the groups of these CRDs while the Provider exists).
pub const PROVIDER_NAME_LABEL: &str = "kraken.dev/provider-name";
/// Label `"true"` on a CRD whose Provider was deleted: its kind is not reconciled.
pub const SUSPENDED_LABEL: &str = "kraken.dev/suspended";
/// Annotation naming the provider's source address.
pub const PROVIDER_ANNOTATION: &str = "tf.kraken.dev/provider";
/// Annotation naming the Terraform resource type.
pub const RESOURCE_TYPE_ANNOTATION: &str = "tf.kraken.dev/resource-type";
/// Annotation holding the schema version the CRD was generated from.
pub const SCHEMA_VERSION_ANNOTATION: &str = "tf.kraken.dev/schema-version";

/// One generated kind the operator reconciles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindInfo {
    pub resource: ApiResource,
    /// Provider source address from the CRD (informational: the ProviderConfig decides which
    /// binary serves a resource).
    pub provider: String,
    pub type_name: String,
    /// A data source kind (group `data.<provider>.tf.kraken.dev`): read, never written.
    pub data_source: bool,
}

impl KindInfo {
    /// The kind a CRD declares, if it is a generated managed-resource kind that is Established
    /// and not suspended (its Provider was deleted).
    pub fn from_crd(crd: &CustomResourceDefinition) -> Option<Self> {
        let suspended = crd
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SUSPENDED_LABEL))
            .is_some_and(|v| v == "true");
        let established = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if suspended || !established {
            return None;
        }
        Self::any_from_crd(crd)
    }

    /// The kind a CRD declares, if it is a generated managed-resource kind, whatever its state.
    pub fn any_from_crd(crd: &CustomResourceDefinition) -> Option<Self> {
        let annotations = crd.metadata.annotations.as_ref()?;
        let provider = annotations.get(PROVIDER_ANNOTATION)?.clone();
        let type_name = annotations.get(RESOURCE_TYPE_ANNOTATION)?.clone();
        let spec = &crd.spec;
        if !spec.group.ends_with(kraken_codegen::GROUP_SUFFIX) {
            return None;
        }
        let data_source = spec.group.starts_with("data.");
        let version = spec
            .versions
            .iter()
            .find(|v| v.storage)
            .or_else(|| spec.versions.first())?;
        let gvk = GroupVersionKind::gvk(&spec.group, &version.name, &spec.names.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, &spec.names.plural);
        Some(Self {
            resource,
            provider,
            type_name,
            data_source,
        })
    }

    /// `Kind.group`, for logs and metric labels.
    pub fn label(&self) -> String {
        format!("{}.{}", self.resource.kind, self.resource.group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(group: &str, established: bool) -> CustomResourceDefinition {
        let json = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {
                "name": format!("objects.{group}"),
                "annotations": {
                    PROVIDER_ANNOTATION: "registry.kraken.dev/kraken/fixture",
                    RESOURCE_TYPE_ANNOTATION: "fixture_object",
                }
            },
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"kind": "Object", "plural": "objects"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true}]
            },
            "status": {"conditions": [{
                "type": "Established",
                "status": if established { "True" } else { "False" },
            }]}
        });
        serde_json::from_value(json).expect("valid CRD")
    }

    #[test]
    fn reads_generated_kinds_only_once_established() {
        let kind = KindInfo::from_crd(&crd("fixture.tf.kraken.dev", true)).expect("kind");
        assert_eq!(kind.type_name, "fixture_object");
        assert_eq!(kind.resource.plural, "objects");
        assert_eq!(kind.resource.api_version, "fixture.tf.kraken.dev/v1alpha1");
        assert_eq!(kind.label(), "Object.fixture.tf.kraken.dev");
        assert!(KindInfo::from_crd(&crd("fixture.tf.kraken.dev", false)).is_none());
        assert!(!kind.data_source);
        let data = KindInfo::from_crd(&crd("data.fixture.tf.kraken.dev", true)).expect("data");
        assert!(data.data_source);
        assert!(KindInfo::from_crd(&crd("example.com", true)).is_none());
    }

    #[test]
    fn a_suspended_kind_is_not_reconciled() {
        let mut c = crd("fixture.tf.kraken.dev", true);
        let label = super::SUSPENDED_LABEL;
        let labels = c.metadata.labels.get_or_insert_default();
        labels.insert(label.into(), "true".into());
        assert!(KindInfo::from_crd(&c).is_none());
        assert!(KindInfo::any_from_crd(&c).is_some());
        c.metadata
            .labels
            .get_or_insert_default()
            .insert(label.into(), "false".into());
        assert!(KindInfo::from_crd(&c).is_some());
    }
}

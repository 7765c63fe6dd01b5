//! The dependency hub's kinds, all namespaced in `core.kraken.dev/v1alpha1`:
//!
//! - [`StateDeclaration`]: the outputs a managed resource publishes, named `<kind>-<name>`
//!   (lowercased) and owned by it; sensitive outputs live in a Secret it names.
//! - [`DependencyRequest`]: internal. The values one consumer needs (its `spec.valuesFrom`),
//!   each with the Terraform type of the argument it feeds; the hub resolves, converts and
//!   writes them into status (sensitive ones into a Secret the request owns).
//! - [`ConfigExport`]: writes chosen values into a ConfigMap or Secret it owns.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use kraken_kit::conditions::Condition;

/// Most references one DependencyRequest or ConfigExport holds.
pub const REFERENCES_MAX_ITEMS: u64 = 256;

/// The object that owns a StateDeclaration or DependencyRequest.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// A managed resource's outputs, for other objects to reference (valuesFrom, ConfigExport).
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "core.kraken.dev",
    version = "v1alpha1",
    kind = "StateDeclaration",
    namespaced,
    derive = "PartialEq",
    shortname = "ksd",
    category = "kraken",
    label("kraken.dev/core", "true"),
    doc = "The outputs a Kraken-managed object publishes, named <kind>-<name>; written by the \
           operator. Other objects reference them through valuesFrom or a ConfigExport.",
    printcolumn(name = "PRODUCER", type_ = "string", json_path = ".spec.producer.kind"),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct StateDeclarationSpec {
    /// The object whose outputs these are.
    pub producer: ObjectReference,
    /// The non-sensitive outputs (the producer's status.atProvider), Kubernetes field names.
    #[serde(default)]
    #[schemars(schema_with = "free_form_object")]
    pub outputs: Json,
    /// Sensitive outputs: kept in a Secret, never here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitive: Option<SensitiveOutputs>,
}

/// Where a StateDeclaration's sensitive outputs are.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SensitiveOutputs {
    /// The Secret (same namespace, owned by the StateDeclaration's producer) holding one key
    /// per output, its value as JSON.
    pub secret_name: String,
    /// The outputs it holds (Kubernetes field names).
    #[serde(default)]
    pub keys: Vec<String>,
}

/// One value to resolve: from another object's outputs, a ConfigMap, a Secret or a template.
/// Exactly one source is set.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ValueReference {
    /// Where the value goes: an argument path below the consumer's forProvider (dotted
    /// Kubernetes field names), or a key of a ConfigExport's target.
    pub path: String,
    /// The Terraform type the value must convert to (Terraform's type JSON: "string",
    /// ["list","number"], "dynamic" to take it as it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub r#type: Option<Json>,
    /// The value feeds a sensitive argument: it is kept out of status even if its source is not
    /// secret.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sensitive: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_declaration: Option<StateDeclarationSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<KeySource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeySource>,
    /// A string with ${...} references: ${resource:KIND/NAME:PATH},
    /// ${stateDeclaration:NAME:PATH}, ${configMap:NAME:KEY}, ${secret:NAME:KEY}; $${ is a
    /// literal ${.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub template: Option<String>,
}

/// An output of another Kraken-managed object (its StateDeclaration `<kind>-<name>.<group>`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSource {
    /// API version of the referenced kind (random.tf.kraken.dev/v1alpha1). Needed only when
    /// two installed providers have a kind of this name; otherwise the reference is refused
    /// with the condition Ambiguous.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Its kind (Pet, Object, EC2Instance).
    pub kind: String,
    pub name: String,
    /// The output, a dotted path of Kubernetes field names (id, instances.0.privateIp).
    pub path: String,
    /// Must be the consumer's own namespace when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A value of a StateDeclaration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct StateDeclarationSource {
    pub name: String,
    /// A dotted path of Kubernetes field names into its outputs.
    pub path: String,
    /// Must be the consumer's own namespace when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A key of a ConfigMap or Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct KeySource {
    pub name: String,
    pub key: String,
    /// Must be the consumer's own namespace when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Internal: the values one object (the consumer, its owner) takes from others. Written by
/// the consumer's controller, resolved by the hub into status; users never write it.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "core.kraken.dev",
    version = "v1alpha1",
    kind = "DependencyRequest",
    namespaced,
    status = "DependencyRequestStatus",
    derive = "PartialEq",
    shortname = "kdr",
    label("kraken.dev/core", "true"),
    doc = "Internal: the values one Kraken object takes from other objects, resolved by the \
           operator's dependency hub. Created and deleted by the operator.",
    printcolumn(name = "CONSUMER", type_ = "string", json_path = ".spec.consumer.kind"),
    printcolumn(
        name = "READY",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(
        name = "REASON",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].reason"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DependencyRequestSpec {
    /// The object that needs the values.
    pub consumer: ObjectReference,
    #[serde(default)]
    #[schemars(length(max = REFERENCES_MAX_ITEMS))]
    pub references: Vec<ValueReference>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct DependencyRequestStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The resolved, converted values that are not sensitive, by path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<ResolvedValue>,
    /// The Secret (owned by this request) holding the sensitive values: one key per path
    /// (dots kept), the value as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// The paths whose values are in that Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitive_paths: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct ResolvedValue {
    pub path: String,
    #[schemars(schema_with = "any_json")]
    pub value: Json,
}

/// Writes values of other objects into a ConfigMap or Secret, and keeps it in sync.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "core.kraken.dev",
    version = "v1alpha1",
    kind = "ConfigExport",
    namespaced,
    status = "ConfigExportStatus",
    derive = "PartialEq",
    shortname = "kce",
    category = "kraken",
    label("kraken.dev/core", "true"),
    doc = "Writes chosen values (outputs of Kraken objects, ConfigMap or Secret keys, templates) \
           into a ConfigMap or Secret that it owns, and keeps it in sync.",
    printcolumn(name = "TARGET", type_ = "string", json_path = ".spec.target.kind"),
    printcolumn(name = "NAME", type_ = "string", json_path = ".spec.target.name"),
    printcolumn(
        name = "READY",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigExportSpec {
    pub target: ExportTarget,
    /// One entry per key of the target; each takes its value from exactly one source.
    #[schemars(length(min = 1, max = REFERENCES_MAX_ITEMS))]
    pub data: Vec<ExportValue>,
}

/// The ConfigMap or Secret to write (same namespace). It must not exist unless this
/// ConfigExport made it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportTarget {
    pub kind: TargetKind,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum TargetKind {
    ConfigMap,
    Secret,
}

/// One key of the target and where its value comes from (exactly one source).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.resource) ? 1 : 0) + (has(self.stateDeclaration) ? 1 : 0) + (has(self.configMapKeyRef) ? 1 : 0) + (has(self.secretKeyRef) ? 1 : 0) + (has(self.template) ? 1 : 0) == 1",
    "message": "a data entry takes its value from exactly one of resource, stateDeclaration, configMapKeyRef, secretKeyRef, template"
}]))]
pub struct ExportValue {
    /// The key in the target's data.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_declaration: Option<StateDeclarationSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<KeySource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeySource>,
    /// A string with ${...} references (see DependencyRequest's template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub template: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ConfigExportStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}

//! The native EC2 kinds in `aws.kraken.dev/v1alpha1`: [`EC2Instance`] (a group of `count`
//! identical instances) and [`AwsConfig`] (region, endpoint and credentials).
//!
//! Every argument of an EC2Instance can also come from `spec.valuesFrom`, exactly like the
//! arguments of a generated kind: the same entry shape (the schema is codegen's), the same
//! admission rules — a required argument (`imageId`, `instanceType`) is set literally or named
//! by an entry, no argument is set both ways, and an entry names an argument that exists.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

use crate::provider_config::SecretKeyRef;
use kraken_kit::conditions::Condition;

/// The API group of the native AWS kinds.
pub const GROUP: &str = "aws.kraken.dev";

/// Most instances one EC2Instance manages.
pub const COUNT_MAX: i64 = 100;

/// The arguments `spec.valuesFrom` may set, with the Terraform type the hub converts each
/// value to, and whether paths below the argument (`tags.team`, `securityGroupIds.0`,
/// `rootVolume.size`) are accepted.
pub const ARGUMENTS: &[(&str, &str, bool)] = &[
    ("imageId", "\"string\"", false),
    ("instanceType", "\"string\"", false),
    ("count", "\"number\"", false),
    ("subnetId", "\"string\"", false),
    ("securityGroupIds", "[\"list\",\"string\"]", true),
    ("keyName", "\"string\"", false),
    ("userData", "\"string\"", false),
    ("tags", "[\"map\",\"string\"]", true),
    (
        "rootVolume",
        "[\"object\",{\"size\":\"number\",\"type\":\"string\"}]",
        true,
    ),
];

/// EC2 instances managed through the AWS SDK, no Terraform in between: `count` instances of
/// one configuration, each created idempotently, kept as declared (tags, type, running), and
/// terminated with the object.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[kube(
    group = "aws.kraken.dev",
    version = "v1alpha1",
    kind = "EC2Instance",
    plural = "ec2instances",
    namespaced,
    status = "EC2InstanceStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "ec2",
    category = "kraken",
    category = "kraken-aws",
    label("kraken.dev/core", "true"),
    doc = "EC2 instances managed natively through the AWS SDK: count instances of one \
           configuration, created idempotently, kept as declared and terminated with the object.",
    printcolumn(
        name = "READY",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(
        name = "SYNCED",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Synced')].status"
    ),
    printcolumn(name = "RUNNING", type_ = "integer", json_path = ".status.running"),
    printcolumn(name = "TYPE", type_ = "string", json_path = ".spec.instanceType"),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.imageId) || (has(self.valuesFrom) && self.valuesFrom.exists(v, v.path == 'imageId'))",
     "message": "spec.imageId is required: set it, or take it from spec.valuesFrom",
     "fieldPath": ".imageId", "reason": "FieldValueRequired"},
    {"rule": "has(self.instanceType) || (has(self.valuesFrom) && self.valuesFrom.exists(v, v.path == 'instanceType'))",
     "message": "spec.instanceType is required: set it, or take it from spec.valuesFrom",
     "fieldPath": ".instanceType", "reason": "FieldValueRequired"},
    {"rule": "!has(self.valuesFrom) || !self.valuesFrom.exists(v, (has(self.imageId) && v.path == 'imageId') || (has(self.instanceType) && v.path == 'instanceType') || (has(self.count) && v.path == 'count') || (has(self.subnetId) && v.path == 'subnetId') || (has(self.securityGroupIds) && (v.path == 'securityGroupIds' || v.path.startsWith('securityGroupIds.'))) || (has(self.keyName) && v.path == 'keyName') || (has(self.userData) && v.path == 'userData') || (has(self.tags) && (v.path == 'tags' || v.path.startsWith('tags.'))) || (has(self.rootVolume) && (v.path == 'rootVolume' || v.path.startsWith('rootVolume.'))))",
     "message": "a value is set both in spec and in spec.valuesFrom; set each argument in one place",
     "fieldPath": ".valuesFrom", "reason": "FieldValueInvalid"},
    {"rule": "!has(self.valuesFrom) || self.valuesFrom.all(v, v.path in ['imageId', 'instanceType', 'count', 'subnetId', 'securityGroupIds', 'keyName', 'userData', 'tags', 'rootVolume', 'rootVolume.size', 'rootVolume.type'] || v.path.startsWith('tags.') || v.path.startsWith('securityGroupIds.'))",
     "message": "spec.valuesFrom names an argument EC2Instance does not have; it has imageId, instanceType, count, subnetId, securityGroupIds, keyName, userData, tags and rootVolume (size, type)",
     "fieldPath": ".valuesFrom", "reason": "FieldValueInvalid"},
    {"rule": "!has(self.importIds) || !has(self.count) || size(self.importIds) <= self.count",
     "message": "spec.importIds adopts one instance per index: list at most spec.count ids",
     "fieldPath": ".importIds", "reason": "FieldValueInvalid"}
]))]
pub struct EC2InstanceSpec {
    /// The AwsConfig (same namespace) with the region, endpoint and credentials. Without it,
    /// the operator's own environment is used: the AWS SDK's standard credential chain and
    /// region (AWS_REGION, else us-east-1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws_config_ref: Option<NameRef>,
    /// The AMI to launch. Changing it replaces the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub image_id: Option<String>,
    /// The instance type (t3.micro). Changing it stops, resizes and starts each instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub instance_type: Option<String>,
    /// How many instances (default 1). Scaling down terminates the highest indices first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = COUNT_MAX))]
    pub count: Option<i64>,
    /// The subnet to launch into; the account's default subnet when unset. Changing it
    /// replaces the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub subnet_id: Option<String>,
    /// Security groups (ids); the VPC's default group when unset. Changed in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub security_group_ids: Option<Vec<String>>,
    /// The key pair for SSH. Changing it replaces the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub key_name: Option<String>,
    /// User data, as plain text (Kraken encodes it). Never shown in status; changing it
    /// replaces the instances. Take it from a Secret through valuesFrom when it holds secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16384))]
    pub user_data: Option<String>,
    /// Tags of every instance. Kraken owns the whole tag set: tags changed or added outside
    /// Kraken are reverted (except the aws: ones). Keys starting with kraken.dev/ are Kraken's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 40, "x-kubernetes-validations" = [
        {"rule": "self.all(k, !k.startsWith('kraken.dev/') && !k.startsWith('aws:'))",
         "message": "tag keys starting with kraken.dev/ or aws: are reserved"}
    ]))]
    pub tags: Option<BTreeMap<String, String>>,
    /// The root EBS volume. Changing it replaces the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<RootVolume>,
    /// Arguments taken from other objects (outputs of Kraken resources, ConfigMap and Secret
    /// keys, templates) instead of being set here, one entry per argument path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "values_from_schema")]
    pub values_from: Vec<Json>,
    /// Adopt existing instances instead of launching: importIds[i] becomes the instance at
    /// index i (when that index has none). At most count ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = COUNT_MAX))]
    pub import_ids: Vec<String>,
    /// How often to look for drift (terminated, stopped or retagged instances) and correct it,
    /// as a Go duration (default 10m; 0 turns it off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"))]
    pub drift_interval: Option<String>,
    /// Delete (default) terminates the instances with the object; Orphan leaves them running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
    /// Replace (default) replaces instances when imageId, subnetId, keyName, userData or
    /// rootVolume change; Refuse leaves them and reports ReplaceRefused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_policy: Option<ReplacePolicy>,
}

/// An object in the same namespace, by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
pub struct NameRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// The root EBS volume of each instance.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default, Hash)]
#[serde(rename_all = "camelCase")]
pub struct RootVolume {
    /// Size in GiB (the AMI's when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65536))]
    pub size: Option<i64>,
    /// Volume type: gp3, gp2, io1, io2, st1, sc1 or standard (the AMI's when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["gp3", "gp2", "io1", "io2", "st1", "sc1", "standard"]))]
    pub r#type: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum DeletionPolicy {
    #[default]
    Delete,
    Orphan,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum ReplacePolicy {
    #[default]
    Replace,
    Refuse,
}

/// What the controller observed and did.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct EC2InstanceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready: every instance runs as declared. Synced: the last pass did what the spec asks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// One entry per index: the instance serving it (or being launched for it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceStatus>,
    /// How many instances are running.
    #[serde(default)]
    pub running: i64,
    /// The last change planned, before it is carried out (a replacement shows here first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_plan: Option<LastPlan>,
    /// The DependencyRequest resolving spec.valuesFrom, while there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency_request: Option<String>,
    /// A digest of the resolved spec (valuesFrom merged) the last pass worked toward: a
    /// correction made while it is unchanged is drift, and reported as such.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_digest: Option<String>,
    /// The StateDeclaration last published: {name, hash}.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub state_declaration: Option<Json>,
}

/// One index of an EC2Instance.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    pub index: i64,
    /// How many instances were launched for this index before the current one (a
    /// replacement or a relaunch after an outside termination counts one up). With the
    /// object's uid and the index it makes the launch's idempotency token.
    #[serde(default)]
    pub launch: i64,
    /// The instance id; empty while a launch is in flight.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// pending, running, stopping, stopped, shutting-down, terminated, or launching.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subnet_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub private_ip: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub public_ip: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub private_dns: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub public_dns: String,
    /// A launch in flight for this index (written before RunInstances): a pass that does not
    /// find its instance launches with the same number again, never a second one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_launch: Option<i64>,
}

/// A change planned for the instances.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct LastPlan {
    /// Create, Update, Replace, Delete or NoOp.
    pub action: String,
    /// The spec fields that cause it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The instances it touches (ids).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<String>,
}

/// Where EC2Instances reach AWS: region, endpoint and credentials.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[kube(
    group = "aws.kraken.dev",
    version = "v1alpha1",
    kind = "AwsConfig",
    namespaced,
    status = "AwsConfigStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "awscfg",
    category = "kraken",
    label("kraken.dev/core", "true"),
    doc = "Region, endpoint and credentials for Kraken's native AWS kinds (EC2Instance). \
           Credentials come from Secret keys, or from the AWS SDK's standard chain when unset.",
    printcolumn(name = "REGION", type_ = "string", json_path = ".spec.region"),
    printcolumn(name = "ENDPOINT", type_ = "string", json_path = ".spec.endpoint"),
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
pub struct AwsConfigSpec {
    /// The region (us-east-1); from the standard chain (AWS_REGION) when unset, else
    /// us-east-1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[a-z0-9-]+$"))]
    pub region: Option<String>,
    /// The EC2 endpoint URL, for emulators and private endpoints (http://127.0.0.1:5000);
    /// the region's public endpoint when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://[^\s]+$"))]
    pub endpoint: Option<String>,
    /// Static credentials from Secret keys; the AWS SDK's standard credential chain of the
    /// operator (environment, profile, web identity, container and instance roles) when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<AwsCredentials>,
}

/// Whether the credentials Secrets are there (and held for the EC2Instances that need them),
/// and, while a deletion waits, which EC2Instances still use the AwsConfig.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct AwsConfigStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready: every Secret spec.credentials names exists and may be used. While a deletion
    /// waits: Ready=False, reason InUse, naming the EC2Instances that still use it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Access keys held in Secrets of the AwsConfig's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsCredentials {
    /// The access key id.
    pub access_key_id_secret_ref: SecretKeyRef,
    /// The secret access key.
    pub secret_access_key_secret_ref: SecretKeyRef,
    /// A session token, for temporary credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token_secret_ref: Option<SecretKeyRef>,
}

impl AwsConfigSpec {
    /// The Secrets `credentials` reads.
    pub fn secret_names(&self) -> std::collections::BTreeSet<String> {
        let Some(c) = &self.credentials else {
            return Default::default();
        };
        [
            Some(&c.access_key_id_secret_ref),
            Some(&c.secret_access_key_secret_ref),
            c.session_token_secret_ref.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(|r| r.name.clone())
        .collect()
    }
}

fn values_from_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = kraken_codegen::crd::values_from_schema();
    schema["items"]["properties"]["path"]["description"] = json!(
        "The argument to set: imageId, instanceType, count, subnetId, securityGroupIds \
         (or securityGroupIds.N), keyName, userData, tags (or tags.KEY), rootVolume (or \
         rootVolume.size, rootVolume.type)."
    );
    schema["description"] = json!(
        "Arguments taken from other objects instead of being set in spec, one entry per argument path."
    );
    schemars::Schema::try_from(schema).unwrap_or_default()
}

fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt as _;

    fn spec_schema() -> Json {
        let crd = serde_json::to_value(EC2Instance::crd()).unwrap_or_default();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
    }

    #[test]
    fn ec2_instance_crd_shape() {
        let crd = EC2Instance::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("ec2instances.aws.kraken.dev")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        let spec = spec_schema();
        // Nothing is required by the schema: the CEL rules let a value come from valuesFrom.
        assert_eq!(spec.get("required"), None);
        let rules = spec["x-kubernetes-validations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(rules.len(), 5);
        let p = &spec["properties"];
        assert_eq!(p["count"]["maximum"].as_f64(), Some(100.0));
        assert_eq!(p["valuesFrom"]["maxItems"], json!(64));
        assert_eq!(
            p["valuesFrom"]["items"]["required"],
            json!(["path"]),
            "valuesFrom entries are codegen's"
        );
        let policies = p["deletionPolicy"]["enum"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            policies.contains(&json!("Delete")) && policies.contains(&json!("Orphan")),
            "{}",
            p["deletionPolicy"]
        );
        // Every argument a valuesFrom entry may name is a spec field.
        for (name, _, _) in ARGUMENTS {
            assert!(p.get(*name).is_some(), "spec.{name} is missing");
        }
    }

    #[test]
    fn argument_types_are_terraform_type_json() {
        for (name, ty, _) in ARGUMENTS {
            let parsed: Result<Json, _> = serde_json::from_str(ty);
            assert!(parsed.is_ok(), "{name}: {ty}");
        }
    }

    #[test]
    fn an_empty_spec_deserializes_with_defaults() -> serde_json::Result<()> {
        let spec: EC2InstanceSpec = serde_json::from_value(json!({}))?;
        assert_eq!(spec.count, None);
        assert!(spec.values_from.is_empty());
        let cfg: AwsConfigSpec = serde_json::from_value(json!({"region": "eu-west-1"}))?;
        assert_eq!(cfg.region.as_deref(), Some("eu-west-1"));
        assert!(cfg.credentials.is_none());
        Ok(())
    }
}

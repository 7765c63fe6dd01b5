//! `Provider` (core.kraken.dev/v1alpha1, cluster-scoped): a Terraform provider installed at
//! runtime. Reconciling one fetches and verifies the package, reads the binary's
//! schema, generates CRDs for the resource types asked for in `spec.resources`, applies them and
//! lets the operator's kind supervisor start their controllers — no rebuild, no restart.
//!
//! Activation is lazy: no kind is installed until a pattern in `spec.resources` names it
//! (`kraken activate` adds names there), because every CRD costs the API server memory and
//! discovery time (about 2.6 MiB per CRD measured with the AWS schema, docs/benchmarks.md).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::provider_config::SOURCE_PATTERN;
use kraken_kit::conditions::Condition;

/// Most entries of `spec.resources`.
pub const RESOURCES_MAX_ITEMS: u64 = 2048;

/// A Terraform provider, installed at runtime: its package is fetched and verified, and a kind
/// is installed for each resource type spec.resources selects. ProviderConfigs refer to it by
/// name in spec.providerRef.
// See ProviderConfigSpec for why clippy's duplicated_attributes is silenced.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "core.kraken.dev",
    version = "v1alpha1",
    kind = "Provider",
    status = "ProviderStatus",
    derive = "PartialEq",
    shortname = "kprov",
    category = "kraken",
    label("kraken.dev/core", "true"),
    doc = "A Terraform provider installed at runtime: fetched, verified, and turned into \
           Kubernetes kinds for the resource types listed in spec.resources.",
    printcolumn(name = "SOURCE", type_ = "string", json_path = ".spec.source"),
    printcolumn(name = "VERSION", type_ = "string", json_path = ".status.version"),
    printcolumn(name = "KINDS", type_ = "integer", json_path = ".status.kindCount"),
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
pub struct ProviderSpec {
    /// The provider's source address, [host/]namespace/type: hashicorp/random, or
    /// registry.opentofu.org/hashicorp/random for another registry host.
    #[schemars(regex(pattern = SOURCE_PATTERN), length(min = 3, max = 255))]
    pub source: String,

    /// A Terraform version constraint ("~> 3.6", ">= 1.0, < 2.0", "= 3.6.0"); the newest
    /// version when unset. Once installed, the version in status.version is kept while it still
    /// matches, as a lock file would keep it; change this field to upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub version: Option<String>,

    /// Where to fetch the package instead of the provider's registry: an https:// network
    /// mirror, or a directory the operator can read in Terraform's filesystem mirror layout.
    /// Unset: the operator's --provider-mirror if it has one, else the registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub mirror: Option<String>,

    /// Glob patterns (*, ?, [...]) over Terraform resource type names (random_pet, aws_s3_*)
    /// whose kinds to install. Empty installs none: every CRD costs the API server memory, so
    /// kinds are activated as they are needed (kraken activate PROVIDER TYPE... adds here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = RESOURCES_MAX_ITEMS), extend("x-kubernetes-list-type" = "set"))]
    pub resources: Vec<String>,

    /// Glob patterns over the provider's data source type names (aws_ami, aws_iam_*) whose
    /// read-only kinds to install, in group data.<provider>.tf.kraken.dev with kind names
    /// prefixed Data (aws_ami → DataAmi). Empty installs none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = RESOURCES_MAX_ITEMS), extend("x-kubernetes-list-type" = "set"))]
    pub data_sources: Vec<String>,

    /// Accept registry packages whose registry publishes no signing key (checksums are still
    /// verified). Mirrors are trusted by their own hashes.
    #[serde(default)]
    pub allow_unsigned: bool,

    /// When the Provider is deleted, also delete the CRDs it installed, but only if no object
    /// of any of those kinds exists. By default deleting a Provider stops reconciling its kinds
    /// and leaves CRDs and resources untouched.
    #[serde(default, rename = "removeCRDs")]
    pub remove_crds: bool,
}

/// What the operator installed for this Provider.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderStatus {
    /// Ready: the package is installed and verified and every selected kind is Established.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The metadata.generation the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The canonical source address (registry.terraform.io/hashicorp/random).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The version spec.version resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The plugin protocol major version the provider speaks (5 or 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<i32>,
    /// The package's hashes in Terraform's lock file notation (h1:, zh:).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hashes: Vec<String>,
    /// The OpenPGP key id that signed the registry's checksum list, when it was signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
    /// The mirror the package came from (spec.mirror, else the operator's --provider-mirror);
    /// absent when it came from the registry. `kraken plan` fetches the same build from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<String>,
    /// How many resource types the provider offers (each could become a kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_types: Option<i64>,
    /// How many kinds are installed (the length of kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind_count: Option<i64>,
    /// The kinds installed for this Provider.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<InstalledKind>,
}

/// One kind installed for a Provider.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstalledKind {
    /// The Terraform resource type (random_pet).
    pub resource_type: String,
    /// The kind (Pet).
    pub kind: String,
    /// The API group and version (random.tf.kraken.dev/v1alpha1).
    pub api_version: String,
    /// The CRD's name (pets.random.tf.kraken.dev).
    pub crd: String,
}

//! `ProviderConfig` (core.kraken.dev/v1alpha1, namespaced): the provider block a managed
//! resource's `spec.providerConfigRef` points at.
//!
//! The types are the source of truth: the CRD is derived from them (kube's `CustomResource`
//! and schemars), so the controller that reads a `ProviderConfig` and the schema the API
//! server enforces cannot drift. Doc comments on fields become `kubectl explain` text.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use kraken_kit::conditions::Condition;

/// Most `configFrom` entries; the same bound as a managed resource's `valuesFrom`.
pub const CONFIG_FROM_MAX_ITEMS: u64 = kraken_codegen::cel::VALUES_FROM_MAX_ITEMS;
/// Longest `configFrom[].path`; the same bound as a managed resource's `valuesFrom[].path`.
pub const CONFIG_FROM_PATH_MAX_LENGTH: u64 = kraken_codegen::cel::VALUES_FROM_PATH_MAX_LENGTH;
/// `spec.maxConcurrency` when not given.
pub const DEFAULT_MAX_CONCURRENCY: i32 = 10;

/// `[host/]namespace/type`, as Terraform parses a provider source address: an optional
/// hostname (with an optional port), a namespace and a type of letters, digits and dashes.
/// The API server evaluates patterns with Go's RE2, so no look-around.
pub const SOURCE_PATTERN: &str = "^([A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?/)?\
     [A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?/[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$";

/// How to configure one Terraform provider for the managed resources of this namespace that
/// reference it by name in spec.providerConfigRef.
// Clippy reads the repeated `type_ = "string"` of the printcolumn(...) arguments as
// duplicated attributes; they are arguments of four distinct columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "core.kraken.dev",
    version = "v1alpha1",
    kind = "ProviderConfig",
    namespaced,
    status = "ProviderConfigStatus",
    derive = "PartialEq",
    shortname = "kpc",
    category = "kraken",
    label("kraken.dev/core", "true"),
    doc = "A Terraform provider's configuration (its provider block), referenced by managed \
           resources in the same namespace through spec.providerConfigRef.",
    printcolumn(name = "SOURCE", type_ = "string", json_path = ".spec.source"),
    printcolumn(name = "VERSION", type_ = "string", json_path = ".status.version"),
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
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.source) != has(self.providerRef)",
    "message": "set exactly one of providerRef (a Provider installed in the cluster) and source (a provider already in the operator's plugin directories)",
}]))]
pub struct ProviderConfigSpec {
    /// The Provider (core.kraken.dev, cluster-scoped) this configures, by name: the operator
    /// uses the version that Provider installed. Set this or source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_ref: Option<ProviderRef>,

    /// A provider already present in the operator's plugin directories or plugin cache, by
    /// source address, [host/]namespace/type: registry.terraform.io/hashicorp/random, or
    /// hashicorp/random for the default registry host. Set this or providerRef.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SOURCE_PATTERN), length(min = 3, max = 255))]
    pub source: Option<String>,

    /// With source: an exact provider version or a Terraform version constraint
    /// (">= 3.6, < 4.0"), resolved from the plugin directories; the newest available version
    /// when unset. Ignored with providerRef. The resolved version is reported in status.version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub version: Option<String>,

    /// The provider block as free-form JSON. Argument names are lowerCamelCase exactly as in
    /// the provider's generated CRDs, mapped back to Terraform names with the same rule as a
    /// managed resource's spec.forProvider. Sensitive values belong in configFrom, never here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub config: Option<Json>,

    /// Provider arguments taken from Secrets, for sensitive values (credentials, tokens),
    /// one entry per argument path. A path set here is merged into config; it must not also
    /// be given literally in config.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = CONFIG_FROM_MAX_ITEMS),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["path"])
    )]
    pub config_from: Vec<ConfigFrom>,

    /// Whether Kraken talks to the provider process over mutual TLS (AutoMTLS, as Terraform
    /// does). Set false only deliberately, e.g. to debug a provider that cannot do TLS.
    #[serde(default = "default_tls")]
    pub tls: bool,

    /// How many RPCs Kraken sends to one provider process at a time.
    #[serde(default = "default_max_concurrency")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_concurrency: i32,

    /// The least review the resources using this ProviderConfig get: Auto (apply at once),
    /// Manual (every create, update, replacement, drift correction and delete waits for
    /// approval of its plan) or ManualForDestructive (replacements and deletes wait). A
    /// resource's spec.planPolicy may ask for more, never less; the Namespace's label
    /// kraken.dev/plan-policy (set by administrators) is a floor below both. Unset: Auto.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_policy: Option<PlanPolicy>,

    /// Where this ProviderConfig's provider process runs. Unset: the operator's default
    /// (kraken operator --runner-placement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<RunnerSpec>,
}

/// `spec.runner` of a ProviderConfig.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct RunnerSpec {
    /// inProcess (a child of the operator: the operator's files, token and network), local
    /// (a kraken runner in a Landlock sandbox on the operator's machine: its own package, the
    /// system files and a private directory only) or pods (a runner Deployment in this
    /// namespace, under a ServiceAccount of this namespace, shared by every operator replica).
    /// A ProviderConfig may ask for more confinement than the operator's default, never less.
    /// Unset: the operator's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,

    /// pods placement only: the ServiceAccount of this namespace the runner runs as, e.g. one
    /// annotated with a cloud role (IRSA, workload identity), so the provider acts as this
    /// namespace in the cloud. It must be one an administrator allowed in the Namespace's
    /// annotation kraken.dev/runner-service-accounts (a comma-separated list). Unset:
    /// kraken-runner, which Kraken makes with no RBAC and no token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
}

/// On a Namespace, set by administrators: the ServiceAccounts (comma-separated names) a
/// ProviderConfig's `spec.runner.serviceAccountName` may name there.
pub const RUNNER_SERVICE_ACCOUNTS_ANNOTATION: &str = "kraken.dev/runner-service-accounts";

/// Where a provider process runs, from least to most confined.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Deserialize,
    serde::Serialize,
    JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Placement {
    /// A child of the operator process: its user, files, environment and network. For a
    /// single-user install and the demo only.
    InProcess,
    /// A `kraken runner` on the operator's machine, sandboxed with Landlock: it reads its own
    /// package and the system files, writes only its private directory, and reaches the
    /// operator over mutual TLS.
    Local,
    /// A runner Deployment in the ProviderConfig's namespace, under its own ServiceAccount
    /// (no token unless one is named), behind a NetworkPolicy that keeps it from the cloud's
    /// metadata endpoint and the API server; every operator replica connects to it over
    /// mutual TLS.
    Pods,
}

impl Placement {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProcess => "inProcess",
            Self::Local => "local",
            Self::Pods => "pods",
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which changes of a managed resource wait for approval of their plan. The strictest of the
/// resource's `spec.planPolicy`, its ProviderConfig's and the Namespace's label
/// `kraken.dev/plan-policy` (set by administrators) applies: more review may be asked for,
/// never less.
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize, JsonSchema,
)]
pub enum PlanPolicy {
    /// Every change is applied at once (no plan is held, nothing extra is written).
    #[default]
    Auto,
    /// Every change (create, update, replace, drift correction, delete) waits for approval.
    Manual,
    /// Replacements and deletes wait for approval; creates and in-place updates are applied
    /// at once.
    ManualForDestructive,
}

/// On a Namespace, set by administrators: the least review every resource there gets (its
/// value a [`PlanPolicy`]); a resource's or ProviderConfig's own `planPolicy` may ask for more,
/// never less.
pub const PLAN_POLICY_LABEL: &str = "kraken.dev/plan-policy";

/// The tag an existing object must carry for a resource to adopt it (`importId`,
/// `importIdentity`, EC2Instance `importIds`): `<namespace>/<name>` of that resource. Kraken
/// never writes it (tag keys under `kraken.dev/` are the owner's to set), so it is the owner's
/// consent.
pub const ADOPT_TAG: &str = "kraken.dev/adoptable-by";

/// On a Namespace, set by administrators: the Terraform resource types (comma-separated glob
/// patterns, `*` for all) whose existing objects resources there may adopt without the
/// [`ADOPT_TAG`]: types that take no tags, or a migration the administrator vouches for.
pub const ADOPTABLE_TYPES_ANNOTATION: &str = "kraken.dev/adoptable-types";

/// A cluster-scoped Provider, by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ProviderRef {
    /// Name of the Provider.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// One provider argument taken from a key of a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigFrom {
    /// The argument to set, below config: a dotted path of lowerCamelCase field names, with
    /// list indices and map keys as segments (assumeRole.0.roleArn).
    #[schemars(length(min = 1, max = CONFIG_FROM_PATH_MAX_LENGTH))]
    pub path: String,
    /// The Secret key holding the value.
    pub secret_key_ref: SecretKeyRef,
}

/// A key of a Secret in the ProviderConfig's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key within the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// What the runtime observed of the provider this ProviderConfig configures.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderConfigStatus {
    /// Ready: the provider was resolved, started and accepted this configuration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The metadata.generation the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The plugin protocol major version negotiated with the provider process (5 or 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<i32>,
    /// The provider version spec.version resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// How many managed resources use this ProviderConfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<i64>,
}

fn default_tls() -> bool {
    true
}

fn default_max_concurrency() -> i32 {
    DEFAULT_MAX_CONCURRENCY
}

/// An object whose fields the API server keeps as given: the provider's arguments are not
/// known when this CRD is built (one ProviderConfig kind serves every provider).
fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

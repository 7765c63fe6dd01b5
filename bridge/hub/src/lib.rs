//! The dependency hub: resolving the values one object takes from others.
//!
//! A consumer (a managed resource with `spec.valuesFrom`, or a ConfigExport) writes a
//! [`DependencyRequest`] that lists its references, each with the Terraform type of the
//! argument it feeds. The hub controller ([`controller`]) resolves them — outputs of
//! StateDeclarations (which is what a `resource` reference names: `<kind>-<name>.<group>`), ConfigMap
//! and Secret keys, templates over those — converts each value with Terraform's conversion
//! rules, and writes the result into the request's status, sensitive values into a Secret the
//! request owns. It keeps an [`Index`] from each referenced object to the requests that read
//! it, so a change of that object re-resolves exactly those requests (a watch, never a poll).
//! The hub's watch of the requests wakes each consumer's controller when its request changes
//! (through the [`Index`], in-process), and the consumer reads the values from the hub's cache.
//!
//! The files, by responsibility: [`parse`](mod@parse) (references and templates),
//! [`convert`](mod@convert) (paths, text, Terraform type conversion), [`resolve`](mod@resolve)
//! (one request's values from the objects read, pure), [`index`] (the [`Index`]: who reads
//! what, and what the hub shares in-process), [`cycles`] ([`find_cycle`]); the interfaces the
//! other controllers use, [`consumer`] and [`producer`]; and the hub's controllers,
//! [`controller`] (DependencyRequest) and [`export`] (ConfigExport). This root holds the names
//! they share and re-exports the pure parts.

pub mod consumer;
pub mod controller;
pub mod convert;
pub mod cycles;
pub mod export;
pub mod index;
pub mod parse;
pub mod producer;
pub mod resolve;
pub mod trust;
mod watches;

pub use convert::{convert, json_kind, lookup, to_text};
pub use cycles::find_cycle;
pub use index::{Index, Published};
pub use parse::{ObjectKey, Parsed, Part, Source, SourceKind, parse, parse_template};

/// Condition reasons of a DependencyRequest (and, prefixed, of its consumer's `Ready`).
/// On a StateDeclaration: when its producer last published new outputs (RFC 3339), for
/// `kraken_hub_propagation_seconds`.
pub const PUBLISHED_AT_ANNOTATION: &str = "kraken.dev/published-at";

pub mod reason {
    pub const RESOLVED: &str = "Resolved";
    pub const NOT_FOUND: &str = "NotFound";
    pub const PATH_NOT_FOUND: &str = "PathNotFound";
    pub const TYPE_MISMATCH: &str = "TypeMismatch";
    pub const CYCLE: &str = "Cycle";
    pub const CROSS_NAMESPACE: &str = "CrossNamespace";
    pub const INVALID_REFERENCE: &str = "InvalidReference";
    /// A value (or a template's expansion) past [`super::MAX_VALUE_BYTES`], or a request's
    /// values together past [`super::MAX_REQUEST_BYTES`].
    pub const TOO_LARGE: &str = "ValueTooLarge";
    /// A `resource` reference without `apiVersion` to a kind name two installed providers
    /// have.
    pub const AMBIGUOUS: &str = "Ambiguous";
    /// A derived object (the request, its values Secret) exists and is not this object's.
    pub const NOT_OWNED: &str = kraken_kit::conditions::reason::NOT_OWNED;
}

/// Label on a DependencyRequest: the API group of its consumer.
/// The most text one resolved value may take (a ConfigMap key, an output, a template's
/// expansion): values are written into statuses and Secrets, so none may grow without bound.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// The most text all values of one request may take together.
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;

pub const CONSUMER_GROUP_LABEL: &str = "kraken.dev/consumer-group";
/// Label on a DependencyRequest: its consumer's kind, lowercased.
pub const CONSUMER_KIND_LABEL: &str = "kraken.dev/consumer-kind";
/// On a producer: delete it even while other objects still reference its outputs.
pub use kraken_core_kinds::FORCE_DELETE_ANNOTATION;

/// The name of the StateDeclaration (and of the DependencyRequest) of object `name` of `kind`
/// in API `group`: `<kind>-<name>.<group>` ([`kraken_kit::names`]).
pub fn object_key(group: &str, kind: &str, name: &str) -> String {
    kraken_kit::names::Origin::new(group, kind, name).base()
}

/// The API group of an `apiVersion` (`random.tf.kraken.dev/v1alpha1` → `random.tf.kraken.dev`,
/// `v1` → the empty core group).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The Secret holding a DependencyRequest's sensitive values.
pub fn values_secret_name(request: &str) -> String {
    kraken_kit::names::suffixed(request, "-values")
}

/// Writes the hub's Secret `name` (a request's values, a declaration's sensitive outputs),
/// owned by `owner`, with `data`. Its controller owner makes the API server refuse the write
/// when another object controls a Secret of this name: refused as `NotOwned`.
pub(crate) async fn apply_owned_secret(
    api: &kube::Api<k8s_openapi::api::core::v1::Secret>,
    (metrics, manager): (&kraken_kit::metrics::Metrics, &str),
    (namespace, name): (&str, &str),
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    data: std::collections::BTreeMap<String, k8s_openapi::ByteString>,
) -> Result<(), kube::Error> {
    use kraken_kit::ownership;
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            owner_references: owner.map(|o| vec![o]),
            labels: Some(std::collections::BTreeMap::from([(
                kraken_core_kinds::MANAGED_BY_LABEL.to_owned(),
                "kraken".to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    metrics.api_write("secrets", "apply");
    let body = serde_json::to_value(&secret).map_err(kube::Error::SerdeError)?;
    let params = kube::api::PatchParams::apply(manager).force();
    match api
        .patch(name, &params, &kube::api::Patch::Apply(body))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if ownership::is_refusal(&e) => Err(ownership::refusal(
            &format!("Secret {name}"),
            "another object",
        )),
        Err(e) => Err(e),
    }
}

/// The Secret holding a StateDeclaration's sensitive outputs.
pub fn outputs_secret_name(declaration: &str) -> String {
    kraken_kit::names::suffixed(declaration, "-outputs")
}

/// Why a reference could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: &'static str,
    pub message: String,
}

impl Failure {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

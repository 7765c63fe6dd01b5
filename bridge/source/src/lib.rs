//! The provider source: turns what a resource points at — its ProviderConfig, the Secrets it
//! and its ProviderConfig name — into a configured provider process (from the pool) and the
//! resource's configuration value. The managed-resource controller and the ProviderConfig
//! controller both come here; neither reaches the pool or the resolver directly.
//!
//! Both controllers hold the seam [`ProviderSource`], not [`Source`], so their unit tests can
//! hand them a fake provider ([`fake::FakeSource`]).

mod error;
pub mod fake;
mod installed;
pub mod placement;
pub mod pods;
mod seam;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::Store;
use kube::{Api, Client};
use serde_json::Value as Json;

pub use error::{Error, Result};
pub use installed::{FetchInstalled, Lookup};
use kraken_core_kinds::{KindInfo, ProviderConfig};
use kraken_kit::errors::chain;
use kraken_provider::pins::PackageCheck;
use kraken_provider::pool::{PoolError, PoolKey, ProviderPool};
use kraken_provider::resolve::{Resolved, Resolver};
use kraken_provider::{LaunchOptions, Plugin, ProviderHost, ProviderSchema, TypeOf};
use kraken_value::fields::{FieldError, FieldMap, SecretRef, set_json_path};
use kraken_value::kube::from_kube_json;
use kraken_value::{PathStep, Value};
pub use seam::{Checked, ProviderSource};

/// Where configured providers come from: the process pool, the resolver that finds binaries,
/// and the ProviderConfigs the ProviderConfig controller caches.
pub struct Source {
    pub client: Client,
    pub pool: Arc<ProviderPool>,
    pub resolver: Resolver,
    /// The ProviderConfigs the ProviderConfig controller watches, once it runs: a reconcile
    /// reads its ProviderConfig here instead of from the API server.
    pub provider_configs: OnceLock<Store<ProviderConfig>>,
    /// `kraken operator --allow-provider-plaintext`: whether a ProviderConfig may turn off
    /// AutoMTLS (`tls: false`). A cluster-wide choice, not a namespace user's.
    pub allow_plaintext: bool,
    /// Where processes find and keep their binary's schema answer
    /// ([`kraken_provider::schema_cache`]); `None`: every process asks its provider.
    pub schema_cache: Option<PathBuf>,
    /// Where provider processes run ([`placement`]).
    pub placements: placement::Placements,
    /// The installed Providers, from one watch ([`Source::watch_providers`]) or one listing
    /// ([`Source::use_providers`]): what a `providerRef` reads and what pins `spec.source`.
    providers: OnceLock<Store<kraken_core_kinds::Provider>>,
    /// Checks a package against its recorded hashes before it is launched.
    check: Arc<PackageCheck>,
    /// Fetches a package an installed Provider recorded that is not here (`kraken plan`);
    /// `None`: only what is installed is launched.
    pub fetch: Option<Arc<dyn FetchInstalled>>,
    field_maps: Mutex<HashMap<(String, String, String), Arc<FieldMap>>>,
}

/// How many field maps [`Source`] keeps before dropping the unused ones: all of AWS is 1,616
/// resource types, so two versions of it fit.
const MAX_FIELD_MAPS: usize = 4096;

impl Source {
    pub fn new(client: Client, pool: Arc<ProviderPool>, resolver: Resolver) -> Self {
        Self {
            client,
            pool,
            resolver,
            provider_configs: OnceLock::new(),
            allow_plaintext: false,
            schema_cache: None,
            placements: placement::Placements::default(),
            providers: OnceLock::new(),
            check: Arc::default(),
            fetch: None,
            field_maps: Mutex::default(),
        }
    }

    /// The field map of a (provider address, version, resource type), built once. Past
    /// [`MAX_FIELD_MAPS`] the maps no reconcile holds are dropped (they are rebuilt from the
    /// schema when needed): versions and Providers that are gone do not stay in memory.
    fn field_map(
        &self,
        key: (String, String, String),
        build: impl FnOnce() -> FieldMap,
    ) -> Arc<FieldMap> {
        let mut maps = self.field_maps.lock().unwrap_or_else(|e| e.into_inner());
        if !maps.contains_key(&key) && maps.len() >= MAX_FIELD_MAPS {
            maps.retain(|_, m| Arc::strong_count(m) > 1);
        }
        maps.entry(key).or_insert_with(|| Arc::new(build())).clone()
    }
}

/// A configured provider serving one resource, with what the rest of the pass needs to talk
/// to it about that resource.
pub struct Configured {
    /// Protocol-neutral, so a fake can stand in for the pooled process.
    pub host: Arc<dyn Plugin>,
    pub schema: Arc<ProviderSchema>,
    pub fields: Arc<FieldMap>,
    /// `address version`, for logs and metrics.
    pub label: String,
    /// A digest of the ProviderConfig as configured (its uid and configuration, Secret values
    /// included): part of a plan's id, so a changed ProviderConfig makes an approval stale.
    /// Never the values themselves.
    pub config_digest: String,
    /// The ProviderConfig's default `planPolicy` for resources that set none.
    pub plan_policy: Option<kraken_core_kinds::PlanPolicy>,
    /// Configured for a data source kind: type names are data source types.
    pub data_source: bool,
}

impl Configured {
    /// The schema of the resource type (or, configured for a data source kind, the data source
    /// type) `type_name` (present: checked when the provider was dereferenced).
    pub fn resource(&self, type_name: &str) -> Result<&kraken_codegen::schema::Schema> {
        type_schema(&self.schema, type_name, self.data_source).ok_or_else(|| {
            Error::InvalidSpec(format!(
                "provider {} has no {} {type_name}",
                self.label,
                what(self.data_source)
            ))
        })
    }
}

/// The schema of resource type (or data source) `type_name`.
fn type_schema<'s>(
    schema: &'s ProviderSchema,
    type_name: &str,
    data_source: bool,
) -> Option<&'s kraken_codegen::schema::Schema> {
    if data_source {
        schema.data_source(type_name)
    } else {
        schema.resource(type_name)
    }
}

fn what(data_source: bool) -> &'static str {
    if data_source {
        "data source"
    } else {
        "resource type"
    }
}

/// The configured provider for a resource in `namespace` using ProviderConfig `pc_name`.
async fn provider(
    ctx: &Source,
    kind: &KindInfo,
    namespace: &str,
    pc_name: &str,
) -> Result<Configured> {
    // From the ProviderConfig controller's cache; a name it has not seen (yet) is read.
    let cached = ctx
        .provider_configs
        .get()
        .and_then(|s| s.get(&kube::runtime::reflector::ObjectRef::new(pc_name).within(namespace)));
    let pc = match cached {
        Some(pc) => pc,
        None => Arc::new(read_provider_config(&ctx.client, namespace, pc_name).await?),
    };
    provider_from(ctx, kind, namespace, &pc).await
}

/// The configured provider for a resource of `kind` in `namespace` using the ProviderConfig
/// `pc` as given: read from the API server by a reconcile, or not applied yet (`kraken plan`
/// over manifests that include it).
pub async fn provider_from(
    ctx: &Source,
    kind: &KindInfo,
    namespace: &str,
    pc: &ProviderConfig,
) -> Result<Configured> {
    let (resolved, host, config_digest) = configured(ctx, namespace, pc, Lookup::Watched).await?;
    let label = format!("{} {}", resolved.address, resolved.version);
    let fields = |resource: &kraken_codegen::schema::Schema| {
        let key = if kind.data_source {
            format!("data.{}", kind.type_name)
        } else {
            kind.type_name.clone()
        };
        ctx.field_map((resolved.address, resolved.version, key), || {
            FieldMap::for_resource(&kind.type_name, resource)
        })
    };
    let mut configured = resource_provider(kind, host, (label, config_digest), fields).await?;
    configured.plan_policy = pc.spec.plan_policy;
    Ok(configured)
}

/// ProviderConfig `pc_name` in `namespace`, read from the API server; errors name what is
/// missing.
pub async fn read_provider_config(
    client: &Client,
    namespace: &str,
    pc_name: &str,
) -> Result<ProviderConfig> {
    let pcs: Api<ProviderConfig> = Api::namespaced(client.clone(), namespace);
    match pcs.get_opt(pc_name).await {
        Ok(Some(pc)) => Ok(pc),
        Ok(None) => Err(Error::ProviderConfigMissing(pc_name.to_owned())),
        Err(kube::Error::SerdeError(e)) => Err(Error::ProviderConfigInvalid {
            name: pc_name.to_owned(),
            message: format!("cannot be read: {e}"),
        }),
        // The kind itself is missing: the core CRDs are not installed.
        Err(kube::Error::Api(e)) if e.code == 404 => Err(Error::ProviderConfigMissing(format!(
            "{pc_name} (the ProviderConfig kind is not installed: kubectl apply --server-side -k generated-crds/core)"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// The pooled, configured provider process a ProviderConfig describes, and a digest of the
/// ProviderConfig as configured (see [`Configured::config_digest`]).
pub async fn configured(
    ctx: &Source,
    namespace: &str,
    pc: &ProviderConfig,
    lookup: Lookup,
) -> Result<(Resolved, Arc<ProviderHost>, String)> {
    let pc_name = pc.metadata.name.as_deref().unwrap_or_default();
    let invalid = |message: String| Error::ProviderConfigInvalid {
        name: pc_name.to_owned(),
        message,
    };
    if !pc.spec.tls && !ctx.allow_plaintext {
        return Err(invalid(
            "tls: false is not allowed on this cluster (kraken operator --allow-provider-plaintext); \
             remove it to talk to the provider over mutual TLS"
                .to_owned(),
        ));
    }
    // Not in the pool key: the placement changes only with the ProviderConfig's generation
    // (which is in it) or with a restart of the operator.
    let (_, start) = ctx.placements.for_config(pc).map_err(invalid)?;
    let (resolved, dial) = package(ctx, namespace, pc, lookup, &start)
        .await
        .map_err(invalid)?;
    let config = with_config_from(&ctx.client, namespace, pc).await?;
    let key = PoolKey {
        address: resolved.address.clone(),
        version: resolved.version.clone(),
        config_name: format!("{namespace}/{pc_name}"),
        uid: pc.metadata.uid.clone().unwrap_or_default(),
        generation: pc.metadata.generation.unwrap_or_default(),
        // Secret values included: a rotated credential is a new process. Never shown (the
        // key's Display leaves it out).
        digest: format!(
            "{:016x}",
            kraken_kit::hash::fnv1a(
                format!("{config}|{}|{}", pc.spec.tls, pc.spec.max_concurrency).as_bytes()
            )
        ),
    };
    let mut launch = LaunchOptions::new(&resolved.binary);
    launch.name = format!("{} {}", resolved.address, resolved.version);
    launch.schema_cache = ctx.schema_cache.clone();
    launch.tls = pc.spec.tls;
    launch.max_concurrency = usize::try_from(pc.spec.max_concurrency).ok();
    launch.via = match start {
        placement::Start::Via(via) => Some(via),
        _ => None,
    };
    launch.dial = dial;
    let host = ctx
        .pool
        .get_with(&key, launch, |schema| build_config(schema, &config))
        .await
        .map_err(|e| match e {
            PoolError::Config { message, .. } => invalid(message),
            PoolError::Configure { summary, .. } => invalid(format!(
                "the provider rejected the configuration: {summary}"
            )),
            other => Error::ProviderUnavailable(format!("{:#}", chain(&other))),
        })?;
    let digest = config_digest(&key.uid, &key.digest);
    Ok((resolved, host, digest))
}

/// What ProviderConfig `pc` runs: the binary here, or (`pods`) the package its runner fetches
/// and the dial to that runner.
async fn package(
    ctx: &Source,
    namespace: &str,
    pc: &ProviderConfig,
    lookup: Lookup,
    start: &placement::Start,
) -> std::result::Result<(Resolved, Option<kraken_provider::remote::Dial>), String> {
    let placement::Start::Pods(settings) = start else {
        return Ok((installed::binary(ctx, pc, lookup).await?, None));
    };
    let pc_name = pc.metadata.name.as_deref().unwrap_or_default();
    let provider = installed::recorded_package(ctx, pc, lookup).await?;
    let dial =
        pods::RunnerPods::dial(&ctx.client, settings, namespace, pc, provider.clone()).await?;
    let status = provider.status.clone().unwrap_or_default();
    let resolved = Resolved {
        address: status.address.unwrap_or_default(),
        version: status.version.unwrap_or_default(),
        // Nothing runs here: the runner fetches the package itself.
        binary: PathBuf::from(format!("runner:{namespace}/{pc_name}")),
    };
    Ok((resolved, Some(dial)))
}

/// `spec.config` with the values `spec.configFrom` takes from Secrets in `namespace` merged in.
async fn with_config_from(client: &Client, namespace: &str, pc: &ProviderConfig) -> Result<Json> {
    let pc_name = pc.metadata.name.as_deref().unwrap_or_default();
    let mut config = pc
        .spec
        .config
        .clone()
        .unwrap_or_else(|| Json::Object(Default::default()));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for from in &pc.spec.config_from {
        let value = secret_value(
            &secrets,
            &from.secret_key_ref.name,
            &from.secret_key_ref.key,
        )
        .await
        .map_err(|e| match e {
            Error::SecretMissing(m) => {
                Error::SecretMissing(format!("{m} (configFrom of ProviderConfig {pc_name})"))
            }
            other => other,
        })?;
        set_json_path(&mut config, &from.path, Json::String(value)).map_err(|e| {
            Error::ProviderConfigInvalid {
                name: pc_name.to_owned(),
                message: format!("configFrom: {e}"),
            }
        })?;
    }
    Ok(config)
}

/// [`Configured::config_digest`] of the ProviderConfig with `uid` configured as `digest`.
pub fn config_digest(uid: &str, digest: &str) -> String {
    format!(
        "{:016x}",
        kraken_kit::hash::fnv1a_parts(&[uid.as_bytes(), digest.as_bytes()])
    )
}

/// `host` as the provider of `kind`: its schema must have the kind's resource type; `fields`
/// gives the (cached) field mapping of that type.
async fn resource_provider(
    kind: &KindInfo,
    host: Arc<dyn Plugin>,
    (label, config_digest): (String, String),
    fields: impl FnOnce(&kraken_codegen::schema::Schema) -> Arc<FieldMap>,
) -> Result<Configured> {
    let name = kind.type_name.as_str();
    // A resource's list resource of the same name finds it after an interrupted create.
    let wanted: &[(TypeOf, &str)] = if kind.data_source {
        &[(TypeOf::DataSource, name)]
    } else {
        &[(TypeOf::Resource, name), (TypeOf::ListResource, name)]
    };
    let schema = host
        .schema_for(wanted)
        .await
        .map_err(|e| Error::ProviderUnavailable(chain(&e)))?;
    let Some(resource) = type_schema(&schema, &kind.type_name, kind.data_source) else {
        return Err(Error::InvalidSpec(format!(
            "provider {label} has no {} {}",
            what(kind.data_source),
            kind.type_name
        )));
    };
    let fields = fields(resource);
    Ok(Configured {
        host,
        schema,
        fields,
        label,
        config_digest,
        plan_policy: None,
        data_source: kind.data_source,
    })
}

/// The provider block's value from ProviderConfig JSON (Kubernetes field names).
fn build_config(schema: &ProviderSchema, config: &Json) -> std::result::Result<Value, String> {
    let map = FieldMap::for_provider_config(&schema.provider);
    let tf = map
        .spec_to_tf(config, &mut |r: &SecretRef| {
            Err(FieldError::Invalid {
                path: r.name.clone(),
                message: "Secret references belong in spec.configFrom".into(),
            })
        })
        .map_err(|e| e.to_string())?;
    from_kube_json(&tf, &schema.provider.block.implied_type())
        .map_err(|e| format!("{}: {}", map.kube_path(&e.path), e.message))
}

/// The resource's configuration value from `spec.forProvider`, with Secret references resolved;
/// `with_values` when values from `spec.valuesFrom` were merged in (sensitive ones by their
/// plain names).
async fn resource_config(
    client: &Client,
    provider: &Configured,
    type_name: &str,
    namespace: &str,
    for_provider: &Json,
    with_values: bool,
) -> Result<Value> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut values: HashMap<SecretRef, String> = HashMap::new();
    for r in provider.fields.secret_refs(for_provider) {
        let v = secret_value(&secrets, &r.name, &r.key).await?;
        values.insert(r, v);
    }
    config_value(provider, type_name, for_provider, with_values, &values)
}

/// [`ProviderSource::resource_config`] once the Secret values `spec.forProvider` references
/// are read (`values`, by reference): pure, so `kraken plan` can read them elsewhere (a Secret
/// of its manifests stands in for one not applied yet).
pub fn config_value(
    provider: &Configured,
    type_name: &str,
    for_provider: &Json,
    with_values: bool,
    values: &HashMap<SecretRef, String>,
) -> Result<Value> {
    let mut secret = |r: &SecretRef| {
        values
            .get(r)
            .cloned()
            .ok_or_else(|| FieldError::SecretNotFound {
                name: r.name.clone(),
            })
    };
    let tf = if with_values {
        provider
            .fields
            .spec_to_tf_with_values(for_provider, &mut secret)
    } else {
        provider.fields.spec_to_tf(for_provider, &mut secret)
    }
    .map_err(|e| Error::InvalidSpec(e.to_string()))?;
    let block = &provider.resource(type_name)?.block;
    from_kube_json(&tf, &block.implied_type()).map_err(|e| {
        // A sensitive argument's value came from a Secret: say what was wrong, never what it
        // was (the message reaches conditions and Events).
        let sensitive = matches!(e.path.steps.first(), Some(PathStep::Attr(a))
            if block.attributes.get(a).is_some_and(|attr| attr.sensitive));
        let message = match e.message.split_once(", got ") {
            Some((expected, _)) if sensitive => {
                format!("{expected}, got a value of another type (sensitive: not shown)")
            }
            _ => e.message.clone(),
        };
        Error::InvalidSpec(format!("{}: {message}", provider.fields.kube_path(&e.path)))
    })
}

/// One key of a Secret, as text.
async fn secret_value(secrets: &Api<Secret>, name: &str, key: &str) -> Result<String> {
    match secrets.get_opt(name).await? {
        Some(secret) => secret_text(&secret, name, key),
        None => Err(Error::SecretMissing(format!("Secret {name} not found"))),
    }
}

/// Key `key` of the Secret `name` (`secret`) as text, unless Kraken's own Secrets and
/// service-account tokens are off limits for it; errors name what is wrong.
pub fn secret_text(secret: &Secret, name: &str, key: &str) -> Result<String> {
    if let Some(why) = kraken_core_kinds::secret_off_limits(secret) {
        return Err(Error::Forbidden(format!(
            "Secret {name} cannot be referenced: {why}"
        )));
    }
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        })
        .ok_or_else(|| Error::SecretMissing(format!("Secret {name} has no key {key}")))?;
    String::from_utf8(bytes)
        .map_err(|_| Error::InvalidSpec(format!("Secret {name} key {key} is not UTF-8 text")))
}

#[cfg(test)]
mod verify_tests;

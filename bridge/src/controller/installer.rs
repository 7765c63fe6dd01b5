//! The `Provider` controller: installs a Terraform provider at runtime (DESIGN §4).
//!
//! A pass is a pipeline: finalizer → fetch and verify the package (registry-fetch, into the
//! plugin cache the resolver reads) → read the binary's schema → generate the CRDs of the
//! resource types `spec.resources` selects (codegen) → server-side apply them → wait until they
//! are Established → status. The kind supervisor (`operator::run`) starts a controller for each
//! CRD as it becomes Established, so new kinds reconcile without a restart.
//!
//! Deleting a Provider labels its CRDs `kraken.dev/suspended=true`, which stops their
//! controllers, and leaves CRDs and resources as they are; with `spec.removeCRDs` the CRDs are
//! deleted too, but only when no object of any of its kinds exists. Applying the Provider again
//! takes the label back.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kraken_registry_fetch as fetch;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource as _, ResourceExt as _};
use serde_json::{Value as Json, json};

use super::conditions::{self, READY, Set};
use super::deref::anyhow_chain;
use super::{Context, KindInfo, jitter};
use crate::core_kinds::{InstalledKind, Provider, ProviderStatus};
use crate::provider::{LaunchOptions, Provider as _, ProviderHost, ProviderSchema};

/// Finalizer on every Provider the operator has installed.
pub const FINALIZER: &str = "kraken.dev/provider";
/// Label on each CRD a Provider installed: the Provider's name.
pub const PROVIDER_NAME_LABEL: &str = "kraken.dev/provider-name";
/// Label `"true"` on a CRD whose Provider was deleted: its kind is not reconciled.
pub const SUSPENDED_LABEL: &str = "kraken.dev/suspended";
/// Field manager of the CRDs Providers install.
const FIELD_MANAGER: &str = "kraken-provider";

/// `Ready` reasons of a Provider, as documented in docs/operator.md.
pub mod reason {
    pub const INSTALLED: &str = "Installed";
    pub const INSTALLING: &str = "Installing";
    pub const NOT_AVAILABLE: &str = "VersionNotAvailable";
    pub const VERIFICATION_FAILED: &str = "VerificationFailed";
    pub const FETCH_FAILED: &str = "FetchFailed";
    pub const SCHEMA_UNAVAILABLE: &str = "SchemaUnavailable";
    pub const UNKNOWN_RESOURCE_TYPES: &str = "UnknownResourceTypes";
    pub const CRD_APPLY_FAILED: &str = "CRDApplyFailed";
}

/// Where and how Providers are installed (the operator's flags).
#[derive(Debug, Clone, Default)]
pub struct InstallSettings {
    /// The plugin cache packages are installed into; the resolver looks there too.
    pub cache_dir: PathBuf,
    /// Mirror used when a Provider names none: an https:// network mirror or a directory.
    pub default_mirror: Option<String>,
    /// Extra PEM root CAs for registries and mirrors.
    pub ca_certs: Vec<PathBuf>,
}

/// The Provider controller's context.
pub struct Installer {
    pub ctx: Arc<Context>,
    pub settings: InstallSettings,
    /// Schemas (and protocol versions) read from installed binaries, by (address, version).
    schemas: Mutex<HashMap<(String, String), SchemaHit>>,
}

impl Installer {
    pub fn new(ctx: Arc<Context>, settings: InstallSettings) -> Self {
        Self {
            ctx,
            settings,
            schemas: Mutex::default(),
        }
    }
}

/// A provider version's schema and the protocol major version it speaks.
type SchemaHit = (Arc<ProviderSchema>, u32);

/// Why a pass stopped, with the `Ready` reason it is reported under.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    reason: &'static str,
    message: String,
    /// Whether it may clear by itself (network, API server): retried sooner.
    transient: bool,
}

impl Failure {
    fn new(reason: &'static str, message: impl Into<String>, transient: bool) -> Self {
        Self {
            reason,
            message: message.into(),
            transient,
        }
    }
}

pub async fn run(
    installer: Arc<Installer>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<Provider> = Api::all(installer.ctx.client.clone());
    Controller::new(api, watcher::Config::default().any_semantic())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, installer)
        .for_each(|_| std::future::ready(()))
        .await;
}

async fn reconcile(p: Arc<Provider>, inst: Arc<Installer>) -> Result<Action, kube::Error> {
    let name = p.name_any();
    tracing::debug!(provider = %name, generation = ?p.metadata.generation, "reconcile");
    if p.metadata.deletion_timestamp.is_some() {
        return cleanup(&p, &inst).await;
    }
    if !p.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = p.finalizers().to_vec();
        finalizers.push(FINALIZER.to_owned());
        api(&inst)
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
            )
            .await?;
        inst.ctx.metrics.api_write("providers", "patch");
        tracing::debug!(provider = %name, "finalizer added");
    }
    let mut status = p.status.clone().unwrap_or_default();
    let outcome = install(&p, &inst, &mut status).await;
    let (update, action) = match &outcome {
        Ok(Pass::Ready(n)) => (
            Set::new(
                READY,
                true,
                reason::INSTALLED,
                format!(
                    "{} {} installed with {n} kinds",
                    status.address.as_deref().unwrap_or_default(),
                    status.version.as_deref().unwrap_or_default()
                ),
            ),
            Action::await_change(),
        ),
        Ok(Pass::Waiting(message)) => (
            Set::new(READY, false, reason::INSTALLING, message.clone()),
            Action::requeue(Duration::from_millis(500)),
        ),
        Err(f) => {
            let retry = if f.transient {
                Duration::from_secs(10)
            } else {
                Duration::from_secs(300)
            };
            (
                Set::new(READY, false, f.reason, f.message.clone()),
                Action::requeue(jitter(retry, 0.2)),
            )
        }
    };
    // An Event for each new outcome (a new reason, or a new version or kind count), not for
    // every retry of the same one.
    let repeated = p.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == READY && c.reason == update.reason && c.message == update.message)
    });
    write_status(&p, &inst, status, update.clone()).await?;
    tracing::debug!(provider = %name, reason = update.reason, "status written");
    if !repeated && update.reason != reason::INSTALLING {
        event(&p, &inst, !update.status, update.reason, &update.message).await;
    }
    Ok(action)
}

enum Pass {
    /// Installed, with this many kinds Established.
    Ready(usize),
    /// CRDs applied, not all Established yet.
    Waiting(String),
}

/// Steps 1–5: fetch, schema, generate, apply, check Established. Fills `status` as it learns.
async fn install(
    p: &Provider,
    inst: &Installer,
    status: &mut ProviderStatus,
) -> Result<Pass, Failure> {
    let started = std::time::Instant::now();
    let installed = fetch_package(p, inst, status).await?;
    tracing::debug!(provider = %p.name_any(), elapsed = ?started.elapsed(), cached = installed.from_cache, "package installed");
    let address = installed.provider.to_string();
    let version = installed.version.to_string();
    let same = status.address.as_deref() == Some(address.as_str())
        && status.version.as_deref() == Some(version.as_str());
    // A cache hit knows only the local h1: and no signer: keep the zh: hashes and the signer
    // recorded when the package was fetched.
    let mut hashes: std::collections::BTreeSet<String> = installed
        .lock_hashes
        .iter()
        .map(ToString::to_string)
        .collect();
    if installed.from_cache {
        // The object this pass got may predate the status the fetching pass wrote: read it.
        let recorded = if same {
            Some(status.clone())
        } else {
            api(inst)
                .get_status(&p.name_any())
                .await
                .ok()
                .and_then(|fresh| fresh.status)
                .filter(|s| {
                    s.address.as_deref() == Some(address.as_str())
                        && s.version.as_deref() == Some(version.as_str())
                })
        };
        if let Some(recorded) = recorded {
            hashes.extend(recorded.hashes.iter().cloned());
            status.signed_by = recorded.signed_by;
        }
    } else {
        status.signed_by = installed.signed_by.clone();
    }
    let applied_before =
        same && status.observed_generation == p.metadata.generation && !status.kinds.is_empty();
    status.address = Some(address.clone());
    status.version = Some(version.clone());
    status.hashes = hashes.into_iter().collect();
    let binary = installed.executable.clone().ok_or_else(|| {
        Failure::new(
            reason::VERIFICATION_FAILED,
            format!("the package of {address} {version} holds no terraform-provider-* executable"),
            false,
        )
    })?;
    let (schema, protocol) = schema(inst, &address, &version, binary).await?;
    tracing::debug!(provider = %p.name_any(), elapsed = ?started.elapsed(), "schema read");
    status.protocol = i32::try_from(protocol).ok();
    status.resource_types = i64::try_from(schema.resources.len()).ok();
    let crds = generate(p, &address, &schema)?;
    // While waiting for Established, the CRDs this generation applied are not applied again.
    let names: Vec<&str> = crds.iter().map(|c| c.type_name.as_str()).collect();
    let known: Vec<&str> = status
        .kinds
        .iter()
        .map(|k| k.resource_type.as_str())
        .collect();
    let waiting = status
        .conditions
        .iter()
        .any(|c| c.type_ == READY && c.reason == reason::INSTALLING);
    let skip = applied_before && waiting && names == known;
    let kinds = if skip {
        status.kinds.clone()
    } else {
        apply_crds(p, inst, &crds).await?
    };
    status.kind_count = i64::try_from(kinds.len()).ok();
    status.kinds = kinds;
    tracing::debug!(provider = %p.name_any(), elapsed = ?started.elapsed(), crds = crds.len(), applied = !skip, "CRDs generated and applied");
    let (pending, missing) = not_established(inst, &crds).await?;
    if skip && missing {
        // Deleted by hand since this generation applied it: apply again.
        apply_crds(p, inst, &crds).await?;
    }
    if !pending.is_empty() {
        return Ok(Pass::Waiting(format!(
            "waiting for {} of {} CRDs to be Established: {}",
            pending.len(),
            crds.len(),
            pending.join(", ")
        )));
    }
    Ok(Pass::Ready(crds.len()))
}

/// Step 1: the package, from the cache when the version in status still matches.
async fn fetch_package(
    p: &Provider,
    inst: &Installer,
    status: &ProviderStatus,
) -> Result<fetch::Installed, Failure> {
    let bad = |m: String| Failure::new(reason::FETCH_FAILED, m, false);
    let provider: fetch::Provider = p
        .spec
        .source
        .parse()
        .map_err(|e| bad(format!("invalid source {:?}: {e}", p.spec.source)))?;
    let constraints: fetch::VersionConstraints = p
        .spec
        .version
        .as_deref()
        .unwrap_or("")
        .parse()
        .map_err(|e| bad(format!("invalid version constraint: {e}")))?;
    let http = fetch::HttpClient::new(fetch::HttpConfig {
        extra_ca_files: inst.settings.ca_certs.clone(),
        ..fetch::HttpConfig::default()
    })
    .map_err(|e| bad(anyhow_chain(&e)))?;
    let source = source(p, inst, http.clone()).map_err(bad)?;
    let installer = fetch::Installer::new(
        source,
        fetch::PluginCache::new(&inst.settings.cache_dir),
        http,
    )
    .allow_unsigned(p.spec.allow_unsigned);
    // Like a lock file: the version installed before is kept while the constraint allows it.
    let locked = locked(status, &provider).filter(|l| constraints.allows(&l.version));
    let request = fetch::InstallRequest {
        provider: provider.clone(),
        constraints,
        locked,
        upgrade: false,
    };
    installer
        .install(&request, &fetch::NoProgress)
        .await
        .map_err(|e| {
            let message = format!("failed to install {provider}: {}", anyhow_chain(&e));
            Failure::new(fetch_reason(&e), message, e.is_transient())
        })
}

fn source(
    p: &Provider,
    inst: &Installer,
    http: fetch::HttpClient,
) -> Result<Arc<dyn fetch::Source>, String> {
    let Some(mirror) = p
        .spec
        .mirror
        .as_ref()
        .or(inst.settings.default_mirror.as_ref())
    else {
        return Ok(Arc::new(fetch::RegistrySource::new(http)));
    };
    if mirror.starts_with("https://") || mirror.starts_with("http://") {
        let url = mirror
            .parse()
            .map_err(|e| format!("invalid mirror url {mirror:?}: {e}"))?;
        let source = fetch::NetworkMirrorSource::new(http, url).map_err(|e| anyhow_chain(&e))?;
        return Ok(Arc::new(source));
    }
    Ok(Arc::new(fetch::FilesystemMirrorSource::new(mirror)))
}

/// The lock entry status records, if it is for this provider.
fn locked(status: &ProviderStatus, provider: &fetch::Provider) -> Option<fetch::ProviderLock> {
    if status.address.as_deref() != Some(provider.to_string().as_str()) {
        return None;
    }
    let version = status.version.as_deref()?.parse().ok()?;
    let hashes = status
        .hashes
        .iter()
        .filter_map(|h| h.parse().ok())
        .collect();
    Some(fetch::ProviderLock {
        version,
        constraints: None,
        hashes,
    })
}

/// The `Ready` reason for a failed install.
fn fetch_reason(e: &fetch::Error) -> &'static str {
    use fetch::Error as E;
    match e {
        E::UnknownProvider { .. }
        | E::NoMatchingVersion { .. }
        | E::PlatformNotSupported { .. }
        | E::ProtocolNotSupported { .. }
        | E::LockedVersionNotAllowed { .. } => reason::NOT_AVAILABLE,
        E::ChecksumMismatch { .. }
        | E::ChecksumMissing { .. }
        | E::SignatureInvalid { .. }
        | E::SignatureUnknownKey { .. }
        | E::Unsigned { .. }
        | E::LockMismatch { .. }
        | E::UnsafeArchive { .. }
        | E::InvalidArchive { .. } => reason::VERIFICATION_FAILED,
        _ => reason::FETCH_FAILED,
    }
}

/// Step 2: the binary's schema, read once per version (the process is stopped afterwards).
async fn schema(
    inst: &Installer,
    address: &str,
    version: &str,
    binary: PathBuf,
) -> Result<SchemaHit, Failure> {
    let key = (address.to_owned(), version.to_owned());
    if let Some(hit) = inst
        .schemas
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
    {
        return Ok(hit.clone());
    }
    let mut opts = LaunchOptions::new(binary);
    opts.name = format!("{address} {version}");
    let host = ProviderHost::new(opts, 1);
    let result = host.schema().await;
    let protocol = host.protocol_version();
    host.shutdown().await;
    let schema = result.map_err(|e| {
        Failure::new(
            reason::SCHEMA_UNAVAILABLE,
            format!(
                "failed to read the schema of {address} {version}: {}",
                anyhow_chain(&e)
            ),
            true,
        )
    })?;
    let hit = (schema, protocol);
    inst.schemas
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, hit.clone());
    Ok(hit)
}

/// Step 3: the CRDs of the selected resource types (none when `spec.resources` is empty).
fn generate(
    p: &Provider,
    address: &str,
    schema: &ProviderSchema,
) -> Result<Vec<kraken_codegen::GeneratedCrd>, Failure> {
    if p.spec.resources.is_empty() {
        return Ok(Vec::new());
    }
    let opts = kraken_codegen::Options {
        resources: p.spec.resources.clone(),
        ..Default::default()
    };
    let generated = kraken_codegen::generate(address, schema, &opts)
        .map_err(|e| Failure::new(reason::UNKNOWN_RESOURCE_TYPES, anyhow_chain(&e), false))?;
    if !generated.report.errors.is_empty() {
        let list: Vec<String> = generated
            .report
            .errors
            .iter()
            .map(|(n, m)| format!("{n}: {m}"))
            .collect();
        return Err(Failure::new(
            reason::UNKNOWN_RESOURCE_TYPES,
            format!("spec.resources: {}", list.join("; ")),
            false,
        ));
    }
    Ok(generated.crds)
}

/// Step 4: server-side apply of each CRD, labelled with the Provider's name and not suspended.
async fn apply_crds(
    p: &Provider,
    inst: &Installer,
    crds: &[kraken_codegen::GeneratedCrd],
) -> Result<Vec<InstalledKind>, Failure> {
    let api: Api<CustomResourceDefinition> = Api::all(inst.ctx.client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut kinds = Vec::with_capacity(crds.len());
    for c in crds {
        let mut crd = c.crd.clone();
        let labels = &mut crd["metadata"]["labels"];
        if !labels.is_object() {
            *labels = json!({});
        }
        labels[PROVIDER_NAME_LABEL] = Json::String(p.name_any());
        labels[SUSPENDED_LABEL] = Json::String("false".into());
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        inst.ctx
            .metrics
            .api_write("customresourcedefinitions", "apply");
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map_err(|e| {
                let transient =
                    !matches!(&e, kube::Error::Api(s) if s.code == 422 || s.code == 400);
                Failure::new(
                    reason::CRD_APPLY_FAILED,
                    format!("failed to apply CRD {name}: {e}"),
                    transient,
                )
            })?;
        kinds.push(InstalledKind {
            resource_type: c.type_name.clone(),
            kind: c.kind.clone(),
            api_version: format!("{}/{}", c.group, kraken_codegen::crd::VERSION),
            crd: name,
        });
    }
    Ok(kinds)
}

/// Step 5: the names of the CRDs not Established yet, and whether any of them is missing.
async fn not_established(
    inst: &Installer,
    crds: &[kraken_codegen::GeneratedCrd],
) -> Result<(Vec<String>, bool), Failure> {
    let api: Api<CustomResourceDefinition> = Api::all(inst.ctx.client.clone());
    let mut pending = Vec::new();
    let mut missing = false;
    for c in crds {
        let name = format!("{}.{}", c.plural, c.group);
        let crd = api.get_opt(&name).await.map_err(|e| {
            Failure::new(
                reason::CRD_APPLY_FAILED,
                format!("failed to read CRD {name}: {e}"),
                true,
            )
        })?;
        missing |= crd.is_none();
        if !crd.as_ref().is_some_and(established) {
            pending.push(name);
        }
    }
    Ok((pending, missing))
}

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Deletion: suspend (or remove) the Provider's CRDs, then release the finalizer.
async fn cleanup(p: &Provider, inst: &Installer) -> Result<Action, kube::Error> {
    if !p.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = p.name_any();
    let crds: Api<CustomResourceDefinition> = Api::all(inst.ctx.client.clone());
    let owned = crds
        .list(&ListParams::default().labels(&format!("{PROVIDER_NAME_LABEL}={name}")))
        .await?;
    let mut in_use = Vec::new();
    if p.spec.remove_crds {
        for crd in &owned {
            if let Some(kind) = KindInfo::any_from_crd(crd) {
                let objects: Api<DynamicObject> =
                    Api::all_with(inst.ctx.client.clone(), &kind.resource);
                let list = objects
                    .list_metadata(&ListParams::default().limit(1))
                    .await?;
                if !list.items.is_empty() {
                    in_use.push(kind.resource.kind.clone());
                }
            }
        }
    }
    let remove = p.spec.remove_crds && in_use.is_empty();
    for crd in &owned {
        let crd_name = crd.name_any();
        if remove {
            inst.ctx
                .metrics
                .api_write("customresourcedefinitions", "delete");
            crds.delete(&crd_name, &DeleteParams::default()).await?;
        } else {
            inst.ctx
                .metrics
                .api_write("customresourcedefinitions", "patch");
            crds.patch(
                &crd_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {SUSPENDED_LABEL: "true"}}})),
            )
            .await?;
        }
    }
    if !in_use.is_empty() {
        let note = format!(
            "kept the CRDs of Provider {name}: objects of {} still exist",
            in_use.join(", ")
        );
        event(p, inst, true, "CRDsKept", &note).await;
    }
    let finalizers: Vec<String> = p
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    inst.ctx.metrics.api_write("providers", "patch");
    api(inst)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await?;
    Ok(Action::await_change())
}

fn api(inst: &Installer) -> Api<Provider> {
    Api::all(inst.ctx.client.clone())
}

async fn write_status(
    p: &Provider,
    inst: &Installer,
    mut status: ProviderStatus,
    update: Set,
) -> Result<(), kube::Error> {
    let now = crate::controller::conditions::now();
    status.conditions =
        conditions::merge(&status.conditions, &[update], p.metadata.generation, &now);
    status.observed_generation = p.metadata.generation;
    if p.status.as_ref() == Some(&status) {
        return Ok(());
    }
    inst.ctx.metrics.api_write("providers", "patch-status");
    api(inst)
        .patch_status(
            &p.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
    Ok(())
}

async fn event(p: &Provider, inst: &Installer, warning: bool, reason: &str, note: &str) {
    let ev = super::events::event(warning, reason, note, "Install");
    inst.ctx.metrics.api_write("events", "create");
    inst.ctx.events.send(ev, p.object_ref(&()));
}

fn error_policy(p: Arc<Provider>, err: &kube::Error, _inst: Arc<Installer>) -> Action {
    tracing::warn!(provider = %p.name_any(), "Provider reconcile failed: {err}");
    Action::requeue(jitter(Duration::from_secs(5), 0.2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core_kinds::ProviderSpec;

    fn provider(resources: &[&str]) -> Provider {
        let spec = ProviderSpec {
            source: "hashicorp/random".into(),
            version: None,
            mirror: None,
            resources: resources.iter().map(|s| (*s).to_owned()).collect(),
            allow_unsigned: false,
            remove_crds: false,
        };
        Provider::new("random", spec)
    }

    fn random_schema() -> ProviderSchema {
        // At run time: a build cache shared between checkouts may run a binary built in another.
        let path = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(
                || env!("CARGO_MANIFEST_DIR").into(),
                std::path::PathBuf::from,
            )
            .join("../codegen/testdata/schemas/random.json");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let json: Json = serde_json::from_str(&text).unwrap_or_default();
        kraken_codegen::tfjson::parse_provider_schemas(&json)
            .ok()
            .and_then(|mut all| all.remove("registry.terraform.io/hashicorp/random"))
            .unwrap_or_else(|| panic!("{} holds the random provider's schema", path.display()))
    }

    #[test]
    fn kinds_are_generated_only_for_the_selected_types() -> Result<(), Failure> {
        let schema = random_schema();
        let address = "registry.terraform.io/hashicorp/random";
        assert!(generate(&provider(&[]), address, &schema)?.is_empty());
        let crds = generate(&provider(&["random_pet", "random_i*"]), address, &schema)?;
        let kinds: Vec<&str> = crds.iter().map(|c| c.kind.as_str()).collect();
        assert_eq!(kinds, ["Id", "Integer", "Pet"]);
        let err = generate(
            &provider(&["random_pet", "random_nonesuch"]),
            address,
            &schema,
        )
        .err()
        .map(|f| (f.reason, f.message));
        let (reason, message) = err.unwrap_or_default();
        assert_eq!(reason, reason::UNKNOWN_RESOURCE_TYPES);
        assert!(message.contains("random_nonesuch"), "{message}");
        Ok(())
    }

    #[test]
    fn install_failures_map_to_reasons_a_user_can_act_on() {
        use fetch::Error as E;
        let mismatch = E::ChecksumMismatch {
            what: "zip".into(),
            expected: "a".into(),
            actual: "b".into(),
        };
        assert_eq!(fetch_reason(&mismatch), reason::VERIFICATION_FAILED);
        let unknown_key = E::SignatureUnknownKey { key_id: "x".into() };
        assert_eq!(fetch_reason(&unknown_key), reason::VERIFICATION_FAILED);
        let timeout = E::Timeout {
            url: "https://x".into(),
        };
        assert_eq!(fetch_reason(&timeout), reason::FETCH_FAILED);
        assert!(timeout.is_transient());
    }

    #[test]
    fn the_installed_version_is_kept_like_a_lock_file_entry() {
        let provider: fetch::Provider =
            "hashicorp/random".parse().unwrap_or_else(|e| panic!("{e}"));
        let mut status = ProviderStatus {
            address: Some("registry.terraform.io/hashicorp/random".into()),
            version: Some("3.6.0".into()),
            hashes: vec!["h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".into()],
            ..Default::default()
        };
        let lock = locked(&status, &provider).map(|l| (l.version.to_string(), l.hashes.len()));
        assert_eq!(lock, Some(("3.6.0".to_owned(), 1)));
        status.address = Some("registry.terraform.io/hashicorp/time".into());
        assert!(locked(&status, &provider).is_none());
    }
}

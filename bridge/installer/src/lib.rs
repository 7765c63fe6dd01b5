//! The `Provider` controller: installs a Terraform provider at runtime.
//!
//! A pass is a pipeline: finalizer → fetch and verify the package (registry-fetch, into the
//! plugin cache the resolver reads) → read the binary's schema → generate the CRDs of the
//! resource types `spec.resources` selects (codegen) → server-side apply them → wait until they
//! are Established → status. The kind supervisor (`operator::run`) starts a controller for each
//! CRD as it becomes Established, so new kinds reconcile without a restart.
//!
//! Deleting a Provider waits (`Ready=False, InUse`) while objects of its kinds exist, then
//! labels its CRDs `kraken.dev/suspended=true`, which stops their controllers; with
//! `spec.removeCRDs` the CRDs are deleted instead. `kraken.dev/force-delete` skips the wait
//! (CRDs and objects stay as they are). Applying the Provider again takes the label back.
//!
//! Its seams: packages come from registry-fetch's `Source` (a registry, a network mirror, or a
//! directory: a unit test's filesystem mirror in a temporary directory), and steps 2 and 3
//! (the binary's schema → CRDs) sit behind [`generate::Generator`], which a unit test answers
//! from a schema it holds.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kraken_registry_fetch as fetch;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource as _, ResourceExt as _};
use serde_json::{Value as Json, json};

use kraken_core_kinds::KindInfo;
use kraken_kit::Kit;
use kraken_kit::conditions::{self, READY, Set};
use kraken_kit::errors::chain;
use kraken_kit::finalizer::{self, Phase};
use kraken_kit::reconciler::{ReconcileError, Reconciler};

mod cleanup;
mod crds;
#[cfg(test)]
mod fake;
pub mod generate;
mod install;
pub mod package;
pub mod provider_config;
mod suspend;

use cleanup::cleanup;
use install::{Pass, install};
use kraken_core_kinds::{InstalledKind, Provider, ProviderStatus};
use kraken_provider::{LaunchOptions, Plugin as _, ProviderHost, ProviderSchema};

/// Finalizer on every Provider the operator has installed.
pub const FINALIZER: &str = "kraken.dev/provider";
pub use kraken_core_kinds::generated::{PROVIDER_NAME_LABEL, SUSPENDED_LABEL};
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
    /// The `kraken` executable that reads schemas and generates CRDs in a child process
    /// (`kraken generate-crds`), so that a large schema's memory is the child's; `None`
    /// generates in this process.
    pub generator: Option<PathBuf>,
}

/// Where schema answers are kept per binary ([`kraken_provider::schema_cache`]): beside the
/// packages, in the plugin cache.
pub fn schema_cache_dir(settings: &InstallSettings) -> PathBuf {
    settings.cache_dir.join(".kraken-schemas")
}

/// The kind as metrics and logs name it.
const LABEL: &str = "Provider.core.kraken.dev";

/// The Provider controller's context.
pub struct Installer {
    pub kit: Arc<Kit>,
    pub settings: InstallSettings,
    /// Steps 2 and 3: the binary's schema → the selected CRDs.
    generator: Arc<dyn generate::Generator>,
    /// What each Provider's last install generated, by Provider name: its CRDs are what a
    /// pass needs again, not the schema they came from (hashicorp/aws's is over 100 MiB).
    generated: Mutex<HashMap<String, Arc<Generated>>>,
}

impl Installer {
    /// The installer the settings describe: schemas read from the binaries, in a child process
    /// when `settings.generator` names one.
    pub fn new(kit: Arc<Kit>, settings: InstallSettings) -> Self {
        let generator = Arc::new(generate::FromBinary {
            exe: settings.generator.clone(),
        });
        Self::with_generator(kit, settings, generator)
    }

    /// The installer with another way to generate CRDs (a fake, in unit tests).
    pub fn with_generator(
        kit: Arc<Kit>,
        settings: InstallSettings,
        generator: Arc<dyn generate::Generator>,
    ) -> Self {
        Self {
            kit,
            settings,
            generator,
            generated: Mutex::default(),
        }
    }
}

impl std::ops::Deref for Installer {
    type Target = Kit;
    fn deref(&self) -> &Kit {
        &self.kit
    }
}

/// What a Provider's selection generated from one provider version's schema, with what the
/// status reports about that schema.
pub(crate) struct Generated {
    /// (address, version, resources, data sources): a pass with another key reads again.
    key: (String, String, Vec<String>, Vec<String>),
    crds: Vec<crds::Crd>,
    /// The protocol major version the binary speaks.
    protocol: u32,
    /// How many resource types the schema has.
    resource_types: usize,
}

/// Why a pass stopped, with the `Ready` reason it is reported under (the API server failing
/// is not reported on the Provider).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    reason: &'static str,
    message: String,
    /// Whether it may clear by itself (network, API server): retried with backoff; else the
    /// Provider waits for a change (a new version, another selection).
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

    fn is_api(&self) -> bool {
        self.reason == conditions::reason::API_ERROR
    }
}

impl From<kube::Error> for Failure {
    fn from(e: kube::Error) -> Self {
        let message = format!("kubernetes API request failed: {}", chain(&e));
        Failure::new(conditions::reason::API_ERROR, message, true)
    }
}

impl ReconcileError for Failure {
    fn reason(&self) -> &str {
        self.reason
    }

    fn is_transient(&self) -> bool {
        self.transient
    }
}

pub async fn run(
    installer: Arc<Installer>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<Provider> = Api::all(installer.client.clone());
    let controller = Controller::new(api, watcher::Config::default().any_semantic())
        .graceful_shutdown_on(shutdown);
    kraken_kit::reconciler::drive(controller, installer).await;
}

/// The Provider controller in the shape every controller has (`kraken_kit::reconciler`).
impl Reconciler for Installer {
    type Object = Provider;
    type Error = Failure;

    fn kit(&self) -> &Kit {
        &self.kit
    }

    fn kind(&self) -> &str {
        LABEL
    }

    fn reconcile(
        self: Arc<Self>,
        p: Arc<Provider>,
    ) -> impl std::future::Future<Output = Result<Action, Failure>> + Send {
        reconcile(p, self)
    }
}

async fn reconcile(p: Arc<Provider>, inst: Arc<Installer>) -> Result<Action, Failure> {
    let name = p.name_any();
    tracing::debug!(provider = %name, generation = ?p.metadata.generation, "reconcile");
    match finalizer::phase(&p.metadata, FINALIZER) {
        Phase::Cleanup => return Ok(cleanup(&p, &inst).await?),
        Phase::Released => return Ok(Action::await_change()),
        Phase::Apply { add: true } => {
            finalizer::ensure(
                &api(&inst),
                &p.metadata,
                FINALIZER,
                true,
                &inst.metrics,
                "providers",
            )
            .await?;
            tracing::debug!(provider = %name, "finalizer added");
        }
        Phase::Apply { add: false } => {}
    }
    let mut status = p.status.clone().unwrap_or_default();
    let outcome = install(&p, &inst, &mut status).await;
    // The API server is the one failing: nothing to report on the Provider.
    if outcome.as_ref().is_err_and(Failure::is_api) {
        return outcome.map(|_| Action::await_change());
    }
    let update = match &outcome {
        Ok(Pass::Ready(n)) => Set::new(
            READY,
            true,
            reason::INSTALLED,
            format!(
                "{} {} installed with {n} kinds",
                status.address.as_deref().unwrap_or_default(),
                status.version.as_deref().unwrap_or_default()
            ),
        ),
        Ok(Pass::Waiting(message)) => Set::new(READY, false, reason::INSTALLING, message.clone()),
        Err(f) => Set::new(READY, false, f.reason, f.message.clone()),
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
    outcome.map(|pass| match pass {
        Pass::Ready(_) => Action::await_change(),
        // Established takes moments: look again soon rather than wait for a CRD watch.
        Pass::Waiting(_) => Action::requeue(Duration::from_millis(500)),
    })
}

fn api(inst: &Installer) -> Api<Provider> {
    Api::all(inst.client.clone())
}

async fn write_status(
    p: &Provider,
    inst: &Installer,
    mut status: ProviderStatus,
    update: Set,
) -> Result<(), kube::Error> {
    let now = kraken_kit::conditions::now();
    status.conditions =
        conditions::merge(&status.conditions, &[update], p.metadata.generation, &now);
    status.observed_generation = p.metadata.generation;
    if p.status.as_ref() == Some(&status) {
        return Ok(());
    }
    kraken_kit::status::merge(
        &api(inst),
        &inst.metrics,
        "providers",
        &p.name_any(),
        &status,
    )
    .await?;
    Ok(())
}

async fn event(p: &Provider, inst: &Installer, warning: bool, reason: &str, note: &str) {
    inst.kit
        .event((warning, reason, note, "Install"), p.object_ref(&()));
}

#[cfg(test)]
mod tests;

//! Which binary a ProviderConfig launches, and the check that it is a package someone trusted
//! recorded ([`kraken_provider::pins`]).
//!
//! - `providerRef`: the version the Provider's status reports, checked against the hashes it
//!   recorded at install.
//! - `spec.source` (+ `version`): the newest allowed version that an installed Provider or a
//!   plugin directory's lock file records, checked against those hashes. A version nobody
//!   recorded (an older build left in the plugin cache, one planted beside it) is not a
//!   candidate.
//!
//! The installed Providers come from one watch ([`Source::watch_providers`]), so neither path
//! adds a request to a reconcile; `kraken plan` lists them once instead
//! ([`Source::use_providers`]). Where a package a Provider recorded is not on this machine and
//! the source can fetch ([`FetchInstalled`]: `kraken plan`), it is fetched, locked to those
//! hashes, as `terraform init` installs what a lock file names.

use std::sync::Arc;

use futures::StreamExt as _;
use kube::Api;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt as _, watcher};

use super::Source;
use kraken_core_kinds::{Provider, ProviderConfig};
use kraken_provider::pins::{PackageCheck, Pins};
use kraken_provider::resolve::{Pinned, ResolveError, Resolved};

/// Fetches the package an installed Provider recorded (its address, version and hashes) into a
/// directory the source's resolver searches. `kraken plan` has one; the operator does not (its
/// Provider controller installs).
#[async_trait::async_trait]
pub trait FetchInstalled: Send + Sync {
    async fn fetch(&self, provider: &Provider) -> Result<(), String>;
}

impl Source {
    /// Keeps the installed Providers from one watch, for the lookups of this module; the future
    /// runs the watch (spawn it).
    pub fn watch_providers(&self) -> impl Future<Output = ()> + Send + 'static {
        let (reader, writer) = reflector::store();
        let _ = self.providers.set(reader);
        let api: Api<Provider> = Api::all(self.client.clone());
        async move {
            reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
                .default_backoff()
                .for_each(|event| async move {
                    if let Err(e) = event {
                        tracing::warn!(error = %e, "watching the installed Providers");
                    }
                })
                .await;
        }
    }

    /// The installed Providers as listed once (`kraken plan`, which runs for moments).
    pub fn use_providers(&self, providers: Vec<Provider>) {
        let (reader, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Init);
        for p in providers {
            writer.apply_watcher_event(&watcher::Event::InitApply(p));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let _ = self.providers.set(reader);
    }

    /// Every installed Provider's recorded package, as pins.
    async fn installed_pins(&self) -> Pins {
        let providers: Vec<Arc<Provider>> = match self.providers.get() {
            Some(store) => store.state(),
            None => match Api::<Provider>::all(self.client.clone())
                .list(&Default::default())
                .await
            {
                Ok(list) => list.items.into_iter().map(Arc::new).collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "listing the installed Providers");
                    Vec::new()
                }
            },
        };
        let mut pins = Pins::default();
        for p in &providers {
            record(&mut pins, p);
        }
        pins
    }

    /// The Provider `name`: from the watch when it has it installed and `lookup` allows, else
    /// read (a Provider that became Ready a moment ago may not have reached the watch).
    async fn installed(&self, name: &str, lookup: Lookup) -> Result<Arc<Provider>, String> {
        if let Some(p) = self
            .providers
            .get()
            .filter(|_| lookup == Lookup::Watched)
            .and_then(|s| s.get(&ObjectRef::new(name)))
            .filter(|p| p.status.as_ref().is_some_and(|s| s.version.is_some()))
        {
            return Ok(p);
        }
        let providers: Api<Provider> = Api::all(self.client.clone());
        match providers.get_opt(name).await {
            Ok(Some(p)) => Ok(Arc::new(p)),
            Ok(None) => Err(format!("Provider {name} not found")),
            Err(e) => Err(format!("Provider {name} cannot be read: {e}")),
        }
    }

    /// Checks the package `pinned` found against what was recorded for it, off the async
    /// threads (hashing a package the first time reads the whole binary).
    async fn check(&self, pinned: Pinned) -> Result<Resolved, String> {
        let check: Arc<PackageCheck> = self.check.clone();
        let Pinned { resolved, pins } = pinned;
        let binary = resolved.binary.clone();
        tokio::task::spawn_blocking(move || check.check(&binary, &pins))
            .await
            .map_err(|e| format!("checking {}: {e}", resolved.binary.display()))??;
        Ok(resolved)
    }

    /// Fetches what `provider` recorded when this source can, then resolves again.
    async fn fetched(
        &self,
        provider: &Provider,
        resolve: impl Fn() -> Result<Pinned, ResolveError>,
        not_found: ResolveError,
    ) -> Result<Pinned, String> {
        let Some(fetch) = &self.fetch else {
            return Err(not_found.to_string());
        };
        fetch.fetch(provider).await?;
        resolve().map_err(|e| e.to_string())
    }
}

/// Where a `providerRef`'s Provider is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The watch's cache: a managed resource's reconcile, which must not add a request.
    Watched,
    /// The API server: the ProviderConfig controller, woken by a change of the Provider that
    /// its own watch saw first (the cache of this module may not have it yet, and no second
    /// event would come to correct a check made against the old version).
    Read,
}

/// The binary ProviderConfig `pc` launches, checked (see the module's doc).
pub(super) async fn binary(
    ctx: &Source,
    pc: &ProviderConfig,
    lookup: Lookup,
) -> Result<Resolved, String> {
    match (&pc.spec.provider_ref, &pc.spec.source) {
        (Some(r), _) => from_provider(ctx, &r.name, lookup).await,
        (None, Some(source)) => from_source(ctx, source, pc.spec.version.as_deref()).await,
        (None, None) => Err("set spec.providerRef or spec.source".to_owned()),
    }
}

/// The binary a Ready `Provider` installed, at the version its status reports.
async fn from_provider(ctx: &Source, name: &str, lookup: Lookup) -> Result<Resolved, String> {
    let p = ctx.installed(name, lookup).await?;
    let status = p.status.clone().unwrap_or_default();
    let (Some(address), Some(version)) = (&status.address, &status.version) else {
        let why = status
            .conditions
            .iter()
            .find(|c| c.type_ == kraken_kit::conditions::READY)
            .map_or("not installed yet", |c| c.message.as_str());
        return Err(format!("Provider {name} is not ready: {why}"));
    };
    let mut pins = Pins::default();
    record(&mut pins, &p);
    let exactly = format!("= {version}");
    let resolve = || ctx.resolver.resolve_pinned(address, Some(&exactly), &pins);
    let pinned = match resolve() {
        Ok(pinned) => Ok(pinned),
        Err(e @ ResolveError::NotFound { .. }) => ctx.fetched(&p, resolve, e).await,
        Err(e) => Err(e.to_string()),
    }
    .map_err(|e| format!("Provider {name}: {e}"))?;
    ctx.check(pinned)
        .await
        .map_err(|e| format!("Provider {name}: {e}"))
}

/// The binary `spec.source` at `version` names: the newest allowed version someone recorded.
async fn from_source(
    ctx: &Source,
    source: &str,
    version: Option<&str>,
) -> Result<Resolved, String> {
    let pins = ctx.installed_pins().await;
    let resolve = || ctx.resolver.resolve_pinned(source, version, &pins);
    let pinned = match resolve() {
        Ok(pinned) => Ok(pinned),
        Err(e @ ResolveError::NotFound { .. }) => match recorded_by(ctx, source, version) {
            Some(p) => ctx.fetched(&p, resolve, e).await,
            None => Err(e.to_string()),
        },
        Err(e) => Err(e.to_string()),
    }?;
    ctx.check(pinned).await
}

/// An installed Provider whose package is `source` at a version `version` allows.
fn recorded_by(ctx: &Source, source: &str, version: Option<&str>) -> Option<Arc<Provider>> {
    let address: kraken_registry_fetch::ProviderAddress = source.parse().ok()?;
    let constraints: kraken_registry_fetch::VersionConstraints =
        version.unwrap_or_default().parse().ok()?;
    let address = address.to_string();
    ctx.providers.get()?.state().into_iter().find(|p| {
        p.status.as_ref().is_some_and(|s| {
            s.address.as_deref() == Some(address.as_str())
                && s.version
                    .as_deref()
                    .and_then(|v| v.parse().ok())
                    .is_some_and(|v| constraints.allows(&v))
        })
    })
}

/// What Provider `p` recorded of the package it installed.
fn record(pins: &mut Pins, p: &Provider) {
    let Some(status) = &p.status else { return };
    if let (Some(address), Some(version)) = (&status.address, &status.version) {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        pins.record(
            address,
            version,
            status.hashes.clone(),
            format!("Provider {name}"),
        );
    }
}

/// The installed Provider a ProviderConfig's package comes from, for a runner that fetches
/// it itself (the `pods` placement): `providerRef`'s, or the one that recorded `spec.source`.
pub(super) async fn recorded_package(
    ctx: &Source,
    pc: &ProviderConfig,
    lookup: Lookup,
) -> Result<Arc<Provider>, String> {
    let p = match (&pc.spec.provider_ref, &pc.spec.source) {
        (Some(r), _) => ctx.installed(&r.name, lookup).await?,
        (None, Some(source)) => {
            recorded_by(ctx, source, pc.spec.version.as_deref()).ok_or_else(|| {
                format!(
                    "spec.runner.placement pods runs only a package an installed Provider \
                     recorded, and none records {source}; install it with a Provider and name \
                     it in spec.providerRef"
                )
            })?
        }
        (None, None) => return Err("set spec.providerRef or spec.source".to_owned()),
    };
    let name = p.metadata.name.as_deref().unwrap_or_default();
    let status = p.status.as_ref();
    if status.is_none_or(|s| s.version.is_none() || s.hashes.is_empty() || s.protocol.is_none()) {
        return Err(format!(
            "Provider {name} is not ready (it records no package version, hashes or protocol yet)"
        ));
    }
    Ok(p)
}

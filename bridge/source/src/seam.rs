//! The seam the controllers hold instead of [`Source`]: [`ProviderSource`], what they need
//! from a provider source, so their unit tests can hand them a fake provider
//! ([`super::fake::FakeSource`]).

use kube::runtime::reflector::Store;
use serde_json::Value as Json;

use super::{Configured, Lookup, Result, Source, configured, provider, resource_config};
use kraken_core_kinds::{KindInfo, ProviderConfig};
use kraken_provider::Plugin as _;
use kraken_value::Value;

/// What the ProviderConfig controller reports of the provider a ProviderConfig configures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub address: String,
    pub version: String,
    /// The protocol major version the provider speaks.
    pub protocol: u32,
}

/// What the controllers need from a provider source: for a managed-resource reconcile, the
/// configured provider for a resource and the resource's configuration value; for the
/// ProviderConfig controller, the provider a ProviderConfig configures, brought up.
/// [`Source`] is the real one.
#[async_trait::async_trait]
pub trait ProviderSource: Send + Sync {
    /// The configured provider for a resource of `kind` in `namespace` using ProviderConfig
    /// `pc_name`.
    async fn provider(&self, kind: &KindInfo, namespace: &str, pc_name: &str)
    -> Result<Configured>;

    /// The API server the resources' Secrets are read from.
    fn client(&self) -> &kube::Client;

    /// The resource's configuration value from `spec.forProvider`, with Secret references
    /// resolved; `with_values` when values from `spec.valuesFrom` were merged in.
    async fn resource_config(
        &self,
        provider: &Configured,
        type_name: &str,
        namespace: &str,
        for_provider: &Json,
        with_values: bool,
    ) -> Result<Value> {
        resource_config(
            self.client(),
            provider,
            type_name,
            namespace,
            for_provider,
            with_values,
        )
        .await
    }

    /// Brings up the provider the ProviderConfig `pc` of `namespace` configures (the process
    /// its resources get) and says which it is; errors say why it cannot be.
    async fn check_config(&self, namespace: &str, pc: &ProviderConfig) -> Result<Checked>;

    /// The ProviderConfig controller's cache, once it runs: a source may read ProviderConfigs
    /// there instead of from the API server (the real one does).
    fn cache_provider_configs(&self, _store: Store<ProviderConfig>) {}

    /// A ProviderConfig being deleted: stop its runner, if it has one elsewhere (`pods`).
    /// `Ok(true)` once nothing of it runs; `Ok(false)`: ask again shortly.
    async fn stop_runner(&self, _namespace: &str, _pc_name: &str) -> Result<bool> {
        Ok(true)
    }
}

#[async_trait::async_trait]
impl ProviderSource for Source {
    async fn provider(
        &self,
        kind: &KindInfo,
        namespace: &str,
        pc_name: &str,
    ) -> Result<Configured> {
        provider(self, kind, namespace, pc_name).await
    }

    fn client(&self) -> &kube::Client {
        &self.client
    }

    async fn stop_runner(&self, namespace: &str, pc_name: &str) -> Result<bool> {
        if self.placements.pods.is_none() {
            return Ok(true);
        }
        super::pods::stop_runner(&self.client, namespace, pc_name)
            .await
            .map_err(super::Error::ProviderUnavailable)
    }

    async fn check_config(&self, namespace: &str, pc: &ProviderConfig) -> Result<Checked> {
        let (resolved, host, _) = configured(self, namespace, pc, Lookup::Read).await?;
        Ok(Checked {
            address: resolved.address,
            version: resolved.version,
            protocol: host.protocol_version(),
        })
    }

    fn cache_provider_configs(&self, store: Store<ProviderConfig>) {
        // Set once: the controller's cache outlives its restarts (leadership regained).
        let _ = self.provider_configs.set(store);
    }
}

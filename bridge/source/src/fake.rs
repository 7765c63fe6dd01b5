//! A provider source for unit tests: hands out one given provider (usually
//! [`kraken_provider::fake::FakePlugin`]) for every ProviderConfig that exists, so the
//! managed-resource controller runs over it without a pool, a resolver or a process.
//!
//! The ProviderConfig is still read from the API server (a fake one in tests), and the
//! resource's configuration is built by the real code, so the reasons a missing
//! ProviderConfig or Secret is reported under are the real ones. So is a ProviderConfig's
//! (its `configFrom` Secrets read, its configuration built against the provider's schema,
//! then given to the provider), as the pool does for a process.

use std::sync::Arc;

use kube::Client;

use super::{
    Checked, Configured, Error, ProviderSource, Result, build_config, read_provider_config,
    with_config_from,
};
use kraken_core_kinds::{KindInfo, ProviderConfig};
use kraken_kit::errors::chain;
use kraken_provider::{DiagnosticsExt as _, Plugin};
use kraken_value::fields::FieldMap;

/// What the fake reports a configured provider as.
pub const ADDRESS: &str = "kraken.dev/fake";
pub const VERSION: &str = "0.0.0";

/// Serves `plugin` for every ProviderConfig found in the API server `client` talks to.
pub struct FakeSource {
    pub client: Client,
    pub plugin: Arc<dyn Plugin>,
}

impl FakeSource {
    pub fn new(client: Client, plugin: Arc<dyn Plugin>) -> Self {
        Self { client, plugin }
    }
}

#[async_trait::async_trait]
impl ProviderSource for FakeSource {
    async fn provider(
        &self,
        kind: &KindInfo,
        namespace: &str,
        pc_name: &str,
    ) -> Result<Configured> {
        let pc = read_provider_config(&self.client, namespace, pc_name).await?;
        // The ProviderConfig's spec stands in for the configuration the real source digests.
        let spec = serde_json::to_string(&pc.spec).unwrap_or_default();
        let uid = pc.metadata.uid.unwrap_or_default();
        let digest = super::config_digest(&uid, &spec);
        let fields = |resource: &kraken_codegen::schema::Schema| {
            Arc::new(FieldMap::for_resource(&kind.type_name, resource))
        };
        let label = (format!("fake {VERSION}"), digest);
        let mut configured =
            super::resource_provider(kind, self.plugin.clone(), label, fields).await?;
        configured.plan_policy = pc.spec.plan_policy;
        Ok(configured)
    }

    fn client(&self) -> &Client {
        &self.client
    }

    async fn check_config(&self, namespace: &str, pc: &ProviderConfig) -> Result<Checked> {
        let name = pc.metadata.name.clone().unwrap_or_default();
        let invalid = |message: String| Error::ProviderConfigInvalid {
            name: name.clone(),
            message,
        };
        let config = with_config_from(&self.client, namespace, pc).await?;
        let unavailable = |e: kraken_provider::ProviderError| Error::ProviderUnavailable(chain(&e));
        let schema = self.plugin.schema().await.map_err(unavailable)?;
        let value = build_config(&schema, &config).map_err(invalid)?;
        let diags = self
            .plugin
            .configure(VERSION, &value)
            .await
            .map_err(unavailable)?;
        if diags.has_errors() {
            let summary = diags.error_summary();
            return Err(invalid(format!(
                "the provider rejected the configuration: {summary}"
            )));
        }
        Ok(Checked {
            address: ADDRESS.to_owned(),
            version: VERSION.to_owned(),
            protocol: self.plugin.protocol_version(),
        })
    }
}

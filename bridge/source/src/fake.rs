//! A provider source for unit tests: hands out one given provider (usually
//! [`kraken_provider::fake::FakePlugin`]) for every ProviderConfig that exists, so the
//! managed-resource controller runs over it without a pool, a resolver or a process.
//!
//! The ProviderConfig is still read from the API server (a fake one in tests), and the
//! resource's configuration is built by the real code, so the reasons a missing
//! ProviderConfig or Secret is reported under are the real ones.

use std::sync::Arc;

use kube::Client;

use super::{Configured, ProviderSource, Result, read_provider_config};
use kraken_core_kinds::KindInfo;
use kraken_provider::Plugin;
use kraken_value::fields::FieldMap;

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
        let label = ("fake 0.0.0".to_owned(), digest);
        let mut configured =
            super::resource_provider(kind, self.plugin.clone(), label, fields).await?;
        configured.plan_policy = pc.spec.plan_policy;
        Ok(configured)
    }

    fn client(&self) -> &Client {
        &self.client
    }
}

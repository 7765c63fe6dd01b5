//! A provider that survives its process: [`ProviderHost`] implements [`Provider`] over a
//! process it launches on first use and relaunches after a crash.
//!
//! A request that was in flight when the process died fails with
//! [`ProviderError::Crashed`] — never retried here, because an apply may or may not have
//! reached the cloud and only the caller (with its fenced state) can decide what to do next.
//! The *next* request launches a fresh process and replays the last successful `Configure`
//! before running. Concurrent requests are bounded by a semaphore so one busy resource type
//! cannot swamp the provider.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{Mutex, Semaphore};
use tracing::{info, warn};

use super::client::PluginClient;
use super::launch::{LaunchError, LaunchOptions, launch};
use super::schema::ProviderSchema;
use super::{
    ApplyRequest, ApplyResponse, Diagnostic, DiagnosticsExt as _, ImportResponse, PlanRequest,
    PlanResponse, Plugin, ProviderError, ReadDataResponse, ReadRequest, ReadResponse, Result,
    UpgradeRequest, UpgradeResponse,
};
use kraken_value::Value;

#[derive(Clone)]
struct Instance {
    plugin: PluginClient,
    provider: Arc<dyn Plugin>,
}

/// What a host remembers to bring a fresh process to the same point.
#[derive(Clone)]
struct Configured {
    terraform_version: String,
    config: Value,
}

pub struct ProviderHost {
    options: LaunchOptions,
    current: Mutex<Option<Instance>>,
    configured: std::sync::Mutex<Option<Configured>>,
    permits: Semaphore,
    launches: std::sync::atomic::AtomicU64,
}

impl ProviderHost {
    /// A host for `options.binary` allowing `max_concurrency` requests at once.
    pub fn new(options: LaunchOptions, max_concurrency: usize) -> Self {
        Self {
            options,
            current: Mutex::new(None),
            configured: std::sync::Mutex::new(None),
            permits: Semaphore::new(max_concurrency.max(1)),
            launches: Default::default(),
        }
    }

    /// Launch the process now (otherwise the first request does).
    pub async fn start(&self) -> Result<PluginClient, HostError> {
        Ok(self.instance().await?.plugin)
    }

    /// How many processes this host has started (1 + restarts).
    pub fn launches(&self) -> u64 {
        self.launches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The running process, if any.
    pub async fn plugin(&self) -> Option<PluginClient> {
        self.current.lock().await.as_ref().map(|i| i.plugin.clone())
    }

    /// Stop the process gracefully (`GRPCController.Shutdown`, then kill).
    pub async fn shutdown(&self) {
        if let Some(inst) = self.current.lock().await.take() {
            inst.plugin.shutdown().await;
        }
    }

    async fn instance(&self) -> Result<Instance, HostError> {
        let mut guard = self.current.lock().await;
        if let Some(inst) = guard.as_ref() {
            if !inst.plugin.has_exited() {
                return Ok(inst.clone());
            }
            warn!(
                provider = %self.options.name,
                status = inst.plugin.exit_status().unwrap_or_default(),
                "provider process exited; starting a new one"
            );
        }
        let plugin = match &self.options.dial {
            Some(dial) => super::dial::dial(&self.options, dial).await?,
            None => launch(&self.options).await?,
        };
        self.launches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let provider = adapter(plugin.clone());
        let replay = self.configured.lock().ok().and_then(|c| c.clone());
        if let Some(cfg) = replay {
            info!(provider = %self.options.name, "re-configuring restarted provider");
            let diags = provider
                .configure(&cfg.terraform_version, &cfg.config)
                .await?;
            if diags.has_errors() {
                return Err(HostError::Reconfigure(diags.error_summary()));
            }
        }
        let inst = Instance { plugin, provider };
        *guard = Some(inst.clone());
        Ok(inst)
    }

    async fn with<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(Arc<dyn Plugin>) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| ProviderError::Crashed { rpc: "acquire" })?;
        let inst = self
            .instance()
            .await
            .map_err(HostError::into_provider_error)?;
        let result = f(inst.provider.clone()).await;
        if let Err(ProviderError::Crashed { rpc } | ProviderError::Timeout { rpc, .. }) = &result {
            warn!(provider = %self.options.name, rpc, "provider crashed or hung during a request");
            let mut guard = self.current.lock().await;
            if guard
                .as_ref()
                .is_some_and(|i| i.plugin.pid() == inst.plugin.pid())
            {
                *guard = None;
            }
        }
        result
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error("restarted provider rejected its configuration: {0}")]
    Reconfigure(String),
}

impl HostError {
    fn into_provider_error(self) -> ProviderError {
        match self {
            HostError::Provider(e) => e,
            HostError::Launch(e) => ProviderError::Launch(Box::new(e)),
            HostError::Reconfigure(text) => ProviderError::Reconfigure(text),
        }
    }
}

#[async_trait]
impl Plugin for ProviderHost {
    fn protocol_version(&self) -> u32 {
        self.current
            .try_lock()
            .ok()
            .and_then(|g| g.as_ref().map(|i| i.plugin.protocol))
            .unwrap_or(0)
    }

    async fn schema(&self) -> Result<Arc<ProviderSchema>> {
        self.with(|p| async move { p.schema().await }).await
    }

    async fn schema_for(&self, wanted: &[(super::TypeOf, &str)]) -> Result<Arc<ProviderSchema>> {
        self.with(|p| async move { p.schema_for(wanted).await })
            .await
    }

    async fn validate_provider_config(&self, config: &Value) -> Result<Vec<Diagnostic>> {
        self.with(|p| async move { p.validate_provider_config(config).await })
            .await
    }

    async fn validate_resource_config(
        &self,
        type_name: &str,
        config: &Value,
    ) -> Result<Vec<Diagnostic>> {
        self.with(|p| async move { p.validate_resource_config(type_name, config).await })
            .await
    }

    async fn validate_data_source_config(
        &self,
        type_name: &str,
        config: &Value,
    ) -> Result<Vec<Diagnostic>> {
        self.with(|p| async move { p.validate_data_source_config(type_name, config).await })
            .await
    }

    async fn configure(&self, terraform_version: &str, config: &Value) -> Result<Vec<Diagnostic>> {
        let diags = self
            .with(|p| async move { p.configure(terraform_version, config).await })
            .await?;
        if !diags.has_errors()
            && let Ok(mut c) = self.configured.lock()
        {
            *c = Some(Configured {
                terraform_version: terraform_version.to_string(),
                config: config.clone(),
            });
        }
        Ok(diags)
    }

    async fn upgrade_resource_state(&self, req: UpgradeRequest) -> Result<UpgradeResponse> {
        self.with(|p| async move { p.upgrade_resource_state(req).await })
            .await
    }

    async fn read_resource(&self, req: ReadRequest) -> Result<ReadResponse> {
        self.with(|p| async move { p.read_resource(req).await })
            .await
    }

    async fn plan_resource_change(&self, req: PlanRequest) -> Result<PlanResponse> {
        self.with(|p| async move { p.plan_resource_change(req).await })
            .await
    }

    async fn apply_resource_change(&self, req: ApplyRequest) -> Result<ApplyResponse> {
        self.with(|p| async move { p.apply_resource_change(req).await })
            .await
    }

    async fn import_resource_state(
        &self,
        type_name: &str,
        by: &super::ImportBy,
    ) -> Result<ImportResponse> {
        self.with(|p| async move { p.import_resource_state(type_name, by).await })
            .await
    }

    async fn identity_schemas(&self) -> Result<std::sync::Arc<super::IdentitySchemas>> {
        self.with(|p| async move { p.identity_schemas().await })
            .await
    }

    async fn read_data_source(&self, type_name: &str, config: &Value) -> Result<ReadDataResponse> {
        self.with(|p| async move { p.read_data_source(type_name, config).await })
            .await
    }

    async fn list_resource(&self, req: super::ListRequest) -> Result<super::ListResponse> {
        self.with(|p| {
            let req = req.clone();
            async move { p.list_resource(req).await }
        })
        .await
    }

    async fn stop(&self) -> Result<String> {
        // Stop must not wait for a permit: it exists to interrupt the requests holding them.
        let inst = self.current.lock().await.clone();
        match inst {
            Some(i) => i.provider.stop().await,
            None => Ok(String::new()),
        }
    }
}

/// The protocol adapter for a launched process: the host, not the launcher, knows the adapters
/// (so `launch` depends on no adapter, and the adapters on `launch` only for the client type).
pub fn adapter(client: PluginClient) -> Arc<dyn Plugin> {
    if client.protocol == 5 {
        Arc::new(super::grpc::Adapter::<super::v5::V5>::new(client))
    } else {
        Arc::new(super::grpc::Adapter::<super::v6::V6>::new(client))
    }
}

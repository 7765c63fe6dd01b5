//! Remembers what another source answered, so resolving many providers (or the same provider
//! for several platforms) queries a registry once per question, as Terraform's `MemoizeSource`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{AvailableVersions, PackageMeta, Source};
use crate::address::{Platform, ProviderAddress};
use crate::error::Result;
use crate::version::Version;

/// Caches successful answers of the wrapped source; errors are not cached, so a transient
/// failure can be retried.
#[derive(Debug)]
pub struct MemoizeSource {
    inner: Arc<dyn Source>,
    versions: Mutex<HashMap<ProviderAddress, AvailableVersions>>,
    metas: Mutex<HashMap<(ProviderAddress, Version, Platform), PackageMeta>>,
}

impl MemoizeSource {
    pub fn new(inner: Arc<dyn Source>) -> Self {
        Self {
            inner,
            versions: Mutex::default(),
            metas: Mutex::default(),
        }
    }
}

#[async_trait::async_trait]
impl Source for MemoizeSource {
    async fn available_versions(&self, provider: &ProviderAddress) -> Result<AvailableVersions> {
        if let Some(hit) = self
            .versions
            .lock()
            .ok()
            .and_then(|m| m.get(provider).cloned())
        {
            return Ok(hit);
        }
        let got = self.inner.available_versions(provider).await?;
        if let Ok(mut m) = self.versions.lock() {
            m.insert(provider.clone(), got.clone());
        }
        Ok(got)
    }

    async fn package_meta(
        &self,
        provider: &ProviderAddress,
        version: &Version,
        platform: &Platform,
    ) -> Result<PackageMeta> {
        let key = (provider.clone(), version.clone(), platform.clone());
        if let Some(hit) = self.metas.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(hit);
        }
        let got = self.inner.package_meta(provider, version, platform).await?;
        if let Ok(mut m) = self.metas.lock() {
            m.insert(key, got.clone());
        }
        Ok(got)
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

//! An in-memory source for tests: a stateful HashMap of packages, not an expectation mock.
//! It also counts queries, so tests can assert that a cache hit asked nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{AvailableVersions, PackageMeta, Source};
use crate::address::{Platform, ProviderAddress};
use crate::error::{Error, Result};
use crate::version::Version;

#[derive(Debug, Default)]
pub struct MockSource {
    packages: Mutex<HashMap<ProviderAddress, Vec<PackageMeta>>>,
    queries: AtomicUsize,
}

impl MockSource {
    pub fn new() -> Self {
        Self::default()
    }

    /// Offer a package (replacing one for the same version and platform).
    pub fn add(&self, meta: PackageMeta) {
        if let Ok(mut m) = self.packages.lock() {
            let list = m.entry(meta.provider.clone()).or_default();
            list.retain(|p| !(p.version == meta.version && p.platform == meta.platform));
            list.push(meta);
        }
    }

    /// How many questions the source has been asked.
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }

    fn list(&self, provider: &ProviderAddress) -> Option<Vec<PackageMeta>> {
        self.queries.fetch_add(1, Ordering::SeqCst);
        self.packages.lock().ok()?.get(provider).cloned()
    }
}

#[async_trait::async_trait]
impl Source for MockSource {
    async fn available_versions(&self, provider: &ProviderAddress) -> Result<AvailableVersions> {
        let list = self.list(provider).ok_or_else(|| Error::UnknownProvider {
            provider: provider.clone(),
            source_name: self.describe(),
        })?;
        let mut out = AvailableVersions::default();
        for p in list {
            out.versions.insert(p.version, p.protocols);
        }
        Ok(out)
    }

    async fn package_meta(
        &self,
        provider: &ProviderAddress,
        version: &Version,
        platform: &Platform,
    ) -> Result<PackageMeta> {
        self.list(provider)
            .unwrap_or_default()
            .into_iter()
            .find(|p| &p.version == version && &p.platform == platform)
            .ok_or_else(|| Error::PlatformNotSupported {
                provider: provider.clone(),
                version: version.clone(),
                platform: platform.clone(),
            })
    }

    fn describe(&self) -> String {
        "the mock source".to_string()
    }
}

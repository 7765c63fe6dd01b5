//! A provider mirror on disk, in either of Terraform's layouts: packed
//! (`HOST/NAMESPACE/TYPE/terraform-provider-TYPE_VERSION_OS_ARCH.zip`) or unpacked
//! (`HOST/NAMESPACE/TYPE/VERSION/OS_ARCH/`). Air-gapped clusters point Kraken at one; a
//! Terraform plugin cache is a valid unpacked mirror. Trust comes from the lock file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{
    Authentication, AvailableVersions, PackageLocation, PackageMeta, Source, package_filename,
};
use crate::address::{Platform, ProviderAddress};
use crate::error::{Error, Result};
use crate::version::Version;

#[derive(Debug, Clone)]
pub struct FilesystemMirrorSource {
    root: PathBuf,
}

impl FilesystemMirrorSource {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn provider_dir(&self, p: &ProviderAddress) -> PathBuf {
        self.root
            .join(&p.hostname)
            .join(&p.namespace)
            .join(&p.type_name)
    }

    /// Every package of a provider: (version, platform) → location. Unpacked directories win
    /// over zips of the same package (no unzip needed).
    fn scan(&self, p: &ProviderAddress) -> Result<BTreeMap<(Version, Platform), PackageLocation>> {
        let dir = self.provider_dir(p);
        let mut found = BTreeMap::new();
        let prefix = format!("terraform-provider-{}_", p.type_name);
        for entry in read_dir(&dir)? {
            let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
            let path = entry.path();
            if path.is_dir() {
                let Ok(version) = name.parse::<Version>() else {
                    continue;
                };
                for plat in read_dir(&path)? {
                    let plat_name = plat.file_name().to_string_lossy().into_owned();
                    if let (true, Ok(platform)) =
                        (plat.path().is_dir(), plat_name.parse::<Platform>())
                    {
                        found.insert(
                            (version.clone(), platform),
                            PackageLocation::LocalDir(plat.path()),
                        );
                    }
                }
            } else if let Some(info) = name
                .strip_prefix(&prefix)
                .and_then(|s| s.strip_suffix(".zip"))
            {
                // VERSION_OS_ARCH; the version itself never contains '_'.
                let mut parts = info.splitn(2, '_');
                let (Some(v), Some(plat)) = (parts.next(), parts.next()) else {
                    continue;
                };
                if let (Ok(version), Ok(platform)) =
                    (v.parse::<Version>(), plat.parse::<Platform>())
                {
                    found
                        .entry((version, platform))
                        .or_insert(PackageLocation::LocalArchive(path));
                }
            }
        }
        Ok(found)
    }
}

/// Entries of a directory; a missing directory has none.
fn read_dir(dir: &Path) -> Result<Vec<std::fs::DirEntry>> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(Error::io(format!("failed to read {}", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::Io {
            context: format!("failed to read {}", dir.display()),
            source: e,
        }),
    }
}

#[async_trait::async_trait]
impl Source for FilesystemMirrorSource {
    async fn available_versions(&self, provider: &ProviderAddress) -> Result<AvailableVersions> {
        let found = self.scan(provider)?;
        if found.is_empty() {
            return Err(Error::UnknownProvider {
                provider: provider.clone(),
                source_name: self.describe(),
            });
        }
        let versions = found.keys().map(|(v, _)| (v.clone(), Vec::new())).collect();
        Ok(AvailableVersions {
            versions,
            warnings: Vec::new(),
        })
    }

    async fn package_meta(
        &self,
        provider: &ProviderAddress,
        version: &Version,
        platform: &Platform,
    ) -> Result<PackageMeta> {
        let found = self.scan(provider)?;
        let location = found
            .get(&(version.clone(), platform.clone()))
            .cloned()
            .ok_or_else(|| Error::PlatformNotSupported {
                provider: provider.clone(),
                version: version.clone(),
                platform: platform.clone(),
            })?;
        Ok(PackageMeta {
            provider: provider.clone(),
            version: version.clone(),
            platform: platform.clone(),
            filename: package_filename(provider, version, platform),
            protocols: Vec::new(),
            location,
            authentication: Authentication::None,
        })
    }

    fn describe(&self) -> String {
        format!("the filesystem mirror at {}", self.root.display())
    }
}

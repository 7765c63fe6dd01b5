//! The provider network mirror protocol: `BASE/HOST/NAMESPACE/TYPE/index.json` lists versions,
//! `BASE/HOST/NAMESPACE/TYPE/VERSION.json` lists one archive per platform with optional
//! `hashes`. A mirror is trusted by those hashes and by the lock file (as in Terraform); it has
//! no signatures.

use std::collections::BTreeMap;

use reqwest::Url;
use serde::Deserialize;

use super::{Authentication, AvailableVersions, PackageLocation, PackageMeta, Source};
use crate::address::{Platform, ProviderAddress};
use crate::error::{Error, Result};
use crate::hash::PackageHash;
use crate::http::HttpClient;
use crate::version::Version;

/// A network mirror at a base URL.
#[derive(Debug)]
pub struct NetworkMirrorSource {
    http: HttpClient,
    base: Url,
}

#[derive(Deserialize)]
struct IndexBody {
    versions: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct VersionBody {
    archives: BTreeMap<String, ArchiveEntry>,
}

#[derive(Deserialize)]
struct ArchiveEntry {
    url: String,
    #[serde(default)]
    hashes: Vec<String>,
}

impl NetworkMirrorSource {
    /// `base` must be https (Terraform refuses plain http for mirrors too).
    pub fn new(http: HttpClient, mut base: Url) -> Result<Self> {
        if base.scheme() != "https" {
            return Err(Error::Config(format!(
                "network mirror {base} must use https"
            )));
        }
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        Ok(Self { http, base })
    }

    fn url(&self, provider: &ProviderAddress, file: &str) -> Result<Url> {
        let rel = format!(
            "{}/{}/{}/{file}",
            provider.hostname, provider.namespace, provider.type_name
        );
        self.base
            .join(&rel)
            .map_err(|_| Error::Config(format!("cannot build a mirror url for {rel}")))
    }
}

#[async_trait::async_trait]
impl Source for NetworkMirrorSource {
    async fn available_versions(&self, provider: &ProviderAddress) -> Result<AvailableVersions> {
        let url = self.url(provider, "index.json")?;
        let body: IndexBody = match self.http.get_json(&url).await {
            Ok((b, _)) => b,
            Err(Error::HttpStatus { status: 404, .. }) => {
                return Err(Error::UnknownProvider {
                    provider: provider.clone(),
                    source_name: self.describe(),
                });
            }
            Err(e) => return Err(e),
        };
        let versions = body
            .versions
            .keys()
            .filter_map(|v| v.parse().ok())
            .map(|v| (v, Vec::new()))
            .collect();
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
        let url = self.url(provider, &format!("{version}.json"))?;
        let (body, final_url): (VersionBody, Url) = self.http.get_json(&url).await?;
        let Some(archive) = body.archives.get(&platform.to_string()) else {
            return Err(Error::PlatformNotSupported {
                provider: provider.clone(),
                version: version.clone(),
                platform: platform.clone(),
            });
        };
        let location = final_url
            .join(&archive.url)
            .map_err(|_| Error::InvalidResponse {
                url: final_url.to_string(),
                reason: format!("archive url {:?} is invalid", archive.url),
            })?;
        let hashes = archive
            .hashes
            .iter()
            .map(|h| {
                h.parse::<PackageHash>()
                    .map_err(|_| Error::InvalidResponse {
                        url: final_url.to_string(),
                        reason: format!("invalid hash {h:?}"),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let filename = location
            .path_segments()
            .and_then(|mut s| s.next_back())
            .unwrap_or_default()
            .to_string();
        Ok(PackageMeta {
            provider: provider.clone(),
            version: version.clone(),
            platform: platform.clone(),
            filename,
            protocols: Vec::new(),
            location: PackageLocation::Http(location),
            authentication: if hashes.is_empty() {
                Authentication::None
            } else {
                Authentication::Hashes(hashes)
            },
        })
    }

    fn describe(&self) -> String {
        format!("the network mirror at {}", self.base)
    }
}

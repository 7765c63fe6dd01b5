//! The provider registry protocol (Terraform's and OpenTofu's registries speak the same shape):
//! service discovery at `https://HOST/.well-known/terraform.json` (`providers.v1`), then
//! `:namespace/:type/versions` and `:namespace/:type/:version/download/:os/:arch`. Links in a
//! response resolve against the response's final URL, as Terraform does.

use std::collections::HashMap;
use std::sync::Mutex;

use reqwest::Url;
use serde::Deserialize;

use super::{
    Authentication, AvailableVersions, PackageLocation, PackageMeta, RegistryEvidence, Source,
    protocols_supported,
};
use crate::address::{Platform, ProviderAddress};
use crate::error::{Error, Result};
use crate::hash::parse_sha256_hex;
use crate::http::HttpClient;
use crate::verify::SigningKey;
use crate::version::Version;

/// A provider registry, found by service discovery on the provider's hostname (or at an
/// overriding base URL, for private registries and tests).
#[derive(Debug)]
pub struct RegistrySource {
    http: HttpClient,
    /// Hostname → root URL where discovery happens instead of `https://HOST/`.
    overrides: HashMap<String, Url>,
    discovered: Mutex<HashMap<String, Url>>,
}

#[derive(Deserialize)]
struct VersionsBody {
    #[serde(default)]
    versions: Vec<VersionEntry>,
    #[serde(default)]
    warnings: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct VersionEntry {
    version: String,
    #[serde(default)]
    protocols: Vec<String>,
}

#[derive(Deserialize)]
struct DownloadBody {
    #[serde(default)]
    protocols: Vec<String>,
    os: String,
    arch: String,
    filename: String,
    download_url: String,
    shasum: String,
    #[serde(default)]
    shasums_url: String,
    #[serde(default)]
    shasums_signature_url: String,
    #[serde(default)]
    signing_keys: SigningKeys,
}

#[derive(Deserialize, Default)]
struct SigningKeys {
    #[serde(default)]
    gpg_public_keys: Vec<SigningKey>,
}

impl RegistrySource {
    pub fn new(http: HttpClient) -> Self {
        Self {
            http,
            overrides: HashMap::new(),
            discovered: Mutex::new(HashMap::new()),
        }
    }

    /// Do service discovery for `hostname` at `root` instead of `https://hostname/`.
    pub fn with_base_url(mut self, hostname: &str, root: Url) -> Self {
        self.overrides.insert(hostname.to_ascii_lowercase(), root);
        self
    }

    /// The `providers.v1` base URL of a host.
    async fn base_url(&self, hostname: &str) -> Result<Url> {
        if let Some(url) = self
            .discovered
            .lock()
            .ok()
            .and_then(|m| m.get(hostname).cloned())
        {
            return Ok(url);
        }
        let root = match self.overrides.get(hostname) {
            Some(u) => u.clone(),
            None => parse_url(&format!("https://{hostname}/"))?,
        };
        let disco = join(&root, ".well-known/terraform.json")?;
        let no_service = || Error::NoRegistryService {
            host: hostname.to_string(),
        };
        let (doc, final_url) = match self.http.get_json::<serde_json::Value>(&disco).await {
            Ok(found) => found,
            Err(Error::HttpStatus { status: 404, .. }) => return Err(no_service()),
            Err(e) => return Err(e),
        };
        let raw = doc
            .get("providers.v1")
            .and_then(|v| v.as_str())
            .ok_or_else(no_service)?;
        let mut base = final_url
            .join(raw)
            .map_err(|_| invalid(&final_url, "providers.v1 is not a url"))?;
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        if let Ok(mut m) = self.discovered.lock() {
            m.insert(hostname.to_string(), base.clone());
        }
        Ok(base)
    }

    /// The newest version whose protocols Kraken speaks, to suggest in an error.
    async fn closest_compatible(&self, provider: &ProviderAddress) -> Option<Version> {
        let all = self.available_versions(provider).await.ok()?;
        all.versions
            .iter()
            .rev()
            .find(|(v, protos)| {
                !v.is_prerelease() && !protos.is_empty() && protocols_supported(protos)
            })
            .map(|(v, _)| v.clone())
    }

    async fn evidence(&self, body: &DownloadBody, base: &Url) -> Result<RegistryEvidence> {
        let shasum = parse_sha256_hex(&body.shasum)
            .ok_or_else(|| invalid(base, "shasum is not a sha-256 hex digest"))?;
        let sums_url = link(base, &body.shasums_url, "shasums_url")?;
        let shasums = self.http.get_document(&sums_url).await?.body;
        let signature = if body.shasums_signature_url.is_empty() {
            Vec::new()
        } else {
            let sig_url = link(base, &body.shasums_signature_url, "shasums_signature_url")?;
            self.http.get_document(&sig_url).await?.body
        };
        Ok(RegistryEvidence {
            shasum,
            shasums,
            signature,
            keys: body.signing_keys.gpg_public_keys.clone(),
        })
    }
}

#[async_trait::async_trait]
impl Source for RegistrySource {
    async fn available_versions(&self, provider: &ProviderAddress) -> Result<AvailableVersions> {
        let base = self.base_url(&provider.hostname).await?;
        let url = join(
            &base,
            &format!("{}/{}/versions", provider.namespace, provider.type_name),
        )?;
        let body: VersionsBody = match self.http.get_json(&url).await {
            Ok((b, _)) => b,
            Err(Error::HttpStatus { status: 404, .. }) => {
                return Err(Error::UnknownProvider {
                    provider: provider.clone(),
                    source_name: self.describe(),
                });
            }
            Err(e) => return Err(e),
        };
        let mut out = AvailableVersions {
            warnings: body.warnings.unwrap_or_default(),
            ..Default::default()
        };
        for entry in body.versions {
            match entry.version.parse::<Version>() {
                Ok(v) => {
                    out.versions.insert(v, entry.protocols);
                }
                Err(_) => {
                    tracing::warn!(version = %entry.version, "registry lists an invalid version; ignoring it")
                }
            }
        }
        Ok(out)
    }

    async fn package_meta(
        &self,
        provider: &ProviderAddress,
        version: &Version,
        platform: &Platform,
    ) -> Result<PackageMeta> {
        let base = self.base_url(&provider.hostname).await?;
        let path = format!(
            "{}/{}/{version}/download/{}/{}",
            provider.namespace, provider.type_name, platform.os, platform.arch
        );
        let url = join(&base, &path)?;
        let (body, final_url): (DownloadBody, Url) = match self.http.get_json(&url).await {
            Ok(found) => found,
            Err(Error::HttpStatus { status: 404, .. }) => {
                return Err(Error::PlatformNotSupported {
                    provider: provider.clone(),
                    version: version.clone(),
                    platform: platform.clone(),
                });
            }
            Err(e) => return Err(e),
        };
        if !protocols_supported(&body.protocols) {
            return Err(Error::ProtocolNotSupported {
                provider: provider.clone(),
                version: version.clone(),
                protocols: body.protocols.join(", "),
                suggestion: self.closest_compatible(provider).await,
            });
        }
        if body.os != platform.os || body.arch != platform.arch {
            return Err(invalid(
                &final_url,
                &format!("package is for {}_{}, not {platform}", body.os, body.arch),
            ));
        }
        let download = link(&final_url, &body.download_url, "download_url")?;
        let evidence = self.evidence(&body, &final_url).await?;
        Ok(PackageMeta {
            provider: provider.clone(),
            version: version.clone(),
            platform: platform.clone(),
            filename: body.filename,
            protocols: body.protocols,
            location: PackageLocation::Http(download),
            authentication: Authentication::Registry(evidence),
        })
    }

    fn describe(&self) -> String {
        "the provider registry".to_string()
    }
}

fn parse_url(s: &str) -> Result<Url> {
    Url::parse(s).map_err(|_| Error::Config(format!("invalid url {s:?}")))
}

fn join(base: &Url, rel: &str) -> Result<Url> {
    base.join(rel)
        .map_err(|_| invalid(base, &format!("cannot join {rel:?}")))
}

/// Resolve a link from a response; only http(s) is acceptable.
fn link(base: &Url, raw: &str, field: &str) -> Result<Url> {
    if raw.is_empty() {
        return Err(invalid(base, &format!("{field} is missing")));
    }
    let url = base
        .join(raw)
        .map_err(|_| invalid(base, &format!("{field} is not a url")))?;
    if url.scheme() != "https" && url.scheme() != "http" {
        return Err(invalid(base, &format!("{field} must use http or https")));
    }
    Ok(url)
}

fn invalid(url: &Url, reason: &str) -> Error {
    Error::InvalidResponse {
        url: url.to_string(),
        reason: reason.to_string(),
    }
}

//! Where packages come from. Every origin — a provider registry, a network mirror, a directory on
//! disk, or a test double — implements `Source` in Kraken's own types, so the installer (and
//! the operator's `Provider` controller) never sees a wire format. Modelled on OpenTofu's
//! `getproviders.Source`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use reqwest::Url;

use crate::address::{Platform, ProviderAddress};
use crate::error::Result;
use crate::hash::PackageHash;
use crate::verify::SigningKey;
use crate::version::Version;

mod filesystem;
mod memoize;
mod mirror;
mod mock;
mod registry;

pub use filesystem::FilesystemMirrorSource;
pub use memoize::MemoizeSource;
pub use mirror::NetworkMirrorSource;
pub use mock::MockSource;
pub use registry::RegistrySource;

/// The plugin protocol majors Kraken's plugin host speaks.
pub const SUPPORTED_PROTOCOL_MAJORS: [u64; 2] = [5, 6];

/// A source of provider packages.
#[async_trait::async_trait]
pub trait Source: Send + Sync + std::fmt::Debug {
    /// Every version the source offers, with the plugin protocols each speaks when known.
    async fn available_versions(&self, provider: &ProviderAddress) -> Result<AvailableVersions>;

    /// Where to get one package and how to authenticate it.
    async fn package_meta(
        &self,
        provider: &ProviderAddress,
        version: &Version,
        platform: &Platform,
    ) -> Result<PackageMeta>;

    /// For messages: "provider registry at https://…", "filesystem mirror at /…".
    fn describe(&self) -> String;
}

/// The versions of one provider.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AvailableVersions {
    /// Version → protocol versions (`"5.0"`); empty when the source does not say.
    pub versions: BTreeMap<Version, Vec<String>>,
    /// Deprecation notices and the like, passed through from the registry.
    pub warnings: Vec<String>,
}

/// One downloadable (or local) package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageMeta {
    pub provider: ProviderAddress,
    pub version: Version,
    pub platform: Platform,
    /// The distribution file name (`terraform-provider-random_3.6.0_linux_amd64.zip`).
    pub filename: String,
    /// Protocol versions the package speaks; empty when unknown (mirrors).
    pub protocols: Vec<String>,
    pub location: PackageLocation,
    pub authentication: Authentication,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackageLocation {
    /// A zip to download.
    Http(Url),
    /// A zip on disk (packed filesystem mirror).
    LocalArchive(PathBuf),
    /// An unpacked package directory (unpacked filesystem mirror).
    LocalDir(PathBuf),
}

/// How the installer establishes that a package is the one the origin meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    /// The registry protocol: signed checksum list plus the announced SHA-256 of the zip.
    Registry(RegistryEvidence),
    /// The package must match one of these hashes (a network mirror's own `hashes`).
    Hashes(Vec<PackageHash>),
    /// Nothing beyond the lock file (filesystem mirrors, mirrors without hashes).
    None,
}

/// What the registry's download endpoint returned to prove a package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryEvidence {
    /// SHA-256 of the zip, as announced in the download metadata.
    pub shasum: [u8; 32],
    /// The `SHA256SUMS` document.
    pub shasums: Vec<u8>,
    /// The detached signature over `shasums`.
    pub signature: Vec<u8>,
    pub keys: Vec<SigningKey>,
}

impl PackageMeta {
    /// Whether some listed protocol is one Kraken speaks (or none is listed).
    pub fn protocol_supported(&self) -> bool {
        protocols_supported(&self.protocols)
    }
}

/// `["4.0", "5.1"]` → true; an empty list means "unknown", which is allowed.
pub fn protocols_supported(protocols: &[String]) -> bool {
    protocols.is_empty()
        || protocols.iter().any(|p| {
            p.split('.')
                .next()
                .and_then(|m| m.parse::<u64>().ok())
                .is_some_and(|m| SUPPORTED_PROTOCOL_MAJORS.contains(&m))
        })
}

/// Packages of a provider in a directory use this file name (Terraform's convention).
pub fn package_filename(
    provider: &ProviderAddress,
    version: &Version,
    platform: &Platform,
) -> String {
    format!(
        "terraform-provider-{}_{version}_{platform}.zip",
        provider.type_name
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_support() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(protocols_supported(&s(&["5.0"])));
        assert!(protocols_supported(&s(&["4.0", "6.1"])));
        assert!(!protocols_supported(&s(&["4.0"])));
        assert!(!protocols_supported(&s(&["7.0", "x"])));
        assert!(protocols_supported(&[]));
    }
}

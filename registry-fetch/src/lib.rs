//! Provider installation from Terraform-style registries and mirrors.
//!
//! A user names a provider (`hashicorp/aws ~> 5.0`); this crate finds the newest matching
//! version in a [`Source`] — the provider registry, a network mirror or a directory on disk —
//! downloads the package for this machine, proves it authentic (OpenPGP signature over the
//! registry's `SHA256SUMS`, the checksums, and the `h1:`/`zh:` hashes of Terraform's lock file),
//! unpacks it safely and moves it into a plugin cache laid out like Terraform's, so an existing
//! `TF_PLUGIN_CACHE_DIR` and `.terraform.lock.hcl` are shared with Terraform users as they are.
//!
//! The pipeline lives in [`Installer`]; the crate knows nothing of Kubernetes or the CLI.

// `Error` carries the typed provider, version and platform so callers can match on causes; an
// error happens at most once per install (network-bound work), so its size costs nothing
// measurable, while boxing every field would make matching clumsy.
#![allow(clippy::result_large_err)]

pub mod address;
pub mod cache;
pub mod error;
pub mod hash;
pub mod http;
pub mod install;
pub mod lockfile;
pub mod progress;
pub mod source;
pub mod unzip;
pub mod verify;
pub mod version;

pub use address::{AddressError, Platform, ProviderAddress};
pub use cache::PluginCache;
pub use error::{Error, Result};
pub use hash::{HashScheme, PackageHash};
pub use http::{HttpClient, HttpConfig};
pub use install::{InstallRequest, Installed, Installer};
pub use lockfile::{LockFile, LockFileError, ProviderLock};
pub use progress::{NoProgress, Progress, TerminalProgress};
pub use source::{
    AvailableVersions, FilesystemMirrorSource, MemoizeSource, MockSource, NetworkMirrorSource,
    PackageLocation, PackageMeta, RegistrySource, Source,
};
pub use version::{Version, VersionConstraints, VersionError};

/// The registry host a bare `namespace/type` source address resolves to, as in Terraform.
pub const DEFAULT_REGISTRY_HOST: &str = "registry.terraform.io";

/// The platform directory name Terraform uses for the machine Kraken runs on (`linux_amd64`, …).
pub fn current_platform() -> String {
    let os = std::env::consts::OS;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        other => other,
    };
    format!("{os}_{arch}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_uses_go_names() {
        let p = current_platform();
        assert!(!p.contains("x86_64") && p.contains('_'), "{p}");
    }
}

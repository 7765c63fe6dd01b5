//! Finding a provider binary for a ProviderConfig's `source` and `version`.
//!
//! Providers are looked up, newest allowed version first, in Terraform's unpacked filesystem
//! mirror layout — `<dir>/<host>/<namespace>/<type>/<version>/<os>_<arch>/terraform-provider-<type>*`
//! — in each `--plugin-dir` and then in the plugin cache `kraken fetch` installs into (the same
//! layout). Installing providers at runtime is the `Provider` kind's job; this module only
//! finds what is there.

use std::path::{Path, PathBuf};

use kraken_registry_fetch::{Platform, ProviderAddress, Version, VersionConstraints};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("invalid provider source {address:?}: {message}")]
    Source { address: String, message: String },
    #[error("invalid version constraint {constraint:?}: {message}")]
    Constraint { constraint: String, message: String },
    #[error(
        "no version of {provider} matching {constraint:?} for {platform} in {searched}; install it with `kraken fetch`"
    )]
    NotFound {
        provider: String,
        constraint: String,
        platform: String,
        searched: String,
    },
}

/// A provider binary and the version it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The canonical source address (`registry.terraform.io/hashicorp/random`).
    pub address: String,
    pub version: String,
    pub binary: PathBuf,
}

#[derive(Debug, Clone)]
pub struct Resolver {
    dirs: Vec<PathBuf>,
    platform: Platform,
}

impl Resolver {
    pub fn new(dirs: Vec<PathBuf>) -> Self {
        Self {
            dirs,
            platform: Platform::current(),
        }
    }

    /// The newest installed version of `source` allowed by `constraint` (any when `None`).
    pub fn resolve(
        &self,
        source: &str,
        constraint: Option<&str>,
    ) -> Result<Resolved, ResolveError> {
        let provider: ProviderAddress = source.parse().map_err(|e| ResolveError::Source {
            address: source.to_owned(),
            message: format!("{e}"),
        })?;
        let constraints: VersionConstraints = match constraint.map(str::trim) {
            None | Some("") => VersionConstraints::any(),
            Some(c) => c.parse().map_err(|e| ResolveError::Constraint {
                constraint: c.to_owned(),
                message: format!("{e}"),
            })?,
        };
        let mut best: Option<(Version, PathBuf)> = None;
        for dir in &self.dirs {
            let base = dir
                .join(&provider.hostname)
                .join(&provider.namespace)
                .join(&provider.type_name);
            for (version, binary) in self.candidates(&base, &provider) {
                if constraints.allows(&version) && best.as_ref().is_none_or(|(b, _)| version > *b) {
                    best = Some((version, binary));
                }
            }
        }
        let Some((version, binary)) = best else {
            return Err(ResolveError::NotFound {
                provider: provider.to_string(),
                constraint: constraint.unwrap_or("any").to_owned(),
                platform: self.platform.to_string(),
                searched: self
                    .dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        Ok(Resolved {
            address: provider.to_string(),
            version: version.to_string(),
            binary,
        })
    }

    /// Every (version, executable) under `<base>/<version>/<platform>/`.
    fn candidates(&self, base: &Path, provider: &ProviderAddress) -> Vec<(Version, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(base) else {
            return Vec::new();
        };
        let prefix = provider.binary_prefix();
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let Some(version) = entry
                .file_name()
                .to_str()
                .and_then(|v| v.parse::<Version>().ok())
            else {
                continue;
            };
            let pkg = entry.path().join(self.platform.to_string());
            if let Some(binary) = executable(&pkg, &prefix) {
                out.push((version, binary));
            }
        }
        out
    }
}

fn executable(dir: &Path, prefix: &str) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn install(root: &Path, version: &str) -> PathBuf {
        let dir = root
            .join("registry.terraform.io/hashicorp/random")
            .join(version)
            .join(Platform::current().to_string());
        std::fs::create_dir_all(&dir).expect("mkdir");
        let bin = dir.join(format!("terraform-provider-random_v{version}"));
        std::fs::write(&bin, "").expect("write");
        bin
    }

    #[test]
    fn picks_newest_allowed_version_across_dirs() {
        let a = tempfile::tempdir().expect("tmp");
        let b = tempfile::tempdir().expect("tmp");
        install(a.path(), "3.5.0");
        let newest = install(b.path(), "3.6.0");
        let old = install(a.path(), "2.0.0");
        let r = Resolver::new(vec![a.path().into(), b.path().into()]);
        let got = r.resolve("hashicorp/random", None).expect("found");
        assert_eq!(got.binary, newest);
        assert_eq!(got.address, "registry.terraform.io/hashicorp/random");
        assert_eq!(got.version, "3.6.0");
        let got = r.resolve("hashicorp/random", Some("< 3.0")).expect("found");
        assert_eq!(got.binary, old);
        let err = r
            .resolve("hashicorp/random", Some(">= 9"))
            .expect_err("none");
        assert!(
            err.to_string()
                .contains("no version of registry.terraform.io/hashicorp/random")
        );
        assert!(matches!(
            r.resolve("not a source!", None),
            Err(ResolveError::Source { .. })
        ));
    }
}

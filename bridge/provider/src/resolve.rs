//! Finding a provider binary for a ProviderConfig's `source` and `version`.
//!
//! Providers are looked up, newest allowed version first, in Terraform's unpacked filesystem
//! mirror layout — `<dir>/<host>/<namespace>/<type>/<version>/<os>_<arch>/terraform-provider-<type>*`
//! — in each `--plugin-dir` and then in the plugin cache `kraken fetch` installs into (the same
//! layout). Installing providers at runtime is the `Provider` kind's job; this module only
//! finds what is there. What may be launched of what is there is [`crate::pins`]'s business:
//! [`Resolver::resolve_pinned`] considers only the versions someone trusted recorded.

use std::path::{Path, PathBuf};

use kraken_registry_fetch::{Platform, ProviderAddress, Version, VersionConstraints};

use crate::pins::{LOCK_FILE, Pin, Pins};

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
    #[error(
        "{provider} {found} matching {constraint:?} is in {searched}, but no lock file or installed \
         Provider records its hashes, and only recorded packages are launched (install it with a \
         Provider, or pin it in a plugin directory's {LOCK_FILE}){problems}"
    )]
    NotPinned {
        provider: String,
        constraint: String,
        /// The versions found, newest first.
        found: String,
        searched: String,
        /// Lock files that could not be read, as `; ...` (empty when none).
        problems: String,
    },
}

/// A binary [`Resolver::resolve_pinned`] found, and what was recorded for its version (to check
/// the package against before it is launched: [`crate::pins::PackageCheck`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    pub resolved: Resolved,
    pub pins: Vec<Pin>,
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

    /// The directories searched, in order.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The newest installed version of `source` allowed by `constraint` (any when `None`),
    /// whoever recorded it or not: for reading a schema, never for launching a tenant's
    /// provider ([`Self::resolve_pinned`]).
    pub fn resolve(
        &self,
        source: &str,
        constraint: Option<&str>,
    ) -> Result<Resolved, ResolveError> {
        let (provider, mut found) = self.allowed(source, constraint)?;
        let Some((version, binary)) = found.pop() else {
            return Err(self.not_found(&provider, constraint));
        };
        Ok(Resolved {
            address: provider.to_string(),
            version: version.to_string(),
            binary,
        })
    }

    /// The newest installed version of `source` allowed by `constraint` that `pins`, or the lock
    /// file of a directory searched ([`LOCK_FILE`]), records. Versions nobody recorded are not
    /// candidates; the package itself is checked against the pins returned.
    pub fn resolve_pinned(
        &self,
        source: &str,
        constraint: Option<&str>,
        pins: &Pins,
    ) -> Result<Pinned, ResolveError> {
        let (provider, found) = self.allowed(source, constraint)?;
        if found.is_empty() {
            return Err(self.not_found(&provider, constraint));
        }
        let (dir_pins, problems) = self.dir_pins();
        let address = provider.to_string();
        for (version, binary) in found.iter().rev() {
            let v = version.to_string();
            let mut recorded = pins.get(&address, &v).to_vec();
            recorded.extend_from_slice(dir_pins.get(&address, &v));
            if !recorded.is_empty() {
                return Ok(Pinned {
                    resolved: Resolved {
                        address,
                        version: v,
                        binary: binary.clone(),
                    },
                    pins: recorded,
                });
            }
        }
        Err(ResolveError::NotPinned {
            provider: address,
            constraint: constraint.unwrap_or("any").to_owned(),
            found: found
                .iter()
                .rev()
                .map(|(v, _)| v.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            searched: self.searched(),
            problems: problems.iter().map(|p| format!("; {p}")).collect(),
        })
    }

    /// The pins of the lock files in the directories searched, and the lock files that could
    /// not be read. Read each time: a lock file is small, and an administrator's edit counts at
    /// once.
    pub fn dir_pins(&self) -> (Pins, Vec<String>) {
        let mut pins = Pins::default();
        let mut problems = Vec::new();
        for dir in &self.dirs {
            match Pins::from_lock_file(&dir.join(LOCK_FILE)) {
                Ok(p) => pins.extend(p),
                Err(e) => problems.push(e),
            }
        }
        (pins, problems)
    }

    /// `source` parsed, and every installed (version, binary) `constraint` allows, oldest first.
    fn allowed(
        &self,
        source: &str,
        constraint: Option<&str>,
    ) -> Result<(ProviderAddress, Vec<(Version, PathBuf)>), ResolveError> {
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
        let mut found: Vec<(Version, PathBuf)> = Vec::new();
        for dir in &self.dirs {
            let base = dir
                .join(&provider.hostname)
                .join(&provider.namespace)
                .join(&provider.type_name);
            for (version, binary) in self.candidates(&base, &provider) {
                // The first directory that has a version wins, as the search order says.
                if constraints.allows(&version) && !found.iter().any(|(v, _)| *v == version) {
                    found.push((version, binary));
                }
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((provider, found))
    }

    fn not_found(&self, provider: &ProviderAddress, constraint: Option<&str>) -> ResolveError {
        ResolveError::NotFound {
            provider: provider.to_string(),
            constraint: constraint.unwrap_or("any").to_owned(),
            platform: self.platform.to_string(),
            searched: self.searched(),
        }
    }

    fn searched(&self) -> String {
        self.dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
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

    #[test]
    fn only_recorded_versions_are_candidates_for_launching() {
        let a = tempfile::tempdir().expect("tmp");
        let b = tempfile::tempdir().expect("tmp");
        let recorded = install(a.path(), "3.5.0");
        // Newer, but nobody recorded it: left there by an earlier install, or planted.
        install(b.path(), "3.6.0");
        let r = Resolver::new(vec![a.path().into(), b.path().into()]);
        let address = "registry.terraform.io/hashicorp/random";
        let err = r
            .resolve_pinned("hashicorp/random", None, &Pins::default())
            .expect_err("nothing recorded");
        let text = err.to_string();
        assert!(matches!(err, ResolveError::NotPinned { .. }), "{text}");
        assert!(text.contains("3.6.0, 3.5.0"), "{text}");
        let mut pins = Pins::default();
        pins.record(
            address,
            "3.5.0",
            vec!["h1:x".into()],
            "Provider random".into(),
        );
        let got = r
            .resolve_pinned("hashicorp/random", None, &pins)
            .expect("the recorded one");
        assert_eq!(got.resolved.binary, recorded);
        assert_eq!(got.pins[0].by, "Provider random");
        // A plugin directory's lock file pins what it lists.
        std::fs::write(
            b.path().join(LOCK_FILE),
            format!(
                "provider \"{address}\" {{\n  version = \"3.6.0\"\n  hashes = [\"h1:y\"]\n}}\n"
            ),
        )
        .expect("lock");
        let got = r
            .resolve_pinned("hashicorp/random", None, &pins)
            .expect("pinned by the lock file");
        assert_eq!(got.resolved.version, "3.6.0");
        assert_eq!(got.pins[0].hashes, ["h1:y"]);
        // An unreadable lock file is named in the refusal.
        std::fs::write(b.path().join(LOCK_FILE), "provider {").expect("lock");
        let err = r
            .resolve_pinned("hashicorp/random", Some(">= 3.6"), &pins)
            .expect_err("unreadable");
        assert!(err.to_string().contains(LOCK_FILE), "{err}");
    }
}

//! Terraform's dependency lock file (`.terraform.lock.hcl`): read with a real HCL parser, written
//! byte for byte the way `terraform init` writes it (providers sorted by address, hashes sorted
//! and deduplicated, `=` aligned like hclwrite does), so the same file can be shared by a
//! Terraform user and Kraken and diffs stay quiet.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hcl::Expression;

use crate::address::ProviderAddress;
use crate::hash::PackageHash;
use crate::version::{Version, VersionConstraints};

/// The lock file could not be read, parsed or written.
#[derive(Debug, thiserror::Error)]
pub enum LockFileError {
    #[error("failed to read lock file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to write lock file {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("lock file is not valid HCL")]
    Syntax(#[source] hcl::Error),
    #[error("invalid lock file: {0}")]
    Invalid(String),
}

/// What the lock file pins for one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderLock {
    pub version: Version,
    /// The canonical constraint string that selected `version`, if any.
    pub constraints: Option<String>,
    pub hashes: BTreeSet<PackageHash>,
}

/// All provider entries of one lock file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockFile {
    providers: BTreeMap<ProviderAddress, ProviderLock>,
}

const HEADER: &str = "# This file is maintained automatically by \"terraform init\".\n\
                      # Manual edits may be lost in future updates.\n";

impl LockFile {
    /// Read a lock file; a missing file is an empty lock, as for Terraform.
    pub fn load(path: &Path) -> Result<Self, LockFileError> {
        match std::fs::read_to_string(path) {
            Ok(text) => text.parse(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(LockFileError::Read {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// Write atomically (temporary file in the same directory, then rename), so a crash never
    /// leaves a half-written lock file.
    pub fn save(&self, path: &Path) -> Result<(), LockFileError> {
        let err = |source| LockFileError::Write {
            path: path.display().to_string(),
            source,
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
        std::io::Write::write_all(&mut tmp, self.render().as_bytes()).map_err(err)?;
        // Temporary files are private (0600); a lock file is shared and committed, so keep the
        // existing file's mode or use the usual 0644.
        if let Some(perms) = shared_permissions(path) {
            std::fs::set_permissions(tmp.path(), perms).map_err(err)?;
        }
        tmp.persist(path).map_err(|e| err(e.error))?;
        Ok(())
    }

    pub fn get(&self, provider: &ProviderAddress) -> Option<&ProviderLock> {
        self.providers.get(provider)
    }

    pub fn set(&mut self, provider: ProviderAddress, lock: ProviderLock) {
        self.providers.insert(provider, lock);
    }

    pub fn providers(&self) -> impl Iterator<Item = (&ProviderAddress, &ProviderLock)> {
        self.providers.iter()
    }

    /// The file text, exactly as Terraform formats it.
    pub fn render(&self) -> String {
        let mut out = String::from(HEADER);
        for (provider, lock) in &self.providers {
            out.push_str(&format!("\nprovider \"{provider}\" {{\n"));
            match &lock.constraints {
                Some(c) => out.push_str(&format!(
                    "  version     = \"{}\"\n  constraints = \"{c}\"\n",
                    lock.version
                )),
                None => out.push_str(&format!("  version = \"{}\"\n", lock.version)),
            }
            if !lock.hashes.is_empty() {
                out.push_str("  hashes = [\n");
                for h in &lock.hashes {
                    out.push_str(&format!("    \"{h}\",\n"));
                }
                out.push_str("  ]\n");
            }
            out.push_str("}\n");
        }
        out
    }
}

impl std::str::FromStr for LockFile {
    type Err = LockFileError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let body = hcl::parse(text).map_err(LockFileError::Syntax)?;
        if let Some(attr) = body.attributes().next() {
            return Err(invalid(format!("unexpected argument {:?}", attr.key())));
        }
        let mut providers = BTreeMap::new();
        for block in body.blocks() {
            if block.identifier() == "module" {
                // Terraform reserves module blocks and ignores them for now.
                continue;
            }
            if block.identifier() != "provider" || block.labels().len() != 1 {
                return Err(invalid(format!(
                    "unexpected block {:?}",
                    block.identifier()
                )));
            }
            let raw = block.labels()[0].as_str();
            let provider: ProviderAddress = raw
                .parse()
                .map_err(|e| invalid(format!("provider {raw:?}: {e}")))?;
            if provider.to_string() != raw {
                return Err(invalid(format!(
                    "provider address {raw:?} must be written as {:?}",
                    provider.to_string()
                )));
            }
            let lock = decode_provider(&provider, block.body())?;
            if providers.insert(provider, lock).is_some() {
                return Err(invalid(format!("duplicate entry for provider {raw}")));
            }
        }
        Ok(Self { providers })
    }
}

fn decode_provider(
    provider: &ProviderAddress,
    body: &hcl::Body,
) -> Result<ProviderLock, LockFileError> {
    let mut version = None;
    let mut constraints = None;
    let mut hashes = BTreeSet::new();
    if body.blocks().next().is_some() {
        return Err(invalid(format!("unexpected block in provider {provider}")));
    }
    for attr in body.attributes() {
        let ctx = || format!("{} of provider {provider}", attr.key());
        match attr.key() {
            "version" => {
                let s = string(attr.expr())
                    .ok_or_else(|| invalid(format!("{} must be a string", ctx())))?;
                let v: Version = s.parse().map_err(|e| invalid(format!("{}: {e}", ctx())))?;
                version = Some(v);
            }
            "constraints" => {
                let s = string(attr.expr())
                    .ok_or_else(|| invalid(format!("{} must be a string", ctx())))?;
                let c: VersionConstraints =
                    s.parse().map_err(|e| invalid(format!("{}: {e}", ctx())))?;
                constraints = Some(c.canonical());
            }
            "hashes" => {
                let Expression::Array(items) = attr.expr() else {
                    return Err(invalid(format!("{} must be a list of strings", ctx())));
                };
                for item in items {
                    let s = string(item)
                        .ok_or_else(|| invalid(format!("{} must be a list of strings", ctx())))?;
                    hashes.insert(s.parse().map_err(|e| invalid(format!("{}: {e}", ctx())))?);
                }
            }
            other => {
                return Err(invalid(format!(
                    "unexpected argument {other:?} in provider {provider}"
                )));
            }
        }
    }
    let version = version.ok_or_else(|| invalid(format!("provider {provider} has no version")))?;
    Ok(ProviderLock {
        version,
        constraints,
        hashes,
    })
}

#[cfg(unix)]
fn shared_permissions(path: &Path) -> Option<std::fs::Permissions> {
    use std::os::unix::fs::PermissionsExt as _;
    Some(
        std::fs::metadata(path)
            .map(|m| m.permissions())
            .unwrap_or_else(|_| std::fs::Permissions::from_mode(0o644)),
    )
}

#[cfg(not(unix))]
fn shared_permissions(_: &Path) -> Option<std::fs::Permissions> {
    None
}

fn string(expr: &Expression) -> Option<&str> {
    match expr {
        Expression::String(s) => Some(s),
        _ => None,
    }
}

fn invalid(msg: String) -> LockFileError {
    LockFileError::Invalid(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Laid out as `terraform init` writes it (tests/tests/registry_lockfile.rs compares with the
    /// real CLI); the hash values are made up.
    const TERRAFORM_LOCK: &str = r#"# This file is maintained automatically by "terraform init".
# Manual edits may be lost in future updates.

provider "registry.terraform.io/hashicorp/null" {
  version = "2.1.2"
  hashes = [
    "h1:CFnENdqQu4g3LJNevA32aDxcUz2qGkRGQpFfkI8TCdE=",
  ]
}

provider "registry.terraform.io/hashicorp/random" {
  version     = "3.6.0"
  constraints = "~> 3.6"
  hashes = [
    "h1:R5Ucn26riKIEijcsiOMBR3uOAjuOMfI1x7XvH4P6B1w=",
    "zh:03360ed3ecd31e8c5dac9c95fe0858be50f3e9a0d0c654b5e504109c2159287d",
  ]
}
"#;

    #[test]
    fn round_trips_terraform_output_byte_for_byte() -> anyhow::Result<()> {
        let lock: LockFile = TERRAFORM_LOCK.parse()?;
        assert_eq!(lock.providers().count(), 2);
        let random: ProviderAddress = "hashicorp/random".parse()?;
        let entry = lock.get(&random).expect("random entry");
        assert_eq!(entry.version.to_string(), "3.6.0");
        assert_eq!(entry.constraints.as_deref(), Some("~> 3.6"));
        assert_eq!(entry.hashes.len(), 2);
        assert_eq!(lock.render(), TERRAFORM_LOCK);
        Ok(())
    }

    #[test]
    fn comments_and_layout_do_not_matter_when_reading() -> anyhow::Result<()> {
        let text = "// hand edited\nprovider \"registry.terraform.io/hashicorp/time\" {\n\
                    /* pinned */ version = \"0.13.1\"\n hashes = [\"h1:x=\", \"h1:x=\"]\n}\n";
        let lock: LockFile = text.parse()?;
        let time: ProviderAddress = "hashicorp/time".parse()?;
        assert_eq!(lock.get(&time).map(|l| l.hashes.len()), Some(1));
        Ok(())
    }

    #[test]
    fn saved_lock_files_are_readable_by_others() -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(".terraform.lock.hcl");
        let lock: LockFile = TERRAFORM_LOCK.parse()?;
        lock.save(&path)?;
        assert_eq!(
            std::fs::metadata(&path)?.permissions().mode() & 0o777,
            0o644
        );
        assert_eq!(LockFile::load(&path)?, lock);
        assert_eq!(
            LockFile::load(&dir.path().join("missing"))?,
            LockFile::default()
        );
        Ok(())
    }

    #[test]
    fn malformed_lock_files_are_refused() {
        let bad = [
            "provider \"hashicorp/random\" {\n version = \"1.0.0\"\n}\n",
            "provider \"registry.terraform.io/hashicorp/random\" {\n}\n",
            "provider \"registry.terraform.io/hashicorp/random\" {\n version = \"x\"\n}\n",
            "provider \"registry.terraform.io/hashicorp/random\" {\n version = \"1.0.0\"\n extra = 1\n}\n",
            "provider \"registry.terraform.io/hashicorp/random\" {\n version = \"1.0.0\"\n hashes = \"h1:x\"\n}\n",
            "provider \"registry.terraform.io/hashicorp/random\" {\n",
            "version = \"1\"\n",
        ];
        for text in bad {
            assert!(text.parse::<LockFile>().is_err(), "{text:?} parsed");
        }
    }
}

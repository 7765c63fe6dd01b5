//! The plugin cache, in Terraform's unpacked layout `HOST/NAMESPACE/TYPE/VERSION/OS_ARCH/`, so an
//! existing `TF_PLUGIN_CACHE_DIR` is shared as is. Kraken's own bookkeeping lives under
//! `.kraken/` at the cache root (a name Terraform's directory scan skips as an invalid hostname):
//! per-package lock files, a staging area on the same filesystem (so installs are a `rename`),
//! and a memo of each package's `h1:` hash keyed by the files' identity, so a cache hit needs a
//! few `stat` calls instead of re-hashing hundreds of megabytes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::address::{Platform, ProviderAddress};
use crate::error::{Error, Result};
use crate::hash::{PackageHash, dir_hash};
use crate::version::Version;

/// A plugin cache directory.
#[derive(Debug, Clone)]
pub struct PluginCache {
    root: PathBuf,
}

/// Holds the cross-process install lock of one package until dropped.
#[derive(Debug)]
pub struct InstallLock {
    _file: std::fs::File,
}

impl PluginCache {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// `TF_PLUGIN_CACHE_DIR` when set (shared with Terraform), else `$XDG_CACHE_HOME/kraken/plugins`
    /// or `~/.cache/kraken/plugins`.
    pub fn default_root() -> PathBuf {
        if let Some(dir) = std::env::var_os("TF_PLUGIN_CACHE_DIR").filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        base.join("kraken").join("plugins")
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a package lives: `HOST/NAMESPACE/TYPE/VERSION/OS_ARCH`.
    pub fn package_dir(&self, p: &ProviderAddress, v: &Version, platform: &Platform) -> PathBuf {
        self.root
            .join(&p.hostname)
            .join(&p.namespace)
            .join(&p.type_name)
            .join(v.to_string())
            .join(platform.to_string())
    }

    fn meta_dir(&self) -> PathBuf {
        self.root.join(".kraken")
    }

    fn key(p: &ProviderAddress, v: &Version, platform: &Platform) -> String {
        format!(
            "{}_{}_{}_{v}_{platform}",
            p.hostname.replace(':', "_"),
            p.namespace,
            p.type_name
        )
    }

    /// A fresh staging directory for one install, on the cache's filesystem.
    pub fn staging(&self) -> Result<tempfile::TempDir> {
        let dir = self.meta_dir().join("tmp");
        std::fs::create_dir_all(&dir)
            .map_err(Error::io(format!("failed to create {}", dir.display())))?;
        tempfile::Builder::new()
            .prefix("install-")
            .tempdir_in(&dir)
            .map_err(Error::io(format!(
                "failed to create a staging directory in {}",
                dir.display()
            )))
    }

    /// Take the exclusive install lock of one package, waiting for another process to finish.
    pub async fn lock(
        &self,
        p: &ProviderAddress,
        v: &Version,
        platform: &Platform,
    ) -> Result<InstallLock> {
        let dir = self.meta_dir().join("locks");
        let path = dir.join(format!("{}.lock", Self::key(p, v, platform)));
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir)
                .map_err(Error::io(format!("failed to create {}", dir.display())))?;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(Error::io(format!("failed to open {}", path.display())))?;
            <std::fs::File as fs4::FileExt>::lock(&file)
                .map_err(Error::io(format!("failed to lock {}", path.display())))?;
            Ok(InstallLock { _file: file })
        })
        .await
        .map_err(|e| Error::Io {
            context: "the lock task failed".into(),
            source: std::io::Error::other(e),
        })?
    }

    /// The package's `h1:` hash if it is in the cache: from the memo when the files are
    /// unchanged since it was written, otherwise computed (and memoised).
    pub fn cached_hash(
        &self,
        p: &ProviderAddress,
        v: &Version,
        platform: &Platform,
    ) -> Result<Option<PackageHash>> {
        let dir = self.package_dir(p, v, platform);
        if !dir.is_dir() {
            return Ok(None);
        }
        let memo_path = self.memo_path(p, v, platform);
        let files = fingerprint(&dir)?;
        if let Some(memo) = read_memo(&memo_path)
            && memo.files == files
            && let Ok(h) = memo.h1.parse()
        {
            return Ok(Some(h));
        }
        let h1 = dir_hash(&dir).map_err(Error::io(format!("failed to hash {}", dir.display())))?;
        self.remember(p, v, platform, &h1);
        Ok(Some(h1))
    }

    /// Record the hash of a package directory that was just installed or verified.
    pub fn remember(
        &self,
        p: &ProviderAddress,
        v: &Version,
        platform: &Platform,
        h1: &PackageHash,
    ) {
        let dir = self.package_dir(p, v, platform);
        let memo_path = self.memo_path(p, v, platform);
        let result = fingerprint(&dir).and_then(|files| {
            let memo = Memo {
                h1: h1.to_string(),
                files,
            };
            write_memo(&memo_path, &memo)
        });
        // The memo only speeds up the next run; failing to write it is not an install failure.
        if let Err(e) = result {
            tracing::debug!(error = %e, "could not write the hash memo");
        }
    }

    fn memo_path(&self, p: &ProviderAddress, v: &Version, platform: &Platform) -> PathBuf {
        self.meta_dir()
            .join("hashes")
            .join(format!("{}.json", Self::key(p, v, platform)))
    }

    /// Move a verified, unpacked package into place. An existing directory (a stale or corrupt
    /// install the caller decided to replace) is moved aside first and deleted afterwards.
    pub fn commit(
        &self,
        staged: &Path,
        p: &ProviderAddress,
        v: &Version,
        platform: &Platform,
    ) -> Result<PathBuf> {
        let target = self.package_dir(p, v, platform);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(Error::io(format!("failed to create {}", parent.display())))?;
        }
        let mut old = None;
        if target.exists() {
            let aside = self.staging()?;
            let dest = aside.path().join("old");
            std::fs::rename(&target, &dest).map_err(Error::io(format!(
                "failed to move {} aside",
                target.display()
            )))?;
            old = Some(aside);
        }
        std::fs::rename(staged, &target).map_err(Error::io(format!(
            "failed to install into {}",
            target.display()
        )))?;
        drop(old);
        Ok(target)
    }
}

/// Identity of every file in a package: path, size, modification and change times, inode.
/// Any write to a file changes its ctime, which user space cannot set back.
type Fingerprint = Vec<(String, u64, i64, i64, u64)>;

#[derive(Debug, Serialize, Deserialize)]
struct Memo {
    h1: String,
    files: Fingerprint,
}

fn fingerprint(dir: &Path) -> Result<Fingerprint> {
    let mut out = Vec::new();
    walk(dir, "", &mut out).map_err(Error::io(format!("failed to read {}", dir.display())))?;
    out.sort();
    Ok(out)
}

fn walk(dir: &Path, prefix: &str, out: &mut Fingerprint) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if entry.file_type()?.is_dir() {
            walk(&entry.path(), &rel, out)?;
            continue;
        }
        // Follow symlinks: the hash covers the content they point to.
        let m = std::fs::metadata(entry.path())?;
        out.push((rel, m.len(), mtime_ns(&m), ctime_ns(&m), inode(&m)));
    }
    Ok(())
}

#[cfg(unix)]
fn mtime_ns(m: &std::fs::Metadata) -> i64 {
    use std::os::unix::fs::MetadataExt as _;
    m.mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(m.mtime_nsec())
}

#[cfg(unix)]
fn ctime_ns(m: &std::fs::Metadata) -> i64 {
    use std::os::unix::fs::MetadataExt as _;
    m.ctime()
        .saturating_mul(1_000_000_000)
        .saturating_add(m.ctime_nsec())
}

#[cfg(unix)]
fn inode(m: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    m.ino()
}

#[cfg(not(unix))]
fn mtime_ns(m: &std::fs::Metadata) -> i64 {
    m.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(not(unix))]
fn ctime_ns(_: &std::fs::Metadata) -> i64 {
    0
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> u64 {
    0
}

fn read_memo(path: &Path) -> Option<Memo> {
    let text = std::fs::read(path).ok()?;
    serde_json::from_slice(&text).ok()
}

fn write_memo(path: &Path, memo: &Memo) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(Error::io(format!("failed to create {}", dir.display())))?;
    let body = serde_json::to_vec(memo).map_err(|e| Error::Io {
        context: "failed to encode the hash memo".into(),
        source: std::io::Error::other(e),
    })?;
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).map_err(Error::io("failed to write the hash memo"))?;
    std::io::Write::write_all(&mut tmp, &body)
        .map_err(Error::io("failed to write the hash memo"))?;
    tmp.persist(path).map_err(|e| Error::Io {
        context: "failed to write the hash memo".into(),
        source: e.error,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memo_is_used_until_a_file_changes() -> anyhow::Result<()> {
        let root = tempfile::tempdir()?;
        let cache = PluginCache::new(root.path());
        let p: ProviderAddress = "hashicorp/random".parse()?;
        let v: Version = "3.6.0".parse()?;
        let plat: Platform = "linux_amd64".parse()?;
        assert!(cache.cached_hash(&p, &v, &plat)?.is_none());
        let dir = cache.package_dir(&p, &v, &plat);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("terraform-provider-random_v3.6.0"), b"one")?;
        let first = cache.cached_hash(&p, &v, &plat)?.expect("cached");
        assert_eq!(first, dir_hash(&dir)?);
        // A memo with a wrong hash for the same fingerprint proves the memo is what's read.
        let memo_path = cache.memo_path(&p, &v, &plat);
        let mut memo = read_memo(&memo_path).expect("memo written");
        memo.h1 = "h1:memo".into();
        write_memo(&memo_path, &memo)?;
        assert_eq!(
            cache
                .cached_hash(&p, &v, &plat)?
                .map(|h| h.to_string())
                .as_deref(),
            Some("h1:memo")
        );
        // A different size, so the change shows even within one coarse timestamp tick.
        std::fs::write(dir.join("terraform-provider-random_v3.6.0"), b"second")?;
        assert_eq!(cache.cached_hash(&p, &v, &plat)?, Some(dir_hash(&dir)?));
        Ok(())
    }
}

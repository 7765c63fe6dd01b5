//! The installer: resolve a version, reuse the cache when it holds a matching package, otherwise
//! fetch, authenticate, unpack, hash and move the package into the cache atomically. Steps:
//!
//! `select_version → cache lookup → (lock) → package_meta → obtain → authenticate → check zip
//! hashes → unpack → hash → check all hashes → commit`
//!
//! A zip is checked against every hash that can judge it (the registry's shasum, a mirror's
//! `zh:` hashes, the lock file's) before it is unpacked. Only `h1:` hashes need the unpacked
//! files; the package is then unpacked and hashed in a private staging directory inside the
//! cache. Everything before `commit` happens there, so a failure at any step leaves nothing
//! behind, and a concurrent process sees either no package or a complete one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::address::{Platform, ProviderAddress};
use crate::cache::PluginCache;
use crate::error::{Error, Result};
use crate::hash::{HashScheme, PackageHash, dir_hash, hex, parse_sha256_hex, sha256_file};
use crate::http::HttpClient;
use crate::lockfile::ProviderLock;
use crate::progress::Progress;
use crate::source::{Authentication, PackageLocation, PackageMeta, RegistryEvidence, Source};
use crate::unzip::{self, UnzipLimits};
use crate::verify;
use crate::version::{Version, VersionConstraints};

/// What to install.
#[derive(Debug, Clone)]
pub struct InstallRequest {
    pub provider: ProviderAddress,
    pub constraints: VersionConstraints,
    /// The lock file's entry for this provider, if any: it pins the version and the hashes.
    pub locked: Option<ProviderLock>,
    /// Ignore the locked version and pick the newest allowed one (hashes are then re-recorded).
    pub upgrade: bool,
}

/// An installed package.
#[derive(Debug, Clone)]
pub struct Installed {
    pub provider: ProviderAddress,
    pub version: Version,
    pub platform: Platform,
    /// The package directory in the cache.
    pub dir: PathBuf,
    /// The provider executable inside `dir`.
    pub executable: Option<PathBuf>,
    pub h1: PackageHash,
    /// `zh:` of the zip this install came from (none for cache hits and unpacked mirrors).
    pub zh: Option<PackageHash>,
    /// The hashes to record in the lock file.
    pub lock_hashes: BTreeSet<PackageHash>,
    pub from_cache: bool,
    /// The key id that signed the registry's checksum list.
    pub signed_by: Option<String>,
    /// Notices from the source (deprecations) or about skipped checks.
    pub warnings: Vec<String>,
}

impl Installed {
    /// The lock file entry for this install.
    pub fn lock_entry(&self, constraints: &VersionConstraints) -> ProviderLock {
        ProviderLock {
            version: self.version.clone(),
            constraints: (!constraints.is_empty()).then(|| constraints.canonical()),
            hashes: self.lock_hashes.clone(),
        }
    }
}

/// Installs providers from one source into one cache.
#[derive(Debug, Clone)]
pub struct Installer {
    source: Arc<dyn Source>,
    cache: PluginCache,
    http: HttpClient,
    platform: Platform,
    allow_unsigned: bool,
    unzip_limits: UnzipLimits,
}

/// The package as fetched into staging, before authentication.
struct Obtained {
    /// The zip (absent for unpacked mirrors).
    zip: Option<(PathBuf, [u8; 32])>,
    /// The unpacked package, once it exists.
    unpacked: PathBuf,
}

impl Installer {
    pub fn new(source: Arc<dyn Source>, cache: PluginCache, http: HttpClient) -> Self {
        Self {
            source,
            cache,
            http,
            platform: Platform::current(),
            allow_unsigned: false,
            unzip_limits: UnzipLimits::default(),
        }
    }

    /// Install for another platform (lock files for CI machines, tests).
    pub fn with_platform(mut self, platform: Platform) -> Self {
        self.platform = platform;
        self
    }

    /// Accept registry packages whose registry publishes no signing key (OpenTofu's registry
    /// still lacks keys for some providers). The checksums are still verified.
    pub fn allow_unsigned(mut self, allow: bool) -> Self {
        self.allow_unsigned = allow;
        self
    }

    pub fn with_unzip_limits(mut self, limits: UnzipLimits) -> Self {
        self.unzip_limits = limits;
        self
    }

    pub fn cache(&self) -> &PluginCache {
        &self.cache
    }

    /// Install one provider; a cache hit that matches the lock file does no network I/O.
    pub async fn install(
        &self,
        req: &InstallRequest,
        progress: &dyn Progress,
    ) -> Result<Installed> {
        let (version, warnings) = self.select_version(req).await?;
        if let Some(hit) = self.cached_install(req, &version).await? {
            return Ok(hit);
        }
        let _lock = self
            .cache
            .lock(&req.provider, &version, &self.platform)
            .await?;
        // Another process may have installed it while we waited for the lock.
        if let Some(hit) = self.cached_install(req, &version).await? {
            return Ok(hit);
        }
        let meta = self
            .source
            .package_meta(&req.provider, &version, &self.platform)
            .await?;
        if !meta.protocol_supported() {
            return Err(Error::ProtocolNotSupported {
                provider: req.provider.clone(),
                version,
                protocols: meta.protocols.join(", "),
                suggestion: None,
            });
        }
        let mut installed = self.fetch_and_commit(req, &meta, progress).await?;
        installed.warnings.splice(0..0, warnings);
        Ok(installed)
    }

    async fn select_version(&self, req: &InstallRequest) -> Result<(Version, Vec<String>)> {
        if let (Some(locked), false) = (&req.locked, req.upgrade) {
            if !req.constraints.allows(&locked.version) {
                return Err(Error::LockedVersionNotAllowed {
                    provider: req.provider.clone(),
                    locked: locked.version.clone(),
                    constraints: req.constraints.canonical(),
                });
            }
            return Ok((locked.version.clone(), Vec::new()));
        }
        let available = self.source.available_versions(&req.provider).await?;
        match req.constraints.newest(available.versions.keys()) {
            Some(v) => Ok((v.clone(), available.warnings)),
            None => Err(Error::NoMatchingVersion {
                provider: req.provider.clone(),
                constraints: req.constraints.canonical(),
                available: summarize(available.versions.keys()),
            }),
        }
    }

    /// The cached package, if present and consistent with the lock file's hashes.
    async fn cached_install(
        &self,
        req: &InstallRequest,
        version: &Version,
    ) -> Result<Option<Installed>> {
        let (cache, p, v, plat) = (
            self.cache.clone(),
            req.provider.clone(),
            version.clone(),
            self.platform.clone(),
        );
        let Some(h1) = blocking(move || cache.cached_hash(&p, &v, &plat)).await? else {
            return Ok(None);
        };
        let locked = locked_hashes(req, version);
        if !locked.is_empty() && !locked.contains(&h1) {
            tracing::warn!(provider = %req.provider, %version, "cached package does not match the lock file; fetching it again");
            return Ok(None);
        }
        let dir = self
            .cache
            .package_dir(&req.provider, version, &self.platform);
        let mut lock_hashes = locked;
        lock_hashes.insert(h1.clone());
        Ok(Some(Installed {
            provider: req.provider.clone(),
            version: version.clone(),
            platform: self.platform.clone(),
            executable: find_executable(&dir, &req.provider),
            dir,
            h1,
            zh: None,
            lock_hashes,
            from_cache: true,
            signed_by: None,
            warnings: Vec::new(),
        }))
    }

    async fn fetch_and_commit(
        &self,
        req: &InstallRequest,
        meta: &PackageMeta,
        progress: &dyn Progress,
    ) -> Result<Installed> {
        let staging = self.cache.staging()?;
        let obtained = self.obtain(meta, staging.path(), progress).await?;
        let mut warnings = Vec::new();
        let signed_by = match (&meta.authentication, &obtained.zip) {
            (Authentication::Registry(ev), Some((_, sha))) => {
                self.authenticate_registry(meta, ev, sha, &mut warnings)?
            }
            _ => None,
        };
        let zh = obtained.zip.as_ref().map(|(_, sha)| PackageHash::zip(sha));
        if let (Some((zip, _)), Some(zh)) = (&obtained.zip, &zh) {
            // An archive that is not the one the hashes name is refused before it is unpacked.
            self.check_hashes(req, meta, &[zh], false)?;
            let (zip, dest, limits) = (zip.clone(), obtained.unpacked.clone(), self.unzip_limits);
            blocking(move || unzip::extract(&zip, &dest, limits)).await?;
        }
        let unpacked = obtained.unpacked.clone();
        let h1 =
            blocking(move || dir_hash(&unpacked).map_err(Error::io("failed to hash the package")))
                .await?;
        let actual: Vec<&PackageHash> = std::iter::once(&h1).chain(&zh).collect();
        let locked = self.check_hashes(req, meta, &actual, true)?;
        let dir = self.cache.commit(
            &obtained.unpacked,
            &meta.provider,
            &meta.version,
            &meta.platform,
        )?;
        self.cache
            .remember(&meta.provider, &meta.version, &meta.platform, &h1);
        let mut lock_hashes = locked;
        lock_hashes.insert(h1.clone());
        if let (Some(_), Authentication::Registry(ev)) = (&signed_by, &meta.authentication) {
            lock_hashes.extend(signed_zip_hashes(
                &ev.shasums,
                &meta.provider,
                &meta.version,
            ));
        }
        Ok(Installed {
            provider: meta.provider.clone(),
            version: meta.version.clone(),
            platform: meta.platform.clone(),
            executable: find_executable(&dir, &meta.provider),
            dir,
            h1,
            zh,
            lock_hashes,
            from_cache: false,
            signed_by,
            warnings,
        })
    }

    /// The package must match the source's own hashes (mirrors) and the lock file's hashes for
    /// this version; returns the latter. Called twice: with the zip's `zh:` before unpacking,
    /// when a list that names `h1:` hashes cannot decide yet (they cover the unpacked files,
    /// and a mirror may repack the same files, as Terraform allows), and with every hash once
    /// the package is unpacked into private staging.
    fn check_hashes(
        &self,
        req: &InstallRequest,
        meta: &PackageMeta,
        actual: &[&PackageHash],
        unpacked: bool,
    ) -> Result<BTreeSet<PackageHash>> {
        let refused = |expected: &[&PackageHash]| {
            !actual.iter().any(|h| expected.contains(h))
                && (unpacked || !expected.iter().any(|h| h.scheme() == Some(HashScheme::H1)))
        };
        if let Authentication::Hashes(expected) = &meta.authentication
            && refused(&expected.iter().collect::<Vec<_>>())
        {
            return Err(Error::ChecksumMismatch {
                what: format!(
                    "{} {} from {}",
                    meta.provider,
                    meta.version,
                    self.source.describe()
                ),
                expected: join(expected.iter()),
                actual: join(actual.iter().copied()),
            });
        }
        let locked = locked_hashes(req, &meta.version);
        if !locked.is_empty() && refused(&locked.iter().collect::<Vec<_>>()) {
            return Err(Error::LockMismatch {
                provider: meta.provider.clone(),
                version: meta.version.clone(),
                locked: join(locked.iter()),
                actual: join(actual.iter().copied()),
            });
        }
        Ok(locked)
    }

    /// Bring the package into staging: download, reference a local zip, or copy a directory.
    async fn obtain(
        &self,
        meta: &PackageMeta,
        staging: &Path,
        progress: &dyn Progress,
    ) -> Result<Obtained> {
        let unpacked = staging.join("package");
        match &meta.location {
            PackageLocation::Http(url) => {
                let zip = staging.join("package.zip");
                let got = self.http.download(url, &zip, progress).await?;
                Ok(Obtained {
                    zip: Some((zip, got.sha256)),
                    unpacked,
                })
            }
            PackageLocation::LocalArchive(path) => {
                let p = path.clone();
                let sha = blocking(move || {
                    sha256_file(&p).map_err(Error::io(format!("failed to read {}", p.display())))
                })
                .await?;
                Ok(Obtained {
                    zip: Some((path.clone(), sha)),
                    unpacked,
                })
            }
            PackageLocation::LocalDir(dir) => {
                let (from, to) = (dir.clone(), unpacked.clone());
                blocking(move || copy_package(&from, &to)).await?;
                Ok(Obtained {
                    zip: None,
                    unpacked,
                })
            }
        }
    }

    /// Signature over SHA256SUMS → SHA256SUMS lists the file with the announced hash → the zip
    /// has that hash. Returns the signing key id.
    fn authenticate_registry(
        &self,
        meta: &PackageMeta,
        ev: &RegistryEvidence,
        sha: &[u8; 32],
        warnings: &mut Vec<String>,
    ) -> Result<Option<String>> {
        let signed_by = if ev.keys.is_empty() && self.allow_unsigned {
            warnings.push(format!(
                "{} {}: the registry publishes no signing key; the signature was not verified",
                meta.provider, meta.version
            ));
            None
        } else if ev.keys.is_empty() {
            return Err(Error::Unsigned {
                provider: meta.provider.clone(),
                version: meta.version.clone(),
            });
        } else {
            Some(verify::verify_signature(
                &ev.shasums,
                &ev.signature,
                &ev.keys,
            )?)
        };
        verify::check_sums_list(&ev.shasums, &meta.filename, &ev.shasum)?;
        if sha != &ev.shasum {
            return Err(Error::ChecksumMismatch {
                what: meta.filename.clone(),
                expected: hex(&ev.shasum),
                actual: hex(sha),
            });
        }
        Ok(signed_by)
    }
}

/// The lock file's hashes for exactly this version (another version's hashes don't apply).
fn locked_hashes(req: &InstallRequest, version: &Version) -> BTreeSet<PackageHash> {
    req.locked
        .as_ref()
        .filter(|l| &l.version == version)
        .map(|l| l.hashes.clone())
        .unwrap_or_default()
}

/// `zh:` hashes of every platform's zip of this release, from a signed SHA256SUMS — what
/// Terraform records so the lock file also works on other platforms.
fn signed_zip_hashes(
    shasums: &[u8],
    provider: &ProviderAddress,
    version: &Version,
) -> Vec<PackageHash> {
    let prefix = format!("terraform-provider-{}_{version}_", provider.type_name);
    verify::sums_entries(shasums)
        .filter(|(_, name)| name.starts_with(&prefix) && name.ends_with(".zip"))
        .filter_map(|(h, _)| parse_sha256_hex(h))
        .map(|sha| PackageHash::zip(&sha))
        .collect()
}

fn find_executable(dir: &Path, provider: &ProviderAddress) -> Option<PathBuf> {
    let prefix = provider.binary_prefix();
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    found.sort();
    found.into_iter().next()
}

/// Copy an unpacked mirror package into staging. Symlinks are copied as what they point to, but
/// only when that lies inside the package: the mirror is a directory named by the user, and a
/// link in it must not pull other files the operator can read into the cache.
fn copy_package(from: &Path, to: &Path) -> Result<()> {
    let root = std::fs::canonicalize(from)
        .map_err(Error::io(format!("failed to read {}", from.display())))?;
    copy_tree(&root, from, to)
}

fn copy_tree(root: &Path, from: &Path, to: &Path) -> Result<()> {
    let io_err = |what: &str, p: &Path| Error::io(format!("failed to {what} {}", p.display()));
    std::fs::create_dir_all(to).map_err(io_err("create", to))?;
    for entry in std::fs::read_dir(from).map_err(io_err("read", from))? {
        let entry = entry.map_err(io_err("read", from))?;
        let (src, dest) = (entry.path(), to.join(entry.file_name()));
        let is_link = entry
            .file_type()
            .map_err(io_err("read", &src))?
            .is_symlink();
        let real = std::fs::canonicalize(&src).map_err(io_err("resolve", &src))?;
        // A linked directory could loop back on itself, and h1: cannot hash one anyway.
        if !real.starts_with(root) || (is_link && real.is_dir()) {
            return Err(Error::UnsafeArchive {
                reason: format!(
                    "{} links outside the package or to a directory",
                    src.display()
                ),
            });
        }
        if real.is_dir() {
            copy_tree(root, &src, &dest)?;
        } else {
            // fs::copy keeps permission bits (the exec bit).
            std::fs::copy(&real, &dest).map_err(io_err("copy", &src))?;
        }
    }
    Ok(())
}

fn summarize<'a>(versions: impl DoubleEndedIterator<Item = &'a Version>) -> String {
    let newest: Vec<String> = versions.rev().take(10).map(ToString::to_string).collect();
    if newest.is_empty() {
        "none".to_string()
    } else {
        newest.join(", ")
    }
}

fn join<'a>(hashes: impl Iterator<Item = &'a PackageHash>) -> String {
    hashes
        .map(PackageHash::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Run blocking file work off the async runtime's threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Io {
            context: "a background task failed".into(),
            source: std::io::Error::other(e),
        })?
}

#[cfg(test)]
#[path = "install_tests.rs"]
mod tests;

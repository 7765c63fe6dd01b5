//! Step 1 of installing a Provider: the package, fetched and verified into the plugin cache
//! (or found there), and how fetch errors map to `Ready` reasons.

use super::*;

/// Step 1: the package, from the cache when the version in status still matches.
pub(super) async fn fetch_package(
    p: &Provider,
    inst: &Installer,
    status: &ProviderStatus,
) -> Result<fetch::Installed, Failure> {
    let bad = |m: String| Failure::new(reason::FETCH_FAILED, m, false);
    let provider: fetch::ProviderAddress = p
        .spec
        .source
        .parse()
        .map_err(|e| bad(format!("invalid source {:?}: {e}", p.spec.source)))?;
    let constraints: fetch::VersionConstraints = p
        .spec
        .version
        .as_deref()
        .unwrap_or("")
        .parse()
        .map_err(|e| bad(format!("invalid version constraint: {e}")))?;
    let http = fetch::HttpClient::new(fetch::HttpConfig {
        extra_ca_files: inst.settings.ca_certs.clone(),
        ..fetch::HttpConfig::default()
    })
    .map_err(|e| bad(chain(&e)))?;
    let source = source(p, inst, http.clone()).map_err(bad)?;
    let installer = fetch::Installer::new(
        source,
        fetch::PluginCache::new(&inst.settings.cache_dir),
        http,
    )
    .allow_unsigned(p.spec.allow_unsigned);
    // Like a lock file: the version installed before is kept while the constraint allows it.
    let locked = locked(status, &provider).filter(|l| constraints.allows(&l.version));
    let request = fetch::InstallRequest {
        provider: provider.clone(),
        constraints,
        locked,
        upgrade: false,
    };
    installer
        .install(&request, &fetch::NoProgress)
        .await
        .map_err(|e| {
            let message = format!("failed to install {provider}: {}", chain(&e));
            Failure::new(fetch_reason(&e), message, e.is_transient())
        })
}

/// The mirror a Provider installs from: its own, else the operator's (`None`: the registry).
pub(super) fn mirror<'a>(p: &'a Provider, inst: &'a Installer) -> Option<&'a String> {
    p.spec
        .mirror
        .as_ref()
        .or(inst.settings.default_mirror.as_ref())
}

pub(super) fn source(
    p: &Provider,
    inst: &Installer,
    http: fetch::HttpClient,
) -> Result<Arc<dyn fetch::Source>, String> {
    match mirror(p, inst) {
        Some(mirror) => mirror_source(mirror, http),
        None => Ok(Arc::new(fetch::RegistrySource::new(http))),
    }
}

/// A mirror: an https:// (or http://) network mirror, else a directory.
fn mirror_source(mirror: &str, http: fetch::HttpClient) -> Result<Arc<dyn fetch::Source>, String> {
    if mirror.starts_with("https://") || mirror.starts_with("http://") {
        let url = mirror
            .parse()
            .map_err(|e| format!("invalid mirror url {mirror:?}: {e}"))?;
        let source = fetch::NetworkMirrorSource::new(http, url).map_err(|e| chain(&e))?;
        return Ok(Arc::new(source));
    }
    Ok(Arc::new(fetch::FilesystemMirrorSource::new(mirror)))
}

/// The lock entry status records, if it is for this provider.
pub(super) fn locked(
    status: &ProviderStatus,
    provider: &fetch::ProviderAddress,
) -> Option<fetch::ProviderLock> {
    if status.address.as_deref() != Some(provider.to_string().as_str()) {
        return None;
    }
    let version = status.version.as_deref()?.parse().ok()?;
    let hashes = status
        .hashes
        .iter()
        .filter_map(|h| h.parse().ok())
        .collect();
    Some(fetch::ProviderLock {
        version,
        constraints: None,
        hashes,
    })
}

/// The `Ready` reason for a failed install.
pub(super) fn fetch_reason(e: &fetch::Error) -> &'static str {
    use fetch::Error as E;
    match e {
        E::UnknownProvider { .. }
        | E::NoMatchingVersion { .. }
        | E::PlatformNotSupported { .. }
        | E::ProtocolNotSupported { .. }
        | E::LockedVersionNotAllowed { .. } => reason::NOT_AVAILABLE,
        E::ChecksumMismatch { .. }
        | E::ChecksumMissing { .. }
        | E::SignatureInvalid { .. }
        | E::SignatureUnknownKey { .. }
        | E::Unsigned { .. }
        | E::LockMismatch { .. }
        | E::UnsafeArchive { .. }
        | E::InvalidArchive { .. } => reason::VERIFICATION_FAILED,
        _ => reason::FETCH_FAILED,
    }
}

/// Installs into `cache` exactly the package Provider `p` recorded (its address, version and
/// hashes, as a lock file pins them), from the mirror its status names (when this machine
/// has it), else `mirror`, else its registry: how `kraken plan` gets the build the cluster
/// runs, as `terraform init` installs what a lock file names. Every place tried is named in
/// the error.
pub async fn fetch_recorded(
    p: &Provider,
    cache: &std::path::Path,
    mirror: Option<&str>,
    ca_certs: &[std::path::PathBuf],
) -> Result<std::path::PathBuf, String> {
    let name = p.metadata.name.as_deref().unwrap_or_default();
    let status = p.status.clone().unwrap_or_default();
    let provider: fetch::ProviderAddress = status
        .address
        .as_deref()
        .ok_or_else(|| format!("Provider {name} records no package"))?
        .parse()
        .map_err(|e| format!("Provider {name}: {e}"))?;
    let locked =
        locked(&status, &provider).ok_or_else(|| format!("Provider {name} records no version"))?;
    let http = fetch::HttpClient::new(fetch::HttpConfig {
        extra_ca_files: ca_certs.to_vec(),
        ..fetch::HttpConfig::default()
    })
    .map_err(|e| chain(&e))?;
    let recorded = status.mirror.as_deref().filter(|m| {
        m.starts_with("https://") || m.starts_with("http://") || std::path::Path::new(m).is_dir()
    });
    let mut places: Vec<Option<&str>> = Vec::new();
    for m in [recorded, mirror] {
        if m.is_some() && !places.contains(&m) {
            places.push(m);
        }
    }
    places.push(None);
    let mut failures = Vec::new();
    for place in places {
        let source = match place {
            Some(m) => mirror_source(m, http.clone())?,
            None => Arc::new(fetch::RegistrySource::new(http.clone())),
        };
        let installer = fetch::Installer::new(source, fetch::PluginCache::new(cache), http.clone())
            .allow_unsigned(p.spec.allow_unsigned);
        let request = fetch::InstallRequest {
            provider: provider.clone(),
            constraints: fetch::VersionConstraints::any(),
            locked: Some(locked.clone()),
            upgrade: false,
        };
        let progress = fetch::TerminalProgress::for_stderr(&format!("{provider}"));
        match installer.install(&request, progress.as_ref()).await {
            Ok(installed) => {
                return installed.executable.ok_or_else(|| {
                    format!(
                        "Provider {name}: the package {provider} {} holds no provider executable",
                        locked.version
                    )
                });
            }
            Err(e) => failures.push(format!(
                "from {}: {}",
                place.unwrap_or("its registry"),
                chain(&e)
            )),
        }
    }
    Err(format!(
        "Provider {name}: cannot fetch {provider} {} with the hashes it recorded ({})",
        locked.version,
        failures.join("; ")
    ))
}

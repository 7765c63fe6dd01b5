//! `kraken fetch`: install one provider into the plugin cache, verified, and print where it is
//! and its hashes. A thin shell over `kraken_registry_fetch`: build the source from the flags,
//! run the installer, update the lock file, print.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kraken_registry_fetch::{
    FilesystemMirrorSource, HttpClient, HttpConfig, InstallRequest, Installed, Installer, LockFile,
    NetworkMirrorSource, PluginCache, ProviderAddress, RegistrySource, Source, TerminalProgress,
    VersionConstraints,
};

pub(super) const FETCH_ABOUT: &str = "Install a provider into the plugin cache, verified.

The provider comes from its registry (service discovery on the address's hostname, or at
--registry), or from a mirror (--mirror: an https:// network mirror or a directory in Terraform's
packed or unpacked mirror layout). Registry packages are authenticated in the registry's order:
the OpenPGP signature over SHA256SUMS against the registry's published keys, SHA256SUMS listing
the file with the announced hash, the zip's SHA-256. Mirrors are trusted by their own hashes and
by the lock file.

The cache uses Terraform's layout (HOST/NAMESPACE/TYPE/VERSION/OS_ARCH/); it defaults to
TF_PLUGIN_CACHE_DIR, so a Terraform plugin cache is shared as is. With --lock-file, the version
and hashes recorded there (a .terraform.lock.hcl written by Terraform works) must match, and the
file is updated the way `terraform init` would. A cache hit that matches is a no-op.

TLS trusts the platform's roots (SSL_CERT_FILE replaces them, as for OpenSSL) plus any --ca-cert.
HTTPS_PROXY and NO_PROXY are honoured.";

#[derive(Debug, clap::Args)]
pub struct FetchArgs {
    /// Provider source address: [HOSTNAME/]NAMESPACE/TYPE (e.g. hashicorp/random,
    /// registry.opentofu.org/hashicorp/random).
    pub address: String,
    /// Version constraint in Terraform syntax (e.g. '~> 3.6', '>= 1.0, < 2.0'). Default: newest.
    #[arg(long = "version", value_name = "CONSTRAINT", default_value = "")]
    pub constraint: String,
    /// Root URL of the registry to use instead of https://HOSTNAME/ (service discovery happens
    /// there).
    #[arg(long, value_name = "URL", conflicts_with = "mirror")]
    pub registry: Option<String>,
    /// Install from a network mirror (https:// URL) or a filesystem mirror (directory).
    #[arg(long, value_name = "URL_OR_DIR")]
    pub mirror: Option<String>,
    /// Plugin cache directory [default: $TF_PLUGIN_CACHE_DIR, else ~/.cache/kraken/plugins].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Dependency lock file to honour and update (Terraform's .terraform.lock.hcl format).
    #[arg(long, value_name = "PATH")]
    pub lock_file: Option<PathBuf>,
    /// Ignore the version in the lock file and select the newest allowed one.
    #[arg(long)]
    pub upgrade: bool,
    /// Target platform as OS_ARCH [default: this machine].
    #[arg(long, value_name = "OS_ARCH")]
    pub platform: Option<String>,
    /// Extra PEM root CA to trust (repeatable), in addition to the platform's roots.
    #[arg(long, value_name = "PEM", env = "KRAKEN_CA_CERT")]
    pub ca_cert: Vec<PathBuf>,
    /// Accept registry packages whose registry publishes no signing key (checksums are still
    /// verified).
    #[arg(long)]
    pub allow_unsigned: bool,
    /// Seconds a request may take (a download: may stall) before it fails.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub timeout: u64,
    /// Retries of a transient failure (with exponential backoff and jitter).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub retries: u32,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub(super) async fn run(args: FetchArgs) -> anyhow::Result<()> {
    let provider: ProviderAddress = args.address.parse()?;
    let constraints: VersionConstraints = args.constraint.parse()?;
    let http = HttpClient::new(HttpConfig {
        extra_ca_files: args.ca_cert.clone(),
        request_timeout: Duration::from_secs(args.timeout),
        read_timeout: Duration::from_secs(args.timeout),
        retries: args.retries,
        ..HttpConfig::default()
    })?;
    let source = build_source(&args, &provider, http.clone())?;
    let cache = PluginCache::new(
        args.cache_dir
            .clone()
            .unwrap_or_else(PluginCache::default_root),
    );
    let mut installer = Installer::new(source, cache, http).allow_unsigned(args.allow_unsigned);
    if let Some(p) = &args.platform {
        installer = installer.with_platform(p.parse()?);
    }
    let mut lock = match &args.lock_file {
        Some(path) => Some(LockFile::load(path)?),
        None => None,
    };
    let request = InstallRequest {
        provider: provider.clone(),
        constraints: constraints.clone(),
        locked: lock.as_ref().and_then(|l| l.get(&provider).cloned()),
        upgrade: args.upgrade,
    };
    let progress = TerminalProgress::for_stderr(&format!("{provider}"));
    let installed = installer
        .install(&request, progress.as_ref())
        .await
        .with_context(|| format!("failed to install {provider}"))?;
    for w in &installed.warnings {
        eprintln!("warning: {w}");
    }
    if let (Some(lock), Some(path)) = (lock.as_mut(), &args.lock_file) {
        let entry = installed.lock_entry(&constraints);
        if lock.get(&provider) != Some(&entry) {
            lock.set(provider.clone(), entry);
            lock.save(path)?;
        }
    }
    print(&installed, args.json)
}

fn build_source(
    args: &FetchArgs,
    provider: &ProviderAddress,
    http: HttpClient,
) -> anyhow::Result<Arc<dyn Source>> {
    if let Some(mirror) = &args.mirror {
        if mirror.starts_with("https://") || mirror.starts_with("http://") {
            let url = mirror
                .parse()
                .with_context(|| format!("invalid mirror url {mirror:?}"))?;
            return Ok(Arc::new(NetworkMirrorSource::new(http, url)?));
        }
        return Ok(Arc::new(FilesystemMirrorSource::new(mirror)));
    }
    let mut registry = RegistrySource::new(http);
    if let Some(root) = &args.registry {
        let url = root
            .parse()
            .with_context(|| format!("invalid registry url {root:?}"))?;
        registry = registry.with_base_url(&provider.hostname, url);
    }
    Ok(Arc::new(registry))
}

fn print(installed: &Installed, json: bool) -> anyhow::Result<()> {
    let path = installed.executable.as_ref().unwrap_or(&installed.dir);
    let hashes: Vec<String> = installed
        .lock_hashes
        .iter()
        .map(ToString::to_string)
        .collect();
    if json {
        let out = serde_json::json!({
            "provider": installed.provider.to_string(),
            "version": installed.version.to_string(),
            "platform": installed.platform.to_string(),
            "path": path,
            "dir": installed.dir,
            "cached": installed.from_cache,
            "signed_by": installed.signed_by,
            "h1": installed.h1.to_string(),
            "zh": installed.zh.as_ref().map(ToString::to_string),
            "hashes": hashes,
        });
        println!("{out}");
        return Ok(());
    }
    let origin = if installed.from_cache {
        "cache"
    } else {
        "fetched"
    };
    println!(
        "{} {} ({}, {origin})",
        installed.provider, installed.version, installed.platform
    );
    println!("{}", path.display());
    if let Some(key) = &installed.signed_by {
        println!("signed by key {key}");
    }
    println!("{}", installed.h1);
    if let Some(zh) = &installed.zh {
        println!("{zh}");
    }
    Ok(())
}

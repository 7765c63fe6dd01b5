//! Shared set-up of the registry-fetch tests: a loopback HTTPS registry publishing a real
//! provider binary from the test environment, a fresh plugin cache, and an installer (or the
//! `kraken fetch` command) pointed at them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use kraken_registry_fetch::{
    HttpClient, HttpConfig, InstallRequest, Installer, PluginCache, ProviderAddress,
    RegistrySource, Source,
};
use kraken_tests::registry_server::{
    Publish, Published, RegistryServer, SigningIdentity, package_zip, single_file_h1,
};
use kraken_tests::{ProviderBin, TestEnv};

pub struct Fixture {
    pub server: RegistryServer,
    pub signer: SigningIdentity,
    pub provider: ProviderAddress,
    pub bin: ProviderBin,
    pub published: Published,
    pub h1: String,
    pub cache: tempfile::TempDir,
}

/// The zip of a test provider, built once per test binary (zipping 15–26 MB takes a moment).
pub fn zip_of(bin: &ProviderBin) -> anyhow::Result<Arc<Vec<u8>>> {
    static ZIPS: OnceLock<std::sync::Mutex<std::collections::HashMap<String, Arc<Vec<u8>>>>> =
        OnceLock::new();
    let zips = ZIPS.get_or_init(Default::default);
    if let Some(z) = zips.lock().ok().and_then(|m| m.get(&bin.name).cloned()) {
        return Ok(z);
    }
    let z = Arc::new(package_zip(&bin.path, &bin.name, &bin.version)?);
    if let Ok(mut m) = zips.lock() {
        m.insert(bin.name.clone(), z.clone());
    }
    Ok(z)
}

/// The package name of the protocol-6 fixture in its address (`kraken/fixture`) differs from
/// the others (`hashicorp/<name>`); both come from `TestEnv`.
pub fn namespace_of(bin: &ProviderBin) -> &'static str {
    if bin.name == "fixture" {
        "kraken"
    } else {
        "hashicorp"
    }
}

/// Start a registry that publishes `name` (random, time, null or fixture) for this platform.
pub async fn fixture(name: &str) -> anyhow::Result<Fixture> {
    let env = TestEnv::load()?;
    let bin = env.provider(name)?;
    let server = RegistryServer::start().await?;
    let signer = SigningIdentity::generate("kraken-test")?;
    let protocols = if name == "fixture" {
        vec!["6.0"]
    } else {
        vec!["5.0"]
    };
    let h1 = single_file_h1(&bin.path, &bin.name, &bin.version)?;
    let published = server.publish(&Publish {
        hostname: bin.address.split('/').next().unwrap_or_default(),
        namespace: namespace_of(&bin),
        type_name: &bin.name,
        version: &bin.version,
        platform: &kraken_registry_fetch::current_platform(),
        zip: zip_of(&bin)?.to_vec(),
        h1: h1.clone(),
        protocols,
        signer: &signer,
        published_keys: vec![signer.public_armor.clone()],
        other_platforms: vec!["darwin_arm64", "windows_amd64"],
    })?;
    Ok(Fixture {
        provider: bin.address.parse()?,
        server,
        signer,
        bin,
        published,
        h1,
        cache: tempfile::Builder::new().prefix("kraken-cache-").tempdir()?,
    })
}

/// Client settings that keep failure tests quick: short timeouts, fast backoff.
pub fn http_config(ca: &Path) -> HttpConfig {
    HttpConfig {
        extra_ca_files: vec![ca.to_path_buf()],
        retries: 2,
        backoff_base: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
        request_timeout: Duration::from_secs(2),
        read_timeout: Duration::from_secs(2),
        ..HttpConfig::default()
    }
}

impl Fixture {
    pub fn http(&self) -> anyhow::Result<HttpClient> {
        Ok(HttpClient::new(http_config(self.server.ca_file()))?)
    }

    /// A registry source that resolves the provider's hostname to the loopback server.
    pub fn registry(&self) -> anyhow::Result<Arc<dyn Source>> {
        let root = self.server.base_url().parse()?;
        Ok(Arc::new(
            RegistrySource::new(self.http()?).with_base_url(&self.provider.hostname, root),
        ))
    }

    pub fn installer(&self, source: Arc<dyn Source>) -> anyhow::Result<Installer> {
        Ok(Installer::new(
            source,
            PluginCache::new(self.cache.path()),
            self.http()?,
        ))
    }

    pub fn request(&self, constraint: &str) -> anyhow::Result<InstallRequest> {
        Ok(InstallRequest {
            provider: self.provider.clone(),
            constraints: constraint.parse()?,
            locked: None,
            upgrade: false,
        })
    }

    /// The package directory this provider would occupy in the cache.
    pub fn package_dir(&self) -> anyhow::Result<PathBuf> {
        Ok(PluginCache::new(self.cache.path()).package_dir(
            &self.provider,
            &self.bin.version.parse()?,
            &kraken_registry_fetch::Platform::current(),
        ))
    }

    /// Nothing of a failed install may remain: no package directory, an empty staging area.
    pub fn assert_nothing_installed(&self) -> anyhow::Result<()> {
        let dir = self.package_dir()?;
        anyhow::ensure!(
            !dir.exists(),
            "{} exists after a failed install",
            dir.display()
        );
        let staging = self.cache.path().join(".kraken/tmp");
        if staging.exists() {
            let left: Vec<_> = std::fs::read_dir(&staging)?.collect();
            anyhow::ensure!(left.is_empty(), "staging area not cleaned: {left:?}");
        }
        Ok(())
    }

    /// `kraken fetch ADDRESS --registry … --ca-cert … --cache-dir …` plus `extra` arguments.
    pub fn kraken_fetch(&self, extra: &[&str]) -> anyhow::Result<std::process::Command> {
        let mut cmd = std::process::Command::new(kraken_tests::kraken_bin()?);
        cmd.arg("fetch")
            .arg(self.provider.to_string())
            .arg("--registry")
            .arg(self.server.base_url())
            .arg("--ca-cert")
            .arg(self.server.ca_file())
            .arg("--cache-dir")
            .arg(self.cache.path())
            .args(["--retries", "1", "--timeout", "5"])
            .args(extra)
            .env_remove("TF_PLUGIN_CACHE_DIR");
        Ok(cmd)
    }
}

/// Run a command off the async runtime (the registry server lives on it) and capture output.
pub async fn output(mut cmd: std::process::Command) -> anyhow::Result<std::process::Output> {
    tokio::task::spawn_blocking(move || cmd.output().context("failed to run kraken"))
        .await
        .context("join")?
}

/// Parse `kraken fetch --json` output.
pub fn json_of(out: &std::process::Output) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(
        out.status.success(),
        "kraken fetch failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

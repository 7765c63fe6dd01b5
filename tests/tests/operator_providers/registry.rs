//! Providers from the loopback HTTPS registry (signed, checksummed): install, reconcile and
//! upgrade with a resource in place; a tampered package and an unknown signing key install
//! nothing.

use std::path::Path;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::condition;
use kraken_tests::registry_server::{
    Publish, RegistryServer, SigningIdentity, package_zip, single_file_h1,
};
use kraken_tests::{TestEnv, wait_for};
use serde_json::json;

use super::{Bed, RECONCILE_TIMEOUT, managed, provider_config, provider_manifest};

/// The loopback HTTPS registry, serving the protocol 6 fixture as 1.0.0 and 1.1.0, signed.
struct Registry {
    rt: tokio::runtime::Runtime,
    server: RegistryServer,
    signer: SigningIdentity,
}

impl Registry {
    fn start() -> anyhow::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let server = rt.block_on(RegistryServer::start())?;
        let signer = SigningIdentity::generate("kraken-test")?;
        Ok(Self { rt, server, signer })
    }

    /// Publish the fixture binary as `version`, signed by the registry's key; `tamper`
    /// corrupts the package after signing (its bytes no longer match the signed checksum).
    fn publish(&self, binary: &Path, version: &str, tamper: bool) -> anyhow::Result<()> {
        let key = self.signer.public_armor.clone();
        self.publish_with_key(binary, version, tamper, key)
    }

    /// Like [`Self::publish`], announcing `published_key` as the registry's signing key.
    fn publish_with_key(
        &self,
        binary: &Path,
        version: &str,
        tamper: bool,
        published_key: String,
    ) -> anyhow::Result<()> {
        let _guard = self.rt.enter();
        let zip = package_zip(binary, "fixture", version)?;
        let published = self.server.publish(&Publish {
            hostname: &self.server.host(),
            namespace: "kraken",
            type_name: "fixture",
            version,
            platform: &kraken_registry_fetch::current_platform(),
            zip: zip.clone(),
            h1: single_file_h1(binary, "fixture", version)?,
            protocols: vec!["6.0"],
            signer: &self.signer,
            published_keys: vec![published_key],
            other_platforms: vec![],
        })?;
        if tamper {
            let mut bad = zip;
            let n = bad.len();
            bad[n / 2] ^= 0xff;
            self.server.set(
                &published.zip_path,
                kraken_tests::registry_server::Reply::bytes(bad),
            );
        }
        Ok(())
    }

    fn source(&self) -> String {
        format!("{}/kraken/fixture", self.server.host())
    }
}

/// From the registry: install, reconcile, upgrade 1.0.0 → 1.1.0 with a resource in place (its
/// state kept, no second create), and a tampered package that installs nothing.
#[test]
fn provider_from_a_registry_upgrades_and_refuses_a_bad_package() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let fixture = env.provider("fixture")?;
    let registry = Registry::start()?;
    registry.publish(&fixture.path, "1.0.0", false)?;
    let ca = registry.server.ca_file().display().to_string();
    let bed = Bed::start("registry", vec!["--ca-cert".into(), ca])?;
    let ledger = kraken_tests::fixture_dir("kraken-ledger-")?;
    let r = (|| {
        expect_installed_and_signed(&bed, &registry)?;
        let config = json!({"ledgerDir": ledger.path()});
        bed.apply(&provider_config(&bed.ns, "default", "fixture", config))?;
        bed.apply(&managed(
            "fixture.tf.kraken.dev/v1alpha1",
            "Object",
            &bed.ns,
            "one",
            "default",
            json!({"name": "one", "size": 1}),
        ))?;
        let obj = bed.wait_reconciled("objects.fixture.tf.kraken.dev", "one")?;
        let id = obj["status"]["externalId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        ensure!(
            ledger::live_objects(ledger.path()) == 1,
            "one object in the ledger"
        );
        registry.publish(&fixture.path, "1.1.0", false)?;
        expect_upgrade_keeps_the_object(&bed, ledger.path(), &id)?;
        registry.publish(&fixture.path, "1.2.0", true)?;
        expect_tampered_package_refused(&bed, &registry)
    })();
    bed.finish(r)
}

/// The Provider `fixture` at 1.0.0 from the registry: both hash schemes recorded, signed by
/// the registry's key.
fn expect_installed_and_signed(bed: &Bed, registry: &Registry) -> anyhow::Result<()> {
    let source = registry.source();
    let spec = json!({"source": source, "version": "~> 1.0", "resources": ["fixture_object"]});
    bed.cp.apply_yaml("", &provider_manifest("fixture", spec))?;
    let p = bed.wait_provider("fixture", "True", "Installed")?;
    ensure!(
        p["status"]["version"] == "1.0.0" && p["status"]["protocol"] == 6,
        "status: {}",
        p["status"]
    );
    let hashes = p["status"]["hashes"].to_string();
    ensure!(
        hashes.contains("\"h1:") && hashes.contains("\"zh:"),
        "a registry install records both hash schemes: {hashes}"
    );
    let signed_by = p["status"]["signedBy"].as_str().unwrap_or_default();
    ensure!(
        signed_by.eq_ignore_ascii_case(&registry.signer.key_id),
        "signedBy {signed_by}, the registry signs with {}",
        registry.signer.key_id
    );
    Ok(())
}

/// Upgrade to 1.1.0 with the resource in place: the ProviderConfig follows, and a change of
/// the object is an update of the same object (id `id`) in the ledger at `ledger`.
fn expect_upgrade_keeps_the_object(bed: &Bed, ledger: &Path, id: &str) -> anyhow::Result<()> {
    bed.patch_provider("fixture", r#"{"spec":{"version":"~> 1.1"}}"#)?;
    let p = bed.wait_provider("fixture", "True", "Installed")?;
    ensure!(
        p["status"]["version"] == "1.1.0",
        "upgraded: {}",
        p["status"]
    );
    wait_for(RECONCILE_TIMEOUT, "ProviderConfig default on 1.1.0", || {
        let pc = bed
            .cp
            .get_json(&bed.ns, "providerconfigs.core.kraken.dev", "default")?;
        if pc["status"]["version"] == "1.1.0" {
            Ok(Some(()))
        } else {
            bail!("status {}", pc["status"])
        }
    })?;
    bed.cp.kubectl(&[
        "patch",
        "objects.fixture.tf.kraken.dev",
        "one",
        "-n",
        &bed.ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"forProvider":{"size":2}}}"#,
    ])?;
    let obj = bed.wait_reconciled("objects.fixture.tf.kraken.dev", "one")?;
    ensure!(
        obj["status"]["externalId"] == id,
        "the object was replaced: {}",
        obj["status"]
    );
    ensure!(
        obj["status"]["atProvider"]["size"] == 2,
        "size: {}",
        obj["status"]
    );
    let objects = ledger::objects(ledger)?;
    ensure!(
        objects.len() == 1 && objects[0]["size"] == 2,
        "ledger: {objects:?}"
    );
    Ok(())
}

/// A package whose bytes do not match the signed checksum (1.2.0, published tampered):
/// Ready=False, nothing installed, the version already installed still in use.
fn expect_tampered_package_refused(bed: &Bed, registry: &Registry) -> anyhow::Result<()> {
    bed.patch_provider("fixture", r#"{"spec":{"version":"1.2.0"}}"#)?;
    let p = bed.wait_provider("fixture", "False", "VerificationFailed")?;
    let (_, _, message) = condition(&p, "Ready").context("Ready")?;
    ensure!(message.contains("checksum mismatch"), "message: {message}");
    let host = registry.server.host();
    ensure!(
        !bed.cache
            .path()
            .join(&host)
            .join("kraken/fixture/1.2.0")
            .exists(),
        "1.2.0 was installed"
    );
    // The object keeps working on the version already installed.
    ensure!(
        p["status"]["version"] == "1.1.0",
        "status after the failed upgrade: {}",
        p["status"]
    );
    Ok(())
}

/// A package with no valid signature: Ready=False/VerificationFailed, no CRD, no cache entry.
#[test]
fn provider_with_an_unknown_signing_key_installs_nothing() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let fixture = env.provider("fixture")?;
    let registry = Registry::start()?;
    // Signed by one key, published with another.
    let other = SigningIdentity::generate("someone-else")?;
    registry.publish_with_key(&fixture.path, "1.0.0", false, other.public_armor.clone())?;
    let ca = registry.server.ca_file().display().to_string();
    let bed = Bed::start("badsig", vec!["--ca-cert".into(), ca])?;
    let r = (|| {
        let spec = json!({"source": registry.source(), "resources": ["fixture_object"]});
        bed.cp.apply_yaml("", &provider_manifest("fixture", spec))?;
        let p = bed.wait_provider("fixture", "False", "VerificationFailed")?;
        let (_, _, message) = condition(&p, "Ready").context("Ready")?;
        ensure!(
            message.contains("signature") || message.contains("key"),
            "message: {message}"
        );
        ensure!(
            bed.crds_labelled("kraken.dev/provider-name=fixture")?
                .is_empty(),
            "CRDs were installed"
        );
        ensure!(
            p["status"].get("version").is_none(),
            "a version was recorded: {}",
            p["status"]
        );
        let entries = std::fs::read_dir(bed.cache.path())?
            .flatten()
            .filter(|e| {
                e.file_name() != ".locks" && e.path().is_dir() && e.path().join("kraken").exists()
            })
            .count();
        ensure!(entries == 0, "something was installed in the cache");
        Ok(())
    })();
    bed.finish(r)
}

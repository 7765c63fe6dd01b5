//! registry-fetch against a real HTTPS registry on loopback serving real provider binaries:
//! the registry protocol, the network mirror, filesystem mirrors, and every kind of bad input,
//! each of which must give its typed error and leave nothing in the cache.

mod registry_common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kraken_registry_fetch::{
    Error, FilesystemMirrorSource, MemoizeSource, NetworkMirrorSource, NoProgress, PackageHash,
    Platform, ProviderLock,
};
use kraken_tests::registry_server::{Publish, Reply, SigningIdentity, package_zip};
use registry_common::{Fixture, fixture};

async fn install_err(f: &Fixture, constraint: &str) -> anyhow::Result<Error> {
    let installer = f.installer(f.registry()?)?;
    match installer
        .install(&f.request(constraint)?, &NoProgress)
        .await
    {
        Ok(i) => anyhow::bail!("install unexpectedly succeeded: {}", i.dir.display()),
        Err(e) => Ok(e),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn registry_install_verifies_and_records_terraform_hashes() -> anyhow::Result<()> {
    let f = fixture("random").await?;
    let installer = f.installer(f.registry()?)?;
    let got = installer
        .install(&f.request("~> 3.6")?, &NoProgress)
        .await?;
    assert!(!got.from_cache);
    assert_eq!(got.version.to_string(), f.bin.version);
    assert_eq!(
        got.signed_by.as_deref(),
        Some(f.signer.key_id.to_lowercase().as_str())
    );
    assert_eq!(got.h1.to_string(), f.h1);
    assert_eq!(
        got.zh.as_ref().map(ToString::to_string),
        Some(f.published.zh.clone())
    );
    // h1 of this platform plus zh of every platform in the signed SHA256SUMS, like Terraform.
    let mut want: BTreeSet<String> = f.published.all_zh.iter().cloned().collect();
    want.insert(f.h1.clone());
    let recorded: BTreeSet<String> = got.lock_hashes.iter().map(ToString::to_string).collect();
    assert_eq!(recorded, want);
    let exe = got.executable.clone().expect("executable found");
    assert_eq!(std::fs::read(&exe)?, std::fs::read(&f.bin.path)?);
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&exe)?.permissions().mode() & 0o111,
            0o111,
            "exec bit kept"
        );
    }
    // A second install is a cache hit that asks the network nothing.
    let before = f.server.total_hits();
    let mut req = f.request("~> 3.6")?;
    req.locked = Some(got.lock_entry(&req.constraints));
    let again = installer.install(&req, &NoProgress).await?;
    assert!(again.from_cache);
    assert_eq!(again.dir, got.dir);
    assert_eq!(
        f.server.total_hits(),
        before,
        "a locked cache hit must not query the registry"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn protocol_6_provider_from_its_own_registry_host() -> anyhow::Result<()> {
    let f = fixture("fixture").await?;
    let got = f
        .installer(f.registry()?)?
        .install(&f.request("")?, &NoProgress)
        .await?;
    assert_eq!(got.provider.to_string(), kraken_tests::FIXTURE_ADDRESS);
    assert!(
        got.dir
            .starts_with(f.cache.path().join("registry.kraken.dev/kraken/fixture"))
    );
    assert_eq!(got.h1.to_string(), f.h1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn network_mirror_is_trusted_by_its_hashes() -> anyhow::Result<()> {
    let f = fixture("time").await?;
    let base = format!("{}/mirror/", f.server.base_url()).parse()?;
    let mirror = Arc::new(MemoizeSource::new(Arc::new(NetworkMirrorSource::new(
        f.http()?,
        base,
    )?)));
    let got = f
        .installer(mirror.clone())?
        .install(&f.request(">= 0.1")?, &NoProgress)
        .await?;
    assert_eq!(got.h1.to_string(), f.h1);
    assert!(got.signed_by.is_none());
    // Mirrors are not signed: only the hash of what was installed is recorded.
    assert_eq!(
        got.lock_hashes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec![f.h1.clone()]
    );

    // A mirror whose archive does not match its own hashes is refused.
    let f2 = fixture("time").await?;
    let vpath = f2.published.mirror_version_path.clone();
    let bad = serde_json::json!({"archives": {kraken_registry_fetch::current_platform(): {"url": f2.published.filename, "hashes": ["h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="]}}});
    f2.server.set(&vpath, Reply::json(&bad));
    let base = format!("{}/mirror/", f2.server.base_url()).parse()?;
    let src = Arc::new(NetworkMirrorSource::new(f2.http()?, base)?);
    let err = f2
        .installer(src)?
        .install(&f2.request("")?, &NoProgress)
        .await
        .expect_err("hash mismatch");
    assert!(matches!(err, Error::ChecksumMismatch { .. }), "{err}");
    f2.assert_nothing_installed()
}

#[tokio::test(flavor = "multi_thread")]
async fn filesystem_mirror_packed_and_unpacked_give_the_same_package() -> anyhow::Result<()> {
    let env = kraken_tests::TestEnv::load()?;
    let f = fixture("null").await?;
    // Unpacked: the test environment's plugin directory is a Terraform unpacked mirror.
    let unpacked = Arc::new(FilesystemMirrorSource::new(
        env.path("KRAKEN_TEST_PLUGIN_DIR")?,
    ));
    let a = f
        .installer(unpacked)?
        .install(&f.request("")?, &NoProgress)
        .await?;
    // Packed: HOST/NAMESPACE/TYPE/terraform-provider-TYPE_VERSION_OS_ARCH.zip.
    let packed_root = tempfile::tempdir()?;
    let dir = packed_root
        .path()
        .join("registry.terraform.io/hashicorp/null");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join(&f.published.filename),
        package_zip(&f.bin.path, "null", &f.bin.version)?,
    )?;
    let other_cache = tempfile::tempdir()?;
    let packed = Arc::new(FilesystemMirrorSource::new(packed_root.path()));
    let installer = kraken_registry_fetch::Installer::new(
        packed,
        kraken_registry_fetch::PluginCache::new(other_cache.path()),
        f.http()?,
    );
    let b = installer.install(&f.request("")?, &NoProgress).await?;
    assert_eq!(a.h1, b.h1);
    assert_eq!(a.h1.to_string(), f.h1);
    assert!(b.zh.is_some() && a.zh.is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn opentofu_registry_address_and_unsigned_packages() -> anyhow::Result<()> {
    // OpenTofu's registry uses the same protocol; some providers there have no signing keys.
    let f = fixture("random").await?;
    let tofu: kraken_registry_fetch::ProviderAddress =
        "registry.opentofu.org/hashicorp/random".parse()?;
    let (host, ns, ty) = (&tofu.hostname, &tofu.namespace, &tofu.type_name);
    let download = f.server.get(&f.published.download_path).expect("published");
    let mut meta: serde_json::Value = serde_json::from_slice(&download.body)?;
    meta["signing_keys"] = serde_json::json!({"gpg_public_keys": []});
    f.server.set(&f.published.download_path, Reply::json(&meta));
    let source = Arc::new(
        kraken_registry_fetch::RegistrySource::new(f.http()?)
            .with_base_url(host, f.server.base_url().parse()?),
    );
    let mut req = f.request("")?;
    req.provider = tofu.clone();
    let strict = f.installer(source.clone())?;
    let err = strict
        .install(&req, &NoProgress)
        .await
        .expect_err("unsigned refused");
    assert!(matches!(err, Error::Unsigned { .. }), "{err}");
    let got = f
        .installer(source)?
        .allow_unsigned(true)
        .install(&req, &NoProgress)
        .await?;
    assert!(
        got.dir
            .starts_with(f.cache.path().join(format!("{host}/{ns}/{ty}")))
    );
    assert!(got.signed_by.is_none() && !got.warnings.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn tampered_packages_are_refused() -> anyhow::Result<()> {
    // The zip is replaced: SHA256SUMS and the metadata still announce the original.
    let f = fixture("random").await?;
    f.server.set(
        &f.published.zip_path,
        Reply::bytes(package_zip(
            &kraken_tests::TestEnv::load()?.provider("null")?.path,
            "random",
            &f.bin.version,
        )?),
    );
    let err = install_err(&f, "").await?;
    assert!(
        matches!(&err, Error::ChecksumMismatch { what, .. } if what == &f.published.filename),
        "{err}"
    );
    f.assert_nothing_installed()?;

    // The metadata announces a hash that SHA256SUMS does not list for the file.
    let f = fixture("random").await?;
    let mut meta: serde_json::Value =
        serde_json::from_slice(&f.server.get(&f.published.download_path).expect("meta").body)?;
    meta["shasum"] = serde_json::json!("00".repeat(32));
    f.server.set(&f.published.download_path, Reply::json(&meta));
    let err = install_err(&f, "").await?;
    assert!(
        matches!(&err, Error::ChecksumMismatch { what, .. } if what.contains("SHA256SUMS")),
        "{err}"
    );
    f.assert_nothing_installed()
}

#[tokio::test(flavor = "multi_thread")]
async fn signatures_must_come_from_a_published_key_and_verify() -> anyhow::Result<()> {
    let f = fixture("random").await?;
    let sums = f.server.get(&f.published.sums_path).expect("sums").body;
    let stranger = SigningIdentity::generate("stranger")?;
    f.server
        .set(&f.published.sig_path, Reply::bytes(stranger.sign(&sums)?));
    let err = install_err(&f, "").await?;
    assert!(matches!(err, Error::SignatureUnknownKey { .. }), "{err}");
    f.assert_nothing_installed()?;

    let mut sig = f.signer.sign(&sums)?;
    let last = sig.len() - 3;
    sig[last] ^= 0x55;
    f.server.set(&f.published.sig_path, Reply::bytes(sig));
    let err = install_err(&f, "").await?;
    assert!(matches!(err, Error::SignatureInvalid { .. }), "{err}");

    // A valid signature over a different document (SHA256SUMS swapped after signing).
    f.server.set(
        &f.published.sig_path,
        Reply::bytes(f.signer.sign(b"something else")?),
    );
    let err = install_err(&f, "").await?;
    assert!(matches!(err, Error::SignatureInvalid { .. }), "{err}");
    f.assert_nothing_installed()
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_platform_protocol_4_and_unknown_versions() -> anyhow::Result<()> {
    let f = fixture("random").await?;
    let installer = f
        .installer(f.registry()?)?
        .with_platform("plan9_mips".parse::<Platform>()?);
    let err = installer
        .install(&f.request("")?, &NoProgress)
        .await
        .expect_err("no such platform");
    assert!(matches!(err, Error::PlatformNotSupported { .. }), "{err}");

    let zip = package_zip(&f.bin.path, "random", "1.0.0")?;
    f.server.publish(&Publish {
        hostname: kraken_registry_fetch::DEFAULT_REGISTRY_HOST,
        namespace: "hashicorp",
        type_name: "random",
        version: "1.0.0",
        platform: &kraken_registry_fetch::current_platform(),
        zip,
        h1: f.h1.clone(),
        protocols: vec!["4.0"],
        signer: &f.signer,
        published_keys: vec![f.signer.public_armor.clone()],
        other_platforms: vec![],
    })?;
    let err = install_err(&f, "= 1.0.0").await?;
    match &err {
        Error::ProtocolNotSupported { suggestion, .. } => {
            assert_eq!(
                suggestion.as_ref().map(ToString::to_string).as_deref(),
                Some(f.bin.version.as_str())
            );
        }
        other => anyhow::bail!("expected ProtocolNotSupported, got {other}"),
    }
    let err = install_err(&f, "> 99").await?;
    assert!(matches!(err, Error::NoMatchingVersion { .. }), "{err}");

    let mut req = f.request("")?;
    req.provider = "hashicorp/nonexistent".parse()?;
    let err = f
        .installer(f.registry()?)?
        .install(&req, &NoProgress)
        .await
        .expect_err("unknown");
    assert!(matches!(err, Error::UnknownProvider { .. }), "{err}");
    f.assert_nothing_installed()
}

#[tokio::test(flavor = "multi_thread")]
async fn server_errors_are_retried_and_client_errors_are_not() -> anyhow::Result<()> {
    let f = fixture("random").await?;
    let versions = f.server.get(&f.published.versions_path).expect("versions");
    // Two 503s then success: the retry policy (2 retries) absorbs them.
    f.server.set_sequence(
        &f.published.versions_path,
        vec![Reply::status(503), Reply::status(503), versions],
    );
    let installer = f.installer(f.registry()?)?;
    installer.install(&f.request("")?, &NoProgress).await?;
    assert_eq!(f.server.hits(&f.published.versions_path), 3);

    let f = fixture("random").await?;
    f.server.set(&f.published.versions_path, Reply::status(500));
    let err = install_err(&f, "").await?;
    assert!(
        matches!(err, Error::HttpStatus { status: 500, .. }) && err.is_transient(),
        "{err}"
    );
    assert_eq!(
        f.server.hits(&f.published.versions_path),
        3,
        "first try + 2 retries"
    );

    f.server.set(&f.published.download_path, Reply::status(403));
    f.server.set(
        &f.published.versions_path,
        Reply::json(
            &serde_json::json!({"versions": [{"version": f.bin.version, "protocols": ["5.0"]}]}),
        ),
    );
    let err = install_err(&f, "").await?;
    assert!(
        matches!(err, Error::HttpStatus { status: 403, .. }) && !err.is_transient(),
        "{err}"
    );
    assert_eq!(
        f.server.hits(&f.published.download_path),
        1,
        "a 403 is not retried"
    );
    f.assert_nothing_installed()
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_truncated_oversized_and_looping_responses() -> anyhow::Result<()> {
    // Slow: the metadata takes longer than the request timeout (2 s in these tests).
    let f = fixture("random").await?;
    let meta = f.server.get(&f.published.download_path).expect("meta");
    f.server.set(
        &f.published.download_path,
        meta.clone().delayed(Duration::from_secs(4)),
    );
    let err = install_err(&f, "").await?;
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    f.server.set(&f.published.download_path, meta);

    // Truncated in transit: the connection closes before Content-Length bytes arrived.
    let zip = f.server.get(&f.published.zip_path).expect("zip");
    let half = zip.body.len() / 2;
    f.server
        .set(&f.published.zip_path, zip.clone().truncated(half));
    let err = install_err(&f, "").await?;
    assert!(err.is_transient(), "{err}");
    assert_eq!(f.server.hits(&f.published.zip_path), 3, "retried");
    f.assert_nothing_installed()?;

    // A redirect loop on the download.
    f.server
        .set(&f.published.zip_path, Reply::redirect("/loop"));
    f.server.set("/loop", Reply::redirect("/loop"));
    let err = install_err(&f, "").await?;
    assert!(matches!(err, Error::Redirect { .. }), "{err}");

    // Oversized: a package over the configured limit is cut off while streaming.
    f.server.set(&f.published.zip_path, zip);
    let mut cfg = registry_common::http_config(f.server.ca_file());
    cfg.max_package_bytes = 1 << 20;
    let http = kraken_registry_fetch::HttpClient::new(cfg)?;
    let installer = kraken_registry_fetch::Installer::new(
        f.registry()?,
        kraken_registry_fetch::PluginCache::new(f.cache.path()),
        http,
    );
    let err = installer
        .install(&f.request("")?, &NoProgress)
        .await
        .expect_err("too large");
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    // An oversized metadata document, too (the default limit is 8 MiB).
    f.server.set(
        &f.published.versions_path,
        Reply::bytes(vec![b' '; 9 << 20]),
    );
    let err = install_err(&f, "").await?;
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    f.assert_nothing_installed()
}

/// Publish a correctly signed release whose zip is `zip`, replacing the fixture's package.
fn republish(f: &Fixture, zip: Vec<u8>) -> anyhow::Result<()> {
    f.server.publish(&Publish {
        hostname: kraken_registry_fetch::DEFAULT_REGISTRY_HOST,
        namespace: "hashicorp",
        type_name: &f.bin.name,
        version: &f.bin.version,
        platform: &kraken_registry_fetch::current_platform(),
        zip,
        h1: f.h1.clone(),
        protocols: vec!["5.0"],
        signer: &f.signer,
        published_keys: vec![f.signer.public_armor.clone()],
        other_platforms: vec![],
    })?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn signed_but_malicious_or_broken_archives() -> anyhow::Result<()> {
    // A zip entry escaping the target, in a release whose checksums and signature are valid.
    let f = fixture("random").await?;
    let mut cur = std::io::Cursor::new(Vec::new());
    {
        use std::io::Write as _;
        let mut w = zip::ZipWriter::new(&mut cur);
        let opts = zip::write::SimpleFileOptions::default().unix_permissions(0o755);
        w.start_file("terraform-provider-random_v3.6.0", opts)?;
        w.write_all(b"#!/bin/sh\n")?;
        w.start_file("../../../escaped-by-kraken-test", opts)?;
        w.write_all(b"pwned")?;
        w.finish()?;
    }
    republish(&f, cur.into_inner())?;
    let err = install_err(&f, "").await?;
    assert!(matches!(err, Error::UnsafeArchive { .. }), "{err}");
    assert!(!f.cache.path().join("escaped-by-kraken-test").exists());
    assert!(
        !f.cache
            .path()
            .parent()
            .expect("parent")
            .join("escaped-by-kraken-test")
            .exists()
    );
    f.assert_nothing_installed()?;

    // A truncated zip that the registry announces consistently: authentic but unusable.
    let full = registry_common::zip_of(&f.bin)?;
    republish(&f, full[..full.len() / 3].to_vec())?;
    let err = install_err(&f, "").await?;
    assert!(matches!(err, Error::InvalidArchive { .. }), "{err}");
    f.assert_nothing_installed()
}

#[tokio::test(flavor = "multi_thread")]
async fn lock_file_that_disagrees() -> anyhow::Result<()> {
    let f = fixture("random").await?;
    let installer = f.installer(f.registry()?)?;
    let wrong: PackageHash = "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".parse()?;
    let mut req = f.request("~> 3.6")?;
    req.locked = Some(ProviderLock {
        version: f.bin.version.parse()?,
        constraints: None,
        hashes: [wrong.clone()].into(),
    });
    let err = installer
        .install(&req, &NoProgress)
        .await
        .expect_err("lock mismatch");
    assert!(matches!(err, Error::LockMismatch { .. }), "{err}");
    f.assert_nothing_installed()?;

    // Installed correctly first, the cache entry still doesn't satisfy a lock that disagrees.
    let ok = installer.install(&f.request("")?, &NoProgress).await?;
    let err = installer
        .install(&req, &NoProgress)
        .await
        .expect_err("lock mismatch on cache");
    assert!(matches!(err, Error::LockMismatch { .. }), "{err}");
    assert!(ok.dir.exists(), "the verified package stays in the cache");

    req.constraints = "< 3.0".parse()?;
    let err = installer
        .install(&req, &NoProgress)
        .await
        .expect_err("locked version excluded");
    assert!(
        matches!(err, Error::LockedVersionNotAllowed { .. }),
        "{err}"
    );
    Ok(())
}

//! Installer pipeline against the in-memory `MockSource` and local zips: version selection,
//! cache hits that ask the source nothing, protocol checks, memoization, and hash checks that
//! refuse a package before it is unpacked or before it reaches the cache.

use std::io::Write as _;
use std::sync::Arc;

use super::*;
use crate::source::{MemoizeSource, MockSource};

fn zip_file(dir: &Path, name: &str, body: &[u8]) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("{name}.zip"));
    let mut w = zip::ZipWriter::new(std::fs::File::create(&path)?);
    let opts = zip::write::SimpleFileOptions::default().unix_permissions(0o755);
    w.start_file(name, opts)?;
    w.write_all(body)?;
    w.finish()?;
    Ok(path)
}

struct Setup {
    mock: Arc<MockSource>,
    provider: ProviderAddress,
    _files: tempfile::TempDir,
    cache: tempfile::TempDir,
}

fn setup(versions: &[(&str, &[&str])]) -> anyhow::Result<Setup> {
    let files = tempfile::tempdir()?;
    let mock = Arc::new(MockSource::new());
    let provider: ProviderAddress = "acme/thing".parse()?;
    for (v, protocols) in versions {
        let zip = zip_file(
            files.path(),
            &format!("terraform-provider-thing_v{v}"),
            v.as_bytes(),
        )?;
        mock.add(PackageMeta {
            provider: provider.clone(),
            version: v.parse()?,
            platform: Platform::current(),
            filename: format!("terraform-provider-thing_{v}.zip"),
            protocols: protocols.iter().map(|p| p.to_string()).collect(),
            location: PackageLocation::LocalArchive(zip),
            authentication: Authentication::None,
        });
    }
    Ok(Setup {
        mock,
        provider,
        _files: files,
        cache: tempfile::tempdir()?,
    })
}

fn installer(s: &Setup, source: Arc<dyn Source>) -> anyhow::Result<Installer> {
    Ok(Installer::new(
        source,
        PluginCache::new(s.cache.path()),
        HttpClient::new(crate::HttpConfig::default())?,
    ))
}

fn request(s: &Setup, constraint: &str) -> anyhow::Result<InstallRequest> {
    Ok(InstallRequest {
        provider: s.provider.clone(),
        constraints: constraint.parse()?,
        locked: None,
        upgrade: false,
    })
}

#[tokio::test]
async fn newest_match_then_cache_hit_without_queries() -> anyhow::Result<()> {
    let s = setup(&[
        ("1.0.0", &["5.0"]),
        ("1.2.0", &["5.1"]),
        ("2.0.0", &["6.0"]),
        ("1.3.0-beta", &["5.0"]),
    ])?;
    let inst = installer(&s, s.mock.clone())?;
    let got = inst
        .install(&request(&s, "~> 1.0")?, &crate::NoProgress)
        .await?;
    assert_eq!(got.version.to_string(), "1.2.0");
    assert!(got.zh.is_some() && !got.from_cache);
    let queries = s.mock.queries();
    let mut locked = request(&s, "~> 1.0")?;
    locked.locked = Some(got.lock_entry(&locked.constraints));
    let hit = inst.install(&locked, &crate::NoProgress).await?;
    assert!(hit.from_cache);
    assert_eq!(
        s.mock.queries(),
        queries,
        "locked cache hit asked the source"
    );
    // Upgrade ignores the locked version.
    locked.constraints = VersionConstraints::any();
    locked.upgrade = true;
    assert_eq!(
        inst.install(&locked, &crate::NoProgress)
            .await?
            .version
            .to_string(),
        "2.0.0"
    );
    Ok(())
}

#[tokio::test]
async fn protocol_4_only_is_refused() -> anyhow::Result<()> {
    let s = setup(&[("0.1.0", &["4.0"])])?;
    let err = installer(&s, s.mock.clone())?
        .install(&request(&s, "")?, &crate::NoProgress)
        .await
        .expect_err("protocol 4");
    assert!(matches!(err, Error::ProtocolNotSupported { .. }), "{err}");
    Ok(())
}

#[tokio::test]
async fn memoize_asks_once() -> anyhow::Result<()> {
    let s = setup(&[("1.0.0", &["5.0"])])?;
    let memo = MemoizeSource::new(s.mock.clone());
    let v: Version = "1.0.0".parse()?;
    for _ in 0..3 {
        memo.available_versions(&s.provider).await?;
        memo.package_meta(&s.provider, &v, &Platform::current())
            .await?;
    }
    assert_eq!(s.mock.queries(), 2);
    let unknown: ProviderAddress = "acme/other".parse()?;
    assert!(matches!(
        memo.available_versions(&unknown).await,
        Err(Error::UnknownProvider { .. })
    ));
    Ok(())
}

/// A mirror's package (`authentication`) for acme/thing 1.0.0 served from the zip `zip`.
fn mirror_setup(zip: PathBuf, authentication: Authentication) -> anyhow::Result<Setup> {
    let s = setup(&[])?;
    s.mock.add(PackageMeta {
        provider: s.provider.clone(),
        version: "1.0.0".parse()?,
        platform: Platform::current(),
        filename: "terraform-provider-thing_1.0.0.zip".into(),
        protocols: Vec::new(),
        location: PackageLocation::LocalArchive(zip),
        authentication,
    });
    Ok(s)
}

/// A zip that unpacking refuses (it climbs out): a hash error instead proves it was never
/// unpacked.
fn hostile_zip(dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("hostile.zip");
    let mut w = zip::ZipWriter::new(std::fs::File::create(&path)?);
    w.start_file("../escape", zip::write::SimpleFileOptions::default())?;
    w.write_all(b"pwned")?;
    w.finish()?;
    Ok(path)
}

/// No package directory and no staging left behind.
fn assert_cache_clean(s: &Setup) -> anyhow::Result<()> {
    let pkg = PluginCache::new(s.cache.path()).package_dir(
        &s.provider,
        &"1.0.0".parse()?,
        &Platform::current(),
    );
    assert!(!pkg.exists(), "{} exists", pkg.display());
    let staging = s.cache.path().join(".kraken/tmp");
    let left: Vec<_> = match std::fs::read_dir(&staging) {
        Ok(rd) => rd.collect::<std::io::Result<_>>()?,
        Err(_) => Vec::new(),
    };
    assert!(left.is_empty(), "staging holds {left:?}");
    Ok(())
}

fn other_zh() -> PackageHash {
    PackageHash::zip(&[0xab; 32])
}

#[tokio::test]
async fn mirror_zip_with_wrong_zh_is_refused_before_unpacking() -> anyhow::Result<()> {
    let files = tempfile::tempdir()?;
    let zip = hostile_zip(files.path())?;
    let s = mirror_setup(zip, Authentication::Hashes(vec![other_zh()]))?;
    let err = installer(&s, s.mock.clone())?
        .install(&request(&s, "")?, &crate::NoProgress)
        .await
        .expect_err("wrong zh");
    assert!(matches!(err, Error::ChecksumMismatch { .. }), "{err}");
    assert_cache_clean(&s)
}

#[tokio::test]
async fn lock_file_zh_is_checked_before_unpacking() -> anyhow::Result<()> {
    let files = tempfile::tempdir()?;
    let s = mirror_setup(hostile_zip(files.path())?, Authentication::None)?;
    let mut req = request(&s, "")?;
    req.locked = Some(ProviderLock {
        version: "1.0.0".parse()?,
        constraints: None,
        hashes: [other_zh()].into(),
    });
    let err = installer(&s, s.mock.clone())?
        .install(&req, &crate::NoProgress)
        .await
        .expect_err("locked zh");
    assert!(matches!(err, Error::LockMismatch { .. }), "{err}");
    assert_cache_clean(&s)
}

#[tokio::test]
async fn mirror_h1_only_is_checked_in_staging() -> anyhow::Result<()> {
    let files = tempfile::tempdir()?;
    let zip = zip_file(files.path(), "terraform-provider-thing_v1.0.0", b"good")?;
    let unpacked = tempfile::tempdir()?;
    unzip::extract(&zip, unpacked.path(), UnzipLimits::default())?;
    let good = dir_hash(unpacked.path())?;
    let wrong: PackageHash = "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".parse()?;

    let s = mirror_setup(zip.clone(), Authentication::Hashes(vec![wrong]))?;
    let err = installer(&s, s.mock.clone())?
        .install(&request(&s, "")?, &crate::NoProgress)
        .await
        .expect_err("wrong h1");
    assert!(matches!(err, Error::ChecksumMismatch { .. }), "{err}");
    assert_cache_clean(&s)?;

    let s = mirror_setup(zip, Authentication::Hashes(vec![good.clone()]))?;
    let got = installer(&s, s.mock.clone())?
        .install(&request(&s, "")?, &crate::NoProgress)
        .await?;
    assert_eq!(got.h1, good);
    assert!(got.executable.is_some());
    Ok(())
}

#[tokio::test]
async fn unpacked_mirror_links_stay_inside_the_package() -> anyhow::Result<()> {
    use std::os::unix::fs::symlink;
    let files = tempfile::tempdir()?;
    std::fs::write(files.path().join("secret"), b"operator secret")?;
    let pkg = files.path().join("mirror/1.0.0");
    std::fs::create_dir_all(pkg.join("docs"))?;
    std::fs::write(pkg.join("terraform-provider-thing_v1.0.0"), b"bin")?;
    std::fs::write(pkg.join("docs/README"), b"r")?;
    symlink("docs/README", pkg.join("README"))?;
    symlink("../../secret", pkg.join("stolen"))?;
    let s = setup(&[])?;
    s.mock.add(PackageMeta {
        provider: s.provider.clone(),
        version: "1.0.0".parse()?,
        platform: Platform::current(),
        filename: "terraform-provider-thing_1.0.0.zip".into(),
        protocols: Vec::new(),
        location: PackageLocation::LocalDir(pkg.clone()),
        authentication: Authentication::None,
    });
    let inst = installer(&s, s.mock.clone())?;
    let err = inst
        .install(&request(&s, "")?, &crate::NoProgress)
        .await
        .expect_err("link out");
    assert!(matches!(err, Error::UnsafeArchive { .. }), "{err}");
    assert_cache_clean(&s)?;

    std::fs::remove_file(pkg.join("stolen"))?;
    let got = inst.install(&request(&s, "")?, &crate::NoProgress).await?;
    assert_eq!(std::fs::read(got.dir.join("README"))?, b"r");
    Ok(())
}

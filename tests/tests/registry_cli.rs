//! `kraken fetch` as a user runs it, against the loopback HTTPS registry: output, cache hits,
//! the lock file, error messages, and two processes installing the same provider at once.

mod registry_common;

use std::time::Duration;

use kraken_tests::registry_server::{HoldOutcome, Reply, SigningIdentity};
use registry_common::{fixture, json_of, output};

#[tokio::test(flavor = "multi_thread")]
async fn fetch_prints_path_and_hashes_and_a_cache_hit_is_a_no_op() -> anyhow::Result<()> {
    let f = fixture("random").await?;
    let lock = f.cache.path().join("work/.terraform.lock.hcl");
    std::fs::create_dir_all(lock.parent().expect("parent"))?;
    let args = ["--version", "~> 3.6", "--json", "--lock-file"];
    let mut cmd = f.kraken_fetch(&args)?;
    cmd.arg(&lock);
    let first = json_of(&output(cmd).await?)?;
    assert_eq!(first["cached"], false);
    assert_eq!(first["h1"], f.h1.as_str());
    assert_eq!(first["zh"], f.published.zh.as_str());
    let path = std::path::PathBuf::from(first["path"].as_str().unwrap_or_default());
    assert!(path.ends_with(format!(
        "3.6.0/{}/terraform-provider-random_v3.6.0",
        kraken_registry_fetch::current_platform()
    )));
    let text = std::fs::read_to_string(&lock)?;
    assert!(text.contains("constraints = \"~> 3.6\""), "{text}");
    for zh in &f.published.all_zh {
        assert!(text.contains(zh.as_str()), "{zh} missing from\n{text}");
    }

    let (hits, connections) = (f.server.total_hits(), f.server.connections());
    let mut cmd = f.kraken_fetch(&args)?;
    cmd.arg(&lock);
    let second = json_of(&output(cmd).await?)?;
    assert_eq!(second["cached"], true);
    assert_eq!(second["path"], first["path"]);
    // How fast a hit is, is the fetch benchmark's business; what makes it a hit is that the
    // registry never hears of it: no request, not even a connection.
    assert_eq!(
        (f.server.total_hits(), f.server.connections()),
        (hits, connections),
        "a cache hit with a lock file makes no request and opens no connection"
    );
    assert_eq!(
        std::fs::read_to_string(&lock)?,
        text,
        "a no-op leaves the lock file alone"
    );

    // Plain output: name, path, hashes.
    let mut cmd = f.kraken_fetch(&[])?;
    cmd.arg("--lock-file").arg(&lock);
    let out = output(cmd).await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&path.display().to_string()) && stdout.contains(&f.h1),
        "{stdout}"
    );
    Ok(())
}

/// Run `kraken fetch` against a misbehaving registry; it must fail with `message` on stderr
/// and leave nothing in the cache.
async fn expect_failure(
    f: &registry_common::Fixture,
    extra: &[&str],
    message: &str,
) -> anyhow::Result<()> {
    let out = output(f.kraken_fetch(extra)?).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(
        !out.status.success(),
        "kraken fetch succeeded, expected {message:?}"
    );
    anyhow::ensure!(
        stderr.contains(message),
        "expected {message:?} in stderr:\n{stderr}"
    );
    anyhow::ensure!(
        stderr.starts_with("error: failed to install"),
        "unexpected stderr:\n{stderr}"
    );
    f.assert_nothing_installed()
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_reach_the_user_as_clear_messages() -> anyhow::Result<()> {
    let f = fixture("random").await?;
    expect_failure(
        &f,
        &["--version", "~> 9.0"],
        "no version of registry.terraform.io/hashicorp/random matches \"~> 9.0\"",
    )
    .await?;
    expect_failure(
        &f,
        &["--platform", "plan9_mips"],
        "is not available for plan9_mips",
    )
    .await?;

    let sums = f.server.get(&f.published.sums_path).expect("sums").body;
    f.server.set(
        &f.published.sig_path,
        Reply::bytes(SigningIdentity::generate("other")?.sign(&sums)?),
    );
    expect_failure(&f, &[], "which is not among the registry's published keys").await?;
    f.server
        .set(&f.published.sig_path, Reply::bytes(b"garbage".to_vec()));
    expect_failure(&f, &[], "invalid signature on the checksum list").await?;
    f.server
        .set(&f.published.sig_path, Reply::bytes(f.signer.sign(&sums)?));

    let zip = f.server.get(&f.published.zip_path).expect("zip");
    f.server.set(
        &f.published.zip_path,
        Reply::bytes(zip.body[..1000].to_vec()),
    );
    expect_failure(
        &f,
        &[],
        "checksum mismatch for terraform-provider-random_3.6.0",
    )
    .await?;
    f.server.set(&f.published.zip_path, Reply::status(500));
    expect_failure(&f, &[], "answered 500").await?;
    f.server.set(&f.published.zip_path, zip);

    let lock = f.cache.path().join("disagrees.lock.hcl");
    std::fs::write(
        &lock,
        "provider \"registry.terraform.io/hashicorp/random\" {\n  version = \"3.6.0\"\n  hashes = [\"h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"]\n}\n",
    )?;
    let lock_arg = lock.display().to_string();
    expect_failure(
        &f,
        &["--lock-file", &lock_arg],
        "does not match any hash in the lock file",
    )
    .await?;

    // Without the test CA the server is not trusted, and that is not retried as if transient.
    let out = output({
        let mut cmd = std::process::Command::new(kraken_tests::kraken_bin()?);
        cmd.args([
            "fetch",
            "hashicorp/random",
            "--retries",
            "3",
            "--registry",
            &f.server.base_url(),
            "--cache-dir",
        ])
        .arg(f.cache.path())
        .env_remove("KRAKEN_CA_CERT");
        cmd
    })
    .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("tls connection"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_processes_fetching_the_same_provider_share_one_install() -> anyhow::Result<()> {
    let f = fixture("time").await?;
    // Force the overlap: the package download is answered only once both processes have asked
    // for the version list (the step before the install lock), so the second one is in flight
    // while the first one's download is still pending. The timeout is a hang guard only.
    let zip = f.server.get(&f.published.zip_path).expect("zip");
    f.server.set(
        &f.published.zip_path,
        zip.held_until(&f.published.versions_path, 2, Duration::from_secs(60)),
    );
    let a = f.kraken_fetch(&["--json"])?;
    let b = f.kraken_fetch(&["--json"])?;
    let (a, b) = tokio::join!(output(a), output(b));
    let (a, b) = (json_of(&a?)?, json_of(&b?)?);
    assert_eq!(
        f.server.holds(),
        vec![HoldOutcome {
            served: f.published.zip_path.clone(),
            condition_met: true
        }],
        "one download, answered while both processes were fetching"
    );
    assert_eq!(f.server.hits(&f.published.versions_path), 2);
    assert_eq!(a["path"], b["path"]);
    assert_eq!(a["h1"], f.h1.as_str());
    assert_eq!(b["h1"], f.h1.as_str());
    assert_eq!(
        f.server.hits(&f.published.zip_path),
        1,
        "the second process waited and reused the install"
    );
    assert!(a["cached"] != b["cached"], "exactly one of them downloaded");
    let exe = std::path::PathBuf::from(a["path"].as_str().unwrap_or_default());
    assert_eq!(std::fs::read(exe)?, std::fs::read(&f.bin.path)?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn proxies_come_from_the_environment() -> anyhow::Result<()> {
    let f = fixture("null").await?;
    // A proxy that refuses connections: the request must go through it, and fail.
    let mut cmd = f.kraken_fetch(&["--retries", "0"])?;
    cmd.env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    let out = output(cmd).await?;
    assert!(!out.status.success(), "the proxy was not used");
    assert_eq!(f.server.total_hits(), 0);
    // NO_PROXY exempts the registry host.
    let mut cmd = f.kraken_fetch(&["--json"])?;
    cmd.env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("NO_PROXY", "localhost");
    json_of(&output(cmd).await?)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_terraform_plugin_cache_is_reused_as_is() -> anyhow::Result<()> {
    // The test environment's plugin directory was laid out by Terraform tooling; copy it (hard
    // links) and point TF_PLUGIN_CACHE_DIR at the copy.
    let env = kraken_tests::TestEnv::load()?;
    let f = fixture("random").await?;
    let shared = tempfile::tempdir()?;
    link_tree(&env.path("KRAKEN_TEST_PLUGIN_DIR")?, shared.path())?;
    let lock = shared.path().join("lock.hcl");
    std::fs::write(
        &lock,
        format!(
            "provider \"registry.terraform.io/hashicorp/random\" {{\n  version = \"{}\"\n  hashes = [\n    \"{}\",\n  ]\n}}\n",
            f.bin.version, f.h1
        ),
    )?;
    let mut cmd = std::process::Command::new(kraken_tests::kraken_bin()?);
    cmd.args([
        "fetch",
        "hashicorp/random",
        "--json",
        "--registry",
        &f.server.base_url(),
        "--ca-cert",
    ])
    .arg(f.server.ca_file())
    .arg("--lock-file")
    .arg(&lock)
    .env("TF_PLUGIN_CACHE_DIR", shared.path());
    let got = json_of(&output(cmd).await?)?;
    assert_eq!(got["cached"], true);
    assert!(
        got["dir"]
            .as_str()
            .unwrap_or_default()
            .starts_with(&shared.path().display().to_string())
    );
    assert_eq!(f.server.total_hits(), 0);
    Ok(())
}

fn link_tree(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            link_tree(&entry.path(), &dest)?;
        } else {
            std::fs::hard_link(entry.path(), &dest)?;
        }
    }
    Ok(())
}

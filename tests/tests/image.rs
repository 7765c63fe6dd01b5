//! The container image (`image/Containerfile`, built by `scripts/image.sh` with buildah), end
//! to end: built twice to the same digest; what is in it (the binary, its C runtime, CA
//! certificates, an unprivileged user; no shell); and `kraken operator` run from its unpacked
//! root file system (chroot as the image's user, with only the image's environment) against
//! the test API server, reconciling a fixture object through a provider process it starts.
//!
//! The image is built from this checkout's test build of `kraken` (the script's `--binary`):
//! the same files and layout as a release image, with a bigger binary.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use kraken_tests::image::{Image, build};
use kraken_tests::operator::bed::{OBJECTS, wait_reconciled};
use kraken_tests::operator::{
    Operator, OperatorOptions, object_manifest, provider_config_manifest,
};
use kraken_tests::{ControlPlane, TestEnv, kraken_bin, ledger, scratch_dir, wait_for};
use serde_json::json;

/// The image's user and group.
const KRAKEN_UID: u32 = 65532;

#[test]
fn the_image_is_reproducible_minimal_and_unprivileged() -> anyhow::Result<()> {
    let dir = scratch_dir("kraken-image-")?;
    let bin = kraken_bin()?;
    let first = build(&bin, &dir.path().join("one"), "kraken:test")?;
    // A second store and a second build context: nothing is reused from the first build.
    let second = build(&bin, &dir.path().join("two"), "kraken:test")?;
    ensure!(
        first.digest == second.digest,
        "two builds of the same binary differ: {} vs {}",
        first.digest,
        second.digest
    );

    let image = Image::open(&first.archive, &dir.path().join("layout"))?;
    ensure!(
        image.digest == first.digest,
        "the archive's manifest is not the printed digest"
    );
    expect_config_and_labels(&image)?;

    let root = dir.path().join("root");
    image.unpack(&root)?;
    expect_minimal_and_unprivileged(&root)?;

    let out = image.chroot(&root)?.command().arg("--version").output()?;
    let version = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && version.trim() == format!("kraken {}", env!("CARGO_PKG_VERSION")),
        "kraken --version in the image: {} {version} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "image {}: {:.1} MB compressed, {:.1} MB unpacked (the test build's binary: {:.1} MB stripped)",
        image.digest,
        image.compressed_bytes as f64 / 1e6,
        du(&root)? as f64 / 1e6,
        std::fs::metadata(root.join("usr/local/bin/kraken"))?.len() as f64 / 1e6
    );
    Ok(())
}

/// The image runs `kraken` as its unprivileged user, with the OCI labels set.
fn expect_config_and_labels(image: &Image) -> anyhow::Result<()> {
    let c = &image.config;
    ensure!(c["User"] == "65532:65532", "User is {}", c["User"]);
    ensure!(
        c["Entrypoint"] == json!(["/usr/local/bin/kraken"]),
        "Entrypoint {}",
        c["Entrypoint"]
    );
    for key in [
        "title",
        "description",
        "version",
        "revision",
        "created",
        "licenses",
    ] {
        let label = format!("org.opencontainers.image.{key}");
        ensure!(
            image.label(&label).is_some_and(|v| !v.is_empty()),
            "no label {label}"
        );
    }
    ensure!(
        image.label("org.opencontainers.image.version") == Some(env!("CARGO_PKG_VERSION")),
        "version label {:?}",
        image.label("org.opencontainers.image.version")
    );
    Ok(())
}

/// The unpacked root file system: no shell, CA certificates, the user, and root owning
/// what runs.
fn expect_minimal_and_unprivileged(root: &Path) -> anyhow::Result<()> {
    for shell in ["bin/sh", "bin/bash", "usr/bin/sh", "bin", "sbin", "usr/bin"] {
        ensure!(!root.join(shell).exists(), "the image has /{shell}");
    }
    let ca = std::fs::read_to_string(root.join("etc/ssl/certs/ca-certificates.crt"))?;
    ensure!(
        ca.matches("BEGIN CERTIFICATE").count() > 50,
        "the CA bundle holds {} certificates",
        ca.matches("BEGIN CERTIFICATE").count()
    );
    let passwd = std::fs::read_to_string(root.join("etc/passwd"))?;
    ensure!(
        passwd.contains("kraken:x:65532:65532:"),
        "/etc/passwd: {passwd}"
    );
    // Root owns what runs; the user owns only its home and the plugin cache; /tmp is shared.
    let owner = |p: &str| -> anyhow::Result<(u32, u32)> {
        let m = std::fs::symlink_metadata(root.join(p)).with_context(|| format!("/{p}"))?;
        Ok((m.uid(), m.mode() & 0o7777))
    };
    ensure!(
        owner("usr/local/bin/kraken")? == (0, 0o755),
        "kraken: {:?}",
        owner("usr/local/bin/kraken")?
    );
    for p in ["etc", "usr", "var/cache", "home"] {
        ensure!(owner(p)?.0 == 0, "/{p} is not root's: {:?}", owner(p)?);
    }
    for p in ["home/kraken", "var/cache/kraken/plugins"] {
        ensure!(
            owner(p)?.0 == KRAKEN_UID,
            "/{p} is not the user's: {:?}",
            owner(p)?
        );
    }
    ensure!(owner("tmp")?.1 == 0o1777, "/tmp mode {:o}", owner("tmp")?.1);
    Ok(())
}

#[test]
fn the_operator_runs_from_the_image_and_reconciles() -> anyhow::Result<()> {
    let dir = scratch_dir("kraken-image-run-")?;
    let built = build(&kraken_bin()?, dir.path(), "kraken:test")?;
    let image = Image::open(&built.archive, &dir.path().join("layout"))?;
    let root = dir.path().join("root");
    image.unpack(&root)?;

    // What a pod would mount: a kubeconfig, the fixture provider (a filesystem mirror), and
    // the ledger (the fixture's "cloud") where the user can write.
    let ns = "image-run";
    let cp = ControlPlane::with_fixture_kinds(ns, ns)?;
    std::fs::create_dir_all(root.join("etc/kraken"))?;
    std::fs::copy(cp.kubeconfig(), root.join("etc/kraken/kubeconfig"))?;
    std::fs::set_permissions(
        root.join("etc/kraken/kubeconfig"),
        std::fs::Permissions::from_mode(0o644),
    )?;
    let plugins = TestEnv::load()?.path("KRAKEN_TEST_PLUGIN_DIR")?;
    copy_tree(&plugins.join("registry.kraken.dev"), &root.join("plugins"))?;
    // The administrator's pins: a plugin directory's package runs only if its lock file
    // records it (docs/security.md, "Only recorded packages are launched").
    std::fs::copy(
        plugins.join(".terraform.lock.hcl"),
        root.join("plugins/.terraform.lock.hcl"),
    )?;
    let ledger_dir = root.join("home/kraken/ledger");
    std::fs::create_dir_all(&ledger_dir)?;
    std::os::unix::fs::chown(&ledger_dir, Some(KRAKEN_UID), Some(KRAKEN_UID))?;

    let mut op = Operator::start(
        &cp,
        OperatorOptions {
            label: "image".into(),
            leader_elect: false,
            kubeconfig: Some("/etc/kraken/kubeconfig".into()),
            plugin_dir: Some("/plugins".into()),
            // The ledger, the fixture's "cloud", is where its sandbox lets it write.
            args: vec![
                "--plugin-cache=/var/cache/kraken/plugins".into(),
                "--runner-allow-write=/home/kraken/ledger".into(),
            ],
            chroot: Some(image.chroot(&root)?),
            ..OperatorOptions::default()
        },
    )?;
    op.wait_ready(Duration::from_secs(60))?;
    let result = reconcile_from_the_image(&cp, ns, &ledger_dir);
    if result.is_err() {
        eprintln!("operator log tail:\n{}", op.log_tail(60));
    }
    result
}

/// A fixture Object created and deleted through the operator running from the image, its
/// provider writing the ledger at `ledger_dir` as the image's user.
fn reconcile_from_the_image(cp: &ControlPlane, ns: &str, ledger_dir: &Path) -> anyhow::Result<()> {
    let pc = provider_config_manifest(ns, "default", json!({"ledgerDir": "/home/kraken/ledger"}));
    cp.apply_yaml(ns, &pc.to_string())?;
    let spec = json!({"forProvider": {"name": "from-the-image", "size": 3}});
    cp.apply_yaml(ns, &object_manifest(ns, "from-the-image", spec).to_string())?;
    let obj = wait_reconciled(cp, (ns, OBJECTS, "from-the-image"), Duration::from_secs(90))?;
    let live = ledger::objects_named(ledger_dir, "from-the-image")?;
    ensure!(
        live.len() == 1,
        "the ledger holds {} objects named from-the-image",
        live.len()
    );
    ensure!(
        obj["status"]["atProvider"]["id"] == live[0]["id"],
        "atProvider.id {} vs the ledger's {}",
        obj["status"]["atProvider"]["id"],
        live[0]["id"]
    );
    // The provider ran as the image's user, in the image's file system.
    let owner = std::fs::metadata(ledger_dir.join("objects"))?.uid();
    ensure!(owner == KRAKEN_UID, "the ledger was written by uid {owner}");

    cp.kubectl(&[
        "-n",
        ns,
        "delete",
        OBJECTS,
        "from-the-image",
        "--wait=false",
    ])?;
    wait_for(
        Duration::from_secs(60),
        "the object deleted in the ledger",
        || {
            Ok(ledger::objects_named(ledger_dir, "from-the-image")?
                .is_empty()
                .then_some(()))
        },
    )?;
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    let out = Command::new("cp").arg("-a").arg(from).arg(to).output()?;
    ensure!(
        out.status.success(),
        "cp -a {}: {}",
        from.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Bytes of the regular files under `dir`.
fn du(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            total += du(&entry.path())?;
        } else if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}

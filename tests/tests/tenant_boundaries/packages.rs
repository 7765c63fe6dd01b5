//! Only verified binaries run: a ProviderConfig's `spec.source` launches only a package that an
//! installed Provider or the plugin directory's lock file records, and only while its `h1:`
//! hash is the one recorded. The tenant points a ProviderConfig at an older build left in the
//! administrator's plugin directory; it is refused, and nothing is created through it.

use std::path::Path;

use anyhow::ensure;
use serde_json::json;

use super::{CONVERGE, apply_as_tenant, bind_tenant};
use kraken_tests::operator::bed::{OBJECTS, object_manifest, wait_condition};
use kraken_tests::operator::{FixtureBed, OperatorOptions};
use kraken_tests::{FIXTURE_ADDRESS, TestEnv, ledger, scratch_dir};

/// Puts `binary` into `dir` as the fixture at `version` (Terraform's unpacked mirror layout).
fn place(dir: &Path, version: &str, binary: &Path) -> anyhow::Result<std::path::PathBuf> {
    let pkg = dir.join(FIXTURE_ADDRESS).join(version).join("linux_amd64");
    std::fs::create_dir_all(&pkg)?;
    let dest = pkg.join(format!("terraform-provider-fixture_v{version}"));
    std::fs::copy(binary, &dest)?;
    Ok(dest)
}

#[test]
fn an_unrecorded_or_changed_package_is_not_launched() -> anyhow::Result<()> {
    // The administrator's plugin directory: the fixture 1.0.0 pinned by its lock file (the
    // test peers' mirror's), and an older build nothing records left beside it.
    let env = TestEnv::load()?;
    let fixture = env.provider("fixture")?;
    let plugins = scratch_dir("kraken-plugins-")?;
    let current = place(plugins.path(), &fixture.version, &fixture.path)?;
    place(plugins.path(), "0.9.0", &fixture.path)?;
    let lock = env
        .path("KRAKEN_TEST_PLUGIN_DIR")?
        .join(".terraform.lock.hcl");
    std::fs::copy(&lock, plugins.path().join(".terraform.lock.hcl"))?;
    let opts = OperatorOptions {
        plugin_dir: Some(plugins.path().to_path_buf()),
        ..OperatorOptions::default()
    };
    let bed = FixtureBed::start("packages", opts)?;
    let result = scenario(&bed, &current);
    bed.finish(result)
}

fn scenario(bed: &FixtureBed, current: &Path) -> anyhow::Result<()> {
    bind_tenant(bed)?;
    let ledger_dir = bed.ledger_dir().to_string_lossy().into_owned();
    let config = |name: &str, version: &str| {
        json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
               "metadata": {"name": name, "namespace": bed.ns},
               "spec": {"source": FIXTURE_ADDRESS, "version": version,
                        "config": {"ledgerDir": ledger_dir}}})
    };
    let object = |name: &str, pc: &str| {
        object_manifest(
            &bed.ns,
            name,
            json!({"providerConfigRef": {"name": pc}, "forProvider": {"name": name, "size": 1}}),
        )
    };
    // The recorded build serves the tenant as usual.
    apply_as_tenant(bed, &object("current", "default"))?.map_err(anyhow::Error::msg)?;
    bed.wait_reconciled("current", CONVERGE)?;

    // The older build: refused by name, nothing created.
    apply_as_tenant(bed, &config("old", "= 0.9.0"))?.map_err(anyhow::Error::msg)?;
    apply_as_tenant(bed, &object("legacy", "old"))?.map_err(anyhow::Error::msg)?;
    let message = wait_condition(
        &bed.cp,
        (&bed.ns, OBJECTS, "legacy"),
        ("Synced", "False", "ProviderConfigInvalid"),
        "only recorded packages are launched",
        CONVERGE,
    )?;
    ensure!(message.contains("0.9.0"), "names the version: {message}");

    // The recorded version's binary changed after it was recorded: not launched either (a
    // ProviderConfig of its own, so a new process must start).
    // (A new file in its place: the running process keeps the old one.)
    std::fs::remove_file(current)?;
    std::fs::write(current, b"#!/bin/sh\nexit 1\n")?;
    apply_as_tenant(bed, &config("swapped", "= 1.0.0"))?.map_err(anyhow::Error::msg)?;
    apply_as_tenant(bed, &object("swapped", "swapped"))?.map_err(anyhow::Error::msg)?;
    wait_condition(
        &bed.cp,
        (&bed.ns, OBJECTS, "swapped"),
        ("Synced", "False", "ProviderConfigInvalid"),
        "will not be launched",
        CONVERGE,
    )?;
    let made: Vec<String> = ledger::event_log(bed.ledger_dir())?
        .into_iter()
        .map(|e| format!("{} {}", e.op, e.name))
        .collect();
    ensure!(
        made == ["create current"],
        "only the recorded build made anything: {made:?}"
    );
    Ok(())
}

//! A fixture provider that crashes in the middle of ApplyResourceChange, once
//! (`crashOnApply`): before the ledger is touched, after the object was written, and while a
//! create-before-destroy replacement makes the new object. Each test first proves the crash
//! happened (the marker file the fixture leaves), then that one object resulted.

use std::time::Duration;

use anyhow::ensure;
use kraken_tests::ledger;
use kraken_tests::operator::{FixtureBed, OperatorOptions};
use serde_json::json;

use super::creates_by_name;

/// A bed whose fixture provider crashes (as its ProviderConfig's `crashOnApply` says) only
/// once: the marker file it leaves, in a scratch directory kept as long as the first value.
fn crash_once_bed(
    name: &str,
) -> anyhow::Result<(tempfile::TempDir, std::path::PathBuf, FixtureBed)> {
    let scratch = kraken_tests::fixture_dir("kraken-crash-once-")?;
    let once = scratch.path().join("crash-once");
    let opts = OperatorOptions {
        env: vec![(
            "KRAKEN_FIXTURE_CRASH_ONCE_FILE".to_string(),
            once.to_string_lossy().into_owned(),
        )],
        ..OperatorOptions::default()
    };
    let bed = FixtureBed::start(name, opts)?;
    Ok((scratch, once, bed))
}

/// A provider process that exits in the middle of ApplyResourceChange, once: `before` the
/// ledger is touched or `after` the object was written but before the answer.
pub fn provider_crash(mode: &str) -> anyhow::Result<()> {
    let (_scratch, once, bed) = crash_once_bed(&format!("crash-{mode}"))?;
    let result = (|| {
        bed.apply_provider_config("default", json!({"crashOnApply": mode}))?;
        bed.apply_object("web", json!({"forProvider": {"name": "web", "size": 3}}))?;
        let obj = bed.wait_reconciled("web", Duration::from_secs(90))?;
        ensure!(
            once.exists(),
            "the provider never crashed (no {}): do providers get the operator's environment?",
            once.display()
        );
        let objects = ledger::objects(bed.ledger_dir())?;
        ensure!(
            objects.len() == 1,
            "exactly one ledger object: {objects:#?}"
        );
        ensure!(
            obj["status"]["externalId"] == objects[0]["id"],
            "status.externalId {} != ledger {}",
            obj["status"]["externalId"],
            objects[0]["id"]
        );
        let creates = creates_by_name(bed.ledger_dir())?;
        ensure!(
            creates.get("web").map(Vec::len) == Some(1),
            "exactly one create: {creates:?}"
        );
        expect_recovery_events(&bed, mode)
    })();
    bed.finish(result)
}

/// The crashed attempt's `ApplyFailed`, and `Recovered` exactly when the crash came after the
/// object was made.
fn expect_recovery_events(bed: &FixtureBed, mode: &str) -> anyhow::Result<()> {
    let message = bed.wait_event("web", "ApplyFailed", Duration::from_secs(30))?;
    eprintln!("ApplyFailed for the crashed attempt: {message}");
    let reasons: Vec<String> = bed.events("web")?.into_iter().map(|(r, _)| r).collect();
    eprintln!("Events about web: {reasons:?}");
    if mode == "after" {
        // The object was made but its state never came back: found again by name.
        ensure!(
            reasons.iter().any(|r| r == "Recovered"),
            "an interrupted create found again is Recovered: {reasons:?}"
        );
    } else {
        ensure!(
            !reasons.iter().any(|r| r == "Recovered"),
            "nothing was created before the crash, nothing to recover: {reasons:?}"
        );
    }
    Ok(())
}

/// See `provider_crash_creating_a_replacement_keeps_one_of_each`.
pub fn replacement() -> anyhow::Result<()> {
    let (_scratch, once, bed) = crash_once_bed("crash-replace")?;
    let result = (|| {
        let spec = |name: &str| json!({"forProvider": {"name": name, "size": 3}, "replacePolicy": "CreateBeforeDestroy"});
        bed.apply_object("web", spec("alpha"))?;
        let old = bed.wait_reconciled("web", Duration::from_secs(90))?;
        let old = old["status"]["externalId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        bed.apply_provider_config("default", json!({"crashOnApply": "after"}))?;
        bed.apply_object("web", spec("beta"))?;
        bed.wait_event("web", "DeposedDestroyed", Duration::from_secs(120))?;
        ensure!(
            once.exists(),
            "the provider never crashed (no {})",
            once.display()
        );
        expect_one_replacement(&bed, &old)
    })();
    bed.finish(result)
}

/// One live object, the new one (`beta`), which replaced `old`: created once, the old one
/// deleted once, and the interrupted create found again.
fn expect_one_replacement(bed: &FixtureBed, old: &str) -> anyhow::Result<()> {
    let obj = bed.wait_reconciled("web", Duration::from_secs(60))?;
    let objects = ledger::objects(bed.ledger_dir())?;
    ensure!(objects.len() == 1, "exactly one live object: {objects:#?}");
    ensure!(objects[0]["name"] == "beta", "{objects:#?}");
    ensure!(
        obj["status"]["externalId"] == objects[0]["id"],
        "status.externalId {} != ledger {}",
        obj["status"]["externalId"],
        objects[0]["id"]
    );
    let ops: Vec<String> = ledger::event_log(bed.ledger_dir())?
        .into_iter()
        .map(|e| format!("{} {}", e.op, e.name))
        .collect();
    ensure!(
        ops == ["create alpha", "create beta", "delete alpha"],
        "ledger events {ops:?}"
    );
    let new = objects[0]["id"].as_str().unwrap_or_default();
    ensure!(new != old, "{new} replaced {old}");
    let reasons: Vec<String> = bed.events("web")?.into_iter().map(|(r, _)| r).collect();
    ensure!(
        reasons.iter().any(|r| r == "Recovered"),
        "the interrupted create is found again: {reasons:?}"
    );
    Ok(())
}

//! The state Secret: where sensitive values live (and nowhere else), what survives an operator
//! SIGKILL, and state written under an older schema version, upgraded by the provider.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{OBJECTS, describe, secret_data};
use kraken_tests::operator::{FixtureBed, OperatorOptions, condition, state_secret_name};
use kraken_tests::wait_for;
use serde_json::{Value, json};

use super::{
    AFTER_RESTART, CONVERGE, default_run, expect_ops, external_id, last_plan, num, run,
    sole_object, spec,
};

#[test]
fn sensitive_values_stay_out_of_status_events_and_logs() -> anyhow::Result<()> {
    let opts = OperatorOptions {
        rust_log: "info,kraken=trace".to_string(),
        ..OperatorOptions::default()
    };
    run("sensitive", opts, |bed| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos();
        let password = format!("s3cr3t-{:x}", nanos ^ u128::from(std::process::id()));
        bed.apply(
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pw"},
                    "stringData": {"password": password}})
            .to_string(),
        )?;
        let with_pw =
            json!({"forProvider": {"passwordSecretRef": {"name": "pw", "key": "password"}}});
        bed.apply_object("web", spec("web", 3, with_pw.clone()))?;
        bed.wait_reconciled("web", CONVERGE)?;
        // An update too, so that prior state with both values goes through plan and apply.
        bed.apply_object("web", spec("web", 4, with_pw))?;
        bed.wait_reconciled("web", CONVERGE)?;

        let live = sole_object(bed)?;
        ensure!(
            live["password"] == password.as_str(),
            "the provider got the password: {live}"
        );
        let token = live["secret_token"]
            .as_str()
            .context("no secret_token")?
            .to_string();
        ensure!(token.len() == 32, "secret_token {token:?}");
        expect_nowhere_but_the_state(bed, &password, &token)
    })
}

/// Neither `password` nor `token` (nor their base64) in the object, the Events, the
/// ProviderConfigs or the operator log; both in the state Secret, where they belong.
fn expect_nowhere_but_the_state(
    bed: &FixtureBed,
    password: &str,
    token: &str,
) -> anyhow::Result<()> {
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    let needles = [
        ("password", password.to_owned()),
        ("secret_token", token.to_owned()),
        ("base64 password", b64(password)),
        ("base64 secret_token", b64(token)),
    ];
    let places = [
        (
            "kubectl get object -o yaml",
            bed.cp
                .kubectl(&["get", OBJECTS, "web", "-n", &bed.ns, "-o", "yaml"])?,
        ),
        (
            "kubectl get events -o yaml",
            bed.cp
                .kubectl(&["get", "events", "-n", &bed.ns, "-o", "yaml"])?,
        ),
        (
            "kubectl get providerconfigs -o yaml",
            bed.cp.kubectl(&[
                "get",
                "providerconfigs.core.kraken.dev",
                "-n",
                &bed.ns,
                "-o",
                "yaml",
            ])?,
        ),
        ("the operator log", bed.op.logs()?),
    ];
    for (place, text) in &places {
        for (what, needle) in &needles {
            ensure!(
                !text.contains(needle.as_str()),
                "the {what} appears in {place}"
            );
        }
    }
    // Where they belong: the state Secret.
    let secret = bed.state_secret("web")?.context("no state Secret")?;
    let state = String::from_utf8(secret_data(&secret, "state")?.context("no state key")?)?;
    ensure!(
        state.contains(token),
        "the state Secret must hold secret_token"
    );
    ensure!(
        state.contains(password),
        "the state Secret must hold the password"
    );
    Ok(())
}

#[test]
fn state_survives_an_operator_sigkill() -> anyhow::Result<()> {
    default_run("restart", |bed| {
        bed.apply_object("web", spec("web", 3, json!({})))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        bed.op.kill()?;
        bed.op.restart()?;
        bed.op.wait_ready(Duration::from_secs(60))?;
        bed.apply_object("web", spec("web", 5, json!({})))?;
        let obj = bed.wait_reconciled("web", AFTER_RESTART)?;
        ensure!(external_id(&obj)? == id);
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == id.as_str() && num(&live["size"]) == Some(5.0),
            "{live}"
        );
        expect_ops(
            bed,
            &[format!("create {id} web"), format!("update {id} web")],
        )
        .context("the restarted operator lost the state")?;
        bed.wait_event("web", "Updated", CONVERGE)?;
        ensure!(bed.op.starts() == 2);
        Ok(())
    })
}

/// The state Secret's data key `key` as text (empty when absent).
fn secret_text(secret: &Value, key: &str) -> anyhow::Result<String> {
    Ok(String::from_utf8(
        secret_data(secret, key)?.unwrap_or_default(),
    )?)
}

/// The state JSON of the state Secret.
fn secret_state(secret: &Value) -> anyhow::Result<Value> {
    let bytes = secret_data(secret, "state")?.context("the state Secret has no state key")?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// Rewrite the state Secret of `name` to what schema version 0 of `fixture_object` stored:
/// `schemaVersion: "0"` and the v0 attribute set (object_upgrade.go: every v1 attribute but
/// the number `size`, which was the string `size_text`). `private` and `createAttempt` are
/// left as they are (a merge patch of two data keys). Returns the v0 state JSON written.
fn rewrite_as_schema_v0(bed: &FixtureBed, name: &str, size_text: &str) -> anyhow::Result<Value> {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let secret_name = state_secret_name("Object", name);
    let before = bed
        .state_secret(name)?
        .with_context(|| format!("no state Secret {secret_name}"))?;
    ensure!(
        secret_text(&before, "schemaVersion")? == "1",
        "{secret_name} before the rewrite: schemaVersion {:?}",
        secret_text(&before, "schemaVersion")?
    );
    let mut state = secret_state(&before)?;
    let attrs = state
        .as_object_mut()
        .context("the stored state is not an object")?;
    ensure!(
        attrs.remove("size").is_some_and(|s| num(&s).is_some()) && !attrs.contains_key("size_text"),
        "{secret_name} does not hold the v1 shape (a number size, no size_text): {attrs:?}"
    );
    attrs.insert("size_text".into(), json!(size_text));
    // As a Kraken before sealing left it: no seal (sealed by the next start, below).
    let patch = json!({"data": {
        "state": b64(state.to_string().as_bytes()),
        "schemaVersion": b64(b"0"),
        "seal": null,
    }});
    bed.cp.kubectl(&[
        "patch",
        "secret",
        &secret_name,
        "-n",
        &bed.ns,
        "--type",
        "merge",
        "-p",
        &patch.to_string(),
    ])?;
    let after = bed
        .state_secret(name)?
        .context("the rewritten Secret is gone")?;
    ensure!(secret_text(&after, "schemaVersion")? == "0");
    ensure!(secret_state(&after)? == state, "the v0 state did not stick");
    for key in ["private", "createAttempt"] {
        ensure!(
            secret_data(&after, key)? == secret_data(&before, key)?,
            "the rewrite changed {key} of {secret_name}"
        );
    }
    Ok(state)
}

#[test]
fn state_written_under_an_old_schema_version_is_upgraded() -> anyhow::Result<()> {
    // Three Objects whose state a schema-version-0 provider wrote:
    //   web     — spec changed meanwhile: one pass upgrades, then updates in place;
    //   idle    — spec unchanged: the no-op pass still writes the upgraded state back;
    //   garbled — its v0 size_text is not a number, which only the provider's v0→v1 upgrader
    //             rejects: its diagnostic proves the state went through UpgradeResourceState.
    default_run("schema-upgrade", |bed| {
        let objects = [("web", 3), ("idle", 2), ("garbled", 4)];
        let mut ids = Vec::new();
        for (name, size) in objects {
            bed.apply_object(name, spec(name, size, json!({})))?;
            ids.push(external_id(&bed.wait_reconciled(name, CONVERGE)?)?);
        }
        let [web_id, idle_id, garbled_id] = ids.as_slice() else {
            bail!("ids {ids:?}")
        };
        let creates: Vec<String> = objects
            .iter()
            .zip(&ids)
            .map(|((name, _), id)| format!("create {id} {name}"))
            .collect();
        expect_ops(bed, &creates)?;
        let attempt_of = |name: &str| -> anyhow::Result<String> {
            secret_text(
                &bed.state_secret(name)?.context("no state Secret")?,
                "createAttempt",
            )
        };
        let web_attempt = attempt_of("web")?;
        let idle_attempt = attempt_of("idle")?;
        ensure!(
            !web_attempt.is_empty(),
            "web's state records no create attempt"
        );

        bed.op.kill()?;
        rewrite_as_schema_v0(bed, "web", "3")?;
        rewrite_as_schema_v0(bed, "idle", "2")?;
        let garbled_v0 = rewrite_as_schema_v0(bed, "garbled", "three")?;
        // Changed while the operator is down, so that the first pass after the restart meets
        // both the v0 state and the change (no race with the restart's initial pass).
        bed.apply_object("web", spec("web", 5, json!({})))?;
        // States an older Kraken wrote, unsealed: the restart seals them first (once, as when
        // upgrading to a sealing version), then reconciles.
        bed.unmark_states_sealed()?;
        bed.op.restart()?;
        bed.op.wait_ready(Duration::from_secs(60))?;

        expect_upgraded_and_updated(bed, web_id, &web_attempt)?;
        expect_upgraded_in_place(bed, idle_id, &idle_attempt)?;
        expect_upgrade_refused(bed, garbled_id, &garbled_v0)?;

        // The cloud: the three creates and web's update, nothing else.
        let mut want = creates.clone();
        want.push(format!("update {web_id} web"));
        expect_ops(bed, &want)?;
        ensure!(ledger::objects(bed.ledger_dir())?.len() == 3);
        Ok(())
    })
}

/// web: upgraded, then updated in place, keeping its id and its completed create attempt.
fn expect_upgraded_and_updated(
    bed: &FixtureBed,
    web_id: &str,
    web_attempt: &str,
) -> anyhow::Result<()> {
    let obj = bed.wait_reconciled("web", AFTER_RESTART)?;
    ensure!(obj["metadata"]["generation"] == 2, "{}", describe(&obj));
    ensure!(
        external_id(&obj)? == web_id,
        "web must keep its id {web_id}: {}",
        describe(&obj)
    );
    ensure!(
        num(&obj["status"]["atProvider"]["size"]) == Some(5.0),
        "atProvider {}",
        obj["status"]["atProvider"]
    );
    let (action, paths) = last_plan(&obj);
    ensure!(
        action == "Update" && paths.iter().any(|p| p == "spec.forProvider.size"),
        "lastPlan {}",
        obj["status"]["lastPlan"]
    );
    let live = ledger::object(bed.ledger_dir(), web_id)?.context("web's object is gone")?;
    ensure!(
        num(&live["size"]) == Some(5.0) && num(&live["revision"]) == Some(2.0),
        "{live}"
    );
    let secret = bed
        .state_secret("web")?
        .context("no state Secret for web")?;
    ensure!(
        secret_text(&secret, "schemaVersion")? == "1",
        "web's state Secret: schemaVersion {:?}",
        secret_text(&secret, "schemaVersion")?
    );
    let state = secret_state(&secret)?;
    ensure!(
        num(&state["size"]) == Some(5.0) && state.get("size_text").is_none(),
        "web's stored state is not the v1 shape: {state}"
    );
    ensure!(state["id"] == web_id, "web's stored state: {state}");
    ensure!(
        secret_text(&secret, "createAttempt")? == web_attempt,
        "the completed create attempt must survive the upgrade"
    );
    bed.wait_event("web", "Updated", CONVERGE)?;
    Ok(())
}

/// idle: nothing to change, but the upgraded state is written back.
fn expect_upgraded_in_place(
    bed: &FixtureBed,
    idle_id: &str,
    idle_attempt: &str,
) -> anyhow::Result<()> {
    let secret = wait_for(
        AFTER_RESTART,
        "idle's state Secret to be rewritten at schemaVersion 1",
        || {
            let s = bed
                .state_secret("idle")?
                .context("no state Secret for idle")?;
            match secret_text(&s, "schemaVersion")?.as_str() {
                "1" => Ok(Some(s)),
                v => bail!("schemaVersion {v:?}"),
            }
        },
    )?;
    let state = secret_state(&secret)?;
    ensure!(
        num(&state["size"]) == Some(2.0) && state.get("size_text").is_none(),
        "idle's stored state is not the v1 shape: {state}"
    );
    ensure!(secret_text(&secret, "createAttempt")? == idle_attempt);
    let obj = bed.wait_reconciled("idle", CONVERGE)?;
    ensure!(obj["metadata"]["generation"] == 1 && external_id(&obj)? == idle_id);
    Ok(())
}

/// garbled: the upgrader's own diagnostic, and nothing overwritten or created.
fn expect_upgrade_refused(
    bed: &FixtureBed,
    garbled_id: &str,
    garbled_v0: &Value,
) -> anyhow::Result<()> {
    let obj = bed.wait_synced("garbled", "False", "ProviderError", AFTER_RESTART)?;
    let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
    eprintln!("garbled: Synced=False/ProviderError {message:?}");
    ensure!(
        message.contains("cannot upgrade size_text") && message.contains("three"),
        "the provider's v0 upgrader must have rejected size_text \"three\": {message:?}"
    );
    let secret = bed
        .state_secret("garbled")?
        .context("no state Secret for garbled")?;
    ensure!(
        secret_text(&secret, "schemaVersion")? == "0" && secret_state(&secret)? == *garbled_v0,
        "state that could not be upgraded must stay as it was: schemaVersion {:?}, state {}",
        secret_text(&secret, "schemaVersion")?,
        secret_state(&secret)?
    );
    let live = ledger::object(bed.ledger_dir(), garbled_id)?.context("garbled's object is gone")?;
    ensure!(num(&live["size"]) == Some(4.0), "{live}");
    Ok(())
}

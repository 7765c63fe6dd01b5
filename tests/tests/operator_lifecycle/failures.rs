//! Bad input and failing parts, each reported where the user looks (the refusal, a condition
//! naming what is missing, an Event) and retried only as the backoff says: specs refused at
//! admission, a missing ProviderConfig or Secret, a ProviderConfig the provider rejects, and a
//! provider whose apply fails.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::bed::OBJECTS;
use kraken_tests::operator::{FixtureBed, condition};
use kraken_tests::wait_for;
use serde_json::json;

use super::{CONVERGE, RECOVER, default_run, expect_ops, sole_object, spec};

#[test]
fn schema_invalid_specs_are_refused_at_admission() -> anyhow::Result<()> {
    default_run("admission", |bed| {
        let cases = [
            (
                "size-text",
                json!({"forProvider": {"name": "x", "size": "abc"}}),
                "spec.forProvider.size",
            ),
            (
                "unknown-field",
                json!({"forProvider": {"name": "x", "colour": "red"}}),
                "unknown field \"spec.forProvider.colour\"",
            ),
            (
                "no-name",
                json!({"forProvider": {"size": 1}}),
                "spec.forProvider.name is required",
            ),
            (
                "bad-policy",
                json!({"forProvider": {"name": "x"}, "deletionPolicy": "Keep"}),
                "spec.deletionPolicy",
            ),
            (
                "bad-interval",
                json!({"forProvider": {"name": "x"}, "driftInterval": "soon"}),
                "spec.driftInterval",
            ),
            (
                "port-text",
                json!({"forProvider": {"name": "x", "rules": [{"port": "http"}]}}),
                "spec.forProvider.rules[0].port",
            ),
        ];
        for (name, spec, needle) in cases {
            let err = bed.apply_object_refused(name, spec)?;
            eprintln!("{name}: {}", err.trim());
            ensure!(
                err.contains(needle),
                "{name}: the refusal must name {needle}: {err}"
            );
        }
        ensure!(
            bed.cp.list_json(&bed.ns, OBJECTS)?.is_empty(),
            "nothing was admitted"
        );
        expect_ops(bed, &[])?;
        Ok(())
    })
}

#[test]
fn missing_provider_config_is_reported_by_name() -> anyhow::Result<()> {
    default_run("no-pc", |bed| {
        bed.apply_object(
            "web",
            spec("web", 3, json!({"providerConfigRef": {"name": "nowhere"}})),
        )?;
        let obj = bed.wait_synced("web", "False", "ProviderConfigMissing", CONVERGE)?;
        let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
        ensure!(
            message.contains("nowhere"),
            "the message must name the ProviderConfig: {message:?}"
        );
        bed.wait_event("web", "ProviderConfigMissing", CONVERGE)?;
        expect_ops(bed, &[])?;

        bed.apply_provider_config("nowhere", json!({}))?;
        bed.wait_reconciled("web", RECOVER)?;
        ensure!(sole_object(bed)?["name"] == "web");
        Ok(())
    })
}

#[test]
fn missing_secret_is_reported_by_name() -> anyhow::Result<()> {
    default_run("no-secret", |bed| {
        let pw =
            json!({"forProvider": {"passwordSecretRef": {"name": "absent-pw", "key": "password"}}});
        bed.apply_object("web", spec("web", 3, pw))?;
        let obj = bed.wait_synced("web", "False", "SecretMissing", CONVERGE)?;
        let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
        ensure!(
            message.contains("absent-pw"),
            "the message must name the Secret: {message:?}"
        );
        bed.wait_event("web", "SecretMissing", CONVERGE)?;
        expect_ops(bed, &[])?;

        bed.apply(
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "absent-pw"},
                    "stringData": {"password": "now-here"}})
            .to_string(),
        )?;
        bed.wait_reconciled("web", RECOVER)?;
        ensure!(sole_object(bed)?["password"] == "now-here");
        Ok(())
    })
}

#[test]
fn invalid_provider_config_fails_every_user() -> anyhow::Result<()> {
    default_run("bad-token", |bed| {
        bed.apply_provider_config("default", json!({"token": "invalid"}))?;
        for name in ["one", "two"] {
            bed.apply_object(name, spec(name, 1, json!({})))?;
        }
        for name in ["one", "two"] {
            let obj = bed.wait_synced(name, "False", "ProviderConfigInvalid", CONVERGE)?;
            let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
            ensure!(
                message.contains("invalid token"),
                "{name}: the message must carry the provider's diagnostic: {message:?}"
            );
            bed.wait_event(name, "ProviderConfigInvalid", CONVERGE)?;
        }
        expect_ops(bed, &[])?;
        // The ProviderConfig says so too.
        let pc = wait_for(CONVERGE, "ProviderConfig Ready=False", || {
            let pc = bed
                .cp
                .get_json(&bed.ns, "providerconfigs.core.kraken.dev", "default")?;
            Ok(condition(&pc, "Ready")
                .filter(|(s, r, _)| s == "False" && r == "ProviderConfigInvalid")
                .map(|_| pc))
        })?;
        let (_, _, message) = condition(&pc, "Ready").context("Ready")?;
        ensure!(
            message.contains("invalid token"),
            "ProviderConfig message: {message:?}"
        );

        bed.apply_provider_config("default", json!({"token": "fine"}))?;
        for name in ["one", "two"] {
            bed.wait_reconciled(name, RECOVER)?;
        }
        ensure!(ledger::objects(bed.ledger_dir())?.len() == 2);
        Ok(())
    })
}

#[test]
fn provider_apply_failure_is_reported_without_a_hot_loop() -> anyhow::Result<()> {
    default_run("apply-fails", |bed| {
        bed.apply_provider_config("default", json!({"failApply": true}))?;
        bed.apply_object("web", spec("web", 3, json!({})))?;
        let obj = bed.wait_synced("web", "False", "ProviderError", CONVERGE)?;
        let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
        ensure!(
            message.contains("fixture apply failed"),
            "the provider's summary: {message:?}"
        );
        ensure!(
            message.contains("spec.forProvider.name"),
            "the diagnostic's attribute path, in Kubernetes field names: {message:?}"
        );
        let event = bed.wait_event("web", "ApplyFailed", CONVERGE)?;
        ensure!(
            event.contains("fixture apply failed"),
            "ApplyFailed Event: {event:?}"
        );
        expect_retries_on_the_backoff(bed)?;
        expect_ops(bed, &[]).context("fail_apply never touches the ledger")?;
        ensure!(bed.op.exit_status()?.is_none(), "the operator exited");

        bed.apply_provider_config("default", json!({"failApply": false}))?;
        bed.wait_reconciled("web", RECOVER)?;
        let live = sole_object(bed)?;
        let id = live["id"].as_str().unwrap_or_default();
        expect_ops(bed, &[format!("create {id} web")]).context("created once, after the fix")?;
        Ok(())
    })
}

/// No hot loop. The provider's own record of the attempts (applies.log) shows them retried on
/// the documented backoff, 1 s doubling with ±20 % jitter: the gap before retry n is at least
/// 0.8 × 2^(n-1) s, whatever the load (load only adds to it). A retry at a fixed 1 Hz fails
/// the second gap.
///
/// Between retries the operator's counters show what each retry costs: exactly one reconcile
/// and one create attempt, whose writes are the fenced create's (the create-attempt annotation
/// before, the state Secret recording the answered attempt after) and its ApplyFailed Event;
/// the unchanged condition is not rewritten. Counted from a quiet point in the backoff after
/// attempt 2 to one after attempt 4 (the backoff after each is at least 1.6 s; quiet means
/// 300 ms without change).
fn expect_retries_on_the_backoff(bed: &FixtureBed) -> anyhow::Result<()> {
    let attempts = |n: usize| -> anyhow::Result<Vec<ledger::ApplyCall>> {
        wait_for(
            Duration::from_secs(60),
            &format!("{n} apply attempts"),
            || {
                let calls = ledger::apply_calls(bed.ledger_dir())?;
                if calls.len() >= n && calls[..n].iter().all(|c| c.end.is_some()) {
                    Ok(Some(calls))
                } else {
                    bail!("{calls:?}")
                }
            },
        )
    };
    attempts(2)?;
    let after_2 = bed.settle(Duration::from_millis(300), Duration::from_millis(50))?;
    attempts(4)?;
    let after_4 = bed.settle(Duration::from_millis(300), Duration::from_millis(50))?;
    let calls = ledger::apply_calls(bed.ledger_dir())?;
    ensure!(
        calls.len() == 4 && calls.iter().all(|c| c.op == "create"),
        "four create attempts, no more, by the time the counters settled: {calls:?}"
    );
    for (n, pair) in calls.windows(2).enumerate() {
        let gap = Duration::from_nanos(u64::try_from(pair[1].begin - pair[0].begin)?);
        let least = Duration::from_millis(800) * (1 << n);
        eprintln!("retry {}: {gap:?} after the attempt before", n + 1);
        ensure!(
            gap >= least,
            "hot loop: retry {} came {gap:?} after the attempt before; the backoff is at \
             least {least:?}",
            n + 1
        );
    }
    eprintln!(
        "two retries: {after_2:?} -> {after_4:?}, writes {:?}",
        after_4.writes_since(&after_2)
    );
    ensure!(
        after_4.reconciles - after_2.reconciles == 2.0
            && after_4.apply_calls - after_2.apply_calls == 2
            && after_4.ledger_events == after_2.ledger_events,
        "two retries must be two reconciles and two applies, and change nothing: \
         {after_2:?} -> {after_4:?}"
    );
    let writes = after_4.writes_since(&after_2);
    let fenced_attempts: std::collections::BTreeMap<String, f64> = [
        ("patch objects", 2.0),
        ("apply secrets", 2.0),
        ("create events", 2.0),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_owned(), n))
    .collect();
    ensure!(
        writes == fenced_attempts,
        "two retries write two fenced attempts and two ApplyFailed Events, nothing more: \
         {writes:?}"
    );
    Ok(())
}

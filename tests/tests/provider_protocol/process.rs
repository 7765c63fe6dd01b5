//! The provider as a process: a crash mid-apply, a kill during a slow request or between
//! requests (each detected, the next request on a fresh process), the private directory and
//! mTLS every provider listens with, plaintext when asked, and a graceful shutdown.

use std::path::Path;

use anyhow::{Context as _, bail, ensure};
use kraken_bridge::provider::lifecycle::{self, Action, LifecycleError};
use kraken_bridge::provider::{DiagnosticsExt as _, Plugin, ProviderError};
use kraken_bridge::value::Value;
use kraken_tests::TestEnv;
use kraken_tests::ledger::{apply_calls, live_objects};
use serde_json::json;

use super::{config, configured, host_with};

#[tokio::test]
async fn crash_mid_apply_fails_the_request_and_next_request_gets_a_fresh_process()
-> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let ledger = kraken_tests::scratch_dir("fixture-ledger-")?;
    let once = ledger.path().join("crashed-once");
    let fixture = env.provider("fixture")?;
    let host = configured(
        &fixture,
        &[
            ("KRAKEN_FIXTURE_CRASH_ON_APPLY", "after".into()),
            (
                "KRAKEN_FIXTURE_CRASH_ONCE_FILE",
                once.to_string_lossy().into_owned(),
            ),
        ],
        json!({"ledger_dir": ledger.path().to_string_lossy()}),
    )
    .await?;
    let p: &dyn Plugin = host.as_ref();
    let first_pid = host.plugin().await.and_then(|c| c.pid());
    let cfg = config(p, "fixture_object", json!({"name": "crashy"})).await?;
    let plan = lifecycle::plan(p, "fixture_object", &Value::Null, &[], &cfg).await?;
    match lifecycle::apply(p, &plan).await {
        Err(LifecycleError::Provider(ProviderError::Crashed { rpc })) => {
            assert_eq!(rpc, "apply_resource_change")
        }
        Ok(applied) => bail!(
            "a crashed apply was reported as success: {:?}",
            applied.new_state
        ),
        Err(other) => bail!("expected a crash error, got {other}"),
    }
    // The object was written before the crash: exactly the window the operator must fence.
    assert_eq!(live_objects(ledger.path()), 1);

    // The next request launches a new process (configured again) and succeeds.
    let plan = lifecycle::plan(p, "fixture_object", &Value::Null, &[], &cfg).await?;
    let applied = lifecycle::apply(p, &plan).await?;
    assert!(
        !applied.diagnostics.has_errors(),
        "{}",
        applied.diagnostics.error_summary()
    );
    let second_pid = host.plugin().await.and_then(|c| c.pid());
    assert_ne!(first_pid, second_pid);
    assert_eq!(host.launches(), 2);
    host.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn provider_killed_during_a_slow_request_is_detected() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let ledger = kraken_tests::scratch_dir("fixture-ledger-")?;
    // The apply would take ten minutes: only noticing the process die can end it early.
    let host = configured(
        &env.provider("fixture")?,
        &[("KRAKEN_FIXTURE_APPLY_DELAY_MS", "600000".into())],
        json!({"ledger_dir": ledger.path().to_string_lossy()}),
    )
    .await?;
    let p: &dyn Plugin = host.as_ref();
    let cfg = config(p, "fixture_object", json!({"name": "slow"})).await?;
    let plan = lifecycle::plan(p, "fixture_object", &Value::Null, &[], &cfg).await?;
    let plugin = host.plugin().await.context("running plugin")?;
    let first_pid = plugin.pid();
    let ledger_dir = ledger.path().to_path_buf();
    let killer = tokio::spawn(async move {
        // Kill it once the provider has begun the apply (its applies.log says so).
        loop {
            match apply_calls(&ledger_dir) {
                Ok(calls) if !calls.is_empty() => break,
                Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                Err(e) => return Err(e),
            }
        }
        plugin.kill().await;
        Ok(())
    });
    // Hang guard only: a missed crash would wait for the ten-minute apply.
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        lifecycle::apply(p, &plan),
    )
    .await
    .context("a killed provider's apply must fail, not wait for an answer")?;
    killer.await??;
    match result {
        Err(LifecycleError::Provider(ProviderError::Crashed { rpc })) => {
            assert_eq!(rpc, "apply_resource_change")
        }
        Ok(applied) => bail!(
            "an apply whose provider was killed was reported as success: {:?}",
            applied.new_state
        ),
        Err(other) => bail!("expected a crash error, got {other}"),
    }
    let calls = apply_calls(ledger.path())?;
    ensure!(
        calls.len() == 1 && calls[0].end.is_none(),
        "the one apply began and never returned: {calls:?}"
    );
    assert_eq!(
        live_objects(ledger.path()),
        0,
        "killed before the object was written"
    );

    // The next call launches a new process.
    let again = lifecycle::plan(p, "fixture_object", &Value::Null, &[], &cfg).await?;
    assert_eq!(again.action, Action::Create);
    let second_pid = host.plugin().await.and_then(|c| c.pid());
    assert_ne!(first_pid, second_pid);
    assert_eq!(host.launches(), 2);
    host.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn protocol5_provider_killed_between_requests_restarts() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let host = configured(&env.provider("random")?, &[], json!({})).await?;
    let p: &dyn Plugin = host.as_ref();
    let cfg = config(p, "random_pet", json!({})).await?;
    let plugin = host.plugin().await.context("running plugin")?;
    plugin.kill().await;
    let plan = lifecycle::plan(p, "random_pet", &Value::Null, &[], &cfg).await?;
    assert_eq!(plan.action, Action::Create);
    assert_eq!(host.launches(), 2);
    host.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn every_provider_listens_in_a_private_directory_over_mtls() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let env = TestEnv::load()?;
    for p in env.all_providers()? {
        let host = host_with(&p, &[], true);
        let plugin = host.start().await?;
        assert!(plugin.tls, "{}: AutoMTLS must be on by default", p.name);
        let dir = Path::new(&plugin.address)
            .parent()
            .context("socket has a parent directory")?;
        let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
        assert_eq!(
            mode, 0o700,
            "{}: socket directory {dir:?} is {mode:o}",
            p.name
        );
        host.schema().await?;
        host.shutdown().await;
        assert!(!dir.exists(), "{}: socket directory left behind", p.name);
    }
    Ok(())
}

#[tokio::test]
async fn plaintext_mode_works_when_asked_for() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let host = host_with(&env.provider("time")?, &[], false);
    assert!(!host.start().await?.tls);
    let schema = host.schema().await?;
    assert!(schema.resources.contains_key("time_static"));
    host.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn graceful_shutdown_stops_every_test_provider() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    for p in env.all_providers()? {
        let host = host_with(&p, &[], true);
        let plugin = host.start().await?;
        host.shutdown().await;
        // Exited by itself after GRPCController.Shutdown: not killed by the grace-period fallback.
        assert_eq!(
            plugin.exit_status().as_deref(),
            Some("exit code 0"),
            "{} did not shut down gracefully",
            p.name
        );
    }
    Ok(())
}

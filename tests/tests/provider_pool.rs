//! Provider pool tests against real provider binaries: one process per (provider, version,
//! ProviderConfig generation), rolled on a config change, reaped when idle, bounded in
//! concurrency. The fixture (protocol 6) writes each created object into its ledger directory,
//! which tells us which configuration a process is really running with.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use kraken_bridge::provider::lifecycle;
use kraken_bridge::provider::pool::{PoolError, PoolKey, PoolOptions, ProviderPool};
use kraken_bridge::provider::{
    DiagnosticsExt as _, LaunchOptions, Plugin, PluginClient, ProviderHost,
};
use kraken_bridge::value::Value;
use kraken_bridge::value::kube::from_kube_json;
use kraken_tests::ledger::{apply_calls, live_objects, max_in_flight};
use kraken_tests::{ProviderBin, TestEnv};
use serde_json::json;

fn pool(max: usize, idle: Duration) -> Arc<ProviderPool> {
    Arc::new(ProviderPool::new(PoolOptions {
        max_concurrency_per_process: max,
        idle_timeout: idle,
    }))
}

fn key(p: &ProviderBin, config_name: &str, generation: i64) -> PoolKey {
    PoolKey {
        address: p.address.clone(),
        version: p.version.clone(),
        config_name: config_name.into(),
        uid: format!("uid-{config_name}"),
        generation,
        digest: String::new(),
    }
}

fn launch(p: &ProviderBin, env: &[(&str, &str)]) -> LaunchOptions {
    let mut opts = LaunchOptions::new(&p.path);
    opts.name = p.address.clone();
    opts.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    opts
}

/// The provider config as a typed value. The operator has the schema from codegen; here a
/// throwaway host outside the pool fetches it, so it never shows up in the pool's counts.
async fn provider_config(p: &ProviderBin, cfg: serde_json::Value) -> anyhow::Result<Value> {
    let host = ProviderHost::new(launch(p, &[]), 1);
    let schema = host.schema().await?;
    host.shutdown().await;
    Ok(from_kube_json(&cfg, &schema.provider.block.implied_type())?)
}

fn ledger_config(dir: &Path) -> serde_json::Value {
    json!({"ledger_dir": dir.to_string_lossy()})
}

async fn plugin(host: &ProviderHost) -> anyhow::Result<PluginClient> {
    host.plugin().await.context("host has no running process")
}

async fn wait_exited(plugin: &PluginClient, within: Duration) -> anyhow::Result<()> {
    tokio::time::timeout(within, plugin.exited())
        .await
        .with_context(|| format!("process {:?} still running after {within:?}", plugin.pid()))
}

/// Create one `fixture_object` through `p`.
async fn create_object(p: &dyn Plugin, name: &str) -> anyhow::Result<()> {
    let schema = p.schema().await?;
    let rs = schema
        .resource("fixture_object")
        .context("fixture_object")?;
    let cfg = from_kube_json(&json!({"name": name}), &rs.block.implied_type())?;
    let plan = lifecycle::plan(p, "fixture_object", &Value::Null, &[], &cfg).await?;
    let applied = lifecycle::apply(p, &plan).await?;
    ensure!(
        !applied.diagnostics.has_errors(),
        "apply failed: {}",
        applied.diagnostics.error_summary()
    );
    Ok(())
}

#[tokio::test]
async fn concurrent_gets_for_one_key_start_one_process() -> anyhow::Result<()> {
    let random = TestEnv::load()?.provider("random")?;
    let config = provider_config(&random, json!({})).await?;
    let pool = pool(4, Duration::from_secs(60));
    let k = key(&random, "team-a/default", 1);

    let mut gets = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (pool, k, opts, config) = (
            pool.clone(),
            k.clone(),
            launch(&random, &[]),
            config.clone(),
        );
        gets.spawn(async move { pool.get(&k, opts, &config).await });
    }
    let mut pids = HashSet::new();
    while let Some(host) = gets.join_next().await {
        let host = host??;
        pids.insert(plugin(&host).await?.pid());
    }
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert_eq!(pool.stats().launches, 1);
    assert_eq!(pool.stats().processes, 1);
    pool.shutdown_all().await;
    assert_eq!(pool.stats().processes, 0);
    Ok(())
}

#[tokio::test]
async fn different_provider_configs_get_different_processes() -> anyhow::Result<()> {
    let fixture = TestEnv::load()?.provider("fixture")?;
    let (la, lb) = (
        kraken_tests::scratch_dir("pool-a-")?,
        kraken_tests::scratch_dir("pool-b-")?,
    );
    let ca = provider_config(&fixture, ledger_config(la.path())).await?;
    let cb = provider_config(&fixture, ledger_config(lb.path())).await?;
    let pool = pool(4, Duration::from_secs(60));

    let a = pool
        .get(
            &key(&fixture, "team-a/default", 1),
            launch(&fixture, &[]),
            &ca,
        )
        .await?;
    let b = pool
        .get(
            &key(&fixture, "team-b/default", 1),
            launch(&fixture, &[]),
            &cb,
        )
        .await?;
    assert_ne!(plugin(&a).await?.pid(), plugin(&b).await?.pid());
    assert_eq!(pool.stats().launches, 2);
    assert_eq!(pool.stats().processes, 2);

    // Each process runs with its own ProviderConfig.
    create_object(a.as_ref(), "in-a").await?;
    assert_eq!((live_objects(la.path()), live_objects(lb.path())), (1, 0));
    pool.shutdown_all().await;
    Ok(())
}

#[tokio::test]
async fn a_new_generation_rolls_the_process_after_its_last_user() -> anyhow::Result<()> {
    let fixture = TestEnv::load()?.provider("fixture")?;
    let (l1, l2) = (
        kraken_tests::scratch_dir("pool-g1-")?,
        kraken_tests::scratch_dir("pool-g2-")?,
    );
    let c1 = provider_config(&fixture, ledger_config(l1.path())).await?;
    let c2 = provider_config(&fixture, ledger_config(l2.path())).await?;
    let pool = pool(4, Duration::from_secs(60));

    let old = pool
        .get(
            &key(&fixture, "team-a/default", 1),
            launch(&fixture, &[]),
            &c1,
        )
        .await?;
    let old_plugin = plugin(&old).await?;
    let new = pool
        .get(
            &key(&fixture, "team-a/default", 2),
            launch(&fixture, &[]),
            &c2,
        )
        .await?;
    assert_ne!(old_plugin.pid(), plugin(&new).await?.pid());

    // Still held: the old process keeps serving its in-flight user, itself and not a
    // replacement: the call lands in the old generation's ledger from the same process.
    create_object(old.as_ref(), "late-old").await?;
    assert!(!old_plugin.has_exited(), "retired while still in use");
    assert_eq!(
        plugin(&old).await?.pid(),
        old_plugin.pid(),
        "the old generation's host relaunched its process"
    );
    assert_eq!(pool.stats().launches, 2);
    drop(old);
    wait_exited(&old_plugin, Duration::from_secs(5)).await?;

    // The new process is configured with the new generation's config.
    create_object(new.as_ref(), "in-g2").await?;
    assert_eq!((live_objects(l1.path()), live_objects(l2.path())), (1, 1));
    assert_eq!(pool.stats().processes, 1);

    // Going back to the retired generation is refused rather than un-rolling.
    let stale = pool
        .get(
            &key(&fixture, "team-a/default", 1),
            launch(&fixture, &[]),
            &c1,
        )
        .await;
    assert!(matches!(stale, Err(PoolError::Stale { current: 2, .. })));
    pool.shutdown_all().await;
    Ok(())
}

#[tokio::test]
async fn a_rejected_config_is_reported_and_not_cached() -> anyhow::Result<()> {
    let fixture = TestEnv::load()?.provider("fixture")?;
    let ledger = kraken_tests::scratch_dir("pool-bad-")?;
    let mut bad = ledger_config(ledger.path());
    bad["token"] = json!("invalid");
    let bad = provider_config(&fixture, bad).await?;
    let good = provider_config(&fixture, ledger_config(ledger.path())).await?;
    let pool = pool(4, Duration::from_secs(60));
    let k = key(&fixture, "team-a/default", 1);

    // Racing callers all see the provider's verdict.
    let mut gets = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let (pool, k, opts, bad) = (pool.clone(), k.clone(), launch(&fixture, &[]), bad.clone());
        gets.spawn(async move { pool.get(&k, opts, &bad).await.map(|_| ()) });
    }
    while let Some(result) = gets.join_next().await {
        match result? {
            Err(PoolError::Configure { summary, .. }) => {
                assert!(summary.contains("invalid token"), "{summary}");
            }
            other => anyhow::bail!("expected a configure error, got {other:?}"),
        }
    }
    assert_eq!(pool.stats().processes, 0);

    // Nothing was cached: the same key launches afresh (a fixed config keeps its key only in
    // this test; in the operator a fix is a new generation).
    let host = pool.get(&k, launch(&fixture, &[]), &good).await?;
    create_object(host.as_ref(), "fixed").await?;
    assert_eq!(pool.stats().processes, 1);
    pool.shutdown_all().await;
    Ok(())
}

#[tokio::test]
async fn idle_processes_are_reaped_and_relaunched_on_demand() -> anyhow::Result<()> {
    let random = TestEnv::load()?.provider("random")?;
    let config = provider_config(&random, json!({})).await?;
    // A zero idle timeout: every process is past it at once, so what keeps one alive can only
    // be that it is held (no waiting for a timeout to pass).
    let pool = pool(4, Duration::ZERO);
    let k = key(&random, "team-a/default", 1);

    let host = pool.get(&k, launch(&random, &[]), &config).await?;
    let first = plugin(&host).await?;
    assert_eq!(pool.reap_idle().await, 0, "a held host is never reaped");
    assert!(!first.has_exited());
    drop(host);
    assert_eq!(pool.reap_idle().await, 1);
    assert!(first.has_exited());
    assert_eq!(pool.stats().processes, 0);

    // The periodic reaper does the same in the background.
    let reaper = pool.clone().spawn_reaper(Duration::from_millis(100));
    let host = pool.get(&k, launch(&random, &[]), &config).await?;
    let second = plugin(&host).await?;
    assert_ne!(first.pid(), second.pid());
    assert_eq!(pool.stats().launches, 2);
    drop(host);
    wait_exited(&second, Duration::from_secs(5)).await?;
    reaper.abort();
    Ok(())
}

#[tokio::test]
async fn concurrency_per_process_is_bounded() -> anyhow::Result<()> {
    // Long enough that six applies started at once pile up behind the bound.
    const DELAY_MS: &str = "300";
    let fixture = TestEnv::load()?.provider("fixture")?;
    let ledger = kraken_tests::scratch_dir("pool-slow-")?;
    let config = provider_config(&fixture, ledger_config(ledger.path())).await?;
    let pool = pool(2, Duration::from_secs(60));
    let opts = launch(&fixture, &[("KRAKEN_FIXTURE_APPLY_DELAY_MS", DELAY_MS)]);
    let host = pool
        .get(&key(&fixture, "team-a/default", 1), opts, &config)
        .await?;

    let mut applies = tokio::task::JoinSet::new();
    for i in 0..6 {
        let host = host.clone();
        applies.spawn(async move { create_object(host.as_ref(), &format!("slow-{i}")).await });
    }
    while let Some(done) = applies.join_next().await {
        done??;
    }
    // The provider's own record of when each ApplyResourceChange began and returned: never
    // more than 2 at once, and 2 at once did happen (the bound is used, not serialised).
    let calls = apply_calls(ledger.path())?;
    assert_eq!(calls.len(), 6, "{calls:?}");
    assert!(calls.iter().all(|c| c.end.is_some()), "{calls:?}");
    assert_eq!(
        max_in_flight(&calls),
        2,
        "applies in flight at once in the provider: {calls:#?}"
    );
    assert_eq!(live_objects(ledger.path()), 6);
    pool.shutdown_all().await;
    Ok(())
}

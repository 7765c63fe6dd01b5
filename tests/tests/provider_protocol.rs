//! Provider-level tests: Kraken's plugin host driving real provider binaries (no Kubernetes).
//!
//! hashicorp/random, time and null speak protocol 5 (built from their Go modules by
//! `scripts/testenv.sh install`); the fixture provider speaks protocol 6 and records every real
//! mutation in a ledger directory, which is how these tests count objects in "the cloud".

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail, ensure};
use kraken_bridge::provider::lifecycle::{self, Action, LifecycleError, Plan, lookup};
use kraken_bridge::provider::{
    DiagnosticsExt as _, ImportBy, LaunchOptions, Plugin, ProviderError, ProviderHost, Severity,
    UpgradeRequest,
};
use kraken_bridge::value::kube::from_kube_json;
use kraken_bridge::value::{AttrPath, Value};
use kraken_tests::ledger::{apply_calls, events, live_objects};
use kraken_tests::{ProviderBin, TestEnv};
use serde_json::json;

const TF_VERSION: &str = kraken_bridge::provider::REPORTED_TERRAFORM_VERSION;

fn host_with(p: &ProviderBin, env: &[(&str, String)], tls: bool) -> Arc<ProviderHost> {
    let mut opts = LaunchOptions::new(&p.path);
    opts.name = p.address.clone();
    opts.tls = tls;
    opts.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    Arc::new(ProviderHost::new(opts, 8))
}

async fn configured(
    p: &ProviderBin,
    env: &[(&str, String)],
    cfg: serde_json::Value,
) -> anyhow::Result<Arc<ProviderHost>> {
    let host = host_with(p, env, true);
    let schema = host.schema().await?;
    let config = from_kube_json(&cfg, &schema.provider.block.implied_type())?;
    let diags = host.validate_provider_config(&config).await?;
    ensure!(
        !diags.has_errors(),
        "provider config invalid: {}",
        diags.error_summary()
    );
    let diags = host.configure(TF_VERSION, &config).await?;
    ensure!(
        !diags.has_errors(),
        "configure failed: {}",
        diags.error_summary()
    );
    Ok(host)
}

/// A resource configuration from JSON keyed by Terraform attribute names.
async fn config(p: &dyn Plugin, type_name: &str, cfg: serde_json::Value) -> anyhow::Result<Value> {
    let schema = p.schema().await?;
    let Some(rs) = schema.resource(type_name) else {
        bail!("no resource type {type_name}");
    };
    Ok(from_kube_json(&cfg, &rs.block.implied_type())?)
}

fn attr<'a>(v: &'a Value, name: &str) -> &'a Value {
    lookup(v, &AttrPath::root().attr(name)).unwrap_or(&Value::Null)
}

fn string(v: &Value, name: &str) -> String {
    match attr(v, name) {
        Value::String(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

/// Plan and apply `cfg` over `prior`, asserting the planned action; returns the new state.
async fn step(
    p: &dyn Plugin,
    type_name: &str,
    prior: &(Value, Vec<u8>),
    cfg: &Value,
    want: Action,
) -> anyhow::Result<((Value, Vec<u8>), Plan)> {
    let plan = lifecycle::plan(p, type_name, &prior.0, &prior.1, cfg).await?;
    ensure!(
        plan.action == want,
        "{type_name}: planned {} but expected {want}",
        plan.action
    );
    let applied = lifecycle::apply(p, &plan).await?;
    ensure!(
        !applied.diagnostics.has_errors(),
        "apply failed: {}",
        applied.diagnostics.error_summary()
    );
    ensure!(
        applied.new_state.is_wholly_known(),
        "applied state still has unknown values"
    );
    Ok(((applied.new_state, applied.private), plan))
}

fn none() -> (Value, Vec<u8>) {
    (Value::Null, Vec::new())
}

#[tokio::test]
async fn random_protocol5_full_lifecycle() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let host = configured(&env.provider("random")?, &[], json!({})).await?;
    assert_eq!(host.protocol_version(), 5);
    let p: &dyn Plugin = host.as_ref();
    // Identity schemas: answered, or unimplemented by a provider from before them (then
    // none); either way not an error.
    let identities = p.identity_schemas().await;
    assert!(identities.is_ok(), "{identities:?}");

    // Create: the id is unknown in the plan and known after apply.
    let cfg = config(
        p,
        "random_pet",
        json!({"length": 3, "separator": "-", "keepers": {"v": "1"}}),
    )
    .await?;
    let plan = lifecycle::plan(p, "random_pet", &Value::Null, &[], &cfg).await?;
    assert_eq!(plan.action, Action::Create);
    assert!(
        !attr(&plan.planned_state, "id").is_known(),
        "id must be unknown in a create plan"
    );
    let (state, _) = step(p, "random_pet", &none(), &cfg, Action::Create).await?;
    let id = string(&state.0, "id");
    assert_eq!(id.split('-').count(), 3, "pet name {id}");

    // Read returns the same object; planning the same config again is a no-op.
    let read = lifecycle::read(p, "random_pet", &state.0, &state.1).await?;
    assert_eq!(read.new_state, state.0);
    step(p, "random_pet", &state, &cfg, Action::NoOp).await?;

    // Changing a keeper forces replacement, and the plan says which path.
    let cfg2 = config(
        p,
        "random_pet",
        json!({"length": 3, "separator": "-", "keepers": {"v": "2"}}),
    )
    .await?;
    let (state2, plan) = step(p, "random_pet", &state, &cfg2, Action::Replace).await?;
    assert!(
        plan.requires_replace
            .iter()
            .any(|path| path.to_string().starts_with("keepers")),
        "{:?}",
        plan.requires_replace
    );
    assert_eq!(string(&state2.0, "keepers"), string(&cfg2, "keepers"));

    // Delete.
    let (gone, _) = step(p, "random_pet", &state2, &Value::Null, Action::Delete).await?;
    assert!(gone.0.is_null());

    // Import: random_id imports by its base64url value and reads back the same bytes.
    let idcfg = config(p, "random_id", json!({"byte_length": 8})).await?;
    let (created, _) = step(p, "random_id", &none(), &idcfg, Action::Create).await?;
    let imported =
        lifecycle::import(p, "random_id", &ImportBy::Id(string(&created.0, "b64_url"))).await?;
    assert_eq!(
        string(&imported.new_state, "hex"),
        string(&created.0, "hex")
    );
    host.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn time_protocol5_update_in_place_replace_and_import() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let host = configured(&env.provider("time")?, &[], json!({})).await?;
    let p: &dyn Plugin = host.as_ref();

    let base = "2024-01-02T03:04:05Z";
    let c1 = config(
        p,
        "time_offset",
        json!({"base_rfc3339": base, "offset_days": 1}),
    )
    .await?;
    let (s1, _) = step(p, "time_offset", &none(), &c1, Action::Create).await?;
    assert_eq!(string(&s1.0, "rfc3339"), "2024-01-03T03:04:05Z");
    let c2 = config(
        p,
        "time_offset",
        json!({"base_rfc3339": base, "offset_days": 2}),
    )
    .await?;
    let (s2, plan) = step(p, "time_offset", &s1, &c2, Action::Update).await?;
    // time_offset computes the new timestamp while planning, so the plan already shows it.
    assert_eq!(
        string(&plan.planned_state, "rfc3339"),
        "2024-01-04T03:04:05Z"
    );
    assert_eq!(string(&s2.0, "rfc3339"), "2024-01-04T03:04:05Z");
    assert_eq!(
        string(&s2.0, "id"),
        string(&s1.0, "id"),
        "an in-place update keeps the object"
    );

    let t1 = config(p, "time_static", json!({"triggers": {"k": "a"}})).await?;
    let (st, _) = step(p, "time_static", &none(), &t1, Action::Create).await?;
    let t2 = config(p, "time_static", json!({"triggers": {"k": "b"}})).await?;
    let (st2, _) = step(p, "time_static", &st, &t2, Action::Replace).await?;
    step(p, "time_static", &st2, &Value::Null, Action::Delete).await?;

    let imported = lifecycle::import(p, "time_static", &ImportBy::Id(base.into())).await?;
    assert_eq!(string(&imported.new_state, "rfc3339"), base);
    assert_eq!(
        attr(&imported.new_state, "year"),
        &Value::Number(kraken_bridge::value::Number::from_i64(2024))
    );
    host.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn null_protocol5_replace_and_data_source() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let host = configured(&env.provider("null")?, &[], json!({})).await?;
    let p: &dyn Plugin = host.as_ref();
    let c1 = config(p, "null_resource", json!({"triggers": {"a": "1"}})).await?;
    let plan = lifecycle::plan(p, "null_resource", &Value::Null, &[], &c1).await?;
    assert!(!attr(&plan.planned_state, "id").is_known());
    let (s1, _) = step(p, "null_resource", &none(), &c1, Action::Create).await?;
    let c2 = config(p, "null_resource", json!({"triggers": {"a": "2"}})).await?;
    let (s2, _) = step(p, "null_resource", &s1, &c2, Action::Replace).await?;
    assert_ne!(
        string(&s1.0, "id"),
        string(&s2.0, "id"),
        "replacement creates a new object"
    );
    step(p, "null_resource", &s2, &Value::Null, Action::Delete).await?;

    let schema = p.schema().await?;
    let ds = schema
        .data_source("null_data_source")
        .context("null_data_source")?;
    let cfg = from_kube_json(&json!({"inputs": {"x": "y"}}), &ds.block.implied_type())?;
    let out = p.read_data_source("null_data_source", &cfg).await?;
    assert!(
        !out.diagnostics.has_errors(),
        "{}",
        out.diagnostics.error_summary()
    );
    assert_eq!(string(&out.state, "outputs"), string(&cfg, "inputs"));
    host.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn fixture_protocol6_full_lifecycle() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let ledger = kraken_tests::scratch_dir("fixture-ledger-")?;
    let cfg = json!({"ledger_dir": ledger.path().to_string_lossy()});
    let host = configured(&env.provider("fixture")?, &[], cfg).await?;
    assert_eq!(host.protocol_version(), 6);
    let p: &dyn Plugin = host.as_ref();
    let t = "fixture_object";

    let c1 = config(
        p,
        t,
        json!({
            "name": "alpha", "size": 3, "tags": {"env": "test"}, "ports": [80, 443],
            "settings": {"mode": "fast", "retries": 2},
            "rules": [{"port": 22, "protocol": "tcp"}],
            "password": "hunter2-fixture-secret"
        }),
    )
    .await?;
    let (s1, _) = step(p, t, &none(), &c1, Action::Create).await?;
    let id = string(&s1.0, "id");
    assert!(id.starts_with("obj-"), "{id}");
    assert_eq!(live_objects(ledger.path()), 1);
    assert_eq!(
        lookup(&s1.0, &AttrPath::root().attr("settings").attr("mode")),
        Some(&Value::String("fast".into()))
    );

    // In place: size changes, revision is unknown in the plan (computed on every update).
    let c2 = config(
        p,
        t,
        json!({
            "name": "alpha", "size": 4, "tags": {"env": "test"}, "ports": [80, 443],
            "settings": {"mode": "fast", "retries": 2},
            "rules": [{"port": 22, "protocol": "tcp"}],
            "password": "hunter2-fixture-secret"
        }),
    )
    .await?;
    let (s2, plan) = step(p, t, &s1, &c2, Action::Update).await?;
    assert!(
        !attr(&plan.planned_state, "revision").is_known(),
        "revision must be unknown in an update plan"
    );
    assert_eq!(string(&s2.0, "id"), id, "update keeps the object");

    // Replace: a new name destroys and recreates.
    let c3 = config(p, t, json!({"name": "beta", "size": 4})).await?;
    let (s3, plan) = step(p, t, &s2, &c3, Action::Replace).await?;
    assert_eq!(
        plan.requires_replace
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec!["name"]
    );
    let id3 = string(&s3.0, "id");
    assert_ne!(id3, id);

    // Import reads the same object back, by id and by resource identity (protocol 6.9).
    let imported = lifecycle::import(p, t, &ImportBy::Id(id3.clone())).await?;
    assert_eq!(string(&imported.new_state, "name"), "beta");
    let identities = p.identity_schemas().await?;
    let schema = identities
        .get(t)
        .context("fixture_object declares an identity")?;
    let names: Vec<(&str, bool)> = schema
        .attributes
        .iter()
        .map(|a| (a.name.as_str(), a.required_for_import))
        .collect();
    assert_eq!(names, [("id", true)]);
    let by_identity =
        ImportBy::Identity(json!({"id": id3}).as_object().cloned().unwrap_or_default());
    let imported = lifecycle::import(p, t, &by_identity).await?;
    assert_eq!(string(&imported.new_state, "id"), id3);
    assert_eq!(string(&imported.new_state, "name"), "beta");
    // An identity the schema does not have is refused before the provider sees it.
    let wrong = ImportBy::Identity(
        json!({"ident": id3})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    match lifecycle::import(p, t, &wrong).await {
        Err(LifecycleError::Rejected(d)) => {
            assert!(d[0].detail.contains("no attribute \"ident\""), "{d:?}");
        }
        other => anyhow::bail!("a wrong identity must be refused: {other:?}"),
    }

    step(p, t, &s3, &Value::Null, Action::Delete).await?;
    let ops: Vec<String> = events(ledger.path())
        .into_iter()
        .map(|(op, _)| op)
        .collect();
    assert_eq!(ops, ["create", "update", "delete", "create", "delete"]);
    assert_eq!(live_objects(ledger.path()), 0);

    // Data source reads from the same ledger.
    let (s4, _) = step(p, t, &none(), &c1, Action::Create).await?;
    let schema = p.schema().await?;
    let ds = schema
        .data_source("fixture_lookup")
        .context("fixture_lookup")?;
    let q = from_kube_json(
        &json!({"id": string(&s4.0, "id")}),
        &ds.block.implied_type(),
    )?;
    let found = p.read_data_source("fixture_lookup", &q).await?;
    assert_eq!(string(&found.state, "name"), "alpha");
    host.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn fixture_state_upgrade_from_version_0() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let ledger = kraken_tests::scratch_dir("fixture-ledger-")?;
    let host = configured(
        &env.provider("fixture")?,
        &[],
        json!({"ledger_dir": ledger.path().to_string_lossy()}),
    )
    .await?;
    let schema = host.schema().await?;
    assert_eq!(
        schema.resource("fixture_object").context("schema")?.version,
        1
    );
    let raw = json!({"id": "obj-00000000000000aa", "name": "old", "size_text": "7"});
    let resp = host
        .upgrade_resource_state(UpgradeRequest {
            type_name: "fixture_object".into(),
            version: 0,
            raw_state_json: serde_json::to_vec(&raw)?,
        })
        .await?;
    assert!(
        !resp.diagnostics.has_errors(),
        "{}",
        resp.diagnostics.error_summary()
    );
    assert_eq!(
        attr(&resp.upgraded_state, "size"),
        &Value::Number(kraken_bridge::value::Number::from_i64(7))
    );
    assert_eq!(string(&resp.upgraded_state, "name"), "old");
    host.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn diagnostics_carry_severity_summary_detail_and_path() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let ledger = kraken_tests::scratch_dir("fixture-ledger-")?;
    let fixture = env.provider("fixture")?;
    let host = configured(
        &fixture,
        &[],
        json!({"ledger_dir": ledger.path().to_string_lossy()}),
    )
    .await?;
    let p: &dyn Plugin = host.as_ref();
    let t = "fixture_object";

    let bad_name = config(p, t, json!({"name": "has space"})).await?;
    let diags = p.validate_resource_config(t, &bad_name).await?;
    let d = diags
        .iter()
        .find(|d| d.severity == Severity::Error)
        .context("an error diagnostic")?;
    assert_eq!(d.summary, "invalid name");
    assert_eq!(
        d.attribute.as_ref().map(ToString::to_string).as_deref(),
        Some("name")
    );

    let bad_port = config(
        p,
        t,
        json!({"name": "ok", "rules": [{"port": 22}, {"port": 70000}]}),
    )
    .await?;
    let diags = p.validate_resource_config(t, &bad_port).await?;
    let d = diags
        .iter()
        .find(|d| d.severity == Severity::Error)
        .context("an error diagnostic")?;
    assert_eq!(
        d.attribute.as_ref().map(ToString::to_string).as_deref(),
        Some("rules[1].port")
    );

    // Apply failures come back as diagnostics (data), with the detail and path intact.
    let failing = configured(
        &fixture,
        &[("KRAKEN_FIXTURE_FAIL_APPLY", "1".into())],
        json!({"ledger_dir": ledger.path().to_string_lossy()}),
    )
    .await?;
    let ok = config(failing.as_ref(), t, json!({"name": "ok"})).await?;
    let plan = lifecycle::plan(failing.as_ref(), t, &Value::Null, &[], &ok).await?;
    let applied = lifecycle::apply(failing.as_ref(), &plan).await?;
    let d = applied
        .diagnostics
        .iter()
        .find(|d| d.severity == Severity::Error)
        .context("apply error")?;
    assert_eq!(d.summary, "fixture apply failed");
    assert_eq!(d.detail, "fail_apply is set");
    assert_eq!(
        d.attribute.as_ref().map(ToString::to_string).as_deref(),
        Some("name")
    );

    // A provider configuration the provider rejects is reported, not swallowed.
    let cfg = from_kube_json(
        &json!({"ledger_dir": ledger.path().to_string_lossy(), "token": "invalid"}),
        &p.schema().await?.provider.block.implied_type(),
    )?;
    let diags = host_with(&fixture, &[], true)
        .configure(TF_VERSION, &cfg)
        .await?;
    assert!(diags.has_errors());
    assert!(
        diags.error_summary().contains("invalid token"),
        "{}",
        diags.error_summary()
    );
    host.shutdown().await;
    failing.shutdown().await;
    Ok(())
}

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

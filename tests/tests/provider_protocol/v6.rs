//! Protocol 6, through the fixture provider, whose ledger is the cloud: a whole lifecycle with
//! import by id and by resource identity, a state upgrade from schema version 0, and
//! diagnostics with their severity, summary, detail and attribute path.

use std::path::Path;

use anyhow::Context as _;
use kraken_bridge::provider::lifecycle::{self, Action, LifecycleError, lookup};
use kraken_bridge::provider::{DiagnosticsExt as _, ImportBy, Plugin, Severity, UpgradeRequest};
use kraken_bridge::value::kube::from_kube_json;
use kraken_bridge::value::{AttrPath, Value};
use kraken_tests::ledger::{events, live_objects};
use kraken_tests::{ProviderBin, TestEnv};
use serde_json::json;

use super::{TF_VERSION, attr, config, configured, host_with, none, step, string};

/// The object `alpha` with every kind of attribute, at `size`.
fn alpha(size: u32) -> serde_json::Value {
    json!({
        "name": "alpha", "size": size, "tags": {"env": "test"}, "ports": [80, 443],
        "settings": {"mode": "fast", "retries": 2},
        "rules": [{"port": 22, "protocol": "tcp"}],
        "password": "hunter2-fixture-secret"
    })
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

    let c1 = config(p, t, alpha(3)).await?;
    let (s1, _) = step(p, t, &none(), &c1, Action::Create).await?;
    let id = string(&s1.0, "id");
    assert!(id.starts_with("obj-"), "{id}");
    assert_eq!(live_objects(ledger.path()), 1);
    assert_eq!(
        lookup(&s1.0, &AttrPath::root().attr("settings").attr("mode")),
        Some(&Value::String("fast".into()))
    );

    // In place: size changes, revision is unknown in the plan (computed on every update).
    let c2 = config(p, t, alpha(4)).await?;
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

    expect_imports(p, &id3).await?;

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

/// Import reads the object `id3` (named beta) back, by id and by resource identity (protocol
/// 6.9); an identity the schema does not have is refused before the provider sees it.
async fn expect_imports(p: &dyn Plugin, id3: &str) -> anyhow::Result<()> {
    let t = "fixture_object";
    let imported = lifecycle::import(p, t, &ImportBy::Id(id3.to_owned())).await?;
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

    expect_apply_and_configure_failures(&fixture, ledger.path()).await?;
    host.shutdown().await;
    Ok(())
}

/// Apply failures come back as diagnostics (data), with the detail and path intact; a
/// provider configuration the provider rejects is reported, not swallowed.
async fn expect_apply_and_configure_failures(
    fixture: &ProviderBin,
    ledger: &Path,
) -> anyhow::Result<()> {
    let t = "fixture_object";
    let failing = configured(
        fixture,
        &[("KRAKEN_FIXTURE_FAIL_APPLY", "1".into())],
        json!({"ledger_dir": ledger.to_string_lossy()}),
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
        &json!({"ledger_dir": ledger.to_string_lossy(), "token": "invalid"}),
        &failing.schema().await?.provider.block.implied_type(),
    )?;
    let diags = host_with(fixture, &[], true)
        .configure(TF_VERSION, &cfg)
        .await?;
    assert!(diags.has_errors());
    assert!(
        diags.error_summary().contains("invalid token"),
        "{}",
        diags.error_summary()
    );
    failing.shutdown().await;
    Ok(())
}

//! Protocol 5, through HashiCorp's random, time and null providers: create, update in place,
//! replace, import, data sources.

use anyhow::Context as _;
use kraken_bridge::provider::lifecycle::{self, Action};
use kraken_bridge::provider::{DiagnosticsExt as _, ImportBy, Plugin};
use kraken_bridge::value::Value;
use kraken_bridge::value::kube::from_kube_json;
use kraken_tests::TestEnv;
use serde_json::json;

use super::{attr, config, configured, none, step, string};

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

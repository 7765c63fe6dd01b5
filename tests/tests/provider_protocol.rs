//! Provider-level tests: Kraken's plugin host driving real provider binaries (no Kubernetes).
//!
//! hashicorp/random, time and null speak protocol 5 (built from their Go modules by
//! `scripts/testenv.sh install`); the fixture provider speaks protocol 6 and records every real
//! mutation in a ledger directory, which is how these tests count objects in "the cloud".

#[path = "provider_protocol/process.rs"]
mod process;
#[path = "provider_protocol/v5.rs"]
mod v5;
#[path = "provider_protocol/v6.rs"]
mod v6;

use std::sync::Arc;

use anyhow::{bail, ensure};
use kraken_bridge::provider::lifecycle::{self, Action, Plan, lookup};
use kraken_bridge::provider::{DiagnosticsExt as _, LaunchOptions, Plugin, ProviderHost};
use kraken_bridge::value::kube::from_kube_json;
use kraken_bridge::value::{AttrPath, Value};
use kraken_tests::ProviderBin;

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

//! The operator's `/metrics` tell the truth about the provider: after one fixture Object is
//! created and Ready, the RPC latency histogram (`kraken_provider_rpc_duration_seconds`) has
//! counted the plan and the apply that made it so, and the drift read that follows, labelled
//! with the provider and the gRPC method.

use std::time::Duration;

use anyhow::bail;
use kraken_tests::operator::{FixtureBed, OperatorOptions};
use kraken_tests::wait_for;
use serde_json::json;

/// A reconcile of a fresh object: provider start, import/read, plan, apply, status.
const CONVERGE: Duration = Duration::from_secs(60);
/// A create reads nothing (there is no state yet); the drift check one interval later does.
const DRIFT_READ: Duration = Duration::from_secs(30);

const RPC_COUNT: &str = "kraken_provider_rpc_duration_seconds_count";

#[test]
fn provider_rpc_latency_is_recorded() -> anyhow::Result<()> {
    let bed = FixtureBed::start("rpc-metrics", OperatorOptions::default())?;
    let result = (|| {
        let spec = json!({"forProvider": {"name": "web", "size": 3}, "driftInterval": "1s"});
        bed.apply_object("web", spec)?;
        bed.wait_reconciled("web", CONVERGE)?;
        let what =
            "a recorded latency for PlanResourceChange, ApplyResourceChange and ReadResource";
        wait_for(DRIFT_READ, what, || {
            for rpc in ["PlanResourceChange", "ApplyResourceChange", "ReadResource"] {
                let count = bed.op.metric_where(RPC_COUNT, |labels| {
                    let has = |key: &str, ok: &dyn Fn(&str) -> bool| {
                        labels.iter().any(|(k, v)| k == key && ok(v))
                    };
                    has("rpc", &|v| v == rpc) && has("provider", &|v| !v.is_empty())
                })?;
                if count < 1.0 {
                    bail!("{RPC_COUNT} for {rpc} is {count}");
                }
            }
            Ok(Some(()))
        })
    })();
    bed.finish(result)
}

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

/// What a dashboard reads: managed and Ready objects per kind, unresolved DependencyRequests,
/// provider restarts (a provider SIGKILLed is relaunched and counted), and `/readyz` naming
/// the leader's synced caches.
#[test]
fn the_dashboard_metrics_and_readyz_tell_the_truth() -> anyhow::Result<()> {
    let bed = FixtureBed::start("dashboard-metrics", OperatorOptions::default())?;
    let result = (|| {
        let kind = |labels: &[(String, String)]| {
            labels
                .iter()
                .any(|(k, v)| k == "kind" && v == "Object.fixture.tf.kraken.dev")
        };
        bed.apply_object(
            "ready-one",
            json!({"forProvider": {"name": "ready-one", "size": 1}}),
        )?;
        // Waits on a value that never comes: its request stays pending.
        bed.apply_object(
            "waiting-one",
            json!({"forProvider": {"size": 1}, "valuesFrom": [
                {"path": "name", "resource": {"kind": "Object", "name": "not-there", "path": "id"}}]}),
        )?;
        // Fails: its ProviderConfig does not exist (kraken_reconcile_failures_total).
        bed.apply_object(
            "failing-one",
            json!({"forProvider": {"name": "failing-one", "size": 1}, "providerConfigRef": {"name": "missing"}}),
        )?;
        bed.wait_reconciled("ready-one", CONVERGE)?;
        wait_for(
            CONVERGE,
            "managed 3, ready 1, 1 request pending, a failure",
            || {
                let managed = bed.op.metric_where("kraken_managed_resources", kind)?;
                let ready = bed.op.metric_where("kraken_ready_resources", kind)?;
                let pending = bed.op.metric("kraken_hub_pending_requests")?;
                let failures = bed
                    .op
                    .metric_where("kraken_reconcile_failures_total", kind)?;
                if (managed, ready, pending) == (3.0, 1.0, 1.0) && failures >= 1.0 {
                    Ok(Some(()))
                } else {
                    bail!(
                        "managed {managed}, ready {ready}, pending {pending}, failures {failures}"
                    )
                }
            },
        )?;
        dashboard_reads_only_real_metrics(&bed.op.metrics()?)?;
        let (status, body) = kraken_tests::operator::http_get(bed.op.metrics_addr(), "/readyz")?;
        anyhow::ensure!(
            status == 200 && body.starts_with("leading: ") && body.contains("caches synced"),
            "/readyz: {status} {body}"
        );

        // The provider dies; the next request relaunches it.
        let provider = kraken_tests::operator::descendants(bed.op.pid().unwrap_or_default())?;
        anyhow::ensure!(
            !provider.is_empty(),
            "no provider process under the operator"
        );
        std::process::Command::new("kill")
            .arg("-KILL")
            .args(provider.iter().map(u32::to_string))
            .status()?;
        bed.apply_object(
            "ready-two",
            json!({"forProvider": {"name": "ready-two", "size": 1}}),
        )?;
        bed.wait_reconciled("ready-two", CONVERGE)?;
        wait_for(CONVERGE, "a provider restart counted", || {
            let restarts = bed.op.metric("kraken_provider_restarts")?;
            Ok((restarts >= 1.0).then_some(()))
        })?;
        Ok(())
    })();
    bed.finish(result)
}

/// Every metric the chart's Grafana dashboard queries is one the operator exposes (its
/// `# TYPE` line, so families without samples yet count too).
fn dashboard_reads_only_real_metrics(exposed: &str) -> anyhow::Result<()> {
    let path = kraken_tests::repo_root().join("charts/kraken/dashboards/kraken.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let mut checked = 0;
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            for (at, _) in expr.match_indices("kraken_") {
                let rest = &expr[at..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                    .unwrap_or(rest.len());
                let name = &rest[..end];
                let family = ["_bucket", "_sum", "_count", "_total"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .unwrap_or(name);
                let family = family.strip_suffix("_seconds").unwrap_or(family);
                let family = family.strip_suffix("_bytes").unwrap_or(family);
                anyhow::ensure!(
                    exposed
                        .lines()
                        .any(|l| l.starts_with("# TYPE ") && l[7..].starts_with(family)),
                    "the dashboard's panel {:?} reads {name}, which the operator does not expose",
                    panel["title"]
                );
                checked += 1;
            }
        }
    }
    anyhow::ensure!(
        checked >= 10,
        "only {checked} metric references in the dashboard"
    );
    Ok(())
}

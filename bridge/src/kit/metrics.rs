//! The operator's Prometheus metrics: reconcile runs, failures and latency per kind, provider
//! RPC latency, every write made to the API server, provider process counts, managed objects
//! and leadership. One [`Metrics`] is shared as `Arc<Metrics>` by the controllers, the provider
//! pool's reporter and the [`super::http`] server that exposes [`Metrics::encode`].
//!
//! Names carry the `kraken_` prefix; counters get their `_total` and histograms their
//! `_seconds` suffix from `prometheus-client`, as OpenMetrics requires.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use tracing::warn;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    kind: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    provider: String,
    rpc: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessLabels {
    provider: String,
    config: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    resource: String,
    verb: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// 10 ms to ~5.5 min: a no-op drift check is tens of milliseconds, a cloud create can take
/// minutes.
fn reconcile_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 16))
}

/// 1 ms to ~33 s: `GetProviderSchema` and `ReadResource` are milliseconds locally,
/// `ApplyResourceChange` against a cloud is seconds (longer applies land in `+Inf`).
fn rpc_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The operator's metrics and the registry that exposes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconcile_runs: Family<KindLabels, Counter>,
    reconcile_duration: HistogramFamily<KindLabels>,
    reconcile_failures: Family<FailureLabels, Counter>,
    provider_rpc_duration: HistogramFamily<RpcLabels>,
    api_writes: Family<WriteLabels, Counter>,
    events_dropped: Counter,
    provider_processes: Gauge,
    provider_launches: Gauge,
    provider_rss: Family<ProcessLabels, Gauge>,
    managed_resources: Family<KindLabels, Gauge>,
    leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("kraken");
        let reconcile_runs = Family::<KindLabels, Counter>::default();
        registry.register(
            "reconcile_runs",
            "Reconciles started, per kind",
            reconcile_runs.clone(),
        );
        let reconcile_duration: HistogramFamily<KindLabels> =
            Family::new_with_constructor(reconcile_histogram);
        registry.register_with_unit(
            "reconcile_duration",
            "Time one reconcile took, per kind",
            Unit::Seconds,
            reconcile_duration.clone(),
        );
        let reconcile_failures = Family::<FailureLabels, Counter>::default();
        registry.register(
            "reconcile_failures",
            "Reconciles that failed, per kind and reason",
            reconcile_failures.clone(),
        );
        let provider_rpc_duration: HistogramFamily<RpcLabels> =
            Family::new_with_constructor(rpc_histogram);
        registry.register_with_unit(
            "provider_rpc_duration",
            "Time one provider RPC took, per provider and RPC",
            Unit::Seconds,
            provider_rpc_duration.clone(),
        );
        let api_writes = Family::<WriteLabels, Counter>::default();
        registry.register(
            "api_writes",
            "Writes the operator made to the API server, per resource and verb",
            api_writes.clone(),
        );
        let events_dropped = Counter::default();
        registry.register(
            "events_dropped",
            "Events dropped because the event queue was full",
            events_dropped.clone(),
        );
        let provider_processes = Gauge::default();
        registry.register(
            "provider_processes",
            "Provider processes running",
            provider_processes.clone(),
        );
        let provider_launches = Gauge::default();
        registry.register(
            "provider_launches",
            "Provider processes launched since the operator started",
            provider_launches.clone(),
        );
        let provider_rss = Family::<ProcessLabels, Gauge>::default();
        registry.register_with_unit(
            "provider_resident_memory",
            "Resident memory of each provider process, per provider and ProviderConfig",
            Unit::Bytes,
            provider_rss.clone(),
        );
        let managed_resources = Family::<KindLabels, Gauge>::default();
        registry.register(
            "managed_resources",
            "Objects being managed, per kind",
            managed_resources.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease, else 0",
            leader.clone(),
        );
        Self {
            registry,
            reconcile_runs,
            reconcile_duration,
            reconcile_failures,
            provider_rpc_duration,
            api_writes,
            events_dropped,
            provider_processes,
            provider_launches,
            provider_rss,
            managed_resources,
            leader,
        }
    }

    /// Counts a reconcile of `kind` now (so reconciles still running are counted) and observes
    /// its duration when the returned guard drops.
    pub fn reconcile(&self, kind: &str) -> ReconcileGuard {
        let labels = KindLabels { kind: kind.into() };
        self.reconcile_runs.get_or_create(&labels).inc();
        ReconcileGuard {
            histogram: self.reconcile_duration.get_or_create_owned(&labels),
            started: Instant::now(),
        }
    }

    /// A reconcile of `kind` failed; `reason` is the error's category (a `Synced` reason).
    pub fn reconcile_failed(&self, kind: &str, reason: &str) {
        let labels = FailureLabels {
            kind: kind.into(),
            reason: reason.into(),
        };
        self.reconcile_failures.get_or_create(&labels).inc();
    }

    /// One provider RPC (`PlanResourceChange`, ...) to `provider` took `seconds`.
    pub fn provider_rpc(&self, provider: &str, rpc: &str, seconds: f64) {
        let labels = RpcLabels {
            provider: provider.into(),
            rpc: rpc.into(),
        };
        self.provider_rpc_duration
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// The operator wrote to the API server: `resource` is the plural or kind written
    /// (`secrets`, `leases`, a managed kind), `verb` the write (`create`, `patch`, ...).
    pub fn api_write(&self, resource: &str, verb: &str) {
        let labels = WriteLabels {
            resource: resource.into(),
            verb: verb.into(),
        };
        self.api_writes.get_or_create(&labels).inc();
    }

    /// An Event was dropped: the event queue was full.
    pub fn event_dropped(&self) {
        self.events_dropped.inc();
    }

    /// Provider processes running now (from the pool's stats).
    pub fn set_provider_processes(&self, n: i64) {
        self.provider_processes.set(n);
    }

    /// Provider processes launched so far (from the pool's stats).
    pub fn set_provider_launches(&self, n: i64) {
        self.provider_launches.set(n);
    }

    /// The resident memory of each provider process now, as `(provider, ProviderConfig,
    /// bytes)`: processes gone since the last call disappear from the metric.
    pub fn set_provider_memory(&self, samples: &[(String, String, u64)]) {
        self.provider_rss.clear();
        for (provider, config, bytes) in samples {
            self.provider_rss
                .get_or_create(&ProcessLabels {
                    provider: provider.clone(),
                    config: config.clone(),
                })
                .set(i64::try_from(*bytes).unwrap_or(i64::MAX));
        }
    }

    /// Objects of `kind` being managed now.
    pub fn set_managed_resources(&self, kind: &str, n: i64) {
        self.managed_resources
            .get_or_create(&KindLabels { kind: kind.into() })
            .set(n);
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Every metric in the OpenMetrics text format (which Prometheus scrapes as
    /// `application/openmetrics-text`), ending with `# EOF`.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail; an error could only come from a broken metric.
        if let Err(err) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            warn!(error = %err, "failed to encode the metrics");
        }
        text
    }
}

/// Observes a reconcile's duration when dropped, however the reconcile ends (including `?`
/// and cancellation).
#[derive(Debug)]
#[must_use = "the duration is observed when the guard drops"]
pub struct ReconcileGuard {
    histogram: Histogram,
    started: Instant,
}

impl Drop for ReconcileGuard {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line that starts with `series ` (name and labels, exactly).
    fn sample(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map(str::to_owned)
    }

    #[test]
    fn encoded_text_carries_every_recorded_value() {
        let metrics = Metrics::new();
        {
            let _a = metrics.reconcile("Bucket");
            let _b = metrics.reconcile("Bucket");
        }
        let _running = metrics.reconcile("Queue");
        metrics.reconcile_failed("Bucket", "ProviderError");
        metrics.provider_rpc("hashicorp/random", "PlanResourceChange", 0.25);
        metrics.api_write("secrets", "create");
        metrics.api_write("secrets", "create");
        metrics.api_write("buckets", "patch");
        metrics.set_provider_processes(3);
        metrics.set_provider_launches(5);
        metrics.set_managed_resources("Bucket", 7);
        metrics.set_leader(true);

        let text = metrics.encode();
        let cases = [
            (r#"kraken_reconcile_runs_total{kind="Bucket"}"#, "2"),
            (r#"kraken_reconcile_runs_total{kind="Queue"}"#, "1"),
            (
                r#"kraken_reconcile_duration_seconds_count{kind="Bucket"}"#,
                "2",
            ),
            (
                r#"kraken_reconcile_failures_total{kind="Bucket",reason="ProviderError"}"#,
                "1",
            ),
            (
                r#"kraken_provider_rpc_duration_seconds_sum{provider="hashicorp/random",rpc="PlanResourceChange"}"#,
                "0.25",
            ),
            (
                r#"kraken_provider_rpc_duration_seconds_count{provider="hashicorp/random",rpc="PlanResourceChange"}"#,
                "1",
            ),
            (
                r#"kraken_api_writes_total{resource="secrets",verb="create"}"#,
                "2",
            ),
            (
                r#"kraken_api_writes_total{resource="buckets",verb="patch"}"#,
                "1",
            ),
            ("kraken_provider_processes", "3"),
            ("kraken_provider_launches", "5"),
            (r#"kraken_managed_resources{kind="Bucket"}"#, "7"),
            ("kraken_leader", "1"),
        ];
        for (series, want) in cases {
            assert_eq!(
                sample(&text, series).as_deref(),
                Some(want),
                "{series} in:\n{text}"
            );
        }
        // The reconcile still running has been counted but not yet observed.
        assert_eq!(
            sample(
                &text,
                r#"kraken_reconcile_duration_seconds_count{kind="Queue"}"#
            )
            .as_deref(),
            Some("0")
        );
        assert!(text.contains("# TYPE kraken_reconcile_duration_seconds histogram"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn leader_gauge_goes_back_to_zero() {
        let metrics = Metrics::new();
        metrics.set_leader(true);
        metrics.set_leader(false);
        assert_eq!(
            sample(&metrics.encode(), "kraken_leader").as_deref(),
            Some("0")
        );
    }
}

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
use prometheus_client::registry::{Metric, Registry, Unit};
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

/// Registers `metric` as `name` with `help` (and `unit`, which adds its suffix), and returns it:
/// the registry keeps one handle, the caller the other.
fn reg<M: Metric + Clone>(
    registry: &mut Registry,
    (name, help): (&str, &str),
    unit: Option<Unit>,
    metric: M,
) -> M {
    match unit {
        Some(unit) => registry.register_with_unit(name, help, unit, metric.clone()),
        None => registry.register(name, help, metric.clone()),
    }
    metric
}

/// The provider processes' metrics: RPC latency, how many run, launches, resident memory.
#[derive(Debug)]
struct ProviderMetrics {
    rpc_duration: HistogramFamily<RpcLabels>,
    processes: Gauge,
    launches: Gauge,
    rss: Family<ProcessLabels, Gauge>,
    restarts: Family<ProcessLabels, Gauge>,
}

impl ProviderMetrics {
    fn register(r: &mut Registry) -> Self {
        let rpc_duration = reg(
            r,
            (
                "provider_rpc_duration",
                "Time one provider RPC took, per provider and RPC",
            ),
            Some(Unit::Seconds),
            Family::new_with_constructor(rpc_histogram as fn() -> Histogram),
        );
        let processes = reg(
            r,
            ("provider_processes", "Provider processes running"),
            None,
            Gauge::default(),
        );
        let launches = reg(
            r,
            (
                "provider_launches",
                "Provider processes launched since the operator started",
            ),
            None,
            Gauge::default(),
        );
        let rss = reg(
            r,
            (
                "provider_resident_memory",
                "Resident memory of each provider process (with its kraken runner under the local placement), per provider and ProviderConfig",
            ),
            Some(Unit::Bytes),
            Family::default(),
        );
        let restarts = reg(
            r,
            (
                "provider_restarts",
                "Times each live provider process was relaunched after it died, per provider and ProviderConfig",
            ),
            None,
            Family::default(),
        );
        Self {
            rpc_duration,
            processes,
            launches,
            rss,
            restarts,
        }
    }
}

/// The state gauges: managed and Ready objects per kind, unresolved hub requests, leadership.
#[derive(Debug)]
struct Gauges {
    managed_resources: Family<KindLabels, Gauge>,
    ready_resources: Family<KindLabels, Gauge>,
    hub_pending: Gauge,
    leader: Gauge,
    shard_members: Gauge,
    shard_changes: Counter,
}

impl Gauges {
    fn register(r: &mut Registry) -> Self {
        let managed_resources = reg(
            r,
            ("managed_resources", "Objects being managed, per kind"),
            None,
            Family::default(),
        );
        let ready_resources = reg(
            r,
            ("ready_resources", "Objects that are Ready=True, per kind"),
            None,
            Family::default(),
        );
        let hub_pending = reg(
            r,
            (
                "hub_pending_requests",
                "DependencyRequests not resolved (waiting for a producer, a Secret or a ConfigMap)",
            ),
            None,
            Gauge::default(),
        );
        let leader = reg(
            r,
            (
                "leader",
                "1 while this replica holds the leader Lease, else 0",
            ),
            None,
            Gauge::default(),
        );
        let shard_members = reg(
            r,
            (
                "shard_members",
                "Live replicas in the shard ring as this replica sees it (--shards auto)",
            ),
            None,
            Gauge::default(),
        );
        let shard_changes = reg(
            r,
            (
                "shard_ownership_changes",
                "Times this replica's share of the objects changed (--shards auto)",
            ),
            None,
            Counter::default(),
        );
        Self {
            managed_resources,
            ready_resources,
            hub_pending,
            leader,
            shard_members,
            shard_changes,
        }
    }
}

/// The operator's metrics and the registry that exposes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconcile_runs: Family<KindLabels, Counter>,
    reconcile_duration: HistogramFamily<KindLabels>,
    reconcile_failures: Family<FailureLabels, Counter>,

    api_writes: Family<WriteLabels, Counter>,
    events_dropped: Counter,
    hub_propagation: Histogram,
    provider: ProviderMetrics,
    gauges: Gauges,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("kraken");
        let r = &mut registry;
        let per_kind = "Reconciles started, per kind";
        let reconcile_runs = reg(r, ("reconcile_runs", per_kind), None, Family::default());
        let reconcile_duration = reg(
            r,
            ("reconcile_duration", "Time one reconcile took, per kind"),
            Some(Unit::Seconds),
            Family::new_with_constructor(reconcile_histogram as fn() -> Histogram),
        );
        let reconcile_failures = reg(
            r,
            (
                "reconcile_failures",
                "Reconciles that failed, per kind and reason",
            ),
            None,
            Family::default(),
        );
        let api_writes = reg(
            r,
            (
                "api_writes",
                "Writes the operator made to the API server, per resource and verb",
            ),
            None,
            Family::default(),
        );
        let events_dropped = reg(
            r,
            (
                "events_dropped",
                "Events dropped because the event queue was full",
            ),
            None,
            Counter::default(),
        );
        let hub_propagation = reg(
            r,
            (
                "hub_propagation",
                "From a producer publishing new outputs to a consumer's request resolved with them",
            ),
            Some(Unit::Seconds),
            reconcile_histogram(),
        );
        let gauges = Gauges::register(r);
        let provider = ProviderMetrics::register(r);
        Self {
            registry,
            reconcile_runs,
            reconcile_duration,
            reconcile_failures,
            api_writes,
            events_dropped,
            hub_propagation,
            provider,
            gauges,
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
        self.provider
            .rpc_duration
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
        self.provider.processes.set(n);
    }

    /// Provider processes launched so far (from the pool's stats).
    pub fn set_provider_launches(&self, n: i64) {
        self.provider.launches.set(n);
    }

    /// The resident memory of each provider process now, as `(provider, ProviderConfig,
    /// bytes)`: processes gone since the last call disappear from the metric.
    pub fn set_provider_memory(&self, samples: &[(String, String, u64)]) {
        self.provider.rss.clear();
        for (provider, config, bytes) in samples {
            self.provider
                .rss
                .get_or_create(&ProcessLabels {
                    provider: provider.clone(),
                    config: config.clone(),
                })
                .set(i64::try_from(*bytes).unwrap_or(i64::MAX));
        }
    }

    /// How often each live provider host relaunched its process, as `(provider,
    /// ProviderConfig, restarts)`.
    pub fn set_provider_restarts(&self, samples: &[(String, String, u64)]) {
        self.provider.restarts.clear();
        for (provider, config, n) in samples {
            self.provider
                .restarts
                .get_or_create(&ProcessLabels {
                    provider: provider.clone(),
                    config: config.clone(),
                })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
    }

    /// Objects of `kind` that are `Ready=True` now.
    pub fn set_ready_resources(&self, kind: &str, n: i64) {
        self.gauges
            .ready_resources
            .get_or_create(&KindLabels { kind: kind.into() })
            .set(n);
    }

    /// DependencyRequests not resolved now (waiting for a producer, a Secret, a ConfigMap).
    pub fn set_hub_pending(&self, n: i64) {
        self.gauges.hub_pending.set(n);
    }

    /// Objects of `kind` being managed now.
    pub fn set_managed_resources(&self, kind: &str, n: i64) {
        self.gauges
            .managed_resources
            .get_or_create(&KindLabels { kind: kind.into() })
            .set(n);
    }

    /// A request was resolved with values a producer published `seconds` ago.
    pub fn hub_propagated(&self, seconds: f64) {
        self.hub_propagation.observe(seconds.max(0.0));
    }

    /// Live replicas in the shard ring.
    pub fn set_shard_members(&self, n: i64) {
        self.gauges.shard_members.set(n);
    }

    /// This replica's share of the objects changed.
    pub fn shard_rebalanced(&self) {
        self.gauges.shard_changes.inc();
    }

    pub fn set_leader(&self, leader: bool) {
        self.gauges.leader.set(i64::from(leader));
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

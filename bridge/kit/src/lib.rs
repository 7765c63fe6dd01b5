//! The low kit every controller builds on, importing nothing above it: the API client's
//! request cap ([`api_limit`]), conditions and the
//! [`conditions::Condition`] type, Events ([`events`]), the finalizer flow ([`finalizer`]),
//! Prometheus [`metrics`], durations, jitter and backoff ([`time`]), stable hashing
//! ([`hash`]), derived names ([`names`]) and whose they are ([`ownership`]), error chains ([`errors`]) and bounded text ([`text`]),
//! and the [`fence`] that stops a replica's writes when its leadership is not current.
//!
//! [`Kit`] bundles what every controller holds: the API client, the metrics, the Event
//! publisher, the failure backoff and the fence; [`reconciler`] is the one shape every
//! controller has (the `Reconciler` trait, and the runner that gives each pass its span,
//! metrics and error policy).

pub mod access;
pub mod api_limit;
pub mod conditions;
pub mod errors;
pub mod events;
pub mod fake_api;
pub mod fence;
pub mod finalizer;
pub mod hash;
pub mod metrics;
pub mod names;
pub mod ownership;
pub mod readiness;
pub mod reconciler;
pub mod ring;
pub mod status;
pub mod text;
pub mod time;

use std::sync::Arc;

use kube::Client;

/// Field manager of Kraken's server-side applies and status writes.
pub const FIELD_MANAGER: &str = "kraken";

/// What every controller shares: the API client, the metrics, the Event publisher and the
/// per-object failure backoff.
pub struct Kit {
    pub client: Client,
    pub metrics: Arc<metrics::Metrics>,
    pub events: events::Publisher,
    pub backoff: time::Backoff,
    /// Whether this replica may write now ([`fence`]); open without leader election.
    pub fence: fence::Fence,
    /// What `/readyz` reports: leadership, and the caches controllers register ([`readiness`]).
    pub readiness: Arc<readiness::Readiness>,
}

impl Kit {
    /// A kit whose Events are reported as coming from `kraken` (and the pod in `POD_NAME`).
    pub fn new(client: Client, metrics: Arc<metrics::Metrics>) -> Self {
        let reporter = events::Reporter {
            controller: "kraken".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let dropped = {
            let metrics = metrics.clone();
            Arc::new(move || metrics.event_dropped())
        };
        Self {
            events: events::Publisher::new(client.clone(), reporter, dropped),
            client,
            metrics,
            backoff: time::Backoff::default(),
            fence: fence::Fence::open(),
            readiness: Arc::default(),
        }
    }

    /// The same kit reporting to `readiness` (the one `/readyz` serves).
    pub fn with_readiness(self, readiness: Arc<readiness::Readiness>) -> Self {
        Self { readiness, ..self }
    }

    /// The same kit with writes fenced by `fence` (the operator's, when it elects a leader).
    pub fn with_fence(self, fence: fence::Fence) -> Self {
        Self { fence, ..self }
    }

    /// Queues an Event about `regarding` (published in the background, see [`events`]) and
    /// counts it as an API write.
    pub fn event(
        &self,
        (warning, reason, note, action): (bool, &str, &str, &str),
        regarding: k8s_openapi::api::core::v1::ObjectReference,
    ) {
        self.metrics.api_write("events", "create");
        self.events
            .send(events::event(warning, reason, note, action), regarding);
    }
}

//! The runner itself, over a scripted reconciler: the span every pass runs in (and what nests
//! under it), the metrics it counts, the error policy's requeues and its one log line.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use tracing::Level;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

use super::*;
use crate::fake_api::FakeApi;
use crate::metrics::Metrics;

const KIND: &str = "Thing.test.kraken.dev";
const UID: &str = "0000-thing";

#[derive(Debug, thiserror::Error)]
#[error("the pass hit {reason}")]
struct Failed {
    reason: &'static str,
    transient: bool,
}

impl ReconcileError for Failed {
    fn reason(&self) -> &str {
        self.reason
    }

    fn is_transient(&self) -> bool {
        self.transient
    }
}

/// A reconciler whose passes end as scripted, each opening a span of its own (as a provider
/// RPC does) and logging a line.
struct Scripted {
    kit: Kit,
    outcomes: Mutex<VecDeque<Result<Action, Failed>>>,
    passes: AtomicUsize,
    admits: bool,
}

impl Reconciler for Scripted {
    type Object = ConfigMap;
    type Error = Failed;

    fn kit(&self) -> &Kit {
        &self.kit
    }

    fn kind(&self) -> &str {
        KIND
    }

    fn admit(&self, _obj: &ConfigMap) -> Option<Admission> {
        self.admits.then(|| Box::new(()) as Admission)
    }

    async fn reconcile(self: Arc<Self>, _obj: Arc<ConfigMap>) -> Result<Action, Failed> {
        self.passes.fetch_add(1, Ordering::SeqCst);
        tracing::info_span!("rpc", rpc = "ApplyResourceChange")
            .in_scope(|| tracing::info!("applied"));
        tokio::task::yield_now().await;
        let next = self
            .outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        next.unwrap_or_else(|| Ok(Action::await_change()))
    }
}

fn scripted(outcomes: Vec<Result<Action, Failed>>, admits: bool) -> Arc<Scripted> {
    let kit = Kit::new(FakeApi::new().client(), Arc::new(Metrics::new()));
    Arc::new(Scripted {
        kit,
        outcomes: Mutex::new(outcomes.into()),
        passes: AtomicUsize::new(0),
        admits,
    })
}

fn object() -> Arc<ConfigMap> {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("web".into());
    cm.metadata.namespace = Some("team".into());
    cm.metadata.uid = Some(UID.into());
    Arc::new(cm)
}

/// The value of the sample line `series` (name and labels, exactly), if there is one.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// What the recorder saw: spans (with their parent) and events (with the span they are in).
#[derive(Debug, Clone)]
enum Seen {
    Span {
        id: u64,
        parent: Option<u64>,
        name: &'static str,
        level: Level,
        fields: BTreeMap<String, String>,
    },
    Event {
        span: Option<u64>,
        level: Level,
        fields: BTreeMap<String, String>,
    },
}

/// A span seen: id, parent, level, fields.
type SpanSeen = (u64, Option<u64>, Level, BTreeMap<String, String>);

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Seen>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S> tracing_subscriber::Layer<S> for Recorder
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx
            .span(id)
            .and_then(|s| s.parent())
            .map(|p| p.id().into_u64());
        self.push(Seen::Span {
            id: id.into_u64(),
            parent,
            name: attrs.metadata().name(),
            level: *attrs.metadata().level(),
            fields,
        });
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.push(Seen::Event {
            span: ctx.event_span(event).map(|s| s.id().into_u64()),
            level: *event.metadata().level(),
            fields,
        });
    }
}

impl Recorder {
    fn push(&self, seen: Seen) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(seen);
    }

    fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The spans named `name`.
    fn spans(&self, name: &str) -> Vec<SpanSeen> {
        self.seen()
            .into_iter()
            .filter_map(|s| match s {
                Seen::Span {
                    id,
                    parent,
                    name: n,
                    level,
                    fields,
                } if n == name => Some((id, parent, level, fields)),
                _ => None,
            })
            .collect()
    }

    /// The events at `level`: (the span they are in, their message).
    fn events(&self, level: Level) -> Vec<(Option<u64>, String)> {
        self.seen()
            .into_iter()
            .filter_map(|s| match s {
                Seen::Event {
                    span,
                    level: l,
                    fields,
                } if l == level => Some((span, fields.get("message").cloned().unwrap_or_default())),
                _ => None,
            })
            .collect()
    }
}

fn recording() -> (Recorder, tracing::subscriber::DefaultGuard) {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    (recorder, tracing::subscriber::set_default(subscriber))
}

#[tokio::test]
async fn a_pass_runs_in_an_info_span_naming_the_object_and_is_counted() {
    let (recorder, _guard) = recording();
    let wanted = Action::requeue(Duration::from_secs(60));
    let r = scripted(vec![Ok(wanted.clone())], true);
    let action = run(r.clone(), object()).await;
    assert_eq!(action, wanted, "the reconciler's own choice");

    let spans = recorder.spans("reconcile");
    assert_eq!(spans.len(), 1, "{spans:?}");
    let (id, _, level, fields) = &spans[0];
    assert_eq!(*level, Level::INFO);
    let field = |k: &str| fields.get(k).map(String::as_str);
    assert_eq!(
        (field("kind"), field("namespace"), field("name")),
        (Some(KIND), Some("team"), Some("web"))
    );
    // What the pass opens and logs is under it.
    let rpc = recorder.spans("rpc");
    assert_eq!(rpc.len(), 1, "{rpc:?}");
    assert_eq!(rpc[0].1, Some(*id), "the RPC span's parent");
    let info = recorder.events(Level::INFO);
    assert!(
        info.iter()
            .any(|(span, m)| m == "applied" && *span == Some(rpc[0].0)),
        "{info:?}"
    );
    assert!(recorder.events(Level::WARN).is_empty());

    let text = r.kit.metrics.encode();
    let series = |name: &str| format!("{name}{{kind=\"{KIND}\"}}");
    assert_eq!(
        sample(&text, &series("kraken_reconcile_runs_total")),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, &series("kraken_reconcile_duration_seconds_count")),
        Some(1.0)
    );
    assert!(!text.contains("kraken_reconcile_failures_total{"), "{text}");
}

#[tokio::test]
async fn transient_failures_back_off_and_permanent_ones_wait_for_a_change() {
    let (recorder, _guard) = recording();
    let boom = || {
        Err(Failed {
            reason: "Boom",
            transient: true,
        })
    };
    let refused = Err(Failed {
        reason: "Refused",
        transient: false,
    });
    let r = scripted(
        vec![boom(), boom(), refused, Ok(Action::await_change())],
        true,
    );
    let backoff = |r: &Scripted| r.kit.backoff.failures(UID);

    let first = run(r.clone(), object()).await;
    assert_ne!(
        first,
        Action::await_change(),
        "a transient failure requeues"
    );
    assert_eq!(backoff(&r), 1);
    let second = run(r.clone(), object()).await;
    assert_ne!(second, Action::await_change());
    assert_eq!(
        backoff(&r),
        2,
        "the second wait is the next step of the backoff"
    );
    let third = run(r.clone(), object()).await;
    assert_eq!(third, Action::await_change(), "a permanent failure waits");
    assert_eq!(
        backoff(&r),
        0,
        "the next try comes from a change: the backoff starts over"
    );
    let fourth = run(r.clone(), object()).await;
    assert_eq!(fourth, Action::await_change());
    assert_eq!(backoff(&r), 0);

    let text = r.kit.metrics.encode();
    let failures = |reason: &str| {
        sample(
            &text,
            &format!("kraken_reconcile_failures_total{{kind=\"{KIND}\",reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(
        (failures("Boom"), failures("Refused")),
        (Some(2.0), Some(1.0))
    );
    let runs = format!("kraken_reconcile_runs_total{{kind=\"{KIND}\"}}");
    assert_eq!(sample(&text, &runs), Some(4.0));

    // One warning per failure, in the failed pass's span, saying what comes next.
    let spans: Vec<u64> = recorder.spans("reconcile").iter().map(|s| s.0).collect();
    let warnings = recorder.events(Level::WARN);
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    for (i, (span, message)) in warnings.iter().enumerate() {
        assert_eq!(*span, spans.get(i).copied(), "{message}");
        assert!(
            message.starts_with("reconcile failed: the pass hit "),
            "{message}"
        );
    }
    assert!(warnings[0].1.contains("retrying in"), "{}", warnings[0].1);
    assert!(
        warnings[2].1.ends_with("waiting for a change"),
        "{}",
        warnings[2].1
    );
}

#[tokio::test]
async fn a_pass_turned_away_is_neither_run_nor_counted() {
    let (recorder, _guard) = recording();
    let r = scripted(vec![Ok(Action::requeue(Duration::from_secs(1)))], false);
    assert_eq!(run(r.clone(), object()).await, Action::await_change());
    assert_eq!(r.passes.load(Ordering::SeqCst), 0);
    assert!(recorder.spans("reconcile").is_empty());
    let text = r.kit.metrics.encode();
    assert!(!text.contains("kraken_reconcile_runs_total{"), "{text}");
}

#[test]
fn api_errors_and_fencing_are_transient_under_their_reasons() {
    let api = kube::Error::Api(
        kube::core::Status::failure("etcd is down", "ServiceUnavailable")
            .with_code(503)
            .boxed(),
    );
    assert_eq!(
        (api.reason(), api.is_transient()),
        (reason::API_ERROR, true)
    );
    let fenced = crate::fence::Fenced("not leading".into());
    assert_eq!(
        (fenced.reason(), fenced.is_transient()),
        (reason::FENCED, true)
    );
}

//! Publishing Kubernetes Events (events.k8s.io/v1) about managed resources and Providers.
//!
//! kube-runtime's `Recorder` keeps every Event it published for six minutes, to turn repeats
//! into a series, and scans that cache on every publish. After creating 10,000 resources that is
//! 10,000 cached Events (a few KB each) and a 10,000-entry scan per Event under one lock. Most of
//! Kraken's Events are one-off Normal ones (Created, Updated, Deleted) that never repeat, so this
//! publisher remembers only Warnings — the ones a failing resource repeats on each retry — in a
//! small bounded cache keyed by object UID, reason and message, and counts their repeats as a
//! series the way kube-runtime does.
//!
//! Events are sent in the background, as client-go's broadcaster does: a reconcile queues its
//! Event (with the time it happened) and goes on, and two workers publish the queue. When a
//! thousand resources change at once, their Events then wait behind the writes that make them
//! Ready instead of taking a fifth of the API server's writes ahead of them. The queue is
//! bounded; an Event that finds it full is dropped, logged and counted
//! (`kraken_events_dropped_total`), since Events are best-effort in Kubernetes and a reconcile
//! must never wait on one. Shutdown flushes the queue ([`Publisher::flush`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt as _;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PostParams};
pub use kube::runtime::events::{Event, EventType, Reporter};

/// How long a Warning is remembered to count repeats (kube-runtime's choice).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// Most Warnings remembered; beyond it the oldest are forgotten (a repeat then starts anew).
const SERIES_MAX: usize = 1024;

/// A series key: object UID, reason, message.
type Key = (String, String, String);

struct Series {
    name: String,
    count: i32,
    last: Instant,
}

/// An Event of `action` with `reason`, its note cut to 1000 bytes.
pub fn event(warning: bool, reason: &str, note: &str, action: &str) -> Event {
    Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_owned(),
        note: Some(super::text::truncate(note, 1000)),
        action: action.to_owned(),
        secondary: None,
    }
}

/// Events waiting to be published, at most.
const QUEUE: usize = 10_000;
/// Events published at once.
const WORKERS: usize = 2;

/// An Event waiting in the queue, with the time it happened.
struct Queued {
    ev: Event,
    regarding: ObjectReference,
    at: k8s_openapi::jiff::Timestamp,
}

/// Publishes Events in the background; one per operator, shared.
pub struct Publisher {
    sender: Arc<Sender>,
    capacity: usize,
    queue: OnceLock<tokio::sync::mpsc::Sender<Queued>>,
    /// Events queued and not yet published (or given up on).
    pending: Arc<Pending>,
    dropped: Arc<dyn Fn() + Send + Sync>,
}

#[derive(Default)]
struct Pending {
    count: AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Pending {
    fn done(&self) {
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }
}

impl Publisher {
    /// A publisher whose dropped Events (queue full) are counted by `dropped`.
    pub fn new(client: Client, reporter: Reporter, dropped: Arc<dyn Fn() + Send + Sync>) -> Self {
        Self::with_capacity(client, reporter, dropped, QUEUE)
    }

    fn with_capacity(
        client: Client,
        reporter: Reporter,
        dropped: Arc<dyn Fn() + Send + Sync>,
        capacity: usize,
    ) -> Self {
        Self {
            sender: Arc::new(Sender {
                client,
                reporter,
                warnings: Mutex::default(),
            }),
            capacity,
            queue: OnceLock::new(),
            pending: Arc::default(),
            dropped,
        }
    }

    /// Queues `ev` about `regarding` (published in its namespace; cluster-scoped objects:
    /// `default`), stamped with the current time. Never waits; must be called from within the
    /// Tokio runtime (the workers start on first use).
    pub fn send(&self, ev: Event, regarding: ObjectReference) {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = tokio::sync::mpsc::channel(self.capacity);
            tokio::spawn(work(self.sender.clone(), rx, self.pending.clone()));
            tx
        });
        let item = Queued {
            ev,
            regarding,
            at: k8s_openapi::jiff::Timestamp::now(),
        };
        self.pending.count.fetch_add(1, Ordering::AcqRel);
        if let Err(err) = queue.try_send(item) {
            self.pending.done();
            (self.dropped)();
            let item = match err {
                tokio::sync::mpsc::error::TrySendError::Full(i)
                | tokio::sync::mpsc::error::TrySendError::Closed(i) => i,
            };
            tracing::warn!(
                reason = %item.ev.reason,
                object = item.regarding.name.as_deref().unwrap_or_default(),
                "event queue full ({} waiting): dropped an event",
                self.capacity
            );
        }
    }

    /// Waits until every queued Event is published (or failed), at most `timeout`; returns
    /// how many are still waiting.
    pub async fn flush(&self, timeout: Duration) -> usize {
        let wait = async {
            loop {
                let idle = self.pending.idle.notified();
                if self.pending.count.load(Ordering::Acquire) == 0 {
                    return;
                }
                idle.await;
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
        self.pending.count.load(Ordering::Acquire)
    }
}

/// Publishes the queue, [`WORKERS`] at a time, until every sender is gone.
async fn work(sender: Arc<Sender>, rx: tokio::sync::mpsc::Receiver<Queued>, pending: Arc<Pending>) {
    tokio_stream::wrappers::ReceiverStream::new(rx)
        .for_each_concurrent(WORKERS, |q| {
            let sender = sender.clone();
            let pending = pending.clone();
            async move {
                if let Err(err) = sender.publish(&q.ev, &q.regarding, q.at).await {
                    tracing::warn!(
                        reason = %q.ev.reason,
                        object = q.regarding.name.as_deref().unwrap_or_default(),
                        "could not publish event: {err}"
                    );
                }
                pending.done();
            }
        })
        .await;
}

/// What publishes one Event: the client, who reports, and the Warning series.
struct Sender {
    client: Client,
    reporter: Reporter,
    warnings: Mutex<HashMap<Key, Series>>,
}

impl Sender {
    /// Publishes `ev` about `regarding`, in its namespace (cluster-scoped objects: `default`).
    async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
        now: k8s_openapi::jiff::Timestamp,
    ) -> Result<(), kube::Error> {
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        if ev.type_ == EventType::Warning {
            let key = (
                regarding.uid.clone().unwrap_or_default(),
                ev.reason.clone(),
                ev.note.clone().unwrap_or_default(),
            );
            if let Some((name, count)) = self.repeat(&key) {
                let patch = K8sEvent {
                    series: Some(EventSeries {
                        count,
                        last_observed_time: MicroTime(now),
                    }),
                    ..Default::default()
                };
                let sent = api
                    .patch(&name, &crate::status::patch_params(), &Patch::Merge(&patch))
                    .await;
                // The Event may have expired on the server: create it anew below.
                if sent.is_ok() {
                    return Ok(());
                }
            }
            let event = self.event(ev, regarding, &namespace, now);
            let name = event.metadata.name.clone().unwrap_or_default();
            api.create(&PostParams::default(), &event).await?;
            self.remember(key, name);
            return Ok(());
        }
        let event = self.event(ev, regarding, &namespace, now);
        api.create(&PostParams::default(), &event).await?;
        Ok(())
    }

    /// The next count of a remembered Warning, with the Event's name.
    fn repeat(&self, key: &Key) -> Option<(String, i32)> {
        let mut warnings = self.warnings.lock().unwrap_or_else(|e| e.into_inner());
        let s = warnings.get_mut(key)?;
        if s.last.elapsed() > SERIES_TTL {
            warnings.remove(key);
            return None;
        }
        s.count = s.count.saturating_add(1);
        s.last = Instant::now();
        Some((s.name.clone(), s.count))
    }

    fn remember(&self, key: Key, name: String) {
        let mut warnings = self.warnings.lock().unwrap_or_else(|e| e.into_inner());
        if warnings.len() >= SERIES_MAX {
            warnings.retain(|_, s| s.last.elapsed() <= SERIES_TTL);
        }
        if warnings.len() >= SERIES_MAX
            && let Some(oldest) = warnings
                .iter()
                .min_by_key(|(_, s)| s.last)
                .map(|(k, _)| k.clone())
        {
            warnings.remove(&oldest);
        }
        let series = Series {
            name,
            count: 1,
            last: Instant::now(),
        };
        warnings.insert(key, series);
    }

    fn event(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
        namespace: &str,
        now: k8s_openapi::jiff::Timestamp,
    ) -> K8sEvent {
        let name = regarding
            .name
            .as_deref()
            .unwrap_or(&self.reporter.controller);
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            metadata: ObjectMeta {
                namespace: Some(namespace.to_owned()),
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                ..Default::default()
            },
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(addr: &str) -> Client {
        let config = kube::Config::new(addr.parse().expect("url"));
        Client::try_from(config).expect("client")
    }

    fn reporter() -> Reporter {
        Reporter {
            controller: "kraken".into(),
            instance: None,
        }
    }

    #[tokio::test]
    async fn warnings_repeat_as_a_series_and_the_cache_stays_bounded() {
        // A client that is never used: this exercises the series bookkeeping only.
        let p = Sender {
            client: client("http://127.0.0.1:9"),
            reporter: reporter(),
            warnings: Mutex::default(),
        };
        let key = |i: usize| {
            (
                format!("uid-{i}"),
                "ProviderError".to_owned(),
                "boom".to_owned(),
            )
        };
        assert!(p.repeat(&key(0)).is_none());
        p.remember(key(0), "obj.1".into());
        assert_eq!(p.repeat(&key(0)), Some(("obj.1".to_owned(), 2)));
        assert_eq!(p.repeat(&key(0)), Some(("obj.1".to_owned(), 3)));
        for i in 1..=SERIES_MAX + 10 {
            p.remember(key(i), format!("obj.{i}"));
        }
        let len = p.warnings.lock().map(|w| w.len()).unwrap_or_default();
        assert!(len <= SERIES_MAX, "{len} entries");
        assert!(p.repeat(&key(SERIES_MAX + 10)).is_some());
    }

    /// A full queue drops (and counts) instead of making the reconcile wait, and `flush`
    /// reports what is still waiting.
    #[tokio::test]
    async fn a_full_queue_drops_and_counts_and_flush_is_bounded() {
        // An API server that accepts connections and never answers: the workers hang on
        // their first Event each.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        // Counts the Event requests that arrive, and answers none of them.
        let requests = Arc::new(AtomicUsize::new(0));
        let seen = requests.clone();
        let _accept = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncReadExt as _;
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = conn.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let text = String::from_utf8_lossy(&buf[..n]);
                        seen.fetch_add(text.matches("POST /apis/events").count(), Ordering::SeqCst);
                    }
                });
            }
        });
        let dropped = Arc::new(AtomicUsize::new(0));
        let counter = dropped.clone();
        let p = Publisher::with_capacity(
            client(&format!("http://{addr}")),
            reporter(),
            Arc::new(move || {
                counter.fetch_add(1, Ordering::Relaxed);
            }),
            3,
        );
        let regarding = ObjectReference {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        };
        for _ in 0..WORKERS {
            p.send(
                event(false, "Created", "created", "Reconcile"),
                regarding.clone(),
            );
        }
        // Once each worker has taken its Event (its request reached the server and hangs),
        // fill the queue and overflow it by two.
        let deadline = Instant::now() + Duration::from_secs(30);
        while requests.load(Ordering::SeqCst) < WORKERS {
            assert!(
                Instant::now() < deadline,
                "the workers never sent their Events"
            );
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for _ in 0..5 {
            p.send(
                event(false, "Updated", "updated", "Reconcile"),
                regarding.clone(),
            );
        }
        assert_eq!(dropped.load(Ordering::Relaxed), 2);
        let waiting = p.flush(Duration::from_millis(100)).await;
        assert_eq!(waiting, WORKERS + 3);
    }
}

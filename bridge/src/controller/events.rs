//! Publishing Kubernetes Events (events.k8s.io/v1) about managed resources and Providers.
//!
//! kube-runtime's `Recorder` keeps every Event it published for six minutes, to turn repeats
//! into a series, and scans that cache on every publish. After creating 10,000 resources that is
//! 10,000 cached Events (a few KB each) and a 10,000-entry scan per Event under one lock. Most of
//! Kraken's Events are one-off Normal ones (Created, Updated, Deleted) that never repeat, so this
//! publisher remembers only Warnings — the ones a failing resource repeats on each retry — in a
//! small bounded cache keyed by object UID, reason and message, and counts their repeats as a
//! series the way kube-runtime does.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
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
        note: Some(super::write::truncate(note, 1000)),
        action: action.to_owned(),
        secondary: None,
    }
}

/// Publishes Events; cheap to share.
pub struct Publisher {
    client: Client,
    reporter: Reporter,
    warnings: Mutex<HashMap<Key, Series>>,
}

impl Publisher {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            warnings: Mutex::default(),
        }
    }

    /// Publishes `ev` about `regarding`, in its namespace (cluster-scoped objects: `default`).
    pub async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        let now = k8s_openapi::jiff::Timestamp::now();
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
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
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

    fn publisher() -> Option<Publisher> {
        // A client that is never used: these tests exercise the series bookkeeping only.
        let config = kube::Config::new("http://127.0.0.1:9".parse().ok()?);
        let client = Client::try_from(config).ok()?;
        let reporter = Reporter {
            controller: "kraken".into(),
            instance: None,
        };
        Some(Publisher::new(client, reporter))
    }

    #[tokio::test]
    async fn warnings_repeat_as_a_series_and_the_cache_stays_bounded() {
        let Some(p) = publisher() else {
            panic!("could not build a client");
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
}

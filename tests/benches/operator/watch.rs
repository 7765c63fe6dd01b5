//! How the benchmark sees objects become Ready: one watch on the kind in the bench namespace,
//! folded into a per-name summary. A watch costs the API server one event per write, like the
//! operator's own watch; polling `kubectl get` of 10,000 objects every second would cost a
//! full list (tens of MB of JSON) each time and compete with the operator for the 2 cores.
//!
//! The time an object was first seen reconciled at its current generation is the arrival
//! time of that watch event, so a waiter that polls the summary every few milliseconds still
//! measures to the event.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::Value;

/// What the watch last said about one object.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    pub generation: i64,
    /// When the object was first seen Ready=True, Synced=True with observedGeneration equal
    /// to this generation.
    pub reconciled_at: Option<Instant>,
    /// When a plan waiting for approval (`status.plan.id`) was first seen at this generation.
    pub planned_at: Option<Instant>,
    /// Synced=False (the operator reported a failure).
    pub failing: bool,
}

/// The folded watch.
#[derive(Debug, Default)]
pub struct Summary {
    objects: HashMap<String, Seen>,
    reconciled: usize,
    failing: usize,
    /// The latest `Synced=False` reason and message, for progress lines and timeouts.
    pub last_failure: Option<String>,
    /// The latest watch error (the watcher retries with backoff).
    pub last_error: Option<String>,
    /// The first list is done: from here on every write arrives as it happens.
    pub listed: bool,
}

impl Summary {
    /// Objects seen.
    pub fn seen(&self) -> usize {
        self.objects.len()
    }

    /// Objects reconciled at their current generation.
    pub fn reconciled(&self) -> usize {
        self.reconciled
    }

    /// Objects whose Synced condition is False.
    pub fn failing(&self) -> usize {
        self.failing
    }

    pub fn get(&self, name: &str) -> Option<Seen> {
        self.objects.get(name).copied()
    }

    fn apply(&mut self, obj: &DynamicObject, now: Instant) {
        let Some(name) = obj.metadata.name.clone() else {
            return;
        };
        let generation = obj.metadata.generation.unwrap_or(0);
        let status = &obj.data["status"];
        let condition = |t: &str| {
            status["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == t))
        };
        let is_true = |t: &str| condition(t).is_some_and(|c| c["status"] == "True");
        let reconciled = is_true("Ready")
            && is_true("Synced")
            && status["observedGeneration"].as_i64() == Some(generation);
        let failing = condition("Synced").is_some_and(|c| c["status"] == "False");
        if let Some(c) = condition("Synced").filter(|_| failing) {
            self.last_failure = Some(format!(
                "{name}: Synced=False/{} {}",
                text(&c["reason"]),
                text(&c["message"])
            ));
        }
        let old = self.objects.get(&name).copied();
        let reconciled_at = match old {
            Some(o) if o.generation == generation && o.reconciled_at.is_some() && reconciled => {
                o.reconciled_at
            }
            _ => reconciled.then_some(now),
        };
        let planned = status["plan"]["id"].is_string()
            && status["observedGeneration"].as_i64() == Some(generation);
        let planned_at = match old {
            Some(o) if o.generation == generation && o.planned_at.is_some() => o.planned_at,
            _ => planned.then_some(now),
        };
        if let Some(o) = old {
            self.reconciled -= usize::from(o.reconciled_at.is_some());
            self.failing -= usize::from(o.failing);
        }
        self.reconciled += usize::from(reconciled_at.is_some());
        self.failing += usize::from(failing);
        self.objects.insert(
            name,
            Seen {
                generation,
                reconciled_at,
                planned_at,
                failing,
            },
        );
    }

    fn delete(&mut self, obj: &DynamicObject) {
        if let Some(o) = obj
            .metadata
            .name
            .as_ref()
            .and_then(|n| self.objects.remove(n))
        {
            self.reconciled -= usize::from(o.reconciled_at.is_some());
            self.failing -= usize::from(o.failing);
        }
    }
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// A running watch; stops when dropped.
pub struct Watch {
    summary: Arc<Mutex<Summary>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The kind to watch.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

impl Watch {
    /// Watch `kind` in `ns` on the control plane of `kubeconfig`, on `rt`.
    pub fn start(
        rt: &tokio::runtime::Runtime,
        kubeconfig: &std::path::Path,
        ns: &str,
        kind: Kind,
    ) -> anyhow::Result<Self> {
        let client = rt.block_on(client(kubeconfig))?;
        let gvk = GroupVersionKind::gvk(kind.group, kind.version, kind.kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, kind.plural);
        let api: Api<DynamicObject> = Api::namespaced_with(client, ns, &ar);
        let summary = Arc::new(Mutex::new(Summary::default()));
        let task = rt.spawn({
            let summary = summary.clone();
            async move {
                let mut events = watcher(api, watcher::Config::default())
                    .default_backoff()
                    .boxed();
                while let Some(event) = events.next().await {
                    let now = Instant::now();
                    let mut s = summary.lock().unwrap_or_else(|e| e.into_inner());
                    match event {
                        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                            s.apply(&o, now);
                        }
                        Ok(watcher::Event::Delete(o)) => s.delete(&o),
                        Ok(watcher::Event::InitDone) => s.listed = true,
                        Ok(watcher::Event::Init) => {}
                        Err(e) => s.last_error = Some(e.to_string()),
                    }
                }
            }
        });
        Ok(Self { summary, task })
    }

    /// The summary, locked; hold it briefly (the watch task waits for it).
    pub fn summary(&self) -> MutexGuard<'_, Summary> {
        self.summary.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Poll until `done` says yes, at most `timeout`; `describe` is the observation in the
    /// timeout error.
    pub fn wait<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&Summary) -> Option<T>,
    ) -> anyhow::Result<T> {
        let start = Instant::now();
        loop {
            {
                let s = self.summary();
                if let Some(v) = done(&s) {
                    return Ok(v);
                }
                if start.elapsed() > timeout {
                    anyhow::bail!(
                        "timed out after {timeout:?} waiting for {what}: {} seen, {} reconciled, \
                         {} failing (last: {}), last watch error: {}",
                        s.seen(),
                        s.reconciled(),
                        s.failing(),
                        s.last_failure.as_deref().unwrap_or("none"),
                        s.last_error.as_deref().unwrap_or("none")
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A kube client for the control plane of this kubeconfig.
pub async fn client(kubeconfig: &std::path::Path) -> anyhow::Result<kube::Client> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .context("failed to load the control plane's kubeconfig")?;
    Ok(kube::Client::try_from(config)?)
}

//! The managed-resource supervisor: one controller per generated kind whose CRD is Established,
//! started and stopped as CRDs come and go; with `--shards auto`, it also hands the controllers
//! this replica's share whenever it changes.
//!
//! A change of share does not stop a controller: the [`Share`](kraken_managed::share::Share) they all consult changes in
//! place. Once no reconcile of an object that left is running any more (an apply in flight
//! finishes first), the new generation is reported to the membership, which confirms it on the
//! replica's Lease — the drain half of the handshake (`operator::shard`). The objects that stay
//! are not reconciled again; the ones gained are, once.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, ResourceExt as _};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::shard::{Published, ShardLink};
use kraken_core_kinds::KindInfo;
use kraken_core_kinds::generated::PROVIDER_ANNOTATION;
use kraken_kit::access::Access;
use kraken_kit::ring::Ownership;
use kraken_managed::{Context, run_kind};

/// The kinds' controllers running now.
struct Kinds {
    ctx: Arc<Context>,
    concurrency: u16,
    /// This identity may read every group (an administrator's kubeconfig): no kind waits for
    /// a grant, and no kind costs an access review.
    granted_all: bool,
    all: watch::Receiver<bool>,
    running: HashMap<String, (KindInfo, watch::Sender<bool>)>,
    tasks: JoinSet<()>,
}

impl Kinds {
    fn start(&mut self, name: String, kind: KindInfo) {
        let (tx, rx) = watch::channel(false);
        if let Some((_, old)) = self.running.insert(name, (kind.clone(), tx)) {
            let _ = old.send(true);
        }
        let all = self.all.clone();
        let shutdown = move || {
            let (mut rx, mut all) = (rx.clone(), all.clone());
            async move {
                tokio::select! {
                    _ = rx.wait_for(|s| *s) => {}
                    _ = all.wait_for(|s| *s) => {}
                }
            }
        };
        let ctx = self.ctx.clone();
        let concurrency = self.concurrency;
        let granted_all = self.granted_all;
        self.tasks.spawn(async move {
            // A kind installed a moment ago may not be granted yet (RBAC follows installs):
            // its controller waits for the grant instead of collecting "forbidden".
            let label = kind.label();
            let wanted = needs(&kind);
            if !granted_all {
                let granted = kraken_kit::access::wait_allowed(&ctx.client, &label, &wanted);
                tokio::select! {
                    () = granted => {}
                    () = shutdown() => return,
                }
            }
            run_kind(ctx, kind, concurrency, shutdown()).await;
        });
    }

    fn stop(&mut self, name: &str, why: &str) {
        if let Some((kind, tx)) = self.running.remove(name) {
            tracing::info!(kind = %kind.label(), "{why}: stopping its controller");
            let _ = tx.send(true);
        }
    }

    /// Stops every controller, waits until their work in flight is done.
    async fn drain(&mut self) {
        for (_, tx) in self.running.values() {
            let _ = tx.send(true);
        }
        while self.tasks.join_next().await.is_some() {}
    }

    /// Acts on `owns` from now on; returns once no work on an object that left is running.
    async fn reshare(&self, owns: Ownership) {
        self.ctx.share.set(owns);
        self.ctx.share.drained().await;
        // Another replica may have published for the objects this one gained.
        self.ctx.hub_index.forget_published();
    }
}

/// What a kind's controller does to its objects: the access it waits for before it starts.
fn needs(kind: &KindInfo) -> Vec<Access<'_>> {
    let (group, resource) = (kind.resource.group.as_str(), kind.resource.plural.as_str());
    ["list", "watch", "patch"]
        .map(|verb| Access {
            group,
            resource,
            verb,
        })
        .to_vec()
}

enum Next<E> {
    Share(Option<Published>),
    Crd(Option<E>),
}

/// The next share, when sharding (never otherwise). Cancel-safe.
async fn next_share(link: Option<&mut ShardLink>) -> Option<Published> {
    match link {
        Some(link) => {
            link.ownership.changed().await.ok()?;
            Some(link.ownership.borrow_and_update().clone())
        }
        None => std::future::pending().await,
    }
}

/// Starts a controller for every generated kind whose CRD is Established, now or later; stops
/// one when its CRD is suspended (its Provider was deleted) or deleted; hands them every new
/// share (`shard`); stops them all when `stop` turns true.
pub(super) async fn supervise_kinds(
    ctx: Arc<Context>,
    concurrency: u16,
    stop: watch::Receiver<bool>,
    mut shard: Option<ShardLink>,
) {
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    let config = watcher::Config::default().labels(PROVIDER_ANNOTATION);
    let mut events = watcher(crds, config).default_backoff().boxed();
    if let Some(link) = &mut shard {
        ctx.share.set(link.ownership.borrow_and_update().0.clone());
    }
    let everything = Access {
        group: "*",
        resource: "*",
        verb: "*",
    };
    let granted_all = kraken_kit::access::allowed(&ctx.client, everything)
        .await
        .unwrap_or(false);
    let mut kinds = Kinds {
        ctx,
        concurrency,
        granted_all,
        all: stop.clone(),
        running: HashMap::new(),
        tasks: JoinSet::new(),
    };
    let mut stop_wait = stop.clone();
    loop {
        let next = tokio::select! {
            _ = stop_wait.wait_for(|s| *s) => break,
            share = next_share(shard.as_mut()) => Next::Share(share),
            ev = events.next() => Next::Crd(ev),
        };
        let ev = match next {
            Next::Share(None) => break,
            Next::Share(Some((owns, generation))) => {
                kinds.reshare(owns).await;
                if let Some(link) = &shard {
                    link.applied.send_replace(generation);
                }
                continue;
            }
            Next::Crd(ev) => ev,
        };
        let crd = match ev {
            Some(Ok(watcher::Event::Apply(crd) | watcher::Event::InitApply(crd))) => crd,
            Some(Ok(watcher::Event::Delete(crd))) => {
                kinds.stop(&crd.name_any(), "CRD deleted");
                continue;
            }
            Some(Ok(_)) => continue,
            Some(Err(err)) => {
                tracing::warn!("watching CRDs: {err}");
                continue;
            }
            None => break,
        };
        let name = crd.name_any();
        let Some(kind) = KindInfo::from_crd(&crd) else {
            kinds.stop(&name, "kind suspended");
            continue;
        };
        if kinds.running.get(&name).is_some_and(|(k, _)| *k == kind) {
            continue;
        }
        kinds.start(name, kind);
    }
    kinds.drain().await;
}

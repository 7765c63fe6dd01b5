//! The DependencyRequest controller: the hub itself.
//!
//! A reconcile resolves one request in three steps: gather the objects its references read
//! (I/O: [`gather`]), resolve them ([`super::resolve`], pure: sources and references in,
//! values and failures out), write the result (I/O: sensitive values into the Secret
//! `<request>-values` the request owns, the rest into status). It watches the metadata of
//! StateDeclarations, ConfigMaps and Secrets and maps each change through the [`Index`] to the
//! requests that read the object, so a change upstream re-resolves exactly those, at once;
//! nothing polls.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::Stream;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Resource as _, ResourceExt as _};
use serde_json::json;

use super::resolve::{Resolution, Sources, resolve};
use super::watches::{
    AbortOnDrop, readers, request_changes, retriggered, source_changes, spawn_pending_gauge,
};
use super::{
    Failure, Index, ObjectKey, PUBLISHED_AT_ANNOTATION, Parsed, Source, SourceKind, find_cycle,
    parse, reason, values_secret_name,
};
use kraken_core_kinds::hub::{
    DependencyRequest, DependencyRequestStatus, StateDeclaration, ValueReference,
};
use kraken_kit::Kit;
use kraken_kit::conditions::{self, READY, Set};
use kraken_kit::fence::Fenced;
use kraken_kit::ownership::{self, Claim};
use kraken_kit::reconciler::{ReconcileError, Reconciler};
use kraken_kit::ring::Ownership;

/// Field manager of the hub's writes.
const MANAGER: &str = "kraken-hub";

/// The kind as metrics and logs name it.
const LABEL: &str = "DependencyRequest.core.kraken.dev";

/// Held while one StateDeclaration is read (see [`Hub::declaration`]).
type Gate = Arc<tokio::sync::Mutex<()>>;

/// Why a resolution stopped. What a reference cannot resolve is no failure of the pass (it is
/// reported on the request, and the watches of what it reads wake it).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Tried again; the log line shows the API server's answer after this
    /// (`kit::errors::chain`).
    #[error("kubernetes API request failed")]
    Api(#[from] kube::Error),
    /// Tried again. Its term (leader or shard member) lapsed: the replica holding it now resolves the
    /// request, or this one once renewed.
    #[error(transparent)]
    Fenced(#[from] Fenced),
    /// The Secret of its sensitive values exists and another object controls it (reported on
    /// the request; it waits for a change rather than taking the Secret over).
    #[error("{0}")]
    NotOwned(String),
}

impl ReconcileError for Error {
    fn reason(&self) -> &str {
        match self {
            Error::Api(e) => e.reason(),
            Error::Fenced(e) => e.reason(),
            Error::NotOwned(_) => reason::NOT_OWNED,
        }
    }

    fn is_transient(&self) -> bool {
        !matches!(self, Error::NotOwned(_))
    }
}

/// The DependencyRequest controller's context: the kit (its client, metrics, readiness and
/// the fence its writes pass), the index, and what it caches between passes.
pub struct Hub {
    pub kit: Arc<Kit>,
    pub index: Arc<Index>,
    /// Requests to resolve again: the other members of a cycle one request found.
    retrigger: tokio::sync::mpsc::UnboundedSender<ObjectRef<DependencyRequest>>,
    retriggered: std::sync::Mutex<
        Option<tokio::sync::mpsc::UnboundedReceiver<ObjectRef<DependencyRequest>>>,
    >,
    /// The resourceVersion of every StateDeclaration, from the metadata watch.
    versions: std::sync::OnceLock<reflector::Store<PartialObjectMeta<StateDeclaration>>>,
    /// StateDeclarations read, by (namespace, name), with their resourceVersion: one producer
    /// read by a thousand requests is fetched once per change, not a thousand times.
    declarations: std::sync::Mutex<HashMap<(String, String), (String, StateDeclaration)>>,
    /// One gate per StateDeclaration being read, so concurrent misses make one GET.
    fetching: std::sync::Mutex<HashMap<(String, String), Gate>>,
    /// `--shards auto`: the share of consumers whose requests this replica resolves (every
    /// replica indexes every request; only the consumer's owner writes its resolution).
    shard: Option<tokio::sync::watch::Receiver<(Ownership, u64)>>,
}

impl std::ops::Deref for Hub {
    type Target = Kit;
    fn deref(&self) -> &Kit {
        &self.kit
    }
}

impl Hub {
    /// The StateDeclaration `name` in `ns`: from the cache while its resourceVersion is the
    /// one the watch last saw, else read — once: when a producer's outputs change, the
    /// thousand requests that read it wait for one GET instead of each making their own.
    async fn declaration(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<StateDeclaration>, kube::Error> {
        let key = (ns.to_owned(), name.to_owned());
        if let Some(sd) = self.cached_declaration(&key) {
            return Ok(Some(sd));
        }
        let gate = self
            .fetching
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        let _turn = gate.lock().await;
        // Whoever held the gate before may have read it meanwhile.
        if let Some(sd) = self.cached_declaration(&key) {
            return Ok(Some(sd));
        }
        let sd = Api::<StateDeclaration>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await?;
        let mut cache = self.declarations.lock().unwrap_or_else(|e| e.into_inner());
        match &sd {
            Some(sd) => {
                let rv = sd.metadata.resource_version.clone().unwrap_or_default();
                cache.insert(key, (rv, sd.clone()));
            }
            None => {
                self.fetching
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&key);
                cache.remove(&key);
            }
        }
        Ok(sd)
    }

    /// The cached StateDeclaration `key`, if the watch has seen no newer version of it.
    fn cached_declaration(&self, key: &(String, String)) -> Option<StateDeclaration> {
        let current = self
            .versions
            .get()
            .and_then(|s| s.get(&ObjectRef::new(&key.1).within(&key.0)))
            .and_then(|m| m.metadata.resource_version.clone())?;
        let cache = self.declarations.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(key)
            .filter(|(rv, _)| *rv == current)
            .map(|(_, sd)| sd.clone())
    }

    /// A hub over `kit`: resolutions are written only while its fence passes (this replica's
    /// term, leader or shard member), and its cache reports to its readiness.
    pub fn new(kit: Arc<Kit>, index: Arc<Index>) -> Self {
        let (retrigger, rx) = tokio::sync::mpsc::unbounded_channel();
        Self {
            kit,
            index,
            retrigger,
            retriggered: std::sync::Mutex::new(Some(rx)),
            versions: std::sync::OnceLock::new(),
            declarations: std::sync::Mutex::default(),
            fetching: std::sync::Mutex::default(),
            shard: None,
        }
    }

    /// The same hub resolving only the requests of consumers `shard` owns.
    pub fn with_shard(self, shard: tokio::sync::watch::Receiver<(Ownership, u64)>) -> Self {
        Self {
            shard: Some(shard),
            ..self
        }
    }

    /// Whether this replica resolves `dr`: its consumer (controlling owner) is in this
    /// replica's share, or sharding is off.
    fn resolves(&self, dr: &DependencyRequest) -> bool {
        let Some(shard) = &self.shard else {
            return true;
        };
        let owners = dr.metadata.owner_references.iter().flatten();
        let uid = owners
            .clone()
            .find(|o| o.controller == Some(true))
            .or_else(|| owners.clone().next())
            .map(|o| o.uid.as_str())
            .or(dr.metadata.uid.as_deref())
            .unwrap_or_default();
        shard.borrow().0.owns(uid)
    }

    /// A stream that ticks whenever this replica's share changes (never without sharding).
    fn share_changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.shard.clone(), |rx| async move {
            let mut rx = rx?;
            rx.changed().await.ok()?;
            Some(((), Some(rx)))
        })
    }
}

/// Runs the DependencyRequest controller, resolving at most `concurrency` requests at once,
/// until `shutdown` resolves.
pub async fn run(
    hub: Arc<Hub>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = hub.client.clone();
    let (reader, writer) = reflector::store();
    hub.index.serve_requests(reader.clone());
    let requests = request_changes(hub.client.clone(), hub.index.clone(), writer);
    let again = hub
        .retriggered
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let cfg = watcher::Config::default().any_semantic();
    let (versions, versions_writer) = reflector::store();
    let _ = hub.versions.set(versions);
    let sds = watcher(
        Api::<PartialObjectMeta<StateDeclaration>>::all(client.clone()),
        cfg.clone(),
    )
    .default_backoff()
    .reflect(versions_writer)
    .touched_objects();
    let cluster_wide = sources_cluster_wide(&client).await;
    let cms =
        source_changes::<ConfigMap>(client.clone(), cfg.clone(), reader.clone(), cluster_wide);
    // State Secrets are never referenced (their values reach others through StateDeclarations),
    // and every apply rewrites one: the API server filters them out of this watch.
    let secret_cfg = cfg.fields(&format!("type!={}", kraken_core_kinds::STATE_SECRET_TYPE));
    let secrets =
        source_changes::<Secret>(client.clone(), secret_cfg, reader.clone(), cluster_wide);
    tracing::info!("starting the dependency hub");
    let _pending = spawn_pending_gauge(reader.clone(), hub.metrics.clone());
    let _synced = {
        let mut cache = hub.readiness.cache(LABEL);
        let reader = reader.clone();
        AbortOnDrop(tokio::spawn(async move {
            if kraken_kit::readiness::store_synced(&reader).await {
                cache.synced();
            }
            std::future::pending::<()>().await;
        }))
    };
    let controller = Controller::for_stream(requests, reader)
        .reconcile_on(retriggered(again))
        .reconcile_all_on(hub.share_changes())
        .watches_stream(
            sds,
            readers(SourceKind::StateDeclaration, hub.index.clone()),
        )
        .watches_stream(cms, readers(SourceKind::ConfigMap, hub.index.clone()))
        .watches_stream(secrets, readers(SourceKind::Secret, hub.index.clone()))
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown);
    kraken_kit::reconciler::drive(controller, hub).await;
    tracing::info!("dependency hub stopped");
}

/// Whether this identity may watch Secrets and ConfigMaps in every namespace (an administrator's
/// kubeconfig may; the chart's ServiceAccount may not, it is granted them per namespace).
async fn sources_cluster_wide(client: &kube::Client) -> bool {
    use kraken_kit::access::{Access, first_denied};
    let wanted = [
        ("secrets", "list"),
        ("secrets", "watch"),
        ("configmaps", "list"),
        ("configmaps", "watch"),
    ]
    .map(|(resource, verb)| Access {
        group: "",
        resource,
        verb,
    });
    match first_denied(client, &wanted).await {
        Ok(None) => true,
        Ok(Some(missing)) => {
            tracing::info!(%missing, "the hub watches Secrets and ConfigMaps namespace by namespace");
            false
        }
        Err(e) => {
            tracing::info!(
                "the hub watches Secrets and ConfigMaps namespace by namespace (could not ask: {e})"
            );
            false
        }
    }
}

/// The DependencyRequest controller in the shape every controller has
/// (`kraken_kit::reconciler`).
impl Reconciler for Hub {
    type Object = DependencyRequest;
    type Error = Error;

    fn kit(&self) -> &Kit {
        &self.kit
    }

    fn kind(&self) -> &str {
        LABEL
    }

    async fn reconcile(self: Arc<Self>, dr: Arc<DependencyRequest>) -> Result<Action, Error> {
        let ns = dr.namespace().unwrap_or_default();
        let name = dr.name_any();
        resolve_request(&dr, &self, &ns, &name).await
    }
}

/// Gather → resolve → write.
async fn resolve_request(
    dr: &DependencyRequest,
    hub: &Hub,
    ns: &str,
    name: &str,
) -> Result<Action, Error> {
    let parsed: Vec<(&ValueReference, Result<Parsed, Failure>)> = dr
        .spec
        .references
        .iter()
        .map(|r| (r, parse(r, ns, &|kind| hub.index.groups_of(kind))))
        .collect();
    // A kind no running controller has yet (its Provider is still installing) wakes nothing
    // when it arrives: look again later.
    let kind_missing = parsed
        .iter()
        .any(|(_, p)| p.as_ref().is_err_and(|f| f.reason == reason::NOT_FOUND));
    hub.index.register(ns, name, objects_read(&parsed));
    if !hub.resolves(dr) {
        return Ok(Action::await_change());
    }
    // A replica whose term lapsed writes nothing: the one holding it now resolves the request
    // (or this one, once renewed).
    hub.fence.check()?;
    let (resolution, published) = match cycle(hub, dr, ns, name) {
        Some(failure) => {
            let failures = vec![failure];
            (
                Resolution {
                    failures,
                    ..Resolution::default()
                },
                None,
            )
        }
        None => {
            let sources = gather::gather(hub, ns, &parsed).await?;
            (resolve(&parsed, &sources), newest_publication(&sources))
        }
    };
    let (status, refused) = write_values(hub, dr, ns, name, resolution).await?;
    let changed = dr.status.as_ref().map(|s| &s.values) != Some(&status.values);
    write_status(hub, dr, ns, name, status).await?;
    if let Some(refused) = refused {
        return Err(refused);
    }
    if let Some(at) = published.filter(|_| changed) {
        let age = k8s_openapi::jiff::Timestamp::now().duration_since(at);
        hub.metrics.hub_propagated(age.as_secs_f64());
    }
    Ok(if kind_missing {
        Action::requeue(std::time::Duration::from_secs(30))
    } else {
        Action::await_change()
    })
}

/// When the newest of the StateDeclarations read was published (their producers stamp it).
fn newest_publication(sources: &Sources) -> Option<k8s_openapi::jiff::Timestamp> {
    sources
        .declarations
        .values()
        .flatten()
        .filter_map(|sd| {
            sd.metadata
                .annotations
                .as_ref()?
                .get(PUBLISHED_AT_ANNOTATION)?
                .parse()
                .ok()
        })
        .max()
}

/// The objects the parsed references read, for the index.
fn objects_read(parsed: &[(&ValueReference, Result<Parsed, Failure>)]) -> Vec<ObjectKey> {
    let mut objects: Vec<ObjectKey> = parsed
        .iter()
        .filter_map(|(_, p)| p.as_ref().ok())
        .flat_map(|p| p.sources().into_iter().map(Source::object))
        .collect();
    objects.sort();
    objects.dedup();
    objects
}

/// The cycle request `name` is part of, as a failure; the other members are resolved again
/// when this request first finds it.
fn cycle(hub: &Hub, dr: &DependencyRequest, ns: &str, name: &str) -> Option<Failure> {
    let cycle = find_cycle(name, &|n| hub.index.declarations_read_by(ns, n))?;
    // The other members may have been resolved before this one was known: again, once
    // (when this request first finds the cycle, so two members do not ping-pong).
    let known = dr.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == READY && c.reason == reason::CYCLE)
    });
    for member in &cycle {
        if !known && *member != name {
            let _ = hub
                .retrigger
                .send(ObjectRef::<DependencyRequest>::new(member).within(ns));
        }
    }
    Some(Failure::new(
        reason::CYCLE,
        format!("the references form a cycle: {}", cycle.join(" → ")),
    ))
}

/// The request's next status from `resolution`, after writing its sensitive values into its
/// Secret (when it resolved and they changed); with the refusal to report, when that Secret is
/// another's.
async fn write_values(
    hub: &Hub,
    dr: &DependencyRequest,
    ns: &str,
    name: &str,
    resolution: Resolution,
) -> Result<(DependencyRequestStatus, Option<Error>), kube::Error> {
    let mut status = DependencyRequestStatus {
        observed_generation: dr.metadata.generation,
        ..Default::default()
    };
    let update = if let Some(first) = resolution.failures.first() {
        let message = resolution
            .failures
            .iter()
            .take(5)
            .map(|f| f.message.clone())
            .collect::<Vec<_>>()
            .join("; ");
        Set::new(READY, false, first.reason, message)
    } else {
        status.values = resolution.values;
        let sensitive = resolution.sensitive;
        if !sensitive.is_empty() {
            let secret = values_secret_name(name);
            match write_values_secret(hub, dr, ns, &secret, &sensitive).await {
                // New sensitive values leave the status as it was (they are only in the
                // Secret), so no change of the request would wake the consumer: wake it here.
                Ok(true) => hub.index.request_changed(dr),
                Ok(false) => {}
                Err(e) if ownership::is_refusal(&e) => {
                    let message = ownership::refusal_message(&e, &format!("Secret {secret}"));
                    let update = Set::new(READY, false, reason::NOT_OWNED, message.clone());
                    let old = dr.status.clone().unwrap_or_default();
                    status.conditions = conditions::merge(
                        &old.conditions,
                        &[update],
                        dr.metadata.generation,
                        &conditions::now(),
                    );
                    return Ok((status, Some(Error::NotOwned(message))));
                }
                Err(e) => return Err(e),
            }
            status.secret_name = Some(secret);
            status.sensitive_paths = sensitive.keys().cloned().collect();
        }
        Set::new(
            READY,
            true,
            reason::RESOLVED,
            format!("{} references resolved", dr.spec.references.len()),
        )
    };
    let old = dr.status.clone().unwrap_or_default();
    let now = conditions::now();
    status.conditions = conditions::merge(&old.conditions, &[update], dr.metadata.generation, &now);
    Ok((status, None))
}

/// Writes `status` unless the request already says it.
async fn write_status(
    hub: &Hub,
    dr: &DependencyRequest,
    ns: &str,
    name: &str,
    status: DependencyRequestStatus,
) -> Result<(), kube::Error> {
    if dr.status.clone().unwrap_or_default() == status {
        return Ok(());
    }
    // Every field written, `null` included: a value that went away must be cleared.
    let status = json!({
        "observedGeneration": status.observed_generation,
        "conditions": status.conditions,
        "values": status.values,
        "secretName": status.secret_name,
        "sensitivePaths": status.sensitive_paths,
    });
    let api = Api::<DependencyRequest>::namespaced(hub.client.clone(), ns);
    kraken_kit::status::merge(&api, &hub.metrics, "dependencyrequests", name, &status).await?;
    Ok(())
}

/// Writes the request's sensitive values (path → JSON text) into its Secret, if they changed;
/// says whether it wrote.
async fn write_values_secret(
    hub: &Hub,
    dr: &DependencyRequest,
    ns: &str,
    name: &str,
    values: &BTreeMap<String, String>,
) -> Result<bool, kube::Error> {
    let api: Api<Secret> = Api::namespaced(hub.client.clone(), ns);
    let data: BTreeMap<String, ByteString> = values
        .iter()
        .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
        .collect();
    let owner = dr.controller_owner_ref(&());
    if let Some(existing) = api.get_opt(name).await? {
        if let Some(owner) = &owner
            && let Claim::Foreign(whose) = ownership::claim(&existing.metadata, owner)
        {
            return Err(ownership::refusal(&format!("Secret {name}"), &whose));
        }
        if existing.data.as_ref() == Some(&data) {
            return Ok(false);
        }
    }
    super::apply_owned_secret(&api, (&hub.metrics, MANAGER), (ns, name), owner, data).await?;
    Ok(true)
}

mod gather;

#[cfg(test)]
mod tests;

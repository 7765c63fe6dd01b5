//! The DependencyRequest controller, and the consumer's side of a request.
//!
//! The controller resolves every reference of a request ([`super::parse`], then the objects
//! they read), converts each value to its argument's type and writes the values into status,
//! sensitive ones into the Secret `<request>-values` the request owns. It watches the
//! metadata of StateDeclarations, ConfigMaps and Secrets and maps each change through the
//! [`Index`] to the requests that read the object, so a change upstream re-resolves exactly
//! those, at once; nothing polls.
//!
//! A consumer calls [`request_values`] in its reconcile (the seven steps of the reference
//! design: build the spec → get → delete if empty → create → update → wait if not ready →
//! use the values), reading its request from the hub's cache, and is woken when it changes
//! ([`consumer_triggers`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::{Stream, StreamExt as _};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource as _, ResourceExt as _};
use serde_json::{Value as Json, json};

use super::{
    CONSUMER_GROUP_LABEL, CONSUMER_KIND_LABEL, Failure, Index, ObjectKey, Parsed, Part, Source,
    SourceKind, convert, find_cycle, lookup, object_key, parse, reason, to_text,
    values_secret_name,
};
use crate::core_kinds::hub::{
    DependencyRequest, DependencyRequestSpec, DependencyRequestStatus, ObjectReference,
    ResolvedValue, StateDeclaration, ValueReference,
};
use crate::kit::conditions::{self, READY, Set};
use crate::kit::metrics::Metrics;

/// Field manager of the hub's writes.
const MANAGER: &str = "kraken-hub";

/// Held while one StateDeclaration is read (see [`Hub::declaration`]).
type Gate = Arc<tokio::sync::Mutex<()>>;

pub struct Hub {
    pub client: Client,
    pub index: Arc<Index>,
    pub metrics: Arc<Metrics>,
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

    pub fn new(client: Client, index: Arc<Index>, metrics: Arc<Metrics>) -> Self {
        let (retrigger, rx) = tokio::sync::mpsc::unbounded_channel();
        Self {
            client,
            index,
            metrics,
            retrigger,
            retriggered: std::sync::Mutex::new(Some(rx)),
            versions: std::sync::OnceLock::new(),
            declarations: std::sync::Mutex::default(),
            fetching: std::sync::Mutex::default(),
        }
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
    let api: Api<DependencyRequest> = Api::all(client.clone());
    let (reader, writer) = reflector::store();
    hub.index.serve_requests(reader.clone());
    let seen = hub.clone();
    let requests = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .reflect(writer)
        .inspect(move |ev| match ev {
            Ok(watcher::Event::Delete(dr)) => {
                let (ns, name) = (dr.namespace().unwrap_or_default(), dr.name_any());
                seen.index.forget(&ns, &name);
                seen.index.request_changed(dr);
            }
            Ok(watcher::Event::Apply(dr) | watcher::Event::InitApply(dr)) => {
                seen.index.request_changed(dr);
            }
            _ => {}
        })
        .touched_objects();
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
    let cms = watcher(
        Api::<PartialObjectMeta<ConfigMap>>::all(client.clone()),
        cfg.clone(),
    )
    .default_backoff()
    .touched_objects();
    // State Secrets are never referenced (their values reach others through StateDeclarations),
    // and every apply rewrites one: the API server filters them out of this watch.
    let secret_cfg = cfg.fields(&format!("type!={}", crate::core_kinds::STATE_SECRET_TYPE));
    let secrets = watcher(
        Api::<PartialObjectMeta<Secret>>::all(client.clone()),
        secret_cfg,
    )
    .default_backoff()
    .touched_objects();
    tracing::info!("starting the dependency hub");
    let rx = hub
        .retriggered
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let again = futures::stream::unfold(rx, |rx| async move {
        let mut rx = rx?;
        let next = rx.recv().await?;
        Some((next, Some(rx)))
    });
    Controller::for_stream(requests, reader)
        .reconcile_on(again)
        .watches_stream(
            sds,
            readers(SourceKind::StateDeclaration, hub.index.clone()),
        )
        .watches_stream(cms, readers(SourceKind::ConfigMap, hub.index.clone()))
        .watches_stream(secrets, readers(SourceKind::Secret, hub.index.clone()))
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, hub)
        .for_each(|res| {
            if let Err(err) = res {
                tracing::debug!("dependency hub: {err}");
            }
            std::future::ready(())
        })
        .await;
    tracing::info!("dependency hub stopped");
}

/// Maps a change of an object of `kind` to the requests that read it.
fn readers<K>(
    kind: SourceKind,
    index: Arc<Index>,
) -> impl Fn(PartialObjectMeta<K>) -> std::vec::IntoIter<ObjectRef<DependencyRequest>>
+ Send
+ Sync
+ 'static {
    move |meta: PartialObjectMeta<K>| {
        let ns = meta.metadata.namespace.clone().unwrap_or_default();
        let name = meta.metadata.name.clone().unwrap_or_default();
        index
            .readers(&ns, &ObjectKey(kind, name))
            .into_iter()
            .map(|r| ObjectRef::<DependencyRequest>::new(&r).within(&ns))
            .collect::<Vec<_>>()
            .into_iter()
    }
}

fn error_policy(_: Arc<DependencyRequest>, err: &kube::Error, _: Arc<Hub>) -> Action {
    tracing::warn!("dependency hub: {err}; retrying");
    Action::requeue(std::time::Duration::from_secs(5))
}

/// What one reconcile fetched, so a template or several paths read each object once.
#[derive(Default)]
struct Fetched {
    declarations: HashMap<String, Option<StateDeclaration>>,
    config_maps: HashMap<String, Option<ConfigMap>>,
    secrets: HashMap<String, Option<Secret>>,
}

/// A resolved value and whether it is sensitive.
struct Got {
    value: Json,
    sensitive: bool,
}

async fn reconcile(dr: Arc<DependencyRequest>, hub: Arc<Hub>) -> Result<Action, kube::Error> {
    let ns = dr.namespace().unwrap_or_default();
    let name = dr.name_any();
    let parsed: Vec<(&ValueReference, Result<Parsed, Failure>)> = dr
        .spec
        .references
        .iter()
        .map(|r| (r, parse(r, &ns)))
        .collect();
    let mut objects: Vec<ObjectKey> = parsed
        .iter()
        .filter_map(|(_, p)| p.as_ref().ok())
        .flat_map(|p| p.sources().into_iter().map(Source::object))
        .collect();
    objects.sort();
    objects.dedup();
    hub.index.register(&ns, &name, objects);

    let mut failures: Vec<Failure> = Vec::new();
    if let Some(cycle) = find_cycle(&name, &|n| hub.index.declarations_read_by(&ns, n)) {
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
                    .send(ObjectRef::<DependencyRequest>::new(member).within(&ns));
            }
        }
        failures.push(Failure::new(
            reason::CYCLE,
            format!("the references form a cycle: {}", cycle.join(" → ")),
        ));
    }
    let mut values = Vec::new();
    let mut sensitive: BTreeMap<String, String> = BTreeMap::new();
    if failures.is_empty() {
        let mut fetched = Fetched::default();
        for (r, p) in &parsed {
            let got = match p {
                Err(f) => Err(f.clone()),
                Ok(p) => resolve(&hub, &ns, &r.path, p, &mut fetched).await?,
            };
            let got = got.and_then(|g| {
                let secret = g.sensitive || r.sensitive;
                convert(&g.value, r.r#type.as_ref(), secret)
                    .map(|value| Got {
                        value,
                        sensitive: secret,
                    })
                    .map_err(|m| Failure::new(reason::TYPE_MISMATCH, format!("{}: {m}", r.path)))
            });
            match got {
                Ok(Got {
                    value,
                    sensitive: true,
                }) => {
                    sensitive.insert(r.path.clone(), value.to_string());
                }
                Ok(Got { value, .. }) => values.push(ResolvedValue {
                    path: r.path.clone(),
                    value,
                }),
                Err(f) => failures.push(f),
            }
        }
    }

    let mut status = DependencyRequestStatus {
        observed_generation: dr.metadata.generation,
        ..Default::default()
    };
    let update = if let Some(first) = failures.first() {
        let message = failures
            .iter()
            .take(5)
            .map(|f| f.message.clone())
            .collect::<Vec<_>>()
            .join("; ");
        Set::new(READY, false, first.reason, message)
    } else {
        status.values = values;
        if !sensitive.is_empty() {
            let secret = values_secret_name(&name);
            if write_values_secret(&hub, &dr, &ns, &secret, &sensitive).await? {
                // New sensitive values leave the status as it was (they are only in the
                // Secret), so no change of the request would wake the consumer: wake it here.
                hub.index.request_changed(&dr);
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
    let now = crate::kit::conditions::now();
    status.conditions = conditions::merge(&old.conditions, &[update], dr.metadata.generation, &now);
    if old != status {
        hub.metrics.api_write("dependencyrequests", "patch-status");
        Api::<DependencyRequest>::namespaced(hub.client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "observedGeneration": status.observed_generation,
                    "conditions": status.conditions,
                    "values": status.values,
                    "secretName": status.secret_name,
                    "sensitivePaths": status.sensitive_paths,
                }})),
            )
            .await?;
    }
    Ok(Action::await_change())
}

/// Resolves one parsed reference. `Ok(Err(_))` is a failure to report; `Err` an API error.
async fn resolve(
    hub: &Hub,
    ns: &str,
    path: &str,
    p: &Parsed,
    fetched: &mut Fetched,
) -> Result<Result<Got, Failure>, kube::Error> {
    match p {
        Parsed::Single(source) => read(hub, ns, path, source, fetched).await,
        Parsed::Template(parts) => {
            let mut text = String::new();
            let mut secret = false;
            for part in parts {
                match part {
                    Part::Text(t) => text.push_str(t),
                    Part::Ref(source) => match read(hub, ns, path, source, fetched).await? {
                        Ok(g) => {
                            secret |= g.sensitive;
                            text.push_str(&to_text(&g.value));
                        }
                        Err(f) => return Ok(Err(f)),
                    },
                }
            }
            Ok(Ok(Got {
                value: Json::String(text),
                sensitive: secret,
            }))
        }
    }
}

async fn read(
    hub: &Hub,
    ns: &str,
    path: &str,
    source: &Source,
    fetched: &mut Fetched,
) -> Result<Result<Got, Failure>, kube::Error> {
    let client = &hub.client;
    let not_found = |what: String| {
        Ok(Err(Failure::new(
            reason::NOT_FOUND,
            format!("{path}: {what} not found"),
        )))
    };
    match source {
        Source::Output {
            declaration,
            path: out,
        } => {
            let sd = match fetched.declarations.get(declaration) {
                Some(sd) => sd.clone(),
                None => {
                    let sd = hub.declaration(ns, declaration).await?;
                    fetched.declarations.insert(declaration.clone(), sd.clone());
                    sd
                }
            };
            let Some(sd) = sd else {
                return not_found(format!(
                    "StateDeclaration {declaration} (its producer does not exist or has not published outputs yet)"
                ));
            };
            let first = out.split('.').next().unwrap_or_default();
            if let Some(sens) = sd
                .spec
                .sensitive
                .as_ref()
                .filter(|s| s.keys.iter().any(|k| k == first))
            {
                let Some(text) = secret_text(client, ns, &sens.secret_name, first, fetched).await?
                else {
                    return Ok(Err(Failure::new(
                        reason::NOT_FOUND,
                        format!(
                            "{path}: the sensitive outputs of {declaration} (Secret {}) are missing",
                            sens.secret_name
                        ),
                    )));
                };
                let doc: Json = serde_json::from_str(&text).unwrap_or(Json::String(text));
                let rest = out.split_once('.').map(|(_, r)| r);
                let v = match rest {
                    None => Some(&doc),
                    Some(r) => lookup(&doc, r),
                };
                return Ok(match v {
                    Some(v) => Ok(Got {
                        value: v.clone(),
                        sensitive: true,
                    }),
                    None => Err(Failure::new(
                        reason::PATH_NOT_FOUND,
                        format!("{path}: {declaration} has no output {out}"),
                    )),
                });
            }
            Ok(match lookup(&sd.spec.outputs, out) {
                Some(v) => Ok(Got {
                    value: v.clone(),
                    sensitive: false,
                }),
                None => Err(Failure::new(
                    reason::PATH_NOT_FOUND,
                    format!(
                        "{path}: {declaration} has no output {out} (it has: {})",
                        output_names(&sd.spec.outputs)
                    ),
                )),
            })
        }
        Source::ConfigMap { name, key } => {
            let cm = match fetched.config_maps.get(name) {
                Some(cm) => cm.clone(),
                None => {
                    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
                        .get_opt(name)
                        .await?;
                    fetched.config_maps.insert(name.clone(), cm.clone());
                    cm
                }
            };
            let Some(cm) = cm else {
                return not_found(format!("ConfigMap {name}"));
            };
            Ok(match cm.data.as_ref().and_then(|d| d.get(key)) {
                Some(v) => Ok(Got {
                    value: Json::String(v.clone()),
                    sensitive: false,
                }),
                None => Err(Failure::new(
                    reason::PATH_NOT_FOUND,
                    format!("{path}: ConfigMap {name} has no key {key}"),
                )),
            })
        }
        Source::Secret { name, key } => {
            if !secret_exists(client, ns, name, fetched).await? {
                return not_found(format!("Secret {name}"));
            }
            Ok(match secret_text(client, ns, name, key, fetched).await? {
                Some(v) => Ok(Got {
                    value: Json::String(v),
                    sensitive: true,
                }),
                None => Err(Failure::new(
                    reason::PATH_NOT_FOUND,
                    format!("{path}: Secret {name} has no key {key}"),
                )),
            })
        }
    }
}

fn output_names(outputs: &Json) -> String {
    match outputs {
        Json::Object(m) if !m.is_empty() => m.keys().cloned().collect::<Vec<_>>().join(", "),
        _ => "none".into(),
    }
}

async fn fetch_secret(
    client: &Client,
    ns: &str,
    name: &str,
    fetched: &mut Fetched,
) -> Result<Option<Secret>, kube::Error> {
    if let Some(s) = fetched.secrets.get(name) {
        return Ok(s.clone());
    }
    let s = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?;
    fetched.secrets.insert(name.to_owned(), s.clone());
    Ok(s)
}

async fn secret_exists(
    client: &Client,
    ns: &str,
    name: &str,
    fetched: &mut Fetched,
) -> Result<bool, kube::Error> {
    Ok(fetch_secret(client, ns, name, fetched).await?.is_some())
}

/// A Secret key's value as text; `None` when the Secret or key is missing (or not UTF-8).
async fn secret_text(
    client: &Client,
    ns: &str,
    name: &str,
    key: &str,
    fetched: &mut Fetched,
) -> Result<Option<String>, kube::Error> {
    let Some(s) = fetch_secret(client, ns, name, fetched).await? else {
        return Ok(None);
    };
    let bytes = s
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            s.string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|v| v.clone().into_bytes())
        });
    Ok(bytes.and_then(|b| String::from_utf8(b).ok()))
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
    if let Some(existing) = api.get_opt(name).await?
        && existing.data.as_ref() == Some(&data)
    {
        return Ok(false);
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            owner_references: dr.controller_owner_ref(&()).map(|o| vec![o]),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                "kraken".to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    hub.metrics.api_write("secrets", "apply");
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(serde_json::to_value(&secret).map_err(kube::Error::SerdeError)?),
    )
    .await?;
    Ok(true)
}

// ---- the consumer's side ----

/// Where a consumer's request stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// No references: no request (an old one was deleted).
    None,
    /// Resolved: (path, value) pairs, sensitive ones included, and the paths that are
    /// sensitive.
    Ready {
        values: Vec<(String, Json)>,
        sensitive: Vec<String>,
    },
    /// Not yet, or not resolvable: the request's reason and message.
    Waiting { reason: String, message: String },
}

/// The consumer's steps: make its DependencyRequest (named like its StateDeclaration) say
/// `references`, and return the values once the hub has resolved them. `consumer` must carry
/// the consumer's uid (the request is owned by it); `group` labels the request so the
/// consumer's controller can watch its requests.
pub async fn request_values(
    client: &Client,
    metrics: &Metrics,
    index: &Index,
    ns: &str,
    consumer: &ObjectReference,
    group: &str,
    references: Vec<ValueReference>,
) -> Result<Values, kube::Error> {
    let name = object_key(&consumer.kind, &consumer.name);
    let api: Api<DependencyRequest> = Api::namespaced(client.clone(), ns);
    // From the hub's cache, which has at least the change that woke this consumer. A stale
    // spec there costs one patch that changes nothing; a request the cache does not have yet
    // one create answered 409.
    let existing = match index.request(ns, &name) {
        Some(dr) => dr,
        None => api.get_opt(&name).await?.map(Arc::new),
    };
    if references.is_empty() {
        if existing.is_some() {
            drop_request(client, metrics, ns, &name).await?;
        }
        return Ok(Values::None);
    }
    let spec = DependencyRequestSpec {
        consumer: consumer.clone(),
        references,
    };
    let waiting = |message: String| Values::Waiting {
        reason: "WaitingForDependencies".into(),
        message,
    };
    let Some(dr) = existing else {
        let mut dr = DependencyRequest::new(&name, spec);
        dr.metadata.namespace = Some(ns.to_owned());
        dr.metadata.labels = Some(BTreeMap::from([
            (CONSUMER_GROUP_LABEL.to_owned(), group.to_owned()),
            (CONSUMER_KIND_LABEL.to_owned(), consumer.kind.to_lowercase()),
        ]));
        dr.metadata.owner_references = Some(vec![OwnerReference {
            api_version: consumer.api_version.clone(),
            kind: consumer.kind.clone(),
            name: consumer.name.clone(),
            uid: consumer.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        metrics.api_write("dependencyrequests", "create");
        match api.create(&PostParams::default(), &dr).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
        return Ok(waiting("resolving references".into()));
    };
    if dr.spec != spec {
        metrics.api_write("dependencyrequests", "patch");
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await?;
        return Ok(waiting("resolving changed references".into()));
    }
    let Some(status) = dr
        .status
        .as_ref()
        .filter(|s| s.observed_generation == dr.metadata.generation)
    else {
        return Ok(waiting("resolving references".into()));
    };
    let Some(ready) = status.conditions.iter().find(|c| c.type_ == READY) else {
        return Ok(waiting("resolving references".into()));
    };
    if ready.status != crate::kit::conditions::ConditionStatus::True {
        return Ok(Values::Waiting {
            reason: ready.reason.clone(),
            message: ready.message.clone(),
        });
    }
    let mut out: Vec<(String, Json)> = status
        .values
        .iter()
        .map(|v| (v.path.clone(), v.value.clone()))
        .collect();
    if !status.sensitive_paths.is_empty() {
        let secret_name = status
            .secret_name
            .clone()
            .unwrap_or_else(|| values_secret_name(&name));
        let secret = Api::<Secret>::namespaced(client.clone(), ns)
            .get_opt(&secret_name)
            .await?;
        for p in &status.sensitive_paths {
            let text = secret
                .as_ref()
                .and_then(|s| s.data.as_ref())
                .and_then(|d| d.get(p))
                .and_then(|b| String::from_utf8(b.0.clone()).ok());
            let Some(text) = text else {
                return Ok(waiting(format!(
                    "the sensitive value for {p} is not in Secret {secret_name} yet"
                )));
            };
            out.push((
                p.clone(),
                serde_json::from_str(&text).unwrap_or(Json::String(text)),
            ));
        }
    }
    Ok(Values::Ready {
        values: out,
        sensitive: status.sensitive_paths.clone(),
    })
}

/// Deletes the consumer's request `name` and its values Secret (nothing garbage-collects
/// them where no controller manager runs).
pub async fn drop_request(
    client: &Client,
    metrics: &Metrics,
    ns: &str,
    name: &str,
) -> Result<(), kube::Error> {
    let dp = DeleteParams::default();
    metrics.api_write("dependencyrequests", "delete");
    match Api::<DependencyRequest>::namespaced(client.clone(), ns)
        .delete(name, &dp)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e),
    }
    match Api::<Secret>::namespaced(client.clone(), ns)
        .delete(&values_secret_name(name), &dp)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e),
    }
    Ok(())
}

/// The consumers (owner name, namespace) whose DependencyRequests change, for the consumer
/// kind `kind` of `group`, as the hub's watch sees them (see [`Index::subscribe`]).
pub fn consumer_triggers(
    index: &Index,
    group: &str,
    kind: &str,
) -> impl Stream<Item = (String, String)> + Send + 'static {
    tokio_stream::wrappers::UnboundedReceiverStream::new(index.subscribe(group, kind))
}

//! The dependency hub: resolving the values one object takes from others.
//!
//! A consumer (a managed resource with `spec.valuesFrom`, or a ConfigExport) writes a
//! [`DependencyRequest`] that lists its references, each with the Terraform type of the
//! argument it feeds. The hub controller ([`controller`]) resolves them — outputs of
//! StateDeclarations (which is what a `resource` reference names: `<kind>-<name>`), ConfigMap
//! and Secret keys, templates over those — converts each value with Terraform's conversion
//! rules, and writes the result into the request's status, sensitive values into a Secret the
//! request owns. It keeps an [`Index`] from each referenced object to the requests that read
//! it, so a change of that object re-resolves exactly those requests (a watch, never a poll).
//! The hub's watch of the requests wakes each consumer's controller when its request changes
//! (through the [`Index`], in-process), and the consumer reads the values from the hub's cache.
//!
//! This module holds the pure parts: parsing references and templates, walking paths,
//! converting, the index (with what the hub shares in-process: its request cache, the
//! consumers to wake, and what each producer last published) and cycle detection.

pub mod consumer;
pub mod controller;
pub mod export;
pub mod producer;

use std::collections::{BTreeSet, HashMap};
use std::sync::RwLock;

use serde_json::Value as Json;

use crate::core_kinds::hub::ValueReference;
use crate::value::Type;
use crate::value::kube::{from_kube_json, to_kube_json};

/// Condition reasons of a DependencyRequest (and, prefixed, of its consumer's `Ready`).
pub mod reason {
    pub const RESOLVED: &str = "Resolved";
    pub const NOT_FOUND: &str = "NotFound";
    pub const PATH_NOT_FOUND: &str = "PathNotFound";
    pub const TYPE_MISMATCH: &str = "TypeMismatch";
    pub const CYCLE: &str = "Cycle";
    pub const CROSS_NAMESPACE: &str = "CrossNamespace";
    pub const INVALID_REFERENCE: &str = "InvalidReference";
}

/// Label on a DependencyRequest: the API group of its consumer.
pub const CONSUMER_GROUP_LABEL: &str = "kraken.dev/consumer-group";
/// Label on a DependencyRequest: its consumer's kind, lowercased.
pub const CONSUMER_KIND_LABEL: &str = "kraken.dev/consumer-kind";
/// On a producer: delete it even while other objects still reference its outputs.
pub const FORCE_DELETE_ANNOTATION: &str = "kraken.dev/force-delete";

/// The name of the StateDeclaration (and of the DependencyRequest) of object `name` of `kind`.
pub fn object_key(kind: &str, name: &str) -> String {
    format!("{}-{}", kind.to_lowercase(), name.to_lowercase())
}

/// The Secret holding a DependencyRequest's sensitive values.
pub fn values_secret_name(request: &str) -> String {
    format!("{request}-values")
}

/// The Secret holding a StateDeclaration's sensitive outputs.
pub fn outputs_secret_name(declaration: &str) -> String {
    format!("{declaration}-outputs")
}

/// Why a reference could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: &'static str,
    pub message: String,
}

impl Failure {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// What a reference reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// An output of a StateDeclaration: (its name, a dotted path).
    Output {
        declaration: String,
        path: String,
    },
    ConfigMap {
        name: String,
        key: String,
    },
    Secret {
        name: String,
        key: String,
    },
}

impl Source {
    /// The object this source reads, for the index.
    pub fn object(&self) -> ObjectKey {
        match self {
            Source::Output { declaration, .. } => {
                ObjectKey(SourceKind::StateDeclaration, declaration.clone())
            }
            Source::ConfigMap { name, .. } => ObjectKey(SourceKind::ConfigMap, name.clone()),
            Source::Secret { name, .. } => ObjectKey(SourceKind::Secret, name.clone()),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Source::Output { declaration, path } => {
                format!("StateDeclaration {declaration} path {path}")
            }
            Source::ConfigMap { name, key } => format!("ConfigMap {name} key {key}"),
            Source::Secret { name, key } => format!("Secret {name} key {key}"),
        }
    }
}

/// The kinds of objects a reference can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKind {
    StateDeclaration,
    ConfigMap,
    Secret,
}

/// One object a reference reads, within a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(pub SourceKind, pub String);

/// A reference, parsed: one source, or a template of literal text and sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Single(Source),
    Template(Vec<Part>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    Ref(Source),
}

impl Parsed {
    pub fn sources(&self) -> Vec<&Source> {
        match self {
            Parsed::Single(s) => vec![s],
            Parsed::Template(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    Part::Ref(s) => Some(s),
                    Part::Text(_) => None,
                })
                .collect(),
        }
    }
}

/// Parses a reference; `namespace` is the consumer's (references must stay in it).
pub fn parse(r: &ValueReference, namespace: &str) -> Result<Parsed, Failure> {
    let cross = |ns: &Option<String>, what: &str| -> Result<(), Failure> {
        match ns.as_deref() {
            Some(other) if !other.is_empty() && other != namespace => Err(Failure::new(
                reason::CROSS_NAMESPACE,
                format!(
                    "{}: {what} is in namespace {other}; references must stay in namespace {namespace}",
                    r.path
                ),
            )),
            _ => Ok(()),
        }
    };
    let mut found = Vec::new();
    if let Some(res) = &r.resource {
        cross(&res.namespace, &format!("{} {}", res.kind, res.name))?;
        found.push(Parsed::Single(Source::Output {
            declaration: object_key(&res.kind, &res.name),
            path: res.path.clone(),
        }));
    }
    if let Some(sd) = &r.state_declaration {
        cross(&sd.namespace, &format!("StateDeclaration {}", sd.name))?;
        found.push(Parsed::Single(Source::Output {
            declaration: sd.name.clone(),
            path: sd.path.clone(),
        }));
    }
    if let Some(cm) = &r.config_map_key_ref {
        cross(&cm.namespace, &format!("ConfigMap {}", cm.name))?;
        found.push(Parsed::Single(Source::ConfigMap {
            name: cm.name.clone(),
            key: cm.key.clone(),
        }));
    }
    if let Some(s) = &r.secret_key_ref {
        cross(&s.namespace, &format!("Secret {}", s.name))?;
        found.push(Parsed::Single(Source::Secret {
            name: s.name.clone(),
            key: s.key.clone(),
        }));
    }
    if let Some(t) = &r.template {
        found.push(Parsed::Template(parse_template(t).map_err(|m| {
            Failure::new(reason::INVALID_REFERENCE, format!("{}: {m}", r.path))
        })?));
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        n => Err(Failure::new(
            reason::INVALID_REFERENCE,
            format!(
                "{}: a reference takes its value from exactly one source, found {n}",
                r.path
            ),
        )),
    }
}

/// Parses `${kind:...}` references in a template; `$${` is a literal `${`.
///
/// `${resource:KIND/NAME:PATH}`, `${stateDeclaration:NAME:PATH}`, `${configMap:NAME:KEY}`,
/// `${secret:NAME:KEY}`.
pub fn parse_template(t: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = t;
    while let Some(i) = rest.find("${") {
        if rest[..i].ends_with('$') {
            text.push_str(&rest[..i - 1]);
            text.push_str("${");
            rest = &rest[i + 2..];
            continue;
        }
        text.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed ${{ in template {t:?}"))?;
        let inner = &after[..end];
        if !text.is_empty() {
            parts.push(Part::Text(std::mem::take(&mut text)));
        }
        parts.push(Part::Ref(template_source(inner)?));
        rest = &after[end + 1..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}

fn template_source(inner: &str) -> Result<Source, String> {
    let usage = "expected ${resource:KIND/NAME:PATH}, ${stateDeclaration:NAME:PATH}, ${configMap:NAME:KEY} or ${secret:NAME:KEY}";
    let mut it = inner.splitn(3, ':');
    let (kind, a, b) = match (it.next(), it.next(), it.next()) {
        (Some(k), Some(a), Some(b)) if !a.is_empty() && !b.is_empty() => (k, a, b),
        _ => return Err(format!("${{{inner}}}: {usage}")),
    };
    Ok(match kind {
        "resource" => {
            let (k, n) = a
                .split_once('/')
                .filter(|(k, n)| !k.is_empty() && !n.is_empty())
                .ok_or_else(|| format!("${{{inner}}}: {usage}"))?;
            Source::Output {
                declaration: object_key(k, n),
                path: b.to_owned(),
            }
        }
        "stateDeclaration" => Source::Output {
            declaration: a.to_owned(),
            path: b.to_owned(),
        },
        "configMap" => Source::ConfigMap {
            name: a.to_owned(),
            key: b.to_owned(),
        },
        "secret" => Source::Secret {
            name: a.to_owned(),
            key: b.to_owned(),
        },
        _ => return Err(format!("${{{inner}}}: unknown source {kind:?}; {usage}")),
    })
}

/// The value at a dotted path (object keys, list indices) below `doc`.
pub fn lookup<'a>(doc: &'a Json, path: &str) -> Option<&'a Json> {
    let mut at = doc;
    for seg in path.split('.') {
        at = match at {
            Json::Object(m) => m.get(seg)?,
            Json::Array(items) => items.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

/// Text of a value for a template or a ConfigMap: strings as they are, other scalars as
/// Terraform prints them, structures as JSON.
pub fn to_text(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        Json::Null => String::new(),
        Json::Bool(_) | Json::Number(_) => v.to_string(),
        _ => v.to_string(),
    }
}

/// Converts `value` to the Terraform type `ty` (Terraform's JSON type description; none or
/// `"dynamic"` takes the value as it is) with Terraform's rules: numbers and bools to
/// strings, numeric and `true`/`false` strings back. Text read from a ConfigMap, Secret or
/// template is parsed as JSON when the type is a collection or object. A sensitive value is
/// not quoted in the error.
pub fn convert(value: &Json, ty: Option<&Json>, sensitive: bool) -> Result<Json, String> {
    let Some(ty_json) = ty else {
        return Ok(value.clone());
    };
    let ty = Type::from_json(ty_json).map_err(|e| format!("invalid type {ty_json}: {e}"))?;
    if ty == Type::Dynamic {
        return Ok(value.clone());
    }
    let parsed;
    let value = match value {
        Json::String(s) if !ty.is_primitive() => {
            parsed = serde_json::from_str::<Json>(s).unwrap_or_else(|_| value.clone());
            &parsed
        }
        _ => value,
    };
    match from_kube_json(value, &ty) {
        Ok(v) => Ok(to_kube_json(&v)),
        Err(_) if sensitive => Err(format!(
            "expected {}, got a {} (the value is sensitive and not shown)",
            type_name(&ty),
            json_kind(value)
        )),
        Err(e) => {
            let at = e.path.to_string();
            if at.is_empty() {
                Err(format!(
                    "expected {}, got {} {}",
                    type_name(&ty),
                    json_kind(value),
                    short(value)
                ))
            } else {
                Err(format!("at {at}: {}", e.message))
            }
        }
    }
}

fn type_name(ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::Number => "number".into(),
        Type::String => "string".into(),
        other => other.to_json_string(),
    }
}

/// The JSON kind of a value, as Terraform would name it.
pub fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "bool",
        Json::Number(_) => "number",
        Json::String(_) => "string",
        Json::Array(_) => "list",
        Json::Object(_) => "object",
    }
}

fn short(v: &Json) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

/// Which DependencyRequests read which objects, per namespace: the hub's field index. A
/// change of an object re-resolves exactly the requests listed for it.
#[derive(Debug, Default)]
pub struct Index {
    inner: RwLock<IndexInner>,
    /// What this process last published for each producer (by uid): digests of its
    /// StateDeclaration spec and of its sensitive outputs. Kept in memory only (a digest of
    /// sensitive values is never written anywhere); after a restart the objects are read
    /// and compared once instead.
    published: std::sync::Mutex<HashMap<String, Published>>,
    /// The DependencyRequests as the hub's watch last saw them, while the hub runs: consumers
    /// read their request here rather than from the API server.
    requests: std::sync::Mutex<
        Option<kube::runtime::reflector::Store<crate::core_kinds::hub::DependencyRequest>>,
    >,
    /// Consumer controllers waiting for their requests' changes.
    subscribers: std::sync::Mutex<Vec<Subscriber>>,
}

/// A consumer controller (its kind's group and lowercased kind) and where to send the
/// consumers (name, namespace) whose request changed.
#[derive(Debug)]
struct Subscriber {
    group: String,
    kind: String,
    tx: tokio::sync::mpsc::UnboundedSender<(String, String)>,
}

/// Digests of what a producer last published (see [`Index::published`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    pub spec: u64,
    /// Of the sensitive outputs; `None` when there were none.
    pub secret: Option<u64>,
}

#[derive(Debug, Default)]
struct IndexInner {
    by_object: HashMap<(String, ObjectKey), BTreeSet<String>>,
    by_request: HashMap<(String, String), Vec<ObjectKey>>,
}

impl Index {
    /// Records that request `name` in `ns` reads `objects` (replacing what it read before).
    pub fn register(&self, ns: &str, name: &str, objects: Vec<ObjectKey>) {
        let Ok(mut inner) = self.inner.write() else {
            return;
        };
        let key = (ns.to_owned(), name.to_owned());
        if inner.by_request.get(&key) == Some(&objects) {
            return;
        }
        if let Some(old) = inner.by_request.remove(&key) {
            for o in old {
                let k = (ns.to_owned(), o);
                if let Some(set) = inner.by_object.get_mut(&k) {
                    set.remove(name);
                    if set.is_empty() {
                        inner.by_object.remove(&k);
                    }
                }
            }
        }
        for o in &objects {
            inner
                .by_object
                .entry((ns.to_owned(), o.clone()))
                .or_default()
                .insert(name.to_owned());
        }
        inner.by_request.insert(key, objects);
    }

    /// Forgets request `name` in `ns` (deleted).
    pub fn forget(&self, ns: &str, name: &str) {
        self.register(ns, name, Vec::new());
        if let Ok(mut inner) = self.inner.write() {
            inner.by_request.remove(&(ns.to_owned(), name.to_owned()));
        }
    }

    /// What this process last published for the producer `uid`.
    pub fn published(&self, uid: &str) -> Option<Published> {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .copied()
    }

    /// Records what was published for `uid`; `None` forgets it (the producer is gone).
    pub fn set_published(&self, uid: &str, what: Option<Published>) {
        let mut map = self.published.lock().unwrap_or_else(|e| e.into_inner());
        match what {
            Some(p) => {
                map.insert(uid.to_owned(), p);
            }
            None => {
                map.remove(uid);
            }
        }
    }

    /// Serves the hub's request cache (each time the hub starts).
    pub fn serve_requests(
        &self,
        store: kube::runtime::reflector::Store<crate::core_kinds::hub::DependencyRequest>,
    ) {
        *self.requests.lock().unwrap_or_else(|e| e.into_inner()) = Some(store);
    }

    /// Request `name` in `ns` from the hub's cache: `None` while the hub's watch has not
    /// listed the requests yet (read it from the API server then), `Some(None)` when there is
    /// no such request.
    pub fn request(
        &self,
        ns: &str,
        name: &str,
    ) -> Option<Option<std::sync::Arc<crate::core_kinds::hub::DependencyRequest>>> {
        use futures::FutureExt as _;
        let store = self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()?;
        store.wait_until_ready().now_or_never()?.ok()?;
        Some(store.get(&kube::runtime::reflector::ObjectRef::new(name).within(ns)))
    }

    /// The consumers of `kind` in `group` (their name and namespace) whose request changed, as
    /// the hub's watch sees the changes — after its cache has them, so a consumer reading its
    /// request in [`Index::request`] sees at least the change that woke it.
    pub fn subscribe(
        &self,
        group: &str,
        kind: &str,
    ) -> tokio::sync::mpsc::UnboundedReceiver<(String, String)> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Subscriber {
                group: group.to_owned(),
                kind: kind.to_lowercase(),
                tx,
            });
        rx
    }

    /// Wakes the consumer of `dr` (the hub's watch saw it change).
    pub fn request_changed(&self, dr: &crate::core_kinds::hub::DependencyRequest) {
        let labels = dr.metadata.labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k)).cloned().unwrap_or_default();
        let (group, kind) = (label(CONSUMER_GROUP_LABEL), label(CONSUMER_KIND_LABEL));
        let Some(ns) = dr.metadata.namespace.clone() else {
            return;
        };
        let owner = dr
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind.to_lowercase() == kind);
        let Some(owner) = owner else {
            return;
        };
        let mut subs = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        // A closed channel is a controller that stopped: forget it.
        subs.retain(|s| {
            if s.group != group || s.kind != kind {
                return !s.tx.is_closed();
            }
            s.tx.send((owner.name.clone(), ns.clone())).is_ok()
        });
    }

    /// Forgets everything published (on becoming leader: another replica may have published
    /// meanwhile).
    pub fn forget_published(&self) {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The requests in `ns` that read `object`.
    pub fn readers(&self, ns: &str, object: &ObjectKey) -> Vec<String> {
        self.inner
            .read()
            .ok()
            .and_then(|i| {
                i.by_object
                    .get(&(ns.to_owned(), object.clone()))
                    .map(|s| s.iter().cloned().collect())
            })
            .unwrap_or_default()
    }

    /// The StateDeclarations request `name` reads (its edges in the dependency graph).
    pub fn declarations_read_by(&self, ns: &str, name: &str) -> Vec<String> {
        self.inner
            .read()
            .ok()
            .and_then(|i| {
                i.by_request
                    .get(&(ns.to_owned(), name.to_owned()))
                    .map(|v| {
                        v.iter()
                            .filter(|o| o.0 == SourceKind::StateDeclaration)
                            .map(|o| o.1.clone())
                            .collect()
                    })
            })
            .unwrap_or_default()
    }
}

/// A cycle through `start`: each object's request reads the next one's StateDeclaration
/// (request and declaration share the name `<kind>-<name>`). `edges` gives the declarations a
/// request reads. Returns the cycle as names, `start` first and last.
pub fn find_cycle(start: &str, edges: &dyn Fn(&str) -> Vec<String>) -> Option<Vec<String>> {
    fn dfs(
        node: &str,
        start: &str,
        edges: &dyn Fn(&str) -> Vec<String>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in edges(node) {
            if next == start {
                path.push(next);
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if dfs(&next, start, edges, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_owned()];
    let mut seen = BTreeSet::new();
    dfs(start, start, edges, &mut path, &mut seen).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core_kinds::hub::{KeySource, ResourceSource};
    use serde_json::json;

    fn request(
        ns: &str,
        name: &str,
        group: &str,
        kind: &str,
        owner: &str,
    ) -> crate::core_kinds::hub::DependencyRequest {
        let mut dr = crate::core_kinds::hub::DependencyRequest::new(
            name,
            crate::core_kinds::hub::DependencyRequestSpec {
                consumer: Default::default(),
                references: Vec::new(),
            },
        );
        dr.metadata.namespace = Some(ns.into());
        dr.metadata.labels = Some(
            [
                (CONSUMER_GROUP_LABEL.to_owned(), group.to_owned()),
                (CONSUMER_KIND_LABEL.to_owned(), kind.to_lowercase()),
            ]
            .into(),
        );
        dr.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: format!("{group}/v1alpha1"),
                kind: kind.into(),
                name: owner.into(),
                uid: "u".into(),
                ..Default::default()
            },
        ]);
        dr
    }

    #[test]
    fn request_changes_wake_the_consumer_kind_that_owns_them() {
        let index = Index::default();
        let mut objects = index.subscribe("fixture.tf.kraken.dev", "Object");
        let mut exports = index.subscribe("core.kraken.dev", "ConfigExport");
        index.request_changed(&request(
            "ns",
            "object-a",
            "fixture.tf.kraken.dev",
            "Object",
            "a",
        ));
        index.request_changed(&request(
            "ns",
            "configexport-b",
            "core.kraken.dev",
            "ConfigExport",
            "b",
        ));
        assert_eq!(
            objects.try_recv().ok(),
            Some(("a".to_owned(), "ns".to_owned()))
        );
        assert!(objects.try_recv().is_err(), "one wake-up per change");
        assert_eq!(
            exports.try_recv().ok(),
            Some(("b".to_owned(), "ns".to_owned()))
        );
        // A stopped controller (its receiver dropped) is forgotten on the next change.
        drop(exports);
        index.request_changed(&request(
            "ns",
            "configexport-c",
            "core.kraken.dev",
            "ConfigExport",
            "c",
        ));
        let left = index
            .subscribers
            .lock()
            .map(|s| s.len())
            .unwrap_or_default();
        assert_eq!(left, 1);
    }

    #[test]
    fn requests_come_from_the_hub_cache_once_it_has_listed() {
        use kube::runtime::watcher::Event;
        let index = Index::default();
        assert_eq!(
            index.request("ns", "object-a"),
            None,
            "no hub running: read the API"
        );
        let (reader, mut writer) = kube::runtime::reflector::store();
        index.serve_requests(reader);
        assert_eq!(
            index.request("ns", "object-a"),
            None,
            "not listed yet: read the API"
        );
        let dr = request("ns", "object-a", "fixture.tf.kraken.dev", "Object", "a");
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(dr.clone()));
        writer.apply_watcher_event(&Event::InitDone);
        let got = index.request("ns", "object-a").flatten();
        assert_eq!(got.map(|d| d.metadata.name.clone()), Some(dr.metadata.name));
        assert_eq!(
            index.request("ns", "object-b"),
            Some(None),
            "listed and absent"
        );
    }

    #[test]
    fn published_digests_are_remembered_per_producer_and_cleared_on_leadership() {
        let index = Index::default();
        let p = Published {
            spec: 1,
            secret: Some(2),
        };
        index.set_published("uid-a", Some(p));
        assert_eq!(index.published("uid-a"), Some(p));
        index.set_published("uid-a", None);
        assert_eq!(index.published("uid-a"), None);
        index.set_published("uid-b", Some(p));
        index.forget_published();
        assert_eq!(index.published("uid-b"), None);
    }

    #[test]
    fn templates_parse_references_and_escapes() {
        let parts = parse_template("http://${resource:Pet/web:id}:${configMap:ports:http}/$${x}")
            .expect("valid");
        assert_eq!(
            parts,
            vec![
                Part::Text("http://".into()),
                Part::Ref(Source::Output {
                    declaration: "pet-web".into(),
                    path: "id".into()
                }),
                Part::Text(":".into()),
                Part::Ref(Source::ConfigMap {
                    name: "ports".into(),
                    key: "http".into()
                }),
                Part::Text("/${x}".into()),
            ]
        );
        assert!(parse_template("${oops").is_err());
        assert!(parse_template("${resource:Pet:id}").is_err());
        assert!(
            parse_template("${other:a:b}")
                .expect_err("must fail")
                .contains("unknown source")
        );
    }

    #[test]
    fn references_stay_in_their_namespace() {
        let r = ValueReference {
            path: "prefix".into(),
            resource: Some(ResourceSource {
                kind: "Pet".into(),
                name: "a".into(),
                path: "id".into(),
                namespace: Some("other".into()),
            }),
            ..Default::default()
        };
        assert_eq!(
            parse(&r, "team").expect_err("must fail").reason,
            reason::CROSS_NAMESPACE
        );
        let r = ValueReference {
            path: "prefix".into(),
            config_map_key_ref: Some(KeySource {
                name: "c".into(),
                key: "k".into(),
                namespace: Some("team".into()),
            }),
            ..Default::default()
        };
        assert!(parse(&r, "team").is_ok());
        let none = ValueReference {
            path: "x".into(),
            ..Default::default()
        };
        assert_eq!(
            parse(&none, "team").expect_err("must fail").reason,
            reason::INVALID_REFERENCE
        );
    }

    #[test]
    fn conversion_follows_terraform() {
        let s = json!("string");
        let n = json!("number");
        assert_eq!(convert(&json!(5), Some(&s), false), Ok(json!("5")));
        assert_eq!(convert(&json!("7"), Some(&n), false), Ok(json!(7)));
        assert_eq!(
            convert(&json!("true"), Some(&json!("bool")), false),
            Ok(json!(true))
        );
        let err = convert(&json!("seven"), Some(&n), false).expect_err("must fail");
        assert!(
            err.contains("expected number") && err.contains("seven"),
            "{err}"
        );
        let hidden = convert(&json!("hunter2"), Some(&n), true).expect_err("must fail");
        assert!(!hidden.contains("hunter2"), "{hidden}");
        assert_eq!(
            convert(&json!("[1,2]"), Some(&json!(["list", "string"])), false),
            Ok(json!(["1", "2"]))
        );
        assert_eq!(convert(&json!({"a": 1}), None, false), Ok(json!({"a": 1})));
        assert_eq!(
            convert(&json!({"a": 1}), Some(&json!("dynamic")), false),
            Ok(json!({"a": 1}))
        );
    }

    #[test]
    fn lookup_walks_objects_and_lists() {
        let doc = json!({"instances": [{"privateIp": "10.0.0.1"}], "tags": {"a.b": 1}});
        assert_eq!(
            lookup(&doc, "instances.0.privateIp"),
            Some(&json!("10.0.0.1"))
        );
        assert_eq!(lookup(&doc, "instances.1"), None);
        assert_eq!(lookup(&doc, "missing"), None);
    }

    #[test]
    fn index_tracks_readers_and_cycles_are_found() {
        let idx = Index::default();
        let sd = |n: &str| ObjectKey(SourceKind::StateDeclaration, n.into());
        idx.register("ns", "object-b", vec![sd("pet-a")]);
        idx.register("ns", "object-c", vec![sd("pet-a"), sd("object-b")]);
        assert_eq!(
            idx.readers("ns", &sd("pet-a")),
            vec!["object-b", "object-c"]
        );
        assert!(idx.readers("other", &sd("pet-a")).is_empty());
        idx.register("ns", "object-c", vec![sd("object-b")]);
        assert_eq!(idx.readers("ns", &sd("pet-a")), vec!["object-b"]);
        idx.forget("ns", "object-b");
        assert!(idx.readers("ns", &sd("pet-a")).is_empty());

        idx.register("ns", "a", vec![sd("b")]);
        idx.register("ns", "b", vec![sd("c")]);
        idx.register("ns", "c", vec![sd("a")]);
        let edges = |n: &str| idx.declarations_read_by("ns", n);
        assert_eq!(
            find_cycle("a", &edges),
            Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
        idx.register("ns", "c", vec![]);
        assert_eq!(find_cycle("a", &edges), None);
    }
}

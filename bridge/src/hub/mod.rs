//! The dependency hub (DESIGN §5): resolving the values one object takes from others.
//!
//! A consumer (a managed resource with `spec.valuesFrom`, or a ConfigExport) writes a
//! [`DependencyRequest`] that lists its references, each with the Terraform type of the
//! argument it feeds. The hub controller ([`controller`]) resolves them — outputs of
//! StateDeclarations (which is what a `resource` reference names: `<kind>-<name>`), ConfigMap
//! and Secret keys, templates over those — converts each value with Terraform's conversion
//! rules, and writes the result into the request's status, sensitive values into a Secret the
//! request owns. It keeps an [`Index`] from each referenced object to the requests that read
//! it, so a change of that object re-resolves exactly those requests (a watch, never a poll).
//! The consumer's controller watches its requests and picks the values up.
//!
//! This module holds the pure parts: parsing references and templates, walking paths,
//! converting, the index and cycle detection.

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

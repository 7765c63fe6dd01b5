//! A stateful, in-memory Kubernetes API server for unit tests: a `kube::Client` whose requests
//! never leave the process, so a controller's reconcile runs end to end, synchronously, in
//! milliseconds. `tests/tests/contract_api.rs` runs one script of requests against this fake
//! and against a real kube-apiserver and compares the answers, so what a unit test sees here is
//! what the real server does, for the cases that script covers.
//!
//! What it keeps: objects by (API path prefix, plural, namespace, name) with `uid`,
//! `resourceVersion` (changed only by a write that changes something), `managedFields` and,
//! for the kinds that have one, `generation` (custom resources and most built-in kinds, not
//! ConfigMaps, Secrets, Leases or Events: bumped when anything but metadata changes, status
//! aside where a status subresource holds it, and when a deletion starts). A kind with a
//! status subresource (a custom resource whose CRD, stored here, declares one, or that has no
//! CRD stored; the built-in kinds that have one) drops status on create, ignores it on writes to
//! the main resource and takes only status through `/status`; any other kind answers 404 at
//! `/status`. Finalizers hold a deletion (`deletionTimestamp` set), and the write that removes
//! the last one deletes the object.
//!
//! Writes: create (409 AlreadyExists when taken); `PUT` (404 on a missing object, except the
//! kinds the server creates that way, such as Leases; 422 without a `resourceVersion` where the
//! server demands one, as for custom resources); JSON merge patch (and strategic merge patch,
//! approximated by it); JSON patch; and server-side apply with field ownership (`managed`):
//! conflicts (409 unless forced), fields a manager drops removed when nobody else owns them,
//! `ownerReferences` and `status.conditions` merged by key, finalizers as a set, other lists
//! atomic. A `resourceVersion` in a write, or a delete precondition (uid, resourceVersion),
//! must match or the request gets 409. A second controller owner reference is refused (422). A
//! delete answers a Status once the object is gone, the object while finalizers hold it. Lists
//! honour `labelSelector` equality and existence terms.
//!
//! What it does not do: watches (an empty list of events), admission, defaulting, pruning,
//! validation beyond the above, namespaces (a namespace need not exist). [`FakeApi::insert`]
//! puts an object in place with no field owners.
//!
//! Faults: [`FakeApi::fail_next`] makes the next matching request fail with a status code
//! (409 conflict, 500, ...), and [`FakeApi::requests`] lists every request for assertions on
//! what was written.

mod fields;
mod kinds;
mod managed;
mod patch;
mod request;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value as Json, json};

use kinds::Kind;
use managed::{Owners, Scope};
pub use patch::merge_patch;
use request::{Target, parse_path, query_param, selected};

/// One request the fake served: method, path (without query) and the status it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub method: String,
    pub path: String,
    pub status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    /// `/api/v1` or `/apis/<group>/<version>`.
    prefix: String,
    plural: String,
    namespace: String,
    name: String,
}

#[derive(Debug)]
struct Fault {
    method: String,
    path_contains: String,
    status: u16,
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<Key, Json>,
    version: u64,
    uids: u64,
    faults: VecDeque<Fault>,
    served: Vec<Served>,
}

/// The fake API server; clone it freely (all clones share one state).
#[derive(Debug, Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

/// What a request carries besides its path: method, query, content type, field manager.
struct Call {
    method: Method,
    query: String,
    content_type: String,
    user_agent: String,
    body: Json,
}

impl Call {
    /// The field manager of a write: named, or the user agent's product, or `unknown`, as
    /// the server picks it.
    fn manager(&self) -> String {
        let agent = self.user_agent.split('/').next().unwrap_or_default();
        query_param(&self.query, "fieldManager")
            .filter(|m| !m.is_empty())
            .or_else(|| (!agent.is_empty()).then(|| agent.to_owned()))
            .unwrap_or_else(|| "unknown".to_owned())
    }

    fn force(&self) -> bool {
        query_param(&self.query, "force").is_some_and(|f| f == "true")
    }
}

impl FakeApi {
    pub fn new() -> Self {
        Self::default()
    }

    /// A client whose requests this fake serves, with default namespace `default`.
    pub fn client(&self) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let api = api.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let (status, body) = api.serve(&parts.method, &parts.uri, &parts.headers, &bytes);
                let response = Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body.to_string())))
                    .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())));
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        kube::Client::new(service, "default")
    }

    /// The next request whose method is `method` and whose path contains `path_contains`
    /// fails with `status` (faults queue up in order).
    pub fn fail_next(&self, method: &str, path_contains: &str, status: u16) {
        self.lock().faults.push_back(Fault {
            method: method.to_uppercase(),
            path_contains: path_contains.to_owned(),
            status,
        });
    }

    /// Every request served so far.
    pub fn requests(&self) -> Vec<Served> {
        self.lock().served.clone()
    }

    /// How many writes (anything but GET) reached a path containing `path_contains`.
    pub fn writes(&self, path_contains: &str) -> usize {
        self.lock()
            .served
            .iter()
            .filter(|s| s.method != "GET" && s.path.contains(path_contains))
            .count()
    }

    /// Puts `object` in place as if created through the API (`apiVersion`, `kind`,
    /// `metadata.name` and, for namespaced kinds, `metadata.namespace` must be set; a `uid`
    /// and a status are kept), with no field owners; `plural` names its collection. Returns
    /// the stored object.
    pub fn insert(&self, plural: &str, object: Json) -> Json {
        let api_version = object["apiVersion"].as_str().unwrap_or("v1").to_owned();
        let prefix = if api_version.contains('/') {
            format!("/apis/{api_version}")
        } else {
            format!("/api/{api_version}")
        };
        let key = Key {
            prefix,
            plural: plural.to_owned(),
            namespace: object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            name: object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        };
        let mut state = self.lock();
        let kind = state.kind(&key.prefix, plural);
        let stored = state.created(object, kind);
        state.objects.insert(key, stored.clone());
        stored
    }

    /// The stored object `name` in `namespace` ("" for cluster-scoped) of collection `plural`,
    /// whatever its group.
    pub fn get(&self, plural: &str, namespace: &str, name: &str) -> Option<Json> {
        self.lock()
            .objects
            .iter()
            .find(|(k, _)| k.plural == plural && k.namespace == namespace && k.name == name)
            .map(|(_, v)| v.clone())
    }

    /// Takes object `name` out of collection `plural`, as if deleted behind the code's back.
    pub fn remove(&self, plural: &str, namespace: &str, name: &str) -> Option<Json> {
        let mut state = self.lock();
        let key = state
            .objects
            .keys()
            .find(|k| k.plural == plural && k.namespace == namespace && k.name == name)
            .cloned()?;
        state.objects.remove(&key)
    }

    /// Every stored object of collection `plural`.
    pub fn list(&self, plural: &str) -> Vec<Json> {
        self.lock()
            .objects
            .iter()
            .filter(|(k, _)| k.plural == plural)
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn serve(
        &self,
        method: &Method,
        uri: &hyper::Uri,
        headers: &hyper::HeaderMap,
        body: &[u8],
    ) -> (StatusCode, Json) {
        let mut state = self.lock();
        let path = uri.path().to_owned();
        let fault = state
            .faults
            .iter()
            .position(|f| f.method == method.as_str() && path.contains(&f.path_contains));
        let (code, out) = match fault.and_then(|i| state.faults.remove(i)) {
            Some(f) => (f.status, status_body(f.status, "injected fault")),
            None => {
                let header = |name: &str| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                let call = Call {
                    method: method.clone(),
                    query: uri.query().unwrap_or_default().to_owned(),
                    content_type: header("content-type"),
                    user_agent: header("user-agent"),
                    body: serde_json::from_slice(body).unwrap_or(Json::Null),
                };
                state.handle(&path, &call)
            }
        };
        state.served.push(Served {
            method: method.as_str().to_owned(),
            path,
            status: code,
        });
        (
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            out,
        )
    }
}

/// A failure as the server answers it: a Status with the reason its code stands for.
fn status_body(code: u16, message: &str) -> Json {
    let reason = match code {
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        422 => "Invalid",
        _ => "InternalError",
    };
    failure(code, reason, message)
}

fn failure(code: u16, reason: &str, message: &str) -> Json {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
}

fn not_found(t: &Target, name: &str) -> (u16, Json) {
    (
        404,
        status_body(404, &format!("{} \"{name}\" not found", t.plural)),
    )
}

fn modified(t: &Target, name: &str) -> (u16, Json) {
    let message = format!(
        "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please \
         apply your changes to the latest version and try again",
        t.plural
    );
    (409, status_body(409, &message))
}

/// The object without metadata, and without status where a subresource holds it: what
/// `generation` tracks.
fn tracked_part(obj: &Json, kind: Kind) -> Json {
    let mut o = obj.clone();
    if let Json::Object(m) = &mut o {
        m.remove("metadata");
        if kind.status {
            m.remove("status");
        }
    }
    o
}

/// The refusal of an object with more than one controller owner reference, as the server's
/// validation words it.
fn second_controller(object: &Json) -> Option<String> {
    let controllers: Vec<String> = object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["controller"] == true)
        .map(|r| {
            format!(
                "{}/{}",
                r["kind"].as_str().unwrap_or_default(),
                r["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    (controllers.len() > 1).then(|| {
        format!(
            "{} \"{}\" is invalid: metadata.ownerReferences: Invalid value: the references: Only \
             one reference can have Controller set to true. Found \"true\" in references for {}",
            object["kind"].as_str().unwrap_or_default(),
            object["metadata"]["name"].as_str().unwrap_or_default(),
            controllers.join(" and ")
        )
    })
}

impl State {
    fn next_version(&mut self) -> String {
        self.version += 1;
        self.version.to_string()
    }

    fn kind(&self, prefix: &str, plural: &str) -> Kind {
        kinds::kind(prefix, plural, |name| {
            self.objects
                .iter()
                .find(|(k, _)| k.plural == "customresourcedefinitions" && k.name == name)
                .map(|(_, crd)| crd.clone())
        })
    }

    /// `object` as stored on create: identity, version, generation where the kind has one.
    fn created(&mut self, mut object: Json, kind: Kind) -> Json {
        self.uids += 1;
        let uid = format!("00000000-0000-0000-0000-{:012}", self.uids);
        let version = self.next_version();
        let meta = &mut object["metadata"];
        if meta["uid"].is_null() {
            meta["uid"] = json!(uid);
        }
        meta["resourceVersion"] = json!(version);
        meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        if kind.generation {
            meta["generation"] = json!(1);
        } else if let Some(m) = meta.as_object_mut() {
            m.remove("generation");
        }
        object
    }

    fn handle(&mut self, path: &str, call: &Call) -> (u16, Json) {
        let Some(t) = parse_path(path) else {
            return (404, status_body(404, &format!("no such path {path}")));
        };
        let kind = self.kind(&t.prefix, &t.plural);
        if t.status && !kind.status {
            return (
                404,
                status_body(404, "the server could not find the requested resource"),
            );
        }
        match (call.method.as_str(), &t.name) {
            ("GET", None) => self.list(&t, &call.query),
            ("GET", Some(name)) => match self.objects.get(&key(&t, name)) {
                Some(o) => (200, o.clone()),
                None => not_found(&t, name),
            },
            // The fake authorizes everything: an access review is answered, not stored.
            ("POST", None) if t.plural == "selfsubjectaccessreviews" => {
                let mut review = call.body.clone();
                review["status"] = json!({"allowed": true});
                (201, review)
            }
            ("POST", None) => self.create_posted(&t, kind, call),
            ("PUT", Some(name)) => self.put(&t, kind, name, call),
            ("PATCH", Some(name)) if call.content_type.contains("apply-patch") => {
                self.apply(&t, kind, name, call)
            }
            ("PATCH", Some(name)) => self.patch(&t, kind, name, call),
            ("DELETE", Some(name)) => self.delete(&t, kind, name, &call.body),
            _ => (405, status_body(405, "method not allowed")),
        }
    }

    fn list(&self, t: &Target, query: &str) -> (u16, Json) {
        if query_param(query, "watch").is_some_and(|w| w == "true" || w == "1") {
            return (200, json!({}));
        }
        let selector = query_param(query, "labelSelector").unwrap_or_default();
        let items: Vec<Json> = self
            .objects
            .iter()
            .filter(|(k, _)| {
                k.prefix == t.prefix
                    && k.plural == t.plural
                    && (t.namespace.is_empty() || k.namespace == t.namespace)
            })
            .map(|(_, v)| v)
            .filter(|v| selected(&v["metadata"]["labels"], &selector))
            .cloned()
            .collect();
        let version = self.version.to_string();
        (
            200,
            json!({"kind": "List", "apiVersion": "v1",
                   "metadata": {"resourceVersion": version}, "items": items}),
        )
    }

    /// The scope of a write to the main resource or its `/status`.
    fn scope(t: &Target, kind: Kind) -> Scope {
        match (t.status, kind.status) {
            (true, _) => Scope::Status,
            (false, true) => Scope::AllButStatus,
            (false, false) => Scope::Whole,
        }
    }

    fn create_posted(&mut self, t: &Target, kind: Kind, call: &Call) -> (u16, Json) {
        let name = call.body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if name.is_empty() {
            return (
                422,
                status_body(422, "metadata.name: Required value: name is required"),
            );
        }
        self.create(t, kind, &name, call, call.body.clone())
    }

    /// Creates `name` from `object`, owned by the caller's field manager (an update, or the
    /// apply `call` is).
    fn create(
        &mut self,
        t: &Target,
        kind: Kind,
        name: &str,
        call: &Call,
        object: Json,
    ) -> (u16, Json) {
        let k = key(t, name);
        if self.objects.contains_key(&k) {
            let message = format!("{} \"{name}\" already exists", t.plural);
            return (409, failure(409, "AlreadyExists", &message));
        }
        let mut obj = object;
        if let Some(m) = obj["metadata"].as_object_mut() {
            for server in [
                "uid",
                "resourceVersion",
                "managedFields",
                "deletionTimestamp",
            ] {
                m.remove(server);
            }
        }
        obj["metadata"]["name"] = json!(name);
        if !t.namespace.is_empty() {
            obj["metadata"]["namespace"] = json!(t.namespace);
        }
        let scope = Self::scope(t, kind);
        if scope != Scope::Whole
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        let mut owners = Owners::of(&json!({}));
        let stored = if call.content_type.contains("apply-patch") {
            match owners.apply(&call.manager(), scope, &json!({}), &obj, call.force()) {
                Ok(applied) => applied,
                Err(c) => return (409, status_body(409, &c.message())),
            }
        } else {
            owners.update(&call.manager(), scope, &json!({}), &obj);
            obj
        };
        if let Some(message) = second_controller(&stored) {
            return (422, status_body(422, &message));
        }
        let mut stored = self.created(stored, kind);
        owners.write(&mut stored);
        self.objects.insert(k, stored.clone());
        (201, stored)
    }

    fn put(&mut self, t: &Target, kind: Kind, name: &str, call: &Call) -> (u16, Json) {
        let Some(current) = self.objects.get(&key(t, name)).cloned() else {
            if kind.create_on_update && !t.status {
                return self.create(t, kind, name, call, call.body.clone());
            }
            return not_found(t, name);
        };
        match call.body["metadata"]["resourceVersion"].as_str() {
            None if !kind.unconditional_update => {
                let message = format!(
                    "{} \"{name}\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must \
                     be specified for an update",
                    t.plural
                );
                return (422, status_body(422, &message));
            }
            Some(v) if Some(v) != current["metadata"]["resourceVersion"].as_str() => {
                return modified(t, name);
            }
            _ => {}
        }
        self.update(t, kind, name, call, current, call.body.clone())
    }

    fn patch(&mut self, t: &Target, kind: Kind, name: &str, call: &Call) -> (u16, Json) {
        let Some(current) = self.objects.get(&key(t, name)).cloned() else {
            return not_found(t, name);
        };
        let mut next = current.clone();
        if call.content_type.contains("json-patch") {
            if let Err(m) = patch::json_patch(&mut next, &call.body) {
                return (422, status_body(422, &m));
            }
        } else {
            merge_patch(&mut next, &call.body);
        }
        if next["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
            return modified(t, name);
        }
        self.update(t, kind, name, call, current, next)
    }

    /// An update (`PUT` or a patch) of `current` to `next`, owned by the caller's manager.
    fn update(
        &mut self,
        t: &Target,
        kind: Kind,
        name: &str,
        call: &Call,
        current: Json,
        next: Json,
    ) -> (u16, Json) {
        let scope = Self::scope(t, kind);
        let next = settled(&current, next, scope);
        let mut owners = Owners::of(&current);
        owners.update(&call.manager(), scope, &current, &next);
        self.commit(t, kind, name, current, next, &owners)
    }

    fn apply(&mut self, t: &Target, kind: Kind, name: &str, call: &Call) -> (u16, Json) {
        let Some(current) = self.objects.get(&key(t, name)).cloned() else {
            if t.status {
                return not_found(t, name);
            }
            return self.create(t, kind, name, call, call.body.clone());
        };
        let wanted = &call.body["metadata"]["resourceVersion"];
        if !wanted.is_null() && *wanted != current["metadata"]["resourceVersion"] {
            return modified(t, name);
        }
        let scope = Self::scope(t, kind);
        let mut config = call.body.clone();
        if let Some(m) = config.as_object_mut() {
            match scope {
                Scope::Status => m.retain(|k, _| k == "status" || k == "apiVersion" || k == "kind"),
                Scope::AllButStatus => drop(m.remove("status")),
                Scope::Whole => {}
            }
        }
        let mut owners = Owners::of(&current);
        let live = without_server_fields(&current);
        let next = match owners.apply(&call.manager(), scope, &live, &config, call.force()) {
            Ok(next) => settled(&current, next, scope),
            Err(c) => return (409, status_body(409, &c.message())),
        };
        self.commit(t, kind, name, current, next, &owners)
    }

    /// Stores `next` (already settled) in place of `current`: generation, the controller
    /// check, a new resourceVersion when anything changed, and the deletion a write that
    /// removes the last finalizer of a deleting object finishes.
    fn commit(
        &mut self,
        t: &Target,
        kind: Kind,
        name: &str,
        current: Json,
        next: Json,
        owners: &Owners,
    ) -> (u16, Json) {
        let mut stored = next;
        owners.write(&mut stored);
        if kind.generation && tracked_part(&stored, kind) != tracked_part(&current, kind) {
            let g = current["metadata"]["generation"].as_i64().unwrap_or(0);
            stored["metadata"]["generation"] = json!(g + 1);
        }
        if let Some(message) = second_controller(&stored) {
            return (422, status_body(422, &message));
        }
        if stored == current {
            return (200, current);
        }
        let k = key(t, name);
        let deleting = !stored["metadata"]["deletionTimestamp"].is_null();
        let finalizers_empty = stored["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty);
        if deleting && finalizers_empty {
            // The server deletes it from what it held: no new version.
            self.objects.remove(&k);
            return (200, stored);
        }
        stored["metadata"]["resourceVersion"] = json!(self.next_version());
        self.objects.insert(k, stored.clone());
        (200, stored)
    }

    fn delete(&mut self, t: &Target, kind: Kind, name: &str, body: &Json) -> (u16, Json) {
        let k = key(t, name);
        let Some(current) = self.objects.get(&k).cloned() else {
            return not_found(t, name);
        };
        let pre = &body["preconditions"];
        for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
            let (want, have) = (&pre[field], &current["metadata"][field]);
            if !want.is_null() && have != want {
                let message = format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the {label} in the \
                     precondition ({}) does not match the {label} in record ({})",
                    t.plural,
                    want.as_str().unwrap_or_default(),
                    have.as_str().unwrap_or_default()
                );
                return (409, status_body(409, &message));
            }
        }
        let has_finalizers = current["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if !has_finalizers {
            self.objects.remove(&k);
            let uid = current["metadata"]["uid"].clone();
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Success", "details": {"name": name, "kind": t.plural, "uid": uid}});
            return (200, status);
        }
        if !current["metadata"]["deletionTimestamp"].is_null() {
            return (200, current);
        }
        let mut stored = current;
        stored["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:01Z");
        stored["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        if kind.generation {
            let g = stored["metadata"]["generation"].as_i64().unwrap_or(0);
            stored["metadata"]["generation"] = json!(g + 1);
        }
        stored["metadata"]["resourceVersion"] = json!(self.next_version());
        self.objects.insert(k, stored.clone());
        (200, stored)
    }
}

/// `next` as the server stores it in place of `current`: identity, versions, owners and
/// deletion are the server's; status comes from `next` only through `/status`, and only
/// status does.
fn settled(current: &Json, next: Json, scope: Scope) -> Json {
    let mut stored = match scope {
        Scope::Status => {
            let mut s = current.clone();
            set_or_remove(&mut s, "status", next.get("status").cloned());
            s
        }
        Scope::AllButStatus => {
            let mut s = next;
            set_or_remove(&mut s, "status", current.get("status").cloned());
            s
        }
        Scope::Whole => next,
    };
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
    ] {
        let value = current["metadata"].get(field).cloned();
        if let Some(meta) = stored["metadata"].as_object_mut() {
            match value {
                Some(v) => meta.insert(field.to_owned(), v),
                None => meta.remove(field),
            };
        }
    }
    stored
}

fn set_or_remove(object: &mut Json, field: &str, value: Option<Json>) {
    if let Some(m) = object.as_object_mut() {
        match value {
            Some(v) => m.insert(field.to_owned(), v),
            None => m.remove(field),
        };
    }
}

/// The object as an apply merges into it: without the server's own metadata.
fn without_server_fields(object: &Json) -> Json {
    let mut o = object.clone();
    if let Some(meta) = o["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    o
}

fn key(t: &Target, name: &str) -> Key {
    Key {
        prefix: t.prefix.clone(),
        plural: t.plural.clone(),
        namespace: t.namespace.clone(),
        name: name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::patch::json_patch;
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};

    fn cm(name: &str) -> ConfigMap {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"app": "x"}}, "data": {"k": "v"},
        }))
        .expect("config map")
    }

    #[tokio::test]
    async fn creates_reads_patches_and_lists() -> anyhow::Result<()> {
        let fake = FakeApi::new();
        let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
        let created = api.create(&PostParams::default(), &cm("a")).await?;
        // ConfigMaps have no generation, whatever changes.
        assert_eq!(created.metadata.generation, None);
        let again = api.create(&PostParams::default(), &cm("a")).await;
        assert!(matches!(again, Err(kube::Error::Api(e)) if e.code == 409));
        let patched = api
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"k": "w"}})),
            )
            .await?;
        assert_eq!(
            patched
                .data
                .as_ref()
                .and_then(|d| d.get("k"))
                .map(String::as_str),
            Some("w")
        );
        assert_eq!(patched.metadata.generation, None);
        assert_ne!(
            patched.metadata.resource_version,
            created.metadata.resource_version
        );
        let listed = api.list(&ListParams::default().labels("app=x")).await?;
        assert_eq!(listed.items.len(), 1);
        assert!(
            api.list(&ListParams::default().labels("app=y"))
                .await?
                .items
                .is_empty()
        );
        assert!(api.get_opt("missing").await?.is_none());
        Ok(())
    }

    #[tokio::test]
    async fn stale_versions_conflict_and_faults_fire_once() -> anyhow::Result<()> {
        let fake = FakeApi::new();
        let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
        let created = api.create(&PostParams::default(), &cm("a")).await?;
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await?;
        let stale = json!({"metadata": {"resourceVersion": created.metadata.resource_version}});
        let r = api
            .patch("a", &PatchParams::default(), &Patch::Merge(stale))
            .await;
        assert!(matches!(r, Err(kube::Error::Api(e)) if e.code == 409));
        fake.fail_next("PATCH", "/configmaps/a", 500);
        let r = api
            .patch("a", &PatchParams::default(), &Patch::Merge(json!({})))
            .await;
        assert!(matches!(r, Err(kube::Error::Api(e)) if e.code == 500));
        api.patch("a", &PatchParams::default(), &Patch::Merge(json!({})))
            .await?;
        assert_eq!(fake.writes("/configmaps"), 5);
        Ok(())
    }

    #[tokio::test]
    async fn finalizers_hold_deletion_and_preconditions_guard_it() -> anyhow::Result<()> {
        let fake = FakeApi::new();
        let api: Api<Secret> = Api::namespaced(fake.client(), "ns");
        let mut s: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "finalizers": ["f"]},
        }))?;
        s = api.create(&PostParams::default(), &s).await?;
        let wrong = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some("other".into()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let r = api.delete("s", &wrong).await;
        assert!(matches!(r, Err(kube::Error::Api(e)) if e.code == 409));
        api.delete("s", &DeleteParams::default()).await?;
        let held = api.get("s").await?;
        assert!(held.metadata.deletion_timestamp.is_some());
        let body = json!({"metadata": {"finalizers": []}});
        api.patch("s", &PatchParams::default(), &Patch::Merge(body))
            .await?;
        assert!(api.get_opt("s").await?.is_none());
        let _ = s;
        Ok(())
    }

    #[test]
    fn json_patch_tests_and_removes() {
        let mut doc = json!({"metadata": {"finalizers": ["a", "b"]}});
        let ops = json!([
            {"op": "test", "path": "/metadata/finalizers/1", "value": "b"},
            {"op": "remove", "path": "/metadata/finalizers/1"},
        ]);
        assert!(json_patch(&mut doc, &ops).is_ok());
        assert_eq!(doc, json!({"metadata": {"finalizers": ["a"]}}));
        let failing = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "z"}]);
        assert!(json_patch(&mut doc, &failing).is_err());
    }
}

//! A stateful, in-memory Kubernetes API server for unit tests: a `kube::Client` whose requests
//! never leave the process, so a controller's reconcile runs end to end, synchronously, in
//! milliseconds. End-to-end tests in `tests/` prove the same behaviour against a real
//! kube-apiserver; this fake exists to make failure paths cheap to reach.
//!
//! What it keeps: objects by (API path prefix, plural, namespace, name) with `uid`,
//! `resourceVersion`, `generation` (bumped when anything but metadata and status changes),
//! finalizers and deletion (an object with finalizers gets a `deletionTimestamp` and stays),
//! and a `/status` subresource (writes to the main resource leave status alone, writes to
//! `/status` change only status). Patches: JSON merge patch, JSON patch (add, remove, replace,
//! test), and server-side apply, approximated as a merge patch (no field ownership). A
//! `metadata.resourceVersion` in a write body, or a delete precondition, must match or the
//! write gets 409. Lists honour `labelSelector` equality and existence terms.
//!
//! What it does not do: watches (an empty list of events), admission, defaulting, pruning.
//!
//! Faults: [`FakeApi::fail_next`] makes the next matching request fail with a status code
//! (409 conflict, 500, ...), and [`FakeApi::requests`] lists every request for assertions on
//! what was written.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value as Json, json};

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
    /// `metadata.name` and, for namespaced kinds, `metadata.namespace` must be set); `plural`
    /// names its collection. Returns the stored object.
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
        let stored = state.created(object);
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
                let content_type = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                let query = uri.query().unwrap_or_default();
                state.handle(method, &path, query, content_type, body)
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

/// A parsed request path.
struct Target {
    prefix: String,
    plural: String,
    namespace: String,
    name: Option<String>,
    status: bool,
}

fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (prefix, rest) = match parts.first() {
        Some(&"api") if parts.len() >= 2 => (format!("/api/{}", parts[1]), &parts[2..]),
        Some(&"apis") if parts.len() >= 3 => {
            (format!("/apis/{}/{}", parts[1], parts[2]), &parts[3..])
        }
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => ((*ns).to_owned(), tail),
        _ => (String::new(), rest),
    };
    match rest {
        [plural] => Some(Target {
            prefix,
            plural: (*plural).to_owned(),
            namespace,
            name: None,
            status: false,
        }),
        [plural, name] => Some(Target {
            prefix,
            plural: (*plural).to_owned(),
            namespace,
            name: Some((*name).to_owned()),
            status: false,
        }),
        [plural, name, "status"] => Some(Target {
            prefix,
            plural: (*plural).to_owned(),
            namespace,
            name: Some((*name).to_owned()),
            status: true,
        }),
        _ => None,
    }
}

fn status_body(code: u16, message: &str) -> Json {
    let reason = match code {
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        _ => "InternalError",
    };
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `labels` satisfy a selector of `k=v`, `k!=v`, `k` and `!k` terms.
fn selected(labels: &Json, selector: &str) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            labels[k].as_str() != Some(v)
        } else if let Some((k, v)) = term.split_once('=') {
            labels[k.trim_end_matches('=')].as_str() == Some(v)
        } else if let Some(k) = term.strip_prefix('!') {
            labels.get(k).is_none()
        } else {
            labels.get(term).is_some()
        }
    })
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Json, patch: &Json) {
    match patch {
        Json::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            if let Json::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge_patch(t.entry(k.clone()).or_insert(Json::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// RFC 6902 JSON patch (add, remove, replace, test); `Err` with a message when an operation
/// fails.
fn json_patch(target: &mut Json, ops: &Json) -> Result<(), String> {
    for op in ops.as_array().into_iter().flatten() {
        let path = op["path"].as_str().unwrap_or_default();
        let pointer: Vec<String> = path
            .split('/')
            .skip(1)
            .map(|p| p.replace("~1", "/").replace("~0", "~"))
            .collect();
        match op["op"].as_str().unwrap_or_default() {
            "test" => {
                if target.pointer(path) != Some(&op["value"]) {
                    return Err(format!("test of {path} failed"));
                }
            }
            "remove" => {
                let (parent, last) = parent_of(target, &pointer)?;
                match parent {
                    Json::Object(m) => {
                        m.remove(&last).ok_or(format!("{path} not found"))?;
                    }
                    Json::Array(a) => {
                        let i: usize = last.parse().map_err(|_| format!("bad index {last}"))?;
                        if i >= a.len() {
                            return Err(format!("{path} not found"));
                        }
                        a.remove(i);
                    }
                    _ => return Err(format!("{path} not found")),
                }
            }
            kind @ ("add" | "replace") => {
                let value = op["value"].clone();
                if pointer.is_empty() {
                    *target = value;
                    continue;
                }
                let (parent, last) = parent_of(target, &pointer)?;
                match parent {
                    Json::Object(m) => {
                        if kind == "replace" && !m.contains_key(&last) {
                            return Err(format!("{path} not found"));
                        }
                        m.insert(last, value);
                    }
                    Json::Array(a) if last == "-" => a.push(value),
                    Json::Array(a) => {
                        let i: usize = last.parse().map_err(|_| format!("bad index {last}"))?;
                        if kind == "replace" && i < a.len() {
                            a[i] = value;
                        } else if i <= a.len() {
                            a.insert(i, value);
                        } else {
                            return Err(format!("{path} out of range"));
                        }
                    }
                    _ => return Err(format!("{path}: parent is not a container")),
                }
            }
            other => return Err(format!("unsupported op {other}")),
        }
    }
    Ok(())
}

fn parent_of<'a>(
    target: &'a mut Json,
    pointer: &[String],
) -> Result<(&'a mut Json, String), String> {
    let Some((last, parents)) = pointer.split_last() else {
        return Err("empty path".into());
    };
    let mut cur = target;
    for p in parents {
        cur = match cur {
            Json::Object(m) => m.get_mut(p).ok_or(format!("/{p} not found"))?,
            Json::Array(a) => {
                let i: usize = p.parse().map_err(|_| format!("bad index {p}"))?;
                a.get_mut(i).ok_or(format!("index {i} not found"))?
            }
            _ => return Err(format!("/{p}: not a container")),
        };
    }
    Ok((cur, last.clone()))
}

/// The object without metadata and status: what `generation` tracks.
fn spec_part(obj: &Json) -> Json {
    let mut o = obj.clone();
    if let Json::Object(m) = &mut o {
        m.remove("metadata");
        m.remove("status");
    }
    o
}

impl State {
    fn next_version(&mut self) -> String {
        self.version += 1;
        self.version.to_string()
    }

    /// `object` as stored on create: identity, version, generation.
    fn created(&mut self, mut object: Json) -> Json {
        self.uids += 1;
        let uid = format!("00000000-0000-0000-0000-{:012}", self.uids);
        let version = self.next_version();
        let meta = &mut object["metadata"];
        if meta["uid"].is_null() {
            meta["uid"] = json!(uid);
        }
        meta["resourceVersion"] = json!(version);
        meta["generation"] = json!(1);
        meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        object
    }

    fn handle(
        &mut self,
        method: &Method,
        path: &str,
        query: &str,
        content_type: &str,
        body: &[u8],
    ) -> (u16, Json) {
        let Some(t) = parse_path(path) else {
            return (404, status_body(404, &format!("no such path {path}")));
        };
        let body: Json = serde_json::from_slice(body).unwrap_or(Json::Null);
        match (method.as_str(), &t.name) {
            ("GET", None) => {
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
            ("GET", Some(name)) => match self.objects.get(&key(&t, name)) {
                Some(o) => (200, o.clone()),
                None => (
                    404,
                    status_body(404, &format!("{} {name} not found", t.plural)),
                ),
            },
            ("POST", None) => {
                let name = body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if name.is_empty() {
                    return (422, status_body(422, "metadata.name is required"));
                }
                let k = key(&t, &name);
                if self.objects.contains_key(&k) {
                    return (
                        409,
                        status_body(409, &format!("{} {name} already exists", t.plural)),
                    );
                }
                let mut obj = body;
                if !t.namespace.is_empty() {
                    obj["metadata"]["namespace"] = json!(t.namespace);
                }
                let stored = self.created(obj);
                self.objects.insert(k, stored.clone());
                (201, stored)
            }
            ("PUT", Some(name)) => self.write(&t, name, |_, _| Ok(body.clone()), true),
            ("PATCH", Some(name)) => {
                let apply = content_type.contains("apply-patch");
                let json_patch_kind = content_type.contains("json-patch");
                let create = apply;
                self.write(
                    &t,
                    name,
                    |current, _| {
                        let mut next = current.clone();
                        if json_patch_kind {
                            json_patch(&mut next, &body)?;
                        } else {
                            merge_patch(&mut next, &body);
                        }
                        Ok(next)
                    },
                    create,
                )
            }
            ("DELETE", Some(name)) => self.delete(&t, name, &body),
            _ => (405, status_body(405, "method not allowed")),
        }
    }

    /// A write of object `name`: `change` maps the current object (or `{}` when creating) to
    /// the next; the version precondition, status subresource and generation rules apply.
    fn write(
        &mut self,
        t: &Target,
        name: &str,
        change: impl FnOnce(&Json, bool) -> Result<Json, String>,
        create: bool,
    ) -> (u16, Json) {
        let k = key(t, name);
        let existing = self.objects.get(&k).cloned();
        let Some(current) = existing else {
            if !create {
                return (
                    404,
                    status_body(404, &format!("{} {name} not found", t.plural)),
                );
            }
            let mut obj = match change(&json!({}), true) {
                Ok(o) => o,
                Err(m) => return (422, status_body(422, &m)),
            };
            obj["metadata"]["name"] = json!(name);
            if !t.namespace.is_empty() {
                obj["metadata"]["namespace"] = json!(t.namespace);
            }
            let stored = self.created(obj);
            self.objects.insert(k, stored.clone());
            return (201, stored);
        };
        let next = match change(&current, false) {
            Ok(o) => o,
            Err(m) => return (422, status_body(422, &m)),
        };
        if let Some(wanted) = next["metadata"]["resourceVersion"].as_str()
            && Some(wanted) != current["metadata"]["resourceVersion"].as_str()
        {
            return (
                409,
                status_body(
                    409,
                    &format!("{} {name}: the object has been modified", t.plural),
                ),
            );
        }
        let mut stored = current.clone();
        if t.status {
            stored["status"] = next["status"].clone();
        } else {
            let status = current["status"].clone();
            stored = next;
            // Identity is the server's.
            for field in [
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
            ] {
                stored["metadata"][field] = current["metadata"][field].clone();
            }
            if status.is_null() {
                if let Json::Object(m) = &mut stored {
                    m.remove("status");
                }
            } else {
                stored["status"] = status;
            }
            if spec_part(&stored) != spec_part(&current) {
                let g = current["metadata"]["generation"].as_i64().unwrap_or(1);
                stored["metadata"]["generation"] = json!(g + 1);
            }
        }
        if stored == current {
            return (200, current);
        }
        stored["metadata"]["resourceVersion"] = json!(self.next_version());
        // A deleting object whose last finalizer went is gone.
        let deleting = !stored["metadata"]["deletionTimestamp"].is_null();
        let finalizers_empty = stored["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty);
        if deleting && finalizers_empty {
            self.objects.remove(&k);
        } else {
            self.objects.insert(k, stored.clone());
        }
        (200, stored)
    }

    fn delete(&mut self, t: &Target, name: &str, body: &Json) -> (u16, Json) {
        let k = key(t, name);
        let Some(current) = self.objects.get(&k).cloned() else {
            return (
                404,
                status_body(404, &format!("{} {name} not found", t.plural)),
            );
        };
        let pre = &body["preconditions"];
        for (field, want) in [
            ("uid", &pre["uid"]),
            ("resourceVersion", &pre["resourceVersion"]),
        ] {
            if !want.is_null() && current["metadata"][field] != *want {
                return (
                    409,
                    status_body(
                        409,
                        &format!("{} {name}: precondition on {field} failed", t.plural),
                    ),
                );
            }
        }
        let has_finalizers = current["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            let mut stored = current;
            if stored["metadata"]["deletionTimestamp"].is_null() {
                stored["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:01Z");
                stored["metadata"]["resourceVersion"] = json!(self.next_version());
            }
            self.objects.insert(k, stored.clone());
            (200, stored)
        } else {
            self.objects.remove(&k);
            (200, current)
        }
    }
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
        assert_eq!(created.metadata.generation, Some(1));
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
        assert_eq!(patched.metadata.generation, Some(2));
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

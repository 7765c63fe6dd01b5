//! Contract: `FakeApi` (kraken-kit's unit-test API server, behind its `fake` feature) answers
//! as the real kube-apiserver does. One script of requests, written once over `kube::Api`,
//! runs against a fresh `FakeApi` and against the API server of a local control plane
//! (`scripts/testenv.sh up`), and every answer is compared step by step: the status code and
//! reason of a refusal, or the relevant fields of the object returned (data, spec, status,
//! labels, finalizers, ownerReferences, generation, whether the resourceVersion changed, and
//! who owns which fields in `managedFields`).
//!
//! The cases are the ones unit tests over the fake lean on: server-side apply with two field
//! managers (a conflict, a forced apply, a dropped field removed, a shared field kept, an
//! update's fields taken over), ownerReferences merged by uid with a second controller refused,
//! `PUT` on a missing object, `generation` on ConfigMaps and on custom resources with and
//! without a status subresource, resourceVersion preconditions and uid preconditions on
//! delete.

use std::collections::BTreeMap;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kraken_kit::fake_api::FakeApi;
use kraken_tests::ControlPlane;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value as Json, json};

const NS: &str = "contract";
const GROUP: &str = "contract.kraken.dev";
const CRD_LABEL: &str = "contract.kraken.dev/suite=api";

/// What the script saw, step by step: (step, answer).
type Seen = Vec<(String, Json)>;

#[tokio::test]
async fn fake_api_answers_as_the_real_api_server() -> anyhow::Result<()> {
    let cp = ControlPlane::start("contract-api")?;
    cp.create_namespace(NS)?;
    let kubeconfig = Kubeconfig::read_from(&cp.kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("the control plane's kubeconfig")?;
    let real_client = kube::Client::try_from(config)?;
    install_crds(&real_client).await?;
    cp.wait_established(CRD_LABEL, "60s")?;
    served(&real_client).await?;
    let real = script(real_client).await?;

    let fake = FakeApi::new();
    install_crds(&fake.client()).await?;
    let faked = script(fake.client()).await?;

    // The real server's answers, for `--nocapture`.
    for (step, answer) in &real {
        eprintln!("{step}: {answer}");
    }
    exercised(&real)?;
    let mut differences = Vec::new();
    for (i, pair) in real.iter().zip(faked.iter()).enumerate() {
        let ((step, want), (fake_step, got)) = pair;
        ensure!(step == fake_step, "step {i}: {step} vs {fake_step}");
        if want != got {
            differences.push(format!(
                "{step}\n  real: {}\n  fake: {}",
                serde_json::to_string(want)?,
                serde_json::to_string(got)?
            ));
        }
    }
    ensure!(
        real.len() == faked.len(),
        "the two runs took different steps"
    );
    ensure!(
        differences.is_empty(),
        "FakeApi differs from kube-apiserver in {} of {} steps:\n{}",
        differences.len(),
        real.len(),
        differences.join("\n")
    );
    Ok(())
}

/// The real server's answers to the steps that exercise a refusal: the script reaches what
/// it says it tests (a script that refused nothing would compare two empty behaviours).
fn exercised(real: &Seen) -> anyhow::Result<()> {
    let want = [
        (
            "ssa: beta conflicts with alpha over a field alpha owns",
            409,
        ),
        ("owners: a second controller is refused", 422),
        ("put: a missing ConfigMap is not created", 404),
        ("put: a missing custom resource is not created", 404),
        ("gadget: no status subresource", 404),
        (
            "widget: an apply to /status conflicts with an update there",
            409,
        ),
        ("put: a Lease replaced with no resourceVersion", 422),
        (
            "versions: a custom resource replaced with no resourceVersion",
            422,
        ),
        ("versions: replace with a stale resourceVersion", 409),
        ("versions: merge patch with a stale resourceVersion", 409),
        ("versions: apply with a stale resourceVersion", 409),
        ("delete: a uid precondition that does not match", 409),
        (
            "delete: a resourceVersion precondition that does not match",
            409,
        ),
        ("create: a name taken", 409),
    ];
    for (step, code) in want {
        let answer = real
            .iter()
            .find(|(s, _)| s == step)
            .map(|(_, a)| a)
            .with_context(|| format!("no step {step}"))?;
        ensure!(
            answer["code"] == code,
            "{step}: the real server answered {answer}"
        );
    }
    Ok(())
}

fn crd(
    plural: &str,
    kind: &str,
    status_subresource: bool,
) -> anyhow::Result<CustomResourceDefinition> {
    let conditions = json!({
        "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
        "items": {"type": "object", "required": ["type"], "properties": {
            "type": {"type": "string"}, "status": {"type": "string"}}},
    });
    let subresources = if status_subresource {
        json!({"status": {}})
    } else {
        json!({})
    };
    Ok(serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}"),
                     "labels": {"contract.kraken.dev/suite": "api"}},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind,
                      "listKind": format!("{kind}List")},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": subresources,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                               "properties": {"conditions": conditions}},
                }}},
            }],
        },
    }))?)
}

/// Widgets have a status subresource, gadgets do not.
async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (plural, kind, status) in [("widgets", "Widget", true), ("gadgets", "Gadget", false)] {
        crds.create(&PostParams::default(), &crd(plural, kind, status)?)
            .await?;
    }
    Ok(())
}

/// Waits until the API server serves both kinds (Established can come a moment before).
async fn served(client: &kube::Client) -> anyhow::Result<()> {
    for kind in ["Widget", "Gadget"] {
        let api = custom(client, kind);
        let mut tries = 0;
        while let Err(e) = api.list(&Default::default()).await {
            tries += 1;
            ensure!(tries < 100, "{kind} is not served: {e}");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

fn custom(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk(GROUP, "v1", kind);
    let plural = format!("{}s", kind.to_lowercase());
    Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

/// One run of the script against `client`.
async fn script(client: kube::Client) -> anyhow::Result<Seen> {
    let mut run = Run {
        client,
        seen: Vec::new(),
        versions: BTreeMap::new(),
    };
    server_side_apply(&mut run).await?;
    owner_references(&mut run).await?;
    finalizer_sets(&mut run).await?;
    put_on_missing(&mut run).await?;
    generation_of_config_maps(&mut run).await?;
    generation_with_status_subresource(&mut run).await?;
    generation_without_status_subresource(&mut run).await?;
    resource_versions(&mut run).await?;
    delete_preconditions(&mut run).await?;
    Ok(run.seen)
}

struct Run {
    client: kube::Client,
    seen: Seen,
    /// The last resourceVersion seen of each object, to tell whether a write changed it.
    versions: BTreeMap<String, String>,
}

impl Run {
    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn widgets(&self) -> Api<DynamicObject> {
        custom(&self.client, "Widget")
    }

    fn gadgets(&self) -> Api<DynamicObject> {
        custom(&self.client, "Gadget")
    }

    /// Records the answer to `step`, a request about the object `key`.
    fn note<T: serde::Serialize>(
        &mut self,
        step: &str,
        key: &str,
        answer: kube::Result<T>,
    ) -> anyhow::Result<()> {
        let seen = match answer {
            Ok(object) => {
                let object = serde_json::to_value(object)?;
                self.project(key, &object)
            }
            Err(kube::Error::Api(e)) => json!({"code": e.code, "reason": e.reason}),
            Err(e) => return Err(e).context(step.to_owned()),
        };
        self.seen.push((step.to_owned(), seen));
        Ok(())
    }

    /// Records the answer to a delete: the object (still there, held by finalizers) or the
    /// Status of one gone.
    fn note_delete(
        &mut self,
        step: &str,
        key: &str,
        answer: kube::Result<Json>,
    ) -> anyhow::Result<()> {
        match answer {
            Ok(status) if status.get("gone").is_some() => {
                self.seen.push((step.to_owned(), status));
                Ok(())
            }
            other => self.note(step, key, other),
        }
    }

    /// The fields of `object` the contract compares.
    fn project(&mut self, key: &str, object: &Json) -> Json {
        let meta = &object["metadata"];
        let version = meta["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let version = match self.versions.insert(key.to_owned(), version.clone()) {
            None => "new",
            Some(old) if old == version => "same",
            Some(_) => "changed",
        };
        let refs: Vec<Json> = meta["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| json!({"uid": r["uid"], "controller": r["controller"]}))
            .collect();
        json!({
            "version": version,
            "data": object["data"],
            "spec": object["spec"],
            "status": object["status"],
            "labels": meta["labels"],
            "finalizers": meta["finalizers"],
            "ownerReferences": refs,
            "generation": meta["generation"],
            "deleting": !meta["deletionTimestamp"].is_null(),
            "owners": owners(&meta["managedFields"]),
        })
    }
}

/// `managedFields` as (manager, operation, subresource, the leaf fields owned), sorted.
fn owners(managed: &Json) -> Json {
    let mut out: Vec<Json> = managed
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let mut fields = Vec::new();
            leaves(&e["fieldsV1"], "", &mut fields);
            fields.sort();
            json!({"manager": e["manager"], "operation": e["operation"],
                   "subresource": e["subresource"], "fields": fields})
        })
        .collect();
    out.sort_by_key(ToString::to_string);
    Json::Array(out)
}

/// The leaves of a `fieldsV1` set, as `/`-joined paths (`.`, the node itself, left out).
fn leaves(set: &Json, prefix: &str, out: &mut Vec<String>) {
    let Some(map) = set.as_object() else {
        return;
    };
    for (k, v) in map.iter().filter(|(k, _)| *k != ".") {
        let path = format!("{prefix}/{k}");
        let children = v.as_object().is_some_and(|m| m.keys().any(|k| k != "."));
        if children {
            leaves(v, &path, out);
        } else {
            out.push(path);
        }
    }
}

/// A delete's answer as JSON: the object still there (held by finalizers), or the Status of
/// one gone.
async fn delete<K>(api: &Api<K>, name: &str, params: &DeleteParams) -> kube::Result<Json>
where
    K: Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let answer = api.delete(name, params).await?;
    Ok(answer.either(
        |object| serde_json::to_value(object).unwrap_or(Json::Null),
        |status| json!({"gone": status.status, "code": status.code}),
    ))
}

fn apply(manager: &str) -> PatchParams {
    PatchParams::apply(manager)
}

fn updated_by(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.to_owned()),
        ..PatchParams::default()
    }
}

fn config_map(name: &str, rest: Json) -> Json {
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    kraken_kit::fake_api::merge_patch(&mut cm, &rest);
    cm
}

async fn server_side_apply(run: &mut Run) -> anyhow::Result<()> {
    let cms = run.config_maps();
    let key = "configmap/ssa";
    let alpha = config_map(
        "ssa",
        json!({"metadata": {"labels": {"by": "alpha"}}, "data": {"shared": "1", "alpha": "a"}}),
    );
    let answer = cms
        .patch("ssa", &apply("alpha"), &Patch::Apply(&alpha))
        .await;
    run.note("ssa: alpha creates", key, answer)?;
    let beta = config_map("ssa", json!({"data": {"shared": "2", "beta": "b"}}));
    let answer = cms.patch("ssa", &apply("beta"), &Patch::Apply(&beta)).await;
    run.note(
        "ssa: beta conflicts with alpha over a field alpha owns",
        key,
        answer,
    )?;
    run.note(
        "ssa: the conflict changed nothing",
        key,
        cms.get("ssa").await,
    )?;
    let answer = cms
        .patch("ssa", &apply("beta").force(), &Patch::Apply(&beta))
        .await;
    run.note("ssa: beta forces and takes the field", key, answer)?;
    // Alpha agrees on `shared` now and drops its own key and label: those it alone owned go.
    let alpha = config_map("ssa", json!({"data": {"shared": "2"}}));
    let answer = cms
        .patch("ssa", &apply("alpha"), &Patch::Apply(&alpha))
        .await;
    run.note("ssa: alpha drops the fields it alone owned", key, answer)?;
    let answer = cms
        .patch("ssa", &apply("alpha"), &Patch::Apply(&alpha))
        .await;
    run.note("ssa: the same apply again changes nothing", key, answer)?;
    // Beta drops everything: `shared`, still alpha's too, stays.
    let nothing = config_map("ssa", json!({}));
    let answer = cms
        .patch("ssa", &apply("beta"), &Patch::Apply(&nothing))
        .await;
    run.note("ssa: beta drops a field alpha shares", key, answer)?;
    // An update takes the fields it changes from their owners, and an apply then conflicts.
    let patch = Patch::Merge(json!({"data": {"shared": "3", "gamma": "g"}}));
    let answer = cms.patch("ssa", &updated_by("gamma"), &patch).await;
    run.note(
        "ssa: a merge patch takes the fields it changes",
        key,
        answer,
    )?;
    let alpha = config_map("ssa", json!({"data": {"shared": "4"}}));
    let answer = cms
        .patch("ssa", &apply("alpha"), &Patch::Apply(&alpha))
        .await;
    run.note(
        "ssa: an apply conflicts with an update's field",
        key,
        answer,
    )?;
    let answer = cms
        .patch("ssa", &apply("gamma"), &Patch::Apply(&nothing))
        .await;
    run.note(
        "ssa: an apply by an updater's name owns nothing yet",
        key,
        answer,
    )?;
    Ok(())
}

fn owner(uid: &str, controller: bool) -> Json {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "name": format!("w-{uid}"),
           "uid": format!("00000000-0000-0000-0000-{uid:0>12}"), "controller": controller})
}

fn owned_secret(refs: &[Json]) -> Json {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "owned", "ownerReferences": refs}, "data": {"k": "dg=="}})
}

async fn owner_references(run: &mut Run) -> anyhow::Result<()> {
    let secrets = run.secrets();
    let key = "secret/owned";
    let put = |refs: &[Json]| Patch::Apply(owned_secret(refs));
    let answer = secrets
        .patch("owned", &apply("alpha"), &put(&[owner("a1", true)]))
        .await;
    run.note("owners: alpha creates with its controller", key, answer)?;
    let answer = secrets
        .patch("owned", &apply("beta").force(), &put(&[owner("b1", true)]))
        .await;
    run.note("owners: a second controller is refused", key, answer)?;
    let answer = secrets
        .patch("owned", &apply("beta").force(), &put(&[owner("b1", false)]))
        .await;
    run.note("owners: a second owner is merged by uid", key, answer)?;
    // The same manager naming another controller drops its first one in the same apply.
    let answer = secrets
        .patch("owned", &apply("alpha"), &put(&[owner("a2", true)]))
        .await;
    run.note("owners: alpha hands control to a successor", key, answer)?;
    let patch = Patch::Merge(json!({"metadata": {"ownerReferences": [owner("c1", false)]}}));
    let answer = secrets.patch("owned", &updated_by("gamma"), &patch).await;
    run.note("owners: a merge patch replaces the list", key, answer)?;
    Ok(())
}

async fn finalizer_sets(run: &mut Run) -> anyhow::Result<()> {
    let cms = run.config_maps();
    let key = "configmap/finalized";
    let with = |finalizers: &[&str]| {
        Patch::Apply(config_map(
            "finalized",
            json!({"metadata": {"finalizers": finalizers}}),
        ))
    };
    let answer = cms
        .patch("finalized", &apply("alpha"), &with(&["x.dev/a"]))
        .await;
    run.note("finalizers: alpha applies one", key, answer)?;
    let answer = cms
        .patch("finalized", &apply("beta"), &with(&["x.dev/b"]))
        .await;
    run.note("finalizers: beta adds another, a set", key, answer)?;
    let answer = cms.patch("finalized", &apply("alpha"), &with(&[])).await;
    run.note("finalizers: alpha drops its own", key, answer)?;
    Ok(())
}

async fn put_on_missing(run: &mut Run) -> anyhow::Result<()> {
    let cm: ConfigMap = serde_json::from_value(config_map("ghost", json!({"data": {"k": "v"}})))?;
    let answer = run
        .config_maps()
        .replace("ghost", &PostParams::default(), &cm)
        .await;
    run.note(
        "put: a missing ConfigMap is not created",
        "configmap/ghost",
        answer,
    )?;
    let answer = run.config_maps().get("ghost").await;
    run.note("put: and it is not there", "configmap/ghost", answer)?;
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
        "metadata": {"name": "ghost"}, "spec": {"size": 1}}))?;
    let answer = run
        .widgets()
        .replace("ghost", &PostParams::default(), &widget)
        .await;
    run.note(
        "put: a missing custom resource is not created",
        "widget/ghost",
        answer,
    )?;
    // A Lease is the kind the server does create on a PUT, and then wants a version.
    let leases: Api<Lease> = Api::namespaced(run.client.clone(), NS);
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "held"}, "spec": {"holderIdentity": "a"}}))?;
    let answer = leases.replace("held", &PostParams::default(), &lease).await;
    run.note("put: a missing Lease is created", "lease/held", answer)?;
    let answer = leases.replace("held", &PostParams::default(), &lease).await;
    run.note(
        "put: a Lease replaced with no resourceVersion",
        "lease/held",
        answer,
    )?;
    Ok(())
}

async fn generation_of_config_maps(run: &mut Run) -> anyhow::Result<()> {
    let cms = run.config_maps();
    let key = "configmap/plain";
    let cm: ConfigMap = serde_json::from_value(config_map("plain", json!({"data": {"k": "v"}})))?;
    let answer = cms.create(&PostParams::default(), &cm).await;
    run.note("configmap: created", key, answer)?;
    let patch = Patch::Merge(json!({"data": {"k": "w"}}));
    let answer = cms.patch("plain", &PatchParams::default(), &patch).await;
    run.note("configmap: data changed", key, answer)?;
    let answer = cms.create(&PostParams::default(), &cm).await;
    run.note("create: a name taken", key, answer)?;
    Ok(())
}

async fn generation_with_status_subresource(run: &mut Run) -> anyhow::Result<()> {
    let widgets = run.widgets();
    let key = "widget/w";
    let w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"size": 1}}))?;
    let answer = widgets.create(&PostParams::default(), &w).await;
    run.note("widget: created", key, answer)?;
    let merge = |j: Json| Patch::Merge(j);
    let answer = widgets
        .patch("w", &updated_by("m"), &merge(json!({"spec": {"size": 2}})))
        .await;
    run.note("widget: spec changed", key, answer)?;
    let labels = json!({"metadata": {"labels": {"l": "x"}}});
    let answer = widgets.patch("w", &updated_by("m"), &merge(labels)).await;
    run.note("widget: a label changed", key, answer)?;
    let status = json!({"status": {"phase": "a"}});
    let answer = widgets
        .patch_status("w", &updated_by("m"), &merge(status))
        .await;
    run.note("widget: status written through /status", key, answer)?;
    let status = json!({"status": {"phase": "b"}});
    let answer = widgets.patch("w", &updated_by("m"), &merge(status)).await;
    run.note(
        "widget: status through the main resource is ignored",
        key,
        answer,
    )?;
    let body = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
                      "metadata": {"name": "w"}, "spec": {"size": 2}, "status": {"phase": "c"}});
    let answer = widgets
        .patch("w", &apply("alpha"), &Patch::Apply(&body))
        .await;
    run.note(
        "widget: an apply to the main resource owns no status",
        key,
        answer,
    )?;
    let body = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
                      "metadata": {"name": "w"},
                      "status": {"phase": "d", "conditions": [{"type": "Ready", "status": "True"}]}});
    let answer = widgets
        .patch_status("w", &apply("stat"), &Patch::Apply(&body))
        .await;
    run.note(
        "widget: an apply to /status conflicts with an update there",
        key,
        answer,
    )?;
    let answer = widgets
        .patch_status("w", &apply("stat").force(), &Patch::Apply(&body))
        .await;
    run.note("widget: a forced apply to /status", key, answer)?;
    let body = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
                      "metadata": {"name": "w"},
                      "status": {"conditions": [{"type": "Synced", "status": "False"}]}});
    let answer = widgets
        .patch_status("w", &apply("other"), &Patch::Apply(&body))
        .await;
    run.note("widget: conditions merged by type", key, answer)?;
    // An apply that creates drops status where a subresource holds it.
    let body = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
                      "metadata": {"name": "applied"}, "spec": {"size": 1},
                      "status": {"phase": "x"}});
    let answer = widgets
        .patch("applied", &apply("alpha"), &Patch::Apply(&body))
        .await;
    run.note(
        "widget: created by an apply, status dropped",
        "widget/applied",
        answer,
    )?;
    let answer = delete(&widgets, "applied", &DeleteParams::default()).await;
    run.note_delete(
        "widget: deleted with no finalizer",
        "widget/applied",
        answer,
    )?;
    Ok(())
}

async fn generation_without_status_subresource(run: &mut Run) -> anyhow::Result<()> {
    let gadgets = run.gadgets();
    let key = "gadget/g";
    let g: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "Gadget",
        "metadata": {"name": "g"}, "spec": {"size": 1}}))?;
    let answer = gadgets.create(&PostParams::default(), &g).await;
    run.note("gadget: created", key, answer)?;
    let status = Patch::Merge(json!({"status": {"phase": "a"}}));
    let answer = gadgets.patch("g", &updated_by("m"), &status).await;
    run.note("gadget: status is part of the object", key, answer)?;
    let answer = gadgets.patch_status("g", &updated_by("m"), &status).await;
    run.note("gadget: no status subresource", key, answer)?;
    let labels = Patch::Merge(json!({"metadata": {"labels": {"l": "x"}}}));
    let answer = gadgets.patch("g", &updated_by("m"), &labels).await;
    run.note("gadget: a label changed", key, answer)?;
    let body = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Gadget",
                      "metadata": {"name": "applied"}, "spec": {"size": 1},
                      "status": {"phase": "x"}});
    let answer = gadgets
        .patch("applied", &apply("alpha"), &Patch::Apply(&body))
        .await;
    run.note(
        "gadget: created by an apply, status kept",
        "gadget/applied",
        answer,
    )?;
    Ok(())
}

async fn resource_versions(run: &mut Run) -> anyhow::Result<()> {
    let cms = run.config_maps();
    let key = "configmap/versioned";
    let cm: ConfigMap =
        serde_json::from_value(config_map("versioned", json!({"data": {"k": "1"}})))?;
    let first = cms.create(&PostParams::default(), &cm).await?;
    run.note("versions: created", key, Ok(first.clone()))?;
    let patch = Patch::Merge(json!({"data": {"k": "2"}}));
    let answer = cms
        .patch("versioned", &PatchParams::default(), &patch)
        .await;
    run.note("versions: changed", key, answer)?;
    let mut stale = first.clone();
    stale.data = Some(BTreeMap::from([("k".to_owned(), "3".to_owned())]));
    let answer = cms
        .replace("versioned", &PostParams::default(), &stale)
        .await;
    run.note(
        "versions: replace with a stale resourceVersion",
        key,
        answer,
    )?;
    let old = first.metadata.resource_version.clone();
    let patch = Patch::Merge(json!({"metadata": {"resourceVersion": old}, "data": {"k": "3"}}));
    let answer = cms
        .patch("versioned", &PatchParams::default(), &patch)
        .await;
    run.note(
        "versions: merge patch with a stale resourceVersion",
        key,
        answer,
    )?;
    let body = config_map(
        "versioned",
        json!({"metadata": {"resourceVersion": old}, "data": {"k": "3"}}),
    );
    let answer = cms
        .patch("versioned", &apply("alpha").force(), &Patch::Apply(&body))
        .await;
    run.note("versions: apply with a stale resourceVersion", key, answer)?;
    stale.metadata.resource_version = None;
    let answer = cms
        .replace("versioned", &PostParams::default(), &stale)
        .await;
    run.note(
        "versions: a ConfigMap replaced with no resourceVersion",
        key,
        answer,
    )?;
    let widget = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
                        "metadata": {"name": "v"}, "spec": {"size": 1}});
    let w: DynamicObject = serde_json::from_value(widget)?;
    let created = run.widgets().create(&PostParams::default(), &w).await?;
    run.note("versions: widget created", "widget/v", Ok(created.clone()))?;
    let mut bigger = created.clone();
    bigger.data["spec"]["size"] = json!(2);
    bigger.metadata.resource_version = None;
    let answer = run
        .widgets()
        .replace("v", &PostParams::default(), &bigger)
        .await;
    run.note(
        "versions: a custom resource replaced with no resourceVersion",
        "widget/v",
        answer,
    )?;
    bigger.metadata.resource_version = created.metadata.resource_version.clone();
    let answer = run
        .widgets()
        .replace("v", &PostParams::default(), &bigger)
        .await;
    run.note(
        "versions: a custom resource replaced at its version",
        "widget/v",
        answer,
    )?;
    Ok(())
}

fn only(uid: Option<String>, version: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: version,
        }),
        ..DeleteParams::default()
    }
}

async fn delete_preconditions(run: &mut Run) -> anyhow::Result<()> {
    let cms = run.config_maps();
    let key = "configmap/doomed";
    let cm: ConfigMap = serde_json::from_value(config_map("doomed", json!({"data": {"k": "1"}})))?;
    let first = cms.create(&PostParams::default(), &cm).await?;
    run.note("delete: created", key, Ok(first.clone()))?;
    let patch = Patch::Merge(json!({"data": {"k": "2"}}));
    cms.patch("doomed", &PatchParams::default(), &patch).await?;
    let wrong = only(Some("00000000-0000-0000-0000-00000000dead".into()), None);
    let answer = delete(&cms, "doomed", &wrong).await;
    run.note_delete(
        "delete: a uid precondition that does not match",
        key,
        answer,
    )?;
    let stale = only(None, first.metadata.resource_version.clone());
    let answer = delete(&cms, "doomed", &stale).await;
    run.note_delete(
        "delete: a resourceVersion precondition that does not match",
        key,
        answer,
    )?;
    let right = only(first.metadata.uid.clone(), None);
    let answer = delete(&cms, "doomed", &right).await;
    run.note_delete("delete: the uid matches", key, answer)?;
    run.note("delete: gone", key, cms.get("doomed").await)?;
    let answer = delete(&cms, "doomed", &right).await;
    run.note_delete("delete: a missing object", key, answer)?;

    let widgets = run.widgets();
    let key = "widget/held";
    let w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
        "metadata": {"name": "held", "finalizers": ["contract.kraken.dev/hold"]},
        "spec": {"size": 1}}))?;
    let created = widgets.create(&PostParams::default(), &w).await?;
    run.note(
        "delete: a widget with a finalizer",
        key,
        Ok(created.clone()),
    )?;
    let answer = delete(&widgets, "held", &only(created.metadata.uid.clone(), None)).await;
    run.note_delete("delete: held by its finalizer", key, answer)?;
    let answer = delete(&widgets, "held", &DeleteParams::default()).await;
    run.note_delete("delete: again while held, nothing changes", key, answer)?;
    let patch = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    let answer = widgets.patch("held", &updated_by("m"), &patch).await;
    run.note("delete: the last finalizer removed", key, answer)?;
    run.note("delete: then gone", key, widgets.get("held").await)?;
    Ok(())
}

//! Contract: `FakeApi` (kraken-kit's unit-test API server) answers
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
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kraken_kit::fake_api::FakeApi;
use kraken_tests::ControlPlane;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value as Json, json};

#[path = "contract_api/cases.rs"]
mod cases;

use cases::{
    delete_preconditions, finalizer_sets, generation_of_config_maps,
    generation_with_status_subresource, generation_without_status_subresource, owner_references,
    put_on_missing, resource_versions, server_side_apply,
};

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

//! The script's cases, one function each: what each writes and which answers it records.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams, Preconditions};

use super::*;

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

pub(super) async fn server_side_apply(run: &mut Run) -> anyhow::Result<()> {
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

pub(super) async fn owner_references(run: &mut Run) -> anyhow::Result<()> {
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

pub(super) async fn finalizer_sets(run: &mut Run) -> anyhow::Result<()> {
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

pub(super) async fn put_on_missing(run: &mut Run) -> anyhow::Result<()> {
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

pub(super) async fn generation_of_config_maps(run: &mut Run) -> anyhow::Result<()> {
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

pub(super) async fn generation_with_status_subresource(run: &mut Run) -> anyhow::Result<()> {
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

pub(super) async fn generation_without_status_subresource(run: &mut Run) -> anyhow::Result<()> {
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

pub(super) async fn resource_versions(run: &mut Run) -> anyhow::Result<()> {
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

pub(super) async fn delete_preconditions(run: &mut Run) -> anyhow::Result<()> {
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

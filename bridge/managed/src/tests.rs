//! The managed-resource reconcile, end to end over fakes: the real [`reconcile::reconcile`],
//! run by the kit's runner as the controller runs it, against [`FakeApi`] (the API server),
//! [`FakePlugin`] (the provider) and [`FakeSource`]. Each pass runs in-process in
//! milliseconds; `tests/` proves the same against the real parts.

use std::sync::{Arc, Mutex};

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch};
use kube::api::{PartialObjectMeta, PatchParams};
use kube::runtime::controller::Action;
use serde_json::{Value as Json, json};

use super::target::OWNER_TAG;
use super::*;
use kraken_kit::fake_api::FakeApi;
use kraken_kit::metrics::Metrics;
use kraken_provider::fake::{FakePlugin, TYPE};
use kraken_source::fake::FakeSource;
use kraken_value::Value;

#[test]
fn reads_at_the_newer_of_the_watch_and_the_own_write() {
    assert_eq!(newer_version("120", Some(130)), "130");
    assert_eq!(newer_version("140", Some(130)), "140");
    assert_eq!(newer_version("120", None), "120");
    // Not a number: as the watch gave it.
    assert_eq!(newer_version("abc", Some(130)), "abc");
}

mod adopt;
mod data;
mod identity;
mod pass;
mod plans;
mod policies;
mod replace;
mod sealed;
mod seeded;
mod shape;

const NS: &str = "ns";
const PLURAL: &str = "things";

/// One API server, one provider, one kind's controller context.
struct Env {
    api: FakeApi,
    plugin: Arc<FakePlugin>,
    k: Arc<KindContext>,
}

fn kind() -> KindInfo {
    let gvk = GroupVersionKind::gvk("fake.tf.kraken.dev", "v1alpha1", "Thing");
    KindInfo {
        resource: ApiResource::from_gvk_with_plural(&gvk, PLURAL),
        provider: "kraken.dev/fake".into(),
        type_name: TYPE.into(),
        data_source: false,
    }
}

/// The floors of a namespace whose administrators let its resources adopt every type untagged,
/// so the tests of adoption's mechanics need no tags (`tests::adopt` tests consent itself).
fn adopting_all() -> Arc<super::floor::Floors> {
    let floors = super::floor::Floors::fixed(Default::default());
    floors.set_adoptable(NS, "*");
    floors
}

impl Env {
    fn new() -> Self {
        Self::of(kind())
    }

    /// An environment whose controller runs `kind`.
    fn of(kind: KindInfo) -> Self {
        let api = FakeApi::new();
        let client = api.client();
        let plugin = FakePlugin::new();
        let kit = Arc::new(kraken_kit::Kit::new(
            client.clone(),
            Arc::new(Metrics::new()),
        ));
        let source = Arc::new(FakeSource::new(client, plugin.clone()));
        let ctx = Arc::new(Context {
            kit,
            source,
            hub_index: Arc::default(),
            plan_key: super::plan_key::PlanKey::from_bytes([7; 32]),
            floors: adopting_all(),
            share: super::share::Share::all(),
        });
        let k = Arc::new(KindContext {
            ctx,
            label: kind.label(),
            kind,
            written: Mutex::default(),
            ready: Default::default(),
            pacer: super::share::Pacer::new(4),
        });
        api.insert(
            "providerconfigs",
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
                   "metadata": {"name": "default", "namespace": NS},
                   "spec": {"source": "kraken.dev/fake"}}),
        );
        Self { api, plugin, k }
    }

    fn create(&self, name: &str, spec: Json) {
        let r = &self.k.kind.resource;
        self.api.insert(
            &r.plural,
            json!({"apiVersion": r.api_version, "kind": r.kind,
                   "metadata": {"name": name, "namespace": NS}, "spec": spec}),
        );
    }

    fn things(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.api.client(), NS, &self.k.kind.resource)
    }

    async fn edit(&self, name: &str, spec: Json) -> anyhow::Result<()> {
        let patch = Patch::Merge(json!({ "spec": spec }));
        self.things()
            .patch(name, &PatchParams::default(), &patch)
            .await?;
        Ok(())
    }

    async fn delete(&self, name: &str) -> anyhow::Result<()> {
        self.things().delete(name, &DeleteParams::default()).await?;
        Ok(())
    }

    /// What the watch would wake `name`'s reconcile with.
    fn woken(&self, name: &str) -> anyhow::Result<Arc<PartialObjectMeta<DynamicObject>>> {
        let obj = self.object(name).unwrap_or_else(|| json!({}));
        let meta: PartialObjectMeta<DynamicObject> =
            serde_json::from_value(json!({"apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata", "metadata": obj["metadata"]}))?;
        Ok(Arc::new(meta))
    }

    /// One reconcile of `name`, woken as the watch would wake it, through the runner every
    /// controller runs in (`kraken_kit::reconciler`): a failure is the requeue it chose.
    async fn pass(&self, name: &str) -> anyhow::Result<Action> {
        let meta = self.woken(name)?;
        Ok(kraken_kit::reconciler::run(self.k.clone(), meta).await)
    }

    /// The same pass's own result, the error it ended with included.
    async fn attempt(&self, name: &str) -> anyhow::Result<error::Result<Action>> {
        let meta = self.woken(name)?;
        Ok(Reconciler::reconcile(self.k.clone(), meta).await)
    }

    fn object(&self, name: &str) -> Option<Json> {
        self.api.get(&self.k.kind.resource.plural, NS, name)
    }

    /// `(status, reason)` of condition `type_` on `name`.
    fn condition(&self, name: &str, type_: &str) -> (String, String) {
        let obj = self.object(name).unwrap_or_default();
        let found = obj["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == type_)
            .cloned()
            .unwrap_or_default();
        let s = |k: &str| found[k].as_str().unwrap_or_default().to_owned();
        (s("status"), s("reason"))
    }

    /// The reasons of the Events published so far, in order.
    async fn events(&self) -> Vec<String> {
        self.k
            .ctx
            .events
            .flush(std::time::Duration::from_secs(5))
            .await;
        self.api
            .list("events")
            .iter()
            .map(|e| e["reason"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    fn writes(&self) -> usize {
        self.api.writes("/")
    }
}

fn yes(reason: &str) -> (String, String) {
    ("True".into(), reason.into())
}

fn no(reason: &str) -> (String, String) {
    ("False".into(), reason.into())
}

fn thing(name: &str) -> Json {
    json!({"forProvider": {"name": name, "zone": "z1"}})
}

/// Creates `name` and reconciles it until the object exists.
async fn created(env: &Env, name: &str, spec: Json) -> anyhow::Result<()> {
    env.create(name, spec);
    env.pass(name).await?;
    assert_eq!(env.condition(name, "Ready"), yes("Available"));
    Ok(())
}

#[tokio::test]
async fn creates_then_a_second_pass_writes_nothing() -> anyhow::Result<()> {
    let env = Env::new();
    env.create("a", thing("a"));
    env.pass("a").await?;
    assert_eq!(env.plugin.creates(), 1);
    assert!(env.api.get("secrets", NS, "thing-a.fake-tfstate").is_some());
    let obj = env.object("a").unwrap_or_default();
    assert_eq!(obj["status"]["atProvider"]["id"], "a");
    assert!(
        obj["status"]["atProvider"].get("token").is_none(),
        "sensitive"
    );
    assert_eq!(obj["metadata"]["finalizers"], json!([FINALIZER]));
    assert!(obj["metadata"]["annotations"][CREATE_ATTEMPT_ANNOTATION].is_string());
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    assert_eq!(env.condition("a", "Synced"), yes("ReconcileSuccess"));
    assert_eq!(env.events().await, ["Created"]);
    // Fence and finalizer, state Secret, Event, status: four. Nothing reads its outputs, so no
    // StateDeclaration or outputs Secret is written.
    let writes: Vec<String> = env
        .api
        .requests()
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(writes.len(), 4, "{writes:?}");
    assert!(env.api.list("statedeclarations").is_empty());

    let before = env.writes();
    env.pass("a").await?;
    assert_eq!(env.writes(), before, "a settled object costs no write");
    assert_eq!(env.plugin.calls("ApplyResourceChange"), 1);
    Ok(())
}

#[tokio::test]
async fn updates_in_place() -> anyhow::Result<()> {
    let env = Env::new();
    created(&env, "a", thing("a")).await?;
    env.edit("a", json!({"forProvider": {"description": "d"}}))
        .await?;
    env.pass("a").await?;
    assert_eq!((env.plugin.creates(), env.plugin.updates()), (1, 1));
    let obj = env.object("a").unwrap_or_default();
    assert_eq!(obj["status"]["atProvider"]["description"], "d");
    assert_eq!(env.events().await, ["Created", "Updated"]);
    Ok(())
}

/// As Terraform decides: a plan that changes only the provider's private data (an import
/// leaves out what SDKv2 providers keep there) is no change, and nothing is applied.
#[tokio::test]
async fn a_private_only_plan_applies_nothing() -> anyhow::Result<()> {
    let env = Env::new();
    created(&env, "a", thing("a")).await?;
    env.plugin.plan_private(b"{\"schema_version\":\"1\"}");
    env.pass("a").await?;
    assert_eq!(
        env.plugin.calls("ApplyResourceChange"),
        1,
        "only the create"
    );
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    Ok(())
}

#[tokio::test]
async fn replaces_unless_refused() -> anyhow::Result<()> {
    let env = Env::new();
    created(&env, "a", thing("a")).await?;
    let moved = json!({"forProvider": {"zone": "z2"}, "replacePolicy": "Refuse"});
    env.edit("a", moved).await?;
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("ReplaceRefused"));
    assert_eq!(env.plugin.deletes(), 0);

    env.edit("a", json!({"replacePolicy": null})).await?;
    env.pass("a").await?;
    assert_eq!((env.plugin.deletes(), env.plugin.creates()), (1, 2));
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    let events = env.events().await;
    assert_eq!(events, ["Created", "ReplaceRefused", "Replaced"]);
    Ok(())
}

/// An object made outside Kraken, as the fake would have made it.
fn existing(env: &Env, id: &str) {
    let object = Value::Object(
        [
            ("name", Value::string(id)),
            ("description", Value::string("theirs")),
            ("zone", Value::Null),
            ("tags", Value::Null),
            ("password", Value::Null),
            ("id", Value::string(id)),
            ("token", Value::string("t")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
    );
    env.plugin.put(id, Some(object));
}

#[tokio::test]
async fn imports_by_import_id() -> anyhow::Result<()> {
    let env = Env::new();
    existing(&env, "ext");
    let spec = json!({"importId": "ext", "forProvider": {"name": "ext", "description": "theirs"}});
    env.create("a", spec);
    env.pass("a").await?;
    assert_eq!(env.plugin.creates(), 0);
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    let obj = env.object("a").unwrap_or_default();
    assert_eq!(obj["status"]["externalId"], "ext");
    assert_eq!(obj["metadata"]["finalizers"], json!([FINALIZER]));
    assert_eq!(env.events().await, ["Imported"]);
    Ok(())
}

#[tokio::test]
async fn observes_without_changing() -> anyhow::Result<()> {
    let env = Env::new();
    existing(&env, "ext");
    let spec = json!({"importId": "ext", "managementPolicy": "ObserveOnly",
                      "forProvider": {"name": "ext", "description": "ours"}});
    env.create("a", spec);
    env.pass("a").await?;
    assert_eq!(env.plugin.calls("ApplyResourceChange"), 0);
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    assert_eq!(env.events().await, ["Imported", "DriftDetected"]);
    // Deleting releases it without destroying.
    env.delete("a").await?;
    env.pass("a").await?;
    assert!(env.object("a").is_none());
    assert_eq!(env.plugin.deletes(), 0);
    Ok(())
}

#[tokio::test]
async fn deletes_once_and_releases_the_finalizer() -> anyhow::Result<()> {
    let env = Env::new();
    created(&env, "a", thing("a")).await?;
    env.delete("a").await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.deletes(), 1);
    assert!(env.plugin.objects().is_empty());
    assert!(env.object("a").is_none(), "finalizer released");
    assert!(env.api.get("secrets", NS, "thing-a.fake-tfstate").is_none());
    assert_eq!(env.events().await, ["Created", "Deleted"]);
    Ok(())
}

#[tokio::test]
async fn orphans_on_request() -> anyhow::Result<()> {
    let env = Env::new();
    let mut spec = thing("a");
    spec["deletionPolicy"] = json!("Orphan");
    created(&env, "a", spec).await?;
    env.delete("a").await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.deletes(), 0);
    assert!(env.plugin.objects().contains_key("a"));
    assert!(env.object("a").is_none());
    assert_eq!(env.events().await, ["Created", "Orphaned"]);
    Ok(())
}

#[tokio::test]
async fn reports_provider_diagnostics_on_plan_and_apply() -> anyhow::Result<()> {
    let env = Env::new();
    env.plugin.plan_diagnostics(true);
    env.create("a", thing("a"));
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("ProviderError"));
    assert_eq!(env.condition("a", "Ready"), no("Creating"));
    env.plugin.plan_diagnostics(false);
    env.plugin.apply_diagnostics(true);
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("ProviderError"));
    assert_eq!(env.plugin.creates(), 0);
    assert_eq!(
        env.events().await,
        ["ProviderError", "ApplyFailed", "ProviderError"]
    );
    Ok(())
}

#[tokio::test]
async fn a_crash_mid_create_never_creates_twice() -> anyhow::Result<()> {
    let env = Env::new();
    env.plugin.crash_next_create();
    env.create("a", thing("a"));
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("ProviderUnavailable"));
    env.pass("a").await?;
    assert_eq!(env.plugin.creates(), 1);
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    let events = env.events().await;
    assert_eq!(events, ["ApplyFailed", "ProviderUnavailable", "Recovered"]);
    Ok(())
}

#[tokio::test]
async fn a_crash_the_provider_cannot_explain_is_create_interrupted() -> anyhow::Result<()> {
    let env = Env::new();
    env.plugin.crash_next_create();
    env.create("a", thing("a"));
    env.pass("a").await?;
    env.plugin.import_diagnostics(true);
    env.plugin.list_diagnostics(true);
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("CreateInterrupted"));
    assert_eq!(env.plugin.creates(), 1, "never a second object");
    Ok(())
}

/// Kraken tags what it creates with the object's uid (not in spec, never drift); after a crash
/// mid-create of an object with an id of its own and no name to import it by, the provider's
/// list finds it by that tag. An object adopted by importId never gets the tag.
#[tokio::test]
async fn a_crashed_create_without_a_name_is_found_by_its_owner_tag() -> anyhow::Result<()> {
    let env = Env::new();
    env.plugin.fresh_ids();
    env.plugin.crash_next_create();
    env.plugin.import_diagnostics(true);
    env.create("a", thing("a"));
    env.pass("a").await?;
    let uid = env.object("a").unwrap_or_default()["metadata"]["uid"].clone();
    let uid = uid.as_str().unwrap_or_default().to_owned();
    assert!(!uid.is_empty());
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    assert_eq!(env.plugin.creates(), 1, "found, not made again");
    assert_eq!(env.plugin.calls("ListResource"), 1);
    let objects = env.plugin.objects();
    let tags = objects.get("a-1").and_then(|o| match o {
        Value::Object(m) => m.get("tags").cloned(),
        _ => None,
    });
    let want = Value::Map(
        [(OWNER_TAG.to_owned(), Value::string(uid))]
            .into_iter()
            .collect(),
    );
    assert_eq!(tags, Some(want), "tagged with its owner's uid");
    assert!(env.events().await.contains(&"Recovered".to_owned()));
    let status = env.object("a").unwrap_or_default();
    assert!(
        status["status"]["atProvider"]["tags"]
            .get(OWNER_TAG)
            .is_none(),
        "kept out of status: {}",
        status["status"]["atProvider"]
    );
    // The tag is not drift: the next pass changes nothing.
    env.pass("a").await?;
    assert_eq!(env.plugin.updates(), 0);

    // Adopted by importId: no tag, and adoption changes nothing.
    existing(&env, "ext");
    env.create(
        "b",
        json!({"importId": "ext", "forProvider": {"name": "ext", "description": "theirs"}}),
    );
    env.plugin.import_diagnostics(false);
    env.pass("b").await?;
    assert_eq!(env.plugin.updates(), 0);
    Ok(())
}

#[tokio::test]
async fn a_crashed_create_whose_object_vanished_creates_again() -> anyhow::Result<()> {
    let env = Env::new();
    env.plugin.crash_next_create();
    env.create("a", thing("a"));
    env.pass("a").await?;
    // Looking it up by name proves it absent: one object again, made by the next pass.
    env.plugin.put("a", None);
    env.pass("a").await?;
    assert_eq!(env.plugin.creates(), 2);
    assert_eq!(env.plugin.objects().len(), 1);
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    Ok(())
}

/// The object vanished, the pass recreated it, and the API server failed before the new state
/// was saved (an outage, or a crash at that moment): the stored state still names the vanished
/// object. The next pass must find the new object by name, never make a third.
#[tokio::test]
async fn a_recreate_whose_state_was_not_saved_is_found_not_made_again() -> anyhow::Result<()> {
    let env = Env::new();
    env.plugin.fresh_ids();
    created(&env, "a", thing("a")).await?;
    let first: Vec<String> = env.plugin.objects().into_keys().collect();
    assert_eq!(first, ["a-1"]);
    env.plugin.put("a-1", None);
    env.api.fail_next("PATCH", "/secrets/", 503);
    assert!(
        matches!(env.attempt("a").await?, Err(error::Error::Api(_))),
        "the state save of the recreate fails"
    );
    assert_eq!(env.plugin.creates(), 2, "the recreate happened");
    env.pass("a").await?;
    assert_eq!(env.plugin.creates(), 2, "never a third object");
    let live: Vec<String> = env.plugin.objects().into_keys().collect();
    assert_eq!(live, ["a-2"]);
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    let obj = env.object("a").unwrap_or_default();
    assert_eq!(obj["status"]["atProvider"]["id"], "a-2");
    assert!(env.events().await.contains(&"Recovered".to_owned()));
    // And the pass after writes nothing: the recovered state is the stored one.
    let writes = env.writes();
    env.pass("a").await?;
    assert_eq!(env.writes(), writes);
    Ok(())
}

#[tokio::test]
async fn retries_a_conflicting_status_write() -> anyhow::Result<()> {
    let env = Env::new();
    env.api.fail_next("PUT", "/status", 409);
    env.create("a", thing("a"));
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    assert_eq!(env.plugin.creates(), 1);
    let conflicts = env
        .api
        .requests()
        .iter()
        .filter(|r| r.status == 409)
        .count();
    assert_eq!(conflicts, 1);
    Ok(())
}

#[tokio::test]
async fn names_a_missing_provider_config_or_secret() -> anyhow::Result<()> {
    let env = Env::new();
    let spec = json!({"providerConfigRef": {"name": "nope"}, "forProvider": {"name": "a"}});
    env.create("a", spec);
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("ProviderConfigMissing"));
    let spec = json!({"forProvider": {"name": "b",
                      "passwordSecretRef": {"name": "pw", "key": "k"}}});
    env.create("b", spec);
    env.pass("b").await?;
    assert_eq!(env.condition("b", "Synced"), no("SecretMissing"));
    assert_eq!(env.plugin.calls("ApplyResourceChange"), 0);
    Ok(())
}

/// A Secret named like this object's state that is not its own — a user's, or the state of
/// another provider's kind of the same name — is left alone, and nothing is created.
#[tokio::test]
async fn someone_elses_secret_by_the_state_name_is_not_overwritten() -> anyhow::Result<()> {
    let env = Env::new();
    let theirs = [
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "thing-mine.fake-tfstate", "namespace": NS},
               "data": {"password": "aHVudGVyMg=="}}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kraken.dev/tfstate",
               "metadata": {"name": "thing-other.fake-tfstate", "namespace": NS,
                            "ownerReferences": [{"apiVersion": "minio.tf.kraken.dev/v1alpha1",
                                "kind": "Thing", "name": "other", "uid": "minio-uid"}]},
               "data": {"state": "e30="}}),
    ];
    for (secret, name) in theirs.iter().zip(["mine", "other"]) {
        env.api.insert("secrets", secret.clone());
        env.create(name, thing(name));
        env.pass(name).await?;
        assert_eq!(env.condition(name, "Synced"), no("NotOwned"), "{name}");
        let now = env
            .api
            .get("secrets", NS, &format!("thing-{name}.fake-tfstate"));
        assert_eq!(
            now.map(|s| s["data"].clone()),
            Some(secret["data"].clone()),
            "{name}"
        );
    }
    assert_eq!(env.plugin.creates(), 0, "a duplicate of theirs was created");
    // A state Secret an earlier object of this kind and name left behind is taken over.
    env.api.insert(
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kraken.dev/tfstate",
               "metadata": {"name": "thing-again.fake-tfstate", "namespace": NS,
                            "ownerReferences": [{"apiVersion": "fake.tf.kraken.dev/v1alpha1",
                                "kind": "Thing", "name": "again", "uid": "deleted-uid"}]},
               "data": {}}),
    );
    created(&env, "again", thing("again")).await?;
    Ok(())
}

/// An object created before state Secrets carried the group keeps its state under the old name:
/// an upgraded operator reads it there, moves it, and creates nothing again.
#[tokio::test]
async fn a_state_secret_under_the_old_name_is_moved_not_lost() -> anyhow::Result<()> {
    let env = Env::new();
    created(&env, "old", thing("old")).await?;
    let mut secret = env
        .api
        .remove("secrets", NS, "thing-old.fake-tfstate")
        .unwrap_or_default();
    secret["metadata"]["name"] = json!("thing-old-tfstate");
    env.api.insert("secrets", secret);
    env.pass("old").await?;
    assert_eq!(env.plugin.creates(), 1, "created again");
    assert_eq!(env.condition("old", "Ready"), yes("Available"));
    assert!(
        env.api
            .get("secrets", NS, "thing-old.fake-tfstate")
            .is_some()
    );
    assert!(env.api.get("secrets", NS, "thing-old-tfstate").is_none());
    Ok(())
}

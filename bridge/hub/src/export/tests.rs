//! The ConfigExport reconcile, end to end over the in-memory API server, with the hub's
//! reconcile resolving its request in between.

use super::*;
use crate::Index;
use crate::controller::Hub;
use kraken_kit::fake_api::FakeApi;
use kraken_kit::metrics::Metrics;
use kube::api::DeleteParams;
use serde_json::json;

const NS: &str = "team";
const GROUP_VERSION: &str = "core.kraken.dev/v1alpha1";

struct Env {
    fake: FakeApi,
    hub: Arc<Hub>,
    ex: Arc<Exporter>,
}

fn env() -> Env {
    let fake = FakeApi::new();
    let index = Arc::new(Index::default());
    // A running controller of Pet (group x): its subscription stays open for the test.
    std::mem::forget(index.subscribe("x.tf.kraken.dev", "Pet"));
    let kit = Arc::new(Kit::new(fake.client(), Arc::new(Metrics::new())));
    let hub = Arc::new(Hub::new(kit.clone(), index.clone()));
    let ex = Arc::new(Exporter { kit, index });
    fake.insert(
        "statedeclarations",
        crate::trust::published_json(
            (NS, "x.tf.kraken.dev"),
            "Pet",
            "a",
            json!({"id": "i-1", "port": 8080}),
        ),
    );
    fake.insert(
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "db", "namespace": NS}, "data": {"password": "aHVudGVyMg=="}}),
    );
    Env { fake, hub, ex }
}

fn config_export(env: &Env, name: &str, kind: &str, data: Json) {
    env.fake.insert(
        "configexports",
        json!({"apiVersion": GROUP_VERSION, "kind": "ConfigExport",
               "metadata": {"name": name, "namespace": NS},
               "spec": {"target": {"kind": kind, "name": "out"}, "data": data}}),
    );
}

fn stored(env: &Env, name: &str) -> Option<ConfigExport> {
    let json = env.fake.get("configexports", NS, name)?;
    serde_json::from_value(json).ok()
}

async fn export_pass(env: &Env, name: &str) -> Result<Action, Error> {
    let ce = stored(env, name).expect("the ConfigExport exists");
    Reconciler::reconcile(env.ex.clone(), Arc::new(ce)).await
}

/// The same pass through the runner the controller runs it in: the requeue it chose.
async fn run(env: &Env, name: &str) -> Action {
    let ce = stored(env, name).expect("the ConfigExport exists");
    kraken_kit::reconciler::run(env.ex.clone(), Arc::new(ce)).await
}

/// The export asks, the hub resolves, the export writes (through the runner: what it
/// chose next is returned).
async fn round(env: &Env, name: &str) -> anyhow::Result<Action> {
    export_pass(env, name).await?;
    let request = object_key(GROUP, "ConfigExport", name);
    let json = env
        .fake
        .get("dependencyrequests", NS, &request)
        .expect("the request exists");
    Reconciler::reconcile(env.hub.clone(), Arc::new(serde_json::from_value(json)?)).await?;
    Ok(run(env, name).await)
}

fn ready(env: &Env, name: &str) -> (String, String) {
    let ce = stored(env, name).expect("the ConfigExport exists");
    let c = ce
        .status
        .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == READY))
        .expect("a Ready condition");
    (c.reason, c.message)
}

fn id_and_url() -> Json {
    json!([
        {"key": "id", "resource": {"kind": "Pet", "name": "a", "path": "id"}},
        {"key": "url", "template": "http://${resource:Pet/a:id}:${stateDeclaration:pet-a.x:port}"},
    ])
}

#[tokio::test]
async fn writes_and_updates_its_config_map_and_writes_nothing_when_unchanged() -> anyhow::Result<()>
{
    let env = env();
    config_export(&env, "e", "ConfigMap", id_and_url());
    assert_eq!(round(&env, "e").await?, Action::await_change());
    assert_eq!(ready(&env, "e").0, "Exported");
    let out = env.fake.get("configmaps", NS, "out").expect("the target");
    assert_eq!(out["data"], json!({"id": "i-1", "url": "http://i-1:8080"}));
    assert_eq!(out["metadata"]["labels"][EXPORT_LABEL], "e");
    let ce = stored(&env, "e").expect("exists");
    assert_eq!(ce.finalizers(), &[FINALIZER.to_owned()]);
    assert_eq!(env.fake.writes("/configmaps"), 1, "one create");

    let before = env.fake.requests().len();
    export_pass(&env, "e").await?;
    let writes: Vec<_> = env.fake.requests()[before..]
        .iter()
        // Events are posted in the background, after the pass that reported them.
        .filter(|s| s.method != "GET" && !s.path.contains("/events"))
        .cloned()
        .collect();
    assert!(
        writes.is_empty(),
        "nothing changed, nothing written: {writes:?}"
    );

    let sds: Api<kraken_core_kinds::hub::StateDeclaration> = Api::namespaced(env.fake.client(), NS);
    let patch = json!({"spec": {"outputs": {"id": "i-2", "port": 8080}}});
    sds.patch("pet-a.x", &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    round(&env, "e").await?;
    let out = env.fake.get("configmaps", NS, "out").expect("the target");
    assert_eq!(out["data"]["id"], "i-2");
    assert_eq!(
        env.fake.writes("/configmaps/out"),
        1,
        "one apply after the create"
    );
    Ok(())
}

#[tokio::test]
async fn sensitive_values_go_to_a_secret_only() -> anyhow::Result<()> {
    let env = env();
    let data = json!([{"key": "password", "secretKeyRef": {"name": "db", "key": "password"}}]);
    config_export(&env, "to-cm", "ConfigMap", data.clone());
    round(&env, "to-cm").await?;
    let (why, message) = ready(&env, "to-cm");
    assert_eq!(why, "SensitiveValue");
    assert!(message.contains("password"), "{message}");
    assert!(env.fake.get("configmaps", NS, "out").is_none());

    config_export(&env, "to-secret", "Secret", data);
    round(&env, "to-secret").await?;
    assert_eq!(ready(&env, "to-secret").0, "Exported");
    let out: Secret = serde_json::from_value(env.fake.get("secrets", NS, "out").expect("target"))?;
    let value = out
        .data
        .unwrap_or_default()
        .get("password")
        .map(|b| b.0.clone());
    assert_eq!(value.as_deref(), Some(&b"hunter2"[..]));
    Ok(())
}

#[tokio::test]
async fn refuses_a_target_it_does_not_own() -> anyhow::Result<()> {
    let env = env();
    env.fake.insert(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "out", "namespace": NS}, "data": {"mine": "yes"}}),
    );
    config_export(&env, "e", "ConfigMap", id_and_url());
    round(&env, "e").await?;
    let (why, message) = ready(&env, "e");
    assert_eq!(why, "TargetNotOwned");
    assert!(message.contains("ConfigMap out exists"), "{message}");
    let out = env.fake.get("configmaps", NS, "out").expect("untouched");
    assert_eq!(out["data"], json!({"mine": "yes"}));
    assert_eq!(env.fake.writes("/configmaps/out"), 0);
    Ok(())
}

#[tokio::test]
async fn a_target_made_by_someone_between_the_read_and_the_write_is_not_written_over()
-> anyhow::Result<()> {
    let env = env();
    config_export(&env, "e", "ConfigMap", id_and_url());
    // The create answers that a ConfigMap of the name exists now (made since the read).
    env.fake.fail_next("POST", "/configmaps", 409);
    round(&env, "e").await?;
    assert!(env.fake.get("configmaps", NS, "out").is_none());
    assert_eq!(env.fake.writes("/configmaps"), 1, "only the refused create");
    assert!(
        !env.fake
            .requests()
            .iter()
            .any(|r| r.method == "PATCH" && r.path.contains("/configmaps/out")),
        "no apply over it"
    );
    Ok(())
}

#[tokio::test]
async fn deletion_removes_the_target_and_the_request_then_releases() -> anyhow::Result<()> {
    let env = env();
    config_export(&env, "e", "ConfigMap", id_and_url());
    round(&env, "e").await?;
    assert!(env.fake.get("configmaps", NS, "out").is_some());
    let api: Api<ConfigExport> = Api::namespaced(env.fake.client(), NS);
    api.delete("e", &DeleteParams::default()).await?;
    assert!(stored(&env, "e").is_some(), "held by the finalizer");
    export_pass(&env, "e").await?;
    assert!(env.fake.get("configmaps", NS, "out").is_none());
    assert!(
        env.fake
            .get("dependencyrequests", NS, "configexport-e")
            .is_none()
    );
    assert!(stored(&env, "e").is_none(), "finalizer released");
    Ok(())
}

#[tokio::test]
async fn a_conflict_on_the_status_write_converges_on_retry() -> anyhow::Result<()> {
    let env = env();
    config_export(&env, "e", "ConfigMap", id_and_url());
    env.fake.fail_next("PATCH", "/configexports/e/status", 409);
    let first = export_pass(&env, "e").await;
    assert!(matches!(first, Err(Error::Api(kube::Error::Api(e))) if e.code == 409));
    round(&env, "e").await?;
    assert_eq!(ready(&env, "e").0, "Exported");
    Ok(())
}

/// Through the runner: the API server failing is retried with the kit's backoff; a target it
/// may not write waits for a change of the ConfigExport (no polling), and both are counted.
#[tokio::test]
async fn failures_back_off_or_wait_in_the_controller_shape() -> anyhow::Result<()> {
    let env = env();
    config_export(&env, "e", "ConfigMap", id_and_url());
    let uid = stored(&env, "e")
        .and_then(|ce| ce.metadata.uid)
        .unwrap_or_default();
    env.fake.fail_next("PATCH", "/configexports/e", 503);
    let failed = run(&env, "e").await;
    assert_ne!(failed, Action::await_change(), "retried");
    assert_eq!(env.ex.backoff.failures(&uid), 1);

    env.fake.insert(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "out", "namespace": NS}, "data": {"mine": "yes"}}),
    );
    let refused = round(&env, "e").await?;
    assert_eq!(refused, Action::await_change(), "waits for a change");
    assert_eq!(ready(&env, "e").0, "TargetNotOwned");
    assert_eq!(env.ex.backoff.failures(&uid), 0);
    let text = env.ex.metrics.encode();
    for reason in ["ApiError", "TargetNotOwned"] {
        let series = format!(
            "kraken_reconcile_failures_total{{kind=\"ConfigExport.core.kraken.dev\",reason=\"{reason}\"}} 1\n"
        );
        assert!(text.contains(&series), "{series} in {text}");
    }
    Ok(())
}

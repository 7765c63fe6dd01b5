//! The hub's reconcile, end to end over the in-memory API server: requests resolved from
//! StateDeclarations, ConfigMaps, Secrets and templates, the failures a user sees, and the
//! writes each pass makes.

use super::*;
use futures::StreamExt as _;
use kraken_kit::fake_api::FakeApi;
use kraken_kit::metrics::Metrics;
use kube::api::{Patch, PatchParams};
use serde_json::{Value as Json, json};

const NS: &str = "team";
const GROUP_VERSION: &str = "core.kraken.dev/v1alpha1";

/// A kit over the fake API server.
fn kit(fake: &FakeApi) -> Kit {
    Kit::new(fake.client(), Arc::new(Metrics::new()))
}

/// A hub whose index knows one producer kind, Pet of group `x`.
fn hub(fake: &FakeApi) -> Arc<Hub> {
    let index = Arc::new(Index::default());
    // A running controller of Pet: its subscription stays open for the test.
    std::mem::forget(index.subscribe("x.tf.kraken.dev", "Pet"));
    Arc::new(Hub::new(Arc::new(kit(fake)), index))
}

/// What producer Pet `name` (group x) publishes: StateDeclaration `pet-<name>.x`.
fn declaration(fake: &FakeApi, name: &str, outputs: Json) {
    let sd = crate::trust::published_json((NS, "x.tf.kraken.dev"), "Pet", name, outputs);
    fake.insert("statedeclarations", sd);
}

fn config_map(fake: &FakeApi, name: &str, data: Json) {
    fake.insert(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": NS}, "data": data}),
    );
}

fn secret(fake: &FakeApi, name: &str, key: &str, value: &str) {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(value);
    fake.insert(
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "namespace": NS}, "data": {key: encoded}}),
    );
}

fn request(fake: &FakeApi, name: &str, references: Json) {
    fake.insert(
        "dependencyrequests",
        json!({"apiVersion": GROUP_VERSION, "kind": "DependencyRequest",
               "metadata": {"name": name, "namespace": NS},
               "spec": {"consumer": {"apiVersion": "x.tf.kraken.dev/v1", "kind": "Object", "name": name},
                        "references": references}}),
    );
}

fn stored(fake: &FakeApi, name: &str) -> DependencyRequest {
    let json = fake
        .get("dependencyrequests", NS, name)
        .expect("request exists");
    serde_json::from_value(json).expect("a DependencyRequest")
}

/// One reconcile of request `name` as it is stored now: the pass's own result.
async fn pass(fake: &FakeApi, hub: &Arc<Hub>, name: &str) -> Result<Action, Error> {
    Reconciler::reconcile(hub.clone(), Arc::new(stored(fake, name))).await
}

/// The same pass through the runner the controller runs it in: the requeue it chose.
async fn run(fake: &FakeApi, hub: &Arc<Hub>, name: &str) -> Action {
    kraken_kit::reconciler::run(hub.clone(), Arc::new(stored(fake, name))).await
}

fn ready(dr: &DependencyRequest) -> (String, String, String) {
    let c = dr
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == READY))
        .expect("a Ready condition");
    (
        format!("{:?}", c.status),
        c.reason.clone(),
        c.message.clone(),
    )
}

fn values(dr: &DependencyRequest) -> Json {
    let s = dr.status.clone().unwrap_or_default();
    Json::Object(s.values.into_iter().map(|v| (v.path, v.value)).collect())
}

#[tokio::test]
async fn resolves_outputs_keys_and_templates_with_sensitive_values_apart() -> anyhow::Result<()> {
    let fake = FakeApi::new();
    declaration(&fake, "a", json!({"id": "i-1", "port": 8080}));
    config_map(&fake, "settings", json!({"region": "eu-west-1"}));
    secret(&fake, "db", "password", "hunter2");
    request(
        &fake,
        "object-x",
        json!([
            {"path": "id", "resource": {"kind": "Pet", "name": "a", "path": "id"}},
            {"path": "port", "type": "string",
             "stateDeclaration": {"name": "pet-a.x", "path": "port"}},
            {"path": "region", "configMapKeyRef": {"name": "settings", "key": "region"}},
            {"path": "password", "secretKeyRef": {"name": "db", "key": "password"}},
            {"path": "url", "template": "http://${resource:Pet/a:id}:${configMap:settings:region}"},
        ]),
    );
    let hub = hub(&fake);
    pass(&fake, &hub, "object-x").await?;
    let dr = stored(&fake, "object-x");
    assert_eq!(ready(&dr).1, reason::RESOLVED);
    assert_eq!(
        values(&dr),
        json!({"id": "i-1", "port": "8080", "region": "eu-west-1", "url": "http://i-1:eu-west-1"})
    );
    let status = dr.status.clone().unwrap_or_default();
    assert_eq!(status.sensitive_paths, ["password"]);
    assert_eq!(status.secret_name.as_deref(), Some("object-x-values"));
    let dr_json = fake
        .get("dependencyrequests", NS, "object-x")
        .unwrap_or_default();
    assert!(!dr_json.to_string().contains("hunter2"), "never in status");
    let values_secret: Secret = serde_json::from_value(
        fake.get("secrets", NS, "object-x-values")
            .expect("values Secret"),
    )?;
    let data = values_secret.data.unwrap_or_default();
    assert_eq!(
        data.get("password").map(|b| b.0.as_slice()),
        Some(&b"\"hunter2\""[..])
    );
    let owner = values_secret.metadata.owner_references.unwrap_or_default();
    assert_eq!(owner.first().map(|o| o.name.as_str()), Some("object-x"));
    Ok(())
}

#[tokio::test]
async fn a_missing_producer_and_a_type_mismatch_are_reported() -> anyhow::Result<()> {
    let fake = FakeApi::new();
    config_map(&fake, "settings", json!({"count": "seven"}));
    request(
        &fake,
        "object-x",
        json!([{"path": "id", "resource": {"kind": "Pet", "name": "gone", "path": "id"}}]),
    );
    request(
        &fake,
        "object-y",
        json!([{"path": "n", "type": "number",
                "configMapKeyRef": {"name": "settings", "key": "count"}}]),
    );
    let hub = hub(&fake);
    pass(&fake, &hub, "object-x").await?;
    pass(&fake, &hub, "object-y").await?;
    let (status, why, message) = ready(&stored(&fake, "object-x"));
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", reason::NOT_FOUND)
    );
    assert!(message.contains("pet-gone"), "{message}");
    let (_, why, message) = ready(&stored(&fake, "object-y"));
    assert_eq!(why, reason::TYPE_MISMATCH);
    assert!(message.contains("expected number"), "{message}");
    assert!(
        values(&stored(&fake, "object-y"))
            .as_object()
            .is_some_and(|m| m.is_empty())
    );
    Ok(())
}

#[tokio::test]
async fn a_cycle_is_reported_and_its_other_members_resolved_again() -> anyhow::Result<()> {
    let fake = FakeApi::new();
    let reads = |kind_name: &str| json!([{"path": "id", "stateDeclaration": {"name": kind_name, "path": "id"}}]);
    request(&fake, "pet-a.x", reads("pet-b"));
    request(&fake, "pet-b", reads("pet-a.x"));
    let hub = hub(&fake);
    let mut again = std::pin::pin!(retriggered(
        hub.retriggered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(),
    ));
    pass(&fake, &hub, "pet-a.x").await?;
    assert_eq!(ready(&stored(&fake, "pet-a.x")).1, reason::NOT_FOUND);
    pass(&fake, &hub, "pet-b").await?;
    let (_, why, message) = ready(&stored(&fake, "pet-b"));
    assert_eq!(why, reason::CYCLE);
    assert!(message.contains("pet-b → pet-a.x → pet-b"), "{message}");
    let next = again.next().await.expect("pet-a again");
    assert_eq!(next.name, "pet-a.x");
    pass(&fake, &hub, "pet-a.x").await?;
    assert_eq!(ready(&stored(&fake, "pet-a.x")).1, reason::CYCLE);
    Ok(())
}

#[tokio::test]
async fn a_changed_value_resolves_again_and_an_unchanged_one_writes_nothing() -> anyhow::Result<()>
{
    let fake = FakeApi::new();
    config_map(&fake, "settings", json!({"region": "eu-west-1"}));
    secret(&fake, "db", "password", "hunter2");
    request(
        &fake,
        "object-x",
        json!([
            {"path": "region", "configMapKeyRef": {"name": "settings", "key": "region"}},
            {"path": "password", "secretKeyRef": {"name": "db", "key": "password"}},
        ]),
    );
    let hub = hub(&fake);
    pass(&fake, &hub, "object-x").await?;
    assert_eq!(fake.writes("/dependencyrequests/object-x/status"), 1);
    assert_eq!(fake.writes("/secrets/object-x-values"), 1);
    let settings = ObjectKey(SourceKind::ConfigMap, "settings".into());
    assert_eq!(hub.index.readers(NS, &settings), ["object-x"]);

    let before = fake.requests().len();
    pass(&fake, &hub, "object-x").await?;
    let writes: Vec<_> = fake.requests()[before..]
        .iter()
        .filter(|s| s.method != "GET")
        .cloned()
        .collect();
    assert!(
        writes.is_empty(),
        "nothing changed, nothing written: {writes:?}"
    );

    let cms: Api<ConfigMap> = Api::namespaced(fake.client(), NS);
    let patch = json!({"data": {"region": "us-east-1"}});
    cms.patch("settings", &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    pass(&fake, &hub, "object-x").await?;
    assert_eq!(values(&stored(&fake, "object-x"))["region"], "us-east-1");
    assert_eq!(fake.writes("/dependencyrequests/object-x/status"), 2);
    assert_eq!(
        fake.writes("/secrets/object-x-values"),
        1,
        "the secret value did not change"
    );
    Ok(())
}

#[tokio::test]
async fn a_conflict_on_the_status_write_converges_on_retry() -> anyhow::Result<()> {
    let fake = FakeApi::new();
    declaration(&fake, "a", json!({"id": "i-1"}));
    request(
        &fake,
        "object-x",
        json!([{"path": "id", "resource": {"kind": "Pet", "name": "a", "path": "id"}}]),
    );
    let hub = hub(&fake);
    fake.fail_next("PATCH", "/dependencyrequests/object-x/status", 409);
    let first = pass(&fake, &hub, "object-x").await;
    assert!(matches!(first, Err(Error::Api(kube::Error::Api(e))) if e.code == 409));
    assert!(stored(&fake, "object-x").status.is_none());
    pass(&fake, &hub, "object-x").await?;
    assert_eq!(ready(&stored(&fake, "object-x")).1, reason::RESOLVED);
    assert_eq!(values(&stored(&fake, "object-x")), json!({"id": "i-1"}));
    Ok(())
}

#[tokio::test]
async fn a_sharded_hub_resolves_only_the_requests_of_its_consumers() -> anyhow::Result<()> {
    use kraken_kit::ring::{Ownership, View};
    let fake = FakeApi::new();
    config_map(&fake, "settings", json!({"size": "3"}));
    fake.insert(
        "dependencyrequests",
        json!({"apiVersion": GROUP_VERSION, "kind": "DependencyRequest",
               "metadata": {"name": "pet", "namespace": NS,
                            "ownerReferences": [{"apiVersion": "x.tf.kraken.dev/v1", "kind": "Pet", "name": "pet",
                                                 "uid": "consumer-uid", "controller": true}]},
               "spec": {"consumer": {"apiVersion": "x.tf.kraken.dev/v1", "kind": "Pet", "name": "pet"},
                        "references": [{"path": "size", "configMapKeyRef": {"name": "settings", "key": "size"}}]}}),
    );
    let view = View::new(["replica-a", "replica-b"]);
    let owner = view.owner("consumer-uid").expect("an owner").to_owned();
    let other = if owner == "replica-a" {
        "replica-b"
    } else {
        "replica-a"
    };
    let share = |me: &str| Ownership::Shard {
        me: me.into(),
        views: vec![view.clone()],
    };
    let (tx, rx) = tokio::sync::watch::channel((share(other), 1));
    let hub = Arc::new(Hub::new(Arc::new(kit(&fake)), Arc::new(Index::default())).with_shard(rx));
    pass(&fake, &hub, "pet").await?;
    assert!(
        stored(&fake, "pet").status.is_none(),
        "the replica that does not own the consumer wrote its resolution"
    );
    tx.send_replace((share(&owner), 2));
    pass(&fake, &hub, "pet").await?;
    assert_eq!(ready(&stored(&fake, "pet")).0, "True");
    Ok(())
}

#[tokio::test]
async fn a_hub_whose_term_lapsed_writes_nothing() -> anyhow::Result<()> {
    use kraken_kit::fence::{Epoch, Fence};
    let fake = FakeApi::new();
    config_map(&fake, "settings", json!({"size": "3"}));
    request(
        &fake,
        "pet",
        json!([{"path": "size", "configMapKeyRef": {"name": "settings", "key": "size"}}]),
    );
    let fence = Fence::leased();
    let kit = kit(&fake).with_fence(fence.clone());
    let hub = Arc::new(Hub::new(Arc::new(kit), Arc::new(Index::default())));
    let fenced = pass(&fake, &hub, "pet").await;
    assert!(matches!(fenced, Err(Error::Fenced(_))), "{fenced:?}");
    assert!(
        stored(&fake, "pet").status.is_none(),
        "a replica without a current term wrote a resolution"
    );
    let epoch = Epoch {
        lease: "member-lease-uid".into(),
        n: 0,
    };
    fence.grant(
        epoch,
        std::time::Instant::now() + std::time::Duration::from_secs(5),
    );
    pass(&fake, &hub, "pet").await?;
    assert_eq!(ready(&stored(&fake, "pet")).0, "True");
    Ok(())
}

#[tokio::test]
async fn a_resolution_with_newly_published_values_observes_their_propagation() -> anyhow::Result<()>
{
    let fake = FakeApi::new();
    let published =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(2);
    let mut sd =
        crate::trust::published_json((NS, "x.tf.kraken.dev"), "Pet", "a", json!({"id": "a-1"}));
    sd["metadata"]["annotations"] = json!({PUBLISHED_AT_ANNOTATION: published.to_string()});
    fake.insert("statedeclarations", sd);
    request(
        &fake,
        "consumer",
        json!([{"path": "id", "stateDeclaration": {"name": "pet-a.x", "path": "id"}}]),
    );
    let hub = hub(&fake);
    pass(&fake, &hub, "consumer").await?;
    assert_eq!(ready(&stored(&fake, "consumer")).0, "True");
    let text = hub.metrics.encode();
    let sample = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(-1.0)
    };
    assert_eq!(
        sample("kraken_hub_propagation_seconds_count"),
        1.0,
        "{text}"
    );
    assert!(
        sample("kraken_hub_propagation_seconds_sum") >= 2.0,
        "{text}"
    );
    // Nothing new: resolving again observes nothing.
    pass(&fake, &hub, "consumer").await?;
    let again = hub.metrics.encode();
    assert!(
        again.contains("kraken_hub_propagation_seconds_count 1"),
        "{again}"
    );
    Ok(())
}

/// Through the runner: a resolved request waits for the next change; the API server failing
/// is retried with the kit's backoff. (What a reference cannot resolve is no failure of the
/// pass: it is reported on the request, and its sources' watches wake it.)
#[tokio::test]
async fn a_pass_succeeds_or_backs_off_in_the_controller_shape() -> anyhow::Result<()> {
    let fake = FakeApi::new();
    declaration(&fake, "a", json!({"id": "i-1"}));
    request(
        &fake,
        "object-x",
        json!([{"path": "id", "resource": {"kind": "Pet", "name": "a", "path": "id"}}]),
    );
    let hub = hub(&fake);
    let uid = stored(&fake, "object-x").metadata.uid.unwrap_or_default();
    fake.fail_next("GET", "/statedeclarations/pet-a.x", 503);
    let failed = run(&fake, &hub, "object-x").await;
    assert_ne!(failed, Action::await_change(), "retried");
    assert_eq!(hub.backoff.failures(&uid), 1);
    assert!(stored(&fake, "object-x").status.is_none());
    let resolved = run(&fake, &hub, "object-x").await;
    assert_eq!(resolved, Action::await_change());
    assert_eq!(hub.backoff.failures(&uid), 0);
    assert_eq!(ready(&stored(&fake, "object-x")).1, reason::RESOLVED);
    let text = hub.metrics.encode();
    for (series, want) in [
        (
            r#"kraken_reconcile_runs_total{kind="DependencyRequest.core.kraken.dev"}"#,
            "2",
        ),
        (
            r#"kraken_reconcile_failures_total{kind="DependencyRequest.core.kraken.dev",reason="ApiError"}"#,
            "1",
        ),
    ] {
        assert!(
            text.contains(&format!("{series} {want}\n")),
            "{series} in {text}"
        );
    }
    Ok(())
}

/// A values Secret someone else made is never taken over: reported on the request, counted,
/// and left until a change (no retry loop against it).
#[tokio::test]
async fn a_values_secret_of_someone_else_is_refused_and_waits() -> anyhow::Result<()> {
    let fake = FakeApi::new();
    secret(&fake, "db", "password", "hunter2");
    secret(&fake, "object-x-values", "password", "theirs");
    request(
        &fake,
        "object-x",
        json!([{"path": "password", "secretKeyRef": {"name": "db", "key": "password"}}]),
    );
    let hub = hub(&fake);
    let refused = pass(&fake, &hub, "object-x").await;
    assert!(matches!(refused, Err(Error::NotOwned(_))), "{refused:?}");
    assert_eq!(ready(&stored(&fake, "object-x")).1, reason::NOT_OWNED);
    let action = run(&fake, &hub, "object-x").await;
    assert_eq!(action, Action::await_change());
    let uid = stored(&fake, "object-x").metadata.uid.unwrap_or_default();
    assert_eq!(hub.backoff.failures(&uid), 0);
    let theirs = fake
        .get("secrets", NS, "object-x-values")
        .unwrap_or_default();
    assert_eq!(theirs["data"]["password"], "dGhlaXJz", "untouched");
    let series = r#"kraken_reconcile_failures_total{kind="DependencyRequest.core.kraken.dev",reason="NotOwned"} 1"#;
    assert!(hub.metrics.encode().contains(series));
    Ok(())
}

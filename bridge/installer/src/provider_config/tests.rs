//! The ProviderConfig controller over fakes, through the runner it runs in: the fake API
//! server and the fake provider source (a `FakePlugin` given the configuration as the pool
//! gives it to a process: `configFrom` read, built against the provider's schema, configured).

use serde_json::{Value as Json, json};

use super::*;
use kraken_kit::fake_api::FakeApi;
use kraken_kit::metrics::Metrics;
use kraken_provider::fake::FakePlugin;
use kraken_source::fake::{ADDRESS, FakeSource, VERSION};

const NS: &str = "team";
const HOLDER: &str = "kraken.dev/providerconfig-default";

struct Env {
    api: FakeApi,
    ctx: Arc<ProviderConfigs>,
}

fn env() -> Env {
    let api = FakeApi::new();
    let kit = Arc::new(Kit::new(api.client(), Arc::new(Metrics::new())));
    let source = Arc::new(FakeSource::new(api.client(), FakePlugin::new()));
    Env {
        ctx: Arc::new(ProviderConfigs { kit, source }),
        api,
    }
}

impl Env {
    /// The ProviderConfig `default` with `spec` (the fake provider's source added).
    fn provider_config(&self, mut spec: Json) {
        spec["source"] = json!(ADDRESS);
        self.api.insert(
            "providerconfigs",
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
                   "metadata": {"name": "default", "namespace": NS}, "spec": spec}),
        );
    }

    fn secret(&self, name: &str, data: Json) {
        self.api.insert(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": name, "namespace": NS}, "data": data}),
        );
    }

    fn stored(&self) -> Option<ProviderConfig> {
        let json = self.api.get("providerconfigs", NS, "default")?;
        serde_json::from_value(json).ok()
    }

    fn uid(&self) -> String {
        self.stored()
            .and_then(|pc| pc.metadata.uid)
            .unwrap_or_default()
    }

    /// One pass through the runner: the requeue it chose.
    async fn run(&self) -> Action {
        let pc = self.stored().expect("the ProviderConfig exists");
        kraken_kit::reconciler::run(self.ctx.clone(), Arc::new(pc)).await
    }

    /// `(status, reason, message)` of `Ready`.
    fn ready(&self) -> (String, String, String) {
        let status = self.stored().and_then(|pc| pc.status).unwrap_or_default();
        let c = status
            .conditions
            .into_iter()
            .find(|c| c.type_ == READY)
            .expect("a Ready condition");
        (format!("{:?}", c.status), c.reason, c.message)
    }

    fn failures(&self, why: &str) -> bool {
        let series =
            format!("kraken_reconcile_failures_total{{kind=\"{LABEL}\",reason=\"{why}\"}} 1\n");
        self.ctx.metrics.encode().contains(&series)
    }

    fn finalizers(&self, secret: &str) -> Json {
        self.api
            .get("secrets", NS, secret)
            .map(|s| s["metadata"]["finalizers"].clone())
            .unwrap_or_default()
    }
}

#[tokio::test]
async fn a_configured_provider_is_reported_ready() {
    let env = env();
    env.provider_config(json!({}));
    assert_eq!(env.run().await, Action::await_change());
    let pc = env.stored().expect("exists");
    assert_eq!(
        pc.metadata.finalizers,
        Some(vec![CONFIG_FINALIZER.to_owned()])
    );
    let (status, why, message) = env.ready();
    assert_eq!((status.as_str(), why.as_str()), ("True", reason::AVAILABLE));
    assert_eq!(message, format!("{ADDRESS} configured"));
    let status = pc.status.unwrap_or_default();
    assert_eq!(
        (status.version.as_deref(), status.protocol),
        (Some(VERSION), Some(6))
    );
    let runs = format!("kraken_reconcile_runs_total{{kind=\"{LABEL}\"}} 1\n");
    assert!(env.ctx.metrics.encode().contains(&runs));
    // Settled: a second pass writes nothing.
    let writes = env.api.writes("/");
    assert_eq!(env.run().await, Action::await_change());
    assert_eq!(env.api.writes("/"), writes);
}

/// A missing Secret, then a configuration the provider cannot take: reported, and tried again
/// with the kit's backoff (the fix is elsewhere, and nothing watches it); fixed, Ready.
#[tokio::test]
async fn what_may_be_fixed_elsewhere_is_retried_with_backoff() -> anyhow::Result<()> {
    let env = env();
    env.provider_config(json!({"configFrom": [
        {"path": "token", "secretKeyRef": {"name": "creds", "key": "token"}}]}));
    let action = env.run().await;
    assert_ne!(action, Action::await_change(), "retried");
    let (status, why, message) = env.ready();
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", reason::SECRET_MISSING)
    );
    assert!(message.contains("Secret creds"), "{message}");
    assert_eq!(env.ctx.backoff.failures(&env.uid()), 1);

    // The Secret arrives: held for as long as the ProviderConfig reads it, but this provider
    // has no argument `token`.
    env.secret("creds", json!({"token": "czNjcjN0"}));
    assert_ne!(env.run().await, Action::await_change());
    let (_, why, message) = env.ready();
    assert_eq!(why, reason::PROVIDER_CONFIG_INVALID, "{message}");
    assert!(
        !message.contains("s3cr3t"),
        "a value in the status: {message}"
    );
    assert_eq!(env.finalizers("creds"), json!([HOLDER]));
    assert_eq!(
        env.ctx.backoff.failures(&env.uid()),
        2,
        "backing off further"
    );

    let api: Api<ProviderConfig> = Api::namespaced(env.api.client(), NS);
    let patch = json!({"spec": {"configFrom": null}});
    api.patch(
        "default",
        &Default::default(),
        &kube::api::Patch::Merge(patch),
    )
    .await?;
    assert_eq!(env.run().await, Action::await_change());
    assert_eq!(env.ready().1, reason::AVAILABLE);
    assert_eq!(
        env.ctx.backoff.failures(&env.uid()),
        0,
        "reset by the success"
    );
    assert_eq!(env.finalizers("creds"), json!([]), "no longer read: let go");
    assert!(env.failures(reason::SECRET_MISSING));
    assert!(env.failures(reason::PROVIDER_CONFIG_INVALID));
    Ok(())
}

/// A Secret value that cannot be a configuration value: only a change fixes it, so it waits.
#[tokio::test]
async fn a_value_that_is_not_text_waits_for_a_change() {
    let env = env();
    env.secret("creds", json!({"token": "//4="}));
    env.provider_config(json!({"configFrom": [
        {"path": "token", "secretKeyRef": {"name": "creds", "key": "token"}}]}));
    assert_eq!(env.run().await, Action::await_change());
    let (status, why, message) = env.ready();
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", reason::INVALID_SPEC)
    );
    assert!(message.contains("not UTF-8"), "{message}");
    assert_eq!(env.ctx.backoff.failures(&env.uid()), 0);
    assert!(env.failures(reason::INVALID_SPEC));
}

/// The API server failing: nothing reported on the ProviderConfig, retried.
#[tokio::test]
async fn an_api_failure_is_retried_and_not_reported() {
    let env = env();
    env.provider_config(json!({}));
    env.api.fail_next("PATCH", "/providerconfigs/default", 503);
    assert_ne!(env.run().await, Action::await_change());
    assert!(env.stored().and_then(|pc| pc.status).is_none());
    assert_eq!(env.ctx.backoff.failures(&env.uid()), 1);
    assert!(env.failures(reason::API_ERROR));
    assert_eq!(env.run().await, Action::await_change());
    assert_eq!(env.ready().1, reason::AVAILABLE);
}

/// Deleted with no managed resource using it: its Secrets, then itself, are let go.
#[tokio::test]
async fn deletion_without_users_lets_go() -> anyhow::Result<()> {
    let env = env();
    env.secret("creds", json!({"token": "czNjcjN0"}));
    env.provider_config(json!({"configFrom": [
        {"path": "token", "secretKeyRef": {"name": "creds", "key": "token"}}]}));
    env.run().await;
    assert_eq!(env.finalizers("creds"), json!([HOLDER]));
    let api: Api<ProviderConfig> = Api::namespaced(env.api.client(), NS);
    api.delete("default", &Default::default()).await?;
    assert_eq!(env.run().await, Action::await_change());
    assert!(env.stored().is_none(), "still there");
    assert_eq!(env.finalizers("creds"), json!([]));
    Ok(())
}

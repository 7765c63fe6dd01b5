//! The AwsConfig controller: keeps an AwsConfig and the Secrets of its `credentials` until no
//! EC2Instance needs them (`core_kinds::lifecycle`).
//!
//! A pass: finalizer `kraken.dev/config` → hold the credentials Secrets (each carries the
//! finalizer `kraken.dev/awsconfig-<name>` while the AwsConfig exists, so a Secret deleted
//! first stays readable for the terminations still to come) → `Ready`: whether every Secret it
//! names is there and usable. Deleting it waits, `Ready=False, reason InUse`, while
//! EC2Instances of its namespace name it in `spec.awsConfigRef`; then the Secrets and the
//! AwsConfig are released. The EC2Instance controller reads AwsConfigs itself: nothing here is
//! on its path.

use std::sync::Arc;

use futures::StreamExt as _;
use kube::api::{Api, ListParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource as _, ResourceExt as _};

use super::controller::Context;
use kraken_core_kinds::ec2::{AwsConfig, AwsConfigStatus, EC2Instance};
use kraken_core_kinds::lifecycle::{self, CONFIG_FINALIZER, OnDelete, hold_secrets};
use kraken_kit::conditions::{self, READY, Set, reason};
use kraken_kit::finalizer::{self, Phase};
use kraken_kit::time::jitter;

/// How soon an AwsConfig whose Secrets are missing looks again (a Secret's creation does not
/// wake it).
const RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<AwsConfig> = Api::all(ctx.client.clone());
    Controller::new(api, watcher::Config::default().any_semantic())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| std::future::ready(()))
        .await;
}

fn error_policy(cfg: Arc<AwsConfig>, err: &kube::Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(awsconfig = %cfg.name_any(), "AwsConfig reconcile failed: {err}");
    Action::requeue(jitter(std::time::Duration::from_secs(5), 0.2))
}

async fn reconcile(cfg: Arc<AwsConfig>, ctx: Arc<Context>) -> Result<Action, kube::Error> {
    let Some(ns) = cfg.namespace() else {
        return Ok(Action::await_change());
    };
    let api: Api<AwsConfig> = Api::namespaced(ctx.client.clone(), &ns);
    match finalizer::phase(&cfg.metadata, CONFIG_FINALIZER) {
        Phase::Released => return Ok(Action::await_change()),
        Phase::Cleanup => return cleanup(&cfg, &ctx, &api, &ns).await,
        Phase::Apply { add } => {
            if add {
                finalizer::ensure(
                    &api,
                    &cfg.metadata,
                    CONFIG_FINALIZER,
                    true,
                    &ctx.metrics,
                    "awsconfigs",
                )
                .await?;
            }
        }
    }
    let name = cfg.name_any();
    let generation = cfg.metadata.generation;
    let sweep = cfg.status.as_ref().and_then(|s| s.observed_generation) != generation;
    let names = cfg.spec.secret_names();
    let held = hold_secrets(
        &ctx.client,
        &ctx.metrics,
        &ns,
        &holder(&name),
        &names,
        sweep,
    )
    .await?;
    let (update, action) = readiness(&names, &held);
    write_status(&cfg, &ctx, &api, update).await?;
    Ok(action)
}

/// `Ready` from the Secrets named and those held (found, usable, not being deleted).
fn readiness(names: &std::collections::BTreeSet<String>, held: &[String]) -> (Set, Action) {
    let missing: Vec<&str> = names
        .iter()
        .filter(|n| !held.contains(n))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        let message = format!(
            "credentials Secret {} not found, being deleted, or not usable by EC2Instances",
            missing.join(", ")
        );
        return (
            Set::new(READY, false, reason::SECRET_MISSING, message),
            Action::requeue(jitter(RETRY, 0.2)),
        );
    }
    let message = if names.is_empty() {
        "no credentials of its own: the operator's, where it lends them".to_owned()
    } else {
        let list: Vec<&str> = names.iter().map(String::as_str).collect();
        format!("credentials from Secret {}", list.join(", "))
    };
    (
        Set::new(READY, true, reason::AVAILABLE, message),
        Action::await_change(),
    )
}

/// The finalizer this AwsConfig puts on the Secrets it reads.
fn holder(name: &str) -> String {
    lifecycle::holder_finalizer("awsconfig", name)
}

/// An AwsConfig being deleted: wait while EC2Instances name it, then release its Secrets and
/// itself.
async fn cleanup(
    cfg: &AwsConfig,
    ctx: &Context,
    api: &Api<AwsConfig>,
    ns: &str,
) -> Result<Action, kube::Error> {
    let name = cfg.name_any();
    let instances: Api<EC2Instance> = Api::namespaced(ctx.client.clone(), ns);
    let users: Vec<String> = instances
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|o| {
            o.spec
                .aws_config_ref
                .as_ref()
                .is_some_and(|r| r.name == name)
        })
        .map(|o| format!("EC2Instance {ns}/{}", o.name_any()))
        .collect();
    let forced = lifecycle::forced(&cfg.metadata);
    if let OnDelete::Wait(message) = lifecycle::on_delete(&users, forced) {
        let repeated = cfg.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == READY && c.reason == reason::IN_USE && c.message == message)
        });
        write_status(
            cfg,
            ctx,
            api,
            Set::new(READY, false, reason::IN_USE, message.clone()),
        )
        .await?;
        if !repeated {
            ctx.event(
                (false, reason::IN_USE, &message, "Delete"),
                cfg.object_ref(&()),
            );
        }
        return Ok(Action::requeue(lifecycle::WAIT_AGAIN));
    }
    let none = std::collections::BTreeSet::new();
    hold_secrets(&ctx.client, &ctx.metrics, ns, &holder(&name), &none, true).await?;
    finalizer::ensure(
        api,
        &cfg.metadata,
        CONFIG_FINALIZER,
        false,
        &ctx.metrics,
        "awsconfigs",
    )
    .await?;
    Ok(Action::await_change())
}

/// Writes `update` into the status, if that changes it.
async fn write_status(
    cfg: &AwsConfig,
    ctx: &Context,
    api: &Api<AwsConfig>,
    update: Set,
) -> Result<(), kube::Error> {
    let mut status: AwsConfigStatus = cfg.status.clone().unwrap_or_default();
    let generation = cfg.metadata.generation;
    let now = conditions::now();
    status.conditions = conditions::merge(&status.conditions, &[update], generation, &now);
    status.observed_generation = generation;
    if cfg.status.as_ref() == Some(&status) {
        return Ok(());
    }
    kraken_kit::status::merge(api, &ctx.metrics, "awsconfigs", &cfg.name_any(), &status).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kraken_kit::Kit;
    use kraken_kit::fake_api::FakeApi;
    use kraken_kit::metrics::Metrics;
    use kube::api::DeleteParams;
    use serde_json::json;

    /// Over the fake API server: the AwsConfig holds its Secret, waits while an EC2Instance
    /// names it, then releases the Secret and itself.
    #[tokio::test]
    async fn deletion_waits_for_the_instances_then_lets_go() -> anyhow::Result<()> {
        let api = FakeApi::new();
        let ctx = Arc::new(Context {
            kit: Arc::new(Kit::new(api.client(), Arc::new(Metrics::new()))),
            hub_index: Arc::new(kraken_hub::Index::default()),
            policy: Default::default(),
        });
        api.insert(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "creds", "namespace": "team"}, "data": {"id": "aWQ="}}),
        );
        api.insert(
            "awsconfigs",
            json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "AwsConfig",
                   "metadata": {"name": "default", "namespace": "team"},
                   "spec": {"credentials": {
                       "accessKeyIdSecretRef": {"name": "creds", "key": "id"},
                       "secretAccessKeySecretRef": {"name": "creds", "key": "id"}}}}),
        );
        api.insert(
            "ec2instances",
            json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "EC2Instance",
                   "metadata": {"name": "app", "namespace": "team"},
                   "spec": {"awsConfigRef": {"name": "default"}}}),
        );
        let cfgs: Api<AwsConfig> = Api::namespaced(api.client(), "team");
        let pass = || async {
            let cfg = cfgs.get("default").await?;
            reconcile(Arc::new(cfg), ctx.clone()).await
        };
        let ready = |cfg: &Option<serde_json::Value>| {
            cfg.as_ref()
                .and_then(|c| c["status"]["conditions"].as_array().cloned())
                .and_then(|c| c.into_iter().find(|c| c["type"] == READY))
                .map(|c| {
                    (
                        c["status"].clone(),
                        c["reason"].clone(),
                        c["message"].clone(),
                    )
                })
        };
        let secret_finalizers = || {
            api.get("secrets", "team", "creds")
                .map(|s| s["metadata"]["finalizers"].clone())
                .unwrap_or_default()
        };
        pass().await?;
        pass().await?;
        assert_eq!(secret_finalizers(), json!(["kraken.dev/awsconfig-default"]));
        let cfg = api.get("awsconfigs", "team", "default");
        assert_eq!(
            ready(&cfg).map(|r| (r.0, r.1)),
            Some((json!("True"), json!(reason::AVAILABLE)))
        );
        cfgs.delete("default", &DeleteParams::default()).await?;
        pass().await?;
        let (status, why, message) = ready(&api.get("awsconfigs", "team", "default"))
            .ok_or_else(|| anyhow::anyhow!("no Ready condition"))?;
        assert_eq!((status, why), (json!("False"), json!(reason::IN_USE)));
        assert!(
            message
                .as_str()
                .is_some_and(|m| m.contains("EC2Instance team/app")),
            "{message}"
        );
        assert_eq!(secret_finalizers(), json!(["kraken.dev/awsconfig-default"]));
        Api::<EC2Instance>::namespaced(api.client(), "team")
            .delete("app", &DeleteParams::default())
            .await?;
        pass().await?;
        assert!(
            api.get("awsconfigs", "team", "default").is_none(),
            "still there"
        );
        assert_eq!(secret_finalizers(), json!([]));
        Ok(())
    }

    #[test]
    fn ready_when_every_named_secret_is_held() {
        let names: std::collections::BTreeSet<String> =
            ["a".to_owned(), "b".to_owned()].into_iter().collect();
        let (set, _) = readiness(&names, &["a".to_owned(), "b".to_owned()]);
        assert!(set.status, "{}", set.message);
        assert_eq!(set.message, "credentials from Secret a, b");
        let (set, _) = readiness(&names, &["a".to_owned()]);
        assert!(!set.status);
        assert_eq!(set.reason, reason::SECRET_MISSING);
        assert!(set.message.contains("Secret b"), "{}", set.message);
        let (set, _) = readiness(&Default::default(), &[]);
        assert!(set.status, "{}", set.message);
    }
}

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

use kube::api::{Api, ListParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource as _, ResourceExt as _};

use kraken_core_kinds::ec2::{AwsConfig, AwsConfigStatus, EC2Instance};
use kraken_core_kinds::lifecycle::{self, CONFIG_FINALIZER, OnDelete, hold_secrets};
use kraken_kit::Kit;
use kraken_kit::conditions::{self, READY, Set, reason};
use kraken_kit::finalizer::{self, Phase};
use kraken_kit::reconciler::{ReconcileError, Reconciler};

/// The kind as metrics and logs name it.
const LABEL: &str = "AwsConfig.aws.kraken.dev";

/// Why a pass stopped; both are tried again with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The log line shows the API server's answer after this (`kit::errors::chain`).
    #[error("kubernetes API request failed")]
    Api(#[from] kube::Error),
    /// A credentials Secret it names is missing, being deleted or not usable (reported as
    /// `Ready=False`; a Secret's creation does not wake the AwsConfig, its retry does).
    #[error("{0}")]
    SecretMissing(String),
}

impl ReconcileError for Error {
    fn reason(&self) -> &str {
        match self {
            Error::Api(e) => e.reason(),
            Error::SecretMissing(_) => reason::SECRET_MISSING,
        }
    }

    fn is_transient(&self) -> bool {
        true
    }
}

/// The AwsConfig controller's context.
pub struct AwsConfigs {
    pub kit: Arc<Kit>,
}

impl std::ops::Deref for AwsConfigs {
    type Target = Kit;
    fn deref(&self) -> &Kit {
        &self.kit
    }
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<AwsConfigs>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<AwsConfig> = Api::all(ctx.client.clone());
    let controller = Controller::new(api, watcher::Config::default().any_semantic())
        .graceful_shutdown_on(shutdown);
    kraken_kit::reconciler::drive(controller, ctx).await;
}

/// The AwsConfig controller in the shape every controller has (`kraken_kit::reconciler`).
impl Reconciler for AwsConfigs {
    type Object = AwsConfig;
    type Error = Error;

    fn kit(&self) -> &Kit {
        &self.kit
    }

    fn kind(&self) -> &str {
        LABEL
    }

    fn reconcile(
        self: Arc<Self>,
        cfg: Arc<AwsConfig>,
    ) -> impl std::future::Future<Output = Result<Action, Error>> + Send {
        reconcile(cfg, self)
    }
}

async fn reconcile(cfg: Arc<AwsConfig>, ctx: Arc<AwsConfigs>) -> Result<Action, Error> {
    let Some(ns) = cfg.namespace() else {
        return Ok(Action::await_change());
    };
    let api: Api<AwsConfig> = Api::namespaced(ctx.client.clone(), &ns);
    match finalizer::phase(&cfg.metadata, CONFIG_FINALIZER) {
        Phase::Released => return Ok(Action::await_change()),
        Phase::Cleanup => return Ok(cleanup(&cfg, &ctx, &api, &ns).await?),
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
    let ready = readiness(&names, &held);
    let update = match &ready {
        Ok(update) => update.clone(),
        Err(missing) => Set::new(READY, false, reason::SECRET_MISSING, missing.to_string()),
    };
    write_status(&cfg, &ctx, &api, update).await?;
    ready.map(|_| Action::await_change())
}

/// `Ready` from the Secrets named and those held (found, usable, not being deleted).
fn readiness(names: &std::collections::BTreeSet<String>, held: &[String]) -> Result<Set, Error> {
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
        return Err(Error::SecretMissing(message));
    }
    let message = if names.is_empty() {
        "no credentials of its own: the operator's, where it lends them".to_owned()
    } else {
        let list: Vec<&str> = names.iter().map(String::as_str).collect();
        format!("credentials from Secret {}", list.join(", "))
    };
    Ok(Set::new(READY, true, reason::AVAILABLE, message))
}

/// The finalizer this AwsConfig puts on the Secrets it reads.
fn holder(name: &str) -> String {
    lifecycle::holder_finalizer("awsconfig", name)
}

/// An AwsConfig being deleted: wait while EC2Instances name it, then release its Secrets and
/// itself.
async fn cleanup(
    cfg: &AwsConfig,
    ctx: &AwsConfigs,
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
    ctx: &AwsConfigs,
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
    use kraken_kit::fake_api::FakeApi;
    use kraken_kit::metrics::Metrics;
    use kube::api::DeleteParams;
    use serde_json::json;

    fn controller(api: &FakeApi) -> Arc<AwsConfigs> {
        let kit = Kit::new(api.client(), Arc::new(Metrics::new()));
        Arc::new(AwsConfigs { kit: Arc::new(kit) })
    }

    /// The AwsConfig `default` of namespace `team`, reading the Secret `creds`.
    fn aws_config(api: &FakeApi) {
        api.insert(
            "awsconfigs",
            json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "AwsConfig",
                   "metadata": {"name": "default", "namespace": "team"},
                   "spec": {"credentials": {
                       "accessKeyIdSecretRef": {"name": "creds", "key": "id"},
                       "secretAccessKeySecretRef": {"name": "creds", "key": "id"}}}}),
        );
    }

    fn creds(api: &FakeApi) {
        api.insert(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "creds", "namespace": "team"}, "data": {"id": "aWQ="}}),
        );
    }

    /// `(status, reason)` of the stored AwsConfig's `Ready`.
    fn ready_of(api: &FakeApi) -> Option<(String, String)> {
        let cfg = api.get("awsconfigs", "team", "default")?;
        let c = cfg["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == READY)?
            .clone();
        let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
        Some((s("status"), s("reason")))
    }

    /// Through the runner: a missing Secret is reported and retried with the kit's backoff
    /// (its creation does not wake the AwsConfig), and the pass after it appears is Ready.
    /// (An AwsConfig has no failure only its own change could fix: its schema refuses what
    /// it could not use.)
    #[tokio::test]
    async fn a_missing_secret_backs_off_until_it_appears() -> anyhow::Result<()> {
        let api = FakeApi::new();
        let ctx = controller(&api);
        aws_config(&api);
        let cfgs: Api<AwsConfig> = Api::namespaced(api.client(), "team");
        let run = || async {
            let cfg = cfgs.get("default").await?;
            anyhow::Ok(kraken_kit::reconciler::run(ctx.clone(), Arc::new(cfg)).await)
        };
        let uid = cfgs.get("default").await?.metadata.uid.unwrap_or_default();
        let action = run().await?;
        assert_ne!(action, Action::await_change(), "retried");
        assert_eq!(
            ready_of(&api),
            Some(("False".into(), reason::SECRET_MISSING.into()))
        );
        assert_eq!(ctx.backoff.failures(&uid), 1);
        api.fail_next("GET", "/secrets/creds", 503);
        assert_ne!(run().await?, Action::await_change(), "retried");
        assert_eq!(ctx.backoff.failures(&uid), 2);
        creds(&api);
        assert_eq!(run().await?, Action::await_change());
        assert_eq!(
            ready_of(&api),
            Some(("True".into(), reason::AVAILABLE.into()))
        );
        assert_eq!(ctx.backoff.failures(&uid), 0);
        let text = ctx.metrics.encode();
        for (why, n) in [(reason::SECRET_MISSING, 1), (reason::API_ERROR, 1)] {
            let series = format!(
                "kraken_reconcile_failures_total{{kind=\"{LABEL}\",reason=\"{why}\"}} {n}\n"
            );
            assert!(text.contains(&series), "{series} in {text}");
        }
        let runs = format!("kraken_reconcile_runs_total{{kind=\"{LABEL}\"}} 3\n");
        assert!(text.contains(&runs), "{text}");
        Ok(())
    }

    /// Over the fake API server: the AwsConfig holds its Secret, waits while an EC2Instance
    /// names it, then releases the Secret and itself.
    #[tokio::test]
    async fn deletion_waits_for_the_instances_then_lets_go() -> anyhow::Result<()> {
        let api = FakeApi::new();
        let ctx = controller(&api);
        creds(&api);
        aws_config(&api);
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
        let set = readiness(&names, &["a".to_owned(), "b".to_owned()]).expect("ready");
        assert!(set.status, "{}", set.message);
        assert_eq!(set.message, "credentials from Secret a, b");
        let missing = readiness(&names, &["a".to_owned()]).expect_err("a Secret missing");
        assert_eq!(missing.reason(), reason::SECRET_MISSING);
        assert!(missing.to_string().contains("Secret b"), "{missing}");
        let set = readiness(&Default::default(), &[]).expect("ready");
        assert!(set.status, "{}", set.message);
    }
}

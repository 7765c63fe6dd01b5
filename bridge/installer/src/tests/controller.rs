//! The Provider controller over fakes, through the runner it runs in: the fake API server, a
//! filesystem mirror in a temporary directory (registry-fetch's own `Source`, so the package is
//! really installed into a plugin cache, with its hashes), and [`FakeGenerator`] reading the
//! committed schema of hashicorp/random through the real codegen.

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::{Value as Json, json};

use super::super::fake::{FakeGenerator, PROTOCOL};
use super::super::{FINALIZER, Failure, InstallSettings, Installer, LABEL, PROVIDER_NAME_LABEL};
use super::super::{SUSPENDED_LABEL, reason};
use super::test_schema;
use kraken_core_kinds::Provider;
use kraken_kit::Kit;
use kraken_kit::fake_api::FakeApi;
use kraken_kit::metrics::Metrics;

const VERSION: &str = "3.6.0";
const ADDRESS: &str = "registry.terraform.io/hashicorp/random";
const CRD: &str = "pets.random.tf.kraken.dev";

struct Env {
    api: FakeApi,
    generator: Arc<FakeGenerator>,
    inst: Arc<Installer>,
    /// The mirror and the plugin cache.
    dir: tempfile::TempDir,
}

fn env() -> anyhow::Result<Env> {
    let dir = tempfile::tempdir()?;
    let mirror = dir.path().join("mirror");
    // An unpacked mirror package: a directory holding the provider executable.
    let package = mirror
        .join("registry.terraform.io/hashicorp/random")
        .join(VERSION)
        .join(kraken_registry_fetch::current_platform());
    std::fs::create_dir_all(&package)?;
    std::fs::write(
        package.join(format!("terraform-provider-random_v{VERSION}")),
        b"#!/bin/sh\nexit 1\n",
    )?;
    let settings = InstallSettings {
        cache_dir: dir.path().join("cache"),
        default_mirror: Some(mirror.display().to_string()),
        ..InstallSettings::default()
    };
    let api = FakeApi::new();
    let kit = Arc::new(Kit::new(api.client(), Arc::new(Metrics::new())));
    let generator = Arc::new(FakeGenerator::new(test_schema("random")));
    let inst = Arc::new(Installer::with_generator(kit, settings, generator.clone()));
    Ok(Env {
        api,
        generator,
        inst,
        dir,
    })
}

impl Env {
    fn provider(&self, spec: Json) {
        self.api.insert(
            "providers",
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "Provider",
                   "metadata": {"name": "random"}, "spec": spec}),
        );
    }

    fn stored(&self) -> Option<Provider> {
        serde_json::from_value(self.api.get("providers", "", "random")?).ok()
    }

    fn uid(&self) -> String {
        self.stored()
            .and_then(|p| p.metadata.uid)
            .unwrap_or_default()
    }

    async fn run(&self) -> Action {
        let p = self.stored().expect("the Provider exists");
        kraken_kit::reconciler::run(self.inst.clone(), Arc::new(p)).await
    }

    /// `(status, reason, message)` of `Ready`.
    fn ready(&self) -> (String, String, String) {
        let status = self.stored().and_then(|p| p.status).unwrap_or_default();
        let c = status
            .conditions
            .into_iter()
            .find(|c| c.type_ == kraken_kit::conditions::READY)
            .expect("a Ready condition");
        (format!("{:?}", c.status), c.reason, c.message)
    }

    /// The API server marks the CRD `name` Established, as it does once it serves the kind.
    async fn establish(&self, name: &str) -> anyhow::Result<()> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.api.client());
        let status = json!({"status": {"conditions": [
            {"type": "Established", "status": "True"}]}});
        crds.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await?;
        Ok(())
    }

    fn failures(&self, why: &str) -> bool {
        let series =
            format!("kraken_reconcile_failures_total{{kind=\"{LABEL}\",reason=\"{why}\"}} 1\n");
        self.inst.metrics.encode().contains(&series)
    }

    async fn events(&self) -> Vec<String> {
        self.inst
            .events
            .flush(std::time::Duration::from_secs(5))
            .await;
        self.api
            .list("events")
            .iter()
            .map(|e| e["reason"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

fn pets() -> Json {
    json!({"source": "hashicorp/random", "resources": ["random_pet"]})
}

#[tokio::test]
async fn installs_from_the_mirror_then_waits_for_established() -> anyhow::Result<()> {
    let env = env()?;
    env.provider(pets());
    // CRDs applied, not Established yet: looked at again soon.
    let action = env.run().await;
    assert_eq!(
        action,
        Action::requeue(std::time::Duration::from_millis(500))
    );
    assert_eq!(env.ready().1, reason::INSTALLING);
    let p = env.stored().expect("exists");
    assert_eq!(p.metadata.finalizers, Some(vec![FINALIZER.to_owned()]));
    let crd = env
        .api
        .get("customresourcedefinitions", "", CRD)
        .expect("the Pet CRD is applied");
    assert_eq!(crd["metadata"]["labels"][PROVIDER_NAME_LABEL], "random");
    assert_eq!(crd["metadata"]["labels"][SUSPENDED_LABEL], "false");
    // The package is in the plugin cache, recorded with its hash.
    let cached = env
        .dir
        .path()
        .join("cache/registry.terraform.io/hashicorp/random")
        .join(VERSION);
    assert!(cached.is_dir(), "{} is missing", cached.display());
    let status = p.status.unwrap_or_default();
    assert_eq!(status.address.as_deref(), Some(ADDRESS));
    assert_eq!(status.version.as_deref(), Some(VERSION));
    assert!(
        status.hashes.iter().any(|h| h.starts_with("h1:")),
        "{:?}",
        status.hashes
    );

    env.establish(CRD).await?;
    assert_eq!(env.run().await, Action::await_change());
    let (status, why, message) = env.ready();
    assert_eq!((status.as_str(), why.as_str()), ("True", reason::INSTALLED));
    assert_eq!(
        message,
        format!("{ADDRESS} {VERSION} installed with 1 kinds")
    );
    let p = env.stored().and_then(|p| p.status).unwrap_or_default();
    assert_eq!(p.protocol, i32::try_from(PROTOCOL).ok());
    let kinds: Vec<&str> = p.kinds.iter().map(|k| k.kind.as_str()).collect();
    assert_eq!(kinds, ["Pet"]);
    assert_eq!(
        env.generator.calls(),
        1,
        "the CRDs are kept, not generated again"
    );
    assert_eq!(env.events().await, ["Installed"]);
    assert_eq!(env.inst.backoff.failures(&env.uid()), 0);
    Ok(())
}

/// A version no source has, a resource type the provider does not have: only a new spec
/// fixes them, so the Provider waits for one (no polling), reported and counted.
#[tokio::test]
async fn what_only_a_new_spec_fixes_waits_for_a_change() -> anyhow::Result<()> {
    let env = env()?;
    env.provider(json!({"source": "hashicorp/random", "version": "= 9.9.9",
                        "resources": ["random_pet"]}));
    assert_eq!(env.run().await, Action::await_change());
    let (status, why, message) = env.ready();
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", reason::NOT_AVAILABLE)
    );
    assert!(message.contains("9.9.9"), "{message}");
    assert_eq!(env.inst.backoff.failures(&env.uid()), 0);
    assert_eq!(env.generator.calls(), 0);

    let api: Api<Provider> = Api::all(env.api.client());
    let patch = json!({"spec": {"version": null, "resources": ["random_nonesuch"]}});
    api.patch("random", &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    assert_eq!(env.run().await, Action::await_change());
    let (_, why, message) = env.ready();
    assert_eq!(why, reason::UNKNOWN_RESOURCE_TYPES);
    assert!(message.contains("random_nonesuch"), "{message}");
    assert!(env.api.list("customresourcedefinitions").is_empty());
    assert!(env.failures(reason::NOT_AVAILABLE));
    assert!(env.failures(reason::UNKNOWN_RESOURCE_TYPES));
    assert_eq!(
        env.events().await,
        ["VersionNotAvailable", "UnknownResourceTypes"]
    );
    Ok(())
}

/// A schema that cannot be read now (the binary did not start) may be read later: reported,
/// and tried again with the kit's backoff.
#[tokio::test]
async fn what_may_clear_by_itself_is_retried_with_backoff() -> anyhow::Result<()> {
    let env = env()?;
    env.provider(pets());
    env.generator.fail_next(Failure::new(
        reason::SCHEMA_UNAVAILABLE,
        "failed to read the schema: the process exited",
        true,
    ));
    let action = env.run().await;
    assert_ne!(action, Action::await_change(), "retried");
    assert_eq!(env.ready().1, reason::SCHEMA_UNAVAILABLE);
    assert_eq!(env.inst.backoff.failures(&env.uid()), 1);
    assert!(env.failures(reason::SCHEMA_UNAVAILABLE));
    // The next try gets the schema.
    env.run().await;
    assert_eq!(env.ready().1, reason::INSTALLING);
    assert_eq!(env.inst.backoff.failures(&env.uid()), 0);
    // The API server failing the status write: not reported, retried.
    env.establish(CRD).await?;
    env.api.fail_next("PATCH", "/providers/random/status", 503);
    assert_ne!(env.run().await, Action::await_change());
    assert!(env.failures(kraken_kit::conditions::reason::API_ERROR));
    assert_eq!(env.ready().1, reason::INSTALLING, "nothing written");
    assert_eq!(env.run().await, Action::await_change());
    assert_eq!(env.ready().1, reason::INSTALLED);
    Ok(())
}

/// Deleted while no object of its kinds exists: its CRDs are suspended, the Provider goes.
#[tokio::test]
async fn deletion_suspends_its_kinds_and_lets_go() -> anyhow::Result<()> {
    let env = env()?;
    env.provider(pets());
    env.run().await;
    env.establish(CRD).await?;
    env.run().await;
    let api: Api<Provider> = Api::all(env.api.client());
    api.delete("random", &DeleteParams::default()).await?;
    assert_eq!(env.run().await, Action::await_change());
    assert!(env.stored().is_none(), "the finalizer was not released");
    let crd = env
        .api
        .get("customresourcedefinitions", "", CRD)
        .expect("kept");
    assert_eq!(crd["metadata"]["labels"][SUSPENDED_LABEL], "true");
    Ok(())
}

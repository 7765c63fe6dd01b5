//! The core CRDs (`generated-crds/core`, derived from the Rust types in
//! `kraken_bridge::core_kinds`) against a real kube-apiserver + etcd (`scripts/testenv.sh up`).
//!
//! They must install with server-side apply and become Established; a valid ProviderConfig is
//! admitted with its defaults filled in by the API server; bad ones are refused at admission
//! with a message naming the field; `kubectl explain` shows the doc comments; the `kraken`
//! category keeps working alongside generated provider kinds.

use anyhow::{Context as _, bail, ensure};
use kraken_tests::{ControlPlane, repo_root};
use serde_json::{Value as Json, json};

const NAMESPACE: &str = "core-test";

/// `kubectl create --dry-run=server -o json`: Ok(object as the API server would store it)
/// if admitted, Err(message) if refused.
fn dry_run(cp: &ControlPlane, obj: &Json) -> anyhow::Result<Result<Json, String>> {
    let out = cp.kubectl_stdin(
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        &serde_json::to_vec(obj)?,
    )?;
    if out.status.success() {
        Ok(Ok(serde_json::from_slice(&out.stdout)?))
    } else {
        Ok(Err(String::from_utf8_lossy(&out.stderr).into_owned()))
    }
}

fn provider_config(name: &str, spec: Json) -> Json {
    json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
           "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec})
}

/// Dry-run `spec` and require a refusal whose message contains `needle`.
fn refused(cp: &ControlPlane, name: &str, spec: Json, needle: &str) -> anyhow::Result<()> {
    match dry_run(cp, &provider_config(name, spec))? {
        Ok(obj) => bail!("{name} must be refused, was admitted: {obj:#}"),
        Err(msg) => {
            eprintln!("{name}: {}", msg.trim());
            ensure!(
                msg.contains(needle),
                "{name}: message must name {needle}: {msg}"
            );
        }
    }
    Ok(())
}

#[test]
fn core_crds_install_default_validate_and_explain() -> anyhow::Result<()> {
    let cp = ControlPlane::start("core")?;
    let n = cp.install_crds(
        &repo_root().join("generated-crds/core"),
        "kraken.dev/core=true",
    )?;
    ensure!(
        n == 7,
        "expected 7 core CRDs (AwsConfig, EC2Instance, ConfigExport, DependencyRequest, Provider, ProviderConfig, StateDeclaration), found {n}"
    );
    let random = repo_root().join("generated-crds/random");
    cp.install_crds(&random, "tf.kraken.dev/provider=random")?;
    cp.kubectl(&["create", "namespace", NAMESPACE])?;
    expect_admitted_with_defaults(&cp)?;
    expect_bad_ones_refused(&cp)?;
    expect_explained(&cp)?;

    // The kraken category spans core and provider kinds.
    cp.kubectl(&["get", "kraken", "-A"])?;
    let resources = cp.kubectl(&["api-resources", "--categories=kraken", "-o", "name"])?;
    ensure!(
        resources.contains("providerconfigs.core.kraken.dev")
            && resources.contains("pets.random.tf.kraken.dev"),
        "category kraken must list core and provider kinds:\n{resources}"
    );
    Ok(())
}

/// A valid ProviderConfig is admitted, and the API server applies the schema's defaults; the
/// short source form is a source address too, and the Rust type reads what was stored.
fn expect_admitted_with_defaults(cp: &ControlPlane) -> anyhow::Result<()> {
    let valid = provider_config(
        "default",
        json!({
            "source": "registry.terraform.io/hashicorp/random",
            "version": "~> 3.6",
            "config": {"region": "eu-west-1", "assumeRole": [{"roleArn": "arn:x"}]},
            "configFrom": [{"path": "accessKey",
                            "secretKeyRef": {"name": "creds", "key": "access-key"}}],
        }),
    );
    let stored = match dry_run(cp, &valid)? {
        Ok(obj) => obj,
        Err(msg) => bail!("a valid ProviderConfig was refused: {msg}"),
    };
    let spec = &stored["spec"];
    ensure!(
        spec["tls"] == json!(true),
        "tls must default to true: {spec:#}"
    );
    ensure!(
        spec["maxConcurrency"] == json!(10),
        "maxConcurrency must default to 10: {spec:#}"
    );
    ensure!(
        spec["config"]["assumeRole"][0]["roleArn"] == json!("arn:x"),
        "config must be kept as given (preserve-unknown-fields): {spec:#}"
    );

    // The short source form is a source address too; the Rust type reads what was stored.
    let short = provider_config("short", json!({"source": "hashicorp/random", "tls": false}));
    let stored = match dry_run(cp, &short)? {
        Ok(obj) => obj,
        Err(msg) => bail!("source hashicorp/random was refused: {msg}"),
    };
    let typed: kraken_bridge::core_kinds::ProviderConfig =
        serde_json::from_value(stored).context("the stored object must parse as ProviderConfig")?;
    ensure!(!typed.spec.tls && typed.spec.max_concurrency == 10);
    Ok(())
}

/// Bad objects are refused at admission, naming the field.
fn expect_bad_ones_refused(cp: &ControlPlane) -> anyhow::Result<()> {
    refused(
        cp,
        "no-source",
        json!({"version": "1.0.0"}),
        "set exactly one of providerRef",
    )?;
    refused(
        cp,
        "both-sources",
        json!({"source": "hashicorp/random", "providerRef": {"name": "random"}}),
        "set exactly one of providerRef",
    )?;
    // The providerRef form is admitted.
    let by_ref = provider_config("by-ref", json!({"providerRef": {"name": "random"}}));
    if let Err(msg) = dry_run(cp, &by_ref)? {
        bail!("a ProviderConfig with providerRef was refused: {msg}");
    }
    refused(cp, "bad-source", json!({"source": "random"}), "spec.source")?;
    refused(
        cp,
        "bad-source-2",
        json!({"source": "a/b/c/d"}),
        "spec.source",
    )?;
    refused(
        cp,
        "zero-concurrency",
        json!({"source": "hashicorp/random", "maxConcurrency": 0}),
        "spec.maxConcurrency",
    )?;
    refused(
        cp,
        "no-secret-ref",
        json!({"source": "hashicorp/random", "configFrom": [{"path": "token"}]}),
        "secretKeyRef",
    )?;
    let entry = json!({"path": "token", "secretKeyRef": {"name": "s", "key": "k"}});
    refused(
        cp,
        "duplicate-path",
        json!({"source": "hashicorp/random", "configFrom": [entry, entry]}),
        "spec.configFrom",
    )
}

/// `kubectl explain` shows the doc comments; the Provider kind is cluster-scoped, documented,
/// its source required.
fn expect_explained(cp: &ControlPlane) -> anyhow::Result<()> {
    let explain = cp.kubectl(&["explain", "providerconfigs.spec.configFrom"])?;
    ensure!(
        explain.contains("Provider arguments taken from Secrets"),
        "explain must show the field's doc comment:\n{explain}"
    );
    let explain = cp.kubectl(&["explain", "kpc.spec.maxConcurrency"])?;
    ensure!(
        explain.contains("How many RPCs"),
        "short name and doc:\n{explain}"
    );

    // The Provider kind: cluster-scoped, documented, source required.
    let explain = cp.kubectl(&["explain", "providers.spec.resources"])?;
    ensure!(
        explain.contains("Glob patterns"),
        "explain must document spec.resources:\n{explain}"
    );
    let no_source = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "Provider",
        "metadata": {"name": "nosource"}, "spec": {"resources": ["random_pet"]}});
    let out = cp.kubectl_stdin(
        &["apply", "--dry-run=server", "-f", "-"],
        no_source.to_string().as_bytes(),
    )?;
    ensure!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("spec.source"),
        "a Provider without source must be refused naming spec.source: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

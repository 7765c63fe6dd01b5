//! End-to-end tests of the `Provider` kind (docs/operator.md, "Providers at runtime"): a real
//! kube-apiserver, `kraken operator` as a process, real provider packages from a filesystem
//! mirror and from the loopback HTTPS registry (signed, checksummed).
//!
//! Each test has its own control plane with only the core CRDs: every provider kind it sees was
//! installed by the operator at runtime.

#[path = "operator_providers/mirror.rs"]
mod mirror;
#[path = "operator_providers/registry.rs"]
mod registry;

use std::time::Duration;

use anyhow::bail;
use kraken_tests::operator::{Operator, OperatorOptions, condition, with_log_tails};
use kraken_tests::{ControlPlane, repo_root, scratch_dir, wait_for};
use serde_json::{Value, json};

const INSTALL_TIMEOUT: Duration = Duration::from_secs(90);
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(60);

/// A control plane with the core CRDs, a namespace, a fresh plugin cache and an operator that
/// installs Providers into it.
struct Bed {
    op: Operator,
    cp: ControlPlane,
    ns: String,
    cache: tempfile::TempDir,
}

impl Bed {
    fn start(name: &str, mut extra_args: Vec<String>) -> anyhow::Result<Self> {
        let cp = ControlPlane::start(&format!("prov-{name}"))?;
        cp.install_crds(
            &repo_root().join("generated-crds/core"),
            "kraken.dev/core=true",
        )?;
        let ns = format!("prov-{name}");
        cp.create_namespace(&ns)?;
        let cache = scratch_dir("kraken-plugin-cache-")?;
        let mut args = vec![
            "--plugin-cache".to_owned(),
            cache.path().display().to_string(),
        ];
        args.append(&mut extra_args);
        let mut op = Operator::start(
            &cp,
            OperatorOptions {
                args,
                rust_log: "info".into(),
                leader_elect: false,
                ..OperatorOptions::default()
            },
        )?;
        op.wait_ready(Duration::from_secs(60))?;
        Ok(Self { op, cp, ns, cache })
    }

    fn provider(&self, name: &str) -> anyhow::Result<Value> {
        self.cp.get_json("", "providers.core.kraken.dev", name)
    }

    /// Wait until the Provider's Ready condition has `status`/`reason` at its generation.
    fn wait_provider(&self, name: &str, status: &str, reason: &str) -> anyhow::Result<Value> {
        wait_for(
            INSTALL_TIMEOUT,
            &format!("Provider {name} Ready={status}/{reason}"),
            || {
                let p = self.provider(name)?;
                let current = p["status"]["observedGeneration"] == p["metadata"]["generation"];
                match condition(&p, "Ready") {
                    Some((s, r, _)) if current && s == status && r == reason => Ok(Some(p)),
                    other => bail!("Ready {other:?}, status {}", p["status"]),
                }
            },
        )
    }

    /// `kubectl patch` of the Provider `name` with a JSON merge patch.
    fn patch_provider(&self, name: &str, merge: &str) -> anyhow::Result<String> {
        let args = [
            "patch",
            "providers.core.kraken.dev",
            name,
            "--type=merge",
            "-p",
            merge,
        ];
        self.cp.kubectl(&args)
    }

    fn apply(&self, yaml: &str) -> anyhow::Result<String> {
        self.cp.apply_yaml(&self.ns, yaml)
    }

    /// Wait until the object is Ready/Available and Synced at its generation.
    fn wait_reconciled(&self, resource: &str, name: &str) -> anyhow::Result<Value> {
        wait_for(
            RECONCILE_TIMEOUT,
            &format!("{resource} {name} reconciled"),
            || {
                let obj = self.cp.get_json(&self.ns, resource, name)?;
                if kraken_tests::operator::bed::is_reconciled(&obj) {
                    Ok(Some(obj))
                } else {
                    bail!("{}", kraken_tests::operator::bed::describe(&obj))
                }
            },
        )
    }

    fn crds_labelled(&self, selector: &str) -> anyhow::Result<Vec<Value>> {
        let out = self
            .cp
            .kubectl(&["get", "crd", "-l", selector, "-o", "json"])?;
        let list: Value = serde_json::from_str(&out)?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }

    fn finish<T>(&self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        result.map_err(|e| with_log_tails(e, &[("operator", &self.op)], 80))
    }
}

fn provider_manifest(name: &str, spec: Value) -> String {
    json!({
        "apiVersion": "core.kraken.dev/v1alpha1",
        "kind": "Provider",
        "metadata": {"name": name},
        "spec": spec,
    })
    .to_string()
}

fn provider_config(ns: &str, name: &str, provider: &str, config: Value) -> String {
    json!({
        "apiVersion": "core.kraken.dev/v1alpha1",
        "kind": "ProviderConfig",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"providerRef": {"name": provider}, "config": config},
    })
    .to_string()
}

fn managed(
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    pc: &str,
    for_provider: Value,
) -> String {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"providerConfigRef": {"name": pc}, "forProvider": for_provider},
    })
    .to_string()
}

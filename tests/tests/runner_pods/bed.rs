//! The `pods` placement's test bed: a control plane with the core CRDs, the controllers and the
//! test kubelet (image `kraken` → this checkout's binary), an operator offering `pods`, and
//! the fixture installed as a Provider from the test's filesystem mirror.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use kraken_tests::kubelet::{Controllers, Images, TestKubelet};
use kraken_tests::operator::bed::{describe, is_reconciled};
use kraken_tests::operator::{Operator, OperatorOptions, with_log_tails};
use kraken_tests::{ControlPlane, FIXTURE_ADDRESS, TestEnv, kraken_bin, repo_root, wait_for};
use serde_json::{Value, json};

pub const NS: &str = "team-a";
/// The runner of ProviderConfig `default`.
pub const RUNNER: &str = "kraken-runner-default";
pub const WAIT: Duration = Duration::from_secs(90);
const OBJECTS: &str = "objects.fixture.tf.kraken.dev";

pub struct PodsBed {
    pub op: Operator,
    pub kubelet: TestKubelet,
    controllers: Controllers,
    pub cp: ControlPlane,
    ledger: tempfile::TempDir,
    /// The operator's working directory, holding [`NOTES`] in `notes.txt`.
    pub workdir: tempfile::TempDir,
    _cache: tempfile::TempDir,
}

/// What only the operator's working directory holds.
pub const NOTES: &str = "operator-working-notes-do-not-leak";

impl PodsBed {
    pub fn start(name: &str) -> anyhow::Result<Self> {
        Self::start_with(name, &[], Vec::new())
    }

    /// [`PodsBed::start`] with these operator arguments and its environment extended by
    /// `op_env`.
    pub fn start_with(
        name: &str,
        op_args: &[&str],
        op_env: Vec<(String, String)>,
    ) -> anyhow::Result<Self> {
        let env = TestEnv::load()?;
        let mirror = env.path("KRAKEN_TEST_PLUGIN_DIR")?;
        let cp = ControlPlane::start(name)?;
        cp.install_crds(
            &repo_root().join("generated-crds/core"),
            "kraken.dev/core=true",
        )?;
        let controllers = Controllers::start(&cp)?;
        let images = Images(BTreeMap::from([("kraken".to_owned(), kraken_bin()?)]));
        let kubelet = TestKubelet::start(&cp, images)?;
        // Not create_namespace: its `default` ServiceAccount is the controller's to make here.
        cp.kubectl(&["create", "namespace", NS])?;
        let cache = kraken_tests::scratch_dir("kraken-plugin-cache-")?;
        let workdir = kraken_tests::scratch_dir("kraken-operator-cwd-")?;
        std::fs::write(workdir.path().join("notes.txt"), NOTES)?;
        let mut op = Operator::start(
            &cp,
            OperatorOptions {
                args: vec![
                    "--plugin-cache".into(),
                    cache.path().display().to_string(),
                    "--runner-image".into(),
                    "kraken:test".into(),
                ]
                .into_iter()
                .chain(op_args.iter().map(|a| (*a).to_owned()))
                .collect(),
                rust_log: "info,kraken=debug".into(),
                leader_elect: false,
                current_dir: Some(workdir.path().to_path_buf()),
                env: op_env,
                ..OperatorOptions::default()
            },
        )?;
        op.wait_ready(WAIT)?;
        let provider = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "Provider",
            "metadata": {"name": "fixture"},
            "spec": {"source": FIXTURE_ADDRESS, "mirror": mirror, "resources": ["fixture_object"], "dataSources": ["fixture_file"]}});
        cp.apply_yaml("", &provider.to_string())?;
        let ledger = kraken_tests::fixture_dir("kraken-ledger-")?;
        let bed = Self {
            op,
            kubelet,
            controllers,
            cp,
            ledger,
            workdir,
            _cache: cache,
        };
        bed.wait_provider_installed()?;
        Ok(bed)
    }

    fn wait_provider_installed(&self) -> anyhow::Result<()> {
        wait_for(WAIT, "Provider fixture installed", || {
            let p = self
                .cp
                .get_json("", "providers.core.kraken.dev", "fixture")?;
            let ready = p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let crds = [OBJECTS, "datafiles.data.fixture.tf.kraken.dev"];
            if ready
                && crds
                    .iter()
                    .all(|c| self.cp.get_json_opt("", "crd", c).ok().flatten().is_some())
            {
                Ok(Some(()))
            } else {
                bail!("{}", p["status"])
            }
        })
    }

    pub fn ledger(&self) -> &std::path::Path {
        self.ledger.path()
    }

    /// ProviderConfig `default` for the Provider: the ledger merged with `config`, and `runner`.
    pub fn apply_provider_config(&self, config: Value, runner: Value) -> anyhow::Result<()> {
        let mut merged = json!({"ledgerDir": self.ledger()});
        if let (Some(m), Some(c)) = (merged.as_object_mut(), config.as_object()) {
            m.extend(c.clone());
        }
        let pc = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
            "metadata": {"name": "default", "namespace": NS},
            "spec": {"providerRef": {"name": "fixture"}, "config": merged, "runner": runner}});
        self.cp.apply_yaml(NS, &pc.to_string())?;
        Ok(())
    }

    pub fn apply_object(&self, name: &str, size: u64) -> anyhow::Result<()> {
        let obj = json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"providerConfigRef": {"name": "default"},
                     "forProvider": {"name": name, "size": size}}});
        self.cp.apply_yaml(NS, &obj.to_string())?;
        Ok(())
    }

    pub fn wait_reconciled(&self, name: &str) -> anyhow::Result<Value> {
        wait_for(WAIT, &format!("Object {name} reconciled"), || {
            let obj = self.cp.get_json(NS, OBJECTS, name)?;
            if is_reconciled(&obj) {
                Ok(Some(obj))
            } else {
                bail!("{}", describe(&obj))
            }
        })
    }

    /// ServiceAccount `account` of the namespace, annotated with cloud role `role`, and the
    /// Namespace's annotation allowing `allowed` (comma-separated) for runners.
    pub fn account_with_role(
        &self,
        account: &str,
        role: &str,
        allowed: &str,
    ) -> anyhow::Result<()> {
        self.cp
            .kubectl(&["-n", NS, "create", "serviceaccount", account])?;
        let role = format!("eks.amazonaws.com/role-arn={role}");
        self.cp
            .kubectl(&["-n", NS, "annotate", "serviceaccount", account, &role])?;
        let allowed = format!("kraken.dev/runner-service-accounts={allowed}");
        self.cp.kubectl(&["annotate", "namespace", NS, &allowed])?;
        Ok(())
    }

    /// The runner's one Pod, Running.
    pub fn runner_pod(&self) -> anyhow::Result<Value> {
        self.runner_pod_of(RUNNER)
    }

    /// The one Running Pod of the runner Deployment `deployment`.
    pub fn runner_pod_of(&self, deployment: &str) -> anyhow::Result<Value> {
        let prefix = format!("{deployment}-");
        wait_for(WAIT, &format!("the Pod of {deployment} Running"), || {
            let pods = self.cp.list_json(NS, "pods")?;
            let running: Vec<&Value> = pods
                .iter()
                .filter(|p| {
                    p["status"]["phase"] == "Running"
                        && p["metadata"]["deletionTimestamp"].is_null()
                        && p["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with(&prefix))
                })
                .collect();
            match running.as_slice() {
                [pod] => Ok(Some((*pod).clone())),
                other => bail!("{} Running Pods of {}", other.len(), pods.len()),
            }
        })
        .with_context(|| format!("the Pod of {deployment}"))
    }

    /// `result`, with the operator's log, the runner's and the controllers' state on failure.
    pub fn finish<T>(&mut self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        let checked = self.controllers.check();
        let result = result.map_err(|e| {
            let runners: Vec<String> = self
                .cp
                .list_json(NS, "pods")
                .unwrap_or_default()
                .iter()
                .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
                .map(|name| {
                    let log = self.kubelet.log(NS, &name);
                    let tail: Vec<&str> = log.lines().rev().take(40).collect();
                    format!(
                        "--- runner {name}:\n{}",
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    )
                })
                .collect();
            with_log_tails(e, &[("operator", &self.op)], 80).context(runners.join("\n"))
        });
        checked?;
        result
    }
}

//! The native EC2 path end to end (docs/operator.md, "Native EC2"): a real kube-apiserver +
//! etcd, `kraken operator` as a process, and moto's EC2 server on loopback as the cloud. Every
//! assertion about instances reads moto through aws-sdk-ec2 directly ([`Ec2Probe`]), the way a
//! user with the AWS CLI would see them.

#[path = "ec2_native/adopt.rs"]
mod adopt;
#[path = "ec2_native/crash.rs"]
mod crash;
#[path = "ec2_native/hub.rs"]
mod hub;
#[path = "ec2_native/input.rs"]
mod input;
#[path = "ec2_native/life.rs"]
mod life;

use std::time::Duration;

use anyhow::{Context as _, bail};
use kraken_tests::moto::{Ec2Probe, Moto, REGION};
use kraken_tests::operator::bed::{describe, is_reconciled, yaml_documents};
use kraken_tests::operator::{FixtureBed, OperatorOptions, condition};
use kraken_tests::wait_for;
use serde_json::{Value, json};

const EC2: &str = "ec2instances.aws.kraken.dev";
const CONVERGE: Duration = Duration::from_secs(90);

/// A fixture bed (control plane, core CRDs, operator) with moto beside it, an AwsConfig
/// `moto` (region, endpoint, credentials from the Secret `aws-creds`) and a probe.
struct Ec2Bed {
    probe: Ec2Probe,
    bed: FixtureBed,
    moto: Moto,
}

impl Ec2Bed {
    fn start(name: &str) -> anyhow::Result<Self> {
        let opts = OperatorOptions {
            rust_log: "info,kraken=debug,kraken_provider::launch=info".into(),
            env: kraken_tests::moto::operator_env()?,
            // moto (and the tests' closed ports and delay proxies) on loopback; the operator
            // lends no credentials of its own.
            args: vec!["--aws-endpoint".into(), "http://127.0.0.1:*".into()],
            ..OperatorOptions::default()
        };
        let bed = FixtureBed::start(name, opts)?;
        let moto = Moto::start(bed.cp.run_dir())?;
        let probe = Ec2Probe::new(&moto.endpoint())?;
        let this = Self { probe, bed, moto };
        this.aws_config("moto", &this.moto.endpoint())?;
        Ok(this)
    }

    fn ns(&self) -> &str {
        &self.bed.ns
    }

    /// The Secret `aws-creds` and the AwsConfig `name` reaching `endpoint`.
    fn aws_config(&self, name: &str, endpoint: &str) -> anyhow::Result<()> {
        let ns = self.ns();
        self.apply(&[
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "aws-creds", "namespace": ns},
                   "stringData": {"accessKeyId": "testing", "secretAccessKey": "testing"}}),
            json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "AwsConfig",
                   "metadata": {"name": name, "namespace": ns},
                   "spec": {"region": REGION, "endpoint": endpoint, "credentials": {
                       "accessKeyIdSecretRef": {"name": "aws-creds", "key": "accessKeyId"},
                       "secretAccessKeySecretRef": {"name": "aws-creds", "key": "secretAccessKey"}}}}),
        ])
    }

    fn apply(&self, docs: &[Value]) -> anyhow::Result<()> {
        self.bed.apply(&yaml_documents(docs))?;
        Ok(())
    }

    /// Applies the EC2Instance `name` with `spec` (awsConfigRef `moto` unless given).
    fn instance(&self, name: &str, mut spec: Value) -> anyhow::Result<()> {
        if spec.get("awsConfigRef").is_none() {
            spec["awsConfigRef"] = json!({"name": "moto"});
        }
        self.apply(&[manifest(self.ns(), name, spec)])
    }

    fn get(&self, name: &str) -> anyhow::Result<Option<Value>> {
        self.bed.cp.get_json_opt(self.ns(), EC2, name)
    }

    fn patch(&self, name: &str, spec: Value) -> anyhow::Result<()> {
        let patch = json!({"spec": spec}).to_string();
        self.bed.cp.kubectl(&[
            "patch",
            EC2,
            name,
            "-n",
            self.ns(),
            "--type",
            "merge",
            "-p",
            &patch,
        ])?;
        Ok(())
    }

    /// Waits until the EC2Instance is Ready/Available and Synced/ReconcileSuccess at its
    /// generation and `check` holds.
    fn wait_reconciled(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        wait_for(CONVERGE, &format!("EC2Instance {name} {what}"), || {
            let obj = self.get(name)?.context("does not exist")?;
            if is_reconciled(&obj) && check(&obj) {
                Ok(Some(obj))
            } else {
                bail!(
                    "{}; instances {}",
                    describe(&obj),
                    obj["status"]["instances"]
                )
            }
        })
    }

    fn wait_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: &str,
    ) -> anyhow::Result<(String, Value)> {
        wait_for(
            CONVERGE,
            &format!("EC2Instance {name} {type_}={status}/{reason}"),
            || {
                let obj = self.get(name)?.context("does not exist")?;
                match condition(&obj, type_) {
                    Some((s, r, m)) if s == status && r == reason => Ok(Some((m, obj))),
                    other => bail!("{type_} is {other:?}"),
                }
            },
        )
    }

    fn wait_gone(&self, name: &str) -> anyhow::Result<()> {
        wait_for(
            CONVERGE,
            &format!("EC2Instance {name} to be gone"),
            || match self.get(name)? {
                None => Ok(Some(())),
                Some(obj) => bail!("still there: {}", describe(&obj)),
            },
        )
    }

    fn events(&self, name: &str) -> anyhow::Result<Vec<(String, String)>> {
        self.bed.events(name)
    }

    /// Waits for an Event about `name` with `reason` whose message contains `text`.
    fn wait_event(&self, name: &str, reason: &str, text: &str) -> anyhow::Result<String> {
        wait_for(
            CONVERGE,
            &format!("an Event {reason} about {name} saying {text:?}"),
            || {
                let events = self.events(name)?;
                match events.iter().find(|(r, m)| r == reason && m.contains(text)) {
                    Some((_, m)) => Ok(Some(m.clone())),
                    None => bail!("Events: {events:?}"),
                }
            },
        )
    }

    fn finish<T>(&self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        self.bed.finish(result)
    }
}

fn manifest(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "EC2Instance",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn ids(obj: &Value) -> Vec<String> {
    obj["status"]["instances"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

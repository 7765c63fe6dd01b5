//! A test world for the hashicorp/aws provider through the bridge: a fixture bed (control plane,
//! core CRDs, operator) with moto beside it, the `Provider` `aws` installed from the test mirror
//! with only the kinds a test uses, the `ProviderConfig` `aws` pointing every service at moto
//! (credentials from a Secret), the `AwsConfig` `moto` for the native path, and helpers to
//! write and wait for the generated kinds. What moto holds is read through [`AwsApi`].

use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::bed::{describe, is_reconciled, yaml_documents};
use super::{FixtureBed, OperatorOptions, condition};
use crate::aws_api::AwsApi;
use crate::moto::{Moto, REGION};
use crate::{TestEnv, wait_for};

/// The AWS provider's first start reads a schema of 1,616 resource types.
pub const INSTALL: Duration = Duration::from_secs(600);
pub const CONVERGE: Duration = Duration::from_secs(180);
pub const GROUP: &str = "aws.tf.kraken.dev";
pub const DATA_GROUP: &str = "data.aws.tf.kraken.dev";

/// A fixture bed (control plane, core CRDs, operator) with moto beside it, the Provider `aws`
/// installed and the ProviderConfig `aws` pointing at moto.
pub struct AwsBed {
    pub api: AwsApi,
    pub bed: FixtureBed,
    pub moto: Moto,
}

impl AwsBed {
    /// Starts the bed and installs the Provider with these resource types and data sources.
    pub fn start(
        name: &str,
        leader_elect: bool,
        kinds: (&[&str], &[&str]),
    ) -> anyhow::Result<Self> {
        let opts = OperatorOptions {
            rust_log: "info,kraken=debug,kraken_provider::launch=info".into(),
            leader_elect,
            ..OperatorOptions::default()
        };
        Self::start_with(name, opts, kinds)
    }

    /// [`AwsBed::start`] with these operator options; moto's environment and endpoint
    /// allowance are added to them.
    pub fn start_with(
        name: &str,
        opts: OperatorOptions,
        kinds: (&[&str], &[&str]),
    ) -> anyhow::Result<Self> {
        Ok(Self::start_probed(name, opts, kinds, json!({}), |_| Ok(()))?.0)
    }

    /// [`AwsBed::start_with`] with `provider_config` merged into the ProviderConfig's spec
    /// (a benchmark's `maxConcurrency`), running `probe` on the bed once the operator is ready
    /// and before the Provider is installed (a benchmark's idle sample of the operator).
    pub fn start_probed<T>(
        name: &str,
        mut opts: OperatorOptions,
        (resources, data_sources): (&[&str], &[&str]),
        provider_config: Value,
        probe: impl FnOnce(&FixtureBed) -> anyhow::Result<T>,
    ) -> anyhow::Result<(Self, T)> {
        let env = TestEnv::load()?;
        let aws = env.provider("aws")?;
        let mirror = env.path("KRAKEN_TEST_PLUGIN_DIR")?;
        eprintln!(
            "[{name}] hashicorp/aws {} at {}",
            aws.version,
            aws.path.display()
        );
        opts.env.extend(crate::moto::operator_env()?);
        opts.args
            .extend(["--aws-endpoint".into(), "http://127.0.0.1:*".into()]);
        let bed = FixtureBed::start(name, opts)?;
        let probed = probe(&bed)?;
        let moto = Moto::start(bed.cp.run_dir())?;
        let api = AwsApi::new(&moto.endpoint())?;
        let this = Self { api, bed, moto };
        this.install(&mirror, (resources, data_sources), provider_config)?;
        Ok((this, probed))
    }

    pub fn ns(&self) -> &str {
        &self.bed.ns
    }

    pub fn apply(&self, docs: &[Value]) -> anyhow::Result<()> {
        self.bed.apply(&yaml_documents(docs))?;
        Ok(())
    }

    /// The Provider with only the kinds used, the credentials Secret, the ProviderConfig `aws`
    /// (every service at moto) and the AwsConfig `moto` for the native EC2Instance.
    fn install(
        &self,
        mirror: &std::path::Path,
        (resources, data_sources): (&[&str], &[&str]),
        provider_config: Value,
    ) -> anyhow::Result<()> {
        let ns = self.ns().to_owned();
        let endpoint = self.moto.endpoint();
        let endpoints: serde_json::Map<String, Value> =
            ["ec2", "s3", "iam", "sqs", "sns", "dynamodb", "kms", "sts"]
                .iter()
                .map(|s| ((*s).to_owned(), json!(endpoint)))
                .collect();
        self.apply(&[
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "Provider",
                   "metadata": {"name": "aws"},
                   "spec": {"source": "hashicorp/aws", "mirror": mirror,
                            "resources": resources, "dataSources": data_sources}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "aws-creds", "namespace": ns},
                   "stringData": {"accessKeyId": "testing", "secretAccessKey": "testing"}}),
            json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "AwsConfig",
                   "metadata": {"name": "moto", "namespace": ns},
                   "spec": {"region": REGION, "endpoint": endpoint, "credentials": {
                       "accessKeyIdSecretRef": {"name": "aws-creds", "key": "accessKeyId"},
                       "secretAccessKeySecretRef": {"name": "aws-creds", "key": "secretAccessKey"}}}}),
        ])?;
        wait_for(INSTALL, "the Provider aws installed", || {
            let p = self
                .bed
                .cp
                .get_json("", "providers.core.kraken.dev", "aws")?;
            match condition(&p, "Ready") {
                Some((s, r, _)) if s == "True" && r == "Installed" => Ok(Some(())),
                other => bail!("Ready {other:?}"),
            }
        })?;
        let mut pc = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
                   "metadata": {"name": "aws", "namespace": ns},
                   "spec": {"providerRef": {"name": "aws"},
                            "config": {"region": REGION, "s3UsePathStyle": true,
                                       "skipCredentialsValidation": true, "skipMetadataApiCheck": "true",
                                       "skipRegionValidation": true, "endpoints": [endpoints]},
                            "configFrom": [
                                {"path": "accessKey", "secretKeyRef": {"name": "aws-creds", "key": "accessKeyId"}},
                                {"path": "secretKey", "secretKeyRef": {"name": "aws-creds", "key": "secretAccessKey"}}]}});
        if let (Some(spec), Some(extra)) = (pc["spec"].as_object_mut(), provider_config.as_object())
        {
            spec.extend(extra.clone());
        }
        self.apply(&[pc])
    }

    /// `kind` (of group `aws.tf.kraken.dev`, or with `data`, of its data source group).
    pub fn get(&self, kind: &Kind, name: &str) -> anyhow::Result<Option<Value>> {
        self.bed.cp.get_json_opt(self.ns(), &kind.resource(), name)
    }

    pub fn wait_reconciled(&self, kind: &Kind, name: &str) -> anyhow::Result<Value> {
        self.wait_until(kind, name, "reconciled", |_| true)
    }

    /// Waits until `kind/name` is reconciled at its generation and `check` holds.
    pub fn wait_until(
        &self,
        kind: &Kind,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        wait_for(CONVERGE, &format!("{} {name} {what}", kind.0), || {
            let obj = self.get(kind, name)?.context("does not exist")?;
            if is_reconciled(&obj) && check(&obj) {
                Ok(Some(obj))
            } else {
                bail!("{}", describe(&obj))
            }
        })
    }

    pub fn patch(&self, kind: &Kind, name: &str, spec: Value) -> anyhow::Result<()> {
        let patch = json!({"spec": spec}).to_string();
        let resource = kind.resource();
        self.bed.cp.kubectl(&[
            "patch",
            &resource,
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

    /// Waits until the AWS API shows what `check` looks for in the answer of `op`.
    pub fn wait_aws(
        &self,
        what: &str,
        (service, op, params): (&str, &str, Value),
        check: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        wait_for(CONVERGE, what, || {
            let answer = self.api.call(service, op, &params)?;
            if check(&answer) {
                Ok(Some(answer))
            } else {
                bail!("{service}.{op}: {answer}")
            }
        })
    }
}

/// A generated kind: its name and whether it is a data source kind.
pub struct Kind(pub &'static str, pub bool);

impl Kind {
    /// What kubectl takes: the singular (the kind, lowercased), qualified by the group.
    pub fn resource(&self) -> String {
        let group = if self.1 { DATA_GROUP } else { GROUP };
        format!("{}.{group}", self.0.to_ascii_lowercase())
    }
}

pub const VPC: Kind = Kind("Vpc", false);
pub const SUBNET: Kind = Kind("Subnet", false);
pub const SG: Kind = Kind("SecurityGroup", false);
pub const INGRESS: Kind = Kind("VpcSecurityGroupIngressRule", false);
pub const IGW: Kind = Kind("InternetGateway", false);
pub const RT: Kind = Kind("RouteTable", false);
pub const RTA: Kind = Kind("RouteTableAssociation", false);
pub const VERSIONING: Kind = Kind("S3BucketVersioning", false);
pub const BUCKET_POLICY: Kind = Kind("S3BucketPolicy", false);
pub const ROLE: Kind = Kind("IamRole", false);
pub const POLICY: Kind = Kind("IamPolicy", false);
pub const ROLE_POLICY: Kind = Kind("IamRolePolicy", false);
pub const ATTACHMENT: Kind = Kind("IamRolePolicyAttachment", false);
pub const QUEUE: Kind = Kind("SqsQueue", false);
pub const TOPIC: Kind = Kind("SnsTopic", false);
pub const SUBSCRIPTION: Kind = Kind("SnsTopicSubscription", false);
pub const TABLE: Kind = Kind("DynamodbTable", false);
pub const KEY: Kind = Kind("KmsKey", false);
pub const INSTANCE: Kind = Kind("Instance", false);
pub const ZONES: Kind = Kind("DataAvailabilityZones", true);
pub const ME: Kind = Kind("DataCallerIdentity", true);
pub const DOC: Kind = Kind("DataIamPolicyDocument", true);
pub const IMAGE: Kind = Kind("DataAmi", true);

/// A manifest of `kind` named `name` using the ProviderConfig `aws`.
pub fn obj(ns: &str, kind: &Kind, name: &str, for_provider: Value, values_from: Value) -> Value {
    let group = if kind.1 { DATA_GROUP } else { GROUP };
    json!({"apiVersion": format!("{group}/v1alpha1"), "kind": kind.0,
           "metadata": {"name": name, "namespace": ns},
           "spec": {"providerConfigRef": {"name": "aws"}, "forProvider": for_provider,
                    "valuesFrom": values_from, "driftInterval": "3s"}})
}

pub fn from(path: &str, kind: &str, name: &str, out: &str) -> Value {
    json!({"path": path, "resource": {"kind": kind, "name": name, "path": out}})
}

/// A literal argument through `valuesFrom` (a template without references).
pub fn lit(path: &str, text: &str) -> Value {
    json!({"path": path, "template": text})
}

pub fn at(obj: &Value, path: &str) -> String {
    obj["status"]["atProvider"][path]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

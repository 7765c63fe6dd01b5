//! The provider people actually use: the real hashicorp/aws provider (a test peer built by
//! `scripts/testenv.sh install`) driven through the bridge against moto, installed at runtime
//! by a `Provider` that activates only the kinds used, configured by a `ProviderConfig` whose
//! `endpoints` point every service at moto and whose credentials come from a Secret.
//!
//! Every assertion about the cloud reads moto through the AWS SDK (boto3, [`AwsApi`]), never
//! through Kraken. One graph wires bridged resources, data sources and a native EC2Instance:
//! Vpc → Subnet (zone from `DataAvailabilityZones`) → bridged `Instance` (image from `DataAmi`)
//! and native `EC2Instance`; a Role's ARN into policy documents (`DataIamPolicyDocument`) that
//! feed a managed policy, an inline role policy and a bucket policy (the bucket itself is made in
//! moto directly: see `scenario` for why aws_s3_bucket cannot run against moto on loopback); a queue's URL into a
//! ConfigExport; the account id from `DataCallerIdentity` into the same ConfigMap.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::aws_api::AwsApi;
use kraken_tests::moto::{AMI, Moto, REGION};
use kraken_tests::operator::bed::{describe, is_reconciled, yaml_documents};
use kraken_tests::operator::{FixtureBed, OperatorOptions, condition};
use kraken_tests::{TestEnv, wait_for};
use serde_json::{Value, json};

/// The AWS provider's first start reads a schema of 1,616 resource types.
const INSTALL: Duration = Duration::from_secs(600);
const CONVERGE: Duration = Duration::from_secs(180);
const GROUP: &str = "aws.tf.kraken.dev";
const DATA_GROUP: &str = "data.aws.tf.kraken.dev";

const RESOURCES: &[&str] = &[
    "aws_vpc",
    "aws_subnet",
    "aws_security_group",
    "aws_vpc_security_group_ingress_rule",
    "aws_internet_gateway",
    "aws_route_table",
    "aws_route_table_association",
    "aws_s3_bucket_versioning",
    "aws_s3_bucket_policy",
    "aws_iam_role",
    "aws_iam_policy",
    "aws_iam_role_policy",
    "aws_iam_role_policy_attachment",
    "aws_sqs_queue",
    "aws_sns_topic",
    "aws_sns_topic_subscription",
    "aws_dynamodb_table",
    "aws_kms_key",
    "aws_instance",
];
const DATA_SOURCES: &[&str] = &[
    "aws_availability_zones",
    "aws_caller_identity",
    "aws_iam_policy_document",
    "aws_ami",
];

/// A fixture bed (control plane, core CRDs, operator) with moto beside it, the Provider `aws`
/// installed and the ProviderConfig `aws` pointing at moto.
struct AwsBed {
    api: AwsApi,
    bed: FixtureBed,
    moto: Moto,
}

impl AwsBed {
    fn start(name: &str) -> anyhow::Result<Self> {
        let env = TestEnv::load()?;
        let aws = env.provider("aws")?;
        let mirror = env.path("KRAKEN_TEST_PLUGIN_DIR")?;
        eprintln!(
            "[{name}] hashicorp/aws {} at {}",
            aws.version,
            aws.path.display()
        );
        let opts = OperatorOptions {
            rust_log: "info,kraken_bridge=debug,kraken_bridge::provider::launch=info".into(),
            env: kraken_tests::moto::operator_env()?,
            args: vec!["--aws-endpoint".into(), "http://127.0.0.1:*".into()],
            ..OperatorOptions::default()
        };
        let bed = FixtureBed::start(name, opts)?;
        let moto = Moto::start(bed.cp.run_dir())?;
        let api = AwsApi::new(&moto.endpoint())?;
        let this = Self { api, bed, moto };
        this.install(&mirror)?;
        Ok(this)
    }

    fn ns(&self) -> &str {
        &self.bed.ns
    }

    fn apply(&self, docs: &[Value]) -> anyhow::Result<()> {
        self.bed.apply(&yaml_documents(docs))?;
        Ok(())
    }

    /// The Provider with only the kinds used, the credentials Secret, the ProviderConfig `aws`
    /// (every service at moto) and the AwsConfig `moto` for the native EC2Instance.
    fn install(&self, mirror: &std::path::Path) -> anyhow::Result<()> {
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
                            "resources": RESOURCES, "dataSources": DATA_SOURCES}}),
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
        self.apply(&[
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
                   "metadata": {"name": "aws", "namespace": ns},
                   "spec": {"providerRef": {"name": "aws"},
                            "config": {"region": REGION, "s3UsePathStyle": true,
                                       "skipCredentialsValidation": true, "skipMetadataApiCheck": "true",
                                       "skipRegionValidation": true, "endpoints": [endpoints]},
                            "configFrom": [
                                {"path": "accessKey", "secretKeyRef": {"name": "aws-creds", "key": "accessKeyId"}},
                                {"path": "secretKey", "secretKeyRef": {"name": "aws-creds", "key": "secretAccessKey"}}]}}),
        ])
    }

    /// `kind` (of group `aws.tf.kraken.dev`, or with `data`, of its data source group).
    fn get(&self, kind: &Kind, name: &str) -> anyhow::Result<Option<Value>> {
        self.bed.cp.get_json_opt(self.ns(), &kind.resource(), name)
    }

    fn wait_reconciled(&self, kind: &Kind, name: &str) -> anyhow::Result<Value> {
        self.wait_until(kind, name, "reconciled", |_| true)
    }

    /// Waits until `kind/name` is reconciled at its generation and `check` holds.
    fn wait_until(
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

    fn patch(&self, kind: &Kind, name: &str, spec: Value) -> anyhow::Result<()> {
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
    fn wait_aws(
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
struct Kind(&'static str, bool);

impl Kind {
    /// What kubectl takes: the singular (the kind, lowercased), qualified by the group.
    fn resource(&self) -> String {
        let group = if self.1 { DATA_GROUP } else { GROUP };
        format!("{}.{group}", self.0.to_ascii_lowercase())
    }
}

const VPC: Kind = Kind("Vpc", false);
const SUBNET: Kind = Kind("Subnet", false);
const SG: Kind = Kind("SecurityGroup", false);
const INGRESS: Kind = Kind("VpcSecurityGroupIngressRule", false);
const IGW: Kind = Kind("InternetGateway", false);
const RT: Kind = Kind("RouteTable", false);
const RTA: Kind = Kind("RouteTableAssociation", false);
const VERSIONING: Kind = Kind("S3BucketVersioning", false);
const BUCKET_POLICY: Kind = Kind("S3BucketPolicy", false);
const ROLE: Kind = Kind("IamRole", false);
const POLICY: Kind = Kind("IamPolicy", false);
const ROLE_POLICY: Kind = Kind("IamRolePolicy", false);
const ATTACHMENT: Kind = Kind("IamRolePolicyAttachment", false);
const QUEUE: Kind = Kind("SqsQueue", false);
const TOPIC: Kind = Kind("SnsTopic", false);
const SUBSCRIPTION: Kind = Kind("SnsTopicSubscription", false);
const TABLE: Kind = Kind("DynamodbTable", false);
const KEY: Kind = Kind("KmsKey", false);
const INSTANCE: Kind = Kind("Instance", false);
const ZONES: Kind = Kind("DataAvailabilityZones", true);
const ME: Kind = Kind("DataCallerIdentity", true);
const DOC: Kind = Kind("DataIamPolicyDocument", true);
const IMAGE: Kind = Kind("DataAmi", true);

/// A manifest of `kind` named `name` using the ProviderConfig `aws`.
fn obj(ns: &str, kind: &Kind, name: &str, for_provider: Value, values_from: Value) -> Value {
    let group = if kind.1 { DATA_GROUP } else { GROUP };
    json!({"apiVersion": format!("{group}/v1alpha1"), "kind": kind.0,
           "metadata": {"name": name, "namespace": ns},
           "spec": {"providerConfigRef": {"name": "aws"}, "forProvider": for_provider,
                    "valuesFrom": values_from, "driftInterval": "3s"}})
}

fn from(path: &str, kind: &str, name: &str, out: &str) -> Value {
    json!({"path": path, "resource": {"kind": kind, "name": name, "path": out}})
}

/// A literal argument through `valuesFrom` (a template without references).
fn lit(path: &str, text: &str) -> Value {
    json!({"path": path, "template": text})
}

fn at(obj: &Value, path: &str) -> String {
    obj["status"]["atProvider"][path]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

const TRUST: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

fn graph(ns: &str, bucket: &str) -> Vec<Value> {
    let bucket = bucket.to_owned();
    let mut docs = vec![
        obj(
            ns,
            &ZONES,
            "zones",
            json!({"state": "available"}),
            json!([]),
        ),
        obj(ns, &ME, "me", json!({}), json!([])),
        obj(
            ns,
            &IMAGE,
            "image",
            json!({"mostRecent": true, "filter": [{"name": "image-id", "values": [AMI]}]}),
            json!([]),
        ),
        obj(
            ns,
            &VPC,
            "net",
            json!({"cidrBlock": "10.40.0.0/16", "tags": {"team": "a"}}),
            json!([]),
        ),
        obj(
            ns,
            &SUBNET,
            "app",
            json!({"cidrBlock": "10.40.1.0/24"}),
            json!([
                from("vpcId", "Vpc", "net", "id"),
                from(
                    "availabilityZone",
                    "DataAvailabilityZones",
                    "zones",
                    "names.0"
                )
            ]),
        ),
        obj(
            ns,
            &SG,
            "web",
            json!({"name": "kraken-web", "description": "web"}),
            json!([from("vpcId", "Vpc", "net", "id")]),
        ),
        obj(
            ns,
            &INGRESS,
            "https",
            json!({"ipProtocol": "tcp", "fromPort": 443, "toPort": 443, "cidrIpv4": "10.0.0.0/8"}),
            json!([from("securityGroupId", "SecurityGroup", "web", "id")]),
        ),
        obj(
            ns,
            &IGW,
            "gw",
            json!({}),
            json!([from("vpcId", "Vpc", "net", "id")]),
        ),
        obj(
            ns,
            &RT,
            "rt",
            json!({}),
            json!([from("vpcId", "Vpc", "net", "id")]),
        ),
        obj(
            ns,
            &RTA,
            "rta",
            json!({}),
            json!([
                from("subnetId", "Subnet", "app", "id"),
                from("routeTableId", "RouteTable", "rt", "id")
            ]),
        ),
        obj(
            ns,
            &VERSIONING,
            "data",
            json!({"versioningConfiguration": [{"status": "Enabled"}]}),
            json!([lit("bucket", &bucket)]),
        ),
        obj(
            ns,
            &ROLE,
            "app",
            json!({"name": "kraken-app", "assumeRolePolicy": TRUST}),
            json!([]),
        ),
        // The role's ARN into two policy documents: one the role may pass itself (a managed
        // policy and an inline one), one that lets the role read the bucket. The admission
        // rule refuses a block set in forProvider with a field from valuesFrom (one place per
        // argument), so each statement is given wholly through valuesFrom, literals as
        // templates without references.
        obj(
            ns,
            &DOC,
            "pass",
            json!({}),
            json!([
                lit("statement.0.effect", "Allow"),
                lit("statement.0.actions.0", "iam:PassRole"),
                from("statement.0.resources.0", "IamRole", "app", "arn")
            ]),
        ),
        obj(
            ns,
            &DOC,
            "read-bucket",
            json!({}),
            json!([
                lit("statement.0.effect", "Allow"),
                lit("statement.0.actions.0", "s3:GetObject"),
                lit("statement.0.principals.0.type", "AWS"),
                from(
                    "statement.0.principals.0.identifiers.0",
                    "IamRole",
                    "app",
                    "arn"
                ),
                lit(
                    "statement.0.resources.0",
                    &format!("arn:aws:s3:::{bucket}/*")
                )
            ]),
        ),
        obj(
            ns,
            &POLICY,
            "pass",
            json!({"name": "kraken-pass"}),
            json!([from("policy", "DataIamPolicyDocument", "pass", "json")]),
        ),
        obj(
            ns,
            &ROLE_POLICY,
            "inline",
            json!({"name": "kraken-inline"}),
            json!([
                from("role", "IamRole", "app", "id"),
                from("policy", "DataIamPolicyDocument", "pass", "json")
            ]),
        ),
        obj(
            ns,
            &ATTACHMENT,
            "pass",
            json!({}),
            json!([
                from("role", "IamRole", "app", "id"),
                from("policyArn", "IamPolicy", "pass", "arn")
            ]),
        ),
        obj(
            ns,
            &BUCKET_POLICY,
            "data",
            json!({}),
            json!([
                lit("bucket", &bucket),
                from("policy", "DataIamPolicyDocument", "read-bucket", "json")
            ]),
        ),
        obj(
            ns,
            &QUEUE,
            "jobs",
            json!({"name": "kraken-jobs", "visibilityTimeoutSeconds": 30}),
            json!([]),
        ),
        obj(
            ns,
            &TOPIC,
            "events",
            json!({"name": "kraken-events"}),
            json!([]),
        ),
        obj(
            ns,
            &SUBSCRIPTION,
            "jobs",
            json!({"protocol": "sqs"}),
            json!([
                from("topicArn", "SnsTopic", "events", "arn"),
                from("endpoint", "SqsQueue", "jobs", "arn")
            ]),
        ),
        obj(
            ns,
            &TABLE,
            "items",
            json!({"name": "kraken-items", "billingMode": "PAY_PER_REQUEST", "hashKey": "id",
                   "attribute": [{"name": "id", "type": "S"}]}),
            json!([]),
        ),
        obj(
            ns,
            &KEY,
            "key",
            json!({"description": "kraken key", "deletionWindowInDays": 7}),
            json!([]),
        ),
        obj(
            ns,
            &INSTANCE,
            "vm",
            json!({"instanceType": "t3.micro"}),
            json!([
                from("ami", "DataAmi", "image", "id"),
                from("subnetId", "Subnet", "app", "id")
            ]),
        ),
        // The native path beside the bridge, in the bridged subnet.
        json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "EC2Instance",
               "metadata": {"name": "native", "namespace": ns},
               "spec": {"awsConfigRef": {"name": "moto"}, "imageId": AMI, "instanceType": "t3.micro",
                        "valuesFrom": [{"path": "subnetId", "resource": {"kind": "Subnet", "name": "app", "path": "id"}}]}}),
        json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ConfigExport",
        "metadata": {"name": "app-config", "namespace": ns},
        "spec": {"target": {"kind": "ConfigMap", "name": "app-config"}, "data": [
            {"key": "queueUrl", "resource": {"kind": "SqsQueue", "name": "jobs", "path": "url"}},
            {"key": "account", "resource": {"kind": "DataCallerIdentity", "name": "me", "path": "accountId"}},
        ]}}),
    ];
    // Data sources read again every 10 s rather than use the drift interval.
    for d in &mut docs {
        if d["apiVersion"]
            .as_str()
            .is_some_and(|a| a.starts_with("data."))
        {
            let spec = &mut d["spec"];
            if let Some(s) = spec.as_object_mut() {
                s.remove("driftInterval");
                s.insert("refreshInterval".into(), json!("10s"));
            }
        }
    }
    docs
}

#[test]
fn aws_resources_reconcile_through_the_bridge_against_moto() -> anyhow::Result<()> {
    let ab = AwsBed::start("aws-bridge")?;
    let result = scenario(&ab);
    ab.bed.finish(result)
}

fn scenario(ab: &AwsBed) -> anyhow::Result<()> {
    let ns = ab.ns().to_owned();
    // aws_s3_bucket is left out: hashicorp/aws 6.34 reads every bucket's tags through S3
    // Control, which the AWS SDK addresses at <account-id>.<endpoint host> — a name that does
    // not resolve for a loopback endpoint (moto here), so creating any aws_s3_bucket fails with
    // "dial tcp: lookup 123456789012.127.0.0.1: no such host"; `terraform apply` with the same
    // provider and endpoints fails the same way. The bucket is made in moto directly, and its
    // versioning and policy (which name the bucket and do not touch S3 Control) go through the
    // bridge.
    let bucket = format!("kraken-data-{ns}");
    ab.api
        .call("s3", "create_bucket", &json!({"Bucket": bucket}))?;
    ab.apply(&graph(&ns, &bucket))?;

    // Applied: every object Ready, and moto holds what the specs say.
    let zones = ab.wait_reconciled(&ZONES, "zones")?;
    let zone = zones["status"]["atProvider"]["names"][0]
        .as_str()
        .context("no zone names")?
        .to_owned();
    let vpc = ab.wait_reconciled(&VPC, "net")?;
    let vpc_id = at(&vpc, "id");
    let vpcs = ab
        .api
        .call("ec2", "describe_vpcs", &json!({"VpcIds": [vpc_id]}))?;
    ensure!(vpcs["Vpcs"][0]["CidrBlock"] == "10.40.0.0/16", "{vpcs}");
    let subnet = ab.wait_reconciled(&SUBNET, "app")?;
    let subnet_id = at(&subnet, "id");
    let subnets = ab.api.call(
        "ec2",
        "describe_subnets",
        &json!({"SubnetIds": [subnet_id]}),
    )?;
    ensure!(
        subnets["Subnets"][0]["VpcId"] == vpc_id.as_str()
            && subnets["Subnets"][0]["AvailabilityZone"] == zone.as_str(),
        "{subnets}"
    );
    let sg_id = at(&ab.wait_reconciled(&SG, "web")?, "id");
    ab.wait_reconciled(&INGRESS, "https")?;
    let rules = ab.api.call(
        "ec2",
        "describe_security_group_rules",
        &json!({"Filters": [{"Name": "group-id", "Values": [sg_id]}]}),
    )?;
    ensure!(
        rules["SecurityGroupRules"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["FromPort"] == 443 && r["IsEgress"] == false),
        "{rules}"
    );
    let igw_id = at(&ab.wait_reconciled(&IGW, "gw")?, "id");
    let igws = ab.api.call(
        "ec2",
        "describe_internet_gateways",
        &json!({"InternetGatewayIds": [igw_id]}),
    )?;
    ensure!(
        igws["InternetGateways"][0]["Attachments"][0]["VpcId"] == vpc_id.as_str(),
        "{igws}"
    );
    let rt_id = at(&ab.wait_reconciled(&RT, "rt")?, "id");
    ab.wait_reconciled(&RTA, "rta")?;
    let rts = ab.api.call(
        "ec2",
        "describe_route_tables",
        &json!({"RouteTableIds": [rt_id]}),
    )?;
    ensure!(
        rts["RouteTables"][0]["Associations"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["SubnetId"] == subnet_id.as_str()),
        "{rts}"
    );

    ab.wait_reconciled(&VERSIONING, "data")?;
    let versioning = ab
        .api
        .call("s3", "get_bucket_versioning", &json!({"Bucket": bucket}))?;
    ensure!(versioning["Status"] == "Enabled", "{versioning}");
    let role = ab.wait_reconciled(&ROLE, "app")?;
    let role_arn = at(&role, "arn");
    ab.wait_reconciled(&BUCKET_POLICY, "data")?;
    let policy = ab
        .api
        .call("s3", "get_bucket_policy", &json!({"Bucket": bucket}))?;
    ensure!(
        policy["Policy"]
            .as_str()
            .is_some_and(|p| p.contains(&role_arn)),
        "the bucket policy names the role {role_arn}: {policy}"
    );
    ab.wait_reconciled(&POLICY, "pass")?;
    ab.wait_reconciled(&ROLE_POLICY, "inline")?;
    ab.wait_reconciled(&ATTACHMENT, "pass")?;
    let attached = ab.api.call(
        "iam",
        "list_attached_role_policies",
        &json!({"RoleName": "kraken-app"}),
    )?;
    ensure!(
        attached["AttachedPolicies"][0]["PolicyName"] == "kraken-pass",
        "{attached}"
    );
    let inline = ab.api.call(
        "iam",
        "get_role_policy",
        &json!({"RoleName": "kraken-app", "PolicyName": "kraken-inline"}),
    )?;
    ensure!(
        inline.to_string().contains("iam:PassRole"),
        "the inline policy is the document: {inline}"
    );

    let queue = ab.wait_reconciled(&QUEUE, "jobs")?;
    let queue_url = at(&queue, "url");
    let attrs = |name: &str| json!({"QueueUrl": queue_url, "AttributeNames": [name]});
    let visibility = ab
        .api
        .call("sqs", "get_queue_attributes", &attrs("VisibilityTimeout"))?;
    ensure!(
        visibility["Attributes"]["VisibilityTimeout"] == "30",
        "{visibility}"
    );
    let topic_arn = at(&ab.wait_reconciled(&TOPIC, "events")?, "arn");
    ab.wait_reconciled(&SUBSCRIPTION, "jobs")?;
    let subs = ab.api.call(
        "sns",
        "list_subscriptions_by_topic",
        &json!({"TopicArn": topic_arn}),
    )?;
    ensure!(
        subs["Subscriptions"][0]["Endpoint"] == at(&queue, "arn").as_str(),
        "{subs}"
    );
    ab.wait_reconciled(&TABLE, "items")?;
    let table = ab.api.call(
        "dynamodb",
        "describe_table",
        &json!({"TableName": "kraken-items"}),
    )?;
    ensure!(
        table["Table"]["KeySchema"][0]["AttributeName"] == "id",
        "{table}"
    );
    let key_id = at(&ab.wait_reconciled(&KEY, "key")?, "id");
    let key = ab
        .api
        .call("kms", "describe_key", &json!({"KeyId": key_id}))?;
    ensure!(key["KeyMetadata"]["Description"] == "kraken key", "{key}");
    let image = ab.wait_reconciled(&IMAGE, "image")?;
    ensure!(at(&image, "id") == AMI, "{}", describe(&image));
    let vm_id = at(&ab.wait_reconciled(&INSTANCE, "vm")?, "id");
    let vms = ab.api.call(
        "ec2",
        "describe_instances",
        &json!({"InstanceIds": [vm_id]}),
    )?;
    let vm = &vms["Reservations"][0]["Instances"][0];
    ensure!(
        vm["SubnetId"] == subnet_id.as_str() && vm["ImageId"] == AMI,
        "{vm}"
    );
    let native = wait_for(CONVERGE, "the native EC2Instance running", || {
        let o = ab
            .bed
            .cp
            .get_json(&ns, "ec2instances.aws.kraken.dev", "native")?;
        if is_reconciled(&o) && o["status"]["running"] == 1 {
            Ok(Some(o))
        } else {
            bail!("{}", describe(&o))
        }
    })?;
    let native_id = native["status"]["instances"][0]["id"]
        .as_str()
        .context("native instance id")?
        .to_owned();
    let natives = ab.api.call(
        "ec2",
        "describe_instances",
        &json!({"InstanceIds": [native_id]}),
    )?;
    ensure!(
        natives["Reservations"][0]["Instances"][0]["SubnetId"] == subnet_id.as_str(),
        "the native instance is in the bridged subnet: {natives}"
    );
    let me = ab.wait_reconciled(&ME, "me")?;
    let account = at(&me, "accountId");
    let exported = wait_for(CONVERGE, "the ConfigExport written", || {
        let cm = ab.bed.cp.get_json_opt(&ns, "configmap", "app-config")?;
        match cm {
            Some(cm) if cm["data"]["queueUrl"] == queue_url.as_str() => Ok(Some(cm)),
            other => bail!("{other:?}"),
        }
    })?;
    ensure!(
        !account.is_empty() && exported["data"]["account"] == account.as_str(),
        "{exported}"
    );

    changes(ab, &vpc_id, &queue_url, &key_id)?;
    drift(ab, &vpc_id, &queue_url, &bucket, &key_id)?;
    deletion(
        ab,
        &Ids {
            vpc: vpc_id,
            bucket,
            queue_url,
            topic_arn,
            key_id,
            vm: vm_id,
        },
    )
}

/// Changes of spec reach moto in place.
fn changes(ab: &AwsBed, vpc_id: &str, queue_url: &str, key_id: &str) -> anyhow::Result<()> {
    ab.patch(&VPC, "net", json!({"forProvider": {"tags": {"team": "b"}}}))?;
    ab.patch(
        &QUEUE,
        "jobs",
        json!({"forProvider": {"visibilityTimeoutSeconds": 60}}),
    )?;
    ab.patch(
        &KEY,
        "key",
        json!({"forProvider": {"description": "changed"}}),
    )?;
    ab.patch(
        &TABLE,
        "items",
        json!({"forProvider": {"tags": {"env": "test"}}}),
    )?;
    ab.patch(
        &ROLE,
        "app",
        json!({"forProvider": {"description": "the app"}}),
    )?;
    ab.wait_aws(
        "the VPC tag changed",
        ("ec2", "describe_vpcs", json!({"VpcIds": [vpc_id]})),
        |a| has_tag(&a["Vpcs"][0]["Tags"], "team", "b"),
    )?;
    ab.wait_aws(
        "the queue's visibility timeout changed",
        (
            "sqs",
            "get_queue_attributes",
            json!({"QueueUrl": queue_url, "AttributeNames": ["VisibilityTimeout"]}),
        ),
        |a| a["Attributes"]["VisibilityTimeout"] == "60",
    )?;
    ab.wait_aws(
        "the key's description changed",
        ("kms", "describe_key", json!({"KeyId": key_id})),
        |a| a["KeyMetadata"]["Description"] == "changed",
    )?;
    ab.wait_aws(
        "the role's description changed",
        ("iam", "get_role", json!({"RoleName": "kraken-app"})),
        |a| a["Role"]["Description"] == "the app",
    )?;
    let table = ab.wait_until(&TABLE, "items", "tagged", |o| {
        o["status"]["atProvider"]["tags"]["env"] == "test"
    })?;
    ab.wait_aws(
        "the table tagged",
        (
            "dynamodb",
            "list_tags_of_resource",
            json!({"ResourceArn": at(&table, "arn")}),
        ),
        |a| has_tag(&a["Tags"], "env", "test"),
    )?;
    // Every change done before anything is changed outside: the provider's own wait for SQS
    // attributes to settle would otherwise see the outside change and wait out its timeout.
    for (kind, name) in [
        (&VPC, "net"),
        (&QUEUE, "jobs"),
        (&KEY, "key"),
        (&TABLE, "items"),
        (&ROLE, "app"),
    ] {
        ab.wait_reconciled(kind, name)?;
    }
    Ok(())
}

fn has_tag(tags: &Value, key: &str, value: &str) -> bool {
    tags.as_array()
        .into_iter()
        .flatten()
        .any(|t| t["Key"] == key && t["Value"] == value)
}

/// Changed outside Kraken: put back within a few drift intervals.
fn drift(
    ab: &AwsBed,
    vpc_id: &str,
    queue_url: &str,
    bucket: &str,
    key_id: &str,
) -> anyhow::Result<()> {
    ab.api.call(
        "ec2",
        "create_tags",
        &json!({"Resources": [vpc_id], "Tags": [{"Key": "team", "Value": "mallory"}]}),
    )?;
    ab.api.call(
        "sqs",
        "set_queue_attributes",
        &json!({"QueueUrl": queue_url, "Attributes": {"VisibilityTimeout": "5"}}),
    )?;
    ab.api.call(
        "s3",
        "put_bucket_versioning",
        &json!({"Bucket": bucket, "VersioningConfiguration": {"Status": "Suspended"}}),
    )?;
    ab.api.call(
        "kms",
        "update_key_description",
        &json!({"KeyId": key_id, "Description": "theirs"}),
    )?;
    ab.wait_aws(
        "the VPC tag put back",
        ("ec2", "describe_vpcs", json!({"VpcIds": [vpc_id]})),
        |a| has_tag(&a["Vpcs"][0]["Tags"], "team", "b"),
    )?;
    ab.wait_aws(
        "the visibility timeout put back",
        (
            "sqs",
            "get_queue_attributes",
            json!({"QueueUrl": queue_url, "AttributeNames": ["VisibilityTimeout"]}),
        ),
        |a| a["Attributes"]["VisibilityTimeout"] == "60",
    )?;
    ab.wait_aws(
        "versioning enabled again",
        ("s3", "get_bucket_versioning", json!({"Bucket": bucket})),
        |a| a["Status"] == "Enabled",
    )?;
    ab.wait_aws(
        "the key's description put back",
        ("kms", "describe_key", json!({"KeyId": key_id})),
        |a| a["KeyMetadata"]["Description"] == "changed",
    )?;
    // Each said so (Events are published in the background, so a moment after the fix).
    for (kind, name) in [(&VPC, "net"), (&QUEUE, "jobs"), (&VERSIONING, "data")] {
        wait_for(
            CONVERGE,
            &format!("a DriftCorrected Event about {} {name}", kind.0),
            || {
                let events = ab.bed.events(name)?;
                if events.iter().any(|(r, _)| r == "DriftCorrected") {
                    Ok(Some(()))
                } else {
                    bail!("{events:?}")
                }
            },
        )?;
    }
    Ok(())
}

struct Ids {
    vpc: String,
    bucket: String,
    queue_url: String,
    topic_arn: String,
    key_id: String,
    vm: String,
}

/// Deleting everything at once: the hub orders it (readers first), and moto ends up without
/// any of it. A KMS key cannot be deleted at once anywhere: it is scheduled for deletion.
fn deletion(ab: &AwsBed, ids: &Ids) -> anyhow::Result<()> {
    let ns = ab.ns().to_owned();
    let mut kinds: Vec<String> = [
        &VPC,
        &SUBNET,
        &SG,
        &INGRESS,
        &IGW,
        &RT,
        &RTA,
        &VERSIONING,
        &BUCKET_POLICY,
        &ROLE,
        &POLICY,
        &ROLE_POLICY,
        &ATTACHMENT,
        &QUEUE,
        &TOPIC,
        &SUBSCRIPTION,
        &TABLE,
        &KEY,
        &INSTANCE,
        &ZONES,
        &ME,
        &DOC,
        &IMAGE,
    ]
    .iter()
    .map(|k| k.resource())
    .collect();
    kinds.push("ec2instances.aws.kraken.dev".into());
    kinds.push("configexports.core.kraken.dev".into());
    let all = kinds.join(",");
    ab.bed
        .cp
        .kubectl(&["delete", &all, "--all", "-n", &ns, "--wait=false"])?;
    wait_for(Duration::from_secs(600), "every object gone", || {
        let left = ab.bed.cp.kubectl(&["get", &all, "-n", &ns, "-o", "name"])?;
        if left.trim().is_empty() {
            Ok(Some(()))
        } else {
            bail!("left: {}", left.trim().replace('\n', ", "))
        }
    })?;
    let gone =
        |what: &str, service: &str, op: &str, params: Value, empty: &dyn Fn(&Value) -> bool| {
            match ab.api.try_call(service, op, &params)? {
                Err(_) => Ok(()),
                Ok(v) if empty(&v) => Ok(()),
                Ok(v) => bail!("{what} is still there: {v}"),
            }
        };
    gone(
        "the VPC",
        "ec2",
        "describe_vpcs",
        json!({"VpcIds": [ids.vpc]}),
        &|v| v["Vpcs"].as_array().is_none_or(Vec::is_empty),
    )?;
    gone(
        "the bucket policy",
        "s3",
        "get_bucket_policy",
        json!({"Bucket": ids.bucket}),
        &|_| false,
    )?;
    // Versioning, once enabled, can only be suspended: that is what destroying it does.
    let versioning = ab.api.call(
        "s3",
        "get_bucket_versioning",
        &json!({"Bucket": ids.bucket}),
    )?;
    ensure!(versioning["Status"] == "Suspended", "{versioning}");
    gone(
        "the role",
        "iam",
        "get_role",
        json!({"RoleName": "kraken-app"}),
        &|_| false,
    )?;
    gone(
        "the queue",
        "sqs",
        "get_queue_attributes",
        json!({"QueueUrl": ids.queue_url}),
        &|_| false,
    )?;
    gone(
        "the topic",
        "sns",
        "get_topic_attributes",
        json!({"TopicArn": ids.topic_arn}),
        &|_| false,
    )?;
    gone(
        "the table",
        "dynamodb",
        "describe_table",
        json!({"TableName": "kraken-items"}),
        &|_| false,
    )?;
    let key = ab
        .api
        .call("kms", "describe_key", &json!({"KeyId": ids.key_id}))?;
    ensure!(
        key["KeyMetadata"]["KeyState"] == "PendingDeletion",
        "the key is scheduled for deletion: {key}"
    );
    let vms = ab.api.call(
        "ec2",
        "describe_instances",
        &json!({"InstanceIds": [ids.vm]}),
    )?;
    ensure!(
        vms["Reservations"][0]["Instances"][0]["State"]["Name"] == "terminated",
        "{vms}"
    );
    Ok(())
}

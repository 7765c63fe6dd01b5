//! The graph the AWS end-to-end test applies: every type it covers, wired by references.

use kraken_tests::moto::AMI;
use kraken_tests::operator::aws::*;
use serde_json::{Value, json};

const TRUST: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

pub fn graph(ns: &str, bucket: &str) -> Vec<Value> {
    let mut docs = network(ns);
    docs.extend(access(ns, bucket));
    docs.extend(services(ns));
    docs.extend(compute(ns));
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

/// The data sources the network reads, a VPC, a subnet in its first zone, a security group
/// with an ingress rule, an internet gateway and a route table associated with the subnet.
fn network(ns: &str) -> Vec<Value> {
    vec![
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
    ]
}

/// The bucket's versioning and policy, and a role whose ARN goes into two policy documents:
/// one the role may pass itself (a managed policy and an inline one), one that lets the role
/// read the bucket.
fn access(ns: &str, bucket: &str) -> Vec<Value> {
    let mut docs = role_and_its_policies(ns);
    docs.extend([
        obj(
            ns,
            &VERSIONING,
            "data",
            json!({"versioningConfiguration": [{"status": "Enabled"}]}),
            json!([lit("bucket", bucket)]),
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
            &BUCKET_POLICY,
            "data",
            json!({}),
            json!([
                lit("bucket", bucket),
                from("policy", "DataIamPolicyDocument", "read-bucket", "json")
            ]),
        ),
    ]);
    docs
}

/// The role, the document naming what it may pass, a managed policy of it attached to the
/// role, and an inline role policy of it.
fn role_and_its_policies(ns: &str) -> Vec<Value> {
    vec![
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
    ]
}

/// A queue subscribed to a topic, a table and a key.
fn services(ns: &str) -> Vec<Value> {
    vec![
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
    ]
}

/// A bridged instance and a native EC2Instance in the bridged subnet, and a ConfigExport of
/// the queue's URL and the account id.
fn compute(ns: &str) -> Vec<Value> {
    vec![
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
    ]
}

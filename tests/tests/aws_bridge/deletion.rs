//! Deleting everything at once: the hub orders it (readers first), and moto ends up without
//! any of it.

use std::time::Duration;

use anyhow::{bail, ensure};
use kraken_tests::operator::aws::*;
use kraken_tests::wait_for;
use serde_json::{Value, json};

pub struct Ids {
    pub vpc: String,
    pub bucket: String,
    pub queue_url: String,
    pub topic_arn: String,
    pub key_id: String,
    pub vm: String,
}

/// Deleting everything at once: the hub orders it (readers first), and moto ends up without
/// any of it. A KMS key cannot be deleted at once anywhere: it is scheduled for deletion.
pub fn deletion(ab: &AwsBed, ids: &Ids) -> anyhow::Result<()> {
    let ns = ab.ns().to_owned();
    let all = every_kind().join(",");
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
    expect_gone_from_moto(ab, ids)
}

/// Every kind of the graph, as kubectl names them.
fn every_kind() -> Vec<String> {
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
    kinds
}

/// moto holds none of it; versioning is suspended, the key scheduled for deletion, the
/// instance terminated.
fn expect_gone_from_moto(ab: &AwsBed, ids: &Ids) -> anyhow::Result<()> {
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

//! Changes after the apply: the provider's memory as a metric, changes of spec in place,
//! and drift corrected.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::operator::aws::*;
use kraken_tests::wait_for;
use serde_json::{Value, json};

/// One AWS provider process serves the ProviderConfig, and its resident memory is a metric.
pub fn memory(ab: &AwsBed) -> anyhow::Result<()> {
    let config = format!("{}/aws", ab.ns());
    let is_aws =
        |labels: &[(String, String)]| labels.iter().any(|(k, v)| k == "config" && *v == config);
    let rss = wait_for(
        Duration::from_secs(30),
        "the AWS provider's memory metric",
        || {
            Ok(ab
                .bed
                .op
                .metric_where("kraken_provider_resident_memory_bytes", is_aws)
                .ok())
        },
    )?;
    ensure!(
        rss > 50e6,
        "the AWS provider's resident memory: {rss} bytes"
    );
    let pid = ab.bed.op.pid().context("the operator runs")?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let operator_kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_default();
    eprintln!(
        "[aws-bridge] resident memory with 24 objects Ready: AWS provider {:.0} MiB (metric), operator {:.0} MiB (debug build)",
        rss / 1048576.0,
        operator_kb / 1024.0
    );
    Ok(())
}

/// Changes of spec reach moto in place.
pub fn changes(ab: &AwsBed, vpc_id: &str, queue_url: &str, key_id: &str) -> anyhow::Result<()> {
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
    changed_values(ab, "changed", (vpc_id, queue_url, key_id))?;
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

/// Waits until moto shows the values the changed specs give: the VPC's tag, the queue's
/// visibility timeout, the key's description (after the change, and again after drift).
fn changed_values(
    ab: &AwsBed,
    why: &str,
    (vpc_id, queue_url, key_id): (&str, &str, &str),
) -> anyhow::Result<()> {
    ab.wait_aws(
        &format!("the VPC tag {why}"),
        ("ec2", "describe_vpcs", json!({"VpcIds": [vpc_id]})),
        |a| has_tag(&a["Vpcs"][0]["Tags"], "team", "b"),
    )?;
    ab.wait_aws(
        &format!("the queue's visibility timeout {why}"),
        (
            "sqs",
            "get_queue_attributes",
            json!({"QueueUrl": queue_url, "AttributeNames": ["VisibilityTimeout"]}),
        ),
        |a| a["Attributes"]["VisibilityTimeout"] == "60",
    )?;
    ab.wait_aws(
        &format!("the key's description {why}"),
        ("kms", "describe_key", json!({"KeyId": key_id})),
        |a| a["KeyMetadata"]["Description"] == "changed",
    )?;
    Ok(())
}

fn has_tag(tags: &Value, key: &str, value: &str) -> bool {
    tags.as_array()
        .into_iter()
        .flatten()
        .any(|t| t["Key"] == key && t["Value"] == value)
}

/// Changed outside Kraken: put back within a few drift intervals.
pub fn drift(
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
    changed_values(ab, "put back", (vpc_id, queue_url, key_id))?;
    ab.wait_aws(
        "versioning enabled again",
        ("s3", "get_bucket_versioning", json!({"Bucket": bucket})),
        |a| a["Status"] == "Enabled",
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

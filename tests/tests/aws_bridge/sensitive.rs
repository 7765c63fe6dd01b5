//! Sensitivity follows the value: a queue whose name and one tag come from a Secret. hashicorp/aws
//! echoes both (the name into its `url`, `arn` and id, the tag into `tags_all`); none of it may
//! show in the object, its StateDeclaration, its DependencyRequest, Events, conditions or the
//! operator's own log lines, while moto (read with boto3) has the queue with its tag.

use anyhow::ensure;
use serde_json::json;

use kraken_tests::operator::aws::{AwsBed, QUEUE, lit, obj};

const NAME: &str = "kraken-secret-queue-7f3a";
const OWNER: &str = "s3cr3t-owner-42";

pub fn echoes(ab: &AwsBed) -> anyhow::Result<()> {
    let ns = ab.ns().to_owned();
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "queue-secret", "namespace": ns},
        "stringData": {"name": NAME, "owner": OWNER}});
    let key = |path: &str, key: &str| json!({"path": path, "secretKeyRef": {"name": "queue-secret", "key": key}});
    let mut queue = obj(
        &ns,
        &QUEUE,
        "hidden",
        json!({"visibilityTimeoutSeconds": 45}),
        json!([
            key("name", "name"),
            key("tags.owner", "owner"),
            lit("tags.team", "a")
        ]),
    );
    // Published although nothing reads it, to check what the declaration says.
    queue["metadata"]["annotations"] = json!({"kraken.dev/publish": "true"});
    ab.apply(&[secret, queue])?;
    let obj = ab.wait_reconciled(&QUEUE, "hidden")?;

    // The provider got both values: moto has the queue, named and tagged from the Secret.
    let url = ab
        .api
        .call("sqs", "get_queue_url", &json!({"QueueName": NAME}))?["QueueUrl"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let tags = ab
        .api
        .call("sqs", "list_queue_tags", &json!({"QueueUrl": url}))?;
    ensure!(tags["Tags"]["owner"] == OWNER, "moto's tags: {tags}");

    ensure!(
        obj["status"]["externalId"] == "(sensitive)",
        "the id is the queue's URL, made of its name: {}",
        obj["status"]["externalId"]
    );
    let shown = &obj["status"]["atProvider"];
    for echo in ["url", "arn", "tagsAll", "tags", "name"] {
        ensure!(
            shown.get(echo).is_none(),
            "atProvider shows {echo}: {shown}"
        );
    }
    ensure!(
        shown.get("visibilityTimeoutSeconds").is_some(),
        "the rest is shown: {shown}"
    );
    for what in [
        "sqsqueues.aws.tf.kraken.dev",
        "statedeclarations",
        "dependencyrequests",
        "events",
    ] {
        let text = ab.bed.cp.kubectl(&["get", what, "-n", &ns, "-o", "json"])?;
        for value in [NAME, OWNER] {
            ensure!(!text.contains(value), "a Secret's value shows in {what}");
        }
    }
    // The operator's own lines; the provider's relayed output (`provider::stdio`, at debug
    // level, off by default) is the provider's: hashicorp/aws logs each request it sends.
    let log = ab.bed.op.logs()?;
    let leaks: Vec<&str> = log
        .lines()
        .filter(|l| !l.contains("provider::stdio") && (l.contains(NAME) || l.contains(OWNER)))
        .collect();
    ensure!(
        leaks.is_empty(),
        "a Secret's value is in the operator's log:\n{}",
        leaks.join("\n")
    );
    // The queue is deleted with everything else (`deletion`): hashicorp/aws waits minutes for
    // SQS to confirm a deleted queue is gone.
    Ok(())
}

//! What the applied graph made, read in moto through the AWS SDK: every object Ready, and
//! moto holding what the specs say.

use anyhow::{Context as _, bail, ensure};
use kraken_tests::moto::AMI;
use kraken_tests::operator::aws::*;
use kraken_tests::operator::bed::{describe, is_reconciled};
use kraken_tests::wait_for;
use serde_json::json;

/// The network's ids the later checks use.
pub struct Network {
    pub vpc_id: String,
    pub subnet_id: String,
}

/// The VPC, the subnet in the first zone, the security group's ingress rule, the internet
/// gateway and the route table's association.
pub fn network(ab: &AwsBed) -> anyhow::Result<Network> {
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
            .any(|a| a["SubnetId"] == subnet_id),
        "{rts}"
    );
    Ok(Network { vpc_id, subnet_id })
}

/// The bucket's versioning and policy (naming the role), the managed and inline policies.
pub fn access(ab: &AwsBed, bucket: &str) -> anyhow::Result<()> {
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
    Ok(())
}

/// The queue, the topic's subscription to it, the table and the key; returns the queue's URL,
/// the topic's ARN and the key's id.
pub fn services(ab: &AwsBed) -> anyhow::Result<(String, String, String)> {
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
    Ok((queue_url, topic_arn, key_id))
}

/// The image, the bridged instance and the native EC2Instance in the bridged subnet, and the
/// ConfigExport of the queue's URL and the account; returns the bridged instance's id.
pub fn compute(ab: &AwsBed, subnet_id: &str, queue_url: &str) -> anyhow::Result<String> {
    let ns = ab.ns().to_owned();
    let image = ab.wait_reconciled(&IMAGE, "image")?;
    ensure!(at(&image, "id") == AMI, "{}", describe(&image));
    let vm_id = at(&ab.wait_reconciled(&INSTANCE, "vm")?, "id");
    let vms = ab.api.call(
        "ec2",
        "describe_instances",
        &json!({"InstanceIds": [vm_id]}),
    )?;
    let vm = &vms["Reservations"][0]["Instances"][0];
    ensure!(vm["SubnetId"] == subnet_id && vm["ImageId"] == AMI, "{vm}");
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
        natives["Reservations"][0]["Instances"][0]["SubnetId"] == subnet_id,
        "the native instance is in the bridged subnet: {natives}"
    );
    let me = ab.wait_reconciled(&ME, "me")?;
    let account = at(&me, "accountId");
    let exported = wait_for(CONVERGE, "the ConfigExport written", || {
        let cm = ab.bed.cp.get_json_opt(&ns, "configmap", "app-config")?;
        match cm {
            Some(cm) if cm["data"]["queueUrl"] == queue_url => Ok(Some(cm)),
            other => bail!("{other:?}"),
        }
    })?;
    ensure!(
        !account.is_empty() && exported["data"]["account"] == account.as_str(),
        "{exported}"
    );
    Ok(vm_id)
}

//! Crash recovery without a name, against the real hashicorp/aws provider and moto: 50 objects
//! of types that take no name Kraken could import them by (`aws_vpc`, `aws_subnet`,
//! `aws_security_group` and `aws_sqs_queue` with `name` unset, so the provider makes one up)
//! are created while the operator is SIGKILLed at least 10 times. A kill inside a create window
//! leaves the create fence open with no state; the restarted operator must find what that
//! create made by the owner tag (`kraken.dev/owner-uid`) through the provider's `ListResource`
//! (EC2 types: filtered by the tag in moto; SQS: listed whole and matched by Kraken), never
//! make a second one. Afterwards moto holds exactly one object per resource, read through
//! boto3.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kraken_tests::operator::aws::*;
use kraken_tests::operator::bed::is_reconciled;
use kraken_tests::wait_for;
use serde_json::{Value, json};

const RESOURCES: &[&str] = &[
    "aws_vpc",
    "aws_subnet",
    "aws_security_group",
    "aws_sqs_queue",
];
const VPC: Kind = Kind("Vpc", false);
const SUBNET: Kind = Kind("Subnet", false);
const SG: Kind = Kind("SecurityGroup", false);
const QUEUE: Kind = Kind("SqsQueue", false);
const OWNER: &str = "kraken.dev/owner-uid";

/// How many of each kind, 50 in all (besides the VPC the subnets and groups live in).
const COUNTS: [(&Kind, usize); 4] = [(&VPC, 12), (&SUBNET, 13), (&SG, 13), (&QUEUE, 12)];
const KILLS: usize = 10;

fn name(kind: &Kind, i: usize) -> String {
    format!("{}-{i:02}", kind.0.to_ascii_lowercase())
}

fn manifest(ns: &str, kind: &Kind, i: usize) -> Value {
    let (for_provider, values_from) = match kind.0 {
        "Vpc" => (
            json!({"cidrBlock": format!("10.{}.0.0/16", 100 + i)}),
            json!([]),
        ),
        "Subnet" => (
            json!({"cidrBlock": format!("10.99.{i}.0/24")}),
            json!([from("vpcId", "Vpc", "base", "id")]),
        ),
        "SecurityGroup" => (
            json!({"description": format!("chaos {i}")}),
            json!([from("vpcId", "Vpc", "base", "id")]),
        ),
        _ => (json!({"visibilityTimeoutSeconds": 30 + i}), json!([])),
    };
    obj(ns, kind, &name(kind, i), for_provider, values_from)
}

#[test]
fn sigkills_during_creates_leave_exactly_one_aws_object_per_resource() -> anyhow::Result<()> {
    // Leader election off: a restarted operator leads at once instead of waiting out the dead
    // one's Lease; what is under test is the create fence and recovery.
    let mut ab = AwsBed::start("aws-chaos", false, (RESOURCES, &[]))?;
    let result = scenario(&mut ab);
    ab.bed.finish(result)
}

fn scenario(ab: &mut AwsBed) -> anyhow::Result<()> {
    let ns = ab.ns().to_owned();
    ab.apply(&[obj(
        &ns,
        &VPC,
        "base",
        json!({"cidrBlock": "10.99.0.0/16"}),
        json!([]),
    )])?;
    let base_id = at(&ab.wait_reconciled(&VPC, "base")?, "id");
    let docs: Vec<Value> = COUNTS
        .iter()
        .flat_map(|(kind, n)| (0..*n).map(|i| manifest(&ns, kind, i)))
        .collect();
    let started = Instant::now();
    ab.apply(&docs)?;

    // SIGKILL of the operator (its AWS provider, SIGTERMed right after, exits at once:
    // `kill_tree`) on a fixed, uneven schedule while the creates run: each kill lands that
    // long after the restarted operator's AWS provider for the ProviderConfig came up (before
    // it, nothing is being created). Short enough that ten kills land before the 50 are done:
    // a restarted process takes its schema from the cache and creates at once, so a cycle of a
    // few seconds finishes a dozen creates.
    let schedule = [
        0.8, 0.3, 1.2, 0.5, 1.5, 0.4, 1.0, 0.6, 1.4, 0.9, 0.2, 1.1, 0.7, 1.3,
    ];
    let mut kills = 0;
    for wait in schedule {
        wait_for_launch(ab, kills + 1)?;
        std::thread::sleep(Duration::from_secs_f64(wait));
        ab.bed.op.restart()?;
        kills += 1;
        let ready = count_ready(ab)?;
        eprintln!(
            "[aws-chaos] {:5.1}s: SIGKILL #{kills}, restarted; {ready}/50 Ready",
            started.elapsed().as_secs_f64()
        );
        if kills >= KILLS || ready == 50 {
            break;
        }
    }
    ensure!(
        kills >= KILLS,
        "all 50 were Ready after {kills} kills: the kills did not overlap the creates"
    );
    ab.bed.op.wait_ready(Duration::from_secs(60))?;
    wait_for(
        Duration::from_secs(600),
        "all 50 objects Ready",
        || match count_ready(ab)? {
            50 => Ok(Some(())),
            n => bail!("{n}/50 Ready"),
        },
    )?;
    eprintln!(
        "[aws-chaos] converged {:.1}s after the first apply, {kills} kills",
        started.elapsed().as_secs_f64()
    );

    // What moto holds: exactly one object per resource, each carrying its owner's uid.
    let uids = uids(ab, &ns)?;
    let vpcs = ab.api.call(
        "ec2",
        "describe_vpcs",
        &json!({"Filters": [{"Name": "tag-key", "Values": [OWNER]}]}),
    )?;
    let vpcs: Vec<&Value> = vpcs["Vpcs"].as_array().into_iter().flatten().collect();
    one_each(&uids, &VPC, 13, vpcs.iter().map(|v| owner_of(&v["Tags"])))?;
    let subnets = ab.api.call(
        "ec2",
        "describe_subnets",
        &json!({"Filters": [{"Name": "vpc-id", "Values": [base_id]}]}),
    )?;
    let subnets: Vec<&Value> = subnets["Subnets"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    one_each(
        &uids,
        &SUBNET,
        13,
        subnets.iter().map(|v| owner_of(&v["Tags"])),
    )?;
    let groups = ab.api.call(
        "ec2",
        "describe_security_groups",
        &json!({"Filters": [{"Name": "vpc-id", "Values": [base_id]}]}),
    )?;
    let groups: Vec<&Value> = groups["SecurityGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["GroupName"] != "default")
        .collect();
    one_each(&uids, &SG, 13, groups.iter().map(|v| owner_of(&v["Tags"])))?;
    let queues = ab.api.call("sqs", "list_queues", &json!({}))?;
    let mut queue_owners = Vec::new();
    for url in queues["QueueUrls"].as_array().into_iter().flatten() {
        let tags = ab
            .api
            .call("sqs", "list_queue_tags", &json!({"QueueUrl": url}))?;
        queue_owners.push(tags["Tags"][OWNER].as_str().map(str::to_owned));
    }
    one_each(&uids, &QUEUE, 12, queue_owners.into_iter())?;

    let recovered = count_events(ab, "Recovered")?;
    eprintln!("[aws-chaos] {recovered} objects recovered by the create fence");
    Ok(())
}

/// Waits until the operator has launched the ProviderConfig's AWS provider `n` times in all.
fn wait_for_launch(ab: &AwsBed, n: usize) -> anyhow::Result<()> {
    let marker = format!("({}/aws@", ab.ns());
    wait_for(
        Duration::from_secs(120),
        "the AWS provider launched",
        || {
            let launches = ab
                .bed
                .op
                .logs()?
                .lines()
                .filter(|l| l.contains("launched pooled provider") && l.contains(&marker))
                .count();
            if launches >= n {
                Ok(Some(()))
            } else {
                bail!("{launches} launches")
            }
        },
    )
}

/// How many of the 50 are Ready at their generation.
fn count_ready(ab: &AwsBed) -> anyhow::Result<usize> {
    let mut ready = 0;
    for (kind, _) in COUNTS {
        let list = ab.bed.cp.list_json(ab.ns(), &kind.resource())?;
        ready += list
            .iter()
            .filter(|o| o["metadata"]["name"] != "base" && is_reconciled(o))
            .count();
    }
    Ok(ready)
}

/// Kind → the uids of its objects (`base` among the VPCs).
fn uids(ab: &AwsBed, ns: &str) -> anyhow::Result<BTreeMap<&'static str, Vec<String>>> {
    let mut all = BTreeMap::new();
    for (kind, _) in COUNTS {
        let list = ab.bed.cp.list_json(ns, &kind.resource())?;
        let mut uids: Vec<String> = list
            .iter()
            .filter_map(|o| o["metadata"]["uid"].as_str().map(str::to_owned))
            .collect();
        uids.sort();
        all.insert(kind.0, uids);
    }
    Ok(all)
}

fn owner_of(tags: &Value) -> Option<String> {
    tags.as_array()
        .into_iter()
        .flatten()
        .find(|t| t["Key"] == OWNER)
        .and_then(|t| t["Value"].as_str().map(str::to_owned))
}

/// The owner tags moto shows for `kind` are exactly the uids of its `want` objects, once each.
fn one_each(
    uids: &BTreeMap<&'static str, Vec<String>>,
    kind: &Kind,
    want: usize,
    owners: impl Iterator<Item = Option<String>>,
) -> anyhow::Result<()> {
    let mut owners: Vec<String> = owners
        .map(|o| o.context("an object without the owner tag"))
        .collect::<anyhow::Result<_>>()?;
    owners.sort();
    let expected = uids.get(kind.0).context("no uids")?;
    ensure!(
        expected.len() == want,
        "{} {}s in the cluster",
        expected.len(),
        kind.0
    );
    ensure!(
        &owners == expected,
        "moto holds {} {} objects for {} resources (duplicates or strays): {owners:?} vs {expected:?}",
        owners.len(),
        kind.0,
        expected.len()
    );
    Ok(())
}

fn count_events(ab: &AwsBed, reason: &str) -> anyhow::Result<usize> {
    let events = ab.bed.cp.list_json(ab.ns(), "events")?;
    Ok(events.iter().filter(|e| e["reason"] == reason).count())
}

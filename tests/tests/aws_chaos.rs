//! Crash recovery without a name, against the real hashicorp/aws provider and moto: 50 objects
//! of types that take no name Kraken could import them by (`aws_vpc`, `aws_subnet`,
//! `aws_security_group` and `aws_sqs_queue` with `name` unset, so the provider makes one up)
//! are created in ten batches while the operator is SIGKILLed once per batch, each kill a
//! moment after moto served a create of the restarted operator's provider, and no more after
//! the last batch. A kill inside a create window leaves the create fence open with no state;
//! the restarted operator must find what that create made by the owner tag
//! (`kraken.dev/owner-uid`) through the provider's `ListResource` (EC2 types: filtered by the
//! tag in moto; SQS: listed whole and matched by Kraken), never make a second one. Afterwards
//! moto holds exactly one object per resource, read through boto3, and the test shows its kills
//! hit their target: enough of them interrupted a create (a create fence opened since the kill
//! before, open while the operator was down), moto's recorder saw the owner-tag lookup of every
//! EC2 object a kill interrupted (and a queue listing when a queue's create was), and objects so
//! interrupted were `Recovered`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kraken_tests::chaos::{Kills, kill_and_restart};
use kraken_tests::moto::Cursor;
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
const OWNER: &str = "kraken.dev/owner-uid";

/// How many of each kind, 50 in all (besides the VPC the subnets and groups live in).
const COUNTS: [(&Kind, usize); 4] = [(&VPC, 12), (&SUBNET, 13), (&SG, 13), (&QUEUE, 12)];
const KILLS: usize = 10;
/// Kills that must have interrupted a create. Each kill lands at most 0.3 s after moto served
/// a create, with a fresh batch of five creates before the operator; an EC2 create is over
/// (its state saved) a few hundred milliseconds after its request, an SQS one takes longer.
const MIN_KILLS_IN_CREATE: usize = 5;
/// How often the aimed kill looks for a create in moto's recording.
const AIM_POLL: Duration = Duration::from_millis(20);
/// Objects a kill interrupted that must have been found again (`Recovered`).
const MIN_RECOVERED: usize = 3;
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
    // From here moto records every request it serves: the recovery's lookups among them.
    ab.moto.record()?;
    let started = Instant::now();
    let kills = kill_during_creates(ab, &docs, started)?;
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
        "[aws-chaos] converged {:.1}s after the first apply, {} kills",
        started.elapsed().as_secs_f64(),
        kills.0.len()
    );
    // Read before the checks below add requests of their own.
    let lookups = Lookups::recorded(ab)?;
    expect_one_object_each(ab, &ns, &base_id)?;
    expect_kills_landed(ab, &kills, &lookups)
}

/// SIGKILL of the operator (its AWS provider, SIGTERMed right after, exits at once:
/// `kill_tree`) while the creates run. The 50 are applied in [`KILLS`] batches, one per cycle,
/// so that every cycle has creates to interrupt however fast the others went; each kill is
/// aimed: it lands that long (a fixed, uneven schedule) after moto served the first create
/// request of the restarted operator's provider. No kill after the last batch's: the churn has
/// ended.
fn kill_during_creates(ab: &mut AwsBed, docs: &[Value], started: Instant) -> anyhow::Result<Kills> {
    let schedule = [0.05, 0.2, 0.0, 0.15, 0.3, 0.1, 0.25, 0.05, 0.2, 0.1];
    let resources: Vec<String> = COUNTS.iter().map(|(k, _)| k.resource()).collect();
    let resources: Vec<&str> = resources.iter().map(String::as_str).collect();
    let mut cursor = Cursor::default();
    let mut kills = Kills::default();
    for (batch, wait) in docs.chunks(docs.len().div_ceil(KILLS)).zip(schedule) {
        ab.apply(batch)?;
        let create = wait_for_create(ab, &mut cursor)?;
        std::thread::sleep(Duration::from_secs_f64(wait));
        let kill = kill_and_restart(&mut ab.bed.op, &ab.bed.cp, &ab.bed.ns, &resources)?;
        // What the killed process asked is behind us: the next create is the new one's.
        ab.moto.recorded_since(&mut cursor)?;
        kills.0.push(kill);
        let n = kills.0.len();
        eprintln!(
            "[aws-chaos] {:5.1}s: SIGKILL #{n}, {wait}s after {create}: {} creates interrupted; \
             restarted; {}/50 Ready",
            started.elapsed().as_secs_f64(),
            kills.interrupted(n - 1).len(),
            count_ready(ab)?
        );
    }
    ensure!(
        kills.0.len() >= KILLS,
        "{} kills, the test needs {KILLS}",
        kills.0.len()
    );
    Ok(kills)
}

/// Waits until moto has served a create request (`Create*`) recorded after `cursor`; returns
/// its action. Polled often: an EC2 create is over (state saved) in a few hundred
/// milliseconds.
fn wait_for_create(ab: &AwsBed, cursor: &mut Cursor) -> anyhow::Result<String> {
    let deadline = Instant::now() + CONVERGE;
    while Instant::now() < deadline {
        let seen = ab.moto.recorded_since(cursor)?;
        if let Some((_, action)) = seen.into_iter().find(|(_, a)| a.starts_with("Create")) {
            return Ok(action);
        }
        std::thread::sleep(AIM_POLL);
    }
    bail!("moto served no create within {CONVERGE:?} of the operator's restart")
}

/// What moto's recorder saw of the recovery: the owner uids EC2 was asked to filter by (the
/// provider's `ListResource` with the tag filter Kraken sets) and the SQS queue listings.
struct Lookups {
    by_owner_tag: BTreeSet<String>,
    queue_listings: usize,
}

impl Lookups {
    fn recorded(ab: &AwsBed) -> anyhow::Result<Self> {
        let tagged = ab.moto.recorded_filter_values(&format!("tag:{OWNER}"))?;
        let queue_listings = ab
            .moto
            .recorded()?
            .iter()
            .filter(|(service, action)| service == "sqs" && action == "ListQueues")
            .count();
        Ok(Self {
            by_owner_tag: tagged.into_iter().map(|(_, uid)| uid).collect(),
            queue_listings,
        })
    }
}

/// What moto holds: exactly one object per resource, each carrying its owner's uid.
fn expect_one_object_each(ab: &AwsBed, ns: &str, base_id: &str) -> anyhow::Result<()> {
    let uids = uids(ab, ns)?;
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
    one_each(&uids, &QUEUE, 12, queue_owners.into_iter())
}

/// The kills hit creates (the create fence), the recovery looked for what each interrupted
/// create made by its owner tag (moto's recorder), and found some (`Recovered`).
fn expect_kills_landed(ab: &AwsBed, kills: &Kills, lookups: &Lookups) -> anyhow::Result<()> {
    let fenced = kills.fenced();
    let queue = QUEUE.resource();
    let unlooked: Vec<&str> = fenced
        .iter()
        .filter(|f| f.resource != queue && !lookups.by_owner_tag.contains(&f.uid))
        .map(|f| f.name.as_str())
        .collect();
    let queues_fenced = fenced.iter().filter(|f| f.resource == queue).count();
    let recovered = recovered_objects(ab)?;
    let names: BTreeSet<&str> = fenced.iter().map(|f| f.name.as_str()).collect();
    let found = recovered
        .iter()
        .filter(|n| names.contains(n.as_str()))
        .count();
    eprintln!(
        "[aws-chaos] {} kills, {} interrupted a create; {} objects interrupted ({queues_fenced} \
         queues); moto saw {} owner-tag lookups and {} queue listings; {} Recovered, {found} of \
         them interrupted by a kill:\n  {}",
        kills.0.len(),
        kills.in_creates(),
        fenced.len(),
        lookups.by_owner_tag.len(),
        lookups.queue_listings,
        recovered.len(),
        kills.story()
    );
    kills.expect_in_creates(MIN_KILLS_IN_CREATE)?;
    ensure!(
        unlooked.is_empty(),
        "moto never saw an owner-tag lookup of {unlooked:?}, whose creates a kill interrupted"
    );
    ensure!(
        queues_fenced == 0 || lookups.queue_listings > 0,
        "{queues_fenced} queue creates were interrupted, and moto never saw a ListQueues"
    );
    ensure!(
        found >= MIN_RECOVERED,
        "only {found} objects a kill interrupted were Recovered, the test needs {MIN_RECOVERED}: \
         Recovered {recovered:?}"
    );
    Ok(())
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

/// The objects with a `Recovered` Event.
fn recovered_objects(ab: &AwsBed) -> anyhow::Result<BTreeSet<String>> {
    let events = ab.bed.cp.list_json(ab.ns(), "events")?;
    Ok(events
        .iter()
        .filter(|e| e["reason"] == "Recovered")
        .filter_map(|e| e["involvedObject"]["name"].as_str().map(str::to_owned))
        .collect())
}

//! SIGKILLs during heavy churn: 200 Objects created, half updated, a quarter deleted, while the
//! operator (with its providers) is killed and restarted at random moments until the churn
//! ends, and no longer. Afterwards every Object has converged, the ledger holds exactly one
//! object per remaining resource and none for the deleted, and each kill is accounted for:
//! enough of them landed inside a create (an open create fence while the operator was down, a
//! create the provider was running when it died), and the interrupted creates that had made
//! their object were found again (`Recovered`), never made twice.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure};
use kraken_tests::chaos::{Kills, Rng, kill_and_restart, unix_nanos};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{OBJECTS, describe, is_reconciled};
use kraken_tests::operator::{
    FixtureBed, Operator, object_manifest, state_secret_name, yaml_documents,
};
use kraken_tests::{ControlPlane, wait_for};
use serde_json::{Value, json};

use super::num;

const CHAOS_OBJECTS: usize = 200;

/// Kills that must land inside a create: with a create fence open while the operator was
/// down, and with a create running in the provider (the ledger's `applies.log`) as it died.
/// Every other kill is aimed at a create in flight, so runs land far more than this (see the
/// report in the test's output); the floor only proves the faults hit their target.
const MIN_KILLS_IN_CREATE: usize = 3;
/// Objects that must have been found again (`Recovered`) after a kill found their create
/// fence open.
const MIN_RECOVERED: usize = 2;

/// How long an aimed kill waits for a create in flight before it kills anyway.
const AIM_TIMEOUT: Duration = Duration::from_secs(3);
/// How often an aimed kill looks at the ledger's `applies.log`.
const AIM_POLL: Duration = Duration::from_millis(5);

fn chaos_name(i: usize) -> String {
    format!("c-{i:03}")
}

fn chaos_external_name(i: usize) -> String {
    format!("chaos-{i:03}")
}

/// What each resource should end as: None = deleted, Some(size).
fn chaos_expected(i: usize) -> Option<u32> {
    match i % 4 {
        1 => None,        // a quarter deleted
        0 | 2 => Some(2), // half updated from 1 to 2
        _ => Some(1),
    }
}

/// The resources that remain: name → (index, size).
fn remaining() -> BTreeMap<String, (usize, u32)> {
    (0..CHAOS_OBJECTS)
        .filter_map(|i| chaos_expected(i).map(|size| (chaos_name(i), (i, size))))
        .collect()
}

fn chaos_manifests(ns: &str, indices: impl Iterator<Item = usize>, size: u32) -> String {
    let docs: Vec<Value> = indices
        .map(|i| {
            object_manifest(
                ns,
                &chaos_name(i),
                json!({"forProvider": {"name": chaos_external_name(i), "size": size}}),
            )
        })
        .collect();
    yaml_documents(&docs)
}

/// The churn the kills interleave with: create all, update half, delete a quarter.
fn churn(cp: &ControlPlane, ns: &str) -> anyhow::Result<()> {
    let start = Instant::now();
    for batch in (0..CHAOS_OBJECTS).collect::<Vec<_>>().chunks(25) {
        cp.apply_yaml(ns, &chaos_manifests(ns, batch.iter().copied(), 1))?;
        eprintln!(
            "[churn] {:5.1}s: applied {}..={}",
            start.elapsed().as_secs_f64(),
            chaos_name(batch[0]),
            chaos_name(batch[batch.len() - 1])
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(2));
    let updated: Vec<usize> = (0..CHAOS_OBJECTS)
        .filter(|i| chaos_expected(*i) == Some(2))
        .collect();
    for batch in updated.chunks(50) {
        cp.apply_yaml(ns, &chaos_manifests(ns, batch.iter().copied(), 2))?;
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "[churn] {:5.1}s: updated {} objects to size 2",
        start.elapsed().as_secs_f64(),
        updated.len()
    );
    std::thread::sleep(Duration::from_secs(1));
    let deleted: Vec<String> = (0..CHAOS_OBJECTS)
        .filter(|i| chaos_expected(*i).is_none())
        .map(chaos_name)
        .collect();
    let mut args = vec!["delete", OBJECTS, "-n", ns, "--wait=false"];
    args.extend(deleted.iter().map(String::as_str));
    cp.kubectl(&args)?;
    eprintln!(
        "[churn] {:5.1}s: deleted {} objects",
        start.elapsed().as_secs_f64(),
        deleted.len()
    );
    Ok(())
}

/// Kill and restart the operator at random 0.2–2 s intervals until the churn ends (`ended`
/// hangs up). Such a kill mostly lands while the restarted operator starts (its lists, its
/// first passes), so every other kill is aimed: it waits (at most [`AIM_TIMEOUT`]) until the
/// fixture is running a create, so that creates are hit however the schedule falls.
fn kill_loop(
    op: &mut Operator,
    (cp, ns, ledger_dir): (&ControlPlane, &str, &Path),
    ended: &Receiver<()>,
    rng: &mut Rng,
) -> anyhow::Result<Kills> {
    let mut kills = Kills::default();
    let start = Instant::now();
    let mut since = unix_nanos();
    loop {
        let pause = Duration::from_millis(rng.range(200, 2000));
        if ended.recv_timeout(pause) != Err(RecvTimeoutError::Timeout) {
            break;
        }
        let aimed = kills.0.len() % 2 == 1;
        if aimed && !create_in_flight(ledger_dir, since, ended) {
            break;
        }
        if let Some(status) = op.exit_status()? {
            bail!("the operator exited on its own ({status}) during the chaos");
        }
        let kill = kill_and_restart(op, cp, ns, &[OBJECTS])?;
        since = kill.done;
        kills.0.push(kill);
        let n = kills.0.len();
        eprintln!(
            "[chaos] {:5.1}s: SIGKILL #{n}{}, {} create fences open, {} of them new; restarted \
             (start #{})",
            start.elapsed().as_secs_f64(),
            if aimed { " (aimed)" } else { "" },
            kills.0[n - 1].open.len(),
            kills.interrupted(n - 1).len(),
            op.starts()
        );
    }
    Ok(kills)
}

/// Waits until the fixture runs a create begun after `since` (an unfinished `create` in its
/// `applies.log`), at most [`AIM_TIMEOUT`]; false when the churn ended meanwhile.
fn create_in_flight(ledger_dir: &Path, since: u128, ended: &Receiver<()>) -> bool {
    let deadline = Instant::now() + AIM_TIMEOUT;
    while Instant::now() < deadline {
        // A line being written may not parse yet: that is "not yet", not a failure.
        let calls = ledger::apply_calls(ledger_dir).unwrap_or_default();
        if calls
            .iter()
            .any(|c| c.op == "create" && c.begin > since && c.end.is_none())
        {
            return true;
        }
        if ended.recv_timeout(AIM_POLL) != Err(RecvTimeoutError::Timeout) {
            return false;
        }
    }
    true
}

/// The churn with the kill loop beside it; the kills stop when the churn ends.
fn churn_under_kills(bed: &mut FixtureBed, rng: &mut Rng) -> anyhow::Result<Kills> {
    let ledger_dir = bed.ledger_dir().to_path_buf();
    let (op, cp, ns) = (&mut bed.op, &bed.cp, bed.ns.as_str());
    let (end_churn, ended) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let ledger_dir = ledger_dir.as_path();
        let killer = s.spawn(move || kill_loop(op, (cp, ns, ledger_dir), &ended, rng));
        let churned = churn(cp, ns);
        drop(end_churn);
        let kills = killer
            .join()
            .unwrap_or_else(|_| Err(anyhow!("the kill loop panicked")));
        churned?;
        kills
    })
}

pub fn sigkill_chaos(bed: &mut FixtureBed) -> anyhow::Result<()> {
    let started = Instant::now();
    let (mut rng, seed) = Rng::from_env_or_clock()?;
    eprintln!("[chaos] seed {seed} (replay with KRAKEN_CHAOS_SEED={seed})");
    // A small apply delay widens the windows in which a kill lands mid-apply.
    bed.apply_provider_config("default", json!({"applyDelayMs": 20}))?;
    let kills = churn_under_kills(bed, &mut rng)?;
    eprintln!(
        "[chaos] {:5.1}s: churn done after {} kills; waiting for convergence",
        started.elapsed().as_secs_f64(),
        kills.0.len()
    );
    bed.op.wait_ready(Duration::from_secs(60))?;
    let items = wait_converged(bed)?;
    eprintln!(
        "[chaos] {:5.1}s: converged",
        started.elapsed().as_secs_f64()
    );
    expect_ledger(bed.ledger_dir(), &items, kills.0.len(), seed)?;
    expect_state_secrets(bed)?;
    expect_kills_landed(bed, &kills, seed)?;
    report(bed, started, &kills)
}

/// Waits until the remaining Objects are reconciled at their size and the deleted are gone;
/// returns the Objects.
fn wait_converged(bed: &FixtureBed) -> anyhow::Result<Vec<Value>> {
    let remaining = remaining();
    wait_for(
        Duration::from_secs(150),
        "150 Objects reconciled with their spec and 50 gone",
        || {
            let items = bed.cp.list_json(&bed.ns, OBJECTS)?;
            let mut pending = Vec::new();
            let mut seen = BTreeSet::new();
            for obj in &items {
                let name = obj["metadata"]["name"].as_str().unwrap_or_default();
                seen.insert(name.to_string());
                pending.extend(not_converged(obj, remaining.get(name).map(|(_, s)| *s)));
            }
            pending.extend(
                remaining
                    .keys()
                    .filter(|n| !seen.contains(*n))
                    .map(|n| format!("{n}: missing")),
            );
            if pending.is_empty() {
                Ok(Some(items))
            } else {
                bail!(
                    "{} not converged, e.g.:\n  {}",
                    pending.len(),
                    pending[..pending.len().min(5)].join("\n  ")
                )
            }
        },
    )
}

/// Why `obj` has not converged to `want` (None: deleted), if it has not.
fn not_converged(obj: &Value, want: Option<u32>) -> Option<String> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let Some(size) = want else {
        return Some(format!(
            "{name}: deleted but still there ({})",
            describe(obj)
        ));
    };
    let at = num(&obj["status"]["atProvider"]["size"]);
    (!is_reconciled(obj) || at != Some(f64::from(size))).then(|| {
        format!(
            "{name}: want size {size}, atProvider.size {at:?}; {}",
            describe(obj)
        )
    })
}

/// Live ledger objects by name, as (id, size); more than one per name is a duplicate.
type LiveByName = BTreeMap<String, Vec<(String, Option<f64>)>>;

fn live_by_name(dir: &Path) -> anyhow::Result<LiveByName> {
    let mut out = LiveByName::new();
    for o in ledger::objects(dir)? {
        let name = o["name"].as_str().unwrap_or_default().to_string();
        let id = o["id"].as_str().unwrap_or_default().to_string();
        out.entry(name).or_default().push((id, num(&o["size"])));
    }
    Ok(out)
}

/// The ledger: one live object per remaining resource, the one its status names, none for
/// deleted resources, nothing else; one create per name.
fn expect_ledger(dir: &Path, items: &[Value], kills: usize, seed: u64) -> anyhow::Result<()> {
    let live = live_by_name(dir)?;
    let creates = super::creates_by_name(dir)?;
    let deletes: BTreeSet<String> = ledger::event_log(dir)?
        .into_iter()
        .filter(|e| e.op == "delete")
        .map(|e| e.id)
        .collect();
    let remaining = remaining();
    let mut problems = Vec::new();
    for obj in items {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        if let Some((i, size)) = remaining.get(name) {
            let want_id = obj["status"]["externalId"].as_str().unwrap_or_default();
            let ext = chaos_external_name(*i);
            problems.extend(remaining_problems(
                (name, &ext, *size, want_id),
                &live,
                &creates,
                &deletes,
            ));
        }
    }
    for i in (0..CHAOS_OBJECTS).filter(|i| chaos_expected(*i).is_none()) {
        problems.extend(deleted_problems(
            &chaos_external_name(i),
            &live,
            &creates,
            &deletes,
        ));
    }
    let known: BTreeSet<String> = (0..CHAOS_OBJECTS).map(chaos_external_name).collect();
    for (name, objs) in &live {
        if !known.contains(name) {
            problems.push(format!("unexpected live object named {name}: {objs:?}"));
        }
    }
    ensure!(
        problems.is_empty(),
        "{} ledger problems after {kills} kills (seed {seed}):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
    Ok(())
}

/// What is wrong in the ledger about the remaining resource `name` (external name `ext`, want
/// `size`, status naming `want_id`).
fn remaining_problems(
    (name, ext, size, want_id): (&str, &str, u32, &str),
    live: &LiveByName,
    creates: &BTreeMap<String, Vec<String>>,
    deletes: &BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    match live.get(ext).map(Vec::as_slice) {
        Some([(id, sz)]) if id == want_id && *sz == Some(f64::from(size)) => {}
        other => problems.push(format!(
            "{name}: ledger has {other:?} for {ext}, status says {want_id} size {size}"
        )),
    }
    // The fixture stores an object before it appends its `create` line, so a kill between
    // the two leaves a live object without the line (Kraken then recovers it by name): at
    // most one create, and never one of another object that is still alive.
    let ids = creates.get(ext).cloned().unwrap_or_default();
    if ids.len() > 1 {
        problems.push(format!(
            "{ext}: {} creates in events.log: {ids:?}",
            ids.len()
        ));
    }
    for id in ids
        .iter()
        .filter(|id| *id != want_id && !deletes.contains(*id))
    {
        problems.push(format!(
            "{ext}: created as {id} besides {want_id}, never destroyed"
        ));
    }
    problems
}

/// What is wrong in the ledger about the deleted resource `ext`.
fn deleted_problems(
    ext: &str,
    live: &LiveByName,
    creates: &BTreeMap<String, Vec<String>>,
    deletes: &BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(objs) = live.get(ext) {
        problems.push(format!("{ext}: deleted, but live in the ledger: {objs:?}"));
    }
    let ids = creates.get(ext).cloned().unwrap_or_default();
    if ids.len() > 1 {
        problems.push(format!("{ext}: created {} times: {ids:?}", ids.len()));
    }
    // A kill between the fixture removing an object and appending its `delete` line leaves
    // no line; the live objects (checked above) are the truth about leaks.
    for id in ids.iter().filter(|id| !deletes.contains(*id)) {
        eprintln!(
            "[chaos] note: {ext} was created as {id}; its delete line is missing, and it is not live"
        );
    }
    problems
}

/// State Secrets: one per remaining resource, none left for deleted ones.
fn expect_state_secrets(bed: &FixtureBed) -> anyhow::Result<()> {
    let want: BTreeSet<String> = remaining()
        .keys()
        .map(|n| state_secret_name("Object", n))
        .collect();
    wait_for(
        Duration::from_secs(30),
        "exactly the remaining resources' state Secrets",
        || {
            let have: BTreeSet<String> = bed
                .cp
                .list_json(&bed.ns, "secrets")?
                .iter()
                .filter(|s| s["type"] == "kraken.dev/tfstate")
                .filter_map(|s| s["metadata"]["name"].as_str().map(str::to_string))
                .collect();
            if have == want {
                Ok(Some(()))
            } else {
                bail!(
                    "missing {:?}, left over {:?}",
                    want.difference(&have).collect::<Vec<_>>(),
                    have.difference(&want).collect::<Vec<_>>()
                )
            }
        },
    )
}

/// The kills hit creates, by both witnesses: the create fence (open while the operator was
/// down) and the ledger (a create running in the provider as it died). And the creates they
/// interrupted after the object was made were found again by name: `Recovered` Events about
/// objects a kill found mid-create.
fn expect_kills_landed(bed: &FixtureBed, kills: &Kills, seed: u64) -> anyhow::Result<()> {
    let calls = ledger::apply_calls(bed.ledger_dir())?;
    let in_provider: Vec<usize> = kills
        .0
        .iter()
        .map(|k| ledger::in_flight_at(&calls, "create", k.at).len())
        .collect();
    let fenced: BTreeSet<String> = kills.fenced().into_iter().map(|f| f.name).collect();
    let recovered = recovered_objects(bed)?;
    let found: Vec<&String> = recovered.intersection(&fenced).collect();
    eprintln!(
        "[chaos] {} kills: {} opened a create fence (open while the operator was down), {} \
         caught a create in the provider (creates in flight per kill {in_provider:?}); {} \
         objects found mid-create, {} of them Recovered; Recovered without a kill finding its \
         fence: {:?}",
        kills.0.len(),
        kills.in_creates(),
        in_provider.iter().filter(|n| **n > 0).count(),
        fenced.len(),
        found.len(),
        recovered.difference(&fenced).collect::<Vec<_>>()
    );
    kills.expect_in_creates(MIN_KILLS_IN_CREATE)?;
    let in_provider = in_provider.iter().filter(|n| **n > 0).count();
    ensure!(
        in_provider >= MIN_KILLS_IN_CREATE,
        "only {in_provider} of {} kills caught a create in the provider (applies.log), the test \
         needs {MIN_KILLS_IN_CREATE} (seed {seed}):\n  {}",
        kills.0.len(),
        kills.story()
    );
    ensure!(
        found.len() >= MIN_RECOVERED,
        "only {} objects a kill found mid-create were Recovered, the test needs {MIN_RECOVERED} \
         (seed {seed}); Recovered: {recovered:?}; found mid-create: {fenced:?}",
        found.len()
    );
    Ok(())
}

/// The Objects with a `Recovered` Event.
fn recovered_objects(bed: &FixtureBed) -> anyhow::Result<BTreeSet<String>> {
    Ok(bed
        .cp
        .list_json(&bed.ns, "events")?
        .iter()
        .filter(|e| e["reason"] == "Recovered")
        .filter_map(|e| e["involvedObject"]["name"].as_str().map(str::to_owned))
        .collect())
}

fn report(bed: &FixtureBed, started: Instant, kills: &Kills) -> anyhow::Result<()> {
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for e in bed.cp.list_json(&bed.ns, "events")? {
        *reasons
            .entry(e["reason"].as_str().unwrap_or_default().to_string())
            .or_default() += 1;
    }
    eprintln!(
        "[chaos] done in {:.1}s: {} kills, {} ledger events, Event reasons {reasons:?}",
        started.elapsed().as_secs_f64(),
        kills.0.len(),
        ledger::event_log(bed.ledger_dir())?.len()
    );
    Ok(())
}

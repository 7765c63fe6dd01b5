//! The operator under failure: SIGKILLs at random moments during heavy churn, a provider that
//! crashes in the middle of an apply, and a 30-second API server outage. The guarantees under
//! test: state is never lost, nothing is created twice, everything converges,
//! the process survives what it can survive.
//!
//! The random schedule is printed with its seed; `KRAKEN_CHAOS_SEED=<n>` replays it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{OBJECTS, describe, is_reconciled};
use kraken_tests::operator::{
    FixtureBed, Operator, OperatorOptions, object_manifest, state_secret_name, yaml_documents,
};
use kraken_tests::{scratch_dir, wait_for};
use serde_json::{Value, json};

/// SplitMix64: a tiny, seedable generator, so that a failing schedule can be replayed.
struct Rng(u64);

impl Rng {
    fn from_env_or_clock() -> anyhow::Result<(Self, u64)> {
        let seed = match std::env::var("KRAKEN_CHAOS_SEED") {
            Ok(s) => s.parse().context("KRAKEN_CHAOS_SEED must be a u64")?,
            Err(_) => {
                let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
                t.as_nanos() as u64 ^ u64::from(std::process::id())
            }
        };
        Ok((Self(seed), seed))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// Creates per object name in the ledger's event log.
fn creates_by_name(dir: &std::path::Path) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in ledger::event_log(dir)? {
        if e.op == "create" {
            out.entry(e.name).or_default().push(e.id);
        }
    }
    Ok(out)
}

/// Live ledger objects by name, as (id, size); more than one per name is a duplicate.
type LiveByName = BTreeMap<String, Vec<(String, Option<f64>)>>;

fn live_by_name(dir: &std::path::Path) -> anyhow::Result<LiveByName> {
    let mut out = LiveByName::new();
    for o in ledger::objects(dir)? {
        let name = o["name"].as_str().unwrap_or_default().to_string();
        let id = o["id"].as_str().unwrap_or_default().to_string();
        out.entry(name).or_default().push((id, num(&o["size"])));
    }
    Ok(out)
}

/// Kill and restart the operator at random 0.2–2 s intervals until `stop` is set and at least
/// `min_kills` kills happened. Returns the number of kills.
fn kill_loop(
    op: &mut Operator,
    stop: &AtomicBool,
    rng: &mut Rng,
    min_kills: u32,
) -> anyhow::Result<u32> {
    let mut kills = 0;
    let start = Instant::now();
    while !(stop.load(Ordering::SeqCst) && kills >= min_kills) {
        std::thread::sleep(Duration::from_millis(rng.range(200, 2000)));
        if let Some(status) = op.exit_status()? {
            bail!("the operator exited on its own ({status}) during the chaos");
        }
        op.kill()?;
        kills += 1;
        op.restart()?;
        eprintln!(
            "[chaos] {:5.1}s: SIGKILL #{kills}, restarted (start #{})",
            start.elapsed().as_secs_f64(),
            op.starts()
        );
    }
    Ok(kills)
}

const CHAOS_OBJECTS: usize = 200;

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
fn churn(bed_cp: &kraken_tests::ControlPlane, ns: &str) -> anyhow::Result<()> {
    let start = Instant::now();
    for batch in (0..CHAOS_OBJECTS).collect::<Vec<_>>().chunks(25) {
        bed_cp.apply_yaml(ns, &chaos_manifests(ns, batch.iter().copied(), 1))?;
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
        bed_cp.apply_yaml(ns, &chaos_manifests(ns, batch.iter().copied(), 2))?;
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
    bed_cp.kubectl(&args)?;
    eprintln!(
        "[churn] {:5.1}s: deleted {} objects",
        start.elapsed().as_secs_f64(),
        deleted.len()
    );
    Ok(())
}

#[test]
fn sigkill_chaos_with_200_objects_converges_without_duplicates() -> anyhow::Result<()> {
    // Leader election off: a restarted operator would otherwise wait out the dead one's Lease
    // and never lead during the churn; what is under test is state and the create fence.
    let opts = OperatorOptions {
        label: "chaos".to_string(),
        leader_elect: false,
        ..OperatorOptions::default()
    };
    let mut bed = FixtureBed::start("chaos", opts)?;
    let result = sigkill_chaos(&mut bed);
    bed.finish(result)
}

fn sigkill_chaos(bed: &mut FixtureBed) -> anyhow::Result<()> {
    let started = Instant::now();
    let (mut rng, seed) = Rng::from_env_or_clock()?;
    eprintln!("[chaos] seed {seed} (replay with KRAKEN_CHAOS_SEED={seed})");
    // A small apply delay widens the windows in which a kill lands mid-apply.
    bed.apply_provider_config("default", json!({"applyDelayMs": 20}))?;
    let ledger_dir = bed.ledger_dir().to_path_buf();
    let (op, cp, ns) = (&mut bed.op, &bed.cp, bed.ns.as_str());

    let stop = AtomicBool::new(false);
    let (churned, kills) = std::thread::scope(|s| {
        let killer = s.spawn(|| kill_loop(op, &stop, &mut rng, 20));
        let churned = churn(cp, ns);
        stop.store(true, Ordering::SeqCst);
        let kills = killer
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the kill loop panicked")));
        (churned, kills)
    });
    churned?;
    let kills = kills?;
    eprintln!(
        "[chaos] {:5.1}s: churn done after {kills} kills; waiting for convergence",
        started.elapsed().as_secs_f64()
    );
    bed.op.wait_ready(Duration::from_secs(60))?;

    let remaining: BTreeMap<String, (usize, u32)> = (0..CHAOS_OBJECTS)
        .filter_map(|i| chaos_expected(i).map(|size| (chaos_name(i), (i, size))))
        .collect();
    let items = wait_for(
        Duration::from_secs(150),
        "150 Objects reconciled with their spec and 50 gone",
        || {
            let items = bed.cp.list_json(&bed.ns, OBJECTS)?;
            let mut pending = Vec::new();
            let mut seen = BTreeSet::new();
            for obj in &items {
                let name = obj["metadata"]["name"].as_str().unwrap_or_default();
                seen.insert(name.to_string());
                match remaining.get(name) {
                    None => pending.push(format!(
                        "{name}: deleted but still there ({})",
                        describe(obj)
                    )),
                    Some((_, size)) => {
                        let at = num(&obj["status"]["atProvider"]["size"]);
                        if !is_reconciled(obj) || at != Some(f64::from(*size)) {
                            pending.push(format!(
                                "{name}: want size {size}, atProvider.size {at:?}; {}",
                                describe(obj)
                            ));
                        }
                    }
                }
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
    )?;
    eprintln!(
        "[chaos] {:5.1}s: converged",
        started.elapsed().as_secs_f64()
    );
    // How often the create fence was exercised: interrupted creates found again by name.
    let recovered = bed.cp.kubectl(&[
        "get",
        "events",
        "-n",
        &bed.ns,
        "--field-selector",
        "reason=Recovered",
        "-o",
        "name",
    ])?;
    eprintln!(
        "[chaos] interrupted creates recovered by the fence: {}",
        recovered.lines().filter(|l| !l.trim().is_empty()).count()
    );

    // The ledger: one live object per remaining resource, the one its status names, none for
    // deleted resources, nothing else; one create per name.
    let live = live_by_name(&ledger_dir)?;
    let creates = creates_by_name(&ledger_dir)?;
    let deletes: BTreeSet<String> = ledger::event_log(&ledger_dir)?
        .into_iter()
        .filter(|e| e.op == "delete")
        .map(|e| e.id)
        .collect();
    let mut problems = Vec::new();
    for obj in &items {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let Some((i, size)) = remaining.get(name) else {
            continue;
        };
        let ext = chaos_external_name(*i);
        let want_id = obj["status"]["externalId"].as_str().unwrap_or_default();
        match live.get(&ext).map(Vec::as_slice) {
            Some([(id, sz)]) if id == want_id && *sz == Some(f64::from(*size)) => {}
            other => problems.push(format!(
                "{name}: ledger has {other:?} for {ext}, status says {want_id} size {size}"
            )),
        }
        // The fixture stores an object before it appends its `create` line, so a kill between
        // the two leaves a live object without the line (Kraken then recovers it by name): at
        // most one create, and never one of another object that is still alive.
        let ids = creates.get(&ext).cloned().unwrap_or_default();
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
    }
    for i in (0..CHAOS_OBJECTS).filter(|i| chaos_expected(*i).is_none()) {
        let ext = chaos_external_name(i);
        if let Some(objs) = live.get(&ext) {
            problems.push(format!("{ext}: deleted, but live in the ledger: {objs:?}"));
        }
        let ids = creates.get(&ext).cloned().unwrap_or_default();
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

    // State Secrets: one per remaining resource, none left for deleted ones.
    let want: BTreeSet<String> = remaining
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
    )?;

    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let events: Value = serde_json::from_str(
        &bed.cp
            .kubectl(&["get", "events", "-n", &bed.ns, "-o", "json"])?,
    )?;
    for e in events["items"].as_array().into_iter().flatten() {
        *reasons
            .entry(e["reason"].as_str().unwrap_or_default().to_string())
            .or_default() += 1;
    }
    eprintln!(
        "[chaos] done in {:.1}s: {kills} kills, {} ledger events, Event reasons {reasons:?}",
        started.elapsed().as_secs_f64(),
        ledger::event_log(&ledger_dir)?.len()
    );
    Ok(())
}

/// A bed whose fixture provider crashes (as its ProviderConfig's `crashOnApply` says) only
/// once: the marker file it leaves, in a scratch directory kept as long as the first value.
fn crash_once_bed(
    name: &str,
) -> anyhow::Result<(tempfile::TempDir, std::path::PathBuf, FixtureBed)> {
    let scratch = scratch_dir("kraken-crash-once-")?;
    let once = scratch.path().join("crash-once");
    let opts = OperatorOptions {
        env: vec![(
            "KRAKEN_FIXTURE_CRASH_ONCE_FILE".to_string(),
            once.to_string_lossy().into_owned(),
        )],
        ..OperatorOptions::default()
    };
    let bed = FixtureBed::start(name, opts)?;
    Ok((scratch, once, bed))
}

/// A provider process that exits in the middle of ApplyResourceChange, once: `before` the
/// ledger is touched or `after` the object was written but before the answer.
fn provider_crash(mode: &str) -> anyhow::Result<()> {
    let (_scratch, once, bed) = crash_once_bed(&format!("crash-{mode}"))?;
    let result = (|| {
        bed.apply_provider_config("default", json!({"crashOnApply": mode}))?;
        bed.apply_object("web", json!({"forProvider": {"name": "web", "size": 3}}))?;
        let obj = bed.wait_reconciled("web", Duration::from_secs(90))?;
        ensure!(
            once.exists(),
            "the provider never crashed (no {}): do providers get the operator's environment?",
            once.display()
        );
        let objects = ledger::objects(bed.ledger_dir())?;
        ensure!(
            objects.len() == 1,
            "exactly one ledger object: {objects:#?}"
        );
        ensure!(
            obj["status"]["externalId"] == objects[0]["id"],
            "status.externalId {} != ledger {}",
            obj["status"]["externalId"],
            objects[0]["id"]
        );
        let creates = creates_by_name(bed.ledger_dir())?;
        ensure!(
            creates.get("web").map(Vec::len) == Some(1),
            "exactly one create: {creates:?}"
        );
        let message = bed.wait_event("web", "ApplyFailed", Duration::from_secs(30))?;
        eprintln!("ApplyFailed for the crashed attempt: {message}");
        let reasons: Vec<String> = bed.events("web")?.into_iter().map(|(r, _)| r).collect();
        eprintln!("Events about web: {reasons:?}");
        if mode == "after" {
            // The object was made but its state never came back: found again by name.
            ensure!(
                reasons.iter().any(|r| r == "Recovered"),
                "an interrupted create found again is Recovered: {reasons:?}"
            );
        } else {
            ensure!(
                !reasons.iter().any(|r| r == "Recovered"),
                "nothing was created before the crash, nothing to recover: {reasons:?}"
            );
        }
        Ok(())
    })();
    bed.finish(result)
}

#[test]
fn provider_crash_after_the_ledger_write_converges_to_one_object() -> anyhow::Result<()> {
    provider_crash("after")
}

#[test]
fn provider_crash_before_the_ledger_write_converges_to_one_object() -> anyhow::Result<()> {
    provider_crash("before")
}

#[test]
fn apiserver_outage_of_30s_converges_without_duplicates() -> anyhow::Result<()> {
    let mut bed = FixtureBed::start("outage", OperatorOptions::default())?;
    let result = apiserver_outage(&mut bed);
    bed.finish(result)
}

fn apiserver_outage(bed: &mut FixtureBed) -> anyhow::Result<()> {
    let names = ["o-0", "o-1", "o-2", "o-3"];
    let object = |name: &str, size: u32| {
        object_manifest(
            &bed.ns,
            name,
            json!({"forProvider": {"name": name, "size": size}, "driftInterval": "2s"}),
        )
    };
    bed.apply(&yaml_documents(
        &names.iter().map(|n| object(n, 1)).collect::<Vec<_>>(),
    ))?;
    let mut ids = BTreeMap::new();
    for n in names {
        let obj = bed.wait_reconciled(n, Duration::from_secs(60))?;
        ids.insert(
            n,
            obj["status"]["externalId"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    let pid = bed.op.pid();
    // From now on every apply takes 6 s, so that the recreate of the vanished o-3 below is in
    // the provider when the API server goes: the object is made during the outage and its
    // state cannot be saved, and the next pass must find it rather than make another.
    bed.apply_provider_config("default", json!({"applyDelayMs": 6000}))?;
    wait_for(
        Duration::from_secs(30),
        "the operator to see the slower ProviderConfig",
        || {
            let pc = bed
                .cp
                .get_json(&bed.ns, "providerconfigs.core.kraken.dev", "default")?;
            let seen = pc["status"]["observedGeneration"] == pc["metadata"]["generation"];
            Ok(seen.then_some(()))
        },
    )?;
    let fence = |obj: &Value| obj["metadata"]["annotations"]["kraken.dev/create-attempt"].clone();
    let first_fence = fence(&bed.object("o-3")?);

    // Just before the outage: a spec change, a drifted object and a vanished one.
    bed.apply(&yaml_documents(&[object("o-0", 8), object("o-1", 8)]))?;
    ledger::edit_object(bed.ledger_dir(), &ids["o-2"], |o| o["size"] = json!(99))?;
    ledger::remove_object(bed.ledger_dir(), &ids["o-3"])?;
    // The recreate has begun once its fence is on the object (written before the provider is
    // asked); the provider then waits 6 s before it makes the object.
    wait_for(Duration::from_secs(30), "o-3's recreate to begin", || {
        let f = fence(&bed.object("o-3")?);
        Ok((f.is_string() && f != first_fence).then_some(()))
    })?;
    let outage = Instant::now();
    bed.cp.stop_apiserver()?;
    eprintln!("[outage] API server stopped");
    ensure!(
        creates_by_name(bed.ledger_dir())?.get("o-3").map(Vec::len) == Some(1),
        "o-3's recreate finished before the API server stopped; the test needs it in flight"
    );
    for _ in 0..3 {
        std::thread::sleep(Duration::from_secs(10));
        if let Some(status) = bed.op.exit_status()? {
            bail!(
                "the operator exited during the API server outage ({status}) after {:.0}s",
                outage.elapsed().as_secs_f64()
            );
        }
        eprintln!(
            "[outage] {:.0}s: operator still running",
            outage.elapsed().as_secs_f64()
        );
    }
    bed.cp.start_apiserver()?;
    eprintln!(
        "[outage] API server back after {:.1}s",
        outage.elapsed().as_secs_f64()
    );

    let want = [("o-0", 8.0), ("o-1", 8.0), ("o-2", 1.0), ("o-3", 1.0)];
    wait_for(
        Duration::from_secs(120),
        "all four Objects converged after the outage",
        || {
            let mut pending = Vec::new();
            for (n, size) in want {
                let obj = bed.object(n)?;
                let at = num(&obj["status"]["atProvider"]["size"]);
                let live = ledger::objects_named(bed.ledger_dir(), n)?;
                let ledger_ok = matches!(live.as_slice(), [o] if num(&o["size"]) == Some(size)
                && obj["status"]["externalId"] == o["id"]);
                if !is_reconciled(&obj) || at != Some(size) || !ledger_ok {
                    pending.push(format!("{n}: ledger {live:?}; {}", describe(&obj)));
                }
            }
            if pending.is_empty() {
                Ok(Some(()))
            } else {
                bail!("{}", pending.join("\n  "))
            }
        },
    )?;
    eprintln!(
        "[outage] converged {:.1}s after the outage began",
        outage.elapsed().as_secs_f64()
    );

    ensure!(bed.op.exit_status()?.is_none(), "the operator exited");
    ensure!(
        bed.op.pid() == pid && bed.op.starts() == 1,
        "the test never restarted the operator; it must be the same process"
    );
    let creates = creates_by_name(bed.ledger_dir())?;
    for n in ["o-0", "o-1", "o-2"] {
        ensure!(
            creates.get(n) == Some(&vec![ids[n].clone()]),
            "{n} was created once, as {}: {creates:?}",
            ids[n]
        );
        ensure!(
            bed.object(n)?["status"]["externalId"] == ids[n].as_str(),
            "{n} kept its id"
        );
    }
    // o-3 vanished from the cloud, so exactly one more create: the drift correction, made
    // during the outage and found by name afterwards (its state could not be saved).
    ensure!(
        creates.get("o-3").map(Vec::len) == Some(2),
        "o-3: the original create and one recreate: {creates:?}"
    );
    let found = bed.wait_event("o-3", "Recovered", Duration::from_secs(30))?;
    eprintln!("[outage] o-3: {found}");
    ensure!(
        ledger::objects(bed.ledger_dir())?.len() == 4,
        "exactly four live objects"
    );
    Ok(())
}

/// A create-before-destroy replacement whose provider exits right after it made the new object
/// (`crashOnApply: after`, once): the retry finds the new object (never the old one it is
/// replacing), then destroys the old one. One create and one delete each in the ledger.
#[test]
fn provider_crash_creating_a_replacement_keeps_one_of_each() -> anyhow::Result<()> {
    let (_scratch, once, bed) = crash_once_bed("crash-replace")?;
    let result = (|| {
        let spec = |name: &str| json!({"forProvider": {"name": name, "size": 3}, "replacePolicy": "CreateBeforeDestroy"});
        bed.apply_object("web", spec("alpha"))?;
        let old = bed.wait_reconciled("web", Duration::from_secs(90))?;
        let old = old["status"]["externalId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        bed.apply_provider_config("default", json!({"crashOnApply": "after"}))?;
        bed.apply_object("web", spec("beta"))?;
        bed.wait_event("web", "DeposedDestroyed", Duration::from_secs(120))?;
        ensure!(
            once.exists(),
            "the provider never crashed (no {})",
            once.display()
        );
        let obj = bed.wait_reconciled("web", Duration::from_secs(60))?;
        let objects = ledger::objects(bed.ledger_dir())?;
        ensure!(objects.len() == 1, "exactly one live object: {objects:#?}");
        ensure!(objects[0]["name"] == "beta", "{objects:#?}");
        ensure!(
            obj["status"]["externalId"] == objects[0]["id"],
            "status.externalId {} != ledger {}",
            obj["status"]["externalId"],
            objects[0]["id"]
        );
        let ops: Vec<String> = ledger::event_log(bed.ledger_dir())?
            .into_iter()
            .map(|e| format!("{} {}", e.op, e.name))
            .collect();
        ensure!(
            ops == ["create alpha", "create beta", "delete alpha"],
            "ledger events {ops:?}"
        );
        let new = objects[0]["id"].as_str().unwrap_or_default();
        ensure!(new != old, "{new} replaced {old}");
        let reasons: Vec<String> = bed.events("web")?.into_iter().map(|(r, _)| r).collect();
        ensure!(
            reasons.iter().any(|r| r == "Recovered"),
            "the interrupted create is found again: {reasons:?}"
        );
        Ok(())
    })();
    bed.finish(result)
}

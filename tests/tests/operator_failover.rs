//! Fail-over between two `kraken operator` processes electing a leader on one Lease, while 200
//! fixture objects are created and then changed:
//! - the leader is SIGKILLed (with its providers) during the creates: the standby takes over
//!   within the lease duration (measured: kill → the next write reaching the fixture's "cloud");
//! - the new leader is SIGSTOPped (alone: its providers finish what they were doing) during the
//!   changes, for longer than the lease, and SIGCONTed after the other replica has taken over:
//!   its writes are fenced (`kit::fence`), it steps down and writes nothing over the new
//!   leader's state.
//!
//! The fixture's ledger proves nothing was duplicated or lost: exactly one create per object,
//! exactly one update per object per change, every object Ready at its last generation with
//! `status.atProvider` equal to the ledger.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{OBJECTS, object_manifest, yaml_documents};
use kraken_tests::operator::{FixtureBed, Operator, OperatorOptions};
use kraken_tests::wait_for;
use serde_json::{Value, json};

const N: usize = 200;
/// The operator's default `--lease-duration`.
const LEASE: Duration = Duration::from_secs(10);
const CONVERGE: Duration = Duration::from_secs(240);

fn options(identity: &str) -> OperatorOptions {
    OperatorOptions::replica(identity)
}

fn is_leader(op: &Operator) -> bool {
    op.metric("kraken_leader").is_ok_and(|v| v == 1.0)
}

fn now_nanos() -> anyhow::Result<u128> {
    Ok(SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos())
}

/// Not `obj-…`: the fixture imports names of that shape as object ids.
fn name(i: usize) -> String {
    format!("fo-{i:03}")
}

/// Every object reconciled at its generation with `size` as the ledger has it.
fn all_converged(bed: &FixtureBed, size: u64) -> anyhow::Result<()> {
    bed.wait_all_at_size(N, size, CONVERGE)
}

#[test]
fn a_killed_leader_hands_over_and_a_paused_one_is_fenced() -> anyhow::Result<()> {
    let mut bed = FixtureBed::start("failover", options("replica-a"))?;
    let mut b = Operator::start(&bed.cp, options("replica-b"))?;
    let result = (|| {
        b.wait_ready(Duration::from_secs(60))?;
        wait_for(Duration::from_secs(30), "replica-a to lead", || {
            Ok(is_leader(&bed.op).then_some(()))
        })?;
        ensure!(!is_leader(&b), "both replicas lead");
        // Each apply takes a while, so creates and changes are in flight when a leader dies:
        // 200 creates at 10 per provider process take 8 s, longer than `kubectl apply` of the
        // 200 objects takes on a loaded machine (CI once saw 197 of 200 done before the kill,
        // and the new leader's first write waited behind 197 no-op reconciles).
        bed.apply_provider_config("default", json!({"applyDelayMs": 400}))?;
        kill_the_leader_during_the_creates(&mut bed, &b)?;
        all_converged(&bed, 1)?;
        pause_the_leader_during_the_changes(&mut bed, &b)?;
        all_converged(&bed, 2)?;
        wait_for(Duration::from_secs(30), "replica-b to stand by", || {
            Ok((!is_leader(&b)).then_some(()))
        })?;

        ledger::expect_each(bed.ledger_dir(), N, (1, 1, 0))?;
        let b_log = b.logs()?;
        ensure!(
            b_log.contains("lost the leader lease"),
            "replica-b never noticed it lost the Lease"
        );
        eprintln!(
            "replica-b's fenced writes: {}",
            b_log
                .lines()
                .filter(|l| l.contains("writes are fenced"))
                .count()
        );
        Ok(())
    })();
    bed.finish_with(result, &[("replica-b", &b)])
}

/// The N objects applied; replica-a (the leader) SIGKILLed a third of the way through their
/// creates, with creates left to do; replica-b leads and writes within the lease.
fn kill_the_leader_during_the_creates(bed: &mut FixtureBed, b: &Operator) -> anyhow::Result<()> {
    let docs: Vec<Value> = (0..N)
        .map(|i| {
            object_manifest(
                &bed.ns,
                &name(i),
                json!({"forProvider": {"name": name(i), "size": 1}}),
            )
        })
        .collect();
    let yaml = yaml_documents(&docs);
    let ledger_dir = bed.ledger_dir().to_path_buf();
    // `kubectl apply` of 200 objects takes about as long as their creates on a loaded machine,
    // so the kill does not wait for it: it lands a third of the way through the creates while
    // the apply may still be sending objects, which replica-b then creates.
    let (cp, ns, op) = (&bed.cp, &bed.ns, &mut bed.op);
    let (killed_at, killed, created) = std::thread::scope(|s| {
        let apply = s.spawn(|| cp.apply_yaml(ns, &yaml));
        let third = wait_for(Duration::from_secs(120), "a third of the creates", || {
            Ok((ledger::live_objects(&ledger_dir) >= N / 3).then_some(()))
        });
        // From the moment the leader and its providers are gone: a write its provider
        // finished while the kill was landing is not the new leader's.
        let killed = third.and_then(|()| op.kill());
        let at = (
            now_nanos(),
            Instant::now(),
            ledger::live_objects(&ledger_dir),
        );
        let applied = apply
            .join()
            .map_err(|_| anyhow::anyhow!("the kubectl apply thread panicked"))?;
        applied?;
        killed?;
        anyhow::Ok((at.0?, at.1, at.2))
    })?;
    ensure!(
        created < N,
        "all {N} creates were done when the leader was killed: the kill missed them"
    );
    wait_for(LEASE + Duration::from_secs(15), "replica-b to lead", || {
        Ok(is_leader(b).then_some(()))
    })?;
    let led_after = killed.elapsed();
    let first_write = wait_for(
        LEASE + Duration::from_secs(30),
        "a write by replica-b",
        || {
            let events = ledger::event_log(bed.ledger_dir())?;
            Ok(events.iter().find(|e| e.nanos > killed_at).map(|e| e.nanos))
        },
    )?;
    let handover = Duration::from_nanos(u64::try_from(first_write - killed_at)?);
    eprintln!(
        "fail-over: replica-a killed with {created} of {N} created; replica-b led {:.1} s and \
         wrote {:.1} s after (lease {LEASE:?})",
        led_after.as_secs_f64(),
        handover.as_secs_f64()
    );
    ensure!(
        handover < LEASE + Duration::from_secs(5),
        "handover took {handover:?}"
    );
    Ok(())
}

/// replica-a comes back as the standby; replica-b (now the leader) is SIGSTOPped a quarter of
/// the way through the changes, and SIGCONTed once replica-a has taken over and is applying.
fn pause_the_leader_during_the_changes(bed: &mut FixtureBed, b: &Operator) -> anyhow::Result<()> {
    bed.op.restart()?;
    bed.op.wait_ready(Duration::from_secs(60))?;
    ensure!(
        !is_leader(&bed.op),
        "the restarted replica-a leads beside replica-b"
    );
    let patch = json!({"spec": {"forProvider": {"size": 2}}}).to_string();
    let mut paused = None;
    for i in 0..N {
        bed.cp.kubectl(&[
            "-n",
            &bed.ns,
            "patch",
            OBJECTS,
            &name(i),
            "--type=merge",
            "-p",
            &patch,
        ])?;
        if i == N / 4 {
            b.pause()?;
            paused = Some(Instant::now());
        }
    }
    let paused = paused.context("never paused")?;
    wait_for(
        LEASE + Duration::from_secs(30),
        "replica-a to lead again",
        || Ok(is_leader(&bed.op).then_some(())),
    )?;
    // replica-a has taken over and is applying; now replica-b wakes with its old work.
    std::thread::sleep(Duration::from_secs(2));
    b.resume()?;
    eprintln!(
        "replica-b was paused for {:.1} s",
        paused.elapsed().as_secs_f64()
    );
    Ok(())
}

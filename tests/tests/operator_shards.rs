//! Scale-out: three `kraken operator --shards auto` replicas split 1,000 fixture objects by a
//! consistent hash of their UIDs, while replicas are killed and added:
//! - during the creates, replica-c is SIGKILLed (its providers, the fake cloud's side, finish
//!   the applies in flight and exit: `kill_tree`): once its membership Lease expires,
//!   replica-a and replica-b take its share;
//! - during the changes, replica-d joins (the others drain what moves to it before it starts)
//!   and then replica-a is SIGKILLed;
//! - at the end replica-d is SIGTERMed: it leaves the ring (deletes its Lease) and replica-b
//!   takes everything without waiting for a Lease to expire.
//!
//! The fixture's ledger proves each change was applied exactly once — one create and one update
//! per object, no delete — so no object was ever worked on by two replicas at once, and every
//! object converges. The replicas' own metrics show the split: each surviving replica manages a
//! share, the shares add up to every object, and each runs its own provider process.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use kraken_tests::operator::bed::{object_manifest, yaml_documents};
use kraken_tests::operator::{FixtureBed, Operator, OperatorOptions};
use kraken_tests::{clock_now, ledger, wait_for};
use serde_json::{Value, json};

const N: usize = 1000;
/// The operator's default `--lease-duration`.
const LEASE: Duration = Duration::from_secs(10);
const CONVERGE: Duration = Duration::from_secs(420);

fn options(identity: &str) -> OperatorOptions {
    OperatorOptions {
        args: vec!["--shards".into(), "auto".into()],
        ..OperatorOptions::replica(identity)
    }
}

fn name(i: usize) -> String {
    format!("sh-{i:04}")
}

/// Objects this replica manages now (its share, from its own metrics).
fn managed(op: &Operator) -> f64 {
    op.metric_where("kraken_managed_resources", |labels| {
        labels
            .iter()
            .any(|(k, v)| k == "kind" && v.starts_with("Object."))
    })
    .unwrap_or(0.0)
}

/// Waits until every replica in `ops` sees `n` members and their shares add up to `N`, each
/// non-empty: the ring has settled on them.
fn settled(ops: &[&Operator], n: usize) -> anyhow::Result<Vec<f64>> {
    wait_for(
        LEASE * 3 + Duration::from_secs(60),
        &format!("{n} replicas to settle their shares"),
        || {
            let members: Vec<f64> = ops
                .iter()
                .map(|op| op.metric("kraken_shard_members").unwrap_or(0.0))
                .collect();
            let shares: Vec<f64> = ops.iter().map(|op| managed(op)).collect();
            let total: f64 = shares.iter().sum();
            #[allow(clippy::cast_precision_loss)]
            let all = N as f64;
            #[allow(clippy::cast_precision_loss)]
            let want = n as f64;
            if members.iter().all(|m| *m == want)
                && (total - all).abs() < 0.5
                && shares.iter().all(|s| *s > 0.0)
            {
                Ok(Some(shares))
            } else {
                bail!("members {members:?}, shares {shares:?}")
            }
        },
    )
}

fn all_converged(bed: &FixtureBed, size: u64) -> anyhow::Result<()> {
    bed.wait_all_at_size(N, size, CONVERGE)
}

#[test]
fn three_replicas_share_the_work_and_survive_kills_and_joins() -> anyhow::Result<()> {
    let mut bed = FixtureBed::start("shards", options("replica-a"))?;
    let mut b = Operator::start(&bed.cp, options("replica-b"))?;
    let mut c = Operator::start(&bed.cp, options("replica-c"))?;
    let mut d: Option<Operator> = None;
    let result = (|| {
        b.wait_ready(Duration::from_secs(60))?;
        c.wait_ready(Duration::from_secs(60))?;
        create_while_one_dies(&bed, &b, &mut c)?;
        // Changes: replica-d joins a quarter in, replica-a dies half-way.
        let names: Vec<String> = (0..N).map(name).collect();
        for (i, chunk) in names.chunks(50).enumerate() {
            bed.patch_objects(chunk, &json!({"spec": {"forProvider": {"size": 2}}}))?;
            let done = (i + 1) * 50;
            if done == N / 4 {
                eprintln!("{} starting replica-d", clock_now());
                d = Some(Operator::start(&bed.cp, options("replica-d"))?);
            }
            if done == N / 2 {
                eprintln!("{} killing replica-a", clock_now());
                bed.op.kill()?;
            }
        }
        let d = d
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("replica-d never started"))?;
        all_converged(&bed, 2)?;
        let shares = settled(&[&b, d], 2)?;
        eprintln!("after replica-d joined and replica-a died: b and d hold {shares:?}");
        for (label, op) in [("replica-b", &b), ("replica-d", &*d)] {
            let processes = op.metric("kraken_provider_processes")?;
            ensure!(processes >= 1.0, "{label} runs no provider process");
        }
        leave_gracefully(&b, d)?;
        exactly_once(&bed)
    })();
    let mut more = vec![("replica-b", &b), ("replica-c", &c)];
    more.extend(d.as_ref().map(|d| ("replica-d", d)));
    bed.finish_with(result, &more)
}

/// The N objects created by three replicas (the bed's, `b` and `c`), `c` killed a third of
/// the way in: the two left settle on the work and converge.
fn create_while_one_dies(bed: &FixtureBed, b: &Operator, c: &mut Operator) -> anyhow::Result<()> {
    // Each apply takes a while, so creates and changes are in flight when a replica dies.
    bed.apply_provider_config("default", json!({"applyDelayMs": 30}))?;
    let docs: Vec<Value> = (0..N)
        .map(|i| {
            object_manifest(
                &bed.ns,
                &name(i),
                json!({"forProvider": {"name": name(i), "size": 1}}),
            )
        })
        .collect();
    let started = Instant::now();
    bed.apply(&yaml_documents(&docs))?;
    let shares = settled(&[&bed.op, b, c], 3)?;
    eprintln!("shares of 3 replicas: {shares:?}");
    wait_for(Duration::from_secs(180), "a third of the creates", || {
        Ok((ledger::live_objects(bed.ledger_dir()) >= N / 3).then_some(()))
    })?;
    eprintln!("{} killing replica-c", clock_now());
    c.kill()?;
    let killed = Instant::now();
    let shares = settled(&[&bed.op, b], 2)?;
    eprintln!(
        "replica-c killed: a and b settled on {shares:?} after {:.1} s",
        killed.elapsed().as_secs_f64()
    );
    all_converged(bed, 1)?;
    eprintln!("created {N} in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Scaled down: replica-d leaves the ring on SIGTERM (its Lease deleted), so replica-b takes
/// everything at once instead of after a lease duration.
fn leave_gracefully(b: &Operator, d: &mut Operator) -> anyhow::Result<()> {
    eprintln!("{} terminating replica-d", clock_now());
    let leaving = Instant::now();
    d.terminate(Duration::from_secs(60))?;
    wait_for(LEASE * 2, "replica-b alone in the ring", || {
        Ok((b.metric("kraken_shard_members").unwrap_or(0.0) == 1.0).then_some(()))
    })?;
    let handover = leaving.elapsed();
    let shares = settled(&[b], 1)?;
    eprintln!(
        "replica-d terminated: replica-b holds {shares:?} {:.1} s after SIGTERM",
        handover.as_secs_f64()
    );
    ensure!(
        handover < LEASE,
        "a graceful leave took {handover:?}, as long as a lease"
    );
    Ok(())
}

/// The ledger shows one create and one update per object; if not, the error says which
/// replica reconciled the first objects written otherwise, and when (their Events).
fn exactly_once(bed: &FixtureBed) -> anyhow::Result<()> {
    let Err(e) = ledger::expect_each(bed.ledger_dir(), N, (1, 1, 0)) else {
        return Ok(());
    };
    let wrong = ledger::writes_by_name(bed.ledger_dir())?
        .into_iter()
        .filter(|(_, w)| *w != (1, 1, 0))
        .take(5);
    let mut trails = Vec::new();
    for (name, _) in wrong {
        trails.push(format!("{name}: {}", bed.event_trail(&name)?.join(", ")));
    }
    Err(anyhow::anyhow!(
        "{e:#}\ntheir Events:\n{}",
        trails.join("\n")
    ))
}

//! A 30-second API server outage with work in flight: a spec change, a drifted object and a
//! vanished one whose recreate is inside the provider when the API server goes. The operator
//! must ride it out in the same process and converge without a duplicate; the recreate made
//! during the outage is found again (`Recovered`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{describe, is_reconciled};
use kraken_tests::operator::{FixtureBed, object_manifest, yaml_documents};
use kraken_tests::wait_for;
use serde_json::{Value, json};

use super::{creates_by_name, num};

const NAMES: [&str; 4] = ["o-0", "o-1", "o-2", "o-3"];

fn object(bed: &FixtureBed, name: &str, size: u32) -> Value {
    object_manifest(
        &bed.ns,
        name,
        json!({"forProvider": {"name": name, "size": size}, "driftInterval": "2s"}),
    )
}

fn fence(obj: &Value) -> Value {
    obj["metadata"]["annotations"]["kraken.dev/create-attempt"].clone()
}

pub fn apiserver_outage(bed: &mut FixtureBed) -> anyhow::Result<()> {
    let ids = create_four(bed)?;
    let pid = bed.op.pid();
    slow_down_applies(bed)?;
    let first_fence = fence(&bed.object("o-3")?);

    // Just before the outage: a spec change, a drifted object and a vanished one.
    bed.apply(&yaml_documents(&[
        object(bed, "o-0", 8),
        object(bed, "o-1", 8),
    ]))?;
    ledger::edit_object(bed.ledger_dir(), &ids["o-2"], |o| o["size"] = json!(99))?;
    ledger::remove_object(bed.ledger_dir(), &ids["o-3"])?;
    // The recreate has begun once its fence is on the object (written before the provider is
    // asked); the provider then waits 6 s before it makes the object.
    wait_for(Duration::from_secs(30), "o-3's recreate to begin", || {
        let f = fence(&bed.object("o-3")?);
        Ok((f.is_string() && f != first_fence).then_some(()))
    })?;
    let outage = Instant::now();
    ride_out_the_outage(bed, outage)?;
    wait_converged_after(bed, outage)?;

    ensure!(bed.op.exit_status()?.is_none(), "the operator exited");
    ensure!(
        bed.op.pid() == pid && bed.op.starts() == 1,
        "the test never restarted the operator; it must be the same process"
    );
    expect_one_create_each(bed, &ids)
}

/// The four Objects at size 1, reconciled: name → external id.
fn create_four(bed: &FixtureBed) -> anyhow::Result<BTreeMap<&'static str, String>> {
    bed.apply(&yaml_documents(
        &NAMES.iter().map(|n| object(bed, n, 1)).collect::<Vec<_>>(),
    ))?;
    let mut ids = BTreeMap::new();
    for n in NAMES {
        let obj = bed.wait_reconciled(n, Duration::from_secs(60))?;
        ids.insert(
            n,
            obj["status"]["externalId"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    Ok(ids)
}

/// From now on every apply takes 6 s, so that the recreate of the vanished o-3 is in the
/// provider when the API server goes: the object is made during the outage and its state
/// cannot be saved, and the next pass must find it rather than make another.
fn slow_down_applies(bed: &FixtureBed) -> anyhow::Result<()> {
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
    )
}

/// Stops the API server with o-3's recreate in flight (else the fault missed its target),
/// checks the operator runs on through 30 s of it, and starts it again.
fn ride_out_the_outage(bed: &mut FixtureBed, outage: Instant) -> anyhow::Result<()> {
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
    Ok(())
}

fn wait_converged_after(bed: &FixtureBed, outage: Instant) -> anyhow::Result<()> {
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
    Ok(())
}

/// o-0..2 created once and kept their ids; o-3 created twice (it vanished), the recreate
/// found again; four live objects.
fn expect_one_create_each(
    bed: &FixtureBed,
    ids: &BTreeMap<&'static str, String>,
) -> anyhow::Result<()> {
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

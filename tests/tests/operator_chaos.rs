//! The operator under failure: SIGKILLs at random moments during heavy churn, a provider that
//! crashes in the middle of an apply, and a 30-second API server outage. The guarantees under
//! test: state is never lost, nothing is created twice, everything converges,
//! the process survives what it can survive. Each fault is shown to have landed where the test
//! says: kills inside creates (the create fence and the fixture's ledger), the provider's crash
//! (its marker file), a recreate in flight when the API server goes.
//!
//! The random schedule is printed with its seed; `KRAKEN_CHAOS_SEED=<n>` replays it.

#[path = "operator_chaos/churn.rs"]
mod churn;
#[path = "operator_chaos/crash.rs"]
mod crash;
#[path = "operator_chaos/outage.rs"]
mod outage;

use std::collections::BTreeMap;

use kraken_tests::ledger;
use kraken_tests::operator::{FixtureBed, OperatorOptions};
use serde_json::Value;

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
    let result = churn::sigkill_chaos(&mut bed);
    bed.finish(result)
}

#[test]
fn provider_crash_after_the_ledger_write_converges_to_one_object() -> anyhow::Result<()> {
    crash::provider_crash("after")
}

#[test]
fn provider_crash_before_the_ledger_write_converges_to_one_object() -> anyhow::Result<()> {
    crash::provider_crash("before")
}

#[test]
fn apiserver_outage_of_30s_converges_without_duplicates() -> anyhow::Result<()> {
    let mut bed = FixtureBed::start("outage", OperatorOptions::default())?;
    let result = outage::apiserver_outage(&mut bed);
    bed.finish(result)
}

/// A create-before-destroy replacement whose provider exits right after it made the new object
/// (`crashOnApply: after`, once): the retry finds the new object (never the old one it is
/// replacing), then destroys the old one. One create and one delete each in the ledger.
#[test]
fn provider_crash_creating_a_replacement_keeps_one_of_each() -> anyhow::Result<()> {
    crash::replacement()
}

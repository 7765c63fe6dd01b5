//! The managed-resource lifecycle of `kraken operator` (docs/operator.md), end to end: a real
//! kube-apiserver + etcd, the operator as a process, the fixture provider binary, `kubectl
//! apply` of real manifests. Every test asserts both sides: the API objects (conditions,
//! status, Events, the state Secret) and the fixture's ledger (the "cloud": live objects and
//! the log of every real create/update/delete).
//!
//! Each test owns a [`FixtureBed`]: its own control plane, namespace, ledger and operator, so
//! tests are independent and metrics belong to one test.

#[path = "operator_lifecycle/adopt.rs"]
mod adopt;
#[path = "operator_lifecycle/change.rs"]
mod change;
#[path = "operator_lifecycle/create.rs"]
mod create;
#[path = "operator_lifecycle/drift.rs"]
mod drift;
#[path = "operator_lifecycle/failures.rs"]
mod failures;
#[path = "operator_lifecycle/state.rs"]
mod state;

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{OBJECTS, describe};
use kraken_tests::operator::{FixtureBed, OperatorOptions, state_secret_name};
use kraken_tests::wait_for;
use serde_json::{Value, json};

/// A reconcile of a fresh object: provider start, import/read, plan, apply, status.
const CONVERGE: Duration = Duration::from_secs(60);
/// After fixing bad input: the operator may be in a retry backoff.
const RECOVER: Duration = Duration::from_secs(90);
/// After an operator restart: a new process may have to wait for the old Lease to expire.
const AFTER_RESTART: Duration = Duration::from_secs(90);

fn run(
    name: &str,
    opts: OperatorOptions,
    scenario: impl FnOnce(&mut FixtureBed) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut bed = FixtureBed::start(name, opts)?;
    let result = scenario(&mut bed);
    bed.finish(result)
}

fn default_run(
    name: &str,
    scenario: impl FnOnce(&mut FixtureBed) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    run(name, OperatorOptions::default(), scenario)
}

/// `spec` with `forProvider: {name, size}` and the top-level fields of `extra` merged in
/// (objects merged recursively).
fn spec(name: &str, size: u32, extra: Value) -> Value {
    let mut s = json!({"forProvider": {"name": name, "size": size}});
    merge(&mut s, extra);
    s
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

/// The ledger's event lines as `"<op> <id> <name>"`.
fn ledger_ops(bed: &FixtureBed) -> anyhow::Result<Vec<String>> {
    Ok(ledger::event_log(bed.ledger_dir())?
        .into_iter()
        .map(|e| format!("{} {} {}", e.op, e.id, e.name))
        .collect())
}

/// The ledger's event lines must be exactly `want` (`"<op> <id> <name>"`, oldest first).
///
/// The fixture writes an object's file before it appends the event, so a test that saw the
/// object change may read the log a moment early: while what is there is a proper prefix of
/// `want`, it is read again for up to two seconds. More lines than `want`, or other ones, fail
/// at once.
fn expect_ops(bed: &FixtureBed, want: &[String]) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let mut ops = ledger_ops(bed)?;
    while ops.len() < want.len() && want.starts_with(&ops) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        ops = ledger_ops(bed)?;
    }
    ensure!(
        ops == want,
        "ledger events.log:\n  have {ops:?}\n  want {want:?}"
    );
    Ok(())
}

/// The ledger's only live object; anything else is an error.
fn sole_object(bed: &FixtureBed) -> anyhow::Result<Value> {
    let mut objects = ledger::objects(bed.ledger_dir())?;
    ensure!(
        objects.len() == 1,
        "expected exactly one live object in the ledger, found {}: {objects:#?}",
        objects.len()
    );
    Ok(objects.remove(0))
}

fn external_id(obj: &Value) -> anyhow::Result<String> {
    obj["status"]["externalId"]
        .as_str()
        .map(str::to_string)
        .with_context(|| format!("no status.externalId: {}", describe(obj)))
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

fn last_plan(obj: &Value) -> (String, Vec<String>) {
    let plan = &obj["status"]["lastPlan"];
    let action = plan["action"].as_str().unwrap_or_default().to_string();
    let paths = plan["paths"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    (action, paths)
}

fn delete_object(bed: &FixtureBed, name: &str) -> anyhow::Result<()> {
    bed.cp
        .kubectl(&["delete", OBJECTS, name, "-n", &bed.ns, "--wait=false"])?;
    Ok(())
}

fn has_finalizer(obj: &Value) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == "kraken.dev/finalizer"))
}

/// Wait until the state Secret of `name` is gone. There is no garbage collector in the test
/// control plane (no controller-manager), so only the operator can have deleted it.
fn wait_state_secret_gone(bed: &FixtureBed, name: &str) -> anyhow::Result<()> {
    let secret = state_secret_name("Object", name);
    wait_for(
        Duration::from_secs(30),
        &format!("state Secret {secret} to be deleted by the operator (no GC here)"),
        || match bed.state_secret(name)? {
            None => Ok(Some(())),
            Some(s) => bail!(
                "still there, ownerReferences {}",
                s["metadata"]["ownerReferences"]
            ),
        },
    )
}

/// Keys present anywhere in a JSON tree.
fn all_keys(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                all_keys(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| all_keys(x, out)),
        _ => {}
    }
}

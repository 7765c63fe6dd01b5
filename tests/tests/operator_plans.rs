//! Plans and approvals (docs/operator.md, "Plans and approvals"), end to end: a real
//! kube-apiserver + etcd, the operator as a process and the fixture provider. Under
//! `planPolicy: Manual` a create and an update wait as `status.plan` until the annotation
//! `kraken.dev/approve-plan` names the fresh plan's id; an approval given before a spec change
//! is stale and applies nothing; an approval survives an operator restart (the id is keyed with
//! the Secret `kraken-plan-key`, read again at start-up). The fixture's ledger proves what
//! really happened.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{OBJECT_API_VERSION, OBJECT_KIND, OBJECTS, describe};
use kraken_tests::operator::{FixtureBed, OperatorOptions, condition};
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(60);
const APPROVE: &str = "kraken.dev/approve-plan";

/// The Object `web` (size `size`, planPolicy Manual), approving plan `approve` if given.
fn web(bed: &FixtureBed, size: u32, approve: Option<&str>) -> anyhow::Result<()> {
    let mut manifest = json!({
        "apiVersion": OBJECT_API_VERSION, "kind": OBJECT_KIND,
        "metadata": {"name": "web", "namespace": bed.ns},
        "spec": {"planPolicy": "Manual", "forProvider": {"name": "web", "size": size}},
    });
    if let Some(id) = approve {
        manifest["metadata"]["annotations"] = json!({ APPROVE: id });
    }
    bed.apply(&manifest.to_string())?;
    Ok(())
}

fn approve(bed: &FixtureBed, id: &str) -> anyhow::Result<()> {
    let annotation = format!("{APPROVE}={id}");
    bed.cp.kubectl(&[
        "annotate",
        OBJECTS,
        "web",
        "-n",
        &bed.ns,
        "--overwrite",
        &annotation,
    ])?;
    Ok(())
}

/// Waits for a pending plan (Synced=False/PlanPending) with this action; returns the object.
fn pending(bed: &FixtureBed, action: &str) -> anyhow::Result<Value> {
    kraken_tests::wait_for(CONVERGE, &format!("a pending {action} plan"), || {
        let obj = bed.object("web")?;
        let plan = &obj["status"]["plan"];
        let synced = condition(&obj, "Synced");
        let at_generation = obj["status"]["observedGeneration"] == obj["metadata"]["generation"];
        if plan["action"] == action
            && at_generation
            && synced
                .as_ref()
                .is_some_and(|(s, r, _)| s == "False" && r == "PlanPending")
        {
            return Ok(Some(obj));
        }
        anyhow::bail!("{}; plan {plan}", describe(&obj))
    })
}

fn plan_id(obj: &Value) -> anyhow::Result<String> {
    obj["status"]["plan"]["id"]
        .as_str()
        .map(str::to_owned)
        .context("no status.plan.id")
}

fn ops(bed: &FixtureBed) -> anyhow::Result<Vec<String>> {
    Ok(ledger::event_log(bed.ledger_dir())?
        .into_iter()
        .map(|e| format!("{} {}", e.op, e.name))
        .collect())
}

#[test]
fn manual_plans_wait_for_their_exact_approval() -> anyhow::Result<()> {
    let mut bed = FixtureBed::start("plans", OperatorOptions::default())?;
    let result = scenario(&mut bed);
    bed.finish(result)
}

fn scenario(bed: &mut FixtureBed) -> anyhow::Result<()> {
    // A create waits: nothing in the cloud, the plan readable, a PLAN column.
    web(bed, 1, None)?;
    let obj = pending(bed, "Create")?;
    ensure!(
        ops(bed)?.is_empty(),
        "created before approval: {:?}",
        ops(bed)?
    );
    let changes = obj["status"]["plan"]["changes"].to_string();
    ensure!(changes.contains("spec.forProvider.size"), "{changes}");
    let table = bed.cp.kubectl(&["get", OBJECTS, "web", "-n", &bed.ns])?;
    ensure!(
        table.contains("PLAN") && table.contains("Create"),
        "{table}"
    );
    approve(bed, &plan_id(&obj)?)?;
    let obj = bed.wait_reconciled("web", CONVERGE)?;
    ensure!(ops(bed)? == ["create web"], "{:?}", ops(bed)?);
    ensure!(obj["status"].get("plan").is_none(), "{}", obj["status"]);

    // An update waits with Ready describing the live object.
    web(bed, 2, None)?;
    let obj = pending(bed, "Update")?;
    let approved = plan_id(&obj)?;
    let ready = condition(&obj, "Ready");
    ensure!(
        ready.as_ref().is_some_and(|(s, _, _)| s == "True"),
        "{ready:?}"
    );
    ensure!(
        obj["status"]["atProvider"]["size"] == 1,
        "{}",
        obj["status"]
    );

    // Approved together with a further spec change: stale, nothing applied.
    web(bed, 3, Some(&approved))?;
    let message = bed.wait_event("web", "PlanStale", CONVERGE)?;
    ensure!(message.contains("the spec changed"), "{message}");
    let obj = pending(bed, "Update")?;
    let fresh = plan_id(&obj)?;
    ensure!(fresh != approved, "the plan id did not move with the spec");
    ensure!(
        ops(bed)? == ["create web"],
        "applied a stale approval: {:?}",
        ops(bed)?
    );

    // The id is keyed with the Secret kraken-plan-key the operator made in its namespace; a
    // restart reads the same key, so the approval of the plan shown before still applies.
    let key = bed.cp.kubectl(&[
        "get",
        "secret",
        "kraken-plan-key",
        "-n",
        "default",
        "-o",
        "jsonpath={.data.key}",
    ])?;
    ensure!(key.trim().len() == 44, "no 32-byte plan key: {key:?}");
    bed.op.restart()?;
    bed.op.wait_ready(CONVERGE)?;
    approve(bed, &fresh)?;
    let obj = bed.wait_reconciled("web", CONVERGE)?;
    ensure!(
        !bed.op.logs()?.contains(key.trim()),
        "the plan key is in the log"
    );
    ensure!(ops(bed)? == ["create web", "update web"], "{:?}", ops(bed)?);
    ensure!(
        obj["status"]["atProvider"]["size"] == 3,
        "{}",
        obj["status"]
    );
    ensure!(obj["status"]["lastAppliedPlan"]["id"] == fresh.as_str());
    Ok(())
}

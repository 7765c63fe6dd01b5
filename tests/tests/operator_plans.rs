//! Plans and approvals (docs/operator.md, "Plans and approvals"), end to end: a real
//! kube-apiserver + etcd, the operator as a process and the fixture provider. Under
//! `planPolicy: Manual` a create and an update wait as `status.plan` until the annotation
//! `kraken.dev/approve-plan` names the fresh plan's id; an approval given before a spec change
//! is stale and applies nothing, as is one given after an input, the live object or the
//! ProviderConfig moved; an approval survives an operator restart (the id is keyed with the
//! Secret `kraken-plan-key`, read again at start-up). The fixture's ledger proves what really
//! happened.

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
    annotate(bed, &format!("{APPROVE}={id}"))
}

/// `kubectl annotate --overwrite` of the Object `web` (`key=value`, or `key-` to remove).
fn annotate(bed: &FixtureBed, annotation: &str) -> anyhow::Result<()> {
    bed.cp.kubectl(&[
        "annotate",
        OBJECTS,
        "web",
        "-n",
        &bed.ns,
        "--overwrite",
        annotation,
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

/// The chart's admission policy `kraken-plan-approval` and the ClusterRole
/// `kraken-plan-approver`, as `helm template` renders them; `editors` may edit Objects in the
/// namespace and `approvers` may also approve their plans.
fn install_approval_policy(
    bed: &FixtureBed,
    editors: &[&str],
    approvers: &[&str],
) -> anyhow::Result<()> {
    let policy = kraken_tests::helm_template(&["--show-only", "templates/plan-approval.yaml"])?;
    bed.apply(&policy)?;
    let subjects = |users: &[&str]| -> Value {
        users
            .iter()
            .map(|u| json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": u}))
            .collect()
    };
    let group = OBJECT_API_VERSION.split('/').next().unwrap_or_default();
    let rbac = [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "object-editor", "namespace": bed.ns},
               "rules": [{"apiGroups": [group], "resources": ["objects"],
                          "verbs": ["get", "list", "watch", "patch", "update", "delete"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "object-editors", "namespace": bed.ns},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": "object-editor"},
               "subjects": subjects(editors)}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "plan-approvers", "namespace": bed.ns},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "kraken-plan-approver"},
               "subjects": subjects(approvers)}),
    ];
    bed.apply(&kraken_tests::operator::bed::yaml_documents(&rbac))?;
    Ok(())
}

/// `kubectl --as=USER annotate` the approval of plan `id` naming `approved_by`; the error
/// message when admission refuses it.
fn approve_as(bed: &FixtureBed, user: &str, id: &str, approved_by: &str) -> Result<(), String> {
    let (plan, by) = (
        format!("{APPROVE}={id}"),
        format!("kraken.dev/approved-by={approved_by}"),
    );
    let as_user = format!("--as={user}");
    let args = [
        as_user.as_str(),
        "annotate",
        OBJECTS,
        "web",
        "-n",
        &bed.ns,
        "--overwrite",
        &plan,
        &by,
    ];
    match bed.cp.kubectl_output(&args) {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        Err(e) => Err(format!("{e:#}")),
    }
}

/// Waits for a pending plan held for `reason`; returns the object.
fn held(bed: &FixtureBed, reason: &str) -> anyhow::Result<Value> {
    kraken_tests::wait_for(CONVERGE, &format!("a plan held as {reason}"), || {
        let obj = bed.object("web")?;
        let synced = condition(&obj, "Synced");
        if obj["status"]["plan"]["reason"] == reason
            && synced.as_ref().is_some_and(|(_, r, _)| r == reason)
        {
            return Ok(Some(obj));
        }
        anyhow::bail!("{}; plan {}", describe(&obj), obj["status"]["plan"])
    })
}

#[test]
fn approvals_need_approve_rights_and_name_the_approver() -> anyhow::Result<()> {
    let mut bed = FixtureBed::start("approvers", OperatorOptions::default())?;
    let result = approvers(&mut bed);
    bed.finish(result)
}

fn approvers(bed: &mut FixtureBed) -> anyhow::Result<()> {
    install_approval_policy(bed, &["alice", "mallory"], &["alice"])?;
    let manifest = json!({
        "apiVersion": OBJECT_API_VERSION, "kind": OBJECT_KIND,
        "metadata": {"name": "web", "namespace": bed.ns},
        "spec": {"planPolicy": "Manual", "driftInterval": "2s",
                 "forProvider": {"name": "web", "size": 1}},
    });
    bed.apply(&manifest.to_string())?;
    let id = plan_id(&pending(bed, "Create")?)?;
    wait_for_the_policy(bed)?;
    expect_only_approvers_approve(bed, &id)?;

    approve_as(bed, "alice", &id, "alice").map_err(anyhow::Error::msg)?;
    let obj = bed.wait_reconciled("web", CONVERGE)?;
    ensure!(ops(bed)? == ["create web"], "{:?}", ops(bed)?);
    let applied = bed.wait_event("web", "PlanApplied", CONVERGE)?;
    ensure!(
        applied.contains(&format!("applied plan {id} (Create), approved by alice")),
        "{applied}"
    );
    ensure!(
        obj["status"]["lastAppliedPlan"]["approvedBy"] == "alice",
        "{}",
        obj["status"]
    );
    expect_drift_held(bed, &obj)?;
    expect_delete_held(bed)
}

/// The policy takes a moment to reach the API server's admission. Probe on the
/// ProviderConfig (a kraken.dev object the operator ignores annotations of), naming someone
/// else each time (a repeat of the same value would be no change, and admitted).
fn wait_for_the_policy(bed: &FixtureBed) -> anyhow::Result<()> {
    let mut probe = 0;
    kraken_tests::wait_for(CONVERGE, "the approval policy in force", || {
        probe += 1;
        let by = format!("kraken.dev/approved-by=probe-{probe}");
        let out = bed.cp.kubectl_output(&[
            "annotate",
            "providerconfigs.core.kraken.dev",
            "default",
            "-n",
            &bed.ns,
            "--overwrite",
            &by,
        ])?;
        if out.status.success() {
            anyhow::bail!("admitted approved-by={by} from another user");
        }
        Ok(Some(()))
    })
}

/// A user may only name themself, and editing the object is not enough to approve its plan
/// `id`: nothing is applied.
fn expect_only_approvers_approve(bed: &FixtureBed, id: &str) -> anyhow::Result<()> {
    let forged = approve_as(bed, "alice", id, "bob")
        .err()
        .unwrap_or_default();
    ensure!(
        forged.contains("your own user name (alice)"),
        "alice approved in bob's name: {forged}"
    );
    let refused = approve_as(bed, "mallory", id, "mallory")
        .err()
        .unwrap_or_default();
    ensure!(
        refused.contains("mallory may not approve plans in namespace"),
        "mallory approved: {refused}"
    );
    std::thread::sleep(Duration::from_secs(3));
    ensure!(
        ops(bed)?.is_empty(),
        "applied without approval: {:?}",
        ops(bed)?
    );
    Ok(())
}

/// Drift is held, not reverted, and names what drifted; approved, it is put back.
fn expect_drift_held(bed: &FixtureBed, obj: &Value) -> anyhow::Result<()> {
    let external = obj["status"]["externalId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ledger::edit_object(bed.ledger_dir(), &external, |o| o["size"] = json!(9))?;
    let obj = held(bed, "DriftPending")?;
    let (_, _, message) = condition(&obj, "Synced").unwrap_or_default();
    ensure!(
        message.contains("changed outside Kraken (spec.forProvider.size"),
        "{message}"
    );
    std::thread::sleep(Duration::from_secs(4));
    ensure!(
        ops(bed)? == ["create web"],
        "drift reverted unapproved: {:?}",
        ops(bed)?
    );
    let drift = plan_id(&bed.object("web")?)?;
    approve_as(bed, "alice", &drift, "alice").map_err(anyhow::Error::msg)?;
    kraken_tests::wait_for(CONVERGE, "the drift put back", || {
        let ops = ops(bed)?;
        if ops == ["create web", "update web"] {
            return Ok(Some(()));
        }
        anyhow::bail!("{ops:?}")
    })?;
    Ok(())
}

/// A delete waits for its own approval; force-delete does not skip it.
fn expect_delete_held(bed: &FixtureBed) -> anyhow::Result<()> {
    bed.cp
        .kubectl(&["delete", OBJECTS, "web", "-n", &bed.ns, "--wait=false"])?;
    bed.cp.kubectl(&[
        "annotate",
        OBJECTS,
        "web",
        "-n",
        &bed.ns,
        "kraken.dev/force-delete=true",
    ])?;
    let obj = held(bed, "DeletePending")?;
    ensure!(
        obj["status"]["plan"]["action"] == "Delete",
        "{}",
        obj["status"]["plan"]
    );
    std::thread::sleep(Duration::from_secs(3));
    ensure!(
        bed.object_opt("web")?.is_some(),
        "the finalizer was released unapproved"
    );
    ensure!(
        ops(bed)?.len() == 2,
        "destroyed unapproved: {:?}",
        ops(bed)?
    );
    let delete = plan_id(&obj)?;
    approve_as(bed, "alice", &delete, "alice").map_err(anyhow::Error::msg)?;
    bed.wait_gone("web", CONVERGE)?;
    ensure!(
        ops(bed)? == ["create web", "update web", "delete web"],
        "{:?}",
        ops(bed)?
    );
    Ok(())
}

/// Every cause of a stale approval but the provider version (a unit test covers that one, in
/// `managed::plan`), against the real parts: an input from a ConfigMap, the live object
/// (the fixture's ledger edited behind Kraken's back) and the ProviderConfig each move between
/// the plan a person saw and their approval of it. Each time nothing is applied, a `PlanStale`
/// Event names what moved, and a new plan waits. The object is paused while the change and the
/// approval are made, so the operator sees both at once, as it would if they raced.
#[test]
fn approvals_go_stale_when_an_input_the_live_object_or_the_config_moves() -> anyhow::Result<()> {
    let mut bed = FixtureBed::start("stale", OperatorOptions::default())?;
    let result = stale_causes(&mut bed);
    bed.finish(result)
}

/// The ConfigMap `inputs` with `size`.
fn inputs(bed: &FixtureBed, size: u32) -> anyhow::Result<()> {
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "inputs", "namespace": bed.ns},
        "data": {"size": size.to_string()},
    });
    bed.apply(&cm.to_string())?;
    Ok(())
}

/// The Object `web` under planPolicy Manual, its size read from the ConfigMap `inputs`.
fn fed_web(bed: &FixtureBed) -> anyhow::Result<()> {
    let manifest = json!({
        "apiVersion": OBJECT_API_VERSION, "kind": OBJECT_KIND,
        "metadata": {"name": "web", "namespace": bed.ns},
        "spec": {
            "planPolicy": "Manual",
            "driftInterval": "2s",
            "forProvider": {"name": "web"},
            "valuesFrom": [{"path": "size", "configMapKeyRef": {"name": "inputs", "key": "size"}}],
        },
    });
    bed.apply(&manifest.to_string())?;
    Ok(())
}

/// Waits for a held plan whose id is not `other` (any reason); returns the object.
fn held_other_than(bed: &FixtureBed, other: &str) -> anyhow::Result<Value> {
    kraken_tests::wait_for(CONVERGE, &format!("a held plan other than {other}"), || {
        let obj = bed.object("web")?;
        let id = obj["status"]["plan"]["id"].as_str().unwrap_or_default();
        let synced = condition(&obj, "Synced");
        if !id.is_empty()
            && id != other
            && synced.as_ref().is_some_and(|(s, r, _)| {
                s == "False" && (r == "PlanPending" || r == "DriftPending")
            })
        {
            return Ok(Some(obj));
        }
        anyhow::bail!("{}; plan {}", describe(&obj), obj["status"]["plan"])
    })
}

fn set_paused(bed: &FixtureBed, paused: bool) -> anyhow::Result<()> {
    annotate(
        bed,
        if paused {
            "kraken.dev/paused=true"
        } else {
            "kraken.dev/paused-"
        },
    )?;
    if paused {
        bed.wait_synced("web", "False", "ReconcilePaused", CONVERGE)?;
    }
    Ok(())
}

/// While `web` is paused: `moved` changes something, then plan `shown` is approved; unpaused,
/// the approval must be stale for a reason naming `why`, apply nothing, and leave a new plan.
fn approve_after(
    bed: &FixtureBed,
    shown: &str,
    why: &str,
    moved: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<Value> {
    let before = ops(bed)?;
    set_paused(bed, true)?;
    moved()?;
    approve(bed, shown)?;
    set_paused(bed, false)?;
    let stale = format!("the approved plan {shown} is stale");
    let message = kraken_tests::wait_for(CONVERGE, &format!("PlanStale: {why}"), || {
        let events = bed.events("web")?;
        match events
            .iter()
            .find(|(r, m)| r == "PlanStale" && m.contains(&stale))
        {
            Some((_, m)) => Ok(Some(m.clone())),
            None => anyhow::bail!("Events about web: {events:?}"),
        }
    })?;
    ensure!(message.contains(why), "stale for another reason: {message}");
    let obj = held_other_than(bed, shown)?;
    ensure!(
        ops(bed)? == before,
        "applied a stale approval: {:?}",
        ops(bed)?
    );
    Ok(obj)
}

fn stale_causes(bed: &mut FixtureBed) -> anyhow::Result<()> {
    inputs(bed, 1)?;
    fed_web(bed)?;
    let obj = pending(bed, "Create")?;
    approve(bed, &plan_id(&obj)?)?;
    let obj = bed.wait_reconciled("web", CONVERGE)?;
    ensure!(ops(bed)? == ["create web"], "{:?}", ops(bed)?);
    let id = obj["status"]["externalId"]
        .as_str()
        .context("no externalId")?
        .to_owned();

    // An input moves: the ConfigMap says 2, that plan is shown, then it says 3.
    inputs(bed, 2)?;
    let obj = held_other_than(bed, "")?;
    let synced = condition(&obj, "Synced");
    ensure!(
        synced
            .as_ref()
            .is_some_and(|(_, r, m)| r == "PlanPending" && !m.contains("outside Kraken")),
        "a moved input is a change, not drift: {synced:?}"
    );
    let shown = plan_id(&obj)?;
    let obj = approve_after(bed, &shown, "the resolved inputs changed", || {
        inputs(bed, 3)
    })?;

    // The live object moves: someone sets its size to 77 behind Kraken's back.
    let shown = plan_id(&obj)?;
    let obj = approve_after(bed, &shown, "the external object changed", || {
        kraken_tests::ledger::edit_object(bed.ledger_dir(), &id, |o| o["size"] = json!(77))
    })?;

    // The ProviderConfig moves.
    let shown = plan_id(&obj)?;
    let obj = approve_after(bed, &shown, "the ProviderConfig changed", || {
        bed.apply_provider_config("default", json!({"applyDelayMs": 1}))
    })?;

    // The fresh plan, approved as it is, applies: the live object gets the input's size.
    approve(bed, &plan_id(&obj)?)?;
    let obj = bed.wait_reconciled("web", CONVERGE)?;
    ensure!(
        obj["status"]["atProvider"]["size"] == 3,
        "{}",
        obj["status"]
    );
    ensure!(ops(bed)? == ["create web", "update web"], "{:?}", ops(bed)?);
    Ok(())
}

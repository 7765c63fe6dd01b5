//! Approvals hold against the editor: the namespace's plan-policy floor is an administrator's
//! label, and neither the resource's `planPolicy` nor its ProviderConfig's goes below it.

use anyhow::ensure;
use serde_json::json;

use super::{CONVERGE, TENANT, apply_as_tenant, bind_tenant};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{OBJECT_API_VERSION, OBJECT_KIND, OBJECTS, wait_condition};
use kraken_tests::operator::{FixtureBed, OperatorOptions};

#[test]
fn the_editor_cannot_lower_the_namespaces_plan_policy() -> anyhow::Result<()> {
    let bed = FixtureBed::start("floor", OperatorOptions::default())?;
    let result = scenario(&bed);
    bed.finish(result)
}

fn scenario(bed: &FixtureBed) -> anyhow::Result<()> {
    bind_tenant(bed)?;
    bed.cp.kubectl(&[
        "label",
        "namespace",
        &bed.ns,
        "kraken.dev/plan-policy=Manual",
    ])?;
    // The tenant lowers the ProviderConfig's policy and asks for Auto in the same apply as
    // the create: the create still waits for approval.
    let pc = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
        "metadata": {"name": "default", "namespace": bed.ns},
        "spec": {"planPolicy": "Auto"}});
    apply_as_tenant(bed, &pc)?.map_err(anyhow::Error::msg)?;
    let web = json!({"apiVersion": OBJECT_API_VERSION, "kind": OBJECT_KIND,
        "metadata": {"name": "web", "namespace": bed.ns},
        "spec": {"planPolicy": "Auto", "driftInterval": "2s",
                 "forProvider": {"name": "web", "size": 1}}});
    apply_as_tenant(bed, &web)?.map_err(anyhow::Error::msg)?;
    wait_condition(
        &bed.cp,
        (&bed.ns, OBJECTS, "web"),
        ("Synced", "False", "PlanPending"),
        "",
        CONVERGE,
    )?;
    // Passes go by (the plan is made again each one) and create nothing.
    bed.wait_reconciles(2, CONVERGE)?;
    let done = ledger::event_log(bed.ledger_dir())?;
    ensure!(done.is_empty(), "created without approval: {done:?}");

    // The floor is not the tenant's to move.
    let as_tenant = format!("--as={TENANT}");
    let out = bed.cp.kubectl_output(&[
        &as_tenant,
        "label",
        "namespace",
        &bed.ns,
        "--overwrite",
        "kraken.dev/plan-policy=Auto",
    ])?;
    ensure!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("forbidden"),
        "the tenant relabelled the namespace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Under a `Manual` floor, the editor switches a resource to `deletionPolicy: Orphan` and
/// deletes it: the switch waits for approval like any change, so the destroy still waits for
/// its own (nothing destroyed, nothing released unmanaged); and the plan the approver reads
/// cannot be rewritten, the chart's kraken-status-writers policy keeping status Kraken's.
#[test]
fn the_editor_cannot_release_a_held_object_or_rewrite_its_plan() -> anyhow::Result<()> {
    let bed = FixtureBed::start("policy-fields", OperatorOptions::default())?;
    let result = release(&bed);
    bed.finish(result)
}

fn release(bed: &FixtureBed) -> anyhow::Result<()> {
    bind_tenant(bed)?;
    super::install_chart_template(bed, "templates/status-writers.yaml")?;
    bed.apply_object(
        "vault",
        json!({"forProvider": {"name": "vault", "size": 1}}),
    )?;
    bed.wait_reconciled("vault", CONVERGE)?;
    bed.cp.kubectl(&[
        "label",
        "namespace",
        &bed.ns,
        "kraken.dev/plan-policy=Manual",
    ])?;
    let as_tenant = format!("--as={TENANT}");
    bed.cp.kubectl(&[
        &as_tenant,
        "patch",
        OBJECTS,
        "vault",
        "-n",
        &bed.ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"deletionPolicy":"Orphan"}}"#,
    ])?;
    let message = wait_condition(
        &bed.cp,
        (&bed.ns, OBJECTS, "vault"),
        ("Synced", "False", "PlanPending"),
        "",
        CONVERGE,
    )?;
    let plan = bed.object("vault")?["status"]["plan"].clone();
    ensure!(
        plan.to_string().contains("spec.deletionPolicy"),
        "the plan shows the policy change: {plan} ({message})"
    );
    bed.cp.kubectl(&[
        &as_tenant,
        "delete",
        OBJECTS,
        "vault",
        "-n",
        &bed.ns,
        "--wait=false",
    ])?;
    wait_condition(
        &bed.cp,
        (&bed.ns, OBJECTS, "vault"),
        ("Synced", "False", "DeletePending"),
        "",
        CONVERGE,
    )?;
    // The deletion's pass held the destroy: the object is still there, and so is its finalizer.
    ensure!(bed.object_opt("vault")?.is_some(), "released unmanaged");
    let ops: Vec<String> = ledger::event_log(bed.ledger_dir())?
        .into_iter()
        .map(|e| format!("{} {}", e.op, e.name))
        .collect();
    ensure!(ops == ["create vault"], "destroyed or changed: {ops:?}");
    rewrite_refused(bed, &as_tenant)
}

/// The tenant rewrites the plan the approver will read: refused.
fn rewrite_refused(bed: &FixtureBed, as_tenant: &str) -> anyhow::Result<()> {
    kraken_tests::wait_for(CONVERGE, "a status write refused to the tenant", || {
        let out = bed.cp.kubectl_output(&[
            as_tenant,
            "patch",
            OBJECTS,
            "vault",
            "-n",
            &bed.ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"plan":{"changes":[]}}}"#,
        ])?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            anyhow::bail!("the tenant wrote the status");
        }
        Ok(stderr
            .contains("only the Kraken operator writes the status")
            .then_some(()))
    })?;
    Ok(())
}

//! Deleting a Provider: wait while objects of its kinds exist (their deletion needs the kinds'
//! controllers and the provider binary), then suspend (or, with `spec.removeCRDs`, delete) its
//! CRDs and release the finalizer. With `kraken.dev/force-delete=true` it does not wait: the
//! kinds are suspended with their objects in place, as before.

use super::*;
use kraken_core_kinds::lifecycle::{self, OnDelete};
use kraken_kit::conditions::reason::IN_USE;

/// Deletion: wait for the users, then suspend (or remove) the Provider's CRDs, then release
/// the finalizer.
pub(super) async fn cleanup(p: &Provider, inst: &Installer) -> Result<Action, kube::Error> {
    let name = p.name_any();
    let crds: Api<CustomResourceDefinition> = Api::all(inst.client.clone());
    let owned = crds
        .list(&ListParams::default().labels(&format!("{PROVIDER_NAME_LABEL}={name}")))
        .await?;
    let users = users(inst, &owned.items).await?;
    let described: Vec<String> = users.iter().map(|(_, u)| u.clone()).collect();
    let forced = lifecycle::forced(&p.metadata);
    if let OnDelete::Wait(message) = lifecycle::on_delete(&described, forced) {
        wait_for_users(p, inst, message).await?;
        return Ok(Action::requeue(lifecycle::WAIT_AGAIN));
    }
    let mut in_use: Vec<String> = users.into_iter().map(|(kind, _)| kind).collect();
    in_use.dedup();
    let remove = p.spec.remove_crds && in_use.is_empty();
    for crd in &owned {
        let crd_name = crd.name_any();
        if remove {
            inst.metrics
                .api_write("customresourcedefinitions", "delete");
            crds.delete(&crd_name, &DeleteParams::default()).await?;
        } else {
            inst.metrics.api_write("customresourcedefinitions", "patch");
            crds.patch(
                &crd_name,
                &kraken_kit::status::patch_params(),
                &Patch::Merge(json!({"metadata": {"labels": {SUSPENDED_LABEL: "true"}}})),
            )
            .await?;
        }
    }
    if !remove && !in_use.is_empty() {
        super::suspend::mark_suspended(inst, &name, &owned.items).await?;
    }
    inst.generated
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&name);
    if p.spec.remove_crds && !in_use.is_empty() {
        let note = format!(
            "kept the CRDs of Provider {name}: objects of {} still exist",
            in_use.join(", ")
        );
        event(p, inst, true, "CRDsKept", &note).await;
    }
    finalizer::ensure(
        &api(inst),
        &p.metadata,
        FINALIZER,
        false,
        &inst.metrics,
        "providers",
    )
    .await?;
    Ok(Action::await_change())
}

/// The objects of the kinds the Provider installed, in every namespace, as (kind,
/// `Kind namespace/name`), sorted by kind: metadata lists, on the deletion path only.
async fn users(
    inst: &Installer,
    owned: &[CustomResourceDefinition],
) -> Result<Vec<(String, String)>, kube::Error> {
    let mut users = Vec::new();
    for crd in owned {
        let Some(kind) = KindInfo::any_from_crd(crd) else {
            continue;
        };
        let objects: Api<DynamicObject> = Api::all_with(inst.client.clone(), &kind.resource);
        let list = objects.list_metadata(&ListParams::default()).await?;
        for o in list.items {
            let who = format!(
                "{} {}/{}",
                kind.resource.kind,
                o.metadata.namespace.as_deref().unwrap_or_default(),
                o.metadata.name.as_deref().unwrap_or_default()
            );
            users.push((kind.resource.kind.clone(), who));
        }
    }
    users.sort();
    Ok(users)
}

/// `Ready=False, reason InUse` naming the users; an Event when the message is new.
async fn wait_for_users(
    p: &Provider,
    inst: &Installer,
    message: String,
) -> Result<(), kube::Error> {
    let repeated = p.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == READY && c.reason == IN_USE && c.message == message)
    });
    let status = p.status.clone().unwrap_or_default();
    write_status(
        p,
        inst,
        status,
        Set::new(READY, false, IN_USE, message.clone()),
    )
    .await?;
    if !repeated {
        event(p, inst, false, IN_USE, &message).await;
    }
    Ok(())
}

//! Deleting a Provider: suspend (or, with `spec.removeCRDs` and no objects left, delete) its
//! CRDs, then release the finalizer.

use super::*;

/// Deletion: suspend (or remove) the Provider's CRDs, then release the finalizer.
pub(super) async fn cleanup(p: &Provider, inst: &Installer) -> Result<Action, kube::Error> {
    let name = p.name_any();
    let crds: Api<CustomResourceDefinition> = Api::all(inst.ctx.client.clone());
    let owned = crds
        .list(&ListParams::default().labels(&format!("{PROVIDER_NAME_LABEL}={name}")))
        .await?;
    let mut in_use = Vec::new();
    if p.spec.remove_crds {
        for crd in &owned {
            if let Some(kind) = KindInfo::any_from_crd(crd) {
                let objects: Api<DynamicObject> =
                    Api::all_with(inst.ctx.client.clone(), &kind.resource);
                let list = objects
                    .list_metadata(&ListParams::default().limit(1))
                    .await?;
                if !list.items.is_empty() {
                    in_use.push(kind.resource.kind.clone());
                }
            }
        }
    }
    let remove = p.spec.remove_crds && in_use.is_empty();
    for crd in &owned {
        let crd_name = crd.name_any();
        if remove {
            inst.ctx
                .metrics
                .api_write("customresourcedefinitions", "delete");
            crds.delete(&crd_name, &DeleteParams::default()).await?;
        } else {
            inst.ctx
                .metrics
                .api_write("customresourcedefinitions", "patch");
            crds.patch(
                &crd_name,
                &crate::kit::status::patch_params(),
                &Patch::Merge(json!({"metadata": {"labels": {SUSPENDED_LABEL: "true"}}})),
            )
            .await?;
        }
    }
    if !in_use.is_empty() {
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
        &inst.ctx.metrics,
        "providers",
    )
    .await?;
    Ok(Action::await_change())
}

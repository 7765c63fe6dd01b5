//! A forced Provider deletion suspends kinds whose objects still exist. No controller of those
//! kinds is left to speak for them, so each object is told here, once, in its conditions:
//! `Synced=False, reason KindSuspended`, and `Ready=False, reason Deleting` on one whose
//! deletion now waits for the Provider to come back. Applying the Provider again restarts the
//! kinds' controllers, which write their own conditions over these.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch};
use serde_json::json;

use super::Installer;
use kraken_core_kinds::KindInfo;
use kraken_kit::conditions::{self, Condition, READY, SYNCED, Set, reason};

/// The conditions of an object whose kind the deletion of Provider `provider` suspended.
pub(super) fn suspended_conditions(provider: &str, deleting: bool) -> Vec<Set> {
    let mut out = vec![Set::new(
        SYNCED,
        false,
        reason::KIND_SUSPENDED,
        format!(
            "Provider {provider} was deleted with kraken.dev/force-delete: this kind is not \
             reconciled until the Provider is applied again"
        ),
    )];
    if deleting {
        out.push(Set::new(
            READY,
            false,
            reason::DELETING,
            format!(
                "deletion waits: KindSuspended (apply the Provider {provider} again to destroy it)"
            ),
        ));
    }
    out
}

/// Writes [`suspended_conditions`] into every object of the `owned` kinds, where they are not
/// there yet.
pub(super) async fn mark_suspended(
    inst: &Installer,
    provider: &str,
    owned: &[CustomResourceDefinition],
) -> Result<(), kube::Error> {
    let client = &inst.client;
    for kind in owned.iter().filter_map(KindInfo::any_from_crd) {
        let all: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource);
        for o in all.list(&ListParams::default()).await? {
            let deleting = o.metadata.deletion_timestamp.is_some();
            let current: Vec<Condition> = o
                .data
                .pointer("/status/conditions")
                .and_then(|c| serde_json::from_value(c.clone()).ok())
                .unwrap_or_default();
            let now = conditions::now();
            let updates = suspended_conditions(provider, deleting);
            let merged = conditions::merge(&current, &updates, o.metadata.generation, &now);
            let unchanged = updates.iter().all(|u| {
                current
                    .iter()
                    .any(|c| c.type_ == u.type_ && c.reason == u.reason && c.message == u.message)
            });
            if unchanged {
                continue;
            }
            let (Some(ns), Some(name)) = (&o.metadata.namespace, &o.metadata.name) else {
                continue;
            };
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kind.resource);
            inst.metrics
                .api_write(&kind.resource.plural, "patch-status");
            let patch = json!({"status": {"conditions": merged}});
            match api
                .patch_status(
                    name,
                    &kraken_kit::status::patch_params(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suspended_object_says_so_and_a_deleted_one_says_why_it_waits() {
        let live = suspended_conditions("random", false);
        assert_eq!(live.len(), 1);
        assert_eq!(
            (live[0].type_, live[0].reason),
            (SYNCED, reason::KIND_SUSPENDED)
        );
        assert!(
            live[0].message.contains("Provider random"),
            "{}",
            live[0].message
        );
        let deleting = suspended_conditions("random", true);
        assert_eq!(
            deleting
                .iter()
                .map(|s| (s.type_, s.status, s.reason))
                .collect::<Vec<_>>(),
            [
                (SYNCED, false, reason::KIND_SUSPENDED),
                (READY, false, reason::DELETING)
            ]
        );
    }
}

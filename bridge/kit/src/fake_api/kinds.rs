//! What the server's strategy for a kind decides, by its API group and plural: whether it
//! has a `generation`, a status subresource, whether a `PUT` may create it and whether a `PUT`
//! may leave out the resourceVersion. Taken from the built-in kinds' registry strategies; a
//! custom resource follows its CRD when one is stored (a status subresource only when the
//! served version declares it) and is taken to have a status subresource when none is, as
//! every Kraken kind has.

use serde_json::Value as Json;

/// A kind's strategy, as far as the fake needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub generation: bool,
    pub status: bool,
    pub create_on_update: bool,
    pub unconditional_update: bool,
}

/// The kind of collection `plural` under `prefix` (`/api/v1`, `/apis/<group>/<version>`);
/// `crd` finds a stored CRD by name (`<plural>.<group>`).
pub fn kind(prefix: &str, plural: &str, crd: impl Fn(&str) -> Option<Json>) -> Kind {
    let (group, version) = match prefix.strip_prefix("/apis/") {
        Some(gv) => gv.split_once('/').unwrap_or((gv, "")),
        None => ("", "v1"),
    };
    let of = |generation, status, create_on_update, unconditional_update| Kind {
        generation,
        status,
        create_on_update,
        unconditional_update,
    };
    match group {
        "" => {
            let generation = matches!(plural, "pods" | "replicationcontrollers" | "podtemplates");
            let status = matches!(
                plural,
                "pods"
                    | "services"
                    | "namespaces"
                    | "nodes"
                    | "persistentvolumes"
                    | "persistentvolumeclaims"
                    | "replicationcontrollers"
                    | "resourcequotas"
            );
            let create = matches!(plural, "endpoints" | "events" | "limitranges" | "services");
            of(generation, status, create, true)
        }
        "coordination.k8s.io" => of(false, false, true, false),
        "events.k8s.io" => of(false, false, true, true),
        "rbac.authorization.k8s.io" => of(false, false, true, true),
        "authentication.k8s.io" | "authorization.k8s.io" => of(false, false, false, true),
        "apiextensions.k8s.io" => of(true, true, false, false),
        "admissionregistration.k8s.io" => {
            let status = !plural.ends_with("bindings") && plural.contains("policies");
            of(true, status, false, false)
        }
        "apps" | "batch" | "policy" | "networking.k8s.io" | "autoscaling" => {
            of(true, true, false, true)
        }
        _ => {
            let status = crd(&format!("{plural}.{group}"))
                .map(|crd| declares_status(&crd, version))
                .unwrap_or(true);
            of(true, status, false, false)
        }
    }
}

/// Whether `crd` gives `version` a status subresource.
fn declares_status(crd: &Json, version: &str) -> bool {
    crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == version)
        .is_some_and(|v| !v["subresources"]["status"].is_null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_follow_their_strategies_and_crds() {
        let none = |_: &str| None;
        let cm = kind("/api/v1", "configmaps", none);
        assert!(!cm.generation && !cm.status && !cm.create_on_update && cm.unconditional_update);
        let lease = kind("/apis/coordination.k8s.io/v1", "leases", none);
        assert!(lease.create_on_update && !lease.unconditional_update);
        let pets = kind("/apis/random.tf.kraken.dev/v1alpha1", "pets", none);
        assert!(pets.generation && pets.status && !pets.unconditional_update);
        let crd = json!({"spec": {"versions": [{"name": "v1", "subresources": {}}]}});
        let plain = kind("/apis/x.dev/v1", "gadgets", |n: &str| {
            (n == "gadgets.x.dev").then(|| crd.clone())
        });
        assert!(plain.generation && !plain.status);
    }
}

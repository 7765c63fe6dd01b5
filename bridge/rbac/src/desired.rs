//! The deciding core: from the Providers, their CRDs and the Namespaces, what RBAC the operator
//! should hold. No API calls here.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;

/// The only groups a Provider's role may name: those Kraken generates. A CRD in any other
/// group, whatever its labels say, is never granted (the operator itself creates CRDs, so a
/// label is not proof of anything).
pub const GRANTABLE_SUFFIX: &str = ".tf.kraken.dev";

/// The verbs the operator uses on a managed kind: it reads and watches them, patches their
/// finalizers and annotations, and writes their status. It never creates or deletes them.
pub const MANAGED_VERBS: [&str; 5] = ["get", "list", "watch", "patch", "update"];

/// The finalizer on each tenant RoleBinding: while a namespace is deleted, its managed
/// resources still need their state and credentials Secrets to be destroyed, and the
/// RoleBinding that lets the operator read them must outlive them.
pub const TENANT_FINALIZER: &str = "kraken.dev/tenant-access";

/// One CRD a Provider installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crd {
    /// The Provider's name (the CRD's `kraken.dev/provider-name` label).
    pub provider: String,
    pub group: String,
    pub plural: String,
}

/// One Namespace the policy selects.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Namespace {
    pub name: String,
    /// Being deleted.
    pub terminating: bool,
    /// While terminating: the finalizers its remaining content still carries, as the namespace
    /// controller reports them (condition `NamespaceFinalizersRemaining`), or `None` when it
    /// reports none or has not said yet.
    pub finalizers_remaining: Option<String>,
}

/// Which namespaces the operator gets Secrets and ConfigMaps in.
#[derive(Debug, Clone, Default)]
pub struct NamespacePolicy {
    /// Never granted, whatever their labels (the cluster's own: kube-system and its peers).
    pub exclude: BTreeSet<String>,
}

/// What the operator should hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Desired {
    /// Per Provider (by name): the rules of its ClusterRole.
    pub provider_roles: BTreeMap<String, Vec<PolicyRule>>,
    /// The namespaces whose tenant RoleBinding should exist.
    pub tenant_namespaces: BTreeSet<String>,
    /// Namespaces being deleted whose RoleBinding, where it exists, is kept (and its finalizer
    /// with it) while their content still waits for Kraken; none is created there.
    pub held_namespaces: BTreeSet<String>,
}

/// What the operator should hold, given the Providers that exist, the CRDs labelled as theirs
/// and the namespaces the selector matched.
pub fn desired(
    providers: &BTreeSet<String>,
    crds: &[Crd],
    namespaces: &[Namespace],
    policy: &NamespacePolicy,
) -> Desired {
    let mut groups: BTreeMap<&str, BTreeMap<&str, BTreeSet<&str>>> = BTreeMap::new();
    for crd in crds {
        if !providers.contains(&crd.provider) || !grantable(&crd.group) || crd.plural.is_empty() {
            continue;
        }
        groups
            .entry(crd.provider.as_str())
            .or_default()
            .entry(crd.group.as_str())
            .or_default()
            .insert(crd.plural.as_str());
    }
    let provider_roles = groups
        .into_iter()
        .map(|(provider, by_group)| (provider.to_owned(), rules(&by_group)))
        .collect();
    let (mut tenant_namespaces, mut held_namespaces) = (BTreeSet::new(), BTreeSet::new());
    for ns in namespaces {
        if policy.exclude.contains(&ns.name) || !still_needed(ns) {
            continue;
        }
        match ns.terminating {
            false => tenant_namespaces.insert(ns.name.clone()),
            true => held_namespaces.insert(ns.name.clone()),
        };
    }
    Desired {
        provider_roles,
        tenant_namespaces,
        held_namespaces,
    }
}

/// Whether `group` is one a Provider's role may name: `<something>.tf.kraken.dev`.
pub fn grantable(group: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    group
        .strip_suffix(GRANTABLE_SUFFIX)
        .is_some_and(|head| head.split('.').all(label))
}

/// One rule per group: its kinds and their status, with [`MANAGED_VERBS`].
fn rules(by_group: &BTreeMap<&str, BTreeSet<&str>>) -> Vec<PolicyRule> {
    by_group
        .iter()
        .map(|(group, plurals)| PolicyRule {
            api_groups: Some(vec![(*group).to_owned()]),
            resources: Some(
                plurals
                    .iter()
                    .flat_map(|p| [(*p).to_owned(), format!("{p}/status")])
                    .collect(),
            ),
            verbs: MANAGED_VERBS.iter().map(|v| (*v).to_owned()).collect(),
            ..PolicyRule::default()
        })
        .collect()
}

/// A namespace keeps its binding unless it is being deleted and nothing in it still waits for
/// Kraken: no finalizer of Kraken's remains on its content but the binding's own.
fn still_needed(ns: &Namespace) -> bool {
    if !ns.terminating {
        return true;
    }
    let Some(remaining) = &ns.finalizers_remaining else {
        // Not reported yet: the content is still being deleted.
        return true;
    };
    remaining
        .split(|c: char| c.is_whitespace() || c == ',')
        .any(|word| word.starts_with("kraken.dev/") && word != TENANT_FINALIZER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(provider: &str, group: &str, plural: &str) -> Crd {
        Crd {
            provider: provider.into(),
            group: group.into(),
            plural: plural.into(),
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_provider_is_granted_its_groups_and_nothing_else() {
        let crds = [
            crd("random", "random.tf.kraken.dev", "pets"),
            crd("random", "random.tf.kraken.dev", "strings"),
            crd("random", "data.random.tf.kraken.dev", "ids"),
            // Labelled as the Provider's, but not a generated group: never granted.
            crd("random", "apps", "deployments"),
            crd("random", "tf.kraken.dev", "roots"),
            crd("random", "x..tf.kraken.dev", "odd"),
            // A Provider that does not exist (deleted): revoked.
            crd("gone", "gone.tf.kraken.dev", "things"),
        ];
        let d = desired(&set(&["random"]), &crds, &[], &NamespacePolicy::default());
        assert_eq!(d.provider_roles.keys().collect::<Vec<_>>(), ["random"]);
        let rules = &d.provider_roles["random"];
        let groups: Vec<_> = rules.iter().map(|r| r.api_groups.clone()).collect();
        assert_eq!(
            groups,
            [
                Some(vec!["data.random.tf.kraken.dev".to_owned()]),
                Some(vec!["random.tf.kraken.dev".to_owned()])
            ]
        );
        assert_eq!(
            rules[1].resources.as_deref(),
            Some(
                &[
                    "pets".to_owned(),
                    "pets/status".into(),
                    "strings".into(),
                    "strings/status".into()
                ][..]
            )
        );
        assert!(rules.iter().all(|r| r.verbs == MANAGED_VERBS));
    }

    #[test]
    fn a_provider_without_crds_gets_no_role() {
        let d = desired(&set(&["fresh"]), &[], &[], &NamespacePolicy::default());
        assert!(d.provider_roles.is_empty());
    }

    #[test]
    fn namespaces_are_granted_except_the_excluded_and_the_finished() {
        let ns = |name: &str, terminating: bool, remaining: Option<&str>| Namespace {
            name: name.into(),
            terminating,
            finalizers_remaining: remaining.map(str::to_owned),
        };
        let namespaces = [
            ns("team-a", false, None),
            ns("kube-system", false, None),
            ns("leaving-early", true, None),
            ns(
                "leaving-with-objects",
                true,
                Some(
                    "Some content in the namespace has finalizers remaining: kraken.dev/managed in 2 resource instances, kraken.dev/tenant-access in 1 resource instances",
                ),
            ),
            ns(
                "leaving-done",
                true,
                Some(
                    "Some content in the namespace has finalizers remaining: kraken.dev/tenant-access in 1 resource instances",
                ),
            ),
        ];
        let policy = NamespacePolicy {
            exclude: set(&["kube-system"]),
        };
        let d = desired(&BTreeSet::new(), &[], &namespaces, &policy);
        assert_eq!(d.tenant_namespaces, set(&["team-a"]));
        assert_eq!(
            d.held_namespaces,
            set(&["leaving-early", "leaving-with-objects"])
        );
    }
}

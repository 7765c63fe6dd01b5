//! Kraken's kinds, found by API discovery, and what a user's `KIND` names among them.
//!
//! Kraken's kinds are those of the API group `kraken.dev` and of every group under it
//! (`core.kraken.dev`, `aws.kraken.dev`, `<provider>.tf.kraken.dev`, `data.…`). Discovery asks
//! only for those groups' resources (one request per group), so a cluster with many other APIs
//! costs nothing more. Names resolve as kubectl resolves them: plural, singular, kind or short
//! name, optionally qualified with `.group` or `.version.group`, case-insensitively.

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
use kube::discovery::ApiResource;

/// The API group Kraken's groups end with.
pub(super) const GROUP_SUFFIX: &str = "kraken.dev";

/// One served Kraken kind.
#[derive(Debug, Clone)]
pub(super) struct KrakenKind {
    pub resource: ApiResource,
    pub namespaced: bool,
    pub singular: String,
    pub short_names: Vec<String>,
}

impl KrakenKind {
    /// `plural.group`: how kubectl names the kind without ambiguity.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.resource.plural, self.resource.group)
    }

    /// Whether `name` (lowercase) names this kind.
    fn named(&self, name: &str) -> bool {
        let r = &self.resource;
        let kind = r.kind.to_lowercase();
        let names = [&r.plural, &self.singular, &kind]
            .into_iter()
            .chain(&self.short_names)
            .filter(|n| !n.is_empty());
        names.into_iter().any(|n| {
            name == n.as_str()
                || name == format!("{n}.{}", r.group)
                || name == format!("{n}.{}.{}", r.version, r.group)
        })
    }
}

pub(super) fn is_kraken_group(group: &str) -> bool {
    group == GROUP_SUFFIX
        || group
            .strip_suffix(GROUP_SUFFIX)
            .is_some_and(|g| g.ends_with('.'))
}

/// Every Kraken kind the API server serves, at its group's preferred version.
pub(super) async fn kraken_kinds(client: &kube::Client) -> anyhow::Result<Vec<KrakenKind>> {
    let groups = client
        .list_api_groups()
        .await
        .context("failed to list the API groups (API discovery)")?;
    let versions: Vec<String> = groups
        .groups
        .into_iter()
        .filter(|g| is_kraken_group(&g.name))
        .filter_map(|g| {
            g.preferred_version
                .or_else(|| g.versions.into_iter().next())
                .map(|v| v.group_version)
        })
        .collect();
    let lists: Vec<_> = futures::stream::iter(versions)
        .map(|gv| async move {
            let list = client
                .list_api_group_resources(&gv)
                .await
                .with_context(|| format!("failed to discover the resources of {gv}"))?;
            anyhow::Ok((gv, list.resources))
        })
        .buffer_unordered(8)
        .try_collect()
        .await?;
    let mut kinds: Vec<KrakenKind> = lists
        .into_iter()
        .flat_map(|(gv, resources)| {
            resources
                .into_iter()
                .filter(|r| !r.name.contains('/')) // subresources: status, scale
                .map(move |r| kind_of(&gv, r))
        })
        .collect();
    kinds.sort_by_key(KrakenKind::qualified);
    Ok(kinds)
}

fn kind_of(group_version: &str, r: APIResource) -> KrakenKind {
    let (group, version) = group_version.split_once('/').unwrap_or(("", group_version));
    KrakenKind {
        resource: ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: group_version.to_owned(),
            kind: r.kind,
            plural: r.name,
        },
        namespaced: r.namespaced,
        singular: r.singular_name,
        short_names: r.short_names.unwrap_or_default(),
    }
}

/// The kind `name` names among `kinds`: exactly one, or an error saying what to write.
pub(super) fn resolve<'a>(kinds: &'a [KrakenKind], name: &str) -> anyhow::Result<&'a KrakenKind> {
    let lower = name.to_lowercase();
    let found: Vec<&KrakenKind> = kinds.iter().filter(|k| k.named(&lower)).collect();
    match found.as_slice() {
        [one] => Ok(one),
        [] => anyhow::bail!(
            "no Kraken kind is called {name:?}: Kraken's kinds are those of the API groups \
             {GROUP_SUFFIX} and *.{GROUP_SUFFIX} (`kubectl api-resources --categories kraken` lists \
             them; `kubectl kraken get` lists their objects)"
        ),
        many => {
            let names: Vec<String> = many.iter().map(|k| k.qualified()).collect();
            anyhow::bail!(
                "{name:?} is ambiguous: it names {}; write one of these",
                names.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(group: &str, kind: &str, plural: &str, short: &[&str]) -> KrakenKind {
        KrakenKind {
            resource: ApiResource {
                group: group.into(),
                version: "v1alpha1".into(),
                api_version: format!("{group}/v1alpha1"),
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced: true,
            singular: kind.to_lowercase(),
            short_names: short.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn names_resolve_as_kubectl_resolves_them() -> anyhow::Result<()> {
        let kinds = [
            kind("fixture.tf.kraken.dev", "Object", "objects", &[]),
            kind("random.tf.kraken.dev", "Pet", "pets", &[]),
            kind("core.kraken.dev", "Provider", "providers", &["kprov"]),
            kind("data.fixture.tf.kraken.dev", "Object", "objects", &[]),
        ];
        let q = |n: &str| resolve(&kinds, n).map(KrakenKind::qualified);
        for n in [
            "pets",
            "pet",
            "Pet",
            "pets.random.tf.kraken.dev",
            "Pet.random.tf.kraken.dev",
        ] {
            assert_eq!(q(n)?, "pets.random.tf.kraken.dev", "{n}");
        }
        assert_eq!(
            q("pets.v1alpha1.random.tf.kraken.dev")?,
            "pets.random.tf.kraken.dev"
        );
        assert_eq!(q("kprov")?, "providers.core.kraken.dev");
        assert_eq!(
            q("objects.fixture.tf.kraken.dev")?,
            "objects.fixture.tf.kraken.dev"
        );
        let ambiguous = q("object").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            ambiguous.contains("objects.data.fixture.tf.kraken.dev")
                && ambiguous.contains("objects.fixture.tf.kraken.dev"),
            "{ambiguous}"
        );
        let unknown = q("pods").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            unknown.contains("no Kraken kind is called \"pods\""),
            "{unknown}"
        );
        assert!(q("pets.random").is_err(), "a partial group is not a group");
        Ok(())
    }

    #[test]
    fn kraken_groups() {
        for g in ["kraken.dev", "core.kraken.dev", "random.tf.kraken.dev"] {
            assert!(is_kraken_group(g), "{g}");
        }
        for g in ["", "apps", "notkraken.dev", "kraken.dev.example.com"] {
            assert!(!is_kraken_group(g), "{g}");
        }
    }
}

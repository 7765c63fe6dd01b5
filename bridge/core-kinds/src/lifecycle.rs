//! Configuration outlives what needs it: the rules shared by a Provider, a ProviderConfig and
//! an AwsConfig deleted while objects still need them, and by the Secrets a configuration
//! reads credentials from (docs/operator.md, "Deleting configuration").
//!
//! - A ProviderConfig or AwsConfig carries [`CONFIG_FINALIZER`] (a Provider its own). Deleting
//!   one waits while it has users ([`on_delete`]): `Ready=False`, reason `InUse`, a message
//!   naming the first few and how many ([`users_message`]). The annotation
//!   `kraken.dev/force-delete=true` lets it go anyway.
//! - While a ProviderConfig or AwsConfig exists, each Secret it reads carries a finalizer that
//!   names that configuration ([`holder_finalizer`]). A Secret deleted meanwhile is only marked
//!   for deletion and stays readable, so the destroy of the configuration's last resource still
//!   finds its credentials; the finalizer goes when the configuration is gone or no longer
//!   names the Secret. One finalizer per holder, so two configurations sharing a Secret never
//!   release it for each other. The finalizer is the only thing Kraken writes on a Secret it
//!   does not own, always as a merge patch carrying the Secret's resourceVersion
//!   ([`kraken_kit::finalizer::ensure`]), and never on a Secret Kraken would refuse to read
//!   ([`super::secret_off_limits`]).
//!
//! [`decide_holds`] and [`on_delete`] are the pure decisions; [`hold_secrets`] does the reads
//! and writes.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ListParams};

use kraken_kit::finalizer;
use kraken_kit::metrics::Metrics;

/// The finalizer on a ProviderConfig and an AwsConfig: removed once no object needs them.
pub const CONFIG_FINALIZER: &str = "kraken.dev/config";
/// How many users a waiting deletion names; the message gives the count of the rest.
pub const USERS_SHOWN: usize = 5;
/// How soon a waiting deletion looks again: a user's deletion does not wake it.
pub const WAIT_AGAIN: std::time::Duration = std::time::Duration::from_secs(3);

/// The longest name part of a qualified finalizer name (after `kraken.dev/`).
const NAME_MAX: usize = 63;

/// The finalizer a configuration of `kind` (`providerconfig`, `awsconfig`) named `name` puts on
/// the Secrets it reads: `kraken.dev/<kind>-<name>`, or, when that is longer than a finalizer's
/// 63-character name allows, the name's start and a hash of the whole.
pub fn holder_finalizer(kind: &str, name: &str) -> String {
    let plain = format!("{kind}-{name}");
    if plain.len() <= NAME_MAX {
        return format!("kraken.dev/{plain}");
    }
    let hash = format!("{:016x}", kraken_kit::hash::fnv1a(plain.as_bytes()));
    let room = NAME_MAX.saturating_sub(kind.len() + hash.len() + 2);
    let start: String = name.chars().take(room).collect();
    let start = start.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("kraken.dev/{kind}-{start}-{hash}")
}

/// What a deletion does about the objects that still need the object being deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnDelete {
    /// Wait: `Ready=False`, reason `InUse`, with this message.
    Wait(String),
    /// Nothing needs it (or the deletion is forced): clean up and release the finalizer.
    Release,
}

/// The decision for an object being deleted that `users` (described as `Kind namespace/name`)
/// still need; `forced` by the annotation `kraken.dev/force-delete`.
pub fn on_delete(users: &[String], forced: bool) -> OnDelete {
    if users.is_empty() || forced {
        OnDelete::Release
    } else {
        OnDelete::Wait(users_message(users))
    }
}

/// Whether the annotation `kraken.dev/force-delete` (any value but `false`) asks a deletion not
/// to wait for users.
pub fn forced(meta: &kube::api::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(super::FORCE_DELETE_ANNOTATION))
        .is_some_and(|v| v != "false")
}

/// `deletion waits: used by N objects: A, B, C and 2 more; ...`, the users sorted so the
/// message (and the status holding it) does not change while they do not.
pub fn users_message(users: &[String]) -> String {
    let mut sorted: Vec<&str> = users.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let n = sorted.len();
    let mut named = sorted
        .iter()
        .take(USERS_SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if n > USERS_SHOWN {
        named.push_str(&format!(" and {} more", n - USERS_SHOWN));
    }
    let objects = if n == 1 { "object" } else { "objects" };
    format!(
        "deletion waits: used by {n} {objects}: {named}; it goes when they are deleted (or annotate {}=true)",
        super::FORCE_DELETE_ANNOTATION
    )
}

/// A Secret a configuration names, as seen now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretSeen {
    pub name: String,
    /// It carries the configuration's finalizer.
    pub held: bool,
    /// It exists, is not being deleted (no finalizer can be added then) and Kraken may read it.
    pub may_hold: bool,
}

/// Which Secrets get the configuration's finalizer and which lose it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holds {
    pub add: Vec<String>,
    pub release: Vec<String>,
}

/// The decision: every Secret in `named` that may be held and is not gets the finalizer;
/// every Secret in `carrying` (those found with it, when the namespace was looked through)
/// that is no longer named loses it. A configuration being deleted names none.
pub fn decide_holds(named: &[SecretSeen], carrying: Option<&BTreeSet<String>>) -> Holds {
    let add = named
        .iter()
        .filter(|s| s.may_hold && !s.held)
        .map(|s| s.name.clone())
        .collect();
    let wanted: BTreeSet<&str> = named.iter().map(|s| s.name.as_str()).collect();
    let release = carrying
        .into_iter()
        .flatten()
        .filter(|n| !wanted.contains(n.as_str()))
        .cloned()
        .collect();
    Holds { add, release }
}

/// Puts `finalizer` on the Secrets of namespace `ns` in `names` that lack it and, with
/// `sweep` (the configuration changed, or is being deleted with `names` empty), takes it off
/// every other Secret there. One GET per named Secret; the namespace's Secrets are listed
/// (metadata only) only when sweeping. Returns the named Secrets that carry it now.
pub async fn hold_secrets(
    client: &Client,
    metrics: &Metrics,
    ns: &str,
    finalizer: &str,
    names: &BTreeSet<String>,
    sweep: bool,
) -> Result<Vec<String>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut seen = Vec::with_capacity(names.len());
    let mut metas = std::collections::HashMap::new();
    for name in names {
        let Some(secret) = api.get_opt(name).await? else {
            continue;
        };
        seen.push(SecretSeen {
            name: name.clone(),
            held: finalizer::has(&secret.metadata, finalizer),
            may_hold: secret.metadata.deletion_timestamp.is_none()
                && super::secret_off_limits(&secret).is_none(),
        });
        metas.insert(name.clone(), secret.metadata);
    }
    let carrying = if sweep {
        let list = api.list_metadata(&ListParams::default()).await?;
        let found: BTreeSet<String> = list
            .items
            .into_iter()
            .filter(|s| finalizer::has(&s.metadata, finalizer))
            .filter_map(|s| {
                let name = s.metadata.name.clone()?;
                metas.entry(name.clone()).or_insert(s.metadata);
                Some(name)
            })
            .collect();
        Some(found)
    } else {
        None
    };
    let holds = decide_holds(&seen, carrying.as_ref());
    for (names, on) in [(&holds.add, true), (&holds.release, false)] {
        for name in names {
            let Some(meta) = metas.get(name) else {
                continue;
            };
            match finalizer::ensure(&api, meta, finalizer, on, metrics, "secrets").await {
                Ok(_) => tracing::debug!(secret = %name, finalizer, on, "credentials hold"),
                // Deleted meanwhile: nothing left to hold or release.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(seen
        .iter()
        .filter(|s| s.held || holds.add.contains(&s.name))
        .map(|s| s.name.clone())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(name: &str, held: bool, may_hold: bool) -> SecretSeen {
        SecretSeen {
            name: name.into(),
            held,
            may_hold,
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn holds() {
        let cases = [
            (
                "a new reference is held",
                vec![seen("a", false, true)],
                None,
                (vec!["a"], vec![]),
            ),
            (
                "held already: no write",
                vec![seen("a", true, true)],
                None,
                (vec![], vec![]),
            ),
            (
                "being deleted or off limits: never held",
                vec![seen("a", false, false)],
                None,
                (vec![], vec![]),
            ),
            (
                "no longer named: released when sweeping",
                vec![seen("b", true, true)],
                Some(set(&["a", "b"])),
                (vec![], vec!["a"]),
            ),
            (
                "deleted configuration: everything released",
                vec![],
                Some(set(&["a", "b"])),
                (vec![], vec!["a", "b"]),
            ),
            (
                "without a sweep nothing is released",
                vec![],
                None,
                (vec![], vec![]),
            ),
        ];
        for (name, named, carrying, (add, release)) in cases {
            let got = decide_holds(&named, carrying.as_ref());
            assert_eq!(got.add, add, "{name}: add");
            assert_eq!(got.release, release, "{name}: release");
        }
    }

    #[test]
    fn deletion_waits_for_users_unless_forced() {
        assert_eq!(on_delete(&[], false), OnDelete::Release);
        let users = vec!["Pet default/web".to_owned()];
        assert_eq!(on_delete(&users, true), OnDelete::Release);
        let OnDelete::Wait(message) = on_delete(&users, false) else {
            panic!("a used object waits");
        };
        assert!(
            message.contains("used by 1 object: Pet default/web"),
            "{message}"
        );
        assert!(
            message.contains("kraken.dev/force-delete=true"),
            "{message}"
        );
    }

    #[test]
    fn only_the_annotation_forces_a_deletion() {
        let meta = |value: Option<&str>| kube::api::ObjectMeta {
            annotations: value.map(|v| {
                [(
                    super::super::FORCE_DELETE_ANNOTATION.to_owned(),
                    v.to_owned(),
                )]
                .into()
            }),
            ..Default::default()
        };
        assert!(forced(&meta(Some("true"))));
        assert!(forced(&meta(Some(""))));
        assert!(!forced(&meta(Some("false"))));
        assert!(!forced(&meta(None)));
    }

    #[test]
    fn the_message_names_the_first_few_sorted_and_counts_the_rest() {
        let users: Vec<String> = (0..8).rev().map(|i| format!("Pet ns/p{i}")).collect();
        let message = users_message(&users);
        assert!(
            message.contains("used by 8 objects: Pet ns/p0, Pet ns/p1, Pet ns/p2, Pet ns/p3, Pet ns/p4 and 3 more"),
            "{message}"
        );
    }

    /// The reads and writes over the fake API server: a named Secret gets the finalizer once,
    /// a token Secret never, one no longer named loses it on a sweep, and a deleted
    /// configuration releases all, leaving other holders' finalizers alone.
    #[tokio::test]
    async fn secrets_are_held_and_released_through_the_api() -> anyhow::Result<()> {
        use kraken_kit::fake_api::FakeApi;
        use serde_json::json;
        let api = FakeApi::new();
        let secret = |name: &str, type_: &str, finalizers: &[&str]| {
            json!({"apiVersion": "v1", "kind": "Secret", "type": type_,
                   "metadata": {"name": name, "namespace": "team", "finalizers": finalizers},
                   "data": {"k": "dg=="}})
        };
        api.insert("secrets", secret("a", "Opaque", &[]));
        api.insert(
            "secrets",
            secret("b", "Opaque", &["kraken.dev/awsconfig-other"]),
        );
        api.insert(
            "secrets",
            secret("token", "kubernetes.io/service-account-token", &[]),
        );
        let metrics = Metrics::new();
        let mine = holder_finalizer("providerconfig", "pc");
        let finalizers = |name: &str| {
            api.get("secrets", "team", name)
                .map(|s| s["metadata"]["finalizers"].clone())
                .unwrap_or_default()
        };
        let client = api.client();
        let named = set(&["a", "b", "token", "absent"]);
        let held = hold_secrets(&client, &metrics, "team", &mine, &named, false).await?;
        assert_eq!(held, ["a", "b"]);
        assert_eq!(finalizers("a"), json!([mine]));
        assert_eq!(finalizers("b"), json!(["kraken.dev/awsconfig-other", mine]));
        assert_eq!(finalizers("token"), json!([]));
        // Again: nothing to write.
        let before = api.writes("/secrets");
        hold_secrets(&client, &metrics, "team", &mine, &named, false).await?;
        assert_eq!(
            api.writes("/secrets"),
            before,
            "a held Secret is not written again"
        );
        // The spec no longer names a: released on the sweep.
        let held = hold_secrets(&client, &metrics, "team", &mine, &set(&["b"]), true).await?;
        assert_eq!(held, ["b"]);
        assert_eq!(finalizers("a"), json!([]));
        // Deleted: everything of its own released, the other holder's finalizer kept.
        hold_secrets(&client, &metrics, "team", &mine, &set(&[]), true).await?;
        assert_eq!(finalizers("b"), json!(["kraken.dev/awsconfig-other"]));
        Ok(())
    }

    #[test]
    fn holder_finalizers_are_qualified_names() {
        assert_eq!(
            holder_finalizer("awsconfig", "default"),
            "kraken.dev/awsconfig-default"
        );
        let long = format!("{}.x", "a".repeat(250));
        let f = holder_finalizer("providerconfig", &long);
        let name = f.strip_prefix("kraken.dev/").unwrap_or_default();
        assert!(name.len() <= 63, "{f}: {} characters", name.len());
        assert!(name.starts_with("providerconfig-aaa"), "{f}");
        assert!(
            name.chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric())
        );
        // Two long names with the same start stay apart.
        let other = format!("{}.y", "a".repeat(250));
        assert_ne!(f, holder_finalizer("providerconfig", &other));
    }
}

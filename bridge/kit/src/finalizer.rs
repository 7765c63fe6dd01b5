//! The finalizer flow every controller shares: while an object lives, Kraken's finalizer is on
//! it; when it is being deleted, the controller cleans up what the object owns outside the API
//! server and then removes the finalizer, and only then does the API server delete it.
//!
//! [`phase`] is the pure decision, [`ensure`] the one write (a merge patch that carries the
//! object's `resourceVersion`, so a finalizer list changed meanwhile by someone else is never
//! overwritten: the API server answers 409 and the controller retries on the fresh object).
//! The managed-resource controller folds the finalizer into its create-fence patch to save a
//! write; it builds that patch with [`with`], the same list arithmetic.

use kube::api::{Api, ObjectMeta, Patch};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::metrics::Metrics;

/// What a reconcile must do about the finalizer `name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The object lives: reconcile it; `add` when the finalizer is not on it yet.
    Apply { add: bool },
    /// The object is being deleted and still carries the finalizer: clean up, then release.
    Cleanup,
    /// The object is being deleted and the finalizer is gone: nothing is left to do.
    Released,
}

/// Whether `meta` carries the finalizer `name`.
pub fn has(meta: &ObjectMeta, name: &str) -> bool {
    meta.finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == name))
}

/// The decision for an object with metadata `meta`.
pub fn phase(meta: &ObjectMeta, name: &str) -> Phase {
    match (meta.deletion_timestamp.is_some(), has(meta, name)) {
        (false, on) => Phase::Apply { add: !on },
        (true, true) => Phase::Cleanup,
        (true, false) => Phase::Released,
    }
}

/// `current` finalizers with `name` added (`on`) or removed, the others kept in order.
pub fn with(current: &[String], name: &str, on: bool) -> Vec<String> {
    let mut out: Vec<String> = current.iter().filter(|f| *f != name).cloned().collect();
    if on {
        out.push(name.to_owned());
    }
    out
}

/// Puts the finalizer `name` on (`on`) or takes it off the object `meta` describes, unless it
/// already is so; counts the write as `resource`/`patch`. Returns the patched object, or `None`
/// when nothing had to be written.
pub async fn ensure<K>(
    api: &Api<K>,
    meta: &ObjectMeta,
    name: &str,
    on: bool,
    metrics: &Metrics,
    resource: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    if has(meta, name) == on {
        return Ok(None);
    }
    let finalizers = with(meta.finalizers.as_deref().unwrap_or_default(), name, on);
    let body = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": meta.resource_version,
    }});
    let object_name = meta.name.as_deref().unwrap_or_default();
    metrics.api_write(resource, "patch");
    let patched = api
        .patch(
            object_name,
            &crate::status::patch_params(),
            &Patch::Merge(&body),
        )
        .await?;
    Ok(Some(patched))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(deleting: bool, finalizers: &[&str]) -> ObjectMeta {
        ObjectMeta {
            deletion_timestamp: deleting.then_some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            ),
            finalizers: Some(finalizers.iter().map(|s| (*s).to_owned()).collect()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn phases() {
        let cases = [
            ("new object", meta(false, &[]), Phase::Apply { add: true }),
            (
                "live, ours",
                meta(false, &["x", "k"]),
                Phase::Apply { add: false },
            ),
            ("deleting, ours", meta(true, &["k"]), Phase::Cleanup),
            (
                "deleting, released",
                meta(true, &["other"]),
                Phase::Released,
            ),
        ];
        for (name, m, want) in cases {
            assert_eq!(phase(&m, "k"), want, "{name}");
        }
    }

    #[test]
    fn keeps_other_finalizers_in_order() {
        let current = vec!["a".to_owned(), "k".to_owned(), "b".to_owned()];
        assert_eq!(with(&current, "k", false), ["a", "b"]);
        assert_eq!(with(&current, "k", true), ["a", "b", "k"]);
        assert_eq!(with(&[], "k", true), ["k"]);
    }
}

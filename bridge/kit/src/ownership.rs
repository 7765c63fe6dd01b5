//! Whose a derived object is. Kraken writes an object it derives (a state Secret, a
//! StateDeclaration, a request, an outputs or values Secret) only when that object is absent or
//! carries the deriving object's uid among its owners, and deletes one only with a uid
//! precondition, so a name that happens to match (another provider's kind of the same name, a
//! Secret a user made) is never overwritten or deleted: the write is refused as `NotOwned`.
//!
//! The checks ride on reads a reconcile makes anyway, on caches, or on preconditions the API
//! server checks (an owner reference marked `controller`: the server refuses a second one), never
//! on a read made only to check.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Preconditions};

/// Who owns an existing derived object, seen from the object `me` that derives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// `me` (by uid) is among its owners.
    Mine,
    /// Only an earlier object of `me`'s kind and name owns it (deleted, not yet collected):
    /// what it held is not `me`'s, and it may be replaced.
    Predecessor,
    /// Someone else's: who, for the message.
    Foreign(String),
}

/// Whose the object with `meta` is, for `me`.
pub fn claim(meta: &ObjectMeta, me: &OwnerReference) -> Claim {
    let refs = meta.owner_references.as_deref().unwrap_or_default();
    if refs.iter().any(|o| o.uid == me.uid) {
        return Claim::Mine;
    }
    let same = |o: &OwnerReference| {
        group(&o.api_version) == group(&me.api_version) && o.kind == me.kind && o.name == me.name
    };
    if !refs.is_empty() && refs.iter().all(same) {
        return Claim::Predecessor;
    }
    Claim::Foreign(match refs.first() {
        Some(o) => format!("{} {} ({})", o.kind, o.name, o.api_version),
        None => "no Kraken object (it was made by someone else)".to_owned(),
    })
}

/// The message of a refused write: `what` (`Secret x`) is `whose`.
pub fn refused(what: &str, whose: &str) -> String {
    format!(
        "{what} exists and belongs to {whose}; Kraken will not overwrite it (rename this object, \
         or delete {what} if it is stale)"
    )
}

/// A refused write as an API error (reason `NotOwned`), for code that speaks `kube::Error`.
pub fn refusal(what: &str, whose: &str) -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure(&refused(what, whose), NOT_OWNED)
            .with_code(422)
            .boxed(),
    )
}

/// Whether an API error is a refused write: [`refusal`], or the server refusing a second
/// controller owner (the object is another object's).
pub fn is_refusal(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(r) if r.code == 422
        && (r.reason == NOT_OWNED || r.message.contains("Controller set to true")))
}

/// The message of a refused write, for a condition.
pub fn refusal_message(e: &kube::Error, what: &str) -> String {
    match e {
        kube::Error::Api(r) if r.reason == NOT_OWNED => r.message.clone(),
        _ => refused(what, "another object"),
    }
}

const NOT_OWNED: &str = super::conditions::reason::NOT_OWNED;

/// Delete parameters that delete only the object with `uid` (never a newer one of that name).
pub fn delete_only(uid: Option<&str>) -> DeleteParams {
    DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// Deletes object `name` if it is `owner`'s, by uid (one made meanwhile under the name stays).
/// On the way out of an object only, where one read per derived object is fine.
pub async fn delete_owned<K>(
    api: &kube::Api<K>,
    name: &str,
    owner: &OwnerReference,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(found) = api.get_opt(name).await? else {
        return Ok(());
    };
    match (claim(found.meta(), owner), found.meta().uid.as_deref()) {
        (Claim::Mine, Some(uid)) => delete_by_uid(api, name, uid).await,
        _ => Ok(()),
    }
}

/// Deletes object `name` if it is still the one with `uid`: one already gone (404) or
/// replaced by another of the name (409, the precondition) is fine.
pub async fn delete_by_uid<K>(api: &kube::Api<K>, name: &str, uid: &str) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &delete_only(Some(uid))).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

fn group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(uid: &str, kind: &str, name: &str, api_version: &str) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    fn owned_by(refs: Vec<OwnerReference>) -> ObjectMeta {
        ObjectMeta {
            owner_references: Some(refs),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_its_own_or_its_predecessors_objects_are_its_to_write() {
        let me = owner("u1", "Uuid", "a", "random.tf.kraken.dev/v1alpha1");
        assert_eq!(claim(&owned_by(vec![me.clone()]), &me), Claim::Mine);
        let earlier = owner("u0", "Uuid", "a", "random.tf.kraken.dev/v1beta1");
        assert_eq!(claim(&owned_by(vec![earlier]), &me), Claim::Predecessor);
        // The same kind and name from another provider is someone else.
        let other = owner("u2", "Uuid", "a", "fixture.tf.kraken.dev/v1alpha1");
        assert!(matches!(
            claim(&owned_by(vec![other]), &me),
            Claim::Foreign(who) if who.contains("fixture.tf.kraken.dev")
        ));
        // A Secret a user made has no owner: someone else's too.
        assert!(matches!(
            claim(&ObjectMeta::default(), &me),
            Claim::Foreign(_)
        ));
    }

    #[test]
    fn deletes_name_the_uid() {
        let dp = delete_only(Some("u1"));
        assert_eq!(dp.preconditions.and_then(|p| p.uid).as_deref(), Some("u1"));
        assert!(delete_only(None).preconditions.is_none());
    }
}

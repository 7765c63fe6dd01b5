//! Sealed state: what Kraken believes exists can only be changed by Kraken.
//!
//! The state Secret lives in the tenant's namespace, where its users may write Secrets. Every
//! state Kraken writes carries a seal, the data key [`KEY_SEAL`]: an HMAC (under the key of
//! [`PlanKey`], in the operator's namespace, in a domain of its own) of the owning object's
//! UID and every other data key and value. A state whose seal is missing or does not match
//! (a planted `deposedState`, an edited `state` pointing at another object, the Secret moved
//! to another object) is refused as `StateTampered`: nothing is applied, destroyed or
//! written over until an administrator restores or removes it.
//!
//! States written before sealing are sealed once, when a sealing operator first starts
//! ([`seal_existing`]), and the key Secret records it ([`SEALED_ANNOTATION`]). A state seeded
//! from Terraform (`kraken convert --seed-state`) is unsealed by nature: it is taken only where
//! the admission policy [`SEEDING_POLICY`] admits such Secrets from users allowed to seed, and
//! sealed as it is adopted.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::plan_key::{PlanKey, SECRET_NAME};
use super::state::{SECRET_TYPE, StateError};

/// The data key holding the seal.
pub const KEY_SEAL: &str = "seal";
/// The HMAC domain of seals (apart from plan ids and digests under the same key).
const DOMAIN: &str = "kraken.dev/state-seal/v1";
/// On the key Secret: when the states written before sealing were sealed.
pub const SEALED_ANNOTATION: &str = "kraken.dev/states-sealed";
/// The admission policy that admits a seeded state Secret only from a user allowed to `seed`
/// `states.kraken.dev` in its namespace (in the chart).
pub const SEEDING_POLICY: &str = "kraken-state-seeding";

/// The seal of a state Secret's `data` for the object `uid`: every key but the seal, with its
/// value, in key order (empty values left out: an empty value and a missing key read alike).
pub fn seal(key: &PlanKey, uid: &str, data: &BTreeMap<String, ByteString>) -> String {
    let mut parts: Vec<&[u8]> = vec![uid.as_bytes()];
    for (k, v) in data {
        if k != KEY_SEAL && !v.0.is_empty() {
            parts.push(k.as_bytes());
            parts.push(&v.0);
        }
    }
    key.digest(DOMAIN, &parts)
}

/// Seals `secret` (about to be written) as the state of the object `uid`.
pub fn seal_secret(secret: &mut Secret, key: &PlanKey, uid: &str) {
    let data = secret.data.get_or_insert_with(BTreeMap::new);
    data.remove(KEY_SEAL);
    let seal = seal(key, uid, data);
    data.insert(KEY_SEAL.to_owned(), ByteString(seal.into_bytes()));
}

/// Whether `secret` is a state Kraken wrote for the object `uid`: `Tampered` when its seal is
/// missing or does not match.
pub fn verify(secret: &Secret, key: &PlanKey, uid: &str) -> Result<(), StateError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let empty = BTreeMap::new();
    let data = secret.data.as_ref().unwrap_or(&empty);
    let why = match data.get(KEY_SEAL) {
        None => "it has no seal",
        Some(found) if found.0 == seal(key, uid, data).as_bytes() => return Ok(()),
        Some(_) => "its seal does not match its contents and owner",
    };
    Err(StateError::Tampered {
        name,
        why: why.to_owned(),
    })
}

/// The UID of the object controlling `secret`, if any.
fn controller_uid(secret: &Secret) -> Option<&str> {
    secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// Seals, once, every state Secret written before sealing (all namespaces), then records it
/// on the key Secret in `namespace`. Returns how many it sealed; nothing when the key Secret
/// says this was done. A Secret that changes while it is sealed is read again.
pub async fn seal_existing(
    client: &kube::Client,
    namespace: &str,
    key: &PlanKey,
) -> anyhow::Result<usize> {
    let keys: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let key_secret = keys.get(SECRET_NAME).await?;
    let done = key_secret
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(SEALED_ANNOTATION));
    if done {
        return Ok(0);
    }
    let mut sealed = 0;
    let mut unread = Vec::new();
    match seal_listed(client, key, Api::all(client.clone())).await {
        Ok(n) => sealed = n,
        // Under the chart the operator may read Secrets only in the namespaces the RBAC
        // manager granted it, never all at once: each of those, then.
        Err(e) if is_forbidden(&e) => {
            let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
            for ns in namespaces.list_metadata(&ListParams::default()).await? {
                let ns = ns.metadata.name.unwrap_or_default();
                match seal_listed(client, key, Api::namespaced(client.clone(), &ns)).await {
                    Ok(n) => sealed += n,
                    Err(e) if is_forbidden(&e) => unread.push(ns),
                    Err(e) => return Err(e),
                }
            }
        }
        Err(e) => return Err(e),
    }
    if !unread.is_empty() {
        // Not recorded as done: the next start seals what these hold once they are granted.
        tracing::info!(sealed, unread = %unread.join(", "), "sealed the state Secrets written before sealing, except in namespaces not granted to the operator");
        return Ok(sealed);
    }
    let stamp = json!({"metadata": {"annotations": {
        SEALED_ANNOTATION: format!("{} ({sealed} sealed)", k8s_openapi::jiff::Timestamp::now()),
    }}});
    keys.patch(SECRET_NAME, &PatchParams::default(), &Patch::Merge(&stamp))
        .await?;
    tracing::info!(sealed, "sealed the state Secrets written before sealing");
    Ok(sealed)
}

/// Seals every state Secret `api` lists (one namespace, or all); how many it sealed.
async fn seal_listed(
    client: &kube::Client,
    key: &PlanKey,
    api: Api<Secret>,
) -> anyhow::Result<usize> {
    let mut params = ListParams::default()
        .fields(&format!("type={SECRET_TYPE}"))
        .limit(500);
    let mut sealed = 0;
    loop {
        let page = api.list(&params).await?;
        for secret in &page.items {
            if seal_one(client, key, secret).await? {
                sealed += 1;
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(sealed),
        }
    }
}

fn is_forbidden(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 403)
}

/// Seals one state Secret found by [`seal_existing`] (unless sealed already, or seeded: no
/// object owns it yet), conditional on its resourceVersion; `true` when it wrote.
async fn seal_one(client: &kube::Client, key: &PlanKey, found: &Secret) -> anyhow::Result<bool> {
    let (Some(ns), Some(name)) = (&found.metadata.namespace, &found.metadata.name) else {
        return Ok(false);
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut secret = found.clone();
    for _ in 0..5 {
        let has_seal = secret
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key(KEY_SEAL));
        let Some(uid) = controller_uid(&secret).map(str::to_owned) else {
            return Ok(false);
        };
        if has_seal {
            return Ok(false);
        }
        let data = secret.data.clone().unwrap_or_default();
        let value = ByteString(seal(key, &uid, &data).into_bytes());
        // The resourceVersion makes the patch conditional: a Secret changed since it was read
        // is not sealed as it was.
        let patch = json!({
            "metadata": {"resourceVersion": secret.metadata.resource_version},
            "data": {KEY_SEAL: value},
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
            // Changed meanwhile: read it again.
            Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(name).await? {
                Some(again) => secret = again,
                None => return Ok(false),
            },
            Err(e) => return Err(e.into()),
        }
    }
    anyhow::bail!("the state Secret {ns}/{name} kept changing while it was sealed")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &[u8])]) -> BTreeMap<String, ByteString> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
            .collect()
    }

    fn sealed(uid: &str, pairs: &[(&str, &[u8])]) -> Secret {
        let key = PlanKey::from_bytes([9; 32]);
        let mut s = Secret {
            data: Some(data(pairs)),
            ..Secret::default()
        };
        seal_secret(&mut s, &key, uid);
        s
    }

    #[test]
    fn a_sealed_state_verifies_for_its_object_only() {
        let key = PlanKey::from_bytes([9; 32]);
        let s = sealed("u1", &[("state", b"{\"id\":\"a\"}"), ("private", b"")]);
        assert_eq!(verify(&s, &key, "u1"), Ok(()));
        assert!(verify(&s, &key, "u2").is_err(), "moved to another object");
        let other = PlanKey::from_bytes([8; 32]);
        assert!(verify(&s, &other, "u1").is_err(), "another key");
        // Sealing again gives the same seal (the old one is not part of it).
        let mut again = s.clone();
        seal_secret(&mut again, &key, "u1");
        assert_eq!(again, s);
    }

    #[test]
    fn every_edit_of_the_data_breaks_the_seal() {
        let key = PlanKey::from_bytes([9; 32]);
        let base = sealed("u1", &[("state", b"{\"id\":\"a\"}"), ("deposedState", b"")]);
        let edits: [(&str, &[u8]); 3] = [
            ("state", b"{\"id\":\"b\"}"),
            ("deposedState", b"{\"id\":\"victim\"}"),
            ("extra", b"x"),
        ];
        for (k, v) in edits {
            let mut s = base.clone();
            s.data
                .get_or_insert_with(BTreeMap::new)
                .insert(k.to_owned(), ByteString(v.to_vec()));
            let got = verify(&s, &key, "u1");
            assert!(
                matches!(&got, Err(StateError::Tampered { why, .. }) if why.contains("does not match")),
                "{k}: {got:?}"
            );
        }
        let mut unsealed = base.clone();
        unsealed.data.as_mut().map(|d| d.remove(KEY_SEAL));
        assert!(matches!(
            verify(&unsealed, &key, "u1"),
            Err(StateError::Tampered { why, .. }) if why == "it has no seal"
        ));
    }

    #[test]
    fn an_empty_value_and_a_missing_key_seal_alike() {
        let key = PlanKey::from_bytes([9; 32]);
        let with_empty = data(&[("state", b"x"), ("private", b"")]);
        let without = data(&[("state", b"x")]);
        assert_eq!(seal(&key, "u", &with_empty), seal(&key, "u", &without));
    }
}

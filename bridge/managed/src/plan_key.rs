//! The key of plan digests: what makes `status.plan.id` and the digests of its basis keyed.
//!
//! A plan's basis is computed from values that include sensitive ones (Secret values fed
//! through `valuesFrom`, sensitive arguments and state, the ProviderConfig's Secret-backed
//! configuration). An unkeyed digest of them in `status` would let anyone who may read the
//! object, but not its Secrets, test guesses of a weak secret offline. So every digest that
//! reaches `status.plan` is an HMAC-SHA256 under a 32-byte random key that tenants cannot
//! read: the Secret [`SECRET_NAME`] in the operator's own namespace (the Lease's). The
//! operator creates it at start-up when it is absent and reads it otherwise, so ids are
//! stable across restarts and replicas (an approval survives both). The key is never logged
//! (`Debug` redacts it), and the Secret carries `app.kubernetes.io/managed-by: kraken`, so no
//! tenant reference (`valuesFrom`, `configFrom`) may read it (`core_kinds::secret_off_limits`).
//!
//! Deleting the Secret rotates the key: every pending plan gets a new id on its next pass,
//! and approvals given for the old ids are stale (nothing is applied without a fresh one).

use std::collections::BTreeMap;
use std::sync::Arc;

use hmac::{Hmac, Mac as _};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use sha2::Sha256;

/// The Secret holding the key, in the operator's namespace.
pub const SECRET_NAME: &str = "kraken-plan-key";
/// The Secret's data key.
pub const DATA_KEY: &str = "key";
/// Bytes of key.
pub const KEY_LEN: usize = 32;
/// Bytes of MAC shown (hex doubles it): 128 bits.
const SHOWN: usize = 16;

/// The secret key plan digests are computed under. Cheap to clone; `Debug` never shows it.
#[derive(Clone)]
pub struct PlanKey(Arc<[u8; KEY_LEN]>);

impl std::fmt::Debug for PlanKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlanKey(redacted)")
    }
}

impl PlanKey {
    pub fn from_bytes(key: [u8; KEY_LEN]) -> Self {
        Self(Arc::new(key))
    }

    /// A fresh key from the system's secure random source (aws-lc through rustls).
    pub fn generate() -> anyhow::Result<Self> {
        let mut key = [0u8; KEY_LEN];
        rustls::crypto::aws_lc_rs::default_provider()
            .secure_random
            .fill(&mut key)
            .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
        Ok(Self::from_bytes(key))
    }

    /// HMAC-SHA256 under this key of `domain` and `parts`, each prefixed with its length (so
    /// neither domains nor parts can run into each other), as 32 hex digits (128 bits).
    pub fn digest(&self, domain: &str, parts: &[&[u8]]) -> String {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.0[..]) else {
            // HMAC takes a key of any length; unreachable.
            unreachable!("HMAC accepts any key length")
        };
        for part in std::iter::once(domain.as_bytes()).chain(parts.iter().copied()) {
            let len = u64::try_from(part.len()).unwrap_or(u64::MAX);
            mac.update(&len.to_le_bytes());
            mac.update(part);
        }
        let out = mac.finalize().into_bytes();
        out[..SHOWN].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The key in the Secret [`SECRET_NAME`] of `namespace`, which is created (with a fresh
    /// key) when absent. When another replica creates it first (409), its key is read, so all
    /// replicas share one key.
    pub async fn load_or_create(client: &kube::Client, namespace: &str) -> anyhow::Result<Self> {
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        if let Some(existing) = api.get_opt(SECRET_NAME).await.map_err(|e| {
            anyhow::anyhow!("reading the plan key Secret {namespace}/{SECRET_NAME}: {e}")
        })? {
            return Self::from_secret(&existing, namespace);
        }
        let key = Self::generate()?;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(SECRET_NAME.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([(
                    kraken_core_kinds::MANAGED_BY_LABEL.to_owned(),
                    "kraken".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_owned()),
            immutable: Some(true),
            data: Some(BTreeMap::from([(
                DATA_KEY.to_owned(),
                ByteString(key.0.to_vec()),
            )])),
            ..Secret::default()
        };
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                tracing::info!(namespace, secret = SECRET_NAME, "created the plan key");
                Ok(key)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = api.get(SECRET_NAME).await.map_err(|e| {
                    anyhow::anyhow!("reading the plan key Secret {namespace}/{SECRET_NAME}: {e}")
                })?;
                Self::from_secret(&existing, namespace)
            }
            Err(e) => Err(anyhow::anyhow!(
                "creating the plan key Secret {namespace}/{SECRET_NAME}: {e}"
            )),
        }
    }

    fn from_secret(secret: &Secret, namespace: &str) -> anyhow::Result<Self> {
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(DATA_KEY))
            .map(|b| b.0.as_slice())
            .unwrap_or_default();
        let key: [u8; KEY_LEN] = bytes.try_into().map_err(|_| {
            anyhow::anyhow!(
                "the plan key Secret {namespace}/{SECRET_NAME} has no {KEY_LEN}-byte `{DATA_KEY}`; \
                 delete it and the operator makes a new key (pending plans get new ids)"
            )
        })?;
        Ok(Self::from_bytes(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kraken_kit::fake_api::FakeApi;

    #[test]
    fn digests_are_keyed_and_keep_parts_apart() {
        let (a, b) = (PlanKey::from_bytes([1; 32]), PlanKey::from_bytes([2; 32]));
        assert_eq!(a.digest("d", &[b"x"]), a.digest("d", &[b"x"]));
        assert_ne!(a.digest("d", &[b"x"]), b.digest("d", &[b"x"]));
        assert_ne!(a.digest("d", &[b"ab", b"c"]), a.digest("d", &[b"a", b"bc"]));
        assert_ne!(a.digest("d", &[b"x"]), a.digest("e", &[b"x"]));
        assert_eq!(a.digest("d", &[b"x"]).len(), 2 * SHOWN);
        assert_eq!(format!("{a:?}"), "PlanKey(redacted)");
        assert_ne!(PlanKey::generate().ok().map(|k| *k.0), Some([0; 32]));
    }

    #[tokio::test]
    async fn the_key_secret_is_created_once_and_reused() -> anyhow::Result<()> {
        let api = FakeApi::new();
        let client = api.client();
        let first = PlanKey::load_or_create(&client, "kraken-system").await?;
        let stored = api
            .get("secrets", "kraken-system", SECRET_NAME)
            .ok_or_else(|| anyhow::anyhow!("no Secret"))?;
        assert_eq!(stored["immutable"], true);
        // Labelled as Kraken's own: no tenant reference (valuesFrom, configFrom) may read it.
        let secret: Secret = serde_json::from_value(stored)?;
        assert!(kraken_core_kinds::secret_off_limits(&secret).is_some());
        let again = PlanKey::load_or_create(&client, "kraken-system").await?;
        assert_eq!(first.0, again.0);
        assert_eq!(api.writes(SECRET_NAME), 0, "{:?}", api.requests());
        let creates = api
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.contains("/secrets"))
            .count();
        assert_eq!(creates, 1);
        // Another replica's create won the race: its key is the one used.
        let api = FakeApi::new();
        let client = api.client();
        let theirs = PlanKey::generate()?;
        api.fail_next("GET", SECRET_NAME, 404);
        api.insert(
            "secrets",
            serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": SECRET_NAME, "namespace": "ns"},
                "data": {DATA_KEY: ByteString(theirs.0.to_vec())}}),
        );
        let mine = PlanKey::load_or_create(&client, "ns").await?;
        assert_eq!(mine.0, theirs.0);
        let lost = api
            .requests()
            .iter()
            .any(|r| r.method == "POST" && r.status == 409);
        assert!(lost, "{:?}", api.requests());
        Ok(())
    }

    #[tokio::test]
    async fn a_malformed_key_secret_is_an_error_not_replaced() -> anyhow::Result<()> {
        let api = FakeApi::new();
        api.insert(
            "secrets",
            serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": SECRET_NAME, "namespace": "ns"},
                "data": {DATA_KEY: "c2hvcnQ="}}),
        );
        let err = PlanKey::load_or_create(&api.client(), "ns")
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("32-byte"), "{err}");
        Ok(())
    }
}

//! Package authentication for registry downloads, in the registry protocol's order of trust:
//! the detached OpenPGP signature over `SHA256SUMS` must verify against one of the keys the
//! registry published for the provider; `SHA256SUMS` must list the package file with the hash
//! the registry announced; the downloaded zip must have that hash (checked by the installer).

use pgp::composed::{Deserializable as _, DetachedSignature, SignedPublicKey};
use pgp::types::KeyDetails as _;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::hash::{hex, parse_sha256_hex};

/// A public key from the registry's `signing_keys.gpg_public_keys`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SigningKey {
    #[serde(default)]
    pub key_id: String,
    pub ascii_armor: String,
    #[serde(default)]
    pub trust_signature: String,
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub source_url: Option<String>,
}

/// Check the detached `signature` over `document` against `keys`; returns the key id (hex) of
/// the key that made it. Subkeys count only when bound to their primary key.
pub fn verify_signature(document: &[u8], signature: &[u8], keys: &[SigningKey]) -> Result<String> {
    let sig = parse_signature(signature)?;
    let issuers: Vec<String> = sig
        .signature
        .issuer_key_id()
        .iter()
        .map(|id| hex(id.as_ref()))
        .collect();
    let mut matched_issuer = false;
    for key in keys {
        let Ok((public, _)) = SignedPublicKey::from_string(&key.ascii_armor) else {
            tracing::warn!(key_id = %key.key_id, "ignoring a published signing key that does not parse");
            continue;
        };
        let primary_id = hex(public.primary_key.legacy_key_id().as_ref());
        let mut try_key = |id: String, verify: &dyn Fn() -> bool| {
            let named = issuers.is_empty() || issuers.contains(&id);
            matched_issuer |= named;
            named && verify()
        };
        if try_key(primary_id.clone(), &|| {
            sig.verify(&public.primary_key, document).is_ok()
        }) {
            return Ok(primary_id);
        }
        for sub in &public.public_subkeys {
            if sub.verify_bindings(&public.primary_key).is_err() {
                continue;
            }
            let id = hex(sub.key.legacy_key_id().as_ref());
            if try_key(id, &|| sig.verify(&sub.key, document).is_ok()) {
                return Ok(primary_id);
            }
        }
    }
    if matched_issuer {
        Err(Error::SignatureInvalid {
            reason: "the signature does not verify against the signing key".into(),
        })
    } else {
        Err(Error::SignatureUnknownKey {
            key_id: issuers.first().cloned().unwrap_or_else(|| "(none)".into()),
        })
    }
}

/// HashiCorp publishes binary signatures; accept ASCII-armored ones as well.
fn parse_signature(signature: &[u8]) -> Result<DetachedSignature> {
    let invalid = |what: &str| Error::SignatureInvalid {
        reason: format!("the signature is not a valid OpenPGP signature ({what})"),
    };
    if signature.starts_with(b"-----BEGIN") {
        let text = std::str::from_utf8(signature).map_err(|_| invalid("not text"))?;
        DetachedSignature::from_string(text)
            .map(|(s, _)| s)
            .map_err(|e| invalid(&e.to_string()))
    } else {
        DetachedSignature::from_bytes(signature).map_err(|e| invalid(&e.to_string()))
    }
}

/// The hash `SHA256SUMS` lists for `filename`, checked against the one the registry announced.
pub fn check_sums_list(document: &[u8], filename: &str, announced: &[u8; 32]) -> Result<()> {
    let listed = sums_entries(document)
        .find(|(_, name)| *name == filename)
        .map(|(hash, _)| hash)
        .ok_or_else(|| Error::ChecksumMissing {
            filename: filename.to_string(),
        })?;
    let listed = parse_sha256_hex(listed).ok_or_else(|| Error::ChecksumMismatch {
        what: format!("{filename} in SHA256SUMS"),
        expected: hex(announced),
        actual: listed.to_string(),
    })?;
    if &listed != announced {
        return Err(Error::ChecksumMismatch {
            what: format!("{filename} in SHA256SUMS"),
            expected: hex(announced),
            actual: hex(&listed),
        });
    }
    Ok(())
}

/// `(hex hash, file name)` pairs of a `sha256sum`-style document.
pub fn sums_entries(document: &[u8]) -> impl Iterator<Item = (&str, &str)> {
    document.split(|b| *b == b'\n').filter_map(|line| {
        let line = std::str::from_utf8(line).ok()?;
        let mut fields = line.split_whitespace();
        let hash = fields.next()?;
        // `sha256sum -b` marks binary mode with a leading '*'.
        let name = fields.next()?.trim_start_matches('*');
        Some((hash, name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_list_checks() {
        let a = [1u8; 32];
        let b = [2u8; 32];
        let doc = format!(
            "{}  p_1.0.0_linux_amd64.zip\n{} *p_1.0.0_darwin_arm64.zip\n",
            hex(&a),
            hex(&b)
        );
        assert!(check_sums_list(doc.as_bytes(), "p_1.0.0_linux_amd64.zip", &a).is_ok());
        assert!(check_sums_list(doc.as_bytes(), "p_1.0.0_darwin_arm64.zip", &b).is_ok());
        assert!(matches!(
            check_sums_list(doc.as_bytes(), "p_1.0.0_linux_amd64.zip", &b),
            Err(Error::ChecksumMismatch { .. })
        ));
        assert!(matches!(
            check_sums_list(doc.as_bytes(), "p_1.0.0_windows_amd64.zip", &a),
            Err(Error::ChecksumMissing { .. })
        ));
    }

    /// Made by GnuPG 2 (RSA primary key for certification, RSA subkey for signing, as HashiCorp's
    /// release key is laid out): `gpg --detach-sign SHA256SUMS`.
    fn gnupg_fixture() -> (Vec<SigningKey>, &'static [u8], &'static [u8]) {
        let key = SigningKey {
            key_id: "EC0287DDFF32D4AD".into(),
            ascii_armor: include_str!("testdata/key.asc").into(),
            ..SigningKey::default()
        };
        (
            vec![key],
            include_bytes!("testdata/SHA256SUMS"),
            include_bytes!("testdata/SHA256SUMS.sig"),
        )
    }

    #[test]
    fn gnupg_signature_by_a_subkey_verifies() {
        let (keys, doc, sig) = gnupg_fixture();
        let signer = verify_signature(doc, sig, &keys).expect("valid signature");
        assert_eq!(signer, "ec0287ddff32d4ad");
    }

    #[test]
    fn tampered_document_or_unknown_key_fails() {
        let (keys, doc, sig) = gnupg_fixture();
        let mut tampered = doc.to_vec();
        tampered[0] ^= 1;
        assert!(matches!(
            verify_signature(&tampered, sig, &keys),
            Err(Error::SignatureInvalid { .. })
        ));
        assert!(matches!(
            verify_signature(doc, sig, &[]),
            Err(Error::SignatureUnknownKey { key_id }) if key_id == "1a3f11509d5a882b"
        ));
    }

    #[test]
    fn garbage_signatures_are_invalid() {
        for sig in [
            &b"not a signature"[..],
            b"-----BEGIN PGP SIGNATURE-----\n\nxx\n",
            b"",
        ] {
            assert!(matches!(
                verify_signature(b"doc", sig, &[]),
                Err(Error::SignatureInvalid { .. })
            ));
        }
    }
}

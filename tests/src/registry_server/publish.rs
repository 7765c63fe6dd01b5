//! Lays out real provider packages on a `RegistryServer`: the registry protocol (discovery,
//! versions, download metadata, zip, SHA256SUMS signed with an OpenPGP key made here) and the
//! network mirror protocol (`index.json`, `VERSION.json` with `h1:` hashes).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use base64::Engine as _;
use pgp::composed::{
    ArmorOptions, DetachedSignature, KeyType, SecretKeyParamsBuilder, SignedPublicKey,
    SignedSecretKey,
};
use pgp::crypto::hash::HashAlgorithm;
use pgp::ser::Serialize as _;
use pgp::types::{KeyDetails as _, Password};
use serde_json::json;
use sha2::{Digest as _, Sha256};

use super::{RegistryServer, Reply};

/// An OpenPGP signing key generated for a test.
pub struct SigningIdentity {
    secret: SignedSecretKey,
    /// The ASCII-armored public key, as a registry publishes it.
    pub public_armor: String,
    /// The 16-hex-digit key id.
    pub key_id: String,
}

impl SigningIdentity {
    pub fn generate(name: &str) -> anyhow::Result<Self> {
        let mut rng = pgp_rand::thread_rng();
        let params = SecretKeyParamsBuilder::default()
            .key_type(KeyType::Ed25519Legacy)
            .can_certify(true)
            .can_sign(true)
            .primary_user_id(format!("{name} <{name}@kraken.invalid>"))
            .build()?;
        let secret = params.generate(&mut rng)?;
        let public = SignedPublicKey::from(secret.clone());
        let public_armor = public.to_armored_string(ArmorOptions::default())?;
        let key_id = kraken_registry_fetch::hash::hex(public.primary_key.legacy_key_id().as_ref())
            .to_uppercase();
        Ok(Self {
            secret,
            public_armor,
            key_id,
        })
    }

    /// A binary detached signature over `data`, like HashiCorp's `SHA256SUMS.sig`.
    pub fn sign(&self, data: &[u8]) -> anyhow::Result<Vec<u8>> {
        let mut rng = pgp_rand::thread_rng();
        let sig = DetachedSignature::sign_binary_data(
            &mut rng,
            &self.secret.primary_key,
            &Password::empty(),
            HashAlgorithm::Sha256,
            data,
        )?;
        Ok(sig.to_bytes()?)
    }
}

/// Zip a provider binary the way release tooling does: one executable entry
/// `terraform-provider-TYPE_vVERSION` with mode 0755.
pub fn package_zip(binary: &Path, type_name: &str, version: &str) -> anyhow::Result<Vec<u8>> {
    let data = std::fs::read(binary)?;
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .compression_level(Some(1))
        .unix_permissions(0o755);
    zip.start_file(format!("terraform-provider-{type_name}_v{version}"), opts)?;
    zip.write_all(&data)?;
    zip.finish()?;
    Ok(out.into_inner())
}

/// What to publish.
pub struct Publish<'a> {
    /// The provider's hostname: the network mirror lays packages out under it.
    pub hostname: &'a str,
    pub namespace: &'a str,
    pub type_name: &'a str,
    pub version: &'a str,
    pub platform: &'a str,
    pub zip: Vec<u8>,
    /// The h1: hash of the unpacked package (what the network mirror announces).
    pub h1: String,
    pub protocols: Vec<&'a str>,
    pub signer: &'a SigningIdentity,
    /// Keys the download metadata lists; usually just the signer's.
    pub published_keys: Vec<String>,
    /// Other platforms listed in SHA256SUMS (with made-up zips), as in a real release.
    pub other_platforms: Vec<&'a str>,
}

/// Paths of what `publish` served, so a test can replace one of them.
#[derive(Debug, Clone)]
pub struct Published {
    pub filename: String,
    pub download_path: String,
    pub zip_path: String,
    pub sums_path: String,
    pub sig_path: String,
    pub versions_path: String,
    pub mirror_index_path: String,
    pub mirror_version_path: String,
    pub sha256: [u8; 32],
    pub zh: String,
    /// zh: hashes of every platform in SHA256SUMS.
    pub all_zh: Vec<String>,
}

/// Versions already published, per `namespace/type`, for the versions endpoint and mirror index.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    versions: BTreeMap<String, Vec<serde_json::Value>>,
    mirror: BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
}

impl RegistryServer {
    /// Serve a package through both the registry and the mirror protocol (mirror base: `/mirror/`).
    pub fn publish(&self, p: &Publish<'_>) -> anyhow::Result<Published> {
        self.set(
            "/.well-known/terraform.json",
            Reply::json(&json!({"providers.v1": "/v1/providers/", "modules.v1": "/v1/modules/"})),
        );
        let (ns, ty, ver) = (p.namespace, p.type_name, p.version);
        let (os, arch) = p.platform.split_once('_').unwrap_or((p.platform, ""));
        let filename = format!("terraform-provider-{ty}_{ver}_{}.zip", p.platform);
        let sha256: [u8; 32] = Sha256::digest(&p.zip).into();
        let mut sums = format!(
            "{}  {filename}\n",
            kraken_registry_fetch::hash::hex(&sha256)
        );
        let mut all_zh = vec![format!("zh:{}", kraken_registry_fetch::hash::hex(&sha256))];
        for other in &p.other_platforms {
            let fake: [u8; 32] = Sha256::digest(format!("{ty}-{ver}-{other}")).into();
            let hex = kraken_registry_fetch::hash::hex(&fake);
            sums.push_str(&format!(
                "{hex}  terraform-provider-{ty}_{ver}_{other}.zip\n"
            ));
            all_zh.push(format!("zh:{hex}"));
        }
        all_zh.sort();
        let files = format!("/files/{ns}/{ty}/{ver}");
        let published = Published {
            filename: filename.clone(),
            download_path: format!("/v1/providers/{ns}/{ty}/{ver}/download/{os}/{arch}"),
            zip_path: format!("{files}/{filename}"),
            sums_path: format!("{files}/terraform-provider-{ty}_{ver}_SHA256SUMS"),
            sig_path: format!("{files}/terraform-provider-{ty}_{ver}_SHA256SUMS.sig"),
            versions_path: format!("/v1/providers/{ns}/{ty}/versions"),
            mirror_index_path: String::new(),
            mirror_version_path: String::new(),
            sha256,
            zh: format!("zh:{}", kraken_registry_fetch::hash::hex(&sha256)),
            all_zh,
        };
        let keys: Vec<_> = p.published_keys.iter().map(|armor| json!({"key_id": p.signer.key_id, "ascii_armor": armor, "trust_signature": "", "source": "Kraken tests", "source_url": null})).collect();
        // Relative links on purpose: clients must resolve them against the response URL.
        let download = json!({
            "protocols": p.protocols, "os": os, "arch": arch, "filename": filename,
            "download_url": format!("../../../../../../..{}", published.zip_path),
            "shasums_url": published.sums_path, "shasums_signature_url": published.sig_path,
            "shasum": kraken_registry_fetch::hash::hex(&sha256),
            "signing_keys": {"gpg_public_keys": keys},
        });
        self.set(&published.download_path, Reply::json(&download));
        self.set(&published.zip_path, Reply::bytes(p.zip.clone()));
        self.set(
            &published.sig_path,
            Reply::bytes(p.signer.sign(sums.as_bytes())?),
        );
        self.set(&published.sums_path, Reply::bytes(sums));
        self.publish_versions(p, &published)?;
        let mirror = self.publish_mirror(p, &filename)?;
        Ok(Published {
            mirror_index_path: mirror.0,
            mirror_version_path: mirror.1,
            ..published
        })
    }

    fn publish_versions(&self, p: &Publish<'_>, published: &Published) -> anyhow::Result<()> {
        let (os, arch) = p.platform.split_once('_').unwrap_or((p.platform, ""));
        let body = {
            let mut catalog = self
                .published
                .lock()
                .map_err(|_| anyhow::anyhow!("catalog lock poisoned"))?;
            let list = catalog
                .versions
                .entry(format!("{}/{}", p.namespace, p.type_name))
                .or_default();
            list.retain(|v| v["version"] != p.version);
            list.push(json!({"version": p.version, "protocols": p.protocols, "platforms": [{"os": os, "arch": arch}]}));
            json!({"versions": list, "warnings": null})
        };
        self.set(&published.versions_path, Reply::json(&body));
        Ok(())
    }

    /// Network mirror layout under `/mirror/HOST/NS/TYPE/`.
    fn publish_mirror(&self, p: &Publish<'_>, filename: &str) -> anyhow::Result<(String, String)> {
        let dir = format!("/mirror/{}/{}/{}", p.hostname, p.namespace, p.type_name);
        let index = {
            let mut catalog = self
                .published
                .lock()
                .map_err(|_| anyhow::anyhow!("catalog lock poisoned"))?;
            let versions = catalog.mirror.entry(dir.clone()).or_default();
            versions.insert(p.version.to_string(), json!({}));
            json!({ "versions": versions })
        };
        self.set(&format!("{dir}/index.json"), Reply::json(&index));
        let version = json!({"archives": {p.platform: {"url": filename, "hashes": [p.h1]}}});
        self.set(&format!("{dir}/{}.json", p.version), Reply::json(&version));
        self.set(&format!("{dir}/{filename}"), Reply::bytes(p.zip.clone()));
        Ok((
            format!("{dir}/index.json"),
            format!("{dir}/{}.json", p.version),
        ))
    }
}

/// The h1: hash of a package holding just `binary` under its release name.
pub fn single_file_h1(binary: &Path, type_name: &str, version: &str) -> anyhow::Result<String> {
    let digest: [u8; 32] = Sha256::digest(std::fs::read(binary)?).into();
    let line = format!(
        "{}  terraform-provider-{type_name}_v{version}\n",
        kraken_registry_fetch::hash::hex(&digest)
    );
    Ok(format!(
        "h1:{}",
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(line.as_bytes()))
    ))
}

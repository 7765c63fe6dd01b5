//! End-to-end tests of the `Provider` kind (docs/operator.md, "Providers at runtime"): a real
//! kube-apiserver, `kraken operator` as a process, real provider packages from a filesystem
//! mirror and from the loopback HTTPS registry (signed, checksummed).
//!
//! Each test has its own control plane with only the core CRDs: every provider kind it sees was
//! installed by the operator at runtime.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::bed::wait_condition;
use kraken_tests::operator::{Operator, OperatorOptions, condition, with_log_tails};
use kraken_tests::registry_server::{
    Publish, RegistryServer, SigningIdentity, package_zip, single_file_h1,
};
use kraken_tests::{ControlPlane, TestEnv, kraken_bin, repo_root, scratch_dir, wait_for};
use serde_json::{Value, json};

const INSTALL_TIMEOUT: Duration = Duration::from_secs(90);
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(60);

/// A control plane with the core CRDs, a namespace, a fresh plugin cache and an operator that
/// installs Providers into it.
struct Bed {
    op: Operator,
    cp: ControlPlane,
    ns: String,
    cache: tempfile::TempDir,
}

impl Bed {
    fn start(name: &str, mut extra_args: Vec<String>) -> anyhow::Result<Self> {
        let cp = ControlPlane::start(&format!("prov-{name}"))?;
        cp.install_crds(
            &repo_root().join("generated-crds/core"),
            "kraken.dev/core=true",
        )?;
        let ns = format!("prov-{name}");
        cp.create_namespace(&ns)?;
        let cache = scratch_dir("kraken-plugin-cache-")?;
        let mut args = vec![
            "--plugin-cache".to_owned(),
            cache.path().display().to_string(),
        ];
        args.append(&mut extra_args);
        let mut op = Operator::start(
            &cp,
            OperatorOptions {
                args,
                rust_log: "info".into(),
                leader_elect: false,
                ..OperatorOptions::default()
            },
        )?;
        op.wait_ready(Duration::from_secs(60))?;
        Ok(Self { op, cp, ns, cache })
    }

    fn provider(&self, name: &str) -> anyhow::Result<Value> {
        self.cp.get_json("", "providers.core.kraken.dev", name)
    }

    /// Wait until the Provider's Ready condition has `status`/`reason` at its generation.
    fn wait_provider(&self, name: &str, status: &str, reason: &str) -> anyhow::Result<Value> {
        wait_for(
            INSTALL_TIMEOUT,
            &format!("Provider {name} Ready={status}/{reason}"),
            || {
                let p = self.provider(name)?;
                let current = p["status"]["observedGeneration"] == p["metadata"]["generation"];
                match condition(&p, "Ready") {
                    Some((s, r, _)) if current && s == status && r == reason => Ok(Some(p)),
                    other => bail!("Ready {other:?}, status {}", p["status"]),
                }
            },
        )
    }

    /// `kubectl patch` of the Provider `name` with a JSON merge patch.
    fn patch_provider(&self, name: &str, merge: &str) -> anyhow::Result<String> {
        let args = [
            "patch",
            "providers.core.kraken.dev",
            name,
            "--type=merge",
            "-p",
            merge,
        ];
        self.cp.kubectl(&args)
    }

    fn apply(&self, yaml: &str) -> anyhow::Result<String> {
        self.cp.apply_yaml(&self.ns, yaml)
    }

    /// Wait until the object is Ready/Available and Synced at its generation.
    fn wait_reconciled(&self, resource: &str, name: &str) -> anyhow::Result<Value> {
        wait_for(
            RECONCILE_TIMEOUT,
            &format!("{resource} {name} reconciled"),
            || {
                let obj = self.cp.get_json(&self.ns, resource, name)?;
                if kraken_tests::operator::bed::is_reconciled(&obj) {
                    Ok(Some(obj))
                } else {
                    bail!("{}", kraken_tests::operator::bed::describe(&obj))
                }
            },
        )
    }

    fn crds_labelled(&self, selector: &str) -> anyhow::Result<Vec<Value>> {
        let out = self
            .cp
            .kubectl(&["get", "crd", "-l", selector, "-o", "json"])?;
        let list: Value = serde_json::from_str(&out)?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }

    fn finish<T>(&self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        result.map_err(|e| with_log_tails(e, &[("operator", &self.op)], 80))
    }
}

fn provider_manifest(name: &str, spec: Value) -> String {
    json!({
        "apiVersion": "core.kraken.dev/v1alpha1",
        "kind": "Provider",
        "metadata": {"name": name},
        "spec": spec,
    })
    .to_string()
}

fn provider_config(ns: &str, name: &str, provider: &str, config: Value) -> String {
    json!({
        "apiVersion": "core.kraken.dev/v1alpha1",
        "kind": "ProviderConfig",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"providerRef": {"name": provider}, "config": config},
    })
    .to_string()
}

fn managed(
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    pc: &str,
    for_provider: Value,
) -> String {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"providerConfigRef": {"name": pc}, "forProvider": for_provider},
    })
    .to_string()
}

/// From a filesystem mirror: the kinds spec.resources selects appear and reconcile through the
/// real provider; `kraken activate` adds one on demand; deleting the Provider waits while
/// objects of its kinds exist, and a forced deletion stops its kinds and leaves CRDs and
/// resources alone.
#[test]
fn provider_from_a_filesystem_mirror_installs_kinds_that_reconcile() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let mirror = env.path("KRAKEN_TEST_PLUGIN_DIR")?;
    let bed = Bed::start("mirror", vec![])?;
    let r = (|| {
        let spec = json!({"source": "hashicorp/random", "version": "~> 3.6", "mirror": mirror, "resources": ["random_pet"]});
        bed.cp.apply_yaml("", &provider_manifest("random", spec))?;
        let p = bed.wait_provider("random", "True", "Installed")?;
        let s = &p["status"];
        ensure!(
            s["address"] == "registry.terraform.io/hashicorp/random",
            "address: {s}"
        );
        ensure!(
            s["version"] == "3.6.0" && s["protocol"] == 5,
            "version/protocol: {s}"
        );
        ensure!(
            s["hashes"].as_array().is_some_and(|h| h
                .iter()
                .any(|h| h.as_str().is_some_and(|h| h.starts_with("h1:")))),
            "hashes: {s}"
        );
        ensure!(
            s["kindCount"] == 1 && s["kinds"][0]["kind"] == "Pet",
            "kinds: {s}"
        );
        ensure!(
            s["resourceTypes"].as_i64().is_some_and(|n| n > 5),
            "resourceTypes: {s}"
        );
        // Lazily: one kind of the provider's nine, and the package is in the operator's cache.
        let crds = bed.crds_labelled("kraken.dev/provider-name=random")?;
        ensure!(crds.len() == 1, "CRDs installed: {}", crds.len());
        let platform = kraken_registry_fetch::current_platform();
        ensure!(
            bed.cache
                .path()
                .join("registry.terraform.io/hashicorp/random/3.6.0")
                .join(&platform)
                .is_dir(),
            "the package is not in the plugin cache"
        );

        bed.apply(&provider_config(&bed.ns, "default", "random", json!({})))?;
        bed.apply(&managed(
            "random.tf.kraken.dev/v1alpha1",
            "Pet",
            &bed.ns,
            "web",
            "default",
            json!({"length": 2}),
        ))?;
        let pet = bed.wait_reconciled("pets.random.tf.kraken.dev", "web")?;
        let id = pet["status"]["atProvider"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        ensure!(id.split('-').count() == 2, "a two-word pet: {id:?}");
        // The install read the schema in its child and cached the answer; the process that
        // serves the pet took its schema from there instead of asking the provider again.
        let cached: Vec<_> = std::fs::read_dir(bed.cache.path().join(".kraken-schemas"))?
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "pb"))
            .collect();
        ensure!(
            cached.len() == 1,
            "cached schema answers: {:?}",
            cached.iter().map(|e| e.path()).collect::<Vec<_>>()
        );
        let metrics = bed.op.metrics()?;
        ensure!(
            metrics.contains(r#"rpc="PlanResourceChange""#)
                && !metrics.contains(r#"rpc="GetSchema""#),
            "the serving process asked for its schema again:\n{}",
            metrics
                .lines()
                .filter(|l| l.starts_with("kraken_provider_rpc_duration_seconds_count"))
                .collect::<Vec<_>>()
                .join("\n")
        );

        // On demand: `kraken activate` adds random_id and waits for it.
        let out = std::process::Command::new(kraken_bin()?)
            .args(["activate", "random", "random_id", "--kubeconfig"])
            .arg(bed.cp.kubeconfig())
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "kraken activate failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(
            stdout.contains("random_id\tId\trandom.tf.kraken.dev/v1alpha1"),
            "activate printed {stdout:?}"
        );
        bed.apply(&managed(
            "random.tf.kraken.dev/v1alpha1",
            "Id",
            &bed.ns,
            "key",
            "default",
            json!({"byteLength": 8}),
        ))?;
        bed.wait_reconciled("ids.random.tf.kraken.dev", "key")?;

        // A type the provider does not have: a clear reason, the installed kinds stay.
        let err = std::process::Command::new(kraken_bin()?)
            .args([
                "activate",
                "random",
                "random_nonesuch",
                "--timeout",
                "60",
                "--kubeconfig",
            ])
            .arg(bed.cp.kubeconfig())
            .output()?;
        let stderr = String::from_utf8_lossy(&err.stderr);
        ensure!(
            !err.status.success(),
            "activating an unknown type succeeded"
        );
        ensure!(
            stderr.contains("random_nonesuch") && stderr.contains("UnknownResourceTypes"),
            "stderr: {stderr}"
        );
        bed.cp.kubectl(&[
            "patch",
            "providers.core.kraken.dev",
            "random",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/resources/2"}]"#,
        ])?;
        bed.wait_provider("random", "True", "Installed")?;

        // Deleting the Provider while objects of its kinds exist: it waits and names them,
        // and the kinds stay served (their objects' deletion needs them).
        bed.cp.kubectl(&[
            "delete",
            "providers.core.kraken.dev",
            "random",
            "--wait=false",
        ])?;
        let users = format!("used by 2 objects: Id {ns}/key, Pet {ns}/web", ns = bed.ns);
        let provider = ("", "providers.core.kraken.dev", "random");
        wait_condition(
            &bed.cp,
            provider,
            ("Ready", "False", "InUse"),
            &users,
            RECONCILE_TIMEOUT,
        )?;
        let suspended = bed.crds_labelled("kraken.dev/suspended=true")?;
        ensure!(
            suspended.is_empty(),
            "kinds suspended under their objects: {}",
            suspended.len()
        );
        // Forced: the controllers stop, CRDs and resources stay.
        bed.cp.kubectl(&[
            "annotate",
            "providers.core.kraken.dev",
            "random",
            "kraken.dev/force-delete=true",
        ])?;
        wait_for(RECONCILE_TIMEOUT, "Provider random gone", || {
            match bed
                .cp
                .get_json_opt("", "providers.core.kraken.dev", "random")?
            {
                None => Ok(Some(())),
                Some(p) => bail!("still there: {:?}", condition(&p, "Ready")),
            }
        })?;
        // Its objects say why nothing reconciles them any more.
        let pet = (bed.ns.as_str(), "pets.random.tf.kraken.dev", "web");
        let suspended = ("Synced", "False", "KindSuspended");
        wait_condition(
            &bed.cp,
            pet,
            suspended,
            "Provider random",
            RECONCILE_TIMEOUT,
        )?;
        let crds =
            bed.crds_labelled("kraken.dev/provider-name=random,kraken.dev/suspended=true")?;
        ensure!(crds.len() == 2, "suspended CRDs: {}", crds.len());
        let pet = bed
            .cp
            .get_json(&bed.ns, "pets.random.tf.kraken.dev", "web")?;
        ensure!(
            pet["status"]["atProvider"]["id"] == id.as_str(),
            "the Pet changed: {pet}"
        );
        let pet_runs = || {
            bed.op
                .metric_where("kraken_reconcile_runs_total", |labels| {
                    labels
                        .iter()
                        .any(|(k, v)| k == "kind" && v == "Pet.random.tf.kraken.dev")
                })
        };
        let runs_before = pet_runs()?;
        bed.cp.kubectl(&[
            "patch",
            "pets.random.tf.kraken.dev",
            "web",
            "-n",
            &bed.ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"forProvider":{"length":3}}}"#,
        ])?;
        // An observation window (nothing can signal an absence): a running Pet controller
        // reconciles a new generation within milliseconds; a suspended one never does.
        let window = std::time::Instant::now();
        while window.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(kraken_tests::WAIT_POLL_INTERVAL);
            let runs = pet_runs()?;
            ensure!(
                runs == runs_before,
                "a suspended kind was reconciled: {runs_before} -> {runs} Pet reconciles"
            );
        }
        let pet = bed
            .cp
            .get_json(&bed.ns, "pets.random.tf.kraken.dev", "web")?;
        ensure!(
            pet["status"]["observedGeneration"] == 1 && pet["metadata"]["generation"] == 2,
            "a suspended kind was reconciled: {pet}"
        );

        // Applying it again resumes the kinds.
        let spec = json!({"source": "hashicorp/random", "mirror": mirror, "resources": ["random_pet", "random_id"]});
        bed.cp.apply_yaml("", &provider_manifest("random", spec))?;
        bed.wait_provider("random", "True", "Installed")?;
        let pet = bed.wait_reconciled("pets.random.tf.kraken.dev", "web")?;
        let id2 = pet["status"]["atProvider"]["id"]
            .as_str()
            .unwrap_or_default();
        ensure!(
            id2.split('-').count() == 3 && id2 != id,
            "length 3 replaced the pet: {id2:?}"
        );

        // removeCRDs (on a forced deletion) keeps CRDs whose objects exist (and says so) ...
        bed.patch_provider(
            "random",
            r#"{"metadata":{"annotations":{"kraken.dev/force-delete":"true"}},"spec":{"removeCRDs":true}}"#,
        )?;
        bed.cp.kubectl(&[
            "delete",
            "providers.core.kraken.dev",
            "random",
            "--timeout=60s",
        ])?;
        let kept = bed.crds_labelled("kraken.dev/provider-name=random")?;
        ensure!(kept.len() == 2, "CRDs in use were removed: {}", kept.len());
        let events = kraken_tests::operator::events_for(&bed.cp, "default", "random")?;
        ensure!(
            events
                .iter()
                .any(|(r, m)| r == "CRDsKept" && m.contains("Pet")),
            "Events about Provider random: {events:?}"
        );
        // ... and removes the CRDs of kinds without objects.
        let spec = json!({"source": "hashicorp/time", "mirror": mirror,
            "resources": ["time_static"], "removeCRDs": true});
        bed.cp.apply_yaml("", &provider_manifest("time", spec))?;
        bed.wait_provider("time", "True", "Installed")?;
        ensure!(bed.crds_labelled("kraken.dev/provider-name=time")?.len() == 1);
        bed.cp.kubectl(&[
            "delete",
            "providers.core.kraken.dev",
            "time",
            "--timeout=60s",
        ])?;
        wait_for(INSTALL_TIMEOUT, "the time CRDs to be deleted", || {
            let left = bed.crds_labelled("kraken.dev/provider-name=time")?;
            if left.is_empty() {
                Ok(Some(()))
            } else {
                bail!("{} left", left.len())
            }
        })?;
        Ok(())
    })();
    bed.finish(r)
}

/// The loopback HTTPS registry, serving the protocol 6 fixture as 1.0.0 and 1.1.0, signed.
struct Registry {
    rt: tokio::runtime::Runtime,
    server: RegistryServer,
    signer: SigningIdentity,
}

impl Registry {
    fn start() -> anyhow::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let server = rt.block_on(RegistryServer::start())?;
        let signer = SigningIdentity::generate("kraken-test")?;
        Ok(Self { rt, server, signer })
    }

    /// Publish the fixture binary as `version`, signed by the registry's key; `tamper`
    /// corrupts the package after signing (its bytes no longer match the signed checksum).
    fn publish(&self, binary: &Path, version: &str, tamper: bool) -> anyhow::Result<()> {
        let key = self.signer.public_armor.clone();
        self.publish_with_key(binary, version, tamper, key)
    }

    /// Like [`Self::publish`], announcing `published_key` as the registry's signing key.
    fn publish_with_key(
        &self,
        binary: &Path,
        version: &str,
        tamper: bool,
        published_key: String,
    ) -> anyhow::Result<()> {
        let _guard = self.rt.enter();
        let zip = package_zip(binary, "fixture", version)?;
        let published = self.server.publish(&Publish {
            hostname: &self.server.host(),
            namespace: "kraken",
            type_name: "fixture",
            version,
            platform: &kraken_registry_fetch::current_platform(),
            zip: zip.clone(),
            h1: single_file_h1(binary, "fixture", version)?,
            protocols: vec!["6.0"],
            signer: &self.signer,
            published_keys: vec![published_key],
            other_platforms: vec![],
        })?;
        if tamper {
            let mut bad = zip;
            let n = bad.len();
            bad[n / 2] ^= 0xff;
            self.server.set(
                &published.zip_path,
                kraken_tests::registry_server::Reply::bytes(bad),
            );
        }
        Ok(())
    }

    fn source(&self) -> String {
        format!("{}/kraken/fixture", self.server.host())
    }
}

/// From the registry: install, reconcile, upgrade 1.0.0 → 1.1.0 with a resource in place (its
/// state kept, no second create), and a tampered package that installs nothing.
#[test]
fn provider_from_a_registry_upgrades_and_refuses_a_bad_package() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let fixture = env.provider("fixture")?;
    let registry = Registry::start()?;
    registry.publish(&fixture.path, "1.0.0", false)?;
    let ca = registry.server.ca_file().display().to_string();
    let bed = Bed::start("registry", vec!["--ca-cert".into(), ca])?;
    let ledger = scratch_dir("kraken-ledger-")?;
    let r = (|| {
        let source = registry.source();
        let spec = json!({"source": source, "version": "~> 1.0", "resources": ["fixture_object"]});
        bed.cp.apply_yaml("", &provider_manifest("fixture", spec))?;
        let p = bed.wait_provider("fixture", "True", "Installed")?;
        ensure!(
            p["status"]["version"] == "1.0.0" && p["status"]["protocol"] == 6,
            "status: {}",
            p["status"]
        );
        let hashes = p["status"]["hashes"].to_string();
        ensure!(
            hashes.contains("\"h1:") && hashes.contains("\"zh:"),
            "a registry install records both hash schemes: {hashes}"
        );
        let signed_by = p["status"]["signedBy"].as_str().unwrap_or_default();
        ensure!(
            signed_by.eq_ignore_ascii_case(&registry.signer.key_id),
            "signedBy {signed_by}, the registry signs with {}",
            registry.signer.key_id
        );

        let config = json!({"ledgerDir": ledger.path()});
        bed.apply(&provider_config(&bed.ns, "default", "fixture", config))?;
        bed.apply(&managed(
            "fixture.tf.kraken.dev/v1alpha1",
            "Object",
            &bed.ns,
            "one",
            "default",
            json!({"name": "one", "size": 1}),
        ))?;
        let obj = bed.wait_reconciled("objects.fixture.tf.kraken.dev", "one")?;
        let id = obj["status"]["externalId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        ensure!(
            ledger::live_objects(ledger.path()) == 1,
            "one object in the ledger"
        );

        // Upgrade with the resource in place.
        registry.publish(&fixture.path, "1.1.0", false)?;
        bed.patch_provider("fixture", r#"{"spec":{"version":"~> 1.1"}}"#)?;
        let p = bed.wait_provider("fixture", "True", "Installed")?;
        ensure!(
            p["status"]["version"] == "1.1.0",
            "upgraded: {}",
            p["status"]
        );
        wait_for(RECONCILE_TIMEOUT, "ProviderConfig default on 1.1.0", || {
            let pc = bed
                .cp
                .get_json(&bed.ns, "providerconfigs.core.kraken.dev", "default")?;
            if pc["status"]["version"] == "1.1.0" {
                Ok(Some(()))
            } else {
                bail!("status {}", pc["status"])
            }
        })?;
        bed.cp.kubectl(&[
            "patch",
            "objects.fixture.tf.kraken.dev",
            "one",
            "-n",
            &bed.ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"forProvider":{"size":2}}}"#,
        ])?;
        let obj = bed.wait_reconciled("objects.fixture.tf.kraken.dev", "one")?;
        ensure!(
            obj["status"]["externalId"] == id.as_str(),
            "the object was replaced: {}",
            obj["status"]
        );
        ensure!(
            obj["status"]["atProvider"]["size"] == 2,
            "size: {}",
            obj["status"]
        );
        let objects = ledger::objects(ledger.path())?;
        ensure!(
            objects.len() == 1 && objects[0]["size"] == 2,
            "ledger: {objects:?}"
        );

        // A package whose bytes do not match the signed checksum: Ready=False, nothing installed.
        registry.publish(&fixture.path, "1.2.0", true)?;
        bed.patch_provider("fixture", r#"{"spec":{"version":"1.2.0"}}"#)?;
        let p = bed.wait_provider("fixture", "False", "VerificationFailed")?;
        let (_, _, message) = condition(&p, "Ready").context("Ready")?;
        ensure!(message.contains("checksum mismatch"), "message: {message}");
        let host = registry.server.host();
        ensure!(
            !bed.cache
                .path()
                .join(&host)
                .join("kraken/fixture/1.2.0")
                .exists(),
            "1.2.0 was installed"
        );
        // The object keeps working on the version already installed.
        ensure!(
            p["status"]["version"] == "1.1.0",
            "status after the failed upgrade: {}",
            p["status"]
        );
        Ok(())
    })();
    bed.finish(r)
}

/// A package with no valid signature: Ready=False/VerificationFailed, no CRD, no cache entry.
#[test]
fn provider_with_an_unknown_signing_key_installs_nothing() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let fixture = env.provider("fixture")?;
    let registry = Registry::start()?;
    // Signed by one key, published with another.
    let other = SigningIdentity::generate("someone-else")?;
    registry.publish_with_key(&fixture.path, "1.0.0", false, other.public_armor.clone())?;
    let ca = registry.server.ca_file().display().to_string();
    let bed = Bed::start("badsig", vec!["--ca-cert".into(), ca])?;
    let r = (|| {
        let spec = json!({"source": registry.source(), "resources": ["fixture_object"]});
        bed.cp.apply_yaml("", &provider_manifest("fixture", spec))?;
        let p = bed.wait_provider("fixture", "False", "VerificationFailed")?;
        let (_, _, message) = condition(&p, "Ready").context("Ready")?;
        ensure!(
            message.contains("signature") || message.contains("key"),
            "message: {message}"
        );
        ensure!(
            bed.crds_labelled("kraken.dev/provider-name=fixture")?
                .is_empty(),
            "CRDs were installed"
        );
        ensure!(
            p["status"].get("version").is_none(),
            "a version was recorded: {}",
            p["status"]
        );
        let entries = std::fs::read_dir(bed.cache.path())?
            .flatten()
            .filter(|e| {
                e.file_name() != ".locks" && e.path().is_dir() && e.path().join("kraken").exists()
            })
            .count();
        ensure!(entries == 0, "something was installed in the cache");
        Ok(())
    })();
    bed.finish(r)
}

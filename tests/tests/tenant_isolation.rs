//! The hostile tenant: a namespace user who can create resources and ProviderConfigs tries to
//! reach past their namespace. Each test plays one attempt against a real API server, the
//! operator and a real provider, and shows it fails.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use kraken_tests::operator::{FixtureBed, OperatorOptions};
use serde_json::json;

const CONVERGE: Duration = Duration::from_secs(60);

/// The operator holds cloud credentials and runs in a pod; a provider (configured by a
/// tenant) must see none of it: not the credentials, not the API server's address, not the
/// operator's HOME. Only what the admin opted in (`--provider-env`) passes.
#[test]
fn a_provider_does_not_inherit_the_operators_identity() -> anyhow::Result<()> {
    let secret = "operator-secret-do-not-leak";
    let opts = OperatorOptions {
        env: vec![
            ("AWS_ACCESS_KEY_ID".into(), "AKIAOPERATOR".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), secret.into()),
            (
                "AWS_WEB_IDENTITY_TOKEN_FILE".into(),
                "/var/run/secrets/token".into(),
            ),
            ("GOOGLE_CREDENTIALS".into(), secret.into()),
            ("KUBERNETES_SERVICE_HOST".into(), "10.96.0.1".into()),
            // (A proxy variable passes the same way; the operator's own client would try to use
            // one here, so the CA-bundle variable stands for them.)
            ("SSL_CERT_DIR".into(), "/etc/kraken-test-certs".into()),
            // Opted in by the harness with `--provider-env KRAKEN_FIXTURE_APPLY_DELAY_MS`.
            ("KRAKEN_FIXTURE_APPLY_DELAY_MS".into(), "1".into()),
        ],
        ..OperatorOptions::default()
    };
    let bed = FixtureBed::start("tenant-env", opts)?;
    let result = (|| {
        bed.apply_object(
            "probe",
            json!({"forProvider": {"name": "probe", "size": 1}}),
        )?;
        bed.wait_reconciled("probe", CONVERGE)?;
        let path = bed.ledger_dir().join("environment.json");
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!("the fixture records its environment in {}", path.display())
        })?;
        let env: BTreeMap<String, String> = serde_json::from_str(&text)?;
        for (k, v) in &env {
            anyhow::ensure!(
                !v.contains(secret) && !k.starts_with("AWS_") && !k.starts_with("GOOGLE_"),
                "the provider inherited {k}={v}"
            );
        }
        for gone in ["KUBERNETES_SERVICE_HOST", "KUBECONFIG", "RUST_LOG"] {
            anyhow::ensure!(!env.contains_key(gone), "the provider inherited {gone}");
        }
        // Its HOME is its own private directory (where its TMPDIR and plugin socket are), not
        // the operator's: no ~/.aws/credentials or ~/.kube/config to fall back to.
        let home = env.get("HOME").context("the provider has no HOME")?;
        anyhow::ensure!(
            Some(home) == env.get("TMPDIR") && home.contains("kraken-plugin-"),
            "the provider's HOME is {home:?} (TMPDIR {:?})",
            env.get("TMPDIR")
        );
        anyhow::ensure!(
            std::env::var("HOME").ok().as_ref() != Some(home),
            "the provider has the operator's HOME"
        );
        // What every provider needs to reach its cloud, and the admin's opt-in, do pass.
        anyhow::ensure!(
            env.get("SSL_CERT_DIR").map(String::as_str) == Some("/etc/kraken-test-certs"),
            "the CA-bundle setting was not passed on: {env:?}"
        );
        anyhow::ensure!(
            env.get("KRAKEN_FIXTURE_APPLY_DELAY_MS").map(String::as_str) == Some("1"),
            "the opted-in variable was not passed on: {env:?}"
        );
        // The operator's default for Go's collector (`--provider-gogc`).
        anyhow::ensure!(
            env.get("GOGC").map(String::as_str) == Some("50"),
            "GOGC is {:?}, not the operator's default 50",
            env.get("GOGC")
        );
        Ok(())
    })();
    bed.finish(result)
}

/// The tokens the fixture's processes were configured with, in order (`configure.log`).
fn configured_tokens(bed: &FixtureBed) -> anyhow::Result<Vec<String>> {
    let log = std::fs::read_to_string(bed.ledger_dir().join("configure.log")).unwrap_or_default();
    // The bed's own ProviderConfig (`default`) configures a process without a token whenever
    // it is first reconciled, which may come after this test's objects on a loaded machine:
    // only the tokens the rotating ProviderConfig configures are this test's.
    Ok(log
        .lines()
        .filter_map(|l| l.strip_prefix("token="))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect())
}

/// A rotated credentials Secret takes effect at the next apply, though the ProviderConfig's
/// generation did not change and its provider process is busy serving resources; a
/// ProviderConfig deleted and created again never reuses the old process (maybe another
/// account).
#[test]
fn rotated_credentials_and_recreated_configs_get_a_fresh_process() -> anyhow::Result<()> {
    let bed = FixtureBed::start("tenant-rotate", OperatorOptions::default())?;
    let result = (|| {
        let ns = bed.ns.clone();
        let secret = |token: &str| token_secret(&ns, token);
        let pc = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
            "metadata": {"name": "rotating", "namespace": ns},
            "spec": {"source": "registry.kraken.dev/kraken/fixture",
                     "config": {"ledgerDir": bed.ledger_dir().to_string_lossy()},
                     "configFrom": [{"path": "token",
                                     "secretKeyRef": {"name": "fixture-token", "key": "token"}}]}})
        .to_string();
        bed.apply(&secret("token-v1"))?;
        bed.apply(&pc)?;
        let spec = |size: u32| {
            json!({"forProvider": {"name": "rotated", "size": size},
                   "providerConfigRef": {"name": "rotating"}})
        };
        bed.apply_object("rotated", spec(1))?;
        bed.wait_reconciled("rotated", CONVERGE)?;
        anyhow::ensure!(
            configured_tokens(&bed)?.last().map(String::as_str) == Some("token-v1"),
            "configured with {:?}",
            configured_tokens(&bed)?
        );

        // The Secret it reads is held for it (docs/operator.md, "Deleting configuration").
        held_by(&bed, true)?;

        // Rotate: same ProviderConfig, same generation, a new Secret value.
        bed.apply(&secret("token-v2"))?;
        bed.apply_object("rotated", spec(2))?;
        bed.wait_reconciled("rotated", CONVERGE)?;
        let tokens = configured_tokens(&bed)?;
        anyhow::ensure!(
            tokens.last().map(String::as_str) == Some("token-v2"),
            "the apply after the rotation used a process configured with {tokens:?}"
        );

        // Delete the ProviderConfig and create it again with other credentials. The Object
        // still uses it, so the deletion would wait for it: forced.
        bed.cp.kubectl(&[
            "annotate",
            "providerconfig",
            "rotating",
            "-n",
            &ns,
            "kraken.dev/force-delete=true",
        ])?;
        bed.cp.kubectl(&[
            "delete",
            "providerconfig",
            "rotating",
            "-n",
            &ns,
            "--wait=true",
            "--timeout=60s",
        ])?;
        held_by(&bed, false)?;
        bed.apply(&secret("token-v3"))?;
        bed.apply(&pc)?;
        bed.apply_object("rotated", spec(3))?;
        bed.wait_reconciled("rotated", CONVERGE)?;
        let tokens = configured_tokens(&bed)?;
        anyhow::ensure!(
            tokens.last().map(String::as_str) == Some("token-v3"),
            "the apply after the ProviderConfig was recreated used {tokens:?}"
        );
        Ok(())
    })();
    bed.finish(result)
}

/// The Secret `fixture-token` in `ns` holding `token`.
fn token_secret(ns: &str, token: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "fixture-token", "namespace": ns},
           "stringData": {"token": token}})
    .to_string()
}

/// Waits until the token Secret is held (`want`) for the ProviderConfig `rotating` by its
/// finalizer, or no longer is.
fn held_by(bed: &FixtureBed, want: bool) -> anyhow::Result<()> {
    kraken_tests::wait_for(CONVERGE, "the token Secret's finalizer", || {
        let s = bed.cp.get_json(&bed.ns, "secrets", "fixture-token")?;
        let held = s["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "kraken.dev/providerconfig-rotating"));
        if held == want {
            Ok(Some(()))
        } else {
            anyhow::bail!("finalizers {}", s["metadata"]["finalizers"])
        }
    })
}

/// The Synced condition's message of Object `name` once it contains `text`.
fn wait_synced_message(bed: &FixtureBed, name: &str, text: &str) -> anyhow::Result<String> {
    kraken_tests::wait_for(
        CONVERGE,
        &format!("{name}'s Synced message to say {text:?}"),
        || {
            let obj = bed.object(name)?;
            match kraken_tests::operator::condition(&obj, "Synced") {
                Some((_, _, message)) if message.contains(text) => Ok(Some(message)),
                other => anyhow::bail!("Synced is {other:?}"),
            }
        },
    )
}

/// A user who may create resources but not read Secrets tries to read, through references,
/// another resource's state Secret and a service account's token: both are refused with a
/// `Forbidden` reason, and nothing is applied with them.
#[test]
fn references_cannot_read_krakens_own_or_token_secrets() -> anyhow::Result<()> {
    let bed = FixtureBed::start("tenant-secrets", OperatorOptions::default())?;
    let result = (|| {
        let ns = bed.ns.clone();
        bed.apply_object(
            "victim",
            json!({"forProvider": {"name": "victim", "size": 1}}),
        )?;
        bed.wait_reconciled("victim", CONVERGE)?;
        let state = kraken_tests::operator::bed::state_secret_name("Object", "victim");
        anyhow::ensure!(
            bed.state_secret("victim")?.is_some(),
            "no state Secret {state}"
        );
        bed.apply(
            &json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
                    "metadata": {"name": "sa-token", "namespace": ns,
                                 "annotations": {"kubernetes.io/service-account.name": "default"}},
                    "stringData": {"token": "operator-grade-token"}})
            .to_string(),
        )?;
        let steal = |name: &str, secret: &str, key: &str| {
            bed.apply_object(
                name,
                json!({"forProvider": {"name": name, "size": 1},
                       "valuesFrom": [{"path": "tags.stolen",
                                       "secretKeyRef": {"name": secret, "key": key}}]}),
            )
        };
        steal("thief-state", &state, "state")?;
        steal("thief-token", "sa-token", "token")?;
        let m = wait_synced_message(&bed, "thief-state", "cannot be referenced")?;
        anyhow::ensure!(m.contains("state Secret"), "{m}");
        let m = wait_synced_message(&bed, "thief-token", "cannot be referenced")?;
        anyhow::ensure!(m.contains("service account token"), "{m}");
        for name in ["thief-state", "thief-token"] {
            let obj = bed.object(name)?;
            let (_, reason, _) =
                kraken_tests::operator::condition(&obj, "Synced").context("no Synced condition")?;
            anyhow::ensure!(reason == "Forbidden", "{name}: Synced reason {reason}");
        }
        // The same token through a ProviderConfig's configFrom.
        bed.apply(
            &json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
                "metadata": {"name": "borrowed", "namespace": ns},
                "spec": {"source": kraken_tests::FIXTURE_ADDRESS,
                         "config": {"ledgerDir": bed.ledger_dir().to_string_lossy()},
                         "configFrom": [{"path": "token",
                                         "secretKeyRef": {"name": "sa-token", "key": "token"}}]}})
            .to_string(),
        )?;
        bed.apply_object(
            "borrower",
            json!({"forProvider": {"name": "borrower", "size": 1},
                   "providerConfigRef": {"name": "borrowed"}}),
        )?;
        let m = wait_synced_message(&bed, "borrower", "cannot be referenced")?;
        anyhow::ensure!(m.contains("sa-token"), "{m}");
        // Nothing was created with any of it.
        let live = kraken_tests::ledger::live_objects(bed.ledger_dir());
        anyhow::ensure!(
            live == 1,
            "the ledger holds {live} objects, not just the victim"
        );
        Ok(())
    })();
    bed.finish(result)
}

/// A value from a Secret stays sensitive wherever it goes, even into an argument the schema
/// does not mark sensitive (a tag, a name): not in `status.atProvider`, the StateDeclaration,
/// conditions, Events or the operator's log; only in the outputs Secret.
#[test]
fn a_secret_value_stays_sensitive_in_a_plain_argument() -> anyhow::Result<()> {
    let bed = FixtureBed::start("tenant-sensitive", OperatorOptions::default())?;
    let result = (|| {
        let ns = bed.ns.clone();
        let secret = "hunter2-from-a-secret";
        bed.apply(
            &json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "db", "namespace": ns},
                    "stringData": {"password": secret}})
            .to_string(),
        )?;
        // Published although nothing reads it (the annotation), to check where the value goes.
        let mut tagged = kraken_tests::operator::object_manifest(
            &ns,
            "tagged",
            json!({"forProvider": {"name": "tagged", "size": 1},
                   "valuesFrom": [{"path": "tags.pw",
                                   "secretKeyRef": {"name": "db", "key": "password"}}]}),
        );
        tagged["metadata"]["annotations"] = json!({"kraken.dev/publish": "true"});
        bed.apply(&tagged.to_string())?;
        let obj = bed.wait_reconciled("tagged", CONVERGE)?;
        // The provider got it: the fixture's ledger object carries the tag.
        let ledger = std::fs::read_dir(bed.ledger_dir().join("objects"))?
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .collect::<String>();
        anyhow::ensure!(ledger.contains(secret), "the provider never got the value");
        anyhow::ensure!(
            obj["status"]["atProvider"].get("tags").is_none(),
            "atProvider shows the tags: {}",
            obj["status"]["atProvider"]
        );
        for what in [
            "statedeclarations",
            "dependencyrequests",
            "events",
            "objects.fixture.tf.kraken.dev",
        ] {
            let text = bed.cp.kubectl(&["get", what, "-n", &ns, "-o", "json"])?;
            anyhow::ensure!(
                !text.contains(secret),
                "the Secret's value leaked into {what}"
            );
        }
        anyhow::ensure!(
            !bed.op.logs()?.contains(secret),
            "the value is in the operator's log"
        );
        // Published for those who may read it: in the outputs Secret.
        let outputs = bed.cp.kubectl(&[
            "get",
            "secret",
            "object-tagged.fixture-outputs",
            "-n",
            &ns,
            "-o",
            "json",
        ])?;
        let outputs: serde_json::Value = serde_json::from_str(&outputs)?;
        anyhow::ensure!(
            outputs["data"].get("tags").is_some(),
            "the outputs Secret has no tags: {}",
            outputs["data"]
        );
        Ok(())
    })();
    bed.finish(result)
}

/// A provider that hangs in an apply (the fixture's one-shot hang switch) is stopped and
/// killed at the deadline, the resource says `ProviderTimeout`, a fresh process serves the
/// retry, and the provider's permits are not pinned: every object converges, none twice.
#[test]
fn a_hung_provider_is_replaced_and_the_resource_converges() -> anyhow::Result<()> {
    let marker_dir = kraken_tests::fixture_dir("kraken-hang-")?;
    let marker = marker_dir.path().join("hang-once");
    let opts = OperatorOptions {
        env: vec![(
            "KRAKEN_FIXTURE_HANG_ONCE_FILE".into(),
            marker.to_string_lossy().into_owned(),
        )],
        args: vec!["--provider-apply-timeout".into(), "3s".into()],
        ..OperatorOptions::default()
    };
    let bed = FixtureBed::start("tenant-hang", opts)?;
    let result = (|| {
        let started = std::time::Instant::now();
        bed.apply_object(
            "stuck",
            json!({"forProvider": {"name": "stuck", "size": 1}}),
        )?;
        let message = bed.wait_event("stuck", "ProviderTimeout", CONVERGE)?;
        anyhow::ensure!(marker.exists(), "the fixture never hung");
        anyhow::ensure!(message.contains("no answer within 3s"), "{message}");
        bed.wait_reconciled("stuck", CONVERGE)?;
        eprintln!(
            "converged {:.1}s after the apply",
            started.elapsed().as_secs_f64()
        );
        // The same provider serves others at once: nothing is still held by the hung call.
        for name in ["after-1", "after-2"] {
            bed.apply_object(name, json!({"forProvider": {"name": name, "size": 1}}))?;
        }
        for name in ["after-1", "after-2"] {
            bed.wait_reconciled(name, CONVERGE)?;
        }
        let live = kraken_tests::ledger::live_objects(bed.ledger_dir());
        anyhow::ensure!(live == 3, "the ledger holds {live} objects, not 3");
        Ok(())
    })();
    bed.finish(result)
}

/// `tls: false` weakens the channel a tenant's credentials travel on; only the cluster admin
/// may allow it (`--allow-provider-plaintext`), so a namespace user's ProviderConfig is refused.
#[test]
fn a_namespace_user_cannot_turn_off_provider_tls() -> anyhow::Result<()> {
    let bed = FixtureBed::start("tenant-tls", OperatorOptions::default())?;
    let result = (|| {
        let mut pc = kraken_tests::operator::provider_config_manifest(
            &bed.ns,
            "plain",
            json!({"ledgerDir": bed.ledger_dir().to_string_lossy()}),
        );
        pc["spec"]["tls"] = json!(false);
        bed.apply(&pc.to_string())?;
        bed.apply_object(
            "plain",
            json!({"forProvider": {"name": "plain", "size": 1},
                   "providerConfigRef": {"name": "plain"}}),
        )?;
        let m = wait_synced_message(&bed, "plain", "tls: false is not allowed")?;
        anyhow::ensure!(m.contains("--allow-provider-plaintext"), "{m}");
        let live = kraken_tests::ledger::live_objects(bed.ledger_dir());
        anyhow::ensure!(live == 0, "the ledger holds {live} objects");
        Ok(())
    })();
    bed.finish(result)
}

/// One namespace cannot take the operator's memory with provider processes: past the
/// operator's limit, a ProviderConfig's resources wait with a message naming it.
#[test]
fn a_namespace_gets_at_most_its_share_of_provider_processes() -> anyhow::Result<()> {
    let opts = OperatorOptions {
        args: vec!["--max-providers-per-namespace".into(), "1".into()],
        ..OperatorOptions::default()
    };
    let bed = FixtureBed::start("tenant-procs", opts)?;
    let result = (|| {
        bed.apply_object(
            "first",
            json!({"forProvider": {"name": "first", "size": 1}}),
        )?;
        bed.wait_reconciled("first", CONVERGE)?;
        bed.apply_provider_config("second", json!({}))?;
        bed.apply_object(
            "second",
            json!({"forProvider": {"name": "second", "size": 1},
                   "providerConfigRef": {"name": "second"}}),
        )?;
        let m = wait_synced_message(&bed, "second", "--max-providers-per-namespace")?;
        anyhow::ensure!(m.contains("already runs 1 provider processes"), "{m}");
        let live = kraken_tests::ledger::live_objects(bed.ledger_dir());
        anyhow::ensure!(live == 1, "the ledger holds {live} objects");
        Ok(())
    })();
    bed.finish(result)
}

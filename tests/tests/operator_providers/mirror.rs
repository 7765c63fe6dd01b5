//! A Provider from a filesystem mirror, through its whole life: the kinds `spec.resources`
//! selects appear and reconcile through the real provider; `kraken activate` adds one on
//! demand; deleting the Provider waits while objects of its kinds exist, and a forced deletion
//! stops its kinds and leaves CRDs and resources alone; applying it again resumes them; and
//! `removeCRDs` removes only the CRDs no object uses.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, ensure};
use kraken_tests::operator::bed::wait_condition;
use kraken_tests::operator::condition;
use kraken_tests::{TestEnv, kraken_bin, wait_for};
use serde_json::json;

use super::{Bed, INSTALL_TIMEOUT, RECONCILE_TIMEOUT, managed, provider_config, provider_manifest};

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
        expect_installed_lazily(&bed, &mirror)?;
        let id = expect_a_pet_from_the_cached_schema(&bed)?;
        expect_activate_adds_a_kind(&bed)?;
        expect_deletion_waits_for_objects_then_suspends(&bed, &id)?;
        expect_a_suspended_kind_is_not_reconciled(&bed)?;

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
        expect_remove_crds_keeps_those_in_use(&bed, &mirror)
    })();
    bed.finish(r)
}

/// The Provider `random` with one resource type: installed with its address, version,
/// protocol, hashes and one kind of its nine, the package in the operator's cache.
fn expect_installed_lazily(bed: &Bed, mirror: &Path) -> anyhow::Result<()> {
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
    Ok(())
}

/// A Pet reconciles through the real provider, whose serving process took its schema from the
/// cache the install filled; returns the pet's id.
fn expect_a_pet_from_the_cached_schema(bed: &Bed) -> anyhow::Result<String> {
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
        metrics.contains(r#"rpc="PlanResourceChange""#) && !metrics.contains(r#"rpc="GetSchema""#),
        "the serving process asked for its schema again:\n{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("kraken_provider_rpc_duration_seconds_count"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(id)
}

/// On demand: `kraken activate` adds random_id and waits for it; a type the provider does not
/// have gets a clear reason, and the installed kinds stay.
fn expect_activate_adds_a_kind(bed: &Bed) -> anyhow::Result<()> {
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
    Ok(())
}

/// Deleting the Provider while objects of its kinds exist: it waits and names them, and the
/// kinds stay served (their objects' deletion needs them). Forced: the controllers stop, CRDs
/// and resources stay, and the objects say why nothing reconciles them any more.
fn expect_deletion_waits_for_objects_then_suspends(bed: &Bed, id: &str) -> anyhow::Result<()> {
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
    let pet = (bed.ns.as_str(), "pets.random.tf.kraken.dev", "web");
    let suspended = ("Synced", "False", "KindSuspended");
    wait_condition(
        &bed.cp,
        pet,
        suspended,
        "Provider random",
        RECONCILE_TIMEOUT,
    )?;
    let crds = bed.crds_labelled("kraken.dev/provider-name=random,kraken.dev/suspended=true")?;
    ensure!(crds.len() == 2, "suspended CRDs: {}", crds.len());
    let pet = bed
        .cp
        .get_json(&bed.ns, "pets.random.tf.kraken.dev", "web")?;
    ensure!(
        pet["status"]["atProvider"]["id"] == id,
        "the Pet changed: {pet}"
    );
    Ok(())
}

/// A new generation of the Pet is never reconciled while its kind is suspended.
fn expect_a_suspended_kind_is_not_reconciled(bed: &Bed) -> anyhow::Result<()> {
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
    Ok(())
}

/// `removeCRDs` (on a forced deletion) keeps CRDs whose objects exist (and says so), and
/// removes the CRDs of kinds without objects.
fn expect_remove_crds_keeps_those_in_use(bed: &Bed, mirror: &Path) -> anyhow::Result<()> {
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
}

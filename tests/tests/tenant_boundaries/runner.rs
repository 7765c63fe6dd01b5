//! A trusted provider pointed at the operator's own files: `fixture_file` reads any path its
//! user names, as hashicorp/local's `local_file` does. The tenant names the operator's
//! kubeconfig, a ServiceAccount token beside it, a file in its working directory, its
//! `/proc/<pid>/environ` and `/proc/1/environ`.
//! Under the `local` placement (the default) each read is refused by the runner's sandbox and
//! nothing of the file reaches the status; under `inProcess` every one is read and shown, which
//! is what the sandbox prevents.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, ensure};
use serde_json::{Value, json};

use super::{CONVERGE, apply_as_tenant, bind_tenant};
use kraken_tests::operator::bed::{condition, wait_condition, wait_reconciled};
use kraken_tests::operator::{FixtureBed, OperatorOptions};

const FILES: &str = "datafiles.data.fixture.tf.kraken.dev";

/// Stands for `/var/run/secrets/kubernetes.io/serviceaccount/token` in a pod.
const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.operator-token-do-not-leak";

/// A file only the operator's working directory holds.
const NOTES: &str = "operator-working-notes-do-not-leak";

#[test]
fn a_tenant_cannot_read_the_operators_files_through_a_provider() -> anyhow::Result<()> {
    let workdir = kraken_tests::scratch_dir("kraken-operator-cwd-")?;
    std::fs::write(workdir.path().join("notes.txt"), NOTES)?;
    let local = OperatorOptions {
        current_dir: Some(workdir.path().to_path_buf()),
        ..OperatorOptions::default()
    };
    let bed = FixtureBed::start("runner-local", local)?;
    let result = refused_under_local(&bed, workdir.path());
    bed.finish(result)?;
    let inprocess = OperatorOptions {
        args: vec!["--runner-placement".into(), "inProcess".into()],
        current_dir: Some(workdir.path().to_path_buf()),
        ..OperatorOptions::default()
    };
    let bed = FixtureBed::start("runner-inprocess", inprocess)?;
    let result = read_under_inprocess(&bed, workdir.path());
    bed.finish(result)
}

/// What the tenant points `fixture_file` at: (object name, path, text the file holds; empty
/// where it is not known: `/proc/1/environ` may be empty).
fn targets(
    bed: &FixtureBed,
    workdir: &Path,
) -> anyhow::Result<Vec<(&'static str, PathBuf, String)>> {
    let token = plant_token(bed.cp.run_dir())?;
    let pid = bed.op.pid().context("the operator runs")?;
    Ok(vec![
        (
            "kubeconfig",
            bed.cp.kubeconfig().to_path_buf(),
            "client-key-data".to_owned(),
        ),
        ("token", token, TOKEN.to_owned()),
        (
            "environ",
            PathBuf::from(format!("/proc/{pid}/environ")),
            "RUST_LOG=".to_owned(),
        ),
        ("workdir", workdir.join("notes.txt"), NOTES.to_owned()),
        ("init", PathBuf::from("/proc/1/environ"), String::new()),
    ])
}

fn plant_token(dir: &Path) -> anyhow::Result<PathBuf> {
    let dir = dir.join("serviceaccount");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("token");
    std::fs::write(&path, TOKEN)?;
    Ok(path)
}

fn file_manifest(ns: &str, name: &str, path: &Path) -> Value {
    json!({"apiVersion": "data.fixture.tf.kraken.dev/v1alpha1", "kind": "DataFile",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"forProvider": {"path": path}}})
}

fn refused_under_local(bed: &FixtureBed, workdir: &Path) -> anyhow::Result<()> {
    bind_tenant(bed)?;
    // The data source works: a file in the directory the administrator allowed is read.
    let allowed = bed.ledger_dir().join("allowed.txt");
    std::fs::write(&allowed, "allowed to the provider")?;
    apply_as_tenant(bed, &file_manifest(&bed.ns, "allowed", &allowed))?
        .map_err(anyhow::Error::msg)?;
    let obj = wait_reconciled(&bed.cp, (&bed.ns, FILES, "allowed"), CONVERGE)?;
    ensure!(
        obj["status"]["atProvider"]["content"] == "allowed to the provider",
        "{}",
        obj["status"]
    );
    for (name, path, text) in targets(bed, workdir)? {
        apply_as_tenant(bed, &file_manifest(&bed.ns, name, &path))?.map_err(anyhow::Error::msg)?;
        let message = wait_condition(
            &bed.cp,
            (&bed.ns, FILES, name),
            ("Synced", "False", "ProviderError"),
            "permission denied",
            CONVERGE,
        )
        .with_context(|| format!("reading {}", path.display()))?;
        let obj = bed.cp.get_json(&bed.ns, FILES, name)?;
        let shown = obj.to_string();
        ensure!(
            text.is_empty() || !shown.contains(&text),
            "{name}: the file's content reached the object: {shown}"
        );
        ensure!(message.contains(&path.display().to_string()), "{message}");
    }
    Ok(())
}

fn read_under_inprocess(bed: &FixtureBed, workdir: &Path) -> anyhow::Result<()> {
    bind_tenant(bed)?;
    for (name, path, text) in targets(bed, workdir)? {
        // Whether the operator itself may read `/proc/1/environ` depends on the machine (pid 1
        // may be another user's, or another user namespace's): only its refusal under `local`
        // is asserted.
        if text.is_empty() {
            continue;
        }
        apply_as_tenant(bed, &file_manifest(&bed.ns, name, &path))?.map_err(anyhow::Error::msg)?;
        let obj = wait_reconciled(&bed.cp, (&bed.ns, FILES, name), CONVERGE)
            .with_context(|| format!("reading {}", path.display()))?;
        let content = obj["status"]["atProvider"]["content"]
            .as_str()
            .unwrap_or_default();
        ensure!(
            content.contains(&text),
            "{name}: in process the provider reads {}: {:?}",
            path.display(),
            condition(&obj, "Synced")
        );
    }
    Ok(())
}

//! What a runner Pod can reach: nothing of the operator's (files, token, environment), and, run
//! as a ServiceAccount the administrator allowed, exactly what that account may do, with the
//! projected token IRSA reads.

use std::path::PathBuf;

use anyhow::{Context as _, ensure};
use kraken_tests::operator::bed::{wait_condition, wait_reconciled};
use serde_json::{Value, json};

use super::bed::{NOTES, NS, PodsBed, WAIT};

const FILES: &str = "datafiles.data.fixture.tf.kraken.dev";
const ROLE: &str = "arn:aws:iam::123456789012:role/team-a";

fn file_manifest(name: &str, path: &std::path::Path) -> Value {
    json!({"apiVersion": "data.fixture.tf.kraken.dev/v1alpha1", "kind": "DataFile",
           "metadata": {"name": name, "namespace": NS},
           "spec": {"providerConfigRef": {"name": "default"}, "forProvider": {"path": path}}})
}

/// The tenant points `fixture_file` (the shape of `local_file`) at the operator's kubeconfig,
/// a file in its working directory, its environment and pid 1's: each read is refused in the
/// runner, and nothing of them reaches the object.
pub fn expect_the_operators_files_out_of_reach(bed: &PodsBed) -> anyhow::Result<()> {
    let pid = bed.op.pid().context("the operator runs")?;
    let targets: Vec<(&str, PathBuf, &str)> = vec![
        (
            "kubeconfig",
            bed.cp.kubeconfig().to_path_buf(),
            "client-key-data",
        ),
        ("workdir", bed.workdir.path().join("notes.txt"), NOTES),
        (
            "environ",
            PathBuf::from(format!("/proc/{pid}/environ")),
            "RUST_LOG=",
        ),
        ("init", PathBuf::from("/proc/1/environ"), ""),
    ];
    for (name, path, text) in targets {
        bed.cp
            .apply_yaml(NS, &file_manifest(name, &path).to_string())?;
        wait_condition(
            &bed.cp,
            (NS, FILES, name),
            ("Synced", "False", "ProviderError"),
            "permission denied",
            WAIT,
        )
        .with_context(|| format!("reading {}", path.display()))?;
        let shown = bed.cp.get_json(NS, FILES, name)?.to_string();
        ensure!(
            text.is_empty() || !shown.contains(text),
            "{name}: the file's content reached the object: {shown}"
        );
        bed.cp
            .kubectl(&["-n", NS, "delete", FILES, name, "--wait=true"])?;
    }
    Ok(())
}

/// A ServiceAccount the Namespace's annotation allows, annotated with a role: its runner has
/// its token (the API server says it is that account, and it may do what the account may,
/// here nothing), the projected web-identity token and AWS_ROLE_ARN.
pub fn expect_an_allowed_account_is_the_runners_identity(bed: &PodsBed) -> anyhow::Result<()> {
    let account = "team-a-cloud";
    bed.account_with_role(account, ROLE, &format!("kraken-runner, {account}"))?;
    let pc = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
        "metadata": {"name": "cloud", "namespace": NS},
        "spec": {"providerRef": {"name": "fixture"}, "config": {"ledgerDir": bed.ledger()},
                 "runner": {"placement": "pods", "serviceAccountName": account}}});
    bed.cp.apply_yaml(NS, &pc.to_string())?;
    let obj = json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
        "metadata": {"name": "cloudy", "namespace": NS},
        "spec": {"providerConfigRef": {"name": "cloud"}, "forProvider": {"name": "cloudy", "size": 1}}});
    bed.cp.apply_yaml(NS, &obj.to_string())?;
    wait_reconciled(
        &bed.cp,
        (NS, "objects.fixture.tf.kraken.dev", "cloudy"),
        WAIT,
    )?;
    let pod = bed.runner_pod_of("kraken-runner-cloud")?;
    let spec = &pod["spec"];
    ensure!(
        spec["serviceAccountName"] == account && spec["automountServiceAccountToken"] == true,
        "{spec}"
    );
    ensure!(
        spec.to_string().contains(ROLE),
        "AWS_ROLE_ARN is set: {spec}"
    );
    expect_the_tokens_are_the_accounts(bed, &pod, account)?;
    bed.cp.kubectl(&[
        "-n",
        NS,
        "delete",
        "objects.fixture.tf.kraken.dev",
        "cloudy",
        "--wait=true",
    ])?;
    Ok(())
}

/// The runner Pod of `account`: the projected web-identity token, and the kubeconfig the
/// kubelet gave it, which is `account` to the API server and may do what it may (nothing).
fn expect_the_tokens_are_the_accounts(
    bed: &PodsBed,
    pod: &Value,
    account: &str,
) -> anyhow::Result<()> {
    let name = pod["metadata"]["name"].as_str().context("pod name")?;
    let dir = bed.kubelet.pod_dir(NS, name);
    let web_token = std::fs::read_to_string(dir.join("volumes/aws-iam-token/token"))
        .context("the projected web-identity token")?;
    ensure!(web_token.split('.').count() == 3, "a JWT: {web_token:.20}");
    let kubeconfig = dir.join("kubeconfig");
    let kubeconfig = kubeconfig.to_string_lossy();
    let whoami = bed.cp.kubectl(&[
        "--kubeconfig",
        &kubeconfig,
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ])?;
    ensure!(
        whoami.trim() == format!("system:serviceaccount:{NS}:{account}"),
        "the runner's token is its account's: {whoami}"
    );
    let kubectl = kraken_tests::TestEnv::load()?.path("KRAKEN_TEST_KUBECTL")?;
    for (verb, what) in [
        ("get", "secrets"),
        ("list", "pods"),
        ("create", "deployments.apps"),
    ] {
        // `can-i` answers no with exit status 1.
        let out = std::process::Command::new(&kubectl)
            .args([
                "--kubeconfig",
                &kubeconfig,
                "auth",
                "can-i",
                verb,
                what,
                "-n",
                NS,
            ])
            .output()?;
        let answer = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.code() == Some(1) && answer.trim() == "no",
            "{verb} {what} as the runner: {answer} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

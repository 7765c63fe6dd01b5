//! A tenant's own cloud identity, end to end: the runner of a ProviderConfig whose
//! ServiceAccount names a role (`eks.amazonaws.com/role-arn`) gets the projected web-identity
//! token, hashicorp/aws in that runner assumes the role through moto's STS
//! (`AssumeRoleWithWebIdentity`), and `aws_caller_identity` read through the ProviderConfig
//! names the tenant's role.
//!
//! The operator has static AWS keys in its environment. The AWS SDK prefers environment keys
//! to a web identity, so had anything of the operator's environment reached the runner, the
//! caller would be the operator's user, not the role.

use anyhow::{Context as _, bail, ensure};
use kraken_tests::moto::{Moto, REGION};
use kraken_tests::operator::aws::{CONVERGE, INSTALL};
use kraken_tests::operator::bed::{condition, describe, is_reconciled};
use kraken_tests::wait_for;
use serde_json::json;

use super::bed::{NS, PodsBed};

const ROLE: &str = "arn:aws:iam::123456789012:role/team-a-deployer";
const ACCOUNT: &str = "team-a-aws";
const CALLERS: &str = "datacalleridentities.data.aws.tf.kraken.dev";

/// The operator's own AWS keys (what a node role or a mounted credentials file would be).
pub fn operator_env() -> Vec<(String, String)> {
    [
        ("AWS_ACCESS_KEY_ID", "AKIAOPERATOR00000000"),
        ("AWS_SECRET_ACCESS_KEY", "operator-secret"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .to_vec()
}

pub fn expect_the_runner_acts_as_its_role(bed: &PodsBed, moto: &Moto) -> anyhow::Result<()> {
    install_aws(bed)?;
    bed.account_with_role(ACCOUNT, ROLE, ACCOUNT)?;
    let endpoint = moto.endpoint();
    // No credentials in the configuration: the runner's environment has the role and token.
    let pc = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
        "metadata": {"name": "aws", "namespace": NS},
        "spec": {"providerRef": {"name": "aws"},
                 "config": {"region": REGION, "skipMetadataApiCheck": "true",
                            "skipRegionValidation": true,
                            "endpoints": [{"sts": endpoint, "iam": endpoint}]},
                 "runner": {"placement": "pods", "serviceAccountName": ACCOUNT}}});
    let me = json!({"apiVersion": "data.aws.tf.kraken.dev/v1alpha1", "kind": "DataCallerIdentity",
        "metadata": {"name": "me", "namespace": NS},
        "spec": {"providerConfigRef": {"name": "aws"}, "forProvider": {}}});
    bed.cp.apply_yaml(NS, &pc.to_string())?;
    bed.cp.apply_yaml(NS, &me.to_string())?;
    let read = wait_for(CONVERGE, "DataCallerIdentity me read", || {
        let obj = bed.cp.get_json(NS, CALLERS, "me")?;
        if is_reconciled(&obj) {
            Ok(Some(obj))
        } else {
            bail!("{}", describe(&obj))
        }
    })?;
    let caller = &read["status"]["atProvider"];
    let arn = caller["arn"].as_str().context("atProvider.arn")?;
    eprintln!("aws_caller_identity through the runner: {arn}");
    ensure!(
        arn.starts_with("arn:aws:sts::123456789012:assumed-role/team-a-deployer/"),
        "the provider acts as the tenant's role: {caller}"
    );
    let pod = bed.runner_pod_of("kraken-runner-aws")?;
    ensure!(
        pod["spec"]["serviceAccountName"] == ACCOUNT,
        "{}",
        pod["spec"]
    );
    Ok(())
}

/// The Provider `aws` from the test mirror, with the one data source.
fn install_aws(bed: &PodsBed) -> anyhow::Result<()> {
    let env = kraken_tests::TestEnv::load()?;
    let mirror = env.path("KRAKEN_TEST_PLUGIN_DIR")?;
    let provider = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "Provider",
        "metadata": {"name": "aws"},
        "spec": {"source": "hashicorp/aws", "mirror": mirror, "dataSources": ["aws_caller_identity"]}});
    bed.cp.apply_yaml("", &provider.to_string())?;
    wait_for(INSTALL, "the Provider aws installed", || {
        let p = bed.cp.get_json("", "providers.core.kraken.dev", "aws")?;
        let crd = bed.cp.get_json_opt("", "crd", CALLERS)?;
        match condition(&p, "Ready") {
            Some((s, r, _)) if s == "True" && r == "Installed" && crd.is_some() => Ok(Some(())),
            other => bail!("Ready {other:?}"),
        }
    })
}

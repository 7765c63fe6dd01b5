//! The native EC2 path under the chart's identity.

use anyhow::{bail, ensure};
use kraken_tests::ControlPlane;
use kraken_tests::operator::bed::yaml_documents;
use kraken_tests::wait_for;
use serde_json::json;

use super::{CONVERGE, TEAM, reconciled};

/// The native EC2 path under the chart's identity: an AwsConfig with credentials from a
/// Secret, an EC2Instance launched in moto (seen there, not through Kraken), then deleted and
/// its instance terminated.
pub fn native_ec2(cp: &ControlPlane) -> anyhow::Result<()> {
    use kraken_tests::moto::{AMI, Ec2Probe, Moto, REGION};
    let moto = Moto::start(cp.run_dir())?;
    let probe = Ec2Probe::new(&moto.endpoint())?;
    let docs = [
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "aws-creds", "namespace": TEAM},
               "stringData": {"accessKeyId": "testing", "secretAccessKey": "testing"}}),
        json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "AwsConfig",
               "metadata": {"name": "moto", "namespace": TEAM},
               "spec": {"region": REGION, "endpoint": moto.endpoint(), "credentials": {
                   "accessKeyIdSecretRef": {"name": "aws-creds", "key": "accessKeyId"},
                   "secretAccessKeySecretRef": {"name": "aws-creds", "key": "secretAccessKey"}}}}),
        json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "EC2Instance",
               "metadata": {"name": "vm", "namespace": TEAM},
               "spec": {"awsConfigRef": {"name": "moto"}, "imageId": AMI,
                        "instanceType": "t3.micro", "count": 1}}),
    ];
    cp.apply_yaml(TEAM, &yaml_documents(&docs))?;
    let ec2 = "ec2instances.aws.kraken.dev";
    let vm = reconciled(cp, ec2, "vm")?;
    let uid = vm["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let live = probe.owned_live(&uid)?;
    ensure!(
        live.len() == 1 && live[0].state == "running" && live[0].image_id == AMI,
        "moto holds {live:?}"
    );
    cp.kubectl(&["-n", TEAM, "delete", ec2, "vm", "--wait=false"])?;
    wait_for(
        CONVERGE,
        "the EC2Instance gone and its instance terminated",
        || {
            let gone = cp.get_json_opt(TEAM, ec2, "vm")?.is_none();
            let left = probe.owned_live(&uid)?.len();
            if gone && left == 0 {
                Ok(Some(()))
            } else {
                bail!("object gone: {gone}, live instances: {left}")
            }
        },
    )?;
    Ok(())
}

//! An EC2Instance in the dependency hub: it takes its subnet from another resource's
//! StateDeclaration and gives its private IP to a ConfigExport; deletion follows the graph.

use anyhow::{Context as _, bail, ensure};
use kraken_tests::moto::AMI;
use kraken_tests::operator::bed::describe;
use kraken_tests::operator::condition;
use kraken_tests::wait_for;
use serde_json::json;

use super::{CONVERGE, EC2, Ec2Bed, ids, manifest};

/// A mixed graph: the subnet id comes from another resource's StateDeclaration (a fixture
/// Object), and a ConfigExport writes the instance's private IP into a ConfigMap. Deleting
/// all three at once tears down in dependency order.
#[test]
fn an_instance_takes_and_gives_values_through_the_hub() -> anyhow::Result<()> {
    let eb = Ec2Bed::start("ec2-graph")?;
    let result = (|| -> anyhow::Result<()> {
        let ns = eb.ns().to_string();
        let subnet = eb.probe.create_subnet("10.20.0.0/24")?;
        eb.apply(&[
            json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
                   "metadata": {"name": "net", "namespace": ns},
                   "spec": {"forProvider": {"name": subnet, "size": 1}}}),
            manifest(&ns, "app", json!({"awsConfigRef": {"name": "moto"}, "imageId": AMI, "instanceType": "t3.micro",
                "valuesFrom": [{"path": "subnetId", "resource": {"kind": "Object", "name": "net", "path": "name"}},
                               {"path": "tags.subnet", "resource": {"kind": "Object", "name": "net", "path": "name"}}]})),
            json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ConfigExport",
                   "metadata": {"name": "app-endpoint", "namespace": ns},
                   "spec": {"target": {"kind": "ConfigMap", "name": "app-endpoint"},
                            "data": [{"key": "privateIp", "resource": {"kind": "EC2Instance", "name": "app", "path": "instances.0.privateIp"}},
                                     {"key": "url", "template": "http://${resource:EC2Instance/app:instances.0.privateIp}:8080"}]}}),
        ])?;
        let obj = eb.wait_reconciled("app", "running", |o| o["status"]["running"] == 1)?;
        let id = ids(&obj)[0].clone();
        let s = eb.probe.instance(&id)?;
        ensure!(
            s.subnet_id == subnet,
            "launched into {} instead of {subnet}",
            s.subnet_id
        );
        ensure!(s.tags.get("subnet") == Some(&subnet), "{:?}", s.tags);
        let ip = s.private_ip.clone();
        wait_for(
            CONVERGE,
            "the ConfigMap app-endpoint with the private IP",
            || {
                let cm = eb
                    .bed
                    .cp
                    .get_json_opt(&ns, "configmap", "app-endpoint")?
                    .context("no ConfigMap yet")?;
                if cm["data"]["privateIp"] == ip.as_str()
                    && cm["data"]["url"] == format!("http://{ip}:8080").as_str()
                {
                    Ok(Some(()))
                } else {
                    bail!("data {}", cm["data"])
                }
            },
        )?;

        expect_teardown_in_dependency_order(&eb, &id)
    })();
    eb.finish(result)
}

/// All at once: the Object waits for the EC2Instance, which waits for the ConfigExport; the
/// instance `id` ends terminated.
fn expect_teardown_in_dependency_order(eb: &Ec2Bed, id: &str) -> anyhow::Result<()> {
    let ns = eb.ns();
    eb.bed.cp.kubectl(&[
        "delete",
        "-n",
        ns,
        "--wait=false",
        "objects.fixture.tf.kraken.dev/net",
        &format!("{EC2}/app"),
        "configexports.core.kraken.dev/app-endpoint",
    ])?;
    let (message, _) = wait_for(CONVERGE, "the Object net to wait InUse", || {
        let o = eb
            .bed
            .cp
            .get_json_opt(ns, "objects.fixture.tf.kraken.dev", "net")?;
        match o.as_ref().and_then(|o| condition(o, "Ready")) {
            Some((_, r, m)) if r == "InUse" => Ok(Some((m, ()))),
            other => bail!("net Ready {other:?}"),
        }
    })?;
    ensure!(message.contains("ec2instance-app"), "{message}");
    eb.wait_gone("app")?;
    wait_for(CONVERGE, "the Object net to be gone", || {
        match eb
            .bed
            .cp
            .get_json_opt(ns, "objects.fixture.tf.kraken.dev", "net")?
        {
            None => Ok(Some(())),
            Some(o) => bail!("{}", describe(&o)),
        }
    })?;
    ensure!(
        eb.probe.instance(id)?.state == "terminated",
        "{id} still runs"
    );
    Ok(())
}

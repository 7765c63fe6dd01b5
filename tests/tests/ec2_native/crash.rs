//! A crash during a create: the operator is SIGKILLed while RunInstances is on its way, and
//! its successor finds the instance by its tags.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::delay_proxy::DelayProxy;
use kraken_tests::moto::AMI;
use kraken_tests::wait_for;
use serde_json::json;

use super::{CONVERGE, Ec2Bed, uid};

/// The operator is SIGKILLed while RunInstances is on its way (held by a proxy, then carried
/// out by EC2 with nobody to read the answer); its successor finds the instance by its tags
/// and launches nothing twice.
#[test]
fn a_crash_during_create_leaves_no_duplicate() -> anyhow::Result<()> {
    let mut eb = Ec2Bed::start("ec2-crash")?;
    let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], eb.moto.port));
    let proxy = DelayProxy::start(upstream, "Action=RunInstances")?;
    let result = (|| -> anyhow::Result<()> {
        eb.aws_config("slow", &proxy.endpoint())?;
        proxy
            .delay_ms
            .store(4000, std::sync::atomic::Ordering::Relaxed);
        eb.instance(
            "crash",
            json!({"awsConfigRef": {"name": "slow"}, "imageId": AMI, "instanceType": "t3.micro", "count": 3}),
        )?;
        let held = || proxy.held.load(std::sync::atomic::Ordering::Relaxed);
        let answered = || proxy.answered.load(std::sync::atomic::Ordering::Relaxed);
        wait_for(CONVERGE, "a RunInstances request at the proxy", || {
            if held() >= 1 {
                Ok(Some(()))
            } else {
                bail!("none yet")
            }
        })?;
        eb.bed.op.kill()?;
        let in_flight = held();
        wait_for(
            Duration::from_secs(30),
            "the held launches to reach moto",
            || {
                if answered() >= in_flight {
                    Ok(Some(()))
                } else {
                    bail!("{} of {in_flight} answered", answered())
                }
            },
        )?;
        let obj = eb.get("crash")?.context("gone")?;
        let uid = uid(&obj);
        let before = eb.probe.owned_live(&uid)?.len();
        ensure!(
            before >= 1,
            "the interrupted launch did not happen ({before} instances)"
        );
        proxy
            .delay_ms
            .store(0, std::sync::atomic::Ordering::Relaxed);
        eb.bed.op.restart()?;
        eb.bed.op.wait_ready(Duration::from_secs(60))?;
        eb.wait_reconciled("crash", "with 3 running", |o| o["status"]["running"] == 3)?;
        let all = eb.probe.instances(&[("tag:kraken.dev/owner-uid", &uid)])?;
        ensure!(
            all.len() == 3,
            "{} instances were launched for 3 (killed with {in_flight} in flight): {all:?}",
            all.len()
        );
        let mut indices: Vec<String> = all
            .iter()
            .filter_map(|i| i.tags.get("kraken.dev/index").cloned())
            .collect();
        indices.sort();
        ensure!(indices == ["0", "1", "2"], "indices {indices:?}");
        // The killed operator never read the answer of its launch, so the one found again has
        // no Launched Event: only the launches after the restart do.
        let launched: Vec<String> = eb
            .events("crash")?
            .into_iter()
            .filter(|(r, _)| r == "Launched")
            .map(|(_, m)| m)
            .collect();
        eprintln!(
            "killed with {in_flight} launch(es) in flight, {before} instance(s) then; Launched after the restart: {launched:?}"
        );
        ensure!(
            launched.len() == 3 - before,
            "Launched events {launched:?} with {before} launched before the kill"
        );
        Ok(())
    })();
    eb.finish(result)
}

//! Instances launched outside Kraken: adopted by `importIds` only when tagged as adoptable by
//! the resource (no second launch), left running by `deletionPolicy: Orphan`; an id that does
//! not exist, or another team's instance, is refused and never touched.

use anyhow::ensure;
use kraken_tests::moto::AMI;
use serde_json::json;

use super::{EC2, Ec2Bed, ids, uid};

/// importIds adopts an instance launched outside Kraken (no second launch); Orphan leaves it
/// running; an id that does not exist is reported.
#[test]
fn existing_instances_are_adopted_and_orphaned() -> anyhow::Result<()> {
    let eb = Ec2Bed::start("ec2-adopt")?;
    let result = (|| -> anyhow::Result<()> {
        let ns = eb.ns().to_string();
        // Tagged by whoever runs it in EC2 as theirs to hand over to `<namespace>/legacy`.
        let adoptable = format!("{ns}/legacy");
        let id = eb.probe.run(
            AMI,
            &[("team", "legacy"), ("kraken.dev/adoptable-by", &adoptable)],
        )?;
        eb.instance(
            "legacy",
            json!({"imageId": AMI, "instanceType": "t3.micro", "importIds": [id],
                   "tags": {"team": "legacy"}, "deletionPolicy": "Orphan"}),
        )?;
        let obj = eb.wait_reconciled("legacy", "adopted", |o| o["status"]["running"] == 1)?;
        ensure!(ids(&obj) == [id.clone()], "status ids {:?}", ids(&obj));
        let uid = uid(&obj);
        let live = eb.probe.owned_live(&uid)?;
        ensure!(live.len() == 1 && live[0].id == id, "{live:?}");
        ensure!(
            eb.probe.instances(&[])?.len() == 1,
            "a second instance was launched"
        );
        eb.wait_event("legacy", "Adopted", &id)?;

        eb.bed
            .cp
            .kubectl(&["delete", EC2, "legacy", "-n", &ns, "--wait=false"])?;
        eb.wait_gone("legacy")?;
        let s = eb.probe.instance(&id)?;
        ensure!(s.state == "running", "orphaned instance is {}", s.state);

        eb.instance(
            "ghost",
            json!({"imageId": AMI, "instanceType": "t3.micro", "importIds": ["i-00000000000000000"]}),
        )?;
        let (message, _) = eb.wait_condition("ghost", "Synced", "False", "ImportFailed")?;
        ensure!(
            message.contains("i-00000000000000000") && message.contains("does not exist"),
            "{message}"
        );
        ensure!(
            eb.probe.instances(&[])?.len() == 1,
            "ghost launched something"
        );

        // The hostile tenant: another team's production instance, untagged. Naming it in
        // importIds must neither take it over nor, on delete, terminate it.
        let prod = eb.probe.run(AMI, &[("team", "payments")])?;
        eb.instance(
            "grab",
            json!({"imageId": AMI, "instanceType": "t3.micro", "importIds": [prod]}),
        )?;
        let (message, _) = eb.wait_condition("grab", "Synced", "False", "ImportFailed")?;
        ensure!(
            message.contains(&prod) && message.contains("kraken.dev/adoptable-by"),
            "{message}"
        );
        let before = eb.probe.instance(&prod)?;
        eb.bed
            .cp
            .kubectl(&["delete", EC2, "grab", "-n", &ns, "--wait=false"])?;
        eb.wait_gone("grab")?;
        let after = eb.probe.instance(&prod)?;
        ensure!(
            after.state == "running" && after.tags == before.tags,
            "the untagged instance was touched: {after:?}"
        );
        Ok(())
    })();
    eb.finish(result)
}

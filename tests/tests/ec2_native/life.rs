//! An EC2Instance's whole life against the emulator: create with count 3, scale to 1, retag,
//! resize, security groups, a refused then a carried-out replacement, drift (tags changed,
//! instance stopped, instance terminated through the EC2 API), delete.

use anyhow::{bail, ensure};
use kraken_tests::moto::{AMI, AMI_2, Seen};
use kraken_tests::wait_for;
use serde_json::json;

use super::{CONVERGE, EC2, Ec2Bed, ids, manifest, uid};

/// Create with count 3, scale to 1, retag, resize, a refused then a carried-out replacement,
/// drift (tags changed, instance stopped, instance terminated through the EC2 API), delete.
#[test]
fn an_ec2_instance_lives_its_whole_life_against_the_emulator() -> anyhow::Result<()> {
    let eb = Ec2Bed::start("ec2-life")?;
    let result = (|| -> anyhow::Result<()> {
        let (uid, seen) = create_three(&eb)?;

        // Scale down: the highest indices go.
        eb.patch("web", json!({"count": 1}))?;
        eb.wait_reconciled("web", "scaled to 1", |o| ids(o).len() == 1)?;
        let left = eb.probe.owned_live(&uid)?;
        ensure!(
            left.len() == 1 && left[0].id == seen[0].id,
            "after scale-down: {left:?}"
        );
        for s in &seen[1..] {
            ensure!(
                eb.probe.instance(&s.id)?.state == "terminated",
                "{} not terminated",
                s.id
            );
        }
        let id = seen[0].id.clone();
        change_in_place(&eb, &id)?;
        let new_id = refuse_then_replace(&eb, &uid, &id)?;
        correct_drift(&eb, &uid, &new_id)?;

        // Delete: terminated, and the published outputs go with the object.
        eb.bed
            .cp
            .kubectl(&["delete", EC2, "web", "-n", eb.ns(), "--wait=false"])?;
        eb.wait_gone("web")?;
        ensure!(
            eb.probe.owned_live(&uid)?.is_empty(),
            "instances left: {:?}",
            eb.probe.owned_live(&uid)?
        );
        ensure!(
            eb.bed
                .cp
                .get_json_opt(
                    eb.ns(),
                    "statedeclarations.core.kraken.dev",
                    "ec2instance-web.aws.kraken.dev"
                )?
                .is_none(),
            "the StateDeclaration outlived its producer"
        );
        Ok(())
    })();
    eb.finish(result)
}

/// `web` with count 3, published although nothing reads it yet (the annotation), to check
/// what it says: three running instances in moto, in status and in the StateDeclaration.
/// Returns its uid and what moto holds.
fn create_three(eb: &Ec2Bed) -> anyhow::Result<(String, Vec<Seen>)> {
    let ns = eb.ns();
    let mut web = manifest(
        ns,
        "web",
        json!({"imageId": AMI, "instanceType": "t3.micro", "count": 3,
               "tags": {"team": "a"}, "rootVolume": {"size": 20, "type": "gp3"},
               "driftInterval": "2s", "awsConfigRef": {"name": "moto"}}),
    );
    web["metadata"]["annotations"] = json!({"kraken.dev/publish": "true"});
    eb.apply(&[web])?;
    let obj = eb.wait_reconciled("web", "with 3 running", |o| o["status"]["running"] == 3)?;
    let uid = uid(&obj);
    let seen = eb.probe.owned_live(&uid)?;
    ensure!(
        seen.len() == 3,
        "moto holds {} live instances: {seen:?}",
        seen.len()
    );
    for (i, s) in seen.iter().enumerate() {
        ensure!(
            s.state == "running" && s.instance_type == "t3.micro" && s.image_id == AMI,
            "{s:?}"
        );
        ensure!(s.tags.get("team").map(String::as_str) == Some("a"), "{s:?}");
        ensure!(
            s.tags.get("kraken.dev/index") == Some(&i.to_string()),
            "{s:?}"
        );
    }
    let status = &obj["status"]["instances"];
    for i in 0..3 {
        let entry = &status[i];
        let s = &seen[i];
        ensure!(
            entry["id"] == s.id.as_str() && entry["privateIp"] == s.private_ip.as_str(),
            "status {entry} vs moto {s:?}"
        );
        ensure!(
            !s.private_ip.is_empty() && entry["publicDns"].as_str().is_some_and(|d| !d.is_empty()),
            "{entry}"
        );
    }
    // The StateDeclaration publishes the instances for references like instances.0.privateIp.
    let sd = eb.bed.cp.get_json(
        ns,
        "statedeclarations.core.kraken.dev",
        "ec2instance-web.aws.kraken.dev",
    )?;
    ensure!(
        sd["spec"]["outputs"]["instances"][0]["privateIp"] == seen[0].private_ip.as_str(),
        "{sd}"
    );
    ensure!(
        sd["spec"]["outputs"]["ids"].as_array().map(Vec::len) == Some(3),
        "{sd}"
    );
    let launched = eb
        .events("web")?
        .iter()
        .filter(|(r, _)| r == "Launched")
        .count();
    ensure!(launched == 3, "Launched events: {:?}", eb.events("web")?);
    Ok((uid, seen))
}

/// Tags, instance type (stop, modify, start) and security groups, each in place on the same
/// instance `id`.
fn change_in_place(eb: &Ec2Bed, id: &str) -> anyhow::Result<()> {
    eb.patch("web", json!({"tags": {"team": "b", "env": "dev"}}))?;
    wait_for(CONVERGE, "tags team=b env=dev in moto", || {
        let s = eb.probe.instance(id)?;
        if s.tags.get("team").map(String::as_str) == Some("b")
            && s.tags.get("env").map(String::as_str) == Some("dev")
        {
            Ok(Some(()))
        } else {
            bail!("tags {:?}", s.tags)
        }
    })?;

    eb.patch("web", json!({"instanceType": "t3.small"}))?;
    eb.wait_reconciled("web", "resized", |o| {
        o["status"]["instances"][0]["instanceType"] == "t3.small"
    })?;
    let s = eb.probe.instance(id)?;
    ensure!(
        s.instance_type == "t3.small" && s.state == "running",
        "{s:?}"
    );
    eb.wait_event("web", "Resized", id)?;

    let sg = eb.probe.create_security_group("web")?;
    eb.patch("web", json!({"securityGroupIds": [sg]}))?;
    wait_for(CONVERGE, "the security group set in moto", || {
        let s = eb.probe.instance(id)?;
        if s.security_groups == [sg.clone()] {
            Ok(Some(()))
        } else {
            bail!("groups {:?}", s.security_groups)
        }
    })?;
    eb.wait_reconciled("web", "with the group", |o| ids(o) == [id.to_owned()])?;
    Ok(())
}

/// An image change with replacePolicy Refuse: shown in status, not carried out. Allowed:
/// replaced, the new one first. Returns the new instance's id.
fn refuse_then_replace(eb: &Ec2Bed, uid: &str, id: &str) -> anyhow::Result<String> {
    eb.patch("web", json!({"imageId": AMI_2, "replacePolicy": "Refuse"}))?;
    let (message, obj) = eb.wait_condition("web", "Synced", "False", "ReplaceRefused")?;
    ensure!(
        message.contains(id) && message.contains("imageId"),
        "{message}"
    );
    ensure!(
        obj["status"]["lastPlan"]["action"] == "Replace",
        "{}",
        obj["status"]["lastPlan"]
    );
    ensure!(
        obj["status"]["lastPlan"]["paths"] == json!(["imageId"]),
        "{}",
        obj["status"]["lastPlan"]
    );
    ensure!(
        obj["status"]["lastPlan"]["instances"] == json!([id]),
        "{}",
        obj["status"]["lastPlan"]
    );
    let live = eb.probe.owned_live(uid)?;
    ensure!(
        live.len() == 1 && live[0].id == id && live[0].image_id == AMI,
        "{live:?}"
    );

    eb.patch("web", json!({"replacePolicy": "Replace"}))?;
    let obj = eb.wait_reconciled("web", "replaced", |o| {
        o["status"]["instances"][0]["imageId"] == AMI_2
    })?;
    let new_id = ids(&obj)[0].clone();
    ensure!(new_id != id, "not replaced: {new_id}");
    ensure!(
        eb.probe.instance(id)?.state == "terminated",
        "the old instance {id} still runs"
    );
    let live = eb.probe.owned_live(uid)?;
    ensure!(
        live.len() == 1 && live[0].id == new_id && live[0].image_id == AMI_2,
        "{live:?}"
    );
    eb.wait_event("web", "Replacing", id)?;
    Ok(new_id)
}

/// Drift, through the EC2 API behind Kraken's back: tags reverted, a stopped instance
/// started, a terminated one relaunched.
fn correct_drift(eb: &Ec2Bed, uid: &str, new_id: &str) -> anyhow::Result<()> {
    eb.probe.set_tag(new_id, "team", "hacked")?;
    eb.probe.set_tag(new_id, "added-by-hand", "x")?;
    wait_for(CONVERGE, "tags reverted in moto", || {
        let s = eb.probe.instance(new_id)?;
        if s.tags.get("team").map(String::as_str) == Some("b")
            && !s.tags.contains_key("added-by-hand")
        {
            Ok(Some(()))
        } else {
            bail!("tags {:?}", s.tags)
        }
    })?;
    eb.wait_event("web", "DriftCorrected", "reverted")?;
    eb.probe.stop(new_id)?;
    wait_for(CONVERGE, "the stopped instance started again", || {
        let s = eb.probe.instance(new_id)?;
        if s.state == "running" {
            Ok(Some(()))
        } else {
            bail!("state {}", s.state)
        }
    })?;
    eb.wait_event("web", "DriftCorrected", "stopped outside Kraken")?;
    eb.probe.terminate(new_id)?;
    let obj = eb.wait_reconciled("web", "relaunched", |o| {
        ids(o).first().is_some_and(|i| *i != new_id)
    })?;
    let relaunched = ids(&obj)[0].clone();
    let live = eb.probe.owned_live(uid)?;
    ensure!(live.len() == 1 && live[0].id == relaunched, "{live:?}");
    eb.wait_event("web", "DriftCorrected", "terminated outside Kraken")?;
    Ok(())
}

//! What users give the EC2Instance: bad input refused at admission or reported by condition
//! and Event (nothing launched, and a fix converges), and user data from a Secret, which
//! reaches the instance and nothing else.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::moto::{AMI, REGION};
use kraken_tests::operator::condition;
use serde_json::{Value, json};

use super::{EC2, Ec2Bed, ids, manifest};

/// Every input a user can get wrong: refused at admission where the schema can tell, else a
/// condition and an Event naming the problem, and nothing launched.
#[test]
fn bad_input_gets_a_clear_condition() -> anyhow::Result<()> {
    let eb = Ec2Bed::start("ec2-bad")?;
    let result = (|| -> anyhow::Result<()> {
        expect_refused_at_admission(&eb)?;
        expect_conditions_name_the_problem(&eb)?;
        ensure!(
            eb.probe.instances(&[])?.is_empty(),
            "something was launched: {:?}",
            eb.probe.instances(&[])?
        );

        // Fixing the input converges: the AMI; the AwsConfig it names, created late (an
        // AwsConfig change is watched: no wait for the next retry).
        eb.patch("bad-ami", json!({"imageId": AMI}))?;
        eb.wait_reconciled("bad-ami", "after the AMI was fixed", |_| true)?;
        eb.aws_config("missing", &eb.moto.endpoint())?;
        let fixed = std::time::Instant::now();
        eb.wait_reconciled("no-config", "after its AwsConfig was created", |_| true)?;
        eprintln!(
            "no-config converged {:.1}s after its AwsConfig appeared",
            fixed.elapsed().as_secs_f64()
        );
        // By now its retries are 30 s or more apart: this is the watch, not the backoff.
        ensure!(
            fixed.elapsed() < Duration::from_secs(20),
            "no-config took {:?} to see its new AwsConfig",
            fixed.elapsed()
        );
        Ok(())
    })();
    eb.finish(result)
}

/// What the schema can tell is refused at admission, with the reason.
fn expect_refused_at_admission(eb: &Ec2Bed) -> anyhow::Result<()> {
    let ns = eb.ns();
    let refused = |name: &str, spec: Value, want: &str| -> anyhow::Result<()> {
        match eb
            .bed
            .cp
            .try_apply_yaml(ns, &manifest(ns, name, spec).to_string())?
        {
            Ok(out) => bail!("{name} was admitted: {out}"),
            Err(e) => ensure!(e.contains(want), "{name}: expected {want:?} in {e}"),
        }
        Ok(())
    };
    refused(
        "no-image",
        json!({"instanceType": "t3.micro"}),
        "spec.imageId is required",
    )?;
    refused(
        "twice",
        json!({"imageId": AMI, "instanceType": "t3.micro",
               "valuesFrom": [{"path": "imageId", "configMapKeyRef": {"name": "x", "key": "y"}}]}),
        "set both in spec and in spec.valuesFrom",
    )?;
    refused(
        "bogus-path",
        json!({"imageId": AMI, "instanceType": "t3.micro",
               "valuesFrom": [{"path": "flavour", "configMapKeyRef": {"name": "x", "key": "y"}}]}),
        "names an argument EC2Instance does not have",
    )?;
    refused(
        "too-many-imports",
        json!({"imageId": AMI, "instanceType": "t3.micro", "count": 1, "importIds": ["i-1", "i-2"]}),
        "at most spec.count ids",
    )?;
    refused(
        "reserved-tag",
        json!({"imageId": AMI, "instanceType": "t3.micro", "tags": {"kraken.dev/index": "7"}}),
        "reserved",
    )
}

/// The spec with `extra`'s fields set over a valid base.
fn with(extra: Value) -> Value {
    let mut s = json!({"imageId": AMI, "instanceType": "t3.micro"});
    if let (Some(m), Some(e)) = (s.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    s
}

/// What only EC2 or the AwsConfig can tell: Synced=False with the reason, an Event saying it,
/// Ready=False.
fn expect_conditions_name_the_problem(eb: &Ec2Bed) -> anyhow::Result<()> {
    let ns = eb.ns();
    let free = kraken_tests::operator::free_port()?;
    eb.aws_config("down", &format!("http://127.0.0.1:{free}"))?;
    // A tenant's AwsConfig aimed at the cloud metadata endpoint (or any host the tenant
    // picks) is refused before a request is signed.
    eb.aws_config("imds", "http://169.254.169.254")?;
    eb.apply(&[
        json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "AwsConfig",
        "metadata": {"name": "no-secret", "namespace": ns},
        "spec": {"region": REGION, "endpoint": eb.moto.endpoint(), "credentials": {
            "accessKeyIdSecretRef": {"name": "absent", "key": "id"},
            "secretAccessKeySecretRef": {"name": "absent", "key": "secret"}}}}),
    ])?;
    let cases = [
        (
            "bad-ami",
            with(json!({"imageId": "ami-00000000000000000"})),
            "InvalidParameter",
            "InvalidAMIID",
        ),
        (
            "bad-subnet",
            with(json!({"subnetId": "subnet-00000000000000000"})),
            "InvalidParameter",
            "InvalidSubnetID",
        ),
        (
            "no-config",
            with(json!({"awsConfigRef": {"name": "missing"}})),
            "AwsConfigMissing",
            "AwsConfig missing",
        ),
        (
            "no-secret",
            with(json!({"awsConfigRef": {"name": "no-secret"}})),
            "SecretMissing",
            "Secret absent",
        ),
        (
            "unreachable",
            with(json!({"awsConfigRef": {"name": "down"}})),
            "EndpointUnreachable",
            "cannot be reached",
        ),
        (
            "imds",
            with(json!({"awsConfigRef": {"name": "imds"}})),
            "EndpointNotAllowed",
            "169.254.169.254",
        ),
    ];
    for (name, spec, _, _) in &cases {
        eb.instance(name, spec.clone())?;
    }
    // No AwsConfig: it would be the operator's own credentials, which it does not lend.
    eb.apply(&[manifest(ns, "no-creds", with(json!({})))])?;
    for (name, _, reason, text) in &cases {
        let (message, _) = eb.wait_condition(name, "Synced", "False", reason)?;
        ensure!(message.contains(text), "{name}: {message}");
        eb.wait_event(name, reason, text)?;
        let (ready, _, _) =
            condition(&eb.get(name)?.context("gone")?, "Ready").context("no Ready")?;
        ensure!(ready == "False", "{name} is Ready={ready}");
    }
    let (message, _) = eb.wait_condition("no-creds", "Synced", "False", "CredentialsRequired")?;
    ensure!(message.contains("--aws-ambient-credentials"), "{message}");
    Ok(())
}

/// User data from a Secret reaches the instance and nothing else: not the EC2Instance, its
/// DependencyRequest, its StateDeclaration, Events or the operator log.
#[test]
fn user_data_from_a_secret_never_shows() -> anyhow::Result<()> {
    let eb = Ec2Bed::start("ec2-secret")?;
    let result = (|| -> anyhow::Result<()> {
        let ns = eb.ns().to_string();
        let secret = "#!/bin/sh\necho TOPSECRET-7f3a1c";
        eb.apply(&[json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "boot", "namespace": ns},
                          "stringData": {"script": secret}})])?;
        eb.instance(
            "boot",
            json!({"imageId": AMI, "instanceType": "t3.micro",
                   "valuesFrom": [{"path": "userData", "secretKeyRef": {"name": "boot", "key": "script"}}]}),
        )?;
        let obj = eb.wait_reconciled("boot", "running", |o| o["status"]["running"] == 1)?;
        let id = ids(&obj)[0].clone();
        ensure!(
            eb.probe.user_data(&id)?.as_deref() == Some(secret),
            "user data did not reach EC2"
        );
        let needle = "TOPSECRET-7f3a1c";
        let mut places = vec![
            (
                "EC2Instance".to_string(),
                eb.bed
                    .cp
                    .kubectl(&["get", EC2, "boot", "-n", &ns, "-o", "json"])?,
            ),
            (
                "DependencyRequest".into(),
                eb.bed.cp.kubectl(&[
                    "get",
                    "dependencyrequests.core.kraken.dev",
                    "-n",
                    &ns,
                    "-o",
                    "json",
                ])?,
            ),
            (
                "StateDeclaration".into(),
                eb.bed.cp.kubectl(&[
                    "get",
                    "statedeclarations.core.kraken.dev",
                    "-n",
                    &ns,
                    "-o",
                    "json",
                ])?,
            ),
            (
                "Events".into(),
                eb.bed
                    .cp
                    .kubectl(&["get", "events", "-n", &ns, "-o", "json"])?,
            ),
            ("operator log".into(), eb.bed.op.logs()?),
        ];
        places.retain(|(_, text)| text.contains(needle));
        ensure!(
            places.is_empty(),
            "the user data shows in {:?}",
            places.iter().map(|(p, _)| p).collect::<Vec<_>>()
        );
        Ok(())
    })();
    eb.finish(result)
}

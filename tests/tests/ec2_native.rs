//! The native EC2 path end to end (docs/operator.md, "Native EC2"): a real kube-apiserver +
//! etcd, `kraken operator` as a process, and moto's EC2 server on loopback as the cloud. Every
//! assertion about instances reads moto through aws-sdk-ec2 directly ([`Ec2Probe`]), the way a
//! user with the AWS CLI would see them.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::delay_proxy::DelayProxy;
use kraken_tests::moto::{AMI, AMI_2, Ec2Probe, Moto, REGION};
use kraken_tests::operator::bed::{describe, is_reconciled, yaml_documents};
use kraken_tests::operator::{FixtureBed, OperatorOptions, condition};
use kraken_tests::wait_for;
use serde_json::{Value, json};

const EC2: &str = "ec2instances.aws.kraken.dev";
const CONVERGE: Duration = Duration::from_secs(90);

/// A fixture bed (control plane, core CRDs, operator) with moto beside it, an AwsConfig
/// `moto` (region, endpoint, credentials from the Secret `aws-creds`) and a probe.
struct Ec2Bed {
    probe: Ec2Probe,
    bed: FixtureBed,
    moto: Moto,
}

impl Ec2Bed {
    fn start(name: &str) -> anyhow::Result<Self> {
        let opts = OperatorOptions {
            rust_log: "info,kraken_bridge=debug,kraken_bridge::provider::launch=info".into(),
            env: kraken_tests::moto::operator_env()?,
            // moto (and the tests' closed ports and delay proxies) on loopback; the operator
            // lends no credentials of its own.
            args: vec!["--aws-endpoint".into(), "http://127.0.0.1:*".into()],
            ..OperatorOptions::default()
        };
        let bed = FixtureBed::start(name, opts)?;
        let moto = Moto::start(bed.cp.run_dir())?;
        let probe = Ec2Probe::new(&moto.endpoint())?;
        let this = Self { probe, bed, moto };
        this.aws_config("moto", &this.moto.endpoint())?;
        Ok(this)
    }

    fn ns(&self) -> &str {
        &self.bed.ns
    }

    /// The Secret `aws-creds` and the AwsConfig `name` reaching `endpoint`.
    fn aws_config(&self, name: &str, endpoint: &str) -> anyhow::Result<()> {
        let ns = self.ns();
        self.apply(&[
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "aws-creds", "namespace": ns},
                   "stringData": {"accessKeyId": "testing", "secretAccessKey": "testing"}}),
            json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "AwsConfig",
                   "metadata": {"name": name, "namespace": ns},
                   "spec": {"region": REGION, "endpoint": endpoint, "credentials": {
                       "accessKeyIdSecretRef": {"name": "aws-creds", "key": "accessKeyId"},
                       "secretAccessKeySecretRef": {"name": "aws-creds", "key": "secretAccessKey"}}}}),
        ])
    }

    fn apply(&self, docs: &[Value]) -> anyhow::Result<()> {
        self.bed.apply(&yaml_documents(docs))?;
        Ok(())
    }

    /// Applies the EC2Instance `name` with `spec` (awsConfigRef `moto` unless given).
    fn instance(&self, name: &str, mut spec: Value) -> anyhow::Result<()> {
        if spec.get("awsConfigRef").is_none() {
            spec["awsConfigRef"] = json!({"name": "moto"});
        }
        self.apply(&[manifest(self.ns(), name, spec)])
    }

    fn get(&self, name: &str) -> anyhow::Result<Option<Value>> {
        self.bed.cp.get_json_opt(self.ns(), EC2, name)
    }

    fn patch(&self, name: &str, spec: Value) -> anyhow::Result<()> {
        let patch = json!({"spec": spec}).to_string();
        self.bed.cp.kubectl(&[
            "patch",
            EC2,
            name,
            "-n",
            self.ns(),
            "--type",
            "merge",
            "-p",
            &patch,
        ])?;
        Ok(())
    }

    /// Waits until the EC2Instance is Ready/Available and Synced/ReconcileSuccess at its
    /// generation and `check` holds.
    fn wait_reconciled(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        wait_for(CONVERGE, &format!("EC2Instance {name} {what}"), || {
            let obj = self.get(name)?.context("does not exist")?;
            if is_reconciled(&obj) && check(&obj) {
                Ok(Some(obj))
            } else {
                bail!(
                    "{}; instances {}",
                    describe(&obj),
                    obj["status"]["instances"]
                )
            }
        })
    }

    fn wait_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: &str,
    ) -> anyhow::Result<(String, Value)> {
        wait_for(
            CONVERGE,
            &format!("EC2Instance {name} {type_}={status}/{reason}"),
            || {
                let obj = self.get(name)?.context("does not exist")?;
                match condition(&obj, type_) {
                    Some((s, r, m)) if s == status && r == reason => Ok(Some((m, obj))),
                    other => bail!("{type_} is {other:?}"),
                }
            },
        )
    }

    fn wait_gone(&self, name: &str) -> anyhow::Result<()> {
        wait_for(
            CONVERGE,
            &format!("EC2Instance {name} to be gone"),
            || match self.get(name)? {
                None => Ok(Some(())),
                Some(obj) => bail!("still there: {}", describe(&obj)),
            },
        )
    }

    fn events(&self, name: &str) -> anyhow::Result<Vec<(String, String)>> {
        self.bed.events(name)
    }

    /// Waits for an Event about `name` with `reason` whose message contains `text`.
    fn wait_event(&self, name: &str, reason: &str, text: &str) -> anyhow::Result<String> {
        wait_for(
            CONVERGE,
            &format!("an Event {reason} about {name} saying {text:?}"),
            || {
                let events = self.events(name)?;
                match events.iter().find(|(r, m)| r == reason && m.contains(text)) {
                    Some((_, m)) => Ok(Some(m.clone())),
                    None => bail!("Events: {events:?}"),
                }
            },
        )
    }

    fn finish<T>(&self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        self.bed.finish(result)
    }
}

fn manifest(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "aws.kraken.dev/v1alpha1", "kind": "EC2Instance",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn ids(obj: &Value) -> Vec<String> {
    obj["status"]["instances"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Create with count 3, scale to 1, retag, resize, a refused then a carried-out replacement,
/// drift (tags changed, instance stopped, instance terminated through the EC2 API), delete.
#[test]
fn an_ec2_instance_lives_its_whole_life_against_the_emulator() -> anyhow::Result<()> {
    let eb = Ec2Bed::start("ec2-life")?;
    let result = (|| -> anyhow::Result<()> {
        let ns = eb.ns().to_string();
        // Published although nothing reads it yet (the annotation), to check what it says.
        let mut web = manifest(
            &ns,
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
                !s.private_ip.is_empty()
                    && entry["publicDns"].as_str().is_some_and(|d| !d.is_empty()),
                "{entry}"
            );
        }
        // The StateDeclaration publishes the instances for references like instances.0.privateIp.
        let sd = eb.bed.cp.get_json(
            &ns,
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

        // Tags in place.
        eb.patch("web", json!({"tags": {"team": "b", "env": "dev"}}))?;
        wait_for(CONVERGE, "tags team=b env=dev in moto", || {
            let s = eb.probe.instance(&id)?;
            if s.tags.get("team").map(String::as_str) == Some("b")
                && s.tags.get("env").map(String::as_str) == Some("dev")
            {
                Ok(Some(()))
            } else {
                bail!("tags {:?}", s.tags)
            }
        })?;

        // Instance type: stop, modify, start — the same instance.
        eb.patch("web", json!({"instanceType": "t3.small"}))?;
        eb.wait_reconciled("web", "resized", |o| {
            o["status"]["instances"][0]["instanceType"] == "t3.small"
        })?;
        let s = eb.probe.instance(&id)?;
        ensure!(
            s.instance_type == "t3.small" && s.state == "running",
            "{s:?}"
        );
        eb.wait_event("web", "Resized", &id)?;

        // Security groups: in place, the same instance.
        let sg = eb.probe.create_security_group("web")?;
        eb.patch("web", json!({"securityGroupIds": [sg]}))?;
        wait_for(CONVERGE, "the security group set in moto", || {
            let s = eb.probe.instance(&id)?;
            if s.security_groups == [sg.clone()] {
                Ok(Some(()))
            } else {
                bail!("groups {:?}", s.security_groups)
            }
        })?;
        eb.wait_reconciled("web", "with the group", |o| ids(o) == [id.clone()])?;

        // An image change with replacePolicy Refuse: shown in status, not carried out.
        eb.patch("web", json!({"imageId": AMI_2, "replacePolicy": "Refuse"}))?;
        let (message, obj) = eb.wait_condition("web", "Synced", "False", "ReplaceRefused")?;
        ensure!(
            message.contains(&id) && message.contains("imageId"),
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
        let live = eb.probe.owned_live(&uid)?;
        ensure!(
            live.len() == 1 && live[0].id == id && live[0].image_id == AMI,
            "{live:?}"
        );

        // Allowed: replaced, the new one first.
        eb.patch("web", json!({"replacePolicy": "Replace"}))?;
        let obj = eb.wait_reconciled("web", "replaced", |o| {
            o["status"]["instances"][0]["imageId"] == AMI_2
        })?;
        let new_id = ids(&obj)[0].clone();
        ensure!(new_id != id, "not replaced: {new_id}");
        ensure!(
            eb.probe.instance(&id)?.state == "terminated",
            "the old instance {id} still runs"
        );
        let live = eb.probe.owned_live(&uid)?;
        ensure!(
            live.len() == 1 && live[0].id == new_id && live[0].image_id == AMI_2,
            "{live:?}"
        );
        eb.wait_event("web", "Replacing", &id)?;

        // Drift, through the EC2 API behind Kraken's back.
        eb.probe.set_tag(&new_id, "team", "hacked")?;
        eb.probe.set_tag(&new_id, "added-by-hand", "x")?;
        wait_for(CONVERGE, "tags reverted in moto", || {
            let s = eb.probe.instance(&new_id)?;
            if s.tags.get("team").map(String::as_str) == Some("b")
                && !s.tags.contains_key("added-by-hand")
            {
                Ok(Some(()))
            } else {
                bail!("tags {:?}", s.tags)
            }
        })?;
        eb.wait_event("web", "DriftCorrected", "reverted")?;
        eb.probe.stop(&new_id)?;
        wait_for(CONVERGE, "the stopped instance started again", || {
            let s = eb.probe.instance(&new_id)?;
            if s.state == "running" {
                Ok(Some(()))
            } else {
                bail!("state {}", s.state)
            }
        })?;
        eb.wait_event("web", "DriftCorrected", "stopped outside Kraken")?;
        eb.probe.terminate(&new_id)?;
        let obj = eb.wait_reconciled("web", "relaunched", |o| {
            ids(o).first().is_some_and(|i| *i != new_id)
        })?;
        let relaunched = ids(&obj)[0].clone();
        let live = eb.probe.owned_live(&uid)?;
        ensure!(live.len() == 1 && live[0].id == relaunched, "{live:?}");
        eb.wait_event("web", "DriftCorrected", "terminated outside Kraken")?;

        // Delete: terminated, and the published outputs go with the object.
        eb.bed
            .cp
            .kubectl(&["delete", EC2, "web", "-n", &ns, "--wait=false"])?;
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
                    &ns,
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

/// Every input a user can get wrong: refused at admission where the schema can tell, else a
/// condition and an Event naming the problem, and nothing launched.
#[test]
fn bad_input_gets_a_clear_condition() -> anyhow::Result<()> {
    let eb = Ec2Bed::start("ec2-bad")?;
    let result = (|| -> anyhow::Result<()> {
        let ns = eb.ns().to_string();
        // Admission.
        let refused = |name: &str, spec: Value, want: &str| -> anyhow::Result<()> {
            match eb
                .bed
                .cp
                .try_apply_yaml(&ns, &manifest(&ns, name, spec).to_string())?
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
        )?;

        // Conditions.
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
        let base = json!({"imageId": AMI, "instanceType": "t3.micro"});
        let with = |extra: Value| {
            let mut s = base.clone();
            if let (Some(m), Some(e)) = (s.as_object_mut(), extra.as_object()) {
                m.extend(e.clone());
            }
            s
        };
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
        eb.apply(&[manifest(&ns, "no-creds", base.clone())])?;
        for (name, _, reason, text) in &cases {
            let (message, _) = eb.wait_condition(name, "Synced", "False", reason)?;
            ensure!(message.contains(text), "{name}: {message}");
            eb.wait_event(name, reason, text)?;
            let (ready, _, _) =
                condition(&eb.get(name)?.context("gone")?, "Ready").context("no Ready")?;
            ensure!(ready == "False", "{name} is Ready={ready}");
        }
        let (message, _) =
            eb.wait_condition("no-creds", "Synced", "False", "CredentialsRequired")?;
        ensure!(message.contains("--aws-ambient-credentials"), "{message}");

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

        // All at once: the Object waits for the EC2Instance, which waits for the ConfigExport.
        eb.bed.cp.kubectl(&[
            "delete",
            "-n",
            &ns,
            "--wait=false",
            "objects.fixture.tf.kraken.dev/net",
            &format!("{EC2}/app"),
            "configexports.core.kraken.dev/app-endpoint",
        ])?;
        let (message, _) = wait_for(CONVERGE, "the Object net to wait InUse", || {
            let o = eb
                .bed
                .cp
                .get_json_opt(&ns, "objects.fixture.tf.kraken.dev", "net")?;
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
                .get_json_opt(&ns, "objects.fixture.tf.kraken.dev", "net")?
            {
                None => Ok(Some(())),
                Some(o) => bail!("{}", describe(&o)),
            }
        })?;
        ensure!(
            eb.probe.instance(&id)?.state == "terminated",
            "{id} still runs"
        );
        Ok(())
    })();
    eb.finish(result)
}

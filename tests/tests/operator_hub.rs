//! The dependency hub end to end (docs/operator.md, "Dependency hub"): a real kube-apiserver +
//! etcd, `kraken operator` as a process, and three real providers — HashiCorp's random and null
//! (protocol 5) and the fixture (protocol 6, whose ledger is the "cloud"). Values flow by
//! `spec.valuesFrom` through DependencyRequests resolved by the hub, outputs are published as
//! StateDeclarations, and a ConfigExport writes them into a ConfigMap and a Secret.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::operator::bed::{OBJECTS, describe};
use kraken_tests::operator::{FixtureBed, OperatorOptions, condition};
use kraken_tests::{ledger, repo_root, wait_for};
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(90);
const PETS: &str = "pets.random.tf.kraken.dev";
const NULLS: &str = "resources.null.tf.kraken.dev";

fn run(
    name: &str,
    scenario: impl FnOnce(&mut FixtureBed) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let opts = OperatorOptions {
        rust_log: "info,kraken_bridge=debug,kraken_bridge::provider::launch=info".into(),
        ..OperatorOptions::default()
    };
    let mut bed = FixtureBed::start(name, opts)?;
    let result = scenario(&mut bed);
    bed.finish(result)
}

fn get(bed: &FixtureBed, resource: &str, name: &str) -> anyhow::Result<Option<Value>> {
    bed.cp.get_json_opt(&bed.ns, resource, name)
}

/// Waits until `resource/name` is Ready and Synced at its generation.
fn wait_reconciled(bed: &FixtureBed, resource: &str, name: &str) -> anyhow::Result<Value> {
    kraken_tests::operator::bed::wait_reconciled(&bed.cp, (&bed.ns, resource, name), CONVERGE)
}

/// Waits until `resource/name` has condition `type_` with this status and reason.
fn wait_condition(
    bed: &FixtureBed,
    resource: &str,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> anyhow::Result<(String, Value)> {
    wait_for(
        CONVERGE,
        &format!("{resource} {name} {type_}={status}/{reason}"),
        || {
            let obj = get(bed, resource, name)?.context("does not exist")?;
            match condition(&obj, type_) {
                Some((s, r, m)) if s == status && r == reason => Ok(Some((m, obj))),
                other => bail!("{type_} is {other:?}"),
            }
        },
    )
}

fn object(name: &str, ns: &str, for_provider: Value, values_from: Value) -> Value {
    json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"forProvider": for_provider, "valuesFrom": values_from}})
}

fn apply(bed: &FixtureBed, docs: &[Value]) -> anyhow::Result<()> {
    bed.apply(&kraken_tests::operator::bed::yaml_documents(docs))?;
    Ok(())
}

fn ledger_object(bed: &FixtureBed, id: &str) -> anyhow::Result<Value> {
    ledger::objects(bed.ledger_dir())?
        .into_iter()
        .find(|o| o["id"] == id)
        .with_context(|| format!("no object {id} in the ledger"))
}

/// random_pet → fixture Object (name from a template over the pet, size from a ConfigMap,
/// password from a Secret) → fixture Object → null_resource triggers, and ConfigExports to a
/// ConfigMap and a Secret. A change upstream propagates; deleting everything at once tears
/// down in dependency order.
#[test]
fn a_chain_across_providers_and_protocols_propagates_and_tears_down_in_order() -> anyhow::Result<()>
{
    run("hub-chain", |bed| {
        let ns = bed.ns.clone();
        for (dir, label) in [("random", "random"), ("null", "null")] {
            bed.cp.install_crds(
                &repo_root().join("generated-crds").join(dir),
                &format!("tf.kraken.dev/provider={label}"),
            )?;
        }
        let secret_password = "hunter2-never-in-status";
        apply(
            bed,
            &[
                json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
                   "metadata": {"name": "random", "namespace": ns}, "spec": {"source": "hashicorp/random"}}),
                json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
                   "metadata": {"name": "null", "namespace": ns}, "spec": {"source": "hashicorp/null"}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "inputs", "namespace": ns},
                   "data": {"size": "3"}}),
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns},
                   "stringData": {"password": secret_password}}),
                json!({"apiVersion": "random.tf.kraken.dev/v1alpha1", "kind": "Pet",
                   "metadata": {"name": "pet", "namespace": ns},
                   "spec": {"providerConfigRef": {"name": "random"}, "forProvider": {"length": 2}}}),
                object(
                    "obj",
                    &ns,
                    json!({}),
                    json!([
                        {"path": "name", "template": "${resource:Pet/pet:id}-obj"},
                        {"path": "size", "configMapKeyRef": {"name": "inputs", "key": "size"}},
                        {"path": "password", "secretKeyRef": {"name": "creds", "key": "password"}},
                    ]),
                ),
                object(
                    "obj2",
                    &ns,
                    json!({"size": 1}),
                    json!([
                        {"path": "name", "resource": {"kind": "Object", "name": "obj", "path": "id"}},
                    ]),
                ),
                json!({"apiVersion": "null.tf.kraken.dev/v1alpha1", "kind": "Resource",
                   "metadata": {"name": "trig", "namespace": ns},
                   "spec": {"providerConfigRef": {"name": "null"}, "forProvider": {},
                            "valuesFrom": [{"path": "triggers.obj", "resource": {"kind": "Object", "name": "obj2", "path": "id"}}]}}),
                json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ConfigExport",
                "metadata": {"name": "out", "namespace": ns},
                "spec": {"target": {"kind": "ConfigMap", "name": "exported"}, "data": [
                    {"key": "pet", "resource": {"kind": "Pet", "name": "pet", "path": "id"}},
                    {"key": "obj2", "stateDeclaration": {"name": "object-obj2.fixture", "path": "id"}},
                    {"key": "url", "template": "https://${resource:Object/obj:name}:${configMap:inputs:size}"},
                ]}}),
                json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ConfigExport",
                "metadata": {"name": "sec", "namespace": ns},
                "spec": {"target": {"kind": "Secret", "name": "exported-secret"}, "data": [
                    {"key": "token", "resource": {"kind": "Object", "name": "obj", "path": "secretToken"}},
                ]}}),
            ],
        )?;

        let pet = wait_reconciled(bed, PETS, "pet")?;
        let pet_id = pet["status"]["atProvider"]["id"]
            .as_str()
            .context("pet id")?
            .to_owned();
        let obj = wait_reconciled(bed, OBJECTS, "obj")?;
        let obj_id = obj["status"]["externalId"]
            .as_str()
            .context("obj id")?
            .to_owned();
        let obj2 = wait_reconciled(bed, OBJECTS, "obj2")?;
        let obj2_id = obj2["status"]["externalId"]
            .as_str()
            .context("obj2 id")?
            .to_owned();
        let trig = wait_reconciled(bed, NULLS, "trig")?;
        ensure!(
            trig["status"]["atProvider"]["triggers"]["obj"] == obj2_id,
            "null_resource triggers must carry obj2's id {obj2_id}: {}",
            trig["status"]
        );
        let in_cloud = ledger_object(bed, &obj_id)?;
        ensure!(
            in_cloud["name"] == format!("{pet_id}-obj"),
            "obj's name from the template: {in_cloud}"
        );
        ensure!(
            in_cloud["size"] == 3,
            "obj's size from the ConfigMap (converted to a number): {in_cloud}"
        );
        ensure!(
            in_cloud["password"] == secret_password,
            "obj's password from the Secret: {in_cloud}"
        );
        ensure!(
            ledger_object(bed, &obj2_id)?["name"] == obj_id,
            "obj2's name is obj's id"
        );
        // The hub timed each of those hand-overs (producer published → request resolved).
        let propagated = bed.op.metric("kraken_hub_propagation_seconds_count")?;
        ensure!(
            propagated >= 2.0,
            "kraken_hub_propagation_seconds observed {propagated} propagations"
        );

        wait_condition(bed, "configexport", "out", "Ready", "True", "Exported")?;
        let cm = bed.cp.get_json(&ns, "configmap", "exported")?;
        ensure!(
            cm["data"]["pet"] == pet_id && cm["data"]["obj2"] == obj2_id,
            "exported: {}",
            cm["data"]
        );
        ensure!(
            cm["data"]["url"] == format!("https://{pet_id}-obj:3"),
            "exported url: {}",
            cm["data"]
        );
        wait_condition(bed, "configexport", "sec", "Ready", "True", "Exported")?;
        let token = kraken_tests::operator::bed::secret_data(
            &bed.cp.get_json(&ns, "secret", "exported-secret")?,
            "token",
        )?
        .context("token in the exported Secret")?;
        ensure!(
            serde_json::Value::String(String::from_utf8(token)?) == in_cloud["secret_token"],
            "the exported token is the object's secret_token"
        );
        // Sensitive values stay out of status, StateDeclarations and Events.
        let token = in_cloud["secret_token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .with_context(|| format!("the ledger object has no secret_token: {in_cloud}"))?;
        for what in ["dependencyrequests", "statedeclarations", "events", OBJECTS] {
            let text = bed.cp.kubectl(&["get", what, "-n", &ns, "-o", "json"])?;
            ensure!(
                !text.contains(secret_password),
                "the Secret's password leaked into {what}"
            );
            ensure!(
                !text.contains(token),
                "the sensitive secret_token leaked into {what}"
            );
        }

        // An upstream change propagates by watch: ConfigMap → obj (update) → export.
        bed.cp.kubectl(&[
            "patch",
            "configmap",
            "inputs",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"data":{"size":"5"}}"#,
        ])?;
        wait_for(CONVERGE, "obj's size 5 in the ledger", || {
            let o = ledger_object(bed, &obj_id)?;
            if o["size"] == 5 {
                Ok(Some(()))
            } else {
                bail!("size {}", o["size"])
            }
        })?;
        wait_for(CONVERGE, "the export's url to end in :5", || {
            let cm = bed.cp.get_json(&ns, "configmap", "exported")?;
            if cm["data"]["url"] == format!("https://{pet_id}-obj:5") {
                Ok(Some(()))
            } else {
                bail!("{}", cm["data"])
            }
        })?;

        // So does a changed Secret, though the request's status (which holds no sensitive
        // value) stays as it was.
        bed.cp.kubectl(&[
            "patch",
            "secret",
            "creds",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"stringData":{"password":"rotated-never-in-status"}}"#,
        ])?;
        wait_for(CONVERGE, "obj's password rotated in the ledger", || {
            let o = ledger_object(bed, &obj_id)?;
            if o["password"] == "rotated-never-in-status" {
                Ok(Some(()))
            } else {
                bail!("not yet")
            }
        })?;

        // A sensitive output that changes reaches its readers too: a longer pet name replaces
        // the Pet, so obj (named after it) is replaced, with a new secret_token that the
        // exported Secret must then hold; and obj2 (named after obj's id) follows.
        let old_token = in_cloud["secret_token"].clone();
        bed.cp.kubectl(&[
            "patch",
            PETS,
            "pet",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"forProvider":{"length":3}}}"#,
        ])?;
        let obj_id = wait_for(CONVERGE, "obj replaced under the new pet name", || {
            let o = get(bed, OBJECTS, "obj")?.context("obj")?;
            let id = o["status"]["externalId"].as_str().unwrap_or_default();
            if id.is_empty() || id == obj_id {
                bail!("still {id:?}");
            }
            Ok(Some(id.to_owned()))
        })?;
        let in_cloud = ledger_object(bed, &obj_id)?;
        ensure!(
            in_cloud["secret_token"] != old_token,
            "a replaced object has a new token"
        );
        wait_for(
            CONVERGE,
            "the exported Secret to hold the new token",
            || {
                let token = kraken_tests::operator::bed::secret_data(
                    &bed.cp.get_json(&ns, "secret", "exported-secret")?,
                    "token",
                )?
                .context("token")?;
                if serde_json::Value::String(String::from_utf8(token)?) == in_cloud["secret_token"]
                {
                    Ok(Some(()))
                } else {
                    bail!("the old token")
                }
            },
        )?;
        let obj2_id = wait_for(CONVERGE, "obj2 renamed after the new obj", || {
            let o = get(bed, OBJECTS, "obj2")?.context("obj2")?;
            let id = o["status"]["externalId"].as_str().unwrap_or_default();
            if ledger_object(bed, id).is_ok_and(|l| l["name"] == obj_id) {
                Ok(Some(id.to_owned()))
            } else {
                bail!("obj2 {id:?} not yet named {obj_id}")
            }
        })?;

        // Deleting everything at once tears down in reverse dependency order.
        let before_teardown = ledger::event_log(bed.ledger_dir())?.len();
        bed.cp.kubectl(&["delete", "-n", &ns, "--wait=false", "configexports.core.kraken.dev,resources.null.tf.kraken.dev,objects.fixture.tf.kraken.dev,pets.random.tf.kraken.dev", "--all"])?;
        for (res, name) in [
            (NULLS, "trig"),
            (OBJECTS, "obj2"),
            (OBJECTS, "obj"),
            (PETS, "pet"),
        ] {
            wait_for(CONVERGE, &format!("{res} {name} gone"), || {
                match get(bed, res, name)? {
                    None => Ok(Some(())),
                    Some(o) => bail!("{}", describe(&o)),
                }
            })?;
        }
        let deletes: Vec<String> = ledger::event_log(bed.ledger_dir())?
            .into_iter()
            .skip(before_teardown)
            .filter(|e| e.op == "delete")
            .map(|e| e.id)
            .collect();
        ensure!(
            deletes == vec![obj2_id.clone(), obj_id.clone()],
            "obj2 (the consumer) is destroyed before obj: {deletes:?}"
        );
        for (what, name) in [
            ("configmap", "exported"),
            ("secret", "exported-secret"),
            ("statedeclaration", "object-obj.fixture"),
            ("dependencyrequest", "object-obj2.fixture"),
        ] {
            ensure!(
                bed.cp.get_json_opt(&ns, what, name)?.is_none(),
                "{what} {name} must be gone with its owner"
            );
        }
        Ok(())
    })
}

/// Every bad reference gives its condition on the DependencyRequest and a waiting consumer;
/// a cycle is named; a cross-namespace reference is refused; a fix is picked up by watch; a
/// producer in use waits in deletion unless forced.
#[test]
fn bad_references_cycles_and_deletion_in_use() -> anyhow::Result<()> {
    run("hub-bad", |bed| {
        let ns = bed.ns.clone();
        let from =
            |kind: &str, name: &str, path: &str| json!({"kind": kind, "name": name, "path": path});
        apply(
            bed,
            &[
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sizes", "namespace": ns},
                   "data": {"bad": "abc"}}),
                object("p1", &ns, json!({"name": "p1", "size": 1}), json!([])),
                object(
                    "nf",
                    &ns,
                    json!({"size": 1}),
                    json!([{"path": "name", "resource": from("Object", "missing", "id")}]),
                ),
                object(
                    "pnf",
                    &ns,
                    json!({"size": 1}),
                    json!([{"path": "name", "resource": from("Object", "p1", "nosuch")}]),
                ),
                object(
                    "tm",
                    &ns,
                    json!({"name": "tm"}),
                    json!([{"path": "size", "configMapKeyRef": {"name": "sizes", "key": "bad"}}]),
                ),
                object(
                    "cx",
                    &ns,
                    json!({"size": 1}),
                    json!([{"path": "name", "resource": {"kind": "Object", "name": "p1", "path": "id", "namespace": "default"}}]),
                ),
                object(
                    "ca",
                    &ns,
                    json!({"size": 1}),
                    json!([{"path": "name", "resource": from("Object", "cb", "id")}]),
                ),
                object(
                    "cb",
                    &ns,
                    json!({"size": 1}),
                    json!([{"path": "name", "resource": from("Object", "ca", "id")}]),
                ),
                object(
                    "user",
                    &ns,
                    json!({"size": 1}),
                    json!([{"path": "name", "resource": from("Object", "p1", "id")}]),
                ),
            ],
        )?;
        let expect = |name: &str, reason: &str, needle: &str| -> anyhow::Result<()> {
            let (message, _) = wait_condition(
                bed,
                "dependencyrequest",
                &format!("object-{name}.fixture"),
                "Ready",
                "False",
                reason,
            )?;
            ensure!(
                message.contains(needle),
                "{name}: {reason} message {message:?} must mention {needle:?}"
            );
            let (_, obj) = wait_condition(
                bed,
                OBJECTS,
                name,
                "Ready",
                "False",
                "WaitingForDependencies",
            )?;
            let synced = condition(&obj, "Synced").map(|c| c.2).unwrap_or_default();
            ensure!(
                synced.contains(reason),
                "{name}: the consumer's Synced message says {reason}: {synced:?}"
            );
            Ok(())
        };
        expect("nf", "NotFound", "object-missing")?;
        expect("pnf", "PathNotFound", "nosuch")?;
        expect("tm", "TypeMismatch", "expected number")?;
        expect("cx", "CrossNamespace", "default")?;
        let (cycle, _) = wait_condition(
            bed,
            "dependencyrequest",
            "object-ca.fixture",
            "Ready",
            "False",
            "Cycle",
        )?;
        ensure!(
            cycle.contains("object-ca") && cycle.contains("object-cb"),
            "the cycle is named: {cycle}"
        );
        // Once the two that can be created are, they are all the cloud holds.
        let p1 = wait_reconciled(bed, OBJECTS, "p1")?;
        let p1_id = p1["status"]["externalId"].as_str().context("p1 id")?;
        wait_reconciled(bed, OBJECTS, "user")?;
        let mut names: Vec<String> = ledger::objects(bed.ledger_dir())?
            .iter()
            .map(|o| o["name"].as_str().unwrap_or_default().to_owned())
            .collect();
        names.sort();
        let mut want = vec!["p1".to_owned(), p1_id.to_owned()];
        want.sort();
        ensure!(
            names == want,
            "only p1 and user (named after p1's id) exist in the cloud: {names:?}"
        );

        // A ConfigExport never overwrites what it did not make, and never puts a Secret's
        // value into a ConfigMap.
        apply(
            bed,
            &[
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns},
                       "stringData": {"token": "s3cr3t-token"}}),
                json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ConfigExport",
                       "metadata": {"name": "clash", "namespace": ns},
                       "spec": {"target": {"kind": "ConfigMap", "name": "sizes"},
                                "data": [{"key": "x", "template": "literal"}]}}),
                json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ConfigExport",
                       "metadata": {"name": "leak", "namespace": ns},
                       "spec": {"target": {"kind": "ConfigMap", "name": "leak"},
                                "data": [{"key": "t", "secretKeyRef": {"name": "creds", "key": "token"}}]}}),
            ],
        )?;
        let (m, _) = wait_condition(
            bed,
            "configexport",
            "clash",
            "Ready",
            "False",
            "TargetNotOwned",
        )?;
        ensure!(m.contains("sizes"), "TargetNotOwned names the target: {m}");
        ensure!(
            bed.cp.get_json(&ns, "configmap", "sizes")?["data"]["x"].is_null(),
            "the unowned ConfigMap is untouched"
        );
        wait_condition(
            bed,
            "configexport",
            "leak",
            "Ready",
            "False",
            "SensitiveValue",
        )?;
        ensure!(
            bed.cp.get_json_opt(&ns, "configmap", "leak")?.is_none(),
            "no ConfigMap with a Secret's value"
        );

        // Waiting consumers (and the refused exports) do not poll: they wait for a watch
        // event, so once settled the operator makes no reconcile and no write at all. Then
        // fixing the ConfigMap is picked up by watch.
        bed.expect_idle(
            Duration::from_secs(5),
            "consumers waiting for their dependencies",
        )?;
        bed.cp.kubectl(&[
            "patch",
            "configmap",
            "sizes",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"data":{"bad":"7"}}"#,
        ])?;
        wait_reconciled(bed, OBJECTS, "tm")?;

        // A producer waits in deletion while a consumer reads it.
        wait_reconciled(bed, OBJECTS, "user")?;
        bed.cp
            .kubectl(&["delete", OBJECTS, "p1", "-n", &ns, "--wait=false"])?;
        let (message, _) = wait_condition(bed, OBJECTS, "p1", "Ready", "False", "InUse")?;
        ensure!(
            message.contains("object-user"),
            "InUse names the consumer: {message}"
        );
        // Waiting in deletion re-checks the readers every 2 s: after two re-checks (the InUse
        // report's writes are long done by then), two more find user still reading and write
        // nothing, call the provider for nothing, destroy nothing.
        bed.wait_reconciles(2, CONVERGE)?;
        let before = bed.activity()?;
        bed.wait_reconciles(2, CONVERGE)?;
        let after = bed.activity()?;
        ensure!(
            after.writes == before.writes
                && after.apply_calls == before.apply_calls
                && after.ledger_events == before.ledger_events,
            "p1's re-checks while in use must change nothing:\n  before {before:?}\n  after  \
             {after:?}"
        );
        ensure!(
            get(bed, OBJECTS, "p1")?.is_some(),
            "p1 must wait while user reads it"
        );
        ensure!(
            ledger::objects_named(bed.ledger_dir(), "p1")?.len() == 1,
            "p1 must not be destroyed while user reads it"
        );
        // pnf reads p1 too (a path p1 does not have): it counts as a reader.
        ensure!(
            message.contains("object-pnf"),
            "InUse names every reader: {message}"
        );
        bed.cp
            .kubectl(&["delete", OBJECTS, "user", "pnf", "-n", &ns, "--wait=false"])?;
        bed.wait_gone("user", CONVERGE)?;
        bed.wait_gone("p1", CONVERGE)?;

        // ... unless forced.
        apply(
            bed,
            &[
                object("p2", &ns, json!({"name": "p2", "size": 1}), json!([])),
                object(
                    "u2",
                    &ns,
                    json!({"size": 1}),
                    json!([{"path": "name", "resource": from("Object", "p2", "id")}]),
                ),
            ],
        )?;
        wait_reconciled(bed, OBJECTS, "u2")?;
        bed.cp.kubectl(&[
            "annotate",
            OBJECTS,
            "p2",
            "-n",
            &ns,
            "kraken.dev/force-delete=true",
        ])?;
        bed.cp
            .kubectl(&["delete", OBJECTS, "p2", "-n", &ns, "--wait=false"])?;
        bed.wait_gone("p2", CONVERGE)?;
        ensure!(get(bed, OBJECTS, "u2")?.is_some(), "the consumer stays");
        Ok(())
    })
}

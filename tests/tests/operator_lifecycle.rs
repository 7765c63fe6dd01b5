//! The managed-resource lifecycle of `kraken operator` (docs/operator.md), end to end: a real
//! kube-apiserver + etcd, the operator as a process, the fixture provider binary, `kubectl
//! apply` of real manifests. Every test asserts both sides: the API objects (conditions,
//! status, Events, the state Secret) and the fixture's ledger (the "cloud": live objects and
//! the log of every real create/update/delete).
//!
//! Each test owns a [`FixtureBed`]: its own control plane, namespace, ledger and operator, so
//! tests are independent and metrics belong to one test.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::ledger;
use kraken_tests::operator::bed::{OBJECTS, describe, secret_data};
use kraken_tests::operator::{FixtureBed, OperatorOptions, condition, state_secret_name};
use kraken_tests::wait_for;
use serde_json::{Value, json};

/// A reconcile of a fresh object: provider start, import/read, plan, apply, status.
const CONVERGE: Duration = Duration::from_secs(60);
/// After fixing bad input: the operator may be in a retry backoff.
const RECOVER: Duration = Duration::from_secs(90);
/// After an operator restart: a new process may have to wait for the old Lease to expire.
const AFTER_RESTART: Duration = Duration::from_secs(90);

fn run(
    name: &str,
    opts: OperatorOptions,
    scenario: impl FnOnce(&mut FixtureBed) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut bed = FixtureBed::start(name, opts)?;
    let result = scenario(&mut bed);
    bed.finish(result)
}

fn default_run(
    name: &str,
    scenario: impl FnOnce(&mut FixtureBed) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    run(name, OperatorOptions::default(), scenario)
}

/// `spec` with `forProvider: {name, size}` and the top-level fields of `extra` merged in
/// (objects merged recursively).
fn spec(name: &str, size: u32, extra: Value) -> Value {
    let mut s = json!({"forProvider": {"name": name, "size": size}});
    merge(&mut s, extra);
    s
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

/// The ledger's event lines as `"<op> <id> <name>"`.
fn ledger_ops(bed: &FixtureBed) -> anyhow::Result<Vec<String>> {
    Ok(ledger::event_log(bed.ledger_dir())?
        .into_iter()
        .map(|e| format!("{} {} {}", e.op, e.id, e.name))
        .collect())
}

/// The ledger's event lines must be exactly `want` (`"<op> <id> <name>"`, oldest first).
fn expect_ops(bed: &FixtureBed, want: &[String]) -> anyhow::Result<()> {
    let ops = ledger_ops(bed)?;
    ensure!(
        ops == want,
        "ledger events.log:\n  have {ops:?}\n  want {want:?}"
    );
    Ok(())
}

/// The ledger's only live object; anything else is an error.
fn sole_object(bed: &FixtureBed) -> anyhow::Result<Value> {
    let mut objects = ledger::objects(bed.ledger_dir())?;
    ensure!(
        objects.len() == 1,
        "expected exactly one live object in the ledger, found {}: {objects:#?}",
        objects.len()
    );
    Ok(objects.remove(0))
}

fn external_id(obj: &Value) -> anyhow::Result<String> {
    obj["status"]["externalId"]
        .as_str()
        .map(str::to_string)
        .with_context(|| format!("no status.externalId: {}", describe(obj)))
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

fn last_plan(obj: &Value) -> (String, Vec<String>) {
    let plan = &obj["status"]["lastPlan"];
    let action = plan["action"].as_str().unwrap_or_default().to_string();
    let paths = plan["paths"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    (action, paths)
}

fn delete_object(bed: &FixtureBed, name: &str) -> anyhow::Result<()> {
    bed.cp
        .kubectl(&["delete", OBJECTS, name, "-n", &bed.ns, "--wait=false"])?;
    Ok(())
}

fn has_finalizer(obj: &Value) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == "kraken.dev/finalizer"))
}

/// Wait until the state Secret of `name` is gone. There is no garbage collector in the test
/// control plane (no controller-manager), so only the operator can have deleted it.
fn wait_state_secret_gone(bed: &FixtureBed, name: &str) -> anyhow::Result<()> {
    let secret = state_secret_name("Object", name);
    wait_for(
        Duration::from_secs(30),
        &format!("state Secret {secret} to be deleted by the operator (no GC here)"),
        || match bed.state_secret(name)? {
            None => Ok(Some(())),
            Some(s) => bail!(
                "still there, ownerReferences {}",
                s["metadata"]["ownerReferences"]
            ),
        },
    )
}

/// Keys present anywhere in a JSON tree.
fn all_keys(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                all_keys(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| all_keys(x, out)),
        _ => {}
    }
}

#[test]
fn create_reports_status_and_creates_exactly_one_object() -> anyhow::Result<()> {
    default_run("create", |bed| {
        let full = json!({"forProvider": {
            "name": "web", "size": 3, "tags": {"env": "test"}, "labels": ["a", "b"],
            "ports": [443, 80], "settings": {"mode": "fast", "retries": 2},
            "rules": [{"port": 80, "protocol": "tcp"}, {"port": 443}],
        }});
        bed.apply_object("web", full)?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;

        // The ProviderConfig reports the provider it brought up.
        let pc = wait_for(CONVERGE, "ProviderConfig Ready=True", || {
            let pc = bed
                .cp
                .get_json(&bed.ns, "providerconfigs.core.kraken.dev", "default")?;
            Ok(condition(&pc, "Ready")
                .filter(|(s, _, _)| s == "True")
                .map(|_| pc))
        })?;
        ensure!(
            pc["status"]["version"] == "1.0.0",
            "status.version: {}",
            pc["status"]
        );
        ensure!(
            pc["status"]["protocol"] == 6,
            "status.protocol: {}",
            pc["status"]
        );

        // Conditions and generation.
        let (_, _, ready_msg) = condition(&obj, "Ready").context("no Ready")?;
        eprintln!("Ready message: {ready_msg:?}");
        ensure!(obj["status"]["observedGeneration"] == obj["metadata"]["generation"]);
        ensure!(
            has_finalizer(&obj),
            "finalizer kraken.dev/finalizer missing: {}",
            obj["metadata"]
        );

        // The ledger: exactly one object, created once, and it is the one status names.
        let live = sole_object(bed)?;
        let id = external_id(&obj)?;
        ensure!(
            live["id"] == id.as_str(),
            "status.externalId {id} != ledger {live}"
        );
        expect_ops(bed, &[format!("create {id} web")])?;
        ensure!(live["name"] == "web" && num(&live["size"]) == Some(3.0));

        // status.atProvider: non-sensitive state in Kubernetes field names.
        let at = &obj["status"]["atProvider"];
        ensure!(at["id"] == id.as_str(), "atProvider.id: {at}");
        ensure!(at["name"] == "web" && num(&at["size"]) == Some(3.0), "{at}");
        ensure!(
            at["createdAt"] == live["created_at"] && at["createdAt"].is_string(),
            "atProvider.createdAt {} != ledger created_at {}",
            at["createdAt"],
            live["created_at"]
        );
        ensure!(at["description"] == "managed by kraken", "{at}");
        ensure!(num(&at["revision"]) == Some(1.0), "{at}");
        ensure!(at["tags"] == json!({"env": "test"}) && at["labels"] == json!(["a", "b"]));
        let mut ports: Vec<f64> = at["ports"]
            .as_array()
            .context("atProvider.ports")?
            .iter()
            .filter_map(num)
            .collect();
        ports.sort_by(f64::total_cmp);
        ensure!(ports == vec![80.0, 443.0], "ports {}", at["ports"]);
        ensure!(
            at["settings"]["mode"] == "fast"
                && num(&at["settings"]["retries"]) == Some(2.0)
                && at["settings"]["enabled"] == false,
            "settings {}",
            at["settings"]
        );
        ensure!(
            num(&at["rules"][0]["port"]) == Some(80.0)
                && at["rules"][0]["protocol"] == "tcp"
                && num(&at["rules"][1]["port"]) == Some(443.0)
                && at["rules"][1]["protocol"].is_null(),
            "rules {}",
            at["rules"]
        );
        let mut keys = Vec::new();
        all_keys(&obj["status"], &mut keys);
        for banned in ["password", "secretToken", "secret_token", "created_at"] {
            ensure!(
                !keys.iter().any(|k| k == banned),
                "status must not have a {banned} field: {}",
                obj["status"]
            );
        }
        let token = live["secret_token"]
            .as_str()
            .context("ledger secret_token")?;
        ensure!(
            !obj.to_string().contains(token),
            "secret_token leaked into the object"
        );

        // The state Secret: owned by the Object, typed, the documented keys.
        let secret = bed
            .state_secret("web")?
            .context("no state Secret object-web.fixture-tfstate")?;
        ensure!(
            secret["type"] == "kraken.dev/tfstate",
            "type {}",
            secret["type"]
        );
        let owners = secret["metadata"]["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        ensure!(
            owners
                .iter()
                .any(|o| o["uid"] == obj["metadata"]["uid"] && o["kind"] == "Object"),
            "the state Secret must be owned by the Object: {owners:?}"
        );
        let data_keys: Vec<&String> = secret["data"]
            .as_object()
            .context("Secret data")?
            .keys()
            .collect();
        for k in &data_keys {
            ensure!(
                [
                    "state",
                    "private",
                    "schemaVersion",
                    "createAttempt",
                    "deposedState",
                    "deposedPrivate",
                    "deposedSchemaVersion",
                ]
                .contains(&k.as_str()),
                "undocumented key {k} in the state Secret"
            );
        }
        let state: Value =
            serde_json::from_slice(&secret_data(&secret, "state")?.context("no state key")?)?;
        ensure!(
            state.to_string().contains(&id),
            "the stored state does not hold the id {id}: {state}"
        );
        let schema_version =
            secret_data(&secret, "schemaVersion")?.context("no schemaVersion key")?;
        ensure!(
            schema_version == b"1",
            "schemaVersion {:?}",
            String::from_utf8_lossy(&schema_version)
        );
        // The create fence: the attempt announced on the object before the create is the one
        // the Secret records as completed.
        let attempt = obj["metadata"]["annotations"]["kraken.dev/create-attempt"]
            .as_str()
            .with_context(|| {
                format!(
                    "no kraken.dev/create-attempt annotation: {}",
                    obj["metadata"]["annotations"]
                )
            })?;
        let recorded = secret_data(&secret, "createAttempt")?.context("no createAttempt key")?;
        ensure!(
            recorded == attempt.as_bytes(),
            "the Secret records create attempt {:?}, the annotation says {attempt}",
            String::from_utf8_lossy(&recorded)
        );
        bed.wait_event("web", "Created", CONVERGE)?;

        // The printer columns.
        let table = bed.cp.kubectl(&["get", OBJECTS, "-n", &bed.ns])?;
        let mut lines = table.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        ensure!(
            header == ["NAME", "READY", "SYNCED", "EXTERNAL-ID", "PLAN", "AGE"],
            "kubectl get columns: {table}"
        );
        let row: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        ensure!(
            // PLAN is blank: no plan waits.
            row.len() == 5 && row[..4] == ["web", "True", "True", id.as_str()],
            "kubectl get row: {table}"
        );
        Ok(())
    })
}

#[test]
fn size_change_updates_in_place() -> anyhow::Result<()> {
    default_run("update", |bed| {
        bed.apply_object("web", spec("web", 3, json!({})))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        bed.apply_object("web", spec("web", 5, json!({})))?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        ensure!(obj["metadata"]["generation"] == 2);
        ensure!(external_id(&obj)? == id, "an in-place update keeps the id");
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == id.as_str() && num(&live["size"]) == Some(5.0),
            "{live}"
        );
        ensure!(num(&live["revision"]) == Some(2.0), "{live}");
        ensure!(num(&obj["status"]["atProvider"]["size"]) == Some(5.0));
        expect_ops(
            bed,
            &[format!("create {id} web"), format!("update {id} web")],
        )?;
        let (action, paths) = last_plan(&obj);
        ensure!(action == "Update", "lastPlan {}", obj["status"]["lastPlan"]);
        ensure!(
            paths.iter().any(|p| p == "spec.forProvider.size"),
            "lastPlan.paths must name spec.forProvider.size: {paths:?}"
        );
        bed.wait_event("web", "Updated", CONVERGE)?;
        Ok(())
    })
}

#[test]
fn name_change_replaces_the_object() -> anyhow::Result<()> {
    default_run("replace", |bed| {
        bed.apply_object("web", spec("alpha", 3, json!({})))?;
        let old = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        bed.apply_object("web", spec("beta", 3, json!({})))?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        let new = external_id(&obj)?;
        ensure!(new != old, "a replacement gives a new id");
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == new.as_str() && live["name"] == "beta",
            "{live}"
        );
        let mut ops = ledger_ops(bed)?;
        ensure!(
            ops.first() == Some(&format!("create {old} alpha")),
            "{ops:?}"
        );
        ops.sort();
        let mut want = vec![
            format!("create {old} alpha"),
            format!("delete {old} alpha"),
            format!("create {new} beta"),
        ];
        want.sort();
        ensure!(ops == want, "ledger events {ops:?}, want {want:?}");
        let (action, paths) = last_plan(&obj);
        ensure!(
            action == "Replace",
            "lastPlan {}",
            obj["status"]["lastPlan"]
        );
        ensure!(
            paths.iter().any(|p| p == "spec.forProvider.name"),
            "{paths:?}"
        );
        bed.wait_event("web", "Replaced", CONVERGE)?;
        Ok(())
    })
}

/// `replacePolicy: CreateBeforeDestroy` (Terraform's create_before_destroy): the new object
/// exists before the old one is destroyed, in the ledger's own order.
#[test]
fn create_before_destroy_makes_the_new_object_first() -> anyhow::Result<()> {
    default_run("replace-create-first", |bed| {
        let first = json!({"replacePolicy": "CreateBeforeDestroy"});
        bed.apply_object("web", spec("alpha", 3, first.clone()))?;
        let old = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        bed.apply_object("web", spec("beta", 3, first))?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        let new = external_id(&obj)?;
        ensure!(new != old, "a replacement gives a new id");
        bed.wait_event("web", "DeposedDestroyed", CONVERGE)?;
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == new.as_str() && live["name"] == "beta",
            "{live}"
        );
        expect_ops(
            bed,
            &[
                format!("create {old} alpha"),
                format!("create {new} beta"),
                format!("delete {old} alpha"),
            ],
        )?;
        let secret = bed.state_secret("web")?.context("no state Secret")?;
        ensure!(
            secret["data"]["deposedState"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "the deposed object's entry is dropped once it is destroyed: {}",
            secret["data"]
        );
        bed.wait_event("web", "Replaced", CONVERGE)?;
        Ok(())
    })
}

#[test]
fn replace_policy_refuse_stops_a_replacement() -> anyhow::Result<()> {
    default_run("replace-refused", |bed| {
        let refuse = json!({"replacePolicy": "Refuse"});
        bed.apply_object("web", spec("alpha", 3, refuse.clone()))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        bed.apply_object("web", spec("beta", 3, refuse))?;
        let obj = bed.wait_synced("web", "False", "ReplaceRefused", CONVERGE)?;
        let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
        ensure!(
            !message.trim().is_empty(),
            "ReplaceRefused needs a message saying what to do"
        );
        let (action, paths) = last_plan(&obj);
        ensure!(
            action == "Replace",
            "lastPlan {}",
            obj["status"]["lastPlan"]
        );
        ensure!(
            paths.iter().any(|p| p == "spec.forProvider.name"),
            "{paths:?}"
        );
        bed.wait_event("web", "ReplaceRefused", CONVERGE)?;
        // Only the user can fix it: the operator waits for a change and retries nothing.
        bed.expect_idle(Duration::from_secs(3), "a refused replacement")?;
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == id.as_str() && live["name"] == "alpha",
            "{live}"
        );
        expect_ops(bed, &[format!("create {id} alpha")])?;
        ensure!(external_id(&bed.object("web")?)? == id);

        // Allowing it lets the pending replacement through.
        bed.apply_object("web", spec("beta", 3, json!({"replacePolicy": "Allow"})))?;
        let obj = bed.wait_reconciled("web", RECOVER)?;
        let live = sole_object(bed)?;
        ensure!(
            live["name"] == "beta" && live["id"] != id.as_str(),
            "{live}"
        );
        ensure!(external_id(&obj)? == live["id"].as_str().unwrap_or_default());
        Ok(())
    })
}

#[test]
fn delete_destroys_through_the_finalizer() -> anyhow::Result<()> {
    default_run("delete", |bed| {
        bed.apply_object("web", spec("web", 3, json!({})))?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        let id = external_id(&obj)?;
        ensure!(has_finalizer(&obj), "no finalizer: {}", obj["metadata"]);
        ensure!(
            bed.state_secret("web")?.is_some(),
            "no state Secret before the delete"
        );
        delete_object(bed, "web")?;
        bed.wait_gone("web", CONVERGE)?;
        ensure!(
            ledger::objects(bed.ledger_dir())?.is_empty(),
            "the ledger still has objects"
        );
        expect_ops(
            bed,
            &[format!("create {id} web"), format!("delete {id} web")],
        )?;
        wait_state_secret_gone(bed, "web")?;
        bed.wait_event("web", "Deleted", CONVERGE)?;
        Ok(())
    })
}

#[test]
fn deletion_policy_orphan_leaves_the_object() -> anyhow::Result<()> {
    default_run("orphan", |bed| {
        bed.apply_object("web", spec("web", 3, json!({"deletionPolicy": "Orphan"})))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        delete_object(bed, "web")?;
        bed.wait_gone("web", CONVERGE)?;
        let live = sole_object(bed)?;
        ensure!(live["id"] == id.as_str(), "{live}");
        expect_ops(bed, &[format!("create {id} web")]).context("nothing destroyed")?;
        // A stale state Secret would make a new Object of the same name adopt the orphan.
        wait_state_secret_gone(bed, "web")?;
        bed.wait_event("web", "Orphaned", CONVERGE)?;
        Ok(())
    })
}

#[test]
fn import_id_adopts_an_existing_object() -> anyhow::Result<()> {
    default_run("import", |bed| {
        // Make an object that Kraken no longer manages: create it, then orphan it.
        bed.apply_object(
            "seed",
            spec("adopted", 1, json!({"deletionPolicy": "Orphan"})),
        )?;
        let id = external_id(&bed.wait_reconciled("seed", CONVERGE)?)?;
        delete_object(bed, "seed")?;
        bed.wait_gone("seed", CONVERGE)?;
        expect_ops(bed, &[format!("create {id} adopted")])?;

        // Adopt it under another resource, with a different size to prove it is managed.
        bed.apply_object("adopter", spec("adopted", 2, json!({"importId": id})))?;
        let obj = bed.wait_reconciled("adopter", CONVERGE)?;
        ensure!(external_id(&obj)? == id, "the adopter must take over {id}");
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == id.as_str() && num(&live["size"]) == Some(2.0),
            "{live}"
        );
        expect_ops(
            bed,
            &[
                format!("create {id} adopted"),
                format!("update {id} adopted"),
            ],
        )
        .context("an import must not create")?;
        bed.wait_event("adopter", "Imported", CONVERGE)?;
        ensure!(
            !bed.events("adopter")?.iter().any(|(r, _)| r == "Created"),
            "an adopted object is not Created: {:?}",
            bed.events("adopter")?
        );
        Ok(())
    })
}

/// An object that exists in the cloud without Kraken having made it.
fn hand_made_object(bed: &FixtureBed, id: &str, name: &str, size: u32) -> anyhow::Result<()> {
    ledger::write_object(
        bed.ledger_dir(),
        &json!({
            "id": id, "name": name, "size": size, "tags": null, "labels": null, "ports": null,
            "settings": null, "rules": null, "password": null, "description": "made by hand",
            "created_at": "2024-01-01T00:00:00Z", "revision": 1, "secret_token": "feedface00",
        }),
    )
}

/// `importIdentity` adopts through the fixture's resource identity (protocol 6.9): the import
/// names `{id}`, not an import id. An identity the schema does not have is refused with the
/// reason, and nothing is created in its place.
#[test]
fn import_identity_adopts_by_the_providers_identity() -> anyhow::Result<()> {
    default_run("import-identity", |bed| {
        let id = "obj-1de000000000000a";
        hand_made_object(bed, id, "by-identity", 4)?;
        let observe = json!({"managementPolicy": "ObserveOnly", "importIdentity": {"id": id}});
        bed.apply_object("identified", spec("by-identity", 4, observe))?;
        let obj = bed.wait_reconciled("identified", CONVERGE)?;
        ensure!(external_id(&obj)? == id, "{obj}");
        let imported = bed.wait_event("identified", "Imported", CONVERGE)?;
        ensure!(
            imported.contains(&format!("identity {{id=\"{id}\"}}")),
            "the import named the identity: {imported}"
        );

        let wrong = json!({"importIdentity": {"ident": id}});
        bed.apply_object("misnamed", spec("by-identity", 4, wrong))?;
        wait_for(CONVERGE, "the misnamed identity refused", || {
            let obj = bed.object("misnamed")?;
            let said = ["Ready", "Synced"]
                .into_iter()
                .filter_map(|c| condition(&obj, c))
                .find(|(s, _, m)| s == "False" && m.contains("no attribute \"ident\""));
            match said {
                Some(c) => Ok(Some(c)),
                None => bail!("{}", obj["status"]),
            }
        })?;
        expect_ops(bed, &[]).context("adopting and refusing write nothing")
    })
}

#[test]
fn observe_only_reads_and_never_writes() -> anyhow::Result<()> {
    default_run("observe-only", |bed| {
        let id = "obj-0b5e0000000000aa";
        hand_made_object(bed, id, "observed", 4)?;
        let observe =
            json!({"managementPolicy": "ObserveOnly", "importId": id, "driftInterval": "2s"});
        // The spec says size 9; the object has 4. ObserveOnly reports, never corrects.
        bed.apply_object("watcher", spec("observed", 9, observe))?;
        let obj = bed.wait_reconciled("watcher", CONVERGE)?;
        ensure!(external_id(&obj)? == id);
        let at = &obj["status"]["atProvider"];
        ensure!(
            num(&at["size"]) == Some(4.0),
            "atProvider shows what exists: {at}"
        );
        ensure!(at["description"] == "made by hand", "{at}");
        bed.wait_event("watcher", "DriftDetected", CONVERGE)?;

        // The object changes in the cloud: observed on the next drift check.
        ledger::edit_object(bed.ledger_dir(), id, |o| o["size"] = json!(6))?;
        wait_for(
            Duration::from_secs(30),
            "atProvider.size to become 6",
            || {
                let obj = bed.object("watcher")?;
                let size = num(&obj["status"]["atProvider"]["size"]);
                if size == Some(6.0) {
                    Ok(Some(()))
                } else {
                    bail!("atProvider.size {size:?}")
                }
            },
        )?;
        ensure!(num(&ledger::object(bed.ledger_dir(), id)?.context("gone")?["size"]) == Some(6.0));

        // The object disappears: reported, never recreated.
        ledger::remove_object(bed.ledger_dir(), id)?;
        let obj = bed.wait_synced(
            "watcher",
            "False",
            "ExternalObjectMissing",
            Duration::from_secs(30),
        )?;
        eprintln!("ExternalObjectMissing: {}", describe(&obj));
        // Two more drift checks (every 2 s) find it missing and still create nothing.
        bed.wait_reconciles(2, Duration::from_secs(30))?;
        ensure!(
            ledger::objects(bed.ledger_dir())?.is_empty(),
            "ObserveOnly recreated the object"
        );
        ensure!(
            ledger::apply_calls(bed.ledger_dir())?.is_empty(),
            "ObserveOnly asked the provider to apply"
        );

        // Deleting the resource destroys nothing (there is nothing, and it would not anyway).
        delete_object(bed, "watcher")?;
        bed.wait_gone("watcher", CONVERGE)?;
        expect_ops(bed, &[]).context("ObserveOnly wrote to the ledger")?;
        Ok(())
    })
}

#[test]
fn observe_only_without_import_id_is_invalid() -> anyhow::Result<()> {
    default_run("observe-no-id", |bed| {
        let crd = bed.cp.get_json("", "crd", OBJECTS)?;
        let rules = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["x-kubernetes-validations"]
            .to_string();
        let bad = spec("observed", 1, json!({"managementPolicy": "ObserveOnly"}));
        if rules.contains("ObserveOnly") {
            // The CRD enforces it with a CEL rule: refused at admission.
            let err = bed.apply_object_refused("watcher", bad)?;
            ensure!(
                err.contains("importId"),
                "the refusal must name importId: {err}"
            );
            ensure!(bed.object_opt("watcher")?.is_none());
        } else {
            // The CRD has no rule for it: the operator must refuse it.
            eprintln!("the CRD has no ObserveOnly rule; expecting Synced=False/InvalidSpec");
            bed.apply_object("watcher", bad)?;
            let obj = bed.wait_synced("watcher", "False", "InvalidSpec", CONVERGE)?;
            let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
            ensure!(
                message.contains("importId"),
                "InvalidSpec must name importId: {message:?}"
            );
            bed.wait_event("watcher", "InvalidSpec", CONVERGE)?;
        }
        // Refused at admission there is nothing to reconcile; refused by the operator it waits
        // for a change. Either way nothing happens from here on.
        bed.expect_idle(Duration::from_secs(2), "an invalid ObserveOnly spec")?;
        expect_ops(bed, &[])?;
        ensure!(ledger::objects(bed.ledger_dir())?.is_empty());
        ensure!(ledger::apply_calls(bed.ledger_dir())?.is_empty());
        Ok(())
    })
}

fn annotate(bed: &FixtureBed, name: &str, annotation: &str) -> anyhow::Result<()> {
    bed.cp.kubectl(&[
        "annotate",
        OBJECTS,
        name,
        "-n",
        &bed.ns,
        "--overwrite",
        annotation,
    ])?;
    Ok(())
}

#[test]
fn pause_annotation_holds_changes_until_removed() -> anyhow::Result<()> {
    default_run("pause", |bed| {
        bed.apply_object("web", spec("web", 3, json!({})))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        annotate(bed, "web", "kraken.dev/paused=true")?;
        bed.apply_object("web", spec("web", 5, json!({})))?;
        bed.wait_synced("web", "False", "ReconcilePaused", CONVERGE)?;
        // Paused: nothing is retried until the annotation goes.
        bed.expect_idle(Duration::from_secs(3), "a paused object")?;
        let live = sole_object(bed)?;
        ensure!(
            num(&live["size"]) == Some(3.0),
            "a paused object was changed: {live}"
        );
        expect_ops(bed, &[format!("create {id} web")])?;
        let obj = bed.object("web")?;
        ensure!(
            condition(&obj, "Synced")
                .is_some_and(|(s, r, _)| s == "False" && r == "ReconcilePaused"),
            "still paused: {}",
            describe(&obj)
        );

        annotate(bed, "web", "kraken.dev/paused-")?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        ensure!(external_id(&obj)? == id);
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == id.as_str() && num(&live["size"]) == Some(5.0),
            "{live}"
        );
        expect_ops(
            bed,
            &[format!("create {id} web"), format!("update {id} web")],
        )?;
        Ok(())
    })
}

/// `spec.ignoreChanges` (Terraform's `ignore_changes`): once the object exists, neither a
/// change of the ignored argument in the spec nor drift of it outside is acted on; a path the
/// kind does not have is refused; dropping it from the list applies the spec again.
#[test]
fn ignore_changes_leaves_an_argument_alone() -> anyhow::Result<()> {
    default_run("ignore", |bed| {
        let ignoring = json!({"driftInterval": "2s", "ignoreChanges": ["size"]});
        bed.apply_object("web", spec("web", 3, ignoring.clone()))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;

        bed.apply_object("web", spec("web", 5, ignoring.clone()))?;
        let obj = bed.wait_reconciled("web", CONVERGE)?;
        ensure!(obj["metadata"]["generation"] == 2, "{}", obj["metadata"]);
        ensure!(
            num(&obj["status"]["atProvider"]["size"]) == Some(3.0),
            "atProvider: {}",
            obj["status"]["atProvider"]
        );
        ledger::edit_object(bed.ledger_dir(), &id, |o| o["size"] = json!(77))?;
        // Several drift checks later the outside change is still there.
        bed.wait_reconciles(3, Duration::from_secs(30))?;
        let live = sole_object(bed)?;
        ensure!(num(&live["size"]) == Some(77.0), "ledger {live}");
        expect_ops(bed, &[format!("create {id} web")])?;

        let wrong = json!({"driftInterval": "2s", "ignoreChanges": ["sise"]});
        bed.apply_object("web", spec("web", 5, wrong))?;
        let refused = bed.wait_synced("web", "False", "InvalidSpec", CONVERGE)?;
        let (_, _, message) = condition(&refused, "Synced").unwrap_or_default();
        ensure!(
            message.contains("spec.ignoreChanges[0]") && message.contains("sise"),
            "{message}"
        );

        bed.apply_object("web", spec("web", 5, json!({"driftInterval": "2s"})))?;
        wait_for(CONVERGE, "size 5 applied once nothing is ignored", || {
            let live = sole_object(bed)?;
            Ok((num(&live["size"]) == Some(5.0)).then_some(()))
        })?;
        expect_ops(
            bed,
            &[format!("create {id} web"), format!("update {id} web")],
        )?;
        Ok(())
    })
}

#[test]
fn drift_is_corrected_on_the_drift_interval() -> anyhow::Result<()> {
    default_run("drift", |bed| {
        bed.apply_object("web", spec("web", 3, json!({"driftInterval": "2s"})))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;

        // Edited behind Kraken's back: corrected in place.
        ledger::edit_object(bed.ledger_dir(), &id, |o| o["size"] = json!(77))?;
        wait_for(
            Duration::from_secs(30),
            "the drifted size to be corrected",
            || {
                let live = sole_object(bed)?;
                if num(&live["size"]) == Some(3.0) {
                    Ok(Some(()))
                } else {
                    bail!("ledger {live}")
                }
            },
        )?;
        expect_ops(
            bed,
            &[format!("create {id} web"), format!("update {id} web")],
        )?;
        bed.wait_event("web", "DriftCorrected", CONVERGE)?;

        // Deleted behind Kraken's back: created again, and status follows the new id.
        ledger::remove_object(bed.ledger_dir(), &id)?;
        let new = wait_for(
            Duration::from_secs(30),
            "the deleted object to be recreated",
            || {
                let objects = ledger::objects(bed.ledger_dir())?;
                match objects.as_slice() {
                    [o] => Ok(Some(o["id"].as_str().unwrap_or_default().to_string())),
                    _ => bail!("ledger objects {objects:?}"),
                }
            },
        )?;
        ensure!(new != id);
        wait_for(
            Duration::from_secs(30),
            "status.externalId to be the new id",
            || {
                let obj = bed.object("web")?;
                if external_id(&obj)? == new {
                    Ok(Some(()))
                } else {
                    bail!("{}", describe(&obj))
                }
            },
        )?;
        let ops = ledger_ops(bed)?;
        ensure!(
            ops == vec![
                format!("create {id} web"),
                format!("update {id} web"),
                format!("create {new} web")
            ],
            "{ops:?}"
        );
        // Two more drift checks (every 2 s) find the new object and create no other.
        bed.wait_reconciles(2, Duration::from_secs(30))?;
        ensure!(
            sole_object(bed)?["id"] == new.as_str(),
            "exactly one object after the recreate"
        );
        ensure!(ledger_ops(bed)?.len() == 3, "{:?}", ledger_ops(bed)?);
        Ok(())
    })
}

/// What a no-op drift check must leave untouched.
#[derive(Debug, PartialEq)]
struct Quiet {
    object_rv: Value,
    secret_rv: Value,
    events: usize,
    api_writes: f64,
    ledger_ops: usize,
}

#[test]
fn noop_drift_checks_write_nothing() -> anyhow::Result<()> {
    // Lease renewals are API writes too: without leader election every write is a reconcile's.
    let opts = OperatorOptions {
        leader_elect: false,
        ..OperatorOptions::default()
    };
    run("noop-drift", opts, |bed| {
        bed.apply_object("web", spec("web", 3, json!({"driftInterval": "1s"})))?;
        bed.wait_reconciled("web", CONVERGE)?;
        bed.wait_event("web", "Created", CONVERGE)?;
        let quiet = |bed: &FixtureBed| -> anyhow::Result<Quiet> {
            let secret = bed.state_secret("web")?.context("no state Secret")?;
            Ok(Quiet {
                object_rv: bed.object("web")?["metadata"]["resourceVersion"].clone(),
                secret_rv: secret["metadata"]["resourceVersion"].clone(),
                events: bed.events("web")?.len(),
                api_writes: bed.op.metric("kraken_api_writes_total")?,
                ledger_ops: ledger_ops(bed)?.len(),
            })
        };
        // The create's trailing writes (status, Events, the StateDeclaration) are over once a
        // whole drift check has passed without any.
        let before = wait_for(CONVERGE, "a drift check that changed nothing", || {
            let before = quiet(bed)?;
            bed.wait_reconciles(2, Duration::from_secs(30))?;
            let after = quiet(bed)?;
            if after == before {
                Ok(Some(after))
            } else {
                bail!("still settling:\nbefore {before:?}\nafter  {after:?}")
            }
        })?;
        // Three more drift checks, each a full read and plan: nothing written.
        bed.wait_reconciles(3, Duration::from_secs(30))?;
        let after = quiet(bed)?;
        ensure!(
            after == before,
            "a no-op drift check wrote something:\nbefore {before:?}\nafter  {after:?}"
        );
        Ok(())
    })
}

#[test]
fn sensitive_values_stay_out_of_status_events_and_logs() -> anyhow::Result<()> {
    let opts = OperatorOptions {
        rust_log: "info,kraken_bridge=trace".to_string(),
        ..OperatorOptions::default()
    };
    run("sensitive", opts, |bed| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos();
        let password = format!("s3cr3t-{:x}", nanos ^ u128::from(std::process::id()));
        bed.apply(
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pw"},
                    "stringData": {"password": password}})
            .to_string(),
        )?;
        let with_pw =
            json!({"forProvider": {"passwordSecretRef": {"name": "pw", "key": "password"}}});
        bed.apply_object("web", spec("web", 3, with_pw.clone()))?;
        bed.wait_reconciled("web", CONVERGE)?;
        // An update too, so that prior state with both values goes through plan and apply.
        bed.apply_object("web", spec("web", 4, with_pw))?;
        bed.wait_reconciled("web", CONVERGE)?;

        let live = sole_object(bed)?;
        ensure!(
            live["password"] == password.as_str(),
            "the provider got the password: {live}"
        );
        let token = live["secret_token"]
            .as_str()
            .context("no secret_token")?
            .to_string();
        ensure!(token.len() == 32, "secret_token {token:?}");

        let b64 = |s: &str| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(s)
        };
        let needles = [
            ("password", password.clone()),
            ("secret_token", token.clone()),
            ("base64 password", b64(&password)),
            ("base64 secret_token", b64(&token)),
        ];
        let places = [
            (
                "kubectl get object -o yaml",
                bed.cp
                    .kubectl(&["get", OBJECTS, "web", "-n", &bed.ns, "-o", "yaml"])?,
            ),
            (
                "kubectl get events -o yaml",
                bed.cp
                    .kubectl(&["get", "events", "-n", &bed.ns, "-o", "yaml"])?,
            ),
            (
                "kubectl get providerconfigs -o yaml",
                bed.cp.kubectl(&[
                    "get",
                    "providerconfigs.core.kraken.dev",
                    "-n",
                    &bed.ns,
                    "-o",
                    "yaml",
                ])?,
            ),
            ("the operator log", bed.op.logs()?),
        ];
        for (place, text) in &places {
            for (what, needle) in &needles {
                ensure!(
                    !text.contains(needle.as_str()),
                    "the {what} appears in {place}"
                );
            }
        }
        // Where they belong: the state Secret.
        let secret = bed.state_secret("web")?.context("no state Secret")?;
        let state = String::from_utf8(secret_data(&secret, "state")?.context("no state key")?)?;
        ensure!(
            state.contains(&token),
            "the state Secret must hold secret_token"
        );
        ensure!(
            state.contains(&password),
            "the state Secret must hold the password"
        );
        Ok(())
    })
}

#[test]
fn state_survives_an_operator_sigkill() -> anyhow::Result<()> {
    default_run("restart", |bed| {
        bed.apply_object("web", spec("web", 3, json!({})))?;
        let id = external_id(&bed.wait_reconciled("web", CONVERGE)?)?;
        bed.op.kill()?;
        bed.op.restart()?;
        bed.op.wait_ready(Duration::from_secs(60))?;
        bed.apply_object("web", spec("web", 5, json!({})))?;
        let obj = bed.wait_reconciled("web", AFTER_RESTART)?;
        ensure!(external_id(&obj)? == id);
        let live = sole_object(bed)?;
        ensure!(
            live["id"] == id.as_str() && num(&live["size"]) == Some(5.0),
            "{live}"
        );
        expect_ops(
            bed,
            &[format!("create {id} web"), format!("update {id} web")],
        )
        .context("the restarted operator lost the state")?;
        bed.wait_event("web", "Updated", CONVERGE)?;
        ensure!(bed.op.starts() == 2);
        Ok(())
    })
}

/// The state Secret's data key `key` as text (empty when absent).
fn secret_text(secret: &Value, key: &str) -> anyhow::Result<String> {
    Ok(String::from_utf8(
        secret_data(secret, key)?.unwrap_or_default(),
    )?)
}

/// The state JSON of the state Secret.
fn secret_state(secret: &Value) -> anyhow::Result<Value> {
    let bytes = secret_data(secret, "state")?.context("the state Secret has no state key")?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// Rewrite the state Secret of `name` to what schema version 0 of `fixture_object` stored:
/// `schemaVersion: "0"` and the v0 attribute set (object_upgrade.go: every v1 attribute but
/// the number `size`, which was the string `size_text`). `private` and `createAttempt` are
/// left as they are (a merge patch of two data keys). Returns the v0 state JSON written.
fn rewrite_as_schema_v0(bed: &FixtureBed, name: &str, size_text: &str) -> anyhow::Result<Value> {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let secret_name = state_secret_name("Object", name);
    let before = bed
        .state_secret(name)?
        .with_context(|| format!("no state Secret {secret_name}"))?;
    ensure!(
        secret_text(&before, "schemaVersion")? == "1",
        "{secret_name} before the rewrite: schemaVersion {:?}",
        secret_text(&before, "schemaVersion")?
    );
    let mut state = secret_state(&before)?;
    let attrs = state
        .as_object_mut()
        .context("the stored state is not an object")?;
    ensure!(
        attrs.remove("size").is_some_and(|s| num(&s).is_some()) && !attrs.contains_key("size_text"),
        "{secret_name} does not hold the v1 shape (a number size, no size_text): {attrs:?}"
    );
    attrs.insert("size_text".into(), json!(size_text));
    let patch = json!({"data": {
        "state": b64(state.to_string().as_bytes()),
        "schemaVersion": b64(b"0"),
    }});
    bed.cp.kubectl(&[
        "patch",
        "secret",
        &secret_name,
        "-n",
        &bed.ns,
        "--type",
        "merge",
        "-p",
        &patch.to_string(),
    ])?;
    let after = bed
        .state_secret(name)?
        .context("the rewritten Secret is gone")?;
    ensure!(secret_text(&after, "schemaVersion")? == "0");
    ensure!(secret_state(&after)? == state, "the v0 state did not stick");
    for key in ["private", "createAttempt"] {
        ensure!(
            secret_data(&after, key)? == secret_data(&before, key)?,
            "the rewrite changed {key} of {secret_name}"
        );
    }
    Ok(state)
}

#[test]
fn state_written_under_an_old_schema_version_is_upgraded() -> anyhow::Result<()> {
    // Three Objects whose state a schema-version-0 provider wrote:
    //   web     — spec changed meanwhile: one pass upgrades, then updates in place;
    //   idle    — spec unchanged: the no-op pass still writes the upgraded state back;
    //   garbled — its v0 size_text is not a number, which only the provider's v0→v1 upgrader
    //             rejects: its diagnostic proves the state went through UpgradeResourceState.
    default_run("schema-upgrade", |bed| {
        let objects = [("web", 3), ("idle", 2), ("garbled", 4)];
        let mut ids = Vec::new();
        for (name, size) in objects {
            bed.apply_object(name, spec(name, size, json!({})))?;
            ids.push(external_id(&bed.wait_reconciled(name, CONVERGE)?)?);
        }
        let [web_id, idle_id, garbled_id] = ids.as_slice() else {
            bail!("ids {ids:?}")
        };
        let creates: Vec<String> = objects
            .iter()
            .zip(&ids)
            .map(|((name, _), id)| format!("create {id} {name}"))
            .collect();
        expect_ops(bed, &creates)?;
        let attempt_of = |name: &str| -> anyhow::Result<String> {
            secret_text(
                &bed.state_secret(name)?.context("no state Secret")?,
                "createAttempt",
            )
        };
        let web_attempt = attempt_of("web")?;
        let idle_attempt = attempt_of("idle")?;
        ensure!(
            !web_attempt.is_empty(),
            "web's state records no create attempt"
        );

        bed.op.kill()?;
        rewrite_as_schema_v0(bed, "web", "3")?;
        rewrite_as_schema_v0(bed, "idle", "2")?;
        let garbled_v0 = rewrite_as_schema_v0(bed, "garbled", "three")?;
        // Changed while the operator is down, so that the first pass after the restart meets
        // both the v0 state and the change (no race with the restart's initial pass).
        bed.apply_object("web", spec("web", 5, json!({})))?;
        bed.op.restart()?;
        bed.op.wait_ready(Duration::from_secs(60))?;

        // web: upgraded, then updated in place.
        let obj = bed.wait_reconciled("web", AFTER_RESTART)?;
        ensure!(obj["metadata"]["generation"] == 2, "{}", describe(&obj));
        ensure!(
            external_id(&obj)? == *web_id,
            "web must keep its id {web_id}: {}",
            describe(&obj)
        );
        ensure!(
            num(&obj["status"]["atProvider"]["size"]) == Some(5.0),
            "atProvider {}",
            obj["status"]["atProvider"]
        );
        let (action, paths) = last_plan(&obj);
        ensure!(
            action == "Update" && paths.iter().any(|p| p == "spec.forProvider.size"),
            "lastPlan {}",
            obj["status"]["lastPlan"]
        );
        let live = ledger::object(bed.ledger_dir(), web_id)?.context("web's object is gone")?;
        ensure!(
            num(&live["size"]) == Some(5.0) && num(&live["revision"]) == Some(2.0),
            "{live}"
        );
        let secret = bed
            .state_secret("web")?
            .context("no state Secret for web")?;
        ensure!(
            secret_text(&secret, "schemaVersion")? == "1",
            "web's state Secret: schemaVersion {:?}",
            secret_text(&secret, "schemaVersion")?
        );
        let state = secret_state(&secret)?;
        ensure!(
            num(&state["size"]) == Some(5.0) && state.get("size_text").is_none(),
            "web's stored state is not the v1 shape: {state}"
        );
        ensure!(
            state["id"] == web_id.as_str(),
            "web's stored state: {state}"
        );
        ensure!(
            secret_text(&secret, "createAttempt")? == web_attempt,
            "the completed create attempt must survive the upgrade"
        );
        bed.wait_event("web", "Updated", CONVERGE)?;

        // idle: nothing to change, but the upgraded state is written back.
        let secret = wait_for(
            AFTER_RESTART,
            "idle's state Secret to be rewritten at schemaVersion 1",
            || {
                let s = bed
                    .state_secret("idle")?
                    .context("no state Secret for idle")?;
                match secret_text(&s, "schemaVersion")?.as_str() {
                    "1" => Ok(Some(s)),
                    v => bail!("schemaVersion {v:?}"),
                }
            },
        )?;
        let state = secret_state(&secret)?;
        ensure!(
            num(&state["size"]) == Some(2.0) && state.get("size_text").is_none(),
            "idle's stored state is not the v1 shape: {state}"
        );
        ensure!(secret_text(&secret, "createAttempt")? == idle_attempt);
        let obj = bed.wait_reconciled("idle", CONVERGE)?;
        ensure!(obj["metadata"]["generation"] == 1 && external_id(&obj)? == *idle_id);

        // garbled: the upgrader's own diagnostic, and nothing overwritten or created.
        let obj = bed.wait_synced("garbled", "False", "ProviderError", AFTER_RESTART)?;
        let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
        eprintln!("garbled: Synced=False/ProviderError {message:?}");
        ensure!(
            message.contains("cannot upgrade size_text") && message.contains("three"),
            "the provider's v0 upgrader must have rejected size_text \"three\": {message:?}"
        );
        let secret = bed
            .state_secret("garbled")?
            .context("no state Secret for garbled")?;
        ensure!(
            secret_text(&secret, "schemaVersion")? == "0" && secret_state(&secret)? == garbled_v0,
            "state that could not be upgraded must stay as it was: schemaVersion {:?}, state {}",
            secret_text(&secret, "schemaVersion")?,
            secret_state(&secret)?
        );
        let live =
            ledger::object(bed.ledger_dir(), garbled_id)?.context("garbled's object is gone")?;
        ensure!(num(&live["size"]) == Some(4.0), "{live}");

        // The cloud: the three creates and web's update, nothing else.
        let mut want = creates.clone();
        want.push(format!("update {web_id} web"));
        expect_ops(bed, &want)?;
        ensure!(ledger::objects(bed.ledger_dir())?.len() == 3);
        Ok(())
    })
}

#[test]
fn schema_invalid_specs_are_refused_at_admission() -> anyhow::Result<()> {
    default_run("admission", |bed| {
        let cases = [
            (
                "size-text",
                json!({"forProvider": {"name": "x", "size": "abc"}}),
                "spec.forProvider.size",
            ),
            (
                "unknown-field",
                json!({"forProvider": {"name": "x", "colour": "red"}}),
                "unknown field \"spec.forProvider.colour\"",
            ),
            (
                "no-name",
                json!({"forProvider": {"size": 1}}),
                "spec.forProvider.name is required",
            ),
            (
                "bad-policy",
                json!({"forProvider": {"name": "x"}, "deletionPolicy": "Keep"}),
                "spec.deletionPolicy",
            ),
            (
                "bad-interval",
                json!({"forProvider": {"name": "x"}, "driftInterval": "soon"}),
                "spec.driftInterval",
            ),
            (
                "port-text",
                json!({"forProvider": {"name": "x", "rules": [{"port": "http"}]}}),
                "spec.forProvider.rules[0].port",
            ),
        ];
        for (name, spec, needle) in cases {
            let err = bed.apply_object_refused(name, spec)?;
            eprintln!("{name}: {}", err.trim());
            ensure!(
                err.contains(needle),
                "{name}: the refusal must name {needle}: {err}"
            );
        }
        ensure!(
            bed.cp.list_json(&bed.ns, OBJECTS)?.is_empty(),
            "nothing was admitted"
        );
        expect_ops(bed, &[])?;
        Ok(())
    })
}

#[test]
fn missing_provider_config_is_reported_by_name() -> anyhow::Result<()> {
    default_run("no-pc", |bed| {
        bed.apply_object(
            "web",
            spec("web", 3, json!({"providerConfigRef": {"name": "nowhere"}})),
        )?;
        let obj = bed.wait_synced("web", "False", "ProviderConfigMissing", CONVERGE)?;
        let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
        ensure!(
            message.contains("nowhere"),
            "the message must name the ProviderConfig: {message:?}"
        );
        bed.wait_event("web", "ProviderConfigMissing", CONVERGE)?;
        expect_ops(bed, &[])?;

        bed.apply_provider_config("nowhere", json!({}))?;
        bed.wait_reconciled("web", RECOVER)?;
        ensure!(sole_object(bed)?["name"] == "web");
        Ok(())
    })
}

#[test]
fn missing_secret_is_reported_by_name() -> anyhow::Result<()> {
    default_run("no-secret", |bed| {
        let pw =
            json!({"forProvider": {"passwordSecretRef": {"name": "absent-pw", "key": "password"}}});
        bed.apply_object("web", spec("web", 3, pw))?;
        let obj = bed.wait_synced("web", "False", "SecretMissing", CONVERGE)?;
        let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
        ensure!(
            message.contains("absent-pw"),
            "the message must name the Secret: {message:?}"
        );
        bed.wait_event("web", "SecretMissing", CONVERGE)?;
        expect_ops(bed, &[])?;

        bed.apply(
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "absent-pw"},
                    "stringData": {"password": "now-here"}})
            .to_string(),
        )?;
        bed.wait_reconciled("web", RECOVER)?;
        ensure!(sole_object(bed)?["password"] == "now-here");
        Ok(())
    })
}

#[test]
fn invalid_provider_config_fails_every_user() -> anyhow::Result<()> {
    default_run("bad-token", |bed| {
        bed.apply_provider_config("default", json!({"token": "invalid"}))?;
        for name in ["one", "two"] {
            bed.apply_object(name, spec(name, 1, json!({})))?;
        }
        for name in ["one", "two"] {
            let obj = bed.wait_synced(name, "False", "ProviderConfigInvalid", CONVERGE)?;
            let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
            ensure!(
                message.contains("invalid token"),
                "{name}: the message must carry the provider's diagnostic: {message:?}"
            );
            bed.wait_event(name, "ProviderConfigInvalid", CONVERGE)?;
        }
        expect_ops(bed, &[])?;
        // The ProviderConfig says so too.
        let pc = wait_for(CONVERGE, "ProviderConfig Ready=False", || {
            let pc = bed
                .cp
                .get_json(&bed.ns, "providerconfigs.core.kraken.dev", "default")?;
            Ok(condition(&pc, "Ready")
                .filter(|(s, r, _)| s == "False" && r == "ProviderConfigInvalid")
                .map(|_| pc))
        })?;
        let (_, _, message) = condition(&pc, "Ready").context("Ready")?;
        ensure!(
            message.contains("invalid token"),
            "ProviderConfig message: {message:?}"
        );

        bed.apply_provider_config("default", json!({"token": "fine"}))?;
        for name in ["one", "two"] {
            bed.wait_reconciled(name, RECOVER)?;
        }
        ensure!(ledger::objects(bed.ledger_dir())?.len() == 2);
        Ok(())
    })
}

#[test]
fn provider_apply_failure_is_reported_without_a_hot_loop() -> anyhow::Result<()> {
    default_run("apply-fails", |bed| {
        bed.apply_provider_config("default", json!({"failApply": true}))?;
        bed.apply_object("web", spec("web", 3, json!({})))?;
        let obj = bed.wait_synced("web", "False", "ProviderError", CONVERGE)?;
        let (_, _, message) = condition(&obj, "Synced").context("Synced")?;
        ensure!(
            message.contains("fixture apply failed"),
            "the provider's summary: {message:?}"
        );
        ensure!(
            message.contains("spec.forProvider.name"),
            "the diagnostic's attribute path, in Kubernetes field names: {message:?}"
        );
        let event = bed.wait_event("web", "ApplyFailed", CONVERGE)?;
        ensure!(
            event.contains("fixture apply failed"),
            "ApplyFailed Event: {event:?}"
        );

        // No hot loop. The provider's own record of the attempts (applies.log) shows them
        // retried on the documented backoff, 1 s doubling with ±20 % jitter: the gap before
        // retry n is at least 0.8 × 2^(n-1) s, whatever the load (load only adds to it). A
        // retry at a fixed 1 Hz fails the second gap.
        let attempts = |n: usize| -> anyhow::Result<Vec<ledger::ApplyCall>> {
            wait_for(
                Duration::from_secs(60),
                &format!("{n} apply attempts"),
                || {
                    let calls = ledger::apply_calls(bed.ledger_dir())?;
                    if calls.len() >= n && calls[..n].iter().all(|c| c.end.is_some()) {
                        Ok(Some(calls))
                    } else {
                        bail!("{calls:?}")
                    }
                },
            )
        };
        // Between retries the operator's counters show what each retry costs: exactly one
        // reconcile and one create attempt, whose writes are the fenced create's (the
        // create-attempt annotation before, the state Secret recording the answered attempt
        // after) and its ApplyFailed Event; the unchanged condition is not rewritten. Counted
        // from a quiet point in the backoff after attempt 2 to one after attempt 4 (the backoff
        // after each is at least 1.6 s; quiet means 300 ms without change).
        attempts(2)?;
        let after_2 = bed.settle(Duration::from_millis(300), Duration::from_millis(50))?;
        attempts(4)?;
        let after_4 = bed.settle(Duration::from_millis(300), Duration::from_millis(50))?;
        let calls = ledger::apply_calls(bed.ledger_dir())?;
        ensure!(
            calls.len() == 4 && calls.iter().all(|c| c.op == "create"),
            "four create attempts, no more, by the time the counters settled: {calls:?}"
        );
        for (n, pair) in calls.windows(2).enumerate() {
            let gap = Duration::from_nanos(u64::try_from(pair[1].begin - pair[0].begin)?);
            let least = Duration::from_millis(800) * (1 << n);
            eprintln!("retry {}: {gap:?} after the attempt before", n + 1);
            ensure!(
                gap >= least,
                "hot loop: retry {} came {gap:?} after the attempt before; the backoff is at \
                 least {least:?}",
                n + 1
            );
        }
        eprintln!(
            "two retries: {after_2:?} -> {after_4:?}, writes {:?}",
            after_4.writes_since(&after_2)
        );
        ensure!(
            after_4.reconciles - after_2.reconciles == 2.0
                && after_4.apply_calls - after_2.apply_calls == 2
                && after_4.ledger_events == after_2.ledger_events,
            "two retries must be two reconciles and two applies, and change nothing: \
             {after_2:?} -> {after_4:?}"
        );
        let writes = after_4.writes_since(&after_2);
        let fenced_attempts: std::collections::BTreeMap<String, f64> = [
            ("patch objects", 2.0),
            ("apply secrets", 2.0),
            ("create events", 2.0),
        ]
        .into_iter()
        .map(|(k, n)| (k.to_owned(), n))
        .collect();
        ensure!(
            writes == fenced_attempts,
            "two retries write two fenced attempts and two ApplyFailed Events, nothing more: \
             {writes:?}"
        );
        expect_ops(bed, &[]).context("fail_apply never touches the ledger")?;
        ensure!(bed.op.exit_status()?.is_none(), "the operator exited");

        bed.apply_provider_config("default", json!({"failApply": false}))?;
        bed.wait_reconciled("web", RECOVER)?;
        let live = sole_object(bed)?;
        let id = live["id"].as_str().unwrap_or_default();
        expect_ops(bed, &[format!("create {id} web")]).context("created once, after the fix")?;
        Ok(())
    })
}

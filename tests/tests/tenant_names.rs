//! The hostile (or merely unlucky) tenant and derived names: two providers' kinds of the same
//! name in one namespace, and objects made beforehand under the names Kraken derives. Against a
//! real API server, the operator, the fixture provider (protocol 6) and random (protocol 5).

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::operator::bed::{self, describe};
use kraken_tests::operator::{FixtureBed, OperatorOptions, condition};
use kraken_tests::{ledger, repo_root, wait_for};
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(90);
const FIXTURE_UUIDS: &str = "uuids.fixture.tf.kraken.dev";
const RANDOM_UUIDS: &str = "uuids.random.tf.kraken.dev";
const SECRETS: &str = "secrets";
const DECLARATIONS: &str = "statedeclarations.core.kraken.dev";

fn get(bed: &FixtureBed, resource: &str, name: &str) -> anyhow::Result<Option<Value>> {
    bed.cp.get_json_opt(&bed.ns, resource, name)
}

fn wait_reconciled(bed: &FixtureBed, resource: &str, name: &str) -> anyhow::Result<Value> {
    bed::wait_reconciled(&bed.cp, (&bed.ns, resource, name), CONVERGE)
}

/// The message of `resource/name`'s condition `type_` once its reason is `reason` (any status)
/// and it says `text`.
fn wait_reason(
    bed: &FixtureBed,
    (resource, name): (&str, &str),
    (type_, reason): (&str, &str),
    text: &str,
) -> anyhow::Result<String> {
    wait_for(
        CONVERGE,
        &format!("{resource} {name} {type_} {reason} {text:?}"),
        || {
            let obj = get(bed, resource, name)?.context("does not exist")?;
            match condition(&obj, type_) {
                Some((_, r, m)) if r == reason && m.contains(text) => Ok(Some(m)),
                other => bail!("{type_} is {other:?}"),
            }
        },
    )
}

fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn owner_uid(obj: &Value) -> String {
    obj["metadata"]["ownerReferences"][0]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Objects publish their StateDeclaration once something reads it; the ones here are looked at
/// before, so they ask to be published always.
fn publish() -> Value {
    json!({"kraken.dev/publish": "true"})
}

fn fixture_uuid(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Uuid",
           "metadata": {"name": name, "namespace": ns, "annotations": publish()},
           "spec": {"forProvider": {"name": name, "size": 1}}})
}

/// `Uuid` is a kind of random (`random_uuid`) and of the fixture (`fixture_uuid`). One of
/// each, both named `u`, live side by side in one namespace with their own state Secrets and
/// StateDeclarations; a reference to `Uuid u` must say which; deleting one leaves the other's
/// objects alone. A Secret a user made beforehand under the name of a third object's state is
/// left untouched, and that object reports `NotOwned` and creates nothing; a StateDeclaration
/// made under a fourth one's name is left untouched too (that object exists, and reports
/// `NotOwned` instead of publishing its outputs).
#[test]
fn same_kind_from_two_providers_and_squatted_names_leave_each_other_alone() -> anyhow::Result<()> {
    let bed = FixtureBed::start("tenant-names", OperatorOptions::default())?;
    let result = (|| {
        apply_two_uuids_and_squatters(&bed)?;
        let theirs = expect_side_by_side(&bed)?;
        expect_squatted_names_untouched(&bed)?;
        expect_references_say_which(&bed, &theirs)?;
        expect_deleting_one_leaves_the_other(&bed)
    })();
    bed.finish(result)
}

/// What a user made first, under names Kraken would derive for the objects below; then a
/// `Uuid u` of each provider and the two fixture Uuids whose names are squatted.
fn apply_two_uuids_and_squatters(bed: &FixtureBed) -> anyhow::Result<()> {
    let ns = bed.ns.clone();
    bed.cp.install_crds(
        &repo_root().join("generated-crds/random"),
        "tf.kraken.dev/provider=random",
    )?;
    let squatted = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "uuid-squat.fixture-tfstate", "namespace": ns},
        "stringData": {"notes": "mine"}});
    let declared = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "StateDeclaration",
        "metadata": {"name": "uuid-declared.fixture", "namespace": ns},
        "spec": {"producer": {"apiVersion": "v1", "kind": "ConfigMap", "name": "mine", "uid": "x"},
                 "outputs": {"id": "the user's"}}});
    bed.apply(&format!("{squatted}\n---\n{declared}"))?;
    let docs = [
        json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
               "metadata": {"name": "random", "namespace": ns},
               "spec": {"source": "hashicorp/random"}}),
        fixture_uuid(&ns, "u"),
        json!({"apiVersion": "random.tf.kraken.dev/v1alpha1", "kind": "Uuid",
               "metadata": {"name": "u", "namespace": ns, "annotations": publish()},
               "spec": {"providerConfigRef": {"name": "random"}, "forProvider": {}}}),
        fixture_uuid(&ns, "squat"),
        fixture_uuid(&ns, "declared"),
    ];
    let stream: Vec<String> = docs.iter().map(Value::to_string).collect();
    bed.apply(&stream.join("\n---\n"))?;
    Ok(())
}

/// Both `u` reconciled, each with its own state Secret and StateDeclaration; returns
/// random's.
fn expect_side_by_side(bed: &FixtureBed) -> anyhow::Result<Value> {
    let ours = wait_reconciled(bed, FIXTURE_UUIDS, "u")?;
    let theirs = wait_reconciled(bed, RANDOM_UUIDS, "u")?;
    for (obj, state, declaration) in [
        (&ours, "uuid-u.fixture-tfstate", "uuid-u.fixture"),
        (&theirs, "uuid-u.random-tfstate", "uuid-u.random"),
    ] {
        let secret = get(bed, SECRETS, state)?.with_context(|| format!("no {state}"))?;
        ensure!(owner_uid(&secret) == uid(obj), "{state} is not its owner's");
        let sd = get(bed, DECLARATIONS, declaration)?
            .with_context(|| format!("no StateDeclaration {declaration}"))?;
        ensure!(
            owner_uid(&sd) == uid(obj),
            "{declaration} is not its owner's"
        );
        let id = &obj["status"]["atProvider"]["id"];
        ensure!(
            sd["spec"]["outputs"]["id"] == *id,
            "{declaration} publishes {} for id {id}",
            sd["spec"]["outputs"]
        );
    }
    ensure!(
        ours["status"]["atProvider"]["id"] != theirs["status"]["atProvider"]["id"],
        "the two Uuids share one object"
    );
    Ok(theirs)
}

/// The squatted names: refused, untouched, nothing created.
fn expect_squatted_names_untouched(bed: &FixtureBed) -> anyhow::Result<()> {
    wait_reason(
        bed,
        (FIXTURE_UUIDS, "squat"),
        ("Synced", "NotOwned"),
        "uuid-squat.fixture-tfstate",
    )?;
    let secret = get(bed, SECRETS, "uuid-squat.fixture-tfstate")?.context("gone")?;
    ensure!(
        secret["data"].as_object().map(|d| d.len()) == Some(1)
            && secret["data"]["notes"].is_string(),
        "the user's Secret was changed: {}",
        secret["data"]
    );
    wait_reason(
        bed,
        (FIXTURE_UUIDS, "declared"),
        ("Synced", "NotOwned"),
        "uuid-declared.fixture",
    )?;
    let sd = get(bed, DECLARATIONS, "uuid-declared.fixture")?.context("gone")?;
    ensure!(
        sd["spec"]["outputs"] == json!({"id": "the user's"}),
        "the user's StateDeclaration was overwritten: {}",
        sd["spec"]
    );
    let created = ledger::event_log(bed.ledger_dir())?;
    ensure!(
        !created.iter().any(|e| e.name == "squat"),
        "an object was created over someone else's state Secret: {created:?}"
    );
    Ok(())
}

/// A reference to `Uuid u` must say which provider's; with apiVersion it resolves (to
/// random's, `theirs`).
fn expect_references_say_which(bed: &FixtureBed, theirs: &Value) -> anyhow::Result<()> {
    let ns = &bed.ns;
    let consumer = |name: &str, reference: Value| {
        json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"forProvider": {"size": 1},
                        "valuesFrom": [{"path": "name", "resource": reference}]}})
    };
    bed.apply(
        &[
            consumer("vague", json!({"kind": "Uuid", "name": "u", "path": "id"})),
            consumer(
                "precise",
                json!({"apiVersion": "random.tf.kraken.dev/v1alpha1",
                       "kind": "Uuid", "name": "u", "path": "id"}),
            ),
        ]
        .map(|d| d.to_string())
        .join("\n---\n"),
    )?;
    let m = wait_reason(
        bed,
        ("objects.fixture.tf.kraken.dev", "vague"),
        ("Synced", "WaitingForDependencies"),
        "Ambiguous",
    )?;
    ensure!(
        m.contains("apiVersion") && m.contains("random.tf.kraken.dev"),
        "{m}"
    );
    let precise = wait_reconciled(bed, "objects.fixture.tf.kraken.dev", "precise")?;
    ensure!(
        precise["status"]["atProvider"]["name"] == theirs["status"]["atProvider"]["id"],
        "precise took {} instead of random's id",
        precise["status"]["atProvider"]["name"]
    );
    bed.cp.kubectl(&[
        "delete",
        "-n",
        ns,
        "objects.fixture.tf.kraken.dev",
        "vague",
        "precise",
    ])?;
    Ok(())
}

/// Deleting the fixture's Uuid leaves random's objects where they were.
fn expect_deleting_one_leaves_the_other(bed: &FixtureBed) -> anyhow::Result<()> {
    let ns = &bed.ns;
    bed.cp.kubectl(&["delete", "-n", ns, FIXTURE_UUIDS, "u"])?;
    wait_for(CONVERGE, "the fixture's Uuid u gone", || {
        match get(bed, FIXTURE_UUIDS, "u")? {
            None => Ok(Some(())),
            Some(o) => bail!("{}", describe(&o)),
        }
    })?;
    ensure!(
        get(bed, SECRETS, "uuid-u.fixture-tfstate")?.is_none(),
        "uuid-u.fixture-tfstate outlived its owner"
    );
    ensure!(
        get(bed, DECLARATIONS, "uuid-u.fixture")?.is_none(),
        "uuid-u.fixture stayed"
    );
    ensure!(
        get(bed, SECRETS, "uuid-u.random-tfstate")?.is_some(),
        "random's state went too"
    );
    ensure!(
        get(bed, DECLARATIONS, "uuid-u.random")?.is_some(),
        "random's declaration went too"
    );
    wait_reconciled(bed, RANDOM_UUIDS, "u")?;
    Ok(())
}

//! `kraken plan -f` end to end (docs/operator.md, "kraken plan"): a real kube-apiserver + etcd,
//! the operator as a process and the fixture provider. The plan of new objects, of a change
//! set over applied ones (update, replace, no-op, a valuesFrom), exit codes as `terraform plan
//! -detailed-exitcode`, and proof that planning wrote nothing: resourceVersions of the objects
//! and their state Secrets unchanged, no new objects, no mutation and no ApplyResourceChange in
//! the fixture's ledger. Then the repository's examples, with their Providers installed at
//! runtime from the test mirror.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::operator::bed::{
    OBJECTS, provider_config_manifest, state_secret_name, wait_condition, yaml_documents,
};
use kraken_tests::operator::{FixtureBed, Operator, OperatorOptions};
use kraken_tests::{ControlPlane, TestEnv, kraken_bin, ledger, repo_root, scratch_dir};
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(90);
const PASSWORD: &str = "hunter2-plan-cli";

/// What one `kraken plan` run ended with.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `kraken plan -f <files> [extra]` against `kubeconfig`, without colour.
fn plan(kubeconfig: &Path, files: &[&Path], extra: &[&str]) -> anyhow::Result<Run> {
    let env = TestEnv::load()?;
    let dir = env.path("KRAKEN_TEST_PLUGIN_DIR")?.display().to_string();
    let mut args = vec!["--plugin-dir", dir.as_str()];
    args.extend_from_slice(extra);
    plan_bare(kubeconfig, files, &args)
}

/// `kraken plan -f <files> [extra]` as a user runs it: no plugin directory of the test peers,
/// none in the environment.
fn plan_bare(kubeconfig: &Path, files: &[&Path], extra: &[&str]) -> anyhow::Result<Run> {
    let mut cmd = Command::new(kraken_bin()?);
    cmd.arg("plan").arg("--kubeconfig").arg(kubeconfig);
    cmd.env_remove("KRAKEN_PLUGIN_DIR")
        .env_remove("KRAKEN_PLUGIN_CACHE")
        .env_remove("KRAKEN_PROVIDER_MIRROR");
    for f in files {
        cmd.arg("-f").arg(f);
    }
    cmd.args(extra).arg("--no-color");
    let out = cmd.output().context("running kraken plan")?;
    Ok(Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

impl Run {
    fn expect(self, code: i32, what: &str) -> anyhow::Result<Self> {
        ensure!(
            self.code == Some(code),
            "{what}: exit {:?}, expected {code}\nstdout:\n{}\nstderr:\n{}",
            self.code,
            self.stdout,
            self.stderr
        );
        Ok(self)
    }

    fn has(&self, text: &str) -> anyhow::Result<()> {
        ensure!(
            self.stdout.contains(text),
            "the plan does not say {text:?}:\n{}",
            self.stdout
        );
        Ok(())
    }
}

/// The Object `name` with `for_provider` (and `values_from`, if not empty).
fn object(ns: &str, name: &str, for_provider: Value, values_from: Value) -> Value {
    let mut spec = json!({"forProvider": for_provider});
    if values_from.as_array().is_some_and(|v| !v.is_empty()) {
        spec["valuesFrom"] = values_from;
    }
    json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// The manifest set: `a` (size `a_size`), `b` (a password from the Secret `pw` of the set), `c` (named
/// `c_name`, through the ProviderConfig `staged` of the set), `d` (tags from `b`'s id and from
/// the ConfigMap `settings`), `settings`, `staged` and `pw`.
fn manifests(bed: &FixtureBed, a_size: u32, c_name: &str) -> String {
    let ns = bed.ns.as_str();
    let staged = provider_config_manifest(
        ns,
        "staged",
        json!({"ledgerDir": bed.ledger_dir().to_string_lossy()}),
    );
    let settings = json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "settings", "namespace": ns},
                          "data": {"mode": "fast"}});
    let pw = json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "pw", "namespace": ns},
                    "stringData": {"password": PASSWORD}});
    let mut c = object(ns, "c", json!({"name": c_name}), json!([]));
    c["spec"]["providerConfigRef"] = json!({"name": "staged"});
    yaml_documents(&[
        settings,
        staged,
        pw,
        object(ns, "a", json!({"name": "a", "size": a_size}), json!([])),
        object(
            ns,
            "b",
            json!({"name": "b", "passwordSecretRef": {"name": "pw", "key": "password"}}),
            json!([]),
        ),
        c,
        object(
            ns,
            "d",
            json!({"name": "d"}),
            json!([
                {"path": "tags.src", "resource": {"kind": "Object", "name": "b", "path": "id"}},
                {"path": "tags.mode", "configMapKeyRef": {"name": "settings", "key": "mode"}},
            ]),
        ),
    ])
}

#[test]
fn plans_manifests_without_writing_anything() -> anyhow::Result<()> {
    let bed = FixtureBed::start("plan-cli", OperatorOptions::default())?;
    let result = scenario(&bed);
    bed.finish(result)
}

fn scenario(bed: &FixtureBed) -> anyhow::Result<()> {
    let ns = bed.ns.as_str();
    let dir = scratch_dir("kraken-plan-")?;
    let new = dir.path().join("new.yaml");
    std::fs::write(&new, manifests(bed, 1, "c"))?;
    let kubeconfig = bed.cp.kubeconfig();

    // (a) New objects: all created, their attributes listed, the password never printed.
    let run = plan(kubeconfig, &[&new], &[])?.expect(2, "plan of new objects")?;
    for name in ["a", "b", "c", "d"] {
        run.has(&format!(
            "+ create  Object {ns}/{name} (fixture.tf.kraken.dev/v1alpha1)"
        ))?;
        run.has(&format!("+ spec.forProvider.name = \"{name}\""))?;
    }
    run.has("+ spec.forProvider.size = 1")?;
    run.has("+ status.atProvider.id = (known after apply)")?;
    run.has("+ spec.forProvider.passwordSecretRef = (sensitive)")?;
    run.has(&format!(
        "= as-is   ConfigMap {ns}/settings (v1): not a managed kind: not planned (applied as-is)"
    ))?;
    run.has(&format!(
        "= as-is   ProviderConfig {ns}/staged (core.kraken.dev/v1alpha1)"
    ))?;
    // b is created by the same set: what d reads from it is not known yet.
    run.has(
        "valuesFrom tags.src <- StateDeclaration object-b.fixture path id = (known after apply)",
    )?;
    run.has("valuesFrom tags.mode <- ConfigMap settings key mode = \"fast\"")?;
    run.has(
        "Plan: 4 to create, 0 to update, 0 to replace, 0 unchanged; 3 not planned (applied as-is).",
    )?;
    ensure!(!run.stdout.contains(PASSWORD) && !run.stderr.contains(PASSWORD));
    let json_run = plan(kubeconfig, &[&new], &["--json"])?.expect(2, "--json plan")?;
    let doc: Value = serde_json::from_str(&json_run.stdout).context("--json is JSON")?;
    let actions: BTreeMap<String, String> = doc["items"]
        .as_array()
        .context("items")?
        .iter()
        .map(|i| (s(&i["name"]), s(&i["action"])))
        .collect();
    let expected: BTreeMap<String, String> = [
        ("settings", "as-is"),
        ("staged", "as-is"),
        ("pw", "as-is"),
        ("a", "create"),
        ("b", "create"),
        ("c", "create"),
        ("d", "create"),
    ]
    .into_iter()
    .map(|(n, a)| (n.to_owned(), a.to_owned()))
    .collect();
    ensure!(actions == expected, "--json actions: {actions:?}");
    ensure!(
        doc["summary"]["create"] == 4 && doc["changes"] == true,
        "{doc}"
    );
    ensure!(!json_run.stdout.contains(PASSWORD));
    nothing_made(bed)?;
    applied_then_changed(bed, &new, dir.path())
}

/// Nothing was made: no Objects, no ConfigMap, nothing in the hub, nothing in the cloud.
fn nothing_made(bed: &FixtureBed) -> anyhow::Result<()> {
    let ns = bed.ns.as_str();
    ensure!(
        bed.cp.list_json(ns, OBJECTS)?.is_empty(),
        "Objects were created"
    );
    ensure!(bed.cp.get_json_opt(ns, "configmaps", "settings")?.is_none());
    let pc = bed
        .cp
        .get_json_opt(ns, "providerconfigs.core.kraken.dev", "staged")?;
    ensure!(pc.is_none(), "the ProviderConfig staged was created");
    ensure!(
        bed.cp.get_json_opt(ns, "secrets", "pw")?.is_none(),
        "the Secret pw was created"
    );
    for kind in [
        "statedeclarations.core.kraken.dev",
        "dependencyrequests.core.kraken.dev",
    ] {
        ensure!(
            bed.cp.list_json(ns, kind)?.is_empty(),
            "{kind} were created"
        );
    }
    ensure!(
        ledger::event_log(bed.ledger_dir())?.is_empty(),
        "the ledger changed"
    );
    ensure!(
        ledger::apply_calls(bed.ledger_dir())?.is_empty(),
        "applies were made"
    );

    Ok(())
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// (b), (c): the set applied, then a change set planned, then the unchanged set.
fn applied_then_changed(bed: &FixtureBed, new: &Path, dir: &Path) -> anyhow::Result<()> {
    let ns = bed.ns.as_str();
    let kubeconfig = bed.cp.kubeconfig();
    bed.apply(&std::fs::read_to_string(new)?)?;
    for name in ["a", "b", "c", "d"] {
        bed.wait_reconciled(name, CONVERGE)?;
    }
    bed.settle(Duration::from_secs(2), Duration::from_millis(250))?;
    let b_id = s(&bed.object("b")?["status"]["atProvider"]["id"]);
    ensure!(b_id.starts_with("obj-"), "b's id: {b_id:?}");
    let before = snapshot(bed)?;

    let changed = dir.join("changed.yaml");
    std::fs::write(&changed, manifests(bed, 3, "c2"))?;
    let run = plan(kubeconfig, &[&changed], &[])?.expect(2, "plan of a change set")?;
    eprintln!("the change set's plan:\n{}", run.stdout);
    run.has(&format!("~ update  Object {ns}/a"))?;
    run.has("~ spec.forProvider.size: 1 -> 3")?;
    run.has(&format!("-/+ replace Object {ns}/c"))?;
    run.has("~ spec.forProvider.name: \"c\" -> \"c2\" # forces replacement")?;
    run.has(&format!("    no-op   Object {ns}/b"))?;
    run.has(&format!("    no-op   Object {ns}/d"))?;
    run.has(&format!(
        "valuesFrom tags.src <- StateDeclaration object-b.fixture path id = \"{b_id}\""
    ))?;
    run.has(
        "Plan: 0 to create, 1 to update, 1 to replace, 2 unchanged; 3 not planned (applied as-is).",
    )?;
    ensure!(!run.stdout.contains(PASSWORD));
    let unchanged = plan(kubeconfig, &[new], &[])?.expect(0, "plan of the applied set")?;
    unchanged.has("Plan: 0 to create, 0 to update, 0 to replace, 4 unchanged")?;

    let after = snapshot(bed)?;
    ensure!(
        before == after,
        "planning wrote:\nbefore {before:#?}\nafter {after:#?}"
    );
    bad_input(bed, dir)
}

/// What a plan must not change: every object's and Secret's resourceVersion in the namespace,
/// the StateDeclarations and DependencyRequests, and the fixture's ledger and applies.
#[derive(Debug, PartialEq)]
struct Snapshot {
    versions: BTreeMap<String, String>,
    events: usize,
    applies: usize,
}

fn snapshot(bed: &FixtureBed) -> anyhow::Result<Snapshot> {
    let mut versions = BTreeMap::new();
    for resource in [
        OBJECTS,
        "secrets",
        "configmaps",
        "statedeclarations.core.kraken.dev",
        "dependencyrequests.core.kraken.dev",
    ] {
        for o in bed.cp.list_json(&bed.ns, resource)? {
            let key = format!("{resource}/{}", s(&o["metadata"]["name"]));
            versions.insert(key, s(&o["metadata"]["resourceVersion"]));
        }
    }
    for name in ["a", "b", "c", "d"] {
        let secret = format!("secrets/{}", state_secret_name("Object", name));
        ensure!(versions.contains_key(&secret), "no state Secret {secret}");
    }
    Ok(Snapshot {
        versions,
        events: ledger::event_log(bed.ledger_dir())?.len(),
        applies: ledger::apply_calls(bed.ledger_dir())?.len(),
    })
}

/// (d) A file that is not YAML and a kind nobody serves: exit 1, saying which and why.
fn bad_input(bed: &FixtureBed, dir: &Path) -> anyhow::Result<()> {
    let kubeconfig = bed.cp.kubeconfig();
    let garbage = dir.join("garbage.yaml");
    std::fs::write(&garbage, "kind: [this is not\n  yaml: at all\n")?;
    let run = plan(kubeconfig, &[&garbage], &[])?.expect(1, "a file that is not YAML")?;
    let want = format!("{} is not valid YAML or JSON", garbage.display());
    ensure!(run.stderr.contains(&want), "stderr: {}", run.stderr);
    let widget = dir.join("widget.yaml");
    let doc = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                     "metadata": {"name": "w", "namespace": bed.ns}});
    std::fs::write(&widget, doc.to_string())?;
    let run = plan(kubeconfig, &[&widget], &[])?.expect(1, "an unknown kind")?;
    run.has("the cluster does not serve kind Widget in example.com/v1")?;
    Ok(())
}

/// The repository's examples: their Providers (random, time) installed at runtime from the test
/// mirror, as `scripts/demo.sh up` does; then `kraken plan` as a user runs it beside (no
/// plugin directory, a plugin cache of its own) fetches the builds the Providers recorded and
/// plans every resource of `examples/` as a create, the rest applied as-is. A package changed
/// in its cache afterwards is refused.
#[test]
fn plans_the_repository_examples() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let mirror = env.path("KRAKEN_TEST_PLUGIN_DIR")?;
    let cp = ControlPlane::start("plan-examples")?;
    cp.install_crds(
        &repo_root().join("generated-crds/core"),
        "kraken.dev/core=true",
    )?;
    let cache = scratch_dir("kraken-plugin-cache-")?;
    let cache_arg = cache.path().display().to_string();
    let mut op = Operator::start(
        &cp,
        OperatorOptions {
            args: vec![
                "--plugin-cache".into(),
                cache_arg,
                "--provider-mirror".into(),
                mirror.display().to_string(),
            ],
            leader_elect: false,
            ..OperatorOptions::default()
        },
    )?;
    op.wait_ready(Duration::from_secs(60))?;
    let examples = repo_root().join("examples");
    cp.apply_yaml(
        "default",
        &std::fs::read_to_string(examples.join("00-providers.yaml"))?,
    )?;
    for p in ["random", "time"] {
        let provider = ("", "providers.core.kraken.dev", p);
        wait_condition(&cp, provider, ("Ready", "True", "Installed"), "", CONVERGE)?;
    }
    // The user's own plugin cache: empty, as on a fresh machine.
    let users = scratch_dir("kraken-users-cache-")?;
    let users_arg = users.path().display().to_string();
    let run = plan_bare(
        cp.kubeconfig(),
        &[&examples],
        &["--plugin-cache", &users_arg],
    )?;
    let run = match run.code {
        Some(2) => run,
        _ => bail!(
            "examples: exit {:?}\nstdout:\n{}\nstderr:\n{}\noperator log:\n{}",
            run.code,
            run.stdout,
            run.stderr,
            op.log_tail(40)
        ),
    };
    for (kind, name) in [
        ("Pet", "web"),
        ("Pet", "db"),
        ("String", "token"),
        ("Static", "launched"),
    ] {
        run.has(&format!("+ create  {kind} default/{name}"))?;
    }
    run.has("= as-is   EC2Instance default/app (aws.kraken.dev/v1alpha1)")?;
    run.has(
        "Plan: 4 to create, 0 to update, 0 to replace, 0 unchanged; 8 not planned (applied as-is).",
    )?;
    refuses_a_changed_package(&cp, &examples, users.path())
}

/// The package `kraken plan` fetched into `users` (its plugin cache), changed by someone: the
/// next plan refuses it.
fn refuses_a_changed_package(
    cp: &ControlPlane,
    examples: &Path,
    users: &Path,
) -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let users_arg = users.display().to_string();
    let fetched = users
        .join("registry.terraform.io/hashicorp/random")
        .join(env.provider("random")?.version)
        .join("linux_amd64");
    let binary = std::fs::read_dir(&fetched)
        .with_context(|| format!("kraken plan fetched random into {}", fetched.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_file())
        .context("the fetched binary")?;
    // Someone changes the package in the user's cache: refused, not launched.
    std::fs::remove_file(&binary)?;
    std::fs::write(&binary, b"#!/bin/sh\nexit 1\n")?;
    let run = plan_bare(
        cp.kubeconfig(),
        &[examples],
        &["--plugin-cache", &users_arg],
    )?
    .expect(1, "a changed package")?;
    run.has("will not be launched")?;
    Ok(())
}

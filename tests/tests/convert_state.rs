//! `kraken convert --state` end to end: the Terraform CLI applies a module over the fixture
//! provider (count, for_each, references, a local module reading the caller's object and
//! read by it, the same module again with count); `kraken convert --state terraform.tfstate` converts
//! it; `kraken plan` shows that adopting changes nothing (and shows the diff of a configuration
//! that no longer matches the state); the manifests are applied to a real kube-apiserver with
//! the operator running. Every
//! object becomes Ready by importing what Terraform made: the provider's ledger records no
//! create, update or delete, and `status.atProvider` holds Terraform's values. A change made
//! in a manifest afterwards reaches the object like any change.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use kraken_tests::bench::terraform;
use kraken_tests::operator::bed::OBJECTS;
use kraken_tests::operator::{FixtureBed, OperatorOptions};
use kraken_tests::{TestEnv, fixture_terraform_header, kraken_bin, ledger, scratch_dir};
use serde_json::Value;

const CONVERGE: Duration = Duration::from_secs(90);

/// The Kubernetes object and Terraform address of each instance.
const OBJECTS_BY_ADDRESS: [(&str, &str); 9] = [
    ("base", "fixture_object.base"),
    ("child-inner", "module.child.fixture_object.inner"),
    ("pair-0-inner", "module.pair[0].fixture_object.inner"),
    ("pair-1-inner", "module.pair[1].fixture_object.inner"),
    ("uses-child", "fixture_object.uses_child"),
    ("web-0", "fixture_object.web[0]"),
    ("web-1", "fixture_object.web[1]"),
    ("by-zone-a", "fixture_object.by_zone[\"a\"]"),
    ("by-zone-b", "fixture_object.by_zone[\"b\"]"),
];

fn module(ledger: &Path) -> String {
    let head = fixture_terraform_header(Some(ledger));
    format!(
        r#"
{head}variable "zones" {{
  type    = map(number)
  default = {{ a = 1, b = 2 }}
}}
resource "fixture_object" "base" {{
  name = "adopt-base"
  size = 1
}}
resource "fixture_object" "web" {{
  count  = 2
  name   = "adopt-web-${{count.index}}"
  size   = count.index + 2
  labels = [fixture_object.base.id, "web"]
}}
resource "fixture_object" "by_zone" {{
  for_each = var.zones
  name     = "adopt-${{each.key}}"
  size     = each.value * 10
}}
module "child" {{
  source  = "./child"
  prefix  = "adopt"
  base_id = fixture_object.base.id
}}
module "pair" {{
  count   = 2
  source  = "./child"
  prefix  = "adopt-pair-${{count.index}}"
  base_id = fixture_object.base.id
}}
resource "fixture_object" "uses_child" {{
  name   = "adopt-uses-child"
  size   = 4
  labels = [module.child.inner_id]
}}
"#
    )
}

/// A local module: one object reading the caller's, and an output the caller reads.
fn child() -> String {
    let head = fixture_terraform_header(None);
    format!(
        r#"
{head}
variable "prefix" {{
  type = string
}}
variable "base_id" {{
  type = string
}}
resource "fixture_object" "inner" {{
  name   = "${{var.prefix}}-inner"
  size   = 3
  labels = [var.base_id]
}}
output "inner_id" {{
  value = fixture_object.inner.id
}}
"#
    )
}

/// Terraform's attributes of each instance in `terraform.tfstate`, by address.
fn state_attributes(file: &Path) -> anyhow::Result<Vec<(String, Value)>> {
    let state: Value = serde_json::from_slice(&std::fs::read(file)?)?;
    let mut out = Vec::new();
    for r in state["resources"].as_array().context("resources")? {
        for i in r["instances"].as_array().context("instances")? {
            let key = match &i["index_key"] {
                Value::Null => String::new(),
                k => format!("[{k}]"),
            };
            let module = r["module"]
                .as_str()
                .map(|m| format!("{m}."))
                .unwrap_or_default();
            let address = format!(
                "{module}{}.{}{key}",
                r["type"].as_str().unwrap_or(""),
                r["name"].as_str().unwrap_or("")
            );
            out.push((address, i["attributes"].clone()));
        }
    }
    Ok(out)
}

/// `kraken convert <tf> --state <state> --namespace <ns> --out <out> <extra>`: its stdout.
fn convert(
    tf: &Path,
    state: &Path,
    ns: &str,
    out: &Path,
    extra: &[&str],
) -> anyhow::Result<String> {
    let env = TestEnv::load()?;
    let run = Command::new(kraken_bin()?)
        .arg("convert")
        .arg(tf)
        .arg("--state")
        .arg(state)
        .args(["--namespace", ns, "--out"])
        .arg(out)
        .arg("--plugin-dir")
        .arg(env.path("KRAKEN_TEST_PLUGIN_DIR")?)
        .args(extra)
        .output()?;
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    ensure!(
        run.status.success(),
        "convert --state failed: {stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    Ok(stdout)
}

/// `kraken plan -f <file>` against the bed: (exit code, stdout and stderr).
fn plan(bed: &FixtureBed, file: &Path) -> anyhow::Result<(Option<i32>, String)> {
    let (run, _) = kraken_tests::bench::kraken_plan(&kraken_bin()?, &bed.cp, file)?;
    Ok((
        run.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        ),
    ))
}

#[test]
fn a_terraform_state_is_adopted_with_zero_changes() -> anyhow::Result<()> {
    let mut bed = FixtureBed::start("adopt", OperatorOptions::default())?;
    let result = scenario(&mut bed);
    bed.finish(result)
}

fn scenario(bed: &mut FixtureBed) -> anyhow::Result<()> {
    let ns = bed.ns.clone();
    let work = scratch_dir("kraken-adopt-")?;
    let tf = work.path().join("tf");
    std::fs::create_dir_all(&tf)?;
    std::fs::write(tf.join("main.tf"), module(bed.ledger_dir()))?;
    std::fs::create_dir_all(tf.join("child"))?;
    std::fs::write(tf.join("child/main.tf"), child())?;
    terraform(&tf, &["init", "-input=false", "-no-color"])?;
    terraform(
        &tf,
        &["apply", "-auto-approve", "-input=false", "-no-color"],
    )?;
    let made = ledger::events(bed.ledger_dir());
    ensure!(
        made.iter().filter(|(op, _)| op == "create").count() == 9 && made.len() == 9,
        "Terraform made 9 objects: {made:?}"
    );

    let state = tf.join("terraform.tfstate");
    let out = work.path().join("out");
    let stdout = convert(&tf, &state, &ns, &out, &[])?;
    ensure!(
        stdout.contains("9 objects import"),
        "every instance imports: {stdout}"
    );
    let objects = out.join("resource-fixture-object.yaml");
    bed.apply_provider_config("fixture", serde_json::json!({}))?;
    // Terraform's objects carry no owner's tag: the administrator vouches for the migration
    // (docs/security.md, "Adoption needs consent").
    bed.cp.kubectl(&[
        "annotate",
        "namespace",
        &ns,
        "kraken.dev/adoptable-types=fixture_*",
    ])?;
    expect_plans_before_the_hand_over(bed, (&tf, &state), work.path(), &objects)?;

    bed.apply(&std::fs::read_to_string(&objects)?)?;
    let tf_state = state_attributes(&state)?;
    expect_adopted_as_terraform_left_them(bed, &tf_state, &made)?;
    expect_a_change_after_the_hand_over(bed, &tf_state, &made)
}

/// Before the hand-over, `kraken plan` imports each object through the real provider and
/// plans it: nothing to do. A configuration that no longer matches the state shows its diff.
fn expect_plans_before_the_hand_over(
    bed: &FixtureBed,
    (tf, state): (&Path, &Path),
    work: &Path,
    objects: &Path,
) -> anyhow::Result<()> {
    let ns = bed.ns.clone();
    let (code, plan_out) = plan(bed, objects)?;
    ensure!(
        code == Some(0),
        "zero-change plan: exit {code:?}\n{plan_out}"
    );
    let drifted = work.join("drifted");
    convert(tf, state, &ns, &drifted, &["--var", "zones={a = 1, b = 3}"])?;
    let (code, plan_out) = plan(bed, &drifted.join("resource-fixture-object.yaml"))?;
    ensure!(
        code == Some(2) && plan_out.contains("by-zone-b") && plan_out.contains("30"),
        "a changed variable shows in the plan: exit {code:?}\n{plan_out}"
    );
    eprintln!("{plan_out}");
    Ok(())
}

/// Every object reconciles with Terraform's attributes, and adopting changed nothing in the
/// cloud (the ledger still holds only the `made` creates).
fn expect_adopted_as_terraform_left_them(
    bed: &FixtureBed,
    tf_state: &[(String, serde_json::Value)],
    made: &[(String, String)],
) -> anyhow::Result<()> {
    for (name, address) in OBJECTS_BY_ADDRESS {
        let obj = bed.wait_reconciled(name, CONVERGE)?;
        let attrs = &tf_state
            .iter()
            .find(|(a, _)| a == address)
            .with_context(|| format!("{address} in the state"))?
            .1;
        let at = &obj["status"]["atProvider"];
        for key in ["id", "name", "size"] {
            ensure!(
                at[key] == attrs[key],
                "{name}: atProvider.{key} is {} but Terraform's state holds {}",
                at[key],
                attrs[key]
            );
        }
    }
    let after = ledger::events(bed.ledger_dir());
    ensure!(
        after == made,
        "adopting changed the cloud: {:?}",
        &after[made.len().min(after.len())..]
    );
    Ok(())
}

/// A change in a manifest after the hand-over reaches the object like any other: one update.
fn expect_a_change_after_the_hand_over(
    bed: &FixtureBed,
    tf_state: &[(String, serde_json::Value)],
    made: &[(String, String)],
) -> anyhow::Result<()> {
    let ns = bed.ns.clone();
    let zone_a = tf_state
        .iter()
        .find(|(a, _)| a == "fixture_object.by_zone[\"a\"]")
        .and_then(|(_, v)| v["id"].as_str().map(str::to_owned))
        .context("by_zone[a]'s id")?;
    bed.cp.kubectl(&[
        "patch",
        OBJECTS,
        "by-zone-a",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"forProvider":{"size":15}}}"#,
    ])?;
    kraken_tests::wait_for(CONVERGE, "by-zone-a updated in the ledger", || {
        let objects = ledger::objects(bed.ledger_dir())?;
        let zone = objects
            .iter()
            .find(|o| o["id"] == zone_a.as_str())
            .context("by_zone[a] in the ledger")?;
        if zone["size"] == 15 {
            Ok(Some(()))
        } else {
            anyhow::bail!("size {}", zone["size"])
        }
    })?;
    let changed: Vec<_> = ledger::events(bed.ledger_dir())
        .into_iter()
        .skip(made.len())
        .collect();
    ensure!(
        changed == [("update".to_owned(), zone_a.clone())],
        "one update of by_zone[a]: {changed:?}"
    );
    Ok(())
}

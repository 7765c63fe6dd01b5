//! Local modules: inlined at their path, once per instance of their `count` or `for_each`.

use super::*;

/// A local module is inlined at its path: its resources' addresses and names carry it, an
/// argument reading the caller's object stays a reference inside it, the caller reads its
/// outputs, and a registry module is reported and left out.
#[test]
fn local_modules_are_inlined_with_their_path() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("main.tf"),
        r#"
resource "fixture_uuid" "seed" {
  name = "s"
}
module "net" {
  source  = "./net"
  prefix  = "p"
  seed_id = fixture_uuid.seed.id
}
module "remote" {
  source = "hashicorp/consul/aws"
}
resource "fixture_object" "user" {
  name   = module.net.label
  labels = [module.net.obj_id]
}
"#,
    )?;
    std::fs::create_dir(dir.path().join("net"))?;
    std::fs::write(
        dir.path().join("net/main.tf"),
        r#"
variable "prefix" {
  type = string
}
variable "seed_id" {
  type = string
}
resource "fixture_object" "main" {
  name   = "${var.prefix}-x"
  labels = [var.seed_id]
}
output "obj_id" {
  value = fixture_object.main.id
}
output "label" {
  value = "${var.prefix}-label"
}
"#,
    )?;
    let ev = evaluate(&load(dir.path())?, &Inputs::default());
    let addresses: Vec<String> = ev.instances.iter().map(|i| i.address()).collect();
    assert_eq!(
        addresses,
        [
            "module.net.fixture_object.main",
            "fixture_uuid.seed",
            "fixture_object.user"
        ]
    );
    let inner = &ev.instances[0];
    assert_eq!(inner.args["name"], Val::Known(json!("p-x")));
    let seed = Ref {
        module: String::new(),
        data: false,
        type_name: "fixture_uuid".into(),
        name: "seed".into(),
        key: None,
        path: vec![json!("id")],
    };
    assert_eq!(inner.args["labels"], Val::List(vec![Val::Ref(seed)]));
    let user = &ev.instances[2];
    assert_eq!(user.args["name"], Val::Known(json!("p-label")));
    let Val::List(labels) = &user.args["labels"] else {
        panic!("labels: {:?}", user.args["labels"]);
    };
    let Val::Ref(r) = &labels[0] else {
        panic!("labels: {labels:?}");
    };
    assert_eq!(r.address(), "module.net.fixture_object.main");
    let remote: Vec<&crate::vars::Problem> = ev
        .problems
        .iter()
        .filter(|p| p.subject == "module.remote")
        .collect();
    assert!(
        remote.len() == 1 && !remote[0].blocking && remote[0].message.contains("not a local"),
        "{:?}",
        ev.problems
    );
    assert_eq!(ev.problems.len(), 1, "{:?}", ev.problems);

    let out = emit_ev(&ev);
    assert_eq!(
        out.names
            .get("module.net.fixture_object.main")
            .map(String::as_str),
        Some("net-main")
    );
    Ok(())
}

/// A module with `count` or `for_each` is inlined once per instance, at `module.x[0]` or
/// `module.x["k"]` (Terraform's addresses, so a state joins), its objects named with the key,
/// and the caller reads one instance's outputs by index or key.
#[test]
fn counted_and_keyed_modules_are_inlined_per_instance() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("main.tf"),
        r#"
module "net" {
  count  = 2
  source = "./net"
  prefix = "n${count.index}"
}
module "zone" {
  for_each = { a = "x", b = "y" }
  source   = "./net"
  prefix   = "${each.key}-${each.value}"
}
resource "fixture_object" "user" {
  name   = module.zone["b"].label
  labels = [module.net[1].obj_id]
}
"#,
    )?;
    std::fs::create_dir(dir.path().join("net"))?;
    std::fs::write(
        dir.path().join("net/main.tf"),
        r#"
variable "prefix" {
  type = string
}
resource "fixture_object" "main" {
  name = "${var.prefix}-x"
}
output "obj_id" {
  value = fixture_object.main.id
}
output "label" {
  value = "${var.prefix}-label"
}
"#,
    )?;
    let ev = evaluate(&load(dir.path())?, &Inputs::default());
    assert!(ev.problems.is_empty(), "{:?}", ev.problems);
    let named: Vec<(String, Val)> = ev
        .instances
        .iter()
        .map(|i| (i.address(), i.args["name"].clone()))
        .collect();
    let want = [
        ("module.net[0].fixture_object.main", "n0-x"),
        ("module.net[1].fixture_object.main", "n1-x"),
        ("module.zone[\"a\"].fixture_object.main", "a-x-x"),
        ("module.zone[\"b\"].fixture_object.main", "b-y-x"),
    ];
    for ((address, name), (want_address, want_name)) in named.iter().zip(want) {
        assert_eq!(
            (address.as_str(), name),
            (want_address, &Val::Known(json!(want_name)))
        );
    }
    let user = &ev.instances[4];
    assert_eq!(user.args["name"], Val::Known(json!("b-y-label")));
    let Val::List(labels) = &user.args["labels"] else {
        panic!("labels: {:?}", user.args["labels"]);
    };
    let Val::Ref(r) = &labels[0] else {
        panic!("labels: {labels:?}");
    };
    assert_eq!(r.address(), "module.net[1].fixture_object.main");
    let out = emit_ev(&ev);
    let name = |a: &str| out.names.get(a).cloned().unwrap_or_default();
    assert_eq!(name("module.net[1].fixture_object.main"), "net-1-main");
    assert_eq!(
        name("module.zone[\"b\"].fixture_object.main"),
        "zone-b-main"
    );
    Ok(())
}

//! The evaluator and module expansion over configurations written in the tests.

use serde_json::json;

use super::eval::{Part, Ref, Scope, Val, eval};
use super::load::load;
use super::module::{Given, Inputs, evaluate};

mod guard;
mod modules;

fn expr(text: &str) -> hcl::Expression {
    text.parse().expect("an expression")
}

fn known(text: &str) -> serde_json::Value {
    let scope = Scope::default();
    match eval(&expr(text), &scope) {
        Ok(Val::Known(j)) => j,
        other => panic!("{text}: {other:?}"),
    }
}

#[test]
fn built_in_functions_compute_what_terraform_does() {
    let cases = [
        (r#"format("%s-%03d", "web", 7)"#, json!("web-007")),
        (r#"join(",", ["a", "b"])"#, json!("a,b")),
        (r#"split(",", "a,b,c")"#, json!(["a", "b", "c"])),
        (r#"lookup({a = 1}, "b", 2)"#, json!(2)),
        (
            r#"merge({a = 1}, {b = 2}, {a = 3})"#,
            json!({"a": 3, "b": 2}),
        ),
        ("concat([1], [2, 3])", json!([1, 2, 3])),
        (r#"length("héllo")"#, json!(5)),
        ("element([1, 2, 3], 4)", json!(2)),
        (r#"coalesce("", "x")"#, json!("x")),
        ("tostring(5)", json!("5")),
        (r#"tonumber("5")"#, json!(5)),
        (r#"toset(["a", "a", "b"])"#, json!(["a", "b"])),
        (r#"jsonencode({a = [1, true]})"#, json!(r#"{"a":[1,true]}"#)),
        (r#"jsondecode("{\"x\": 2}").x"#, json!(2)),
        (r#"cidrsubnet("10.0.0.0/16", 8, 2)"#, json!("10.0.2.0/24")),
        (r#"cidrsubnet("fd00::/56", 8, 1)"#, json!("fd00:0:0:1::/64")),
        (r#"cidrhost("10.0.1.0/24", 5)"#, json!("10.0.1.5")),
        (r#"cidrhost("10.0.1.0/24", -1)"#, json!("10.0.1.255")),
        (r#"replace("a-b-c", "-", "_")"#, json!("a_b_c")),
        (r#"replace("v1.2", "/v(\\d)/", "n$1")"#, json!("n1.2")),
        (r#"upper("a")"#, json!("A")),
        (r#"keys({b = 1, a = 2})"#, json!(["a", "b"])),
        (r#"values({b = 1, a = 2})"#, json!([2, 1])),
        ("flatten([[1], [2, [3]]])", json!([1, 2, 3])),
        (r#"try(jsondecode("nope"), "fallback")"#, json!("fallback")),
        (r#"can(jsondecode("nope"))"#, json!(false)),
        ("[for i in [1, 2, 3] : i * 2 if i > 1]", json!([4, 6])),
        (
            r#"{for k, v in {a = 1, b = 2} : upper(k) => v}"#,
            json!({"A": 1, "B": 2}),
        ),
        ("[{x = 1}, {x = 2}][*].x", json!([1, 2])),
        (r#"true ? "y" : "n""#, json!("y")),
        ("7 % 4 + 10 / 4", json!(5.5)),
        (
            r#""%{ for x in [1, 2] }<${x}>%{ endfor }""#,
            json!("<1><2>"),
        ),
    ];
    for (text, want) in cases {
        assert_eq!(known(text), want, "{text}");
    }
}

#[test]
fn references_to_other_objects_stay_references() {
    let mut scope = Scope::default();
    let objects = std::sync::Arc::make_mut(&mut scope.objects);
    objects.insert("aws_vpc.main".into(), false);
    objects.insert("aws_subnet.a".into(), true);
    let vpc = Ref {
        module: String::new(),
        data: false,
        type_name: "aws_vpc".into(),
        name: "main".into(),
        key: None,
        path: vec![json!("id")],
    };
    assert_eq!(
        eval(&expr("aws_vpc.main.id"), &scope),
        Ok(Val::Ref(vpc.clone()))
    );
    // Text around a reference: a template.
    assert_eq!(
        eval(&expr(r#""${aws_vpc.main.id}-x""#), &scope),
        Ok(Val::Template(vec![
            Part::Ref(vpc.clone()),
            Part::Text("-x".into())
        ]))
    );
    // A counted resource needs its instance; the key is kept.
    let Ok(Val::Ref(r)) = eval(&expr("aws_subnet.a[1].id"), &scope) else {
        panic!("a reference");
    };
    assert_eq!(r.key, Some(json!(1)));
    assert!(eval(&expr("aws_subnet.a.id"), &scope).is_err());
    // Arithmetic over a reference cannot be a manifest value: opaque, naming it.
    match eval(&expr("aws_vpc.main.id == \"x\""), &scope) {
        Ok(Val::Opaque { refs, .. }) => assert_eq!(refs, vec![vpc.clone()]),
        other => panic!("{other:?}"),
    }
    // Inside a list, the known members stay known.
    match eval(&expr(r#"["a", aws_vpc.main.id]"#), &scope) {
        Ok(Val::List(items)) => assert_eq!(items[0], Val::Known(json!("a"))),
        other => panic!("{other:?}"),
    }
    // tostring() passes a reference through.
    assert_eq!(
        eval(&expr("tostring(aws_vpc.main.id)"), &scope),
        Ok(Val::Ref(vpc))
    );
    assert!(eval(&expr("aws_nothing.x.id"), &scope).is_err());
}

#[test]
fn a_module_evaluates_variables_locals_count_and_for_each() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("main.tf"),
        r#"
variable "prefix" {
  type    = string
  default = "dev"
}
variable "n" {
  type = number
  validation {
    condition     = var.n < 10
    error_message = "n must stay under 10."
  }
}
variable "zones" {
  type    = map(string)
  default = { a = "eu-1a", b = "eu-1b" }
}
locals {
  name = "${local.base}-app"
  base = upper(var.prefix)
}
resource "fixture_object" "counted" {
  count = var.n
  name  = format("%s-%d", local.name, count.index)
  tags  = { zone = "z" }
  lifecycle {
    prevent_destroy = true
    ignore_changes  = [tags]
  }
}
resource "fixture_object" "each" {
  for_each = var.zones
  name     = "${each.key}-${each.value}"
  parent   = fixture_object.counted[0].id
  rule {
    port = 1
  }
  dynamic "rule" {
    for_each = [2, 3]
    content {
      port = rule.value
    }
  }
}
output "first" {
  value = fixture_object.counted[0].id
}
"#,
    )?;
    std::fs::write(dir.path().join("terraform.tfvars"), "n = 2\n")?;
    let module = load(dir.path())?;
    let inputs = Inputs {
        env: vec![("TF_VAR_prefix".into(), "qa".into())],
        given: vec![Given::Var("n".into(), "3".into())],
        ..Inputs::default()
    };
    let ev = evaluate(&module, &inputs);
    assert!(ev.problems.is_empty(), "{:?}", ev.problems);
    assert_eq!(ev.vars["n"], json!(3), "--var wins over terraform.tfvars");
    assert_eq!(
        ev.vars["prefix"],
        json!("qa"),
        "TF_VAR_ wins over the default"
    );
    let counted: Vec<_> = ev
        .instances
        .iter()
        .filter(|i| i.name == "counted")
        .collect();
    assert_eq!(counted.len(), 3);
    assert_eq!(counted[2].args["name"], Val::Known(json!("QA-app-2")));
    assert_eq!(counted[2].address(), "fixture_object.counted[2]");
    assert_eq!(
        counted[0].lifecycle["prevent_destroy"],
        Val::Known(json!(true))
    );
    let each: Vec<_> = ev.instances.iter().filter(|i| i.name == "each").collect();
    assert_eq!(each.len(), 2);
    assert_eq!(each[0].args["name"], Val::Known(json!("a-eu-1a")));
    assert!(matches!(each[0].args["parent"], Val::Ref(_)));
    assert_eq!(
        each[0].args["rule"],
        Val::Known(json!([{"port": 1}, {"port": 2}, {"port": 3}]))
    );
    assert!(matches!(ev.outputs["first"].0, Val::Ref(_)));

    // A failed validation is reported with the variable's message and where it is.
    let bad = Inputs {
        given: vec![Given::Var("n".into(), "12".into())],
        ..Inputs::default()
    };
    let ev = evaluate(&module, &bad);
    let p = ev.problems.first().expect("a problem");
    assert!(p.message.contains("n must stay under 10."), "{p}");
    assert!(p.at.to_string().ends_with("main.tf:9:5"), "{p}");
    Ok(())
}

#[test]
fn syntax_errors_name_file_line_and_column() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("a.tf"),
        "resource \"x\" \"y\" {\n  a = \n}\n",
    )?;
    let e = load(dir.path()).expect_err("a syntax error");
    let text = e.to_string();
    assert!(
        text.contains("a.tf:3:1") || text.contains("a.tf:2:"),
        "{text}"
    );
    Ok(())
}

fn fixture_targets() -> std::collections::BTreeMap<(bool, String), super::emit::Target> {
    let text = include_str!("../../../codegen/testdata/schemas/fixture.json");
    let doc: serde_json::Value = serde_json::from_str(text).expect("fixture schema is JSON");
    let all = kraken_codegen::tfjson::parse_provider_schemas(&doc).expect("fixture schema parses");
    let schema = all.into_values().next().expect("one provider");
    ["fixture_object", "fixture_uuid"]
        .into_iter()
        .map(|t| {
            let kind = kraken_codegen::names::kind_for("fixture", t);
            let fields = kraken_value::fields::FieldMap::for_resource(
                t,
                schema.resource(t).expect("the type"),
            );
            let target = super::emit::Target {
                group: "fixture.tf.kraken.dev".into(),
                kind,
                fields,
                arguments: super::emit::argument_names(schema.resource(t).expect("the type")),
                sensitive: super::emit::sensitive_outputs(schema.resource(t).expect("the type")),
            };
            ((false, t.to_owned()), target)
        })
        .collect()
}

/// `text` as a module's `main.tf`, evaluated and emitted over the fixture's types into
/// namespace `team`.
fn emit_module(text: &str) -> anyhow::Result<super::emit::Emitted> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("main.tf"), text)?;
    let ev = evaluate(&load(dir.path())?, &Inputs::default());
    Ok(emit_ev(&ev))
}

/// The manifests of `ev` over the fixture's types, in namespace `team`.
fn emit_ev(ev: &super::module::Evaluated) -> super::emit::Emitted {
    let opts = super::emit::EmitOptions {
        namespace: "team".into(),
        provider_config: None,
        known_types: Default::default(),
    };
    super::emit::emit(ev, &fixture_targets(), &opts)
}

#[test]
fn instances_become_manifests_with_references_as_values_from() -> anyhow::Result<()> {
    let out = emit_module(
        r#"
resource "fixture_uuid" "u" {
  name = "seed"
}
resource "fixture_object" "web" {
  count       = 2
  name        = "web-${fixture_uuid.u.id}-${count.index}"
  size        = count.index + 1
  labels      = [fixture_uuid.u.id, "fixed"]
  password    = "hunter2"
  tags        = { Team = "a", Owner = fixture_uuid.u.id }
  nothing     = 1
  description = upper(fixture_uuid.u.id)
  lifecycle {
    prevent_destroy       = true
    create_before_destroy = true
    ignore_changes        = [tags["Team"], description, no_such]
  }
}
resource "fixture_object" "Web_0" {
  name = "clash"
}
"#,
    )?;
    let web1 = out
        .manifests
        .iter()
        .find(|m| m.doc["metadata"]["name"] == "web-1")
        .expect("web-1");
    let spec = &web1.doc["spec"];
    assert_eq!(web1.doc["kind"], "Object");
    assert_eq!(spec["forProvider"]["size"], json!(2));
    // tags reads another object: its members are valuesFrom entries, the literal one too.
    assert!(spec["forProvider"].get("tags").is_none(), "{spec}");
    assert_eq!(spec["deletionPolicy"], "Orphan");
    assert_eq!(spec["replacePolicy"], "CreateBeforeDestroy");
    assert_eq!(spec["ignoreChanges"], json!(["tags.Team", "description"]));
    assert_eq!(
        web1.doc["metadata"]["annotations"][super::emit::ADDRESS_ANNOTATION],
        "fixture_object.web[1]"
    );
    let vf = spec["valuesFrom"].as_array().expect("valuesFrom");
    assert!(
        vf.contains(&json!({"path": "name",
        "template": "web-${resource:Uuid.fixture.tf.kraken.dev/u:id}-1"})),
        "{vf:?}"
    );
    // A member of an object literal given to a map argument is one of its keys.
    assert!(
        vf.contains(&json!({"path": "tags.Team", "template": "a"})),
        "{vf:?}"
    );
    assert!(vf.contains(&json!({"path": "tags.Owner", "resource": {
        "apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Uuid", "name": "u", "path": "id"}})), "{vf:?}");
    assert!(vf.contains(&json!({"path": "labels.0", "resource": {
        "apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Uuid", "name": "u", "path": "id"}})), "{vf:?}");
    // The sensitive argument never reaches the manifest: a Secret reference, listed.
    assert!(!web1.doc.to_string().contains("hunter2"));
    assert_eq!(spec["forProvider"]["passwordSecretRef"]["key"], "password");
    assert!(
        out.secrets
            .iter()
            .any(|s| s.address == "fixture_object.web[1].passwordSecretRef")
    );
    // What cannot be expressed or does not exist is reported with where it is written.
    let messages: Vec<String> = out.problems.iter().map(ToString::to_string).collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("ignore_changes: no_such is not an argument")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("main.tf:13:3") && m.contains("upper(")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("no argument nothing")),
        "{messages:?}"
    );
    // Web_0 sanitizes to web-0, which web[0] holds: it gets another name, reported.
    assert!(
        messages.iter().any(|m| m.contains("\"web-0\" is taken")),
        "{messages:?}"
    );
    Ok(())
}

#[test]
fn a_reference_to_a_sensitive_attribute_reads_its_producers_outputs_secret() -> anyhow::Result<()> {
    let out = emit_module(
        r#"
resource "fixture_object" "src" {
  name     = "src"
  password = "hunter2"
}
resource "fixture_object" "dst" {
  name        = "dst"
  description = fixture_object.src.password
}
"#,
    )?;
    let messages: Vec<String> = out.problems.iter().map(ToString::to_string).collect();
    assert!(messages.is_empty(), "{messages:?}");
    let dst = out
        .manifests
        .iter()
        .find(|m| m.doc["metadata"]["name"] == "dst")
        .expect("dst");
    let vf = dst.doc["spec"]["valuesFrom"]
        .as_array()
        .expect("valuesFrom");
    // Not in status.atProvider: its producer publishes it in its outputs Secret, by this key.
    assert!(
        vf.contains(&json!({"path": "description", "resource": {
        "apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object", "name": "src",
        "path": "password"}})),
        "{vf:?}"
    );
    Ok(())
}

#[test]
fn a_function_called_with_too_few_arguments_says_so() {
    let scope = Scope::default();
    for text in [
        "lower()",
        "cidrhost(\"10.0.0.0/8\")",
        "element([])",
        "substr(\"a\", 0)",
        "nosuch(1)",
    ] {
        let err = eval(&expr(text), &scope).expect_err(text);
        assert!(
            err.0.contains("missing") || err.0.contains("takes") || err.0.contains("not supported"),
            "{text}: {err}"
        );
    }
}

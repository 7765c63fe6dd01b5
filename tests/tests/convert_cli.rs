//! `kraken convert` end to end: a Terraform module over the fixture provider (variables with a
//! validation, locals, `count`, `for_each`, references between resources, a sensitive
//! argument) is converted with the real provider binary's schema; the manifests are applied to
//! a real kube-apiserver with the operator running, every object becomes Ready, and what the
//! provider's ledger holds is what Terraform would have computed, references included. Bad
//! input is refused with file:line and nothing is written.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use kraken_tests::operator::bed::{OBJECTS, wait_reconciled};
use kraken_tests::operator::{FixtureBed, OperatorOptions};
use kraken_tests::{TestEnv, fixture_terraform_header, kraken_bin, ledger, scratch_dir};

const CONVERGE: Duration = Duration::from_secs(90);

fn module(ledger: &Path) -> String {
    let head = fixture_terraform_header(Some(ledger));
    format!(
        r#"
{head}variable "env" {{
  type    = string
  default = "dev"
  validation {{
    condition     = length(var.env) <= 5
    error_message = "env is at most 5 characters."
  }}
}}
variable "zones" {{
  type    = map(number)
  default = {{ a = 1, b = 2 }}
}}
locals {{
  prefix = "${{var.env}}-app"
}}
resource "fixture_uuid" "seed" {{
  name = "${{local.prefix}}-seed"
}}
resource "fixture_object" "web" {{
  count    = 2
  name     = format("%s-web-%d", local.prefix, count.index)
  size     = count.index + 1
  labels   = [fixture_uuid.seed.id, "fixed"]
  password = "not-in-any-manifest"
}}
resource "fixture_object" "by_zone" {{
  for_each = var.zones
  name     = "${{each.key}}-${{fixture_uuid.seed.id}}"
  size     = each.value * 10
}}
output "seed_id" {{
  value = fixture_uuid.seed.id
}}
output "first_web" {{
  value = "${{fixture_object.web[0].name}}/${{var.env}}"
}}
output "zones" {{
  value = var.zones
}}
output "token" {{
  value     = "t0ken"
  sensitive = true
}}
"#
    )
}

/// `kraken convert <dir> <args>`: (exit code, stdout, stderr).
fn convert(dir: &Path, args: &[&str]) -> anyhow::Result<(Option<i32>, String, String)> {
    let env = TestEnv::load()?;
    let out = Command::new(kraken_bin()?)
        .arg("convert")
        .arg(dir)
        .arg("--plugin-dir")
        .arg(env.path("KRAKEN_TEST_PLUGIN_DIR")?)
        .args(args)
        .output()
        .context("running kraken convert")?;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn read_dir_sorted(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect();
    files.sort();
    Ok(files)
}

#[test]
fn a_terraform_module_converts_into_manifests_that_reconcile() -> anyhow::Result<()> {
    let mut bed = FixtureBed::start("convert", OperatorOptions::default())?;
    let result = scenario(&mut bed);
    bed.finish(result)
}

fn scenario(bed: &mut FixtureBed) -> anyhow::Result<()> {
    let work = scratch_dir("kraken-convert-")?;
    let out = work.path().join("out");
    convert_twice_to_the_same_bytes(bed, work.path(), &out)?;
    let seed_id = apply_and_reconcile(bed, &out)?;
    expect_outputs_published(bed, &out, &seed_id)
}

/// The module converts into the expected files, without a sensitive value, and a second
/// conversion of the same input writes the same bytes to `out`.
fn convert_twice_to_the_same_bytes(
    bed: &FixtureBed,
    work: &std::path::Path,
    out: &std::path::Path,
) -> anyhow::Result<()> {
    let ns = bed.ns.clone();
    let tf = work.join("tf");
    std::fs::create_dir_all(&tf)?;
    std::fs::write(tf.join("main.tf"), module(bed.ledger_dir()))?;
    let out_s = out.to_string_lossy().into_owned();
    let (code, stdout, stderr) = convert(&tf, &["--namespace", &ns, "--out", &out_s])?;
    ensure!(code == Some(0), "convert failed: {stdout}\n{stderr}");
    let first = read_dir_sorted(out)?;
    let names: Vec<&str> = first.iter().map(|(n, _)| n.as_str()).collect();
    ensure!(
        names
            == [
                "README.md",
                "outputs.yaml",
                "providers.yaml",
                "resource-fixture-object.yaml",
                "resource-fixture-uuid.yaml"
            ],
        "files: {names:?}"
    );
    let all: String = first.iter().map(|(_, t)| t.as_str()).collect();
    ensure!(
        !all.contains("not-in-any-manifest"),
        "a sensitive value was written"
    );
    let readme = &first[0].1;
    ensure!(
        readme.contains("passwordSecretRef"),
        "the README lists no Secret to create:\n{readme}"
    );
    // Same input, same bytes.
    let (code, _, stderr) = convert(&tf, &["--namespace", &ns, "--out", &out_s])?;
    ensure!(code == Some(0), "second convert failed: {stderr}");
    ensure!(
        read_dir_sorted(out)? == first,
        "a second conversion wrote different bytes"
    );
    Ok(())
}

/// The manifests in `out` applied: every object reconciles, with the values the module
/// computed. Returns the seed's id.
fn apply_and_reconcile(bed: &FixtureBed, out: &std::path::Path) -> anyhow::Result<String> {
    let ns = bed.ns.clone();
    // The bed's ProviderConfig `fixture` (by source, as the bed's tests use) stands in for
    // providers.yaml's, which installs the Provider from a registry the bed does not have.
    bed.apply_provider_config("fixture", serde_json::json!({}))?;
    let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "web-0-fixture-object", "namespace": ns},
        "stringData": {"password": "s3cret"}});
    let secret1 = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "web-1-fixture-object", "namespace": ns},
        "stringData": {"password": "s3cret"}});
    bed.apply(&format!("{secret}\n---\n{secret1}"))?;
    for f in ["resource-fixture-uuid.yaml", "resource-fixture-object.yaml"] {
        bed.apply(&std::fs::read_to_string(out.join(f))?)?;
    }
    let seed = wait_reconciled(
        &bed.cp,
        (&ns, "uuids.fixture.tf.kraken.dev", "seed"),
        CONVERGE,
    )?;
    let seed_id = seed["status"]["atProvider"]["id"]
        .as_str()
        .context("the seed's id")?
        .to_owned();
    for name in ["web-0", "web-1", "by-zone-a", "by-zone-b"] {
        wait_reconciled(&bed.cp, (&ns, OBJECTS, name), CONVERGE)?;
    }
    let objects = ledger::objects(bed.ledger_dir())?;
    let named = |n: &str| objects.iter().find(|o| o["name"] == n).cloned();
    let web1 = named("dev-app-web-1").context("dev-app-web-1 in the ledger")?;
    ensure!(web1["size"] == 2, "web-1: {web1}");
    ensure!(
        web1["labels"] == serde_json::json!([seed_id, "fixed"]),
        "web-1: {web1}"
    );
    let zone_b = named(&format!("b-{seed_id}")).context("by_zone[b] named after the seed")?;
    ensure!(zone_b["size"] == 20, "by_zone[b]: {zone_b}");
    Ok(seed_id)
}

/// Outputs keep being published: a ConfigMap of the plain ones, a Secret of the sensitive.
fn expect_outputs_published(
    bed: &FixtureBed,
    out: &std::path::Path,
    seed_id: &str,
) -> anyhow::Result<()> {
    let ns = bed.ns.clone();
    bed.apply(&std::fs::read_to_string(out.join("outputs.yaml"))?)?;
    let data = kraken_tests::wait_for(CONVERGE, "the outputs ConfigMap", || {
        let got = bed.cp.kubectl(&[
            "get",
            "configmap",
            "terraform-outputs",
            "-n",
            &ns,
            "-o",
            "jsonpath={.data}",
        ]);
        match got {
            Ok(text) if !text.trim().is_empty() => {
                Ok(Some(serde_json::from_str::<serde_json::Value>(&text)?))
            }
            Ok(_) => anyhow::bail!("no data yet"),
            Err(e) => Err(e),
        }
    })?;
    ensure!(data["seed_id"] == seed_id, "outputs: {data}");
    ensure!(data["first_web"] == "dev-app-web-0/dev", "outputs: {data}");
    ensure!(
        serde_json::from_str::<serde_json::Value>(data["zones"].as_str().unwrap_or("null"))?
            == serde_json::json!({"a": 1, "b": 2}),
        "outputs: {data}"
    );
    ensure!(
        data.get("token").is_none(),
        "a sensitive output in a ConfigMap: {data}"
    );
    let token = kraken_tests::wait_for(CONVERGE, "the sensitive outputs Secret", || {
        bed.cp
            .kubectl(&[
                "get",
                "secret",
                "terraform-outputs-sensitive",
                "-n",
                &ns,
                "-o",
                "jsonpath={.data.token}",
            ])
            .map(|t| (!t.trim().is_empty()).then(|| t.trim().to_owned()))
    })?;
    ensure!(token == "dDBrZW4=", "the token Secret holds {token}");
    Ok(())
}

#[test]
fn bad_input_is_refused_with_where_it_is_and_nothing_is_written() -> anyhow::Result<()> {
    let work = scratch_dir("kraken-convert-bad-")?;
    let tf = work.path().join("tf");
    std::fs::create_dir_all(&tf)?;
    let out = work.path().join("out");
    let out_s = out.to_string_lossy().into_owned();
    let ledger = work.path().join("ledger");

    std::fs::write(
        tf.join("main.tf"),
        "resource \"fixture_object\" \"x\" {\n  name = \n}\n",
    )?;
    let (code, _, stderr) = convert(&tf, &["--out", &out_s])?;
    ensure!(code == Some(1), "a syntax error: exit {code:?}");
    ensure!(
        stderr.contains("main.tf:3:1") || stderr.contains("main.tf:2:"),
        "{stderr}"
    );
    ensure!(!out.exists(), "something was written");

    let unknown =
        module(&ledger).replace("size     = count.index + 1", "sizee    = count.index + 1");
    std::fs::write(tf.join("main.tf"), unknown)?;
    let (code, _, stderr) = convert(&tf, &["--out", &out_s])?;
    ensure!(code == Some(1), "an unknown argument: exit {code:?}");
    ensure!(
        stderr.contains("no argument sizee; did you mean size?") && stderr.contains("main.tf:"),
        "{stderr}"
    );
    ensure!(!out.exists(), "something was written");

    let misspelt = module(&ledger).replace(
        "resource \"fixture_object\" \"web\"",
        "resource \"fixture_objet\" \"web\"",
    );
    std::fs::write(tf.join("main.tf"), misspelt)?;
    let (code, _, stderr) = convert(&tf, &["--out", &out_s])?;
    ensure!(code == Some(1), "an unknown type: exit {code:?}");
    ensure!(
        stderr.contains("no resource type fixture_objet; did you mean fixture_object?"),
        "{stderr}"
    );
    ensure!(!out.exists(), "something was written");

    std::fs::write(tf.join("main.tf"), module(&ledger))?;
    let (code, _, stderr) = convert(&tf, &["--out", &out_s, "--var", "env=toolong"])?;
    ensure!(code == Some(1), "a failed validation: exit {code:?}");
    ensure!(stderr.contains("env is at most 5 characters."), "{stderr}");
    // --partial writes what converts.
    let (code, _, stderr) = convert(&tf, &["--out", &out_s, "--var", "env=toolong", "--partial"])?;
    ensure!(code == Some(0), "--partial: {stderr}");
    ensure!(out.join("README.md").is_file(), "--partial wrote no README");
    Ok(())
}

/// `--provider-config NAME`: every object uses the ProviderConfig that exists already, and
/// providers.yaml writes only the Provider; with more than one provider it is refused.
#[test]
fn provider_config_names_an_existing_one() -> anyhow::Result<()> {
    let work = scratch_dir("kraken-convert-pc-")?;
    let tf = work.path().join("tf");
    std::fs::create_dir_all(&tf)?;
    let out = work.path().join("out");
    let out_s = out.to_string_lossy().into_owned();
    std::fs::write(tf.join("main.tf"), module(&work.path().join("ledger")))?;
    let (code, _, stderr) = convert(&tf, &["--out", &out_s, "--provider-config", "shared"])?;
    ensure!(code == Some(0), "--provider-config: {stderr}");
    let mut refs = 0;
    for (name, text) in read_dir_sorted(&out)? {
        if name == "providers.yaml" {
            ensure!(!text.contains("kind: ProviderConfig"), "{text}");
            ensure!(text.contains("kind: Provider"), "{text}");
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.trim() == "providerConfigRef:" {
                refs += 1;
                let next = lines.get(i + 1).map(|n| n.trim());
                ensure!(next == Some("name: shared"), "{name}: {l} {next:?}");
            }
        }
    }
    ensure!(refs > 0, "no providerConfigRef written");

    let two = format!(
        "{}\nresource \"random_pet\" \"p\" {{}}\n",
        module(&work.path().join("ledger"))
    );
    std::fs::write(tf.join("main.tf"), two)?;
    let again = work.path().join("again");
    let again_s = again.to_string_lossy().into_owned();
    let (code, _, stderr) = convert(&tf, &["--out", &again_s, "--provider-config", "shared"])?;
    ensure!(code == Some(1), "two providers: exit {code:?}");
    ensure!(
        stderr.contains("uses 2 providers") && stderr.contains("fixture"),
        "{stderr}"
    );
    ensure!(!again.exists(), "something was written");
    Ok(())
}

/// The worked example of docs/convert-example.md converts as the page shows: one object per
/// `for_each` key, the `triggers` reference kept as `valuesFrom`, `ignore_changes` and
/// `prevent_destroy` carried over, the output as a ConfigExport.
#[test]
fn the_documented_example_converts_as_documented() -> anyhow::Result<()> {
    let example = kraken_tests::repo_root().join("examples/terraform");
    let out = kraken_tests::scratch_dir("kraken-convert-example-")?;
    let (code, stdout, stderr) = convert(
        &example,
        &[
            "--namespace",
            "shop",
            "--out",
            &out.path().to_string_lossy(),
        ],
    )?;
    ensure!(code == Some(0), "exit {code:?}: {stdout}{stderr}");
    ensure!(
        stdout.contains("converted 4 of 4 instances"),
        "{stdout}{stderr}"
    );
    let files: Vec<String> = read_dir_sorted(out.path())?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    ensure!(
        files
            == [
                "README.md",
                "outputs.yaml",
                "providers.yaml",
                "resource-null-resource.yaml",
                "resource-random-password.yaml",
                "resource-random-pet.yaml"
            ],
        "{files:?}"
    );
    let read = |f: &str| std::fs::read_to_string(out.path().join(f));
    let pets = read("resource-random-pet.yaml")?;
    for line in [
        "name: db-dev",
        "name: db-prod",
        "ignoreChanges:\n  - length",
        "prefix: shop-dev",
    ] {
        ensure!(pets.contains(line), "pets lack {line:?}:\n{pets}");
    }
    let null = read("resource-null-resource.yaml")?;
    for line in [
        "deletionPolicy: Orphan",
        "path: triggers.dev_db",
        "name: db-dev",
        "template: databases for shop",
    ] {
        ensure!(
            null.contains(line),
            "the null_resource lacks {line:?}:\n{null}"
        );
    }
    ensure!(read("outputs.yaml")?.contains("key: prod_db"));
    Ok(())
}

/// A configuration is input from whoever wrote it (docs/security.md, "`kraken convert` reads
/// hostile configurations"): with standard input not a terminal (as here, and in CI) reads are
/// confined to DIR, so `file("/etc/passwd")` is refused at its file:line and nothing is
/// written; `--no-confine` reads it as Terraform would. A 100,000,000-instance `count` is
/// refused at its line in moments instead of exhausting memory.
#[test]
fn hostile_configurations_are_refused_where_they_are_written() -> anyhow::Result<()> {
    let work = scratch_dir("kraken-convert-hostile-")?;
    let tf = work.path().join("tf");
    std::fs::create_dir_all(&tf)?;
    let out = work.path().join("out");
    let out_s = out.to_string_lossy().into_owned();
    let head = fixture_terraform_header(Some(&work.path().join("ledger")));

    let passwd = format!(
        "{head}resource \"fixture_object\" \"leak\" {{\n  name = file(\"/etc/passwd\")\n}}\n"
    );
    std::fs::write(tf.join("main.tf"), &passwd)?;
    let line = passwd.lines().count() - 1;
    let (code, stdout, stderr) = convert(&tf, &["--out", &out_s])?;
    ensure!(
        code == Some(1),
        "file(\"/etc/passwd\"): exit {code:?}\n{stdout}{stderr}"
    );
    ensure!(
        stderr.contains(&format!("main.tf:{line}:"))
            && stderr.contains("\"/etc/passwd\" is outside the configuration's root"),
        "{stderr}"
    );
    ensure!(!stderr.contains("root:x:0"), "the file was read: {stderr}");
    ensure!(!out.exists(), "something was written");
    let (code, _, stderr) = convert(&tf, &["--out", &out_s, "--no-confine"])?;
    ensure!(code == Some(0), "--no-confine: {stderr}");
    ensure!(
        std::fs::read_to_string(out.join("resource-fixture-object.yaml"))?.contains("root:"),
        "--no-confine did not read /etc/passwd"
    );
    std::fs::remove_dir_all(&out)?;

    let huge = format!("{head}resource \"fixture_object\" \"many\" {{\n  count = 100000000\n}}\n");
    std::fs::write(tf.join("main.tf"), &huge)?;
    let line = huge.lines().count() - 1;
    let started = std::time::Instant::now();
    let (code, _, stderr) = convert(&tf, &["--out", &out_s])?;
    let took = started.elapsed();
    ensure!(
        code == Some(1),
        "a count of 100000000: exit {code:?}\n{stderr}"
    );
    ensure!(
        stderr.contains(&format!("main.tf:{line}:"))
            && stderr.contains("100000000 instances, over the 10000 one block may have"),
        "{stderr}"
    );
    ensure!(took < Duration::from_secs(30), "refusing took {took:?}");
    ensure!(!out.exists(), "something was written");
    Ok(())
}

/// A provider binary is run only as `terraform init` would run it: recorded in the
/// configuration's `.terraform.lock.hcl` (or a plugin directory's), with its hash. An
/// executable planted under `.terraform/providers` at a version nothing records is refused,
/// and never runs; one in place of a recorded version is refused by its hash.
#[test]
fn a_provider_binary_nothing_recorded_is_never_run() -> anyhow::Result<()> {
    let work = scratch_dir("kraken-convert-planted-")?;
    let tf = work.path().join("tf");
    let marker = work.path().join("it-ran");
    let planted = |version: &str| -> anyhow::Result<()> {
        let pkg = tf
            .join(".terraform/providers")
            .join(kraken_tests::FIXTURE_ADDRESS)
            .join(version)
            .join("linux_amd64");
        std::fs::create_dir_all(&pkg)?;
        let bin = pkg.join(format!("terraform-provider-fixture_v{version}"));
        std::fs::write(&bin, format!("#!/bin/sh\ntouch {}\n", marker.display()))?;
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))?;
        Ok(())
    };
    let config = |version: &str| {
        format!(
            "terraform {{\n  required_providers {{\n    fixture = {{\n      source  = \"{}\"\n      \
             version = \"{version}\"\n    }}\n  }}\n}}\nresource \"fixture_object\" \"a\" {{\n  \
             name = \"a\"\n}}\n",
            kraken_tests::FIXTURE_ADDRESS
        )
    };
    std::fs::create_dir_all(&tf)?;
    let out = work.path().join("out").to_string_lossy().into_owned();

    // 9.9.9: only the planted binary has it, and no lock file records it.
    planted("9.9.9")?;
    std::fs::write(tf.join("main.tf"), config("9.9.9"))?;
    let (code, _, stderr) = convert(&tf, &["--out", &out])?;
    ensure!(
        code == Some(1),
        "the planted 9.9.9: exit {code:?}\n{stderr}"
    );
    ensure!(
        stderr.contains("only recorded packages are launched") && stderr.contains("9.9.9"),
        "{stderr}"
    );

    // 1.0.0 planted in place of the build the lock file records (the test peers' mirror's):
    // refused by its hash.
    planted("1.0.0")?;
    let env = TestEnv::load()?;
    let mirror_lock = env
        .path("KRAKEN_TEST_PLUGIN_DIR")?
        .join(".terraform.lock.hcl");
    std::fs::copy(&mirror_lock, tf.join(".terraform.lock.hcl"))?;
    std::fs::write(tf.join("main.tf"), config("1.0.0"))?;
    let (code, _, stderr) = convert(&tf, &["--out", &out])?;
    ensure!(
        code == Some(1),
        "the planted 1.0.0: exit {code:?}\n{stderr}"
    );
    ensure!(stderr.contains("will not be launched"), "{stderr}");
    ensure!(!marker.exists(), "a planted binary ran");
    Ok(())
}

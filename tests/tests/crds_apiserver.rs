//! Generated CRDs against a real kube-apiserver + etcd (`scripts/testenv.sh up`).
//!
//! The committed CRDs in `generated-crds/` are installed with server-side apply; each must
//! become Established, a sample object of every kind must pass server-side dry-run, and bad
//! objects (a missing required argument, a wrong type) must be refused at admission with a
//! message that names the field. `kubectl explain` must show the provider's descriptions.

use std::path::PathBuf;

use anyhow::{Context as _, bail, ensure};
use kraken_codegen::cel::CONFLICT_MESSAGE;
use kraken_codegen::tfjson::parse_provider_schemas;
use kraken_codegen::{Options, generate, sample_object};
use kraken_tests::{ControlPlane, repo_root};
use serde_json::{Value as Json, json};

const PROVIDERS: [&str; 4] = ["random", "time", "null", "fixture"];

fn testdata_schema(name: &str) -> anyhow::Result<(String, kraken_codegen::schema::ProviderSchema)> {
    let path = repo_root().join(format!("codegen/testdata/schemas/{name}.json"));
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let all = parse_provider_schemas(&serde_json::from_str(&text)?)?;
    all.into_iter()
        .next()
        .context("schema file holds no provider")
}

fn crd_dir(name: &str) -> PathBuf {
    repo_root().join("generated-crds").join(name)
}

/// Install every generated CRD and wait until all are Established.
fn install(cp: &ControlPlane) -> anyhow::Result<()> {
    for p in PROVIDERS {
        let label = format!("tf.kraken.dev/provider={p}");
        let n = cp.install_crds(&crd_dir(p), &label)?;
        ensure!(n > 0, "{p}: no CRDs installed");
    }
    Ok(())
}

/// `kubectl create --dry-run=server` of one object: Ok(()) if admitted, Err(message) if refused.
fn dry_run(cp: &ControlPlane, obj: &Json) -> anyhow::Result<Result<(), String>> {
    let out = cp.kubectl_stdin(
        &["create", "--dry-run=server", "-o", "name", "-f", "-"],
        &serde_json::to_vec(obj)?,
    )?;
    if out.status.success() {
        Ok(Ok(()))
    } else {
        Ok(Err(String::from_utf8_lossy(&out.stderr).into_owned()))
    }
}

#[test]
fn generated_crds_install_validate_and_explain() -> anyhow::Result<()> {
    let cp = ControlPlane::start("crds")?;
    install(&cp)?;
    cp.kubectl(&["create", "namespace", "team-a"])?;
    every_kind_admits_a_sample(&cp)?;
    required_arguments(&cp)?;
    values_given_twice(&cp)?;
    source_namespaces_kept(&cp)?;
    wrong_types_refused(&cp)?;
    secrets_never_literal(&cp)?;
    explain_shows_descriptions(&cp)?;

    // The category lists every managed kind.
    let out = cp.kubectl_output(&["get", "kraken", "-A"])?;
    ensure!(
        out.status.success(),
        "kubectl get kraken failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Every kind: Established, and a sample object with its required arguments passes dry-run.
fn every_kind_admits_a_sample(cp: &ControlPlane) -> anyhow::Result<()> {
    // Every kind: Established, and a sample object with its required arguments passes dry-run.
    let mut kinds = 0;
    for p in PROVIDERS {
        let (address, schema) = testdata_schema(p)?;
        let generated = generate(&address, &schema, &Options::default())?;
        ensure!(!generated.crds.is_empty(), "{p}: no CRDs generated");
        for crd in &generated.crds {
            let rs = schema.resource(&crd.type_name).context("resource schema")?;
            let obj = sample_object(crd, rs, "sample", "team-a");
            if let Err(msg) = dry_run(cp, &obj)? {
                bail!("{} sample refused: {msg}\n{obj:#}", crd.type_name);
            }
            kinds += 1;
        }
    }
    eprintln!("{kinds} kinds admitted a sample object");
    Ok(())
}

/// A missing required argument is refused at admission, naming the field, unless it comes from
/// valuesFrom.
fn required_arguments(cp: &ControlPlane) -> anyhow::Result<()> {
    // A missing required argument is refused at admission, naming the field.
    let id = json!({"apiVersion": "random.tf.kraken.dev/v1alpha1", "kind": "Id",
        "metadata": {"name": "no-length", "namespace": "team-a"}, "spec": {"forProvider": {}}});
    let msg = dry_run(cp, &id)?
        .err()
        .context("an Id without byteLength must be refused")?;
    ensure!(
        msg.contains("spec.forProvider.byteLength"),
        "message must name the field: {msg}"
    );

    // ... unless it comes from valuesFrom.
    let via_ref = json!({"apiVersion": "random.tf.kraken.dev/v1alpha1", "kind": "Id",
        "metadata": {"name": "ref-length", "namespace": "team-a"},
        "spec": {"forProvider": {}, "valuesFrom": [{"path": "byteLength", "configMapKeyRef": {"name": "sizes", "key": "id"}}]}});
    if let Err(msg) = dry_run(cp, &via_ref)? {
        bail!("a required argument given through valuesFrom must be admitted: {msg}");
    }
    Ok(())
}

/// A value given both literally and through valuesFrom is refused; arguments not set literally
/// may still come from valuesFrom.
fn values_given_twice(cp: &ControlPlane) -> anyhow::Result<()> {
    // A value given both literally and through valuesFrom is refused: a scalar by its path,
    // a map or list also by a path below it, a sensitive argument xSecretRef by its name x.
    let twice = [
        ("Id", "random", json!({"byteLength": 8}), "byteLength"),
        ("Pet", "random", json!({"keepers": {"a": "b"}}), "keepers.a"),
        (
            "Object",
            "fixture",
            json!({"name": "x", "passwordSecretRef": {"name": "s", "key": "pw"}}),
            "password",
        ),
    ];
    for (kind, provider, for_provider, path) in twice {
        let obj = json!({"apiVersion": format!("{provider}.tf.kraken.dev/v1alpha1"), "kind": kind,
            "metadata": {"name": "twice", "namespace": "team-a"},
            "spec": {"forProvider": for_provider,
                     "valuesFrom": [{"path": path, "configMapKeyRef": {"name": "sizes", "key": "id"}}]}});
        let msg = dry_run(cp, &obj)?
            .err()
            .with_context(|| format!("{kind}: {path} set twice must be refused"))?;
        ensure!(
            msg.contains(CONFLICT_MESSAGE) && msg.contains("spec.valuesFrom"),
            "{kind}: message must say why: {msg}"
        );
    }
    // Arguments not set literally may still come from valuesFrom.
    let apart = json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
        "metadata": {"name": "apart", "namespace": "team-a"},
        "spec": {"forProvider": {"name": "x", "size": 1, "tags": {"a": "b"}},
                 "valuesFrom": [{"path": "description", "template": "d"},
                                {"path": "labels.0", "template": "l"}]}});
    if let Err(msg) = dry_run(cp, &apart)? {
        bail!("valuesFrom for arguments not set literally must be admitted: {msg}");
    }
    Ok(())
}

/// A source's namespace is kept (the runtime refuses other namespaces with a condition).
fn source_namespaces_kept(cp: &ControlPlane) -> anyhow::Result<()> {
    // A source's namespace is kept (the runtime refuses other namespaces with a condition).
    let sources = [
        "configMapKeyRef",
        "resource",
        "secretKeyRef",
        "stateDeclaration",
    ];
    let with_ns = json!({"apiVersion": "random.tf.kraken.dev/v1alpha1", "kind": "Pet",
        "metadata": {"name": "with-namespace", "namespace": "team-a"},
        "spec": {"forProvider": {}, "valuesFrom": [
            {"path": "length", sources[0]: {"name": "sizes", "key": "id", "namespace": "team-a"}},
            {"path": "keepers", sources[1]: {"kind": "Id", "name": "i", "path": "id", "namespace": "team-b"}},
            {"path": "prefix", sources[2]: {"name": "s", "key": "k", "namespace": "team-a"}},
            {"path": "separator", sources[3]: {"name": "d", "path": "sep", "namespace": "team-c"}}]}});
    let created = cp.kubectl_stdin(
        &["create", "-o", "name", "-f", "-"],
        &serde_json::to_vec(&with_ns)?,
    )?;
    ensure!(
        created.status.success(),
        "a valuesFrom entry with a namespace must be admitted: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let stored: Json = serde_json::from_str(&cp.kubectl(&[
        "get",
        "pets.random.tf.kraken.dev",
        "with-namespace",
        "-n",
        "team-a",
        "-o",
        "json",
    ])?)?;
    let namespaces: Vec<&Json> = stored["spec"]["valuesFrom"]
        .as_array()
        .context("valuesFrom stored")?
        .iter()
        .map(|v| {
            sources
                .iter()
                .find_map(|s| v.get(*s))
                .map_or(&Json::Null, |r| &r["namespace"])
        })
        .collect();
    ensure!(
        namespaces == ["team-a", "team-b", "team-a", "team-c"],
        "namespace must survive pruning: {stored:#}"
    );
    Ok(())
}

/// A wrong type is refused, naming the field, also inside a nested object.
fn wrong_types_refused(cp: &ControlPlane) -> anyhow::Result<()> {
    // A wrong type is refused, naming the field.
    let pet = json!({"apiVersion": "random.tf.kraken.dev/v1alpha1", "kind": "Pet",
        "metadata": {"name": "bad-length", "namespace": "team-a"}, "spec": {"forProvider": {"length": "three"}}});
    let msg = dry_run(cp, &pet)?
        .err()
        .context("a string length must be refused")?;
    ensure!(
        msg.contains("spec.forProvider.length"),
        "message must name the field: {msg}"
    );

    // A required attribute inside a nested object (the fixture's rules[].port) is enforced too.
    let obj = json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
        "metadata": {"name": "no-port", "namespace": "team-a"},
        "spec": {"forProvider": {"name": "x", "rules": [{"protocol": "tcp"}]}}});
    let msg = dry_run(cp, &obj)?
        .err()
        .context("a rule without port must be refused")?;
    ensure!(msg.contains("port"), "message must name the field: {msg}");
    Ok(())
}

/// Sensitive arguments are taken from Secrets, never literally.
fn secrets_never_literal(cp: &ControlPlane) -> anyhow::Result<()> {
    // Sensitive arguments are taken from Secrets, never literally: the schema has no
    // `password` field, so a literal one is refused by name (kubectl validates strictly) ...
    let literal = json!({"apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
        "metadata": {"name": "literal-password", "namespace": "team-a"},
        "spec": {"forProvider": {"name": "x", "password": "hunter2"}}});
    let msg = dry_run(cp, &literal)?
        .err()
        .context("a literal password must be refused")?;
    ensure!(
        msg.contains("spec.forProvider.password"),
        "the refusal must name the field: {msg}"
    );
    // ... and a client that does not validate has it pruned, never stored.
    let pruned = cp.kubectl_stdin(
        &[
            "create",
            "--dry-run=server",
            "--validate=false",
            "-o",
            "json",
            "-f",
            "-",
        ],
        &serde_json::to_vec(&literal)?,
    )?;
    ensure!(
        pruned.status.success(),
        "without validation the object is admitted: {}",
        String::from_utf8_lossy(&pruned.stderr)
    );
    let back: Json = serde_json::from_slice(&pruned.stdout)?;
    ensure!(
        back["spec"]["forProvider"].get("password").is_none(),
        "a literal password must not be stored: {back}"
    );
    ensure!(
        !back.to_string().contains("hunter2"),
        "the literal password must appear nowhere: {back}"
    );
    Ok(())
}

/// kubectl explain shows the provider's descriptions, also on nested fields.
fn explain_shows_descriptions(cp: &ControlPlane) -> anyhow::Result<()> {
    // kubectl explain shows the provider's descriptions, also on nested fields.
    let explain = cp.kubectl(&[
        "explain",
        "objects.spec.forProvider.settings.mode",
        "--api-version=fixture.tf.kraken.dev/v1alpha1",
    ])?;
    let (_, schema) = testdata_schema("fixture")?;
    let want = schema.resources["fixture_object"].block.attributes["settings"]
        .nested_type
        .as_ref()
        .and_then(|n| n.attributes.get("mode"))
        .map(|a| a.description.clone())
        .context("fixture settings.mode")?;
    let first_words: String = want
        .split_whitespace()
        .take(4)
        .collect::<Vec<_>>()
        .join(" ");
    ensure!(
        !first_words.is_empty() && explain.contains(&first_words),
        "explain must show {want:?}:\n{explain}"
    );
    Ok(())
}

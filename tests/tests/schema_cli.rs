//! `kraken schema` against `terraform providers schema -json`.
//!
//! For every test provider, Terraform (installed from the local filesystem mirror by
//! `terraform init`) and `kraken schema <binary> --address <address>` must print the same JSON
//! value. Kraken renders the newest format; the only differences allowed are the keys that the
//! environment's Terraform release is too old to print, listed by name below with the first
//! release that prints them, plus the pre-1.6 schema-version quirk (see
//! [`OWN_VERSIONS_SINCE`]). Everything else — every description, flag, type, nesting mode and
//! item count — must match exactly.

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kraken_tests::{ProviderBin, TestEnv, kraken_bin, scratch_dir};
use serde_json::{Map, Value as Json};

/// A Terraform release, `(major, minor)`.
type Release = (u64, u64);

/// Provider-level keys and the first Terraform release that prints them. Kraken does not render
/// `resource_identity_schemas` yet; it is listed so that adding it needs no change here.
const PROVIDER_KEYS_SINCE: &[(&str, Release)] = &[
    ("functions", (1, 8)),
    ("ephemeral_resource_schemas", (1, 10)),
    ("resource_identity_schemas", (1, 12)),
    ("list_resource_schemas", (1, 14)),
];

/// Attribute-level keys Kraken prints and the first Terraform release that prints them.
const ATTRIBUTE_KEYS_SINCE: &[(&str, Release)] = &[("write_only", (1, 11))];

/// Before this release Terraform printed `version` 0 for the provider block and gave each data
/// source the version of the managed resource type with the same name (0 if none).
const OWN_VERSIONS_SINCE: Release = (1, 6);

/// Generous: the slowest step is `terraform init` copying a provider out of the mirror.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

#[test]
fn random_schema_matches_terraform() -> anyhow::Result<()> {
    compare("random")
}

#[test]
fn time_schema_matches_terraform() -> anyhow::Result<()> {
    compare("time")
}

#[test]
fn null_schema_matches_terraform() -> anyhow::Result<()> {
    compare("null")
}

#[test]
fn fixture_schema_matches_terraform() -> anyhow::Result<()> {
    compare("fixture")
}

fn compare(name: &str) -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let provider = env.provider(name)?;
    let terraform = env.path("KRAKEN_TEST_TERRAFORM")?;
    let cli_config = env.path("KRAKEN_TEST_TF_CLI_CONFIG")?;
    let release = terraform_release(&terraform)?;

    let want = terraform_schema(&terraform, &cli_config, &provider)?;
    let got = kraken_schema(&provider)?;

    ensure!(
        got["format_version"] == want["format_version"],
        "format_version: kraken {} vs terraform {}",
        got["format_version"],
        want["format_version"]
    );
    let got_entry = single_provider(&got, &provider.address).context("kraken's output")?;
    let Some(want_entry) = want["provider_schemas"].get(&provider.address) else {
        bail!(
            "terraform printed no schema for {}: {want}",
            provider.address
        );
    };
    let got_entry = as_printed_by(got_entry.clone(), release);
    let mut differences = Vec::new();
    diff("", want_entry, &got_entry, &mut differences);
    ensure!(
        differences.is_empty(),
        "{} {}: kraken schema differs from terraform {}.{} in {} place(s):\n{}",
        provider.address,
        provider.version,
        release.0,
        release.1,
        differences.len(),
        differences.join("\n")
    );
    Ok(())
}

/// The entry of Kraken's output, which must hold exactly one provider: the one asked for.
fn single_provider<'a>(doc: &'a Json, address: &str) -> anyhow::Result<&'a Json> {
    let Some(schemas) = doc["provider_schemas"].as_object() else {
        bail!("no provider_schemas object in {doc}");
    };
    let keys: Vec<&String> = schemas.keys().collect();
    ensure!(
        keys == [address],
        "expected exactly {address:?}, got {keys:?}"
    );
    Ok(&schemas[address])
}

/// `terraform init` in a fresh directory requiring just this provider, then
/// `terraform providers schema -json`.
fn terraform_schema(terraform: &Path, cli_config: &Path, p: &ProviderBin) -> anyhow::Result<Json> {
    let dir = scratch_dir(&format!("schema-cli-{}-", p.name))?;
    let main_tf = format!(
        "terraform {{\n  required_providers {{\n    {} = {{\n      source  = \"{}\"\n      \
         version = \"= {}\"\n    }}\n  }}\n}}\n",
        p.name, p.address, p.version
    );
    std::fs::write(dir.path().join("main.tf"), main_tf)?;
    let tf = |args: &[&str]| {
        let mut cmd = Command::new(terraform);
        cmd.args(args)
            .current_dir(dir.path())
            .env("TF_CLI_CONFIG_FILE", cli_config)
            .env("TF_IN_AUTOMATION", "1")
            .env("CHECKPOINT_DISABLE", "1")
            // The developer's own settings must not change what gets installed or printed.
            .env_remove("TF_PLUGIN_CACHE_DIR")
            .env_remove("TF_DATA_DIR")
            .env_remove("TF_CLI_ARGS")
            .env_remove("TF_CLI_ARGS_init");
        cmd
    };
    run(tf(&["init", "-input=false", "-no-color"]), "terraform init")?;
    let out = run(
        tf(&["providers", "schema", "-json"]),
        "terraform providers schema",
    )?;
    serde_json::from_slice(&out).context("terraform printed invalid JSON")
}

fn kraken_schema(p: &ProviderBin) -> anyhow::Result<Json> {
    let mut cmd = Command::new(kraken_bin()?);
    cmd.arg("schema")
        .arg(&p.path)
        .args(["--address", &p.address]);
    let out = run(cmd, "kraken schema")?;
    serde_json::from_slice(&out).context("kraken schema printed invalid JSON")
}

/// `(major, minor)` from `terraform version -json`.
fn terraform_release(terraform: &Path) -> anyhow::Result<Release> {
    let out = run(
        {
            let mut cmd = Command::new(terraform);
            cmd.args(["version", "-json"])
                .env("CHECKPOINT_DISABLE", "1");
            cmd
        },
        "terraform version",
    )?;
    let info: Json = serde_json::from_slice(&out).context("terraform version -json")?;
    let Some(text) = info["terraform_version"].as_str() else {
        bail!("no terraform_version in {info}");
    };
    let mut parts = text.split('.').map(str::parse::<u64>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => Ok((major, minor)),
        _ => bail!("cannot parse Terraform version {text:?}"),
    }
}

/// Kraken's provider entry as a Terraform of `release` would print it: without the keys that
/// release does not know, and with its schema-version rules.
fn as_printed_by(mut entry: Json, release: Release) -> Json {
    let Some(obj) = entry.as_object_mut() else {
        return entry;
    };
    for (key, since) in PROVIDER_KEYS_SINCE {
        if release < *since {
            obj.remove(*key);
        }
    }
    for (key, since) in ATTRIBUTE_KEYS_SINCE {
        if release < *since {
            for_each_attribute(obj, &mut |attr| {
                attr.remove(*key);
            });
        }
    }
    if release < OWN_VERSIONS_SINCE {
        old_schema_versions(obj);
    }
    entry
}

/// Terraform up to 1.5 kept only managed resource versions, looked up by type name.
fn old_schema_versions(provider: &mut Map<String, Json>) {
    let resource_version = |name: &str| -> Json {
        provider
            .get("resource_schemas")
            .and_then(|r| r.get(name))
            .and_then(|s| s.get("version"))
            .cloned()
            .unwrap_or(Json::from(0))
    };
    let data_versions: Vec<(String, Json)> = provider
        .get("data_source_schemas")
        .and_then(Json::as_object)
        .map(|ds| {
            ds.keys()
                .map(|k| (k.clone(), resource_version(k)))
                .collect()
        })
        .unwrap_or_default();
    if let Some(Json::Object(ds)) = provider.get_mut("data_source_schemas") {
        for (name, version) in data_versions {
            if let Some(schema) = ds.get_mut(&name) {
                schema["version"] = version;
            }
        }
    }
    if let Some(schema) = provider.get_mut("provider") {
        schema["version"] = Json::from(0);
    }
}

/// The provider-entry keys whose values map type names to `{version, block}` schemas.
const SCHEMA_MAPS: &[&str] = &[
    "resource_schemas",
    "data_source_schemas",
    "ephemeral_resource_schemas",
    "list_resource_schemas",
];

/// Call `f` on every attribute object of every schema of a provider entry, nested ones too.
fn for_each_attribute(provider: &mut Map<String, Json>, f: &mut dyn FnMut(&mut Map<String, Json>)) {
    let mut schemas: Vec<&mut Json> = Vec::new();
    for (key, value) in provider.iter_mut() {
        match (key.as_str(), value) {
            ("provider", schema) => schemas.push(schema),
            (key, Json::Object(by_type)) if SCHEMA_MAPS.contains(&key) => {
                schemas.extend(by_type.values_mut());
            }
            _ => {}
        }
    }
    for schema in schemas {
        if let Some(block) = schema.get_mut("block") {
            visit_block(block, f);
        }
    }
}

fn visit_block(block: &mut Json, f: &mut dyn FnMut(&mut Map<String, Json>)) {
    if let Some(Json::Object(attrs)) = block.get_mut("attributes") {
        attrs.values_mut().for_each(|a| visit_attribute(a, f));
    }
    if let Some(Json::Object(types)) = block.get_mut("block_types") {
        for nested in types.values_mut() {
            if let Some(inner) = nested.get_mut("block") {
                visit_block(inner, f);
            }
        }
    }
}

fn visit_attribute(attr: &mut Json, f: &mut dyn FnMut(&mut Map<String, Json>)) {
    if let Some(Json::Object(attrs)) = attr
        .get_mut("nested_type")
        .and_then(|n| n.get_mut("attributes"))
    {
        attrs.values_mut().for_each(|a| visit_attribute(a, f));
    }
    if let Json::Object(obj) = attr {
        f(obj);
    }
}

/// Collect every place where `want` (Terraform) and `got` (Kraken) differ, as JSON paths.
fn diff(path: &str, want: &Json, got: &Json, out: &mut Vec<String>) {
    const MAX_REPORTED: usize = 40;
    if out.len() >= MAX_REPORTED {
        return;
    }
    match (want, got) {
        (Json::Object(w), Json::Object(g)) => {
            let keys: std::collections::BTreeSet<&String> = w.keys().chain(g.keys()).collect();
            for key in keys {
                let sub = format!("{path}/{key}");
                match (w.get(key), g.get(key)) {
                    (Some(wv), Some(gv)) => diff(&sub, wv, gv, out),
                    (Some(wv), None) => {
                        out.push(format!("{sub}: only terraform has {}", short(wv)))
                    }
                    (None, Some(gv)) => out.push(format!("{sub}: only kraken has {}", short(gv))),
                    (None, None) => {}
                }
            }
        }
        (Json::Array(w), Json::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                diff(&format!("{path}/{i}"), wv, gv, out);
            }
        }
        _ if want != got => out.push(format!(
            "{path}: terraform {} vs kraken {}",
            short(want),
            short(got)
        )),
        _ => {}
    }
}

fn short(v: &Json) -> String {
    let text = v.to_string();
    match text.char_indices().nth(160) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Run a command to completion (killing it after [`COMMAND_TIMEOUT`]) and return its stdout;
/// a failure carries its stderr.
fn run(mut cmd: Command, what: &str) -> anyhow::Result<Vec<u8>> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("failed to start {what} ({cmd:?})"))?;
    // Drain both pipes while waiting so a chatty child never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not finish within {COMMAND_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    if !status.success() {
        bail!(
            "{what} failed ({status}):\n{}{}",
            String::from_utf8_lossy(&stderr),
            String::from_utf8_lossy(&stdout)
        );
    }
    Ok(stdout)
}

/// The normalization must remove only what the old release cannot print: an attribute that
/// happens to be *named* `write_only` stays, and 1.6+ keeps every version as rendered.
#[test]
fn normalization_removes_only_newer_keys() {
    let entry = serde_json::json!({
        "provider": {"version": 2, "block": {"description_kind": "plain"}},
        "resource_schemas": {"x_a": {"version": 3, "block": {
            "attributes": {"write_only": {"type": "string", "write_only": true,
                                          "description_kind": "plain"}},
            "block_types": {"b": {"nesting_mode": "list", "block": {
                "attributes": {"n": {"nested_type": {"nesting_mode": "single", "attributes": {
                    "s": {"type": "string", "write_only": true, "description_kind": "plain"}}},
                    "description_kind": "plain"}},
                "description_kind": "plain"}}},
            "description_kind": "plain"}}},
        "data_source_schemas": {
            "x_a": {"version": 1, "block": {"description_kind": "plain"}},
            "x_b": {"version": 1, "block": {"description_kind": "plain"}},
        },
        "functions": {"f": {"return_type": "string"}},
    });
    assert_eq!(as_printed_by(entry.clone(), (1, 14)), entry);

    let old = as_printed_by(entry, (1, 5));
    assert!(old.get("functions").is_none());
    assert_eq!(old["provider"]["version"], 0);
    assert_eq!(old["data_source_schemas"]["x_a"]["version"], 3);
    assert_eq!(old["data_source_schemas"]["x_b"]["version"], 0);
    let block = &old["resource_schemas"]["x_a"]["block"];
    assert_eq!(
        block["attributes"]["write_only"],
        serde_json::json!({"type": "string", "description_kind": "plain"})
    );
    let nested = &block["block_types"]["b"]["block"]["attributes"]["n"]["nested_type"];
    assert!(nested["attributes"]["s"].get("write_only").is_none());
}

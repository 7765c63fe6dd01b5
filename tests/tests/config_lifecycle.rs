//! Configuration outlives what needs it (docs/operator.md, "Deleting configuration"): the
//! documents of `examples/` applied the way `scripts/demo.sh` applies them — real Providers
//! installed from the test peers' filesystem mirror, moto as EC2 — then deleted with
//! `kubectl delete` in several orders. Every deletion completes, every external object is
//! destroyed, and while configuration waits for its users it says which.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kraken_tests::moto::{Ec2Probe, Moto};
use kraken_tests::operator::bed::{describe, is_reconciled, wait_condition};
use kraken_tests::operator::{Operator, OperatorOptions, condition, with_log_tails};
use kraken_tests::{ControlPlane, TestEnv, repo_root, scratch_dir, wait_for};
use serde_json::Value;

const NS: &str = "default";
const INSTALL: Duration = Duration::from_secs(120);
const CONVERGE: Duration = Duration::from_secs(120);
/// `kubectl delete --timeout`: every object gone, external objects destroyed on the way.
const DELETE: &str = "240s";

/// One document of examples/: its kubectl resource name, name, and text.
#[derive(Clone)]
struct Doc {
    resource: String,
    name: String,
    text: String,
}

/// Drop order is field order: the operator goes before its control plane and moto.
struct Bed {
    op: Operator,
    cp: ControlPlane,
    moto: Moto,
    probe: Ec2Probe,
    _cache: tempfile::TempDir,
}

impl Bed {
    fn start() -> anyhow::Result<Self> {
        let env = TestEnv::load()?;
        let cp = ControlPlane::start("cfg-lifecycle")?;
        cp.install_crds(
            &repo_root().join("generated-crds/core"),
            "kraken.dev/core=true",
        )?;
        let moto = Moto::start(cp.run_dir())?;
        let probe = Ec2Probe::new(&moto.endpoint())?;
        let cache = scratch_dir("kraken-plugin-cache-")?;
        // As scripts/demo.sh runs it: Providers from the local mirror, moto's loopback
        // endpoint allowed, no AWS identity of the operator's own.
        let mut op = Operator::start(
            &cp,
            OperatorOptions {
                rust_log: "info,kraken=debug,kraken_provider=info".into(),
                leader_elect: false,
                env: kraken_tests::moto::operator_env()?,
                args: vec![
                    "--plugin-cache".into(),
                    cache.path().display().to_string(),
                    "--provider-mirror".into(),
                    env.path("KRAKEN_TEST_PLUGIN_DIR")?.display().to_string(),
                    "--aws-endpoint".into(),
                    "http://127.0.0.1:*".into(),
                ],
                ..OperatorOptions::default()
            },
        )?;
        op.wait_ready(Duration::from_secs(60))?;
        Ok(Self {
            op,
            cp,
            moto,
            probe,
            _cache: cache,
        })
    }

    /// The documents of examples/, in file order, moto's endpoint substituted as the demo does.
    fn examples(&self) -> anyhow::Result<Vec<Doc>> {
        let mut docs = Vec::new();
        for file in ["00-providers.yaml", "10-resources.yaml", "20-ec2.yaml"] {
            let path = repo_root().join("examples").join(file);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?
                .replace("http://127.0.0.1:5000", &self.moto.endpoint());
            for part in text.split("\n---\n") {
                docs.push(doc(part).with_context(|| format!("a document of {file}"))?);
            }
        }
        Ok(docs)
    }

    /// Applies examples/ as scripts/demo.sh does, file by file, each Ready before the next.
    fn apply_examples(&self, docs: &[Doc]) -> anyhow::Result<()> {
        for group in [&docs[..4], &docs[4..8], &docs[8..]] {
            let yaml = texts(group);
            self.cp.apply_yaml(NS, &yaml)?;
            for d in group {
                if d.resource == "secrets" {
                    continue;
                }
                let timeout = if d.resource.starts_with("providers.") {
                    INSTALL
                } else {
                    CONVERGE
                };
                self.wait_ready(d, timeout)?;
            }
        }
        Ok(())
    }

    fn get(&self, d: &Doc) -> anyhow::Result<Option<Value>> {
        let ns = if d.resource.starts_with("providers.") {
            ""
        } else {
            NS
        };
        self.cp.get_json_opt(ns, &d.resource, &d.name)
    }

    fn wait_ready(&self, d: &Doc, timeout: Duration) -> anyhow::Result<Value> {
        wait_for(timeout, &format!("{} {} Ready", d.resource, d.name), || {
            let obj = self.get(d)?.context("does not exist")?;
            let ready = match d.resource.as_str() {
                r if r.starts_with("providers.")
                    || r.starts_with("providerconfigs.")
                    || r.starts_with("awsconfigs.")
                    || r.starts_with("configexports.") =>
                {
                    condition(&obj, "Ready").is_some_and(|(s, _, _)| s == "True")
                }
                _ => is_reconciled(&obj),
            };
            if ready {
                Ok(Some(obj))
            } else {
                bail!("{}", describe(&obj))
            }
        })
    }

    /// `kubectl delete -f -` of `docs` in their order; waits (kubectl's own wait) until every
    /// object is gone.
    fn delete(&self, docs: &[Doc], wait: bool) -> anyhow::Result<()> {
        let wait = format!("--wait={wait}");
        let args = [
            "delete",
            "-n",
            NS,
            "-f",
            "-",
            "--ignore-not-found",
            &wait,
            "--timeout",
            DELETE,
        ];
        let out = self.cp.kubectl_stdin(&args, texts(docs).as_bytes())?;
        if !out.status.success() {
            let mut left = Vec::new();
            for d in docs {
                if let Some(obj) = self.get(d)? {
                    left.push(format!("{} {}: {}", d.resource, d.name, describe(&obj)));
                }
            }
            bail!(
                "kubectl delete failed: {}\nstill there:\n{}",
                String::from_utf8_lossy(&out.stderr),
                left.join("\n")
            );
        }
        Ok(())
    }

    fn finish<T>(&self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        result.map_err(|e| with_log_tails(e, &[("operator", &self.op)], 60))
    }
}

/// A document's resource (kubectl's plural.group), name and text.
fn doc(text: &str) -> anyhow::Result<Doc> {
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_owned())
            .with_context(|| format!("no {key} in {text}"))
    };
    let api_version = field("apiVersion:")?;
    let kind = field("kind:")?;
    let name = field("  name:")?;
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let plural = match kind.as_str() {
        "ProviderConfig" | "AwsConfig" | "ConfigExport" | "Provider" => {
            format!("{}s", kind.to_lowercase())
        }
        "EC2Instance" => "ec2instances".to_owned(),
        "Static" => "statics".to_owned(),
        other => format!("{}s", other.to_lowercase()),
    };
    let resource = if group.is_empty() {
        plural
    } else {
        format!("{plural}.{group}")
    };
    Ok(Doc {
        resource,
        name,
        text: text.to_owned(),
    })
}

fn texts(docs: &[Doc]) -> String {
    docs.iter()
        .map(|d| d.text.as_str())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// What the examples made outside the API server: the instances' ids.
fn instance_ids(ec2: &Value) -> Vec<String> {
    ec2["status"]["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["id"].as_str().map(str::to_owned))
        .collect()
}

/// Kraken's state Secrets in the namespace (one per bridged resource).
fn state_secrets(cp: &ControlPlane) -> anyhow::Result<Vec<String>> {
    Ok(cp
        .list_json(NS, "secrets")?
        .iter()
        .filter(|s| s["type"] == "kraken.dev/tfstate")
        .filter_map(|s| s["metadata"]["name"].as_str().map(str::to_owned))
        .collect())
}

/// Applies examples/, records what exists outside, runs `delete`, then checks that every
/// document's object is gone, the instances are terminated and no state is left.
fn round(
    bed: &Bed,
    what: &str,
    delete: impl FnOnce(&Bed, &[Doc]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    eprintln!("[config-lifecycle] {what}: applying examples/");
    let docs = bed.examples()?;
    ensure!(docs.len() == 12, "examples/ has {} documents", docs.len());
    bed.apply_examples(&docs)?;
    let ec2 = docs
        .iter()
        .find(|d| d.resource.starts_with("ec2instances."))
        .context("no EC2Instance in examples/")?;
    let ids = instance_ids(&bed.get(ec2)?.context("EC2Instance app")?);
    ensure!(ids.len() == 2, "instances of app: {ids:?}");
    ensure!(
        state_secrets(&bed.cp)?.len() == 4,
        "state Secrets: {:?}",
        state_secrets(&bed.cp)?
    );
    eprintln!("[config-lifecycle] {what}: deleting");
    let started = std::time::Instant::now();
    delete(bed, &docs)?;
    eprintln!(
        "[config-lifecycle] {what}: deleted in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    for d in &docs {
        ensure!(
            bed.get(d)?.is_none(),
            "{} {} is still there",
            d.resource,
            d.name
        );
    }
    for id in &ids {
        let state = bed.probe.instance(id)?.state;
        ensure!(state == "terminated", "instance {id} is {state}");
    }
    let left = state_secrets(&bed.cp)?;
    ensure!(left.is_empty(), "state Secrets left: {left:?}");
    Ok(())
}

/// Configuration deleted first, on its own: each piece waits and names what uses it, the kinds
/// stay served, the credentials Secret stays readable; the resources then go, and so does the
/// configuration after them.
fn configuration_first(bed: &Bed, docs: &[Doc]) -> anyhow::Result<()> {
    let is_config = |d: &&Doc| {
        ["providers.", "providerconfigs.", "awsconfigs.", "secrets"]
            .iter()
            .any(|p| d.resource.starts_with(p))
    };
    let config: Vec<Doc> = docs.iter().filter(is_config).cloned().collect();
    let resources: Vec<Doc> = docs.iter().filter(|d| !is_config(d)).cloned().collect();
    bed.delete(&config, false)?;
    let expect_in_use = [
        ("providers.core.kraken.dev", "random", "Pet default/db"),
        (
            "providers.core.kraken.dev",
            "time",
            "Static default/launched",
        ),
        (
            "providerconfigs.core.kraken.dev",
            "random",
            "String default/token",
        ),
        (
            "awsconfigs.aws.kraken.dev",
            "default",
            "EC2Instance default/app",
        ),
    ];
    for (resource, name, user) in expect_in_use {
        let ns = if resource.starts_with("providers.") {
            ""
        } else {
            NS
        };
        let in_use = ("Ready", "False", "InUse");
        wait_condition(&bed.cp, (ns, resource, name), in_use, user, CONVERGE)?;
    }
    let crds = bed.cp.kubectl(&[
        "get",
        "crd",
        "-l",
        "kraken.dev/suspended=true",
        "-o",
        "name",
    ])?;
    ensure!(
        crds.trim().is_empty(),
        "kinds suspended while objects of them exist: {crds}"
    );
    let secret = bed.cp.get_json(NS, "secrets", "aws-credentials")?;
    let finalizers = secret["metadata"]["finalizers"].to_string();
    ensure!(
        secret["metadata"]["deletionTimestamp"].is_string()
            && finalizers.contains("kraken.dev/awsconfig-default")
            && secret["data"]["accessKeyId"].is_string(),
        "the credentials Secret is not held for the EC2Instance: {secret}"
    );
    // The resources are untouched meanwhile.
    for d in &resources {
        if !d.resource.starts_with("configexports.") {
            bed.wait_ready(d, CONVERGE)?;
        }
    }
    bed.delete(&resources, true)?;
    bed.delete(&config, true)
}

/// `kubectl delete -f examples/` as a user runs it after the demo, and the same documents
/// reversed and configuration first: each deletion completes, EC2 instances are terminated and
/// the bridged resources' state is gone.
#[test]
fn deleting_the_examples_completes_in_any_order() -> anyhow::Result<()> {
    let bed = Bed::start()?;
    let result = (|| {
        round(&bed, "configuration first", configuration_first)?;
        round(&bed, "kubectl delete -f examples/", |bed, docs| {
            bed.delete(docs, true)
        })?;
        round(&bed, "documents reversed", |bed, docs| {
            let reversed: Vec<Doc> = docs.iter().rev().cloned().collect();
            bed.delete(&reversed, true)
        })
    })();
    bed.finish(result)
}

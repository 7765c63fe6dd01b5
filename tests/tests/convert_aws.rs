//! `kraken convert --state` end to end on hashicorp/aws against moto: the Terraform CLI applies
//! a configuration (a VPC, subnets from `count` over `cidrsubnet`, a security group, an
//! instance whose image comes from `data.aws_ami`, an S3 bucket's versioning, an IAM role whose
//! trust policy is a `data.aws_iam_policy_document`, with an inline policy from another reading
//! an SQS queue);
//! `kraken convert --state` converts it; `kraken plan` shows adopting changes nothing; the
//! manifests are applied with the operator running. Every object becomes Ready by importing
//! what Terraform made: moto's recorder shows no request but reads from the moment the
//! manifests were applied, and `status.atProvider` holds Terraform's values. A change of a
//! variable-derived value in a manifest afterwards reaches moto like any change.
//!
//! The bucket itself is made in moto directly, as in `aws_bridge`: hashicorp/aws reads every
//! aws_s3_bucket's tags through S3 Control at `<account-id>.<endpoint host>`, a name that does
//! not resolve for a loopback endpoint, so neither Terraform nor Kraken can create or read one
//! against moto. Its versioning (which names the bucket) is managed by both.
//!
//!
//! The states are seeded (`kraken convert --state --seed-state`): the operator refreshes what
//! Terraform stored instead of importing each object. hashicorp/aws imports an SQS queue only
//! by a `https://sqs.<region>.<domain>/<account>/<name>` URL, which moto's loopback URLs are not,
//! so importing it (`terraform import` too) fails against moto; refreshing it does not.
//! The objects whose types hashicorp/aws gives a resource identity are converted with
//! `spec.importIdentity`; their seeded states are removed before the hand-over, so the plan and
//! the operator import each of them by its identity through the provider.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, ensure};
use kraken_tests::bench::{aws_provider, terraform};
use kraken_tests::moto::{AMI, reads_only};
use kraken_tests::operator::aws::{AwsBed, Kind};
use kraken_tests::{TestEnv, kraken_bin, scratch_dir};
use serde_json::{Value, json};

const RESOURCES: &[&str] = &[
    "aws_vpc",
    "aws_subnet",
    "aws_security_group",
    "aws_instance",
    "aws_s3_bucket_versioning",
    "aws_iam_role",
    "aws_iam_role_policy",
    "aws_sqs_queue",
];
const DATA_SOURCES: &[&str] = &["aws_ami", "aws_iam_policy_document"];
const BUCKET: &str = "adopt-logs";

/// Each converted object (kind, data source?, name) with its Terraform address.
const OBJECTS: [(&str, bool, &str, &str); 12] = [
    ("Vpc", false, "main", "aws_vpc.main"),
    ("Subnet", false, "app-0", "aws_subnet.app[0]"),
    ("Subnet", false, "app-1", "aws_subnet.app[1]"),
    ("SecurityGroup", false, "web", "aws_security_group.web"),
    ("Instance", false, "web", "aws_instance.web"),
    (
        "S3BucketVersioning",
        false,
        "logs",
        "aws_s3_bucket_versioning.logs",
    ),
    ("IamRole", false, "app", "aws_iam_role.app"),
    ("IamRolePolicy", false, "app", "aws_iam_role_policy.app"),
    ("SqsQueue", false, "jobs", "aws_sqs_queue.jobs"),
    ("DataAmi", true, "base", "data.aws_ami.base"),
    (
        "DataIamPolicyDocument",
        true,
        "assume",
        "data.aws_iam_policy_document.assume",
    ),
    (
        "DataIamPolicyDocument",
        true,
        "read",
        "data.aws_iam_policy_document.read",
    ),
];

/// The configuration Terraform applies, after its header: a VPC, two subnets, a security
/// group, an instance, bucket versioning, an IAM role and policy from policy documents, an SQS
/// queue, variables and locals. `__AMI__` and `__BUCKET__` stand for [`AMI`] and [`BUCKET`].
const MODULE: &str = r#"variable "name" {
  type    = string
  default = "adopt"
}
variable "subnets" {
  type    = number
  default = 2
}
variable "retention" {
  type    = number
  default = 86400
}
locals {
  cidr = "10.20.0.0/16"
  tags = { app = var.name }
}
data "aws_ami" "base" {
  most_recent = true
  filter {
    name   = "image-id"
    values = ["__AMI__"]
  }
}
resource "aws_vpc" "main" {
  cidr_block = local.cidr
  tags       = local.tags
}
resource "aws_subnet" "app" {
  count      = var.subnets
  vpc_id     = aws_vpc.main.id
  cidr_block = cidrsubnet(local.cidr, 8, count.index)
  tags       = merge(local.tags, { Name = "${var.name}-${count.index}" })
}
resource "aws_security_group" "web" {
  name   = "${var.name}-web"
  vpc_id = aws_vpc.main.id
  ingress {
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = [local.cidr]
  }
  tags = local.tags
}
resource "aws_instance" "web" {
  ami                    = data.aws_ami.base.id
  instance_type          = "t3.micro"
  subnet_id              = aws_subnet.app[0].id
  vpc_security_group_ids = [aws_security_group.web.id]
  tags                   = local.tags
}
resource "aws_s3_bucket_versioning" "logs" {
  bucket = "__BUCKET__"
  versioning_configuration {
    status = "Enabled"
  }
}
data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}
data "aws_iam_policy_document" "read" {
  statement {
    actions   = ["sqs:ReceiveMessage"]
    resources = [aws_sqs_queue.jobs.arn]
  }
}
resource "aws_iam_role" "app" {
  name               = "${var.name}-app"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = local.tags
}
resource "aws_iam_role_policy" "app" {
  name   = "read-jobs"
  role   = aws_iam_role.app.id
  policy = data.aws_iam_policy_document.read.json
}
resource "aws_sqs_queue" "jobs" {
  name                      = "${var.name}-jobs"
  message_retention_seconds = var.retention
  tags                      = local.tags
}
"#;

fn configuration(endpoint: &str, version: &str) -> String {
    let header =
        kraken_tests::bench::aws_terraform_header(endpoint, version, &["ec2", "s3", "iam", "sqs"]);
    let module = MODULE.replace("__AMI__", AMI).replace("__BUCKET__", BUCKET);
    format!("{header}\n{module}")
}

/// Terraform's attributes of the instance at `address` in `terraform.tfstate`.
fn state_attributes(state: &Value, address: &str) -> Option<Value> {
    let resources = state["resources"].as_array()?;
    resources.iter().find_map(|r| {
        let prefix = match r["mode"].as_str() {
            Some("data") => "data.",
            _ => "",
        };
        let base = format!(
            "{prefix}{}.{}",
            r["type"].as_str().unwrap_or_default(),
            r["name"].as_str().unwrap_or_default()
        );
        r["instances"].as_array()?.iter().find_map(|i| {
            let key = match &i["index_key"] {
                Value::Null => String::new(),
                k => format!("[{k}]"),
            };
            (format!("{base}{key}") == address).then(|| i["attributes"].clone())
        })
    })
}

/// `kraken convert <tf> --state <state> --namespace <ns> --out <out>`: its stdout.
fn convert(tf: &Path, ns: &str, out: &Path) -> anyhow::Result<String> {
    let env = TestEnv::load()?;
    let run = Command::new(kraken_bin()?)
        .arg("convert")
        .arg(tf)
        .arg("--state")
        .arg(tf.join("terraform.tfstate"))
        .args(["--namespace", ns, "--out"])
        .arg(out)
        .arg("--plugin-dir")
        .arg(env.path("KRAKEN_TEST_PLUGIN_DIR")?)
        .arg("--seed-state")
        .output()?;
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    ensure!(
        run.status.success(),
        "convert --state failed: {stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    Ok(stdout)
}

/// The converted manifests of resources and data sources (not the providers, which the bed
/// configures for moto, nor the README).
fn manifests(out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<_> = std::fs::read_dir(out)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| {
                (n.starts_with("resource-") || n.starts_with("data-")) && n.ends_with(".yaml")
            })
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Removes the seeded states of the objects whose manifests adopt by resource identity (but
/// the SQS queue's: above), so the plan and the operator import them by identity. Returns
/// their addresses.
fn unseed_identities(ab: &AwsBed, files: &[PathBuf]) -> anyhow::Result<BTreeSet<String>> {
    let cp = &ab.bed.cp;
    let mut by_identity = BTreeSet::new();
    for file in files {
        let path = file.to_string_lossy();
        // One JSON document per manifest, one after the other.
        let json = cp.kubectl(&["create", "--dry-run=client", "-o", "json", "-f", &path])?;
        for item in serde_json::Deserializer::from_str(&json).into_iter::<Value>() {
            let item = item?;
            let address = &item["metadata"]["annotations"]["kraken.dev/terraform-address"];
            if item["spec"]["importIdentity"].is_object() && item["kind"] != "SqsQueue" {
                by_identity.insert(address.as_str().unwrap_or_default().to_owned());
            }
        }
    }
    let seeded = cp.kubectl(&[
        "get",
        "secrets",
        "-n",
        ab.ns(),
        "-l",
        "kraken.dev/seeded-from=terraform",
        "-o",
        "json",
    ])?;
    let seeded: Value = serde_json::from_str(&seeded)?;
    for secret in seeded["items"].as_array().into_iter().flatten() {
        let meta = &secret["metadata"];
        let address = meta["annotations"]["kraken.dev/terraform-address"].as_str();
        if address.is_some_and(|a| by_identity.contains(a)) {
            let name = meta["name"].as_str().unwrap_or_default();
            cp.kubectl(&["delete", "secret", name, "-n", ab.ns()])?;
        }
    }
    Ok(by_identity)
}

#[test]
fn an_aws_state_is_adopted_with_zero_changes() -> anyhow::Result<()> {
    let ab = AwsBed::start("adopt-aws", false, (RESOURCES, DATA_SOURCES))?;
    let result = scenario(&ab);
    ab.bed.finish(result)
}

fn scenario(ab: &AwsBed) -> anyhow::Result<()> {
    let work = scratch_dir("kraken-adopt-aws-")?;
    let tf = work.path().join("tf");
    let state = apply_with_terraform(ab, &tf)?;
    let out = work.path().join("out");
    let (files, by_identity) = convert_and_seed(ab, &tf, &out)?;
    expect_a_zero_change_plan(ab, &work.path().join("planned"), &files)?;
    for file in &files {
        ab.bed.apply(&std::fs::read_to_string(file)?)?;
    }
    let before = expect_adopted_by_reading(ab, &state, &by_identity)?;
    expect_a_change_is_one_write(ab, &state, before)
}

/// Terraform applies the configuration in `tf` against moto; returns its state.
fn apply_with_terraform(ab: &AwsBed, tf: &Path) -> anyhow::Result<Value> {
    ab.api
        .call("s3", "create_bucket", &json!({"Bucket": BUCKET}))?;
    std::fs::create_dir_all(tf)?;
    let (_, version) = aws_provider()?;
    std::fs::write(
        tf.join("main.tf"),
        configuration(&ab.moto.endpoint(), &version),
    )?;
    terraform(tf, &["init", "-input=false", "-no-color"])?;
    terraform(tf, &["apply", "-auto-approve", "-input=false", "-no-color"])?;
    Ok(serde_json::from_slice(&std::fs::read(
        tf.join("terraform.tfstate"),
    )?)?)
}

/// `kraken convert --state` into `out`, the bed's ProviderConfig set as the configuration's
/// provider block says, moto recording from here on, and the states Terraform left seeded
/// (those of resources adopted by identity taken out again). Returns the manifests and the
/// addresses adopted by resource identity.
fn convert_and_seed(
    ab: &AwsBed,
    tf: &Path,
    out: &Path,
) -> anyhow::Result<(Vec<PathBuf>, BTreeSet<String>)> {
    let ns = ab.ns().to_owned();
    let stdout = convert(tf, &ns, out)?;
    eprintln!("{stdout}");
    ensure!(
        stdout.contains("9 objects import"),
        "every resource instance imports: {stdout}"
    );
    // The bed's ProviderConfig, as the configuration's provider block says: without the
    // account id (`skip_requesting_account_id`), which ARNs then leave out.
    ab.bed.cp.kubectl(&[
        "patch",
        "providerconfigs.core.kraken.dev",
        "aws",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"config":{"skipRequestingAccountId":true}}}"#,
    ])?;
    // Terraform's objects carry no owner's tag: the administrator vouches for the migration
    // (docs/security.md, "Adoption needs consent").
    ab.bed.cp.kubectl(&[
        "annotate",
        "namespace",
        &ns,
        "kraken.dev/adoptable-types=aws_*",
    ])?;
    // From here on moto records every request: planning and adopting may only read.
    ab.moto.record()?;
    // The states Terraform left, seeded: the operator and the plan refresh them instead of
    // importing (hashicorp/aws cannot import an SQS queue by a moto URL, below). Seeding is
    // authorized where the chart's policy kraken-state-seeding is installed (the test's admin
    // is in system:masters, which it admits).
    let seeding = kraken_tests::helm_template(&["--show-only", "templates/state-seeding.yaml"])?;
    ab.bed.apply(&seeding)?;
    ab.bed
        .apply(&std::fs::read_to_string(out.join("terraform-state.yaml"))?)?;
    let files = manifests(out)?;
    let by_identity = unseed_identities(ab, &files)?;
    eprintln!("adopted by resource identity: {by_identity:?}");
    ensure!(
        by_identity.contains("aws_vpc.main"),
        "hashicorp/aws declares an identity for aws_vpc: its manifest adopts by it ({by_identity:?})"
    );
    Ok((files, by_identity))
}

/// Before the hand-over, `kraken plan` reads the data sources and imports and plans every
/// resource through the real provider, each against the others' real values: nothing to do.
fn expect_a_zero_change_plan(ab: &AwsBed, planned: &Path, files: &[PathBuf]) -> anyhow::Result<()> {
    std::fs::create_dir_all(planned)?;
    for file in files {
        if let Some(name) = file.file_name() {
            std::fs::copy(file, planned.join(name))?;
        }
    }
    let (run, _) = kraken_tests::bench::kraken_plan(&kraken_bin()?, &ab.bed.cp, planned)?;
    let plan_out = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    eprintln!("{plan_out}");
    ensure!(
        run.status.code() == Some(0),
        "a zero-change plan: exit {:?}\n{plan_out}",
        run.status.code()
    );
    Ok(())
}

/// Every object reconciles with Terraform's attributes, those adopted by identity say so, and
/// moto saw no write. Returns how many requests moto recorded.
fn expect_adopted_by_reading(
    ab: &AwsBed,
    state: &Value,
    by_identity: &BTreeSet<String>,
) -> anyhow::Result<usize> {
    for (kind, data, name, address) in OBJECTS {
        let obj = ab.wait_reconciled(&Kind(kind, data), name)?;
        let attrs =
            state_attributes(state, address).with_context(|| format!("{address} in the state"))?;
        let at = &obj["status"]["atProvider"];
        for (tf_key, kube_key) in [("id", "id"), ("arn", "arn"), ("cidr_block", "cidrBlock")] {
            if attrs[tf_key].is_null() {
                continue;
            }
            ensure!(
                at[kube_key] == attrs[tf_key],
                "{address}: atProvider.{kube_key} is {} but Terraform's state holds {}",
                at[kube_key],
                attrs[tf_key]
            );
        }
    }
    for (_, _, name, address) in OBJECTS.iter().filter(|o| by_identity.contains(o.3)) {
        let imported = ab
            .bed
            .wait_event(name, "Imported", std::time::Duration::from_secs(30))?;
        ensure!(
            imported.contains("identity {"),
            "{address} was imported by its identity: {imported}"
        );
    }
    let recorded = ab.moto.recorded()?;
    let writes: Vec<_> = recorded.iter().filter(|(_, a)| !reads_only(a)).collect();
    ensure!(
        writes.is_empty(),
        "adopting changed the cloud: {writes:?} (of {} requests)",
        recorded.len()
    );
    eprintln!("adopting made {} requests, none a write", recorded.len());
    Ok(recorded.len())
}

/// A change of a variable-derived value in a manifest reaches moto like any change: one
/// write among the requests after the first `before`.
fn expect_a_change_is_one_write(ab: &AwsBed, state: &Value, before: usize) -> anyhow::Result<()> {
    let vpc = Kind("Vpc", false);
    ab.patch(
        &vpc,
        "main",
        json!({"forProvider": {"tags": {"app": "moved"}}}),
    )?;
    let vpc_id = state_attributes(state, "aws_vpc.main")
        .and_then(|a| a["id"].as_str().map(str::to_owned))
        .context("the VPC's id")?;
    ab.wait_aws(
        "moto shows the VPC's new tag",
        ("ec2", "describe_vpcs", json!({"VpcIds": [vpc_id]})),
        |a| {
            a["Vpcs"][0]["Tags"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["Key"] == "app" && t["Value"] == "moved"))
        },
    )?;
    let after = ab.moto.recorded()?;
    let writes: Vec<_> = after[before..]
        .iter()
        .filter(|(_, a)| !reads_only(a))
        .map(|(s, a)| format!("{s} {a}"))
        .collect();
    ensure!(
        writes == ["ec2 CreateTags"],
        "the change is one write: {writes:?}"
    );
    Ok(())
}

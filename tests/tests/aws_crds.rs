//! The largest real schema: every `hashicorp/aws` resource type becomes a CRD that a real
//! kube-apiserver accepts. The schema was read from a terraform-provider-aws binary built from
//! its Go module (`scripts/aws-schema.sh`) and is committed gzipped in `tests/data/aws/`.

use std::io::Read as _;

use anyhow::{Context as _, ensure};
use kraken_codegen::{Options, generate, write_dir};
use kraken_tests::{ControlPlane, repo_root};

/// The API server stores objects in etcd, whose default request limit is 1.5 MiB.
const ETCD_OBJECT_LIMIT: usize = 1_572_864;

#[test]
fn every_aws_resource_type_becomes_an_established_crd() -> anyhow::Result<()> {
    let path = repo_root().join("tests/data/aws/schema.json.gz");
    let gz = std::fs::read(&path)
        .with_context(|| format!("{} (run scripts/aws-schema.sh)", path.display()))?;
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice()).read_to_end(&mut text)?;
    let all = kraken_codegen::tfjson::parse_provider_schemas(&serde_json::from_slice(&text)?)?;
    let (address, schema) = all
        .into_iter()
        .next()
        .context("no provider in the AWS schema")?;

    let generated = generate(&address, &schema, &Options::default())?;
    ensure!(
        generated.report.errors.is_empty(),
        "resource types without a CRD: {:?}",
        generated.report.errors
    );
    ensure!(
        generated.crds.len() == schema.resources.len(),
        "{} CRDs for {} resource types",
        generated.crds.len(),
        schema.resources.len()
    );
    for crd in &generated.crds {
        ensure!(
            crd.json_bytes < ETCD_OBJECT_LIMIT,
            "{} is {} bytes",
            crd.type_name,
            crd.json_bytes
        );
    }
    eprintln!(
        "{} CRDs generated; {} had descriptions trimmed",
        generated.crds.len(),
        generated.report.trimmed.len()
    );

    let dir = tempfile::tempdir()?;
    write_dir(&generated, dir.path())?;
    let cp = ControlPlane::start("aws-crds")?;
    let installed = cp.install_crds(dir.path(), "tf.kraken.dev/provider=aws")?;
    ensure!(
        installed == generated.crds.len(),
        "{installed} of {} CRDs installed",
        generated.crds.len()
    );
    // A structural schema that the API server silently pruned would show up here.
    let bucket = cp.kubectl(&[
        "explain",
        "s3buckets.spec.forProvider",
        "--api-version=aws.tf.kraken.dev/v1alpha1",
    ])?;
    ensure!(bucket.contains("bucket"), "explain S3Bucket:\n{bucket}");
    Ok(())
}

//! The largest real schema: every `hashicorp/aws` resource type becomes a CRD that a real
//! kube-apiserver accepts. The schema was read from a terraform-provider-aws binary built from
//! its Go module (`scripts/aws-schema.sh`) and is committed gzipped in `tests/data/aws/`.
//!
//! What the API server can refuse of a CRD it checks when the CRD is written: the structural
//! schema, the CEL rules and their cost, the names. A server-side dry-run runs every one of
//! those checks on all 1,616 CRDs without storing them; what it cannot see is two CRDs
//! claiming the same names (the API server's naming controller refuses the second after it is
//! stored), which is checked over the whole set here. A sample (the largest CRDs and a spread of
//! the rest) is then really installed and Established. Installing all 1,616 costs the API server
//! about five minutes of CPU, most of it rebuilding the group's OpenAPI after each CRD: the
//! codegen bench does that (`cargo bench -p kraken-tests --bench codegen`), CI does not.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::PathBuf;

use anyhow::{Context as _, ensure};
use kraken_codegen::{GeneratedCrd, Options, generate, write_dir};
use kraken_tests::{ControlPlane, repo_root};

/// The API server stores objects in etcd, whose default request limit is 1.5 MiB.
const ETCD_OBJECT_LIMIT: usize = 1_572_864;
/// How many of the largest CRDs the sample installs.
const LARGEST: usize = 24;
/// Every how many of the rest (in type-name order) the sample installs one.
const SPREAD: usize = 50;

#[test]
fn every_aws_resource_type_becomes_a_crd_the_api_server_accepts() -> anyhow::Result<()> {
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
    names_are_unique(&generated.crds)?;
    eprintln!(
        "{} CRDs generated; {} had descriptions trimmed",
        generated.crds.len(),
        generated.report.trimmed.len()
    );

    let dir = tempfile::tempdir()?;
    write_dir(&generated, dir.path())?;
    let files = |crds: &[&GeneratedCrd]| -> Vec<PathBuf> {
        crds.iter().map(|c| dir.path().join(&c.file_name)).collect()
    };
    let cp = ControlPlane::start("aws-crds")?;
    let every: Vec<&GeneratedCrd> = generated.crds.iter().collect();
    let started = std::time::Instant::now();
    cp.dry_run_apply(&files(&every))
        .context("the API server refused a CRD")?;
    eprintln!(
        "the API server accepted all {} CRDs (server-side dry-run) in {:.1} s",
        every.len(),
        started.elapsed().as_secs_f64()
    );

    refuses_a_broken_crd(&cp, &generated.crds, dir.path())?;

    let sample = sample(&generated.crds);
    let started = std::time::Instant::now();
    let installed = cp.install_crd_files(&files(&sample), "tf.kraken.dev/provider=aws")?;
    ensure!(
        installed == sample.len(),
        "{installed} of {} CRDs installed",
        sample.len()
    );
    eprintln!(
        "{} CRDs (the {LARGEST} largest, up to {} KiB, and every {SPREAD}th) Established in {:.1} s",
        sample.len(),
        sample.first().map_or(0, |c| c.json_bytes / 1024),
        started.elapsed().as_secs_f64()
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

/// The dry-run is the API server's own check, not a formality: the S3 bucket's CRD with one
/// property made non-structural (no type) is refused, naming the field.
fn refuses_a_broken_crd(
    cp: &ControlPlane,
    crds: &[GeneratedCrd],
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    let bucket = crds
        .iter()
        .find(|c| c.type_name == "aws_s3_bucket")
        .context("no aws_s3_bucket CRD")?;
    let mut broken = bucket.crd.clone();
    let props = &mut broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["forProvider"]["properties"]["bucket"];
    ensure!(
        props.is_object(),
        "the S3 bucket CRD has spec.forProvider.bucket"
    );
    *props = serde_json::json!({"description": "no type"});
    let path = dir.join("broken.json");
    std::fs::write(&path, serde_json::to_vec(&broken)?)?;
    let refused = cp
        .dry_run_apply(&[path])
        .err()
        .context("the API server accepted a CRD with an untyped property")?;
    ensure!(
        format!("{refused:#}")
            .contains("properties[forProvider].properties[bucket].type: Required value"),
        "the refusal names the field: {refused:#}"
    );
    Ok(())
}

/// What the naming controller would refuse: two CRDs of one group with the same plural, kind,
/// singular or short name, or a CRD whose name is not `<plural>.<group>`.
fn names_are_unique(crds: &[GeneratedCrd]) -> anyhow::Result<()> {
    let mut claimed: BTreeMap<(String, String), &str> = BTreeMap::new();
    for crd in crds {
        let spec = &crd.crd["spec"];
        let group = spec["group"].as_str().context("spec.group")?;
        let names = &spec["names"];
        let plural = names["plural"].as_str().context("names.plural")?;
        let name = crd.crd["metadata"]["name"]
            .as_str()
            .context("metadata.name")?;
        ensure!(
            name == format!("{plural}.{group}"),
            "{}: the CRD's name {name} is not <plural>.<group>",
            crd.type_name
        );
        let mut claims = vec![plural.to_owned()];
        for key in ["singular", "kind", "listKind"] {
            claims.extend(names[key].as_str().map(|s| s.to_lowercase()));
        }
        for short in names["shortNames"].as_array().into_iter().flatten() {
            claims.extend(short.as_str().map(str::to_owned));
        }
        claims.sort();
        claims.dedup();
        for claim in claims {
            if let Some(other) = claimed.insert((group.to_owned(), claim.clone()), &crd.type_name) {
                anyhow::bail!(
                    "{} and {other} both claim the name {claim:?} in {group}",
                    crd.type_name
                );
            }
        }
    }
    Ok(())
}

/// The largest CRDs (the likeliest to meet a limit), every [`SPREAD`]th of the rest, and
/// `aws_s3_bucket`; largest first.
fn sample(crds: &[GeneratedCrd]) -> Vec<&GeneratedCrd> {
    let mut by_size: Vec<&GeneratedCrd> = crds.iter().collect();
    by_size.sort_by_key(|c| std::cmp::Reverse(c.json_bytes));
    let mut sample: Vec<&GeneratedCrd> = by_size.iter().take(LARGEST).copied().collect();
    let mut rest: Vec<&GeneratedCrd> = by_size.iter().skip(LARGEST).copied().collect();
    rest.sort_by(|a, b| a.type_name.cmp(&b.type_name));
    sample.extend(
        rest.iter()
            .enumerate()
            .filter(|(i, c)| i % SPREAD == 0 || c.type_name == "aws_s3_bucket")
            .map(|(_, c)| *c),
    );
    sample
}

//! `kraken codegen`: a provider schema (from a binary or a file) to CRD files.

use anyhow::{Context as _, bail};

use super::CodegenArgs;
use super::schema::{address_for_binary, read_binary_schema};

pub(super) async fn run(args: CodegenArgs) -> anyhow::Result<()> {
    let (address, schema) = match (&args.provider, &args.schema) {
        (Some(binary), _) => {
            let address = address_for_binary(binary, args.address.clone())?;
            let schema = read_binary_schema(binary, &address, true).await?;
            (address, (*schema).clone())
        }
        (None, Some(file)) => schema_from_file(file, args.address.as_deref())?,
        (None, None) => bail!("give the schema with --provider BINARY or --schema FILE"),
    };
    let mut opts = kraken_codegen::Options {
        resources: args.resources.clone(),
        data_sources: args.data_sources,
        ..Default::default()
    };
    if let Some(max) = args.max_crd_bytes {
        opts.max_crd_bytes = max;
    }
    // Each CRD is written as soon as it is rendered, so memory holds one at a time.
    let mut writer = kraken_codegen::DirWriter::create(&args.out)
        .with_context(|| format!("failed to create {}", args.out.display()))?;
    let (mut count, mut largest) = (0usize, 0usize);
    let report = kraken_codegen::generate_each(&address, &schema, &opts, |crd| {
        count += 1;
        largest = largest.max(crd.json_bytes);
        writer.write(&crd)
    })
    .with_context(|| format!("failed to generate CRDs for {address}"))?;
    if count == 0 {
        for (name, message) in &report.errors {
            eprintln!("error: {name}: {message}");
        }
        bail!(
            "no CRD generated for {address}{}",
            if args.resources.is_empty() {
                String::new()
            } else {
                format!(" with --resources {}", args.resources.join(","))
            }
        );
    }
    writer
        .finish()
        .with_context(|| format!("failed to write CRDs to {}", args.out.display()))?;
    if !report.trimmed.is_empty() || !report.errors.is_empty() || !report.renamed.is_empty() {
        eprint!("{report}");
    }
    let peak = super::peak_memory_mib()
        .map(|m| format!(", peak memory {m} MiB"))
        .unwrap_or_default();
    println!(
        "wrote {count} CRDs for {address} to {} (largest {} KiB{peak})",
        args.out.display(),
        largest / 1024
    );
    if !report.errors.is_empty() {
        bail!(
            "{} resource types could not be turned into CRDs (see above)",
            report.errors.len()
        );
    }
    Ok(())
}

/// Read a schema JSON file and pick one provider from it.
fn schema_from_file(
    file: &std::path::Path,
    address: Option<&str>,
) -> anyhow::Result<(String, kraken_codegen::schema::ProviderSchema)> {
    let mut text =
        std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    if file.extension().is_some_and(|e| e == "gz") {
        use std::io::Read as _;
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(text.as_slice())
            .read_to_end(&mut plain)
            .with_context(|| format!("{} is not valid gzip", file.display()))?;
        text = plain;
    }
    let json: serde_json::Value = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not valid JSON", file.display()))?;
    let mut all = kraken_codegen::tfjson::parse_provider_schemas(&json)
        .with_context(|| format!("{} is not a provider schema document", file.display()))?;
    match address {
        Some(a) => match all.remove(a) {
            Some(schema) => Ok((a.to_string(), schema)),
            None => bail!(
                "{} has no provider {a}; it has: {}",
                file.display(),
                all.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        },
        None if all.len() > 1 => bail!(
            "{} holds several providers; pick one with --address: {}",
            file.display(),
            all.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
        None => match all.into_iter().next() {
            Some(pair) => Ok(pair),
            None => bail!("{} holds no provider schemas", file.display()),
        },
    }
}

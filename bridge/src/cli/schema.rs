//! `kraken schema`: start a provider binary and print its schema as Terraform prints it.

use std::io::Write as _;

use anyhow::{Context as _, bail};

use super::{SchemaArgs, provider_type_from_binary};
use crate::provider::{LaunchOptions, Plugin as _, ProviderHost};

/// The address to key a binary's schema by: the one given, or the public registry's
/// `hashicorp/<type>` with the type taken from the file name.
pub(super) fn address_for_binary(
    binary: &std::path::Path,
    given: Option<String>,
) -> anyhow::Result<String> {
    if let Some(a) = given {
        return Ok(a);
    }
    let Some(ty) = provider_type_from_binary(binary) else {
        bail!(
            "cannot tell the provider type from {binary:?}; name the binary \
             terraform-provider-<type> or pass --address"
        );
    };
    Ok(format!(
        "{}/hashicorp/{ty}",
        kraken_registry_fetch::DEFAULT_REGISTRY_HOST
    ))
}

/// Start a provider binary, read its schema, and stop it.
pub(super) async fn read_binary_schema(
    binary: &std::path::Path,
    address: &str,
    tls: bool,
) -> anyhow::Result<std::sync::Arc<kraken_codegen::schema::ProviderSchema>> {
    Ok(read_binary(binary, address, tls, false).await?.0)
}

/// The schema of the provider at `binary`, and (`identities`) its resource identity schemas.
pub(super) async fn read_binary(
    binary: &std::path::Path,
    address: &str,
    tls: bool,
    identities: bool,
) -> anyhow::Result<(
    std::sync::Arc<kraken_codegen::schema::ProviderSchema>,
    std::sync::Arc<crate::provider::IdentitySchemas>,
)> {
    let mut opts = LaunchOptions::new(binary);
    opts.docs = true;
    opts.name = address.to_string();
    opts.tls = tls;
    let host = ProviderHost::new(opts, 1);
    let result = async {
        let schema = host.schema().await?;
        let ids = match identities {
            true => host.identity_schemas().await?,
            false => std::sync::Arc::default(),
        };
        Ok::<_, crate::provider::ProviderError>((schema, ids))
    }
    .await;
    host.shutdown().await;
    result.with_context(|| format!("failed to read the schema of {address}"))
}

pub(super) async fn run(args: SchemaArgs) -> anyhow::Result<()> {
    let address = address_for_binary(&args.binary, args.address)?;
    let schema = read_binary_schema(&args.binary, &address, !args.insecure_plaintext).await?;
    let json = kraken_codegen::tfjson::provider_schemas_json(&address, &schema);
    let mut out = std::io::stdout().lock();
    if args.pretty {
        serde_json::to_writer_pretty(&mut out, &json)?;
    } else {
        serde_json::to_writer(&mut out, &json)?;
    }
    writeln!(out)?;
    Ok(())
}

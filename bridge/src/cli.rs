//! The `kraken` command line. Each subcommand is a thin shell over the library: parse, call,
//! print. Errors reach `main`, which prints them with their causes and exits non-zero.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand};

use crate::provider::{LaunchOptions, Provider as _, ProviderHost};

#[derive(Debug, Parser)]
#[command(
    name = "kraken",
    version,
    about = "Kraken turns any Terraform provider into a typed Kubernetes API",
    long_about = "Kraken turns any Terraform provider into a typed Kubernetes API.\n\n\
        It launches unmodified provider binaries over the Terraform plugin protocol (5 and 6) \
        and reconciles Kubernetes resources through them."
)]
pub struct Cli {
    /// More log output on stderr (-v: info, -vv: debug, -vvv: trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print a provider binary's schema as JSON, in the shape of `terraform providers schema -json`.
    Schema(SchemaArgs),
}

#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Path to the provider executable (e.g. terraform-provider-random_v3.7.2).
    pub binary: PathBuf,
    /// The provider's source address to key the output by. Defaults to
    /// registry.terraform.io/hashicorp/<type>, with <type> taken from the binary's file name.
    #[arg(long)]
    pub address: Option<String>,
    /// Pretty-print the JSON (the default is one line, as Terraform prints it).
    #[arg(long)]
    pub pretty: bool,
    /// Talk to the provider without TLS (AutoMTLS is on by default).
    #[arg(long)]
    pub insecure_plaintext: bool,
}

impl Cli {
    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Schema(args) => schema(args).await,
        }
    }
}

/// Logs go to stderr so that stdout stays machine-readable.
pub fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The provider type from a binary named `terraform-provider-<type>[_v<version>]`.
pub fn provider_type_from_binary(binary: &std::path::Path) -> Option<String> {
    let name = binary.file_name()?.to_str()?;
    let rest = name.strip_prefix("terraform-provider-")?;
    let ty = rest.split("_v").next().unwrap_or(rest);
    (!ty.is_empty()).then(|| ty.to_string())
}

async fn schema(args: SchemaArgs) -> anyhow::Result<()> {
    let address = match args.address {
        Some(a) => a,
        None => {
            let Some(ty) = provider_type_from_binary(&args.binary) else {
                bail!(
                    "cannot tell the provider type from {:?}; name the binary \
                     terraform-provider-<type> or pass --address",
                    args.binary
                );
            };
            format!(
                "{}/hashicorp/{ty}",
                kraken_registry_fetch::DEFAULT_REGISTRY_HOST
            )
        }
    };
    let mut opts = LaunchOptions::new(&args.binary);
    opts.name = address.clone();
    opts.tls = !args.insecure_plaintext;
    let host = ProviderHost::new(opts, 1);
    let result = host.schema().await;
    host.shutdown().await;
    let schema = result.with_context(|| format!("failed to read the schema of {address}"))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn provider_type_from_binary_names() {
        let t = |s: &str| provider_type_from_binary(std::path::Path::new(s));
        assert_eq!(
            t("/x/terraform-provider-random_v3.7.2").as_deref(),
            Some("random")
        );
        assert_eq!(t("terraform-provider-time").as_deref(), Some("time"));
        assert_eq!(t("/x/provider"), None);
        assert_eq!(t("terraform-provider-"), None);
    }
}

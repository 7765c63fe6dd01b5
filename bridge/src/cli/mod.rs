//! The `kraken` command line. Each subcommand is a thin shell over the library: parse, call,
//! print. Errors reach `main`, which prints them with their causes and exits non-zero.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod activate;
mod codegen;
mod convert;
mod fetch;
pub mod kubectl;
mod operator;
mod plan;
mod rbac_manager;
mod runner;
mod runner_pods;
mod schema;

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
    /// Generate Kubernetes CRDs (one per resource type) from a provider's schema.
    #[command(long_about = CODEGEN_ABOUT)]
    Codegen(CodegenArgs),
    /// Install a provider into the plugin cache, verified, and print its path and hashes.
    #[command(long_about = fetch::FETCH_ABOUT)]
    Fetch(fetch::FetchArgs),
    /// Run the operator: reconcile every generated kind through its provider.
    #[command(long_about = operator::OPERATOR_ABOUT)]
    Operator(Box<operator::OperatorArgs>),
    /// Install the kinds of some resource types of a Provider, and wait until they are served.
    #[command(long_about = activate::ACTIVATE_ABOUT)]
    Activate(activate::ActivateArgs),
    /// The kubectl plugin's commands (show-plan, approve, get), as `kubectl kraken` runs them.
    #[command(long_about = kubectl::KUBECTL_ABOUT)]
    Kubectl(kubectl::KubectlArgs),
    /// Convert a Terraform configuration into Kubernetes manifests.
    #[command(long_about = convert::CONVERT_ABOUT)]
    Convert(convert::ConvertArgs),
    /// Show what applying manifests would do (like terraform plan), applying nothing.
    #[command(long_about = plan::PLAN_ABOUT)]
    Plan(plan::PlanArgs),
    /// Host one provider process away from the operator (started by the operator).
    #[command(long_about = runner::RUNNER_ABOUT)]
    Runner(runner::RunnerArgs),
    /// Grant the operator each installed Provider's groups and the tenant namespaces' Secrets
    /// (the chart runs it beside the operator).
    #[command(long_about = rbac_manager::RBAC_MANAGER_ABOUT)]
    RbacManager(rbac_manager::RbacManagerArgs),
    /// The operator's helper: read a provider's schema and generate CRDs, answering in JSON
    /// (a request on stdin, the CRDs on stdout). Not for people.
    #[command(hide = true)]
    GenerateCrds,
}

const CODEGEN_ABOUT: &str =
    "Generate Kubernetes CRDs (one per resource type) from a provider's schema.

The schema comes from the provider binary itself (--provider) or from a file holding the JSON that
`kraken schema` or `terraform providers schema -json` prints (--schema). Each resource type becomes
a kind in the API group <provider>.tf.kraken.dev (version v1alpha1): random_pet becomes Pet, with
arguments under spec.forProvider and non-sensitive state under status.atProvider.

--out receives one YAML file per CRD, a kustomization.yaml listing them and an index.yaml mapping
Terraform types to kinds. Install them with server-side apply (CRDs of large providers exceed
the size client-side apply can annotate):

    kubectl apply --server-side -k OUT

Every CRD costs the API server memory, so install only what you use: --resources takes glob
patterns over Terraform type names (e.g. 'aws_s3_*,aws_iam_role'). CRDs over --max-crd-bytes have
their descriptions trimmed (never fields); what was trimmed is reported on stderr.";

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["provider", "schema"])))]
pub struct CodegenArgs {
    /// Path to a provider executable to read the schema from.
    #[arg(long, value_name = "BINARY")]
    pub provider: Option<PathBuf>,
    /// A schema JSON file (`kraken schema` or `terraform providers schema -json` output;
    /// gzip-compressed when it ends in .gz).
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// The provider's source address. With --provider it defaults to
    /// registry.terraform.io/hashicorp/<type>; with --schema it picks one provider of the file
    /// (needed only when the file holds several).
    #[arg(long)]
    pub address: Option<String>,
    /// Directory to write the CRDs into (created if missing; stale files it wrote are removed).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Only these resource types: comma-separated glob patterns over Terraform type names.
    #[arg(long, value_delimiter = ',', value_name = "GLOB,...")]
    pub resources: Vec<String>,
    /// Also emit read-only kinds for data sources: group data.<provider>.tf.kraken.dev, kind
    /// Data<Name> (aws_ami → DataAmi), matched by the same --resources patterns.
    #[arg(long)]
    pub data_sources: bool,
    /// Trim descriptions from CRDs larger than this many bytes of JSON.
    #[arg(long, value_name = "BYTES")]
    pub max_crd_bytes: Option<usize>,
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
    /// This process's command line. Started as `kubectl-kraken` (how kubectl runs a plugin),
    /// it is the plugin's: `kubectl-kraken get` is `kraken kubectl get`.
    pub fn from_env() -> Self {
        match Self::try_from_args(std::env::args_os().collect()) {
            Ok(cli) => cli,
            Err(err) => err.exit(),
        }
    }

    /// Parses `args` (argv\[0\] first) as [`Self::from_env`] does.
    pub fn try_from_args(args: Vec<std::ffi::OsString>) -> Result<Self, clap::Error> {
        if kubectl::invoked_as_plugin(args.first().map(std::ffi::OsString::as_os_str)) {
            let plugin = kubectl::PluginCli::try_parse_from(args)?;
            return Ok(Self {
                verbose: plugin.verbose,
                command: Command::Kubectl(plugin.args),
            });
        }
        Self::try_parse_from(args)
    }

    /// What must happen before the async runtime starts its threads: `kraken runner` confines
    /// itself here (Landlock restricts the calling thread and what it starts afterwards).
    pub fn prepare(&mut self) -> anyhow::Result<()> {
        if let Command::Runner(args) = &mut self.command {
            args.enforced = runner::confine(args)?;
        }
        Ok(())
    }

    /// Runs the subcommand; the exit status it ends with (`kraken plan` has three).
    pub async fn run(self) -> anyhow::Result<std::process::ExitCode> {
        let done = match self.command {
            Command::Schema(args) => schema::run(args).await,
            Command::Codegen(args) => codegen::run(args).await,
            Command::Fetch(args) => fetch::run(args).await,
            Command::Operator(args) => operator::run(*args).await,
            Command::Activate(args) => activate::run(args).await,
            Command::Kubectl(args) => return kubectl::run(args).await,
            Command::Plan(args) => return plan::run(args).await,
            Command::Convert(args) => convert::run(args).await,
            Command::GenerateCrds => generate_crds().await,
            Command::Runner(args) => return runner::run(args).await,
            Command::RbacManager(args) => rbac_manager::run(args).await,
        };
        done.map(|()| std::process::ExitCode::SUCCESS)
    }
}

/// `kraken generate-crds`: the operator's child that reads a schema and generates CRDs.
async fn generate_crds() -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut input = Vec::new();
    tokio::io::stdin().read_to_end(&mut input).await?;
    let answer = crate::installer::generate::serve(&input).await?;
    let mut stdout = tokio::io::stdout();
    stdout.write_all(answer.as_bytes()).await?;
    stdout.flush().await?;
    Ok(())
}

/// This process's peak resident memory (VmHWM), where /proc offers it.
pub(super) fn peak_memory_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib / 1024)
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Under the plugin's name the plugin's commands are parsed; under any other, kraken's.
    #[test]
    fn argv0_picks_the_command_line() -> Result<(), clap::Error> {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect();
        let cli = Cli::try_from_args(args(&["/bin/kubectl-kraken", "get", "-A", "-v"]))?;
        assert!(matches!(cli.command, Command::Kubectl(_)), "{cli:?}");
        assert_eq!(cli.verbose, 1);
        let cli = Cli::try_from_args(args(&["kraken", "kubectl", "get", "-n", "x"]))?;
        let Command::Kubectl(k) = cli.command else {
            panic!("not kubectl: {cli:?}");
        };
        assert_eq!(k.global.namespace.as_deref(), Some("x"));
        assert!(Cli::try_from_args(args(&["kraken", "get"])).is_err());
        assert!(Cli::try_from_args(args(&["kubectl-kraken", "schema", "x"])).is_err());
        Ok(())
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

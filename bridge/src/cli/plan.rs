//! `kraken plan -f`: what applying manifests would do, like `terraform plan`, writing nothing.
//! A thin shell over [`crate::managed::preview`]: read the files, build a provider source of
//! its own, plan, print ([`render`]), and exit as `terraform plan -detailed-exitcode` does.

mod render;

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use crate::managed::preview::{Planner, manifests};
use crate::provider::pool::{PoolOptions, ProviderPool};
use crate::provider::resolve::Resolver;
use crate::source::Source;

pub(super) const PLAN_ABOUT: &str =
    "Show what applying manifests would do, like `terraform plan`, without applying anything.

For every object of a Kraken managed kind in the manifests, kraken plan asks the object's
provider, through its ProviderConfig, what applying it would do to the external object: create,
update in place, replace, or nothing. It uses the operator's own steps: the state Secret of an
object that exists, refreshed from the provider; spec.valuesFrom resolved from the cluster (a
ConfigMap, Secret or ProviderConfig of the manifests stands in for one not applied yet; outputs of
an object the manifests create or change are unknown until apply, those of one they adopt or leave
unchanged are its refreshed state); the same change list as
status.plan, with Kubernetes field names, values known only after apply marked, arguments that
force a replacement marked, and sensitive values shown as (sensitive), never printed.

It writes nothing: no objects, no state Secrets, no annotations, and it never asks a provider to
apply. Other kinds (ConfigMaps, Providers, ProviderConfigs...) are listed as not planned (applied
as-is); a kind the cluster does not serve is an error. Provider binaries are found as the operator
finds them, and only the builds the cluster recorded are launched: an installed Provider's package
(its status: source, version and hashes), or one a --plugin-dir lock file pins. A Provider's
package not in --plugin-dir or the plugin cache is fetched into the plugin cache, locked to the
hashes the Provider recorded, from the mirror it was installed from (when this machine has it),
else --provider-mirror, else its registry, as `terraform init` installs what a lock file names.

    kraken plan -f examples/10-resources.yaml
    kraken plan -f manifests/ -n staging --json | jq '.items[] | {name, action}'

Exit status (as terraform plan -detailed-exitcode):
    0  no changes
    1  an error (unreadable manifests, an unknown kind, an object that cannot be planned)
    2  changes (something would be created, updated or replaced)";

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Namespace of the objects that name none; defaults to the kubeconfig context's.
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Kubeconfig to use; defaults to KUBECONFIG, ~/.kube/config, then the in-cluster account.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use instead of its current one.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    #[command(flatten)]
    pub options: PlanOptions,
}

/// What `kraken plan` and `kubectl kraken plan` share (the connection flags aside, which the
/// plugin takes for all its commands).
#[derive(Debug, Args)]
pub struct PlanOptions {
    /// A manifest file or a directory of them (.yaml, .yml, .json; not recursive). Repeatable.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR",
        required = true
    )]
    pub files: Vec<PathBuf>,
    /// Print the plan as JSON (one document) instead of the readable diff.
    #[arg(long)]
    pub json: bool,
    /// No colour, even on a terminal (NO_COLOR in the environment does the same).
    #[arg(long)]
    pub no_color: bool,
    /// Terraform filesystem mirrors to find provider binaries in, as `kraken operator
    /// --plugin-dir`. Repeatable.
    #[arg(
        long = "plugin-dir",
        value_name = "DIR",
        env = "KRAKEN_PLUGIN_DIR",
        value_delimiter = ':'
    )]
    pub plugin_dirs: Vec<PathBuf>,
    /// The plugin cache the operator installs Providers into, as `kraken operator
    /// --plugin-cache` [default: $TF_PLUGIN_CACHE_DIR, else ~/.cache/kraken/plugins].
    #[arg(long, value_name = "DIR", env = "KRAKEN_PLUGIN_CACHE")]
    pub plugin_cache: Option<PathBuf>,
    /// Where to fetch a Provider's package from when the mirror it was installed from is not
    /// on this machine: an https:// network mirror or a directory, as `kraken operator
    /// --provider-mirror` (tried before the registry).
    #[arg(long, value_name = "URL_OR_DIR", env = "KRAKEN_PROVIDER_MIRROR")]
    pub provider_mirror: Option<String>,
    /// Let ProviderConfigs with tls: false be planned, as `kraken operator
    /// --allow-provider-plaintext`.
    #[arg(long)]
    pub allow_provider_plaintext: bool,
    /// Let provider processes inherit this variable, as `kraken operator --provider-env`.
    #[arg(
        long = "provider-env",
        value_name = "NAME",
        env = "KRAKEN_PROVIDER_ENV",
        value_delimiter = ',',
        value_parser = crate::provider::env::parse_pattern
    )]
    pub provider_env: Vec<String>,
    /// How many objects are planned at once.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub concurrency: usize,
}

pub(super) async fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let conn = client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    plan(conn, args.namespace, args.options).await
}

/// Plans with `client`, in `namespace` (else the connection's default), and prints the report.
pub(super) async fn plan(
    (client, default_ns): (kube::Client, String),
    namespace: Option<String>,
    args: PlanOptions,
) -> anyhow::Result<ExitCode> {
    let docs = manifests::read_all(&args.files)?;
    let pool = Arc::new(
        ProviderPool::new(PoolOptions {
            max_concurrency_per_process: crate::core_kinds::provider_config::DEFAULT_MAX_CONCURRENCY
                as usize,
            idle_timeout: Duration::from_secs(3600),
        })
        .with_inherited_env(args.provider_env.clone()),
    );
    let cache = args
        .plugin_cache
        .clone()
        .unwrap_or_else(kraken_registry_fetch::PluginCache::default_root);
    let mut dirs = args.plugin_dirs.clone();
    dirs.push(cache.clone());
    let mut source = Source::new(client.clone(), pool.clone(), Resolver::new(dirs));
    source.allow_plaintext = args.allow_provider_plaintext;
    source.fetch = Some(Arc::new(Fetch {
        cache,
        mirror: args.provider_mirror.clone(),
    }));
    // What the cluster installed pins what may run, as for the operator: listed once.
    match kube::Api::<crate::core_kinds::Provider>::all(client.clone())
        .list(&Default::default())
        .await
    {
        Ok(list) => source.use_providers(list.items),
        Err(e) => {
            eprintln!(
                "warning: cannot list the cluster's Providers ({e}): only packages a --plugin-dir \
                 lock file pins can be planned with"
            );
            source.use_providers(Vec::new());
        }
    }
    let planner = Planner {
        client,
        source: Arc::new(source),
        namespace: namespace.unwrap_or(default_ns),
        concurrency: args.concurrency.max(1),
    };
    let report = planner.plan(docs).await;
    pool.shutdown_all().await;
    let report = report.context("cannot ask the cluster which kinds it serves")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        let color = !args.no_color
            && std::env::var_os("NO_COLOR").is_none()
            && std::io::stdout().is_terminal();
        print!("{}", render::text(&report, color));
    }
    Ok(if report.has_failures() {
        ExitCode::from(1)
    } else if report.has_changes() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// Fetches the package a Provider recorded into `kraken plan`'s plugin cache.
struct Fetch {
    cache: PathBuf,
    mirror: Option<String>,
}

#[async_trait::async_trait]
impl crate::source::FetchInstalled for Fetch {
    async fn fetch(&self, provider: &crate::core_kinds::Provider) -> Result<(), String> {
        crate::installer::package::fetch_recorded(
            provider,
            &self.cache,
            self.mirror.as_deref(),
            &[],
        )
        .await
        .map(drop)
    }
}

/// The API client for `kubeconfig` (else the usual places) at `context` (else the current
/// one), and the namespace that context names.
async fn client(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> anyhow::Result<(kube::Client, String)> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("failed to read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .with_context(|| format!("invalid kubeconfig {}", path.display()))?
        }
        (None, Some(name)) => kube::Config::from_kubeconfig(&options)
            .await
            .with_context(|| format!("no kubeconfig context {name}"))?,
        (None, None) => kube::Config::infer().await.context(
            "no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config) and not running in a cluster",
        )?,
    };
    let namespace = config.default_namespace.clone();
    let client = kube::Client::try_from(config).context("failed to create a Kubernetes client")?;
    Ok((client, namespace))
}

//! `kraken operator`: run the controllers.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

pub const OPERATOR_ABOUT: &str =
    "Run the operator: reconcile every generated kind through its provider.

Every CRD in a group <provider>.tf.kraken.dev carrying the tf.kraken.dev/resource-type annotation
(what `kraken codegen` emits) gets a controller, including CRDs installed while the operator runs.
A resource names a ProviderConfig (core.kraken.dev/v1alpha1) in its namespace. The ProviderConfig
either refers to a Provider (providerRef) or names a source address that is looked up in the
--plugin-dir mirrors and the plugin cache.

A Provider (core.kraken.dev/v1alpha1, cluster-scoped) installs a provider at runtime: the operator
fetches and verifies its package into --plugin-cache (from spec.mirror, else --provider-mirror,
else the provider's registry), reads its schema, and installs CRDs for the resource types in
spec.resources; their controllers start as soon as the CRDs are Established.

The full Terraform state of each resource lives in an owned Secret <kind>-<name>-tfstate; status
shows the non-sensitive part. Creates are fenced, so a crash mid-create never makes a second
object. See docs/operator.md for conditions, Events, annotations and policies.";

#[derive(Debug, Args)]
pub struct OperatorArgs {
    /// Kubeconfig to use; defaults to KUBECONFIG, ~/.kube/config, then the in-cluster account.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Terraform filesystem mirrors to find provider binaries in (unpacked layout
    /// HOST/NAMESPACE/TYPE/VERSION/OS_ARCH/). Repeatable.
    #[arg(
        long = "plugin-dir",
        value_name = "DIR",
        env = "KRAKEN_PLUGIN_DIR",
        value_delimiter = ':'
    )]
    pub plugin_dirs: Vec<PathBuf>,
    /// Plugin cache that Providers are installed into (Terraform's layout); also searched for
    /// ProviderConfigs that name a source [default: $TF_PLUGIN_CACHE_DIR, else
    /// ~/.cache/kraken/plugins].
    #[arg(long, value_name = "DIR", env = "KRAKEN_PLUGIN_CACHE")]
    pub plugin_cache: Option<PathBuf>,
    /// Mirror for Providers that name none: an https:// network mirror, or a directory in
    /// Terraform's filesystem mirror layout. Without it, Providers install from their registry.
    #[arg(long, value_name = "URL_OR_DIR", env = "KRAKEN_PROVIDER_MIRROR")]
    pub provider_mirror: Option<String>,
    /// Extra PEM root CA to trust for registries and mirrors (repeatable).
    #[arg(
        long,
        value_name = "PEM",
        env = "KRAKEN_CA_CERT",
        value_delimiter = ':'
    )]
    pub ca_cert: Vec<PathBuf>,
    /// Address for /metrics, /healthz and /readyz. Loopback by default: the metrics name every
    /// resource; expose them deliberately (0.0.0.0:8080) where a scraper needs them.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub metrics_addr: SocketAddr,
    /// Also serve /healthz and /readyz (only) here, e.g. 0.0.0.0:8081 for the kubelet's
    /// probes while /metrics stays on loopback.
    #[arg(long, value_name = "ADDR")]
    pub health_addr: Option<SocketAddr>,
    /// Run without leader election (only safe with a single replica).
    #[arg(long)]
    pub no_leader_elect: bool,
    /// Namespace of the leader-election Lease; defaults to $POD_NAMESPACE, else "default".
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = "default",
        value_name = "NS"
    )]
    pub lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "kraken-operator", value_name = "NAME")]
    pub lease_name: String,
    /// How long a leader's Lease lasts without renewal: a standby takes over at most this long
    /// after the leader dies. The leader renews every 2/15 of it and stops writing (its writes
    /// are fenced) when it could not renew for 2/3 of it, before anyone else may take over.
    #[arg(long, default_value = "10s", value_parser = parse_lease_duration, value_name = "DURATION")]
    pub lease_duration: std::time::Duration,
    /// `auto`: every replica reconciles its share of the managed resources — a consistent hash
    /// of each object's UID over the live replicas, each holding a membership Lease
    /// (`<lease-name>-member-<identity>`) — and the leader runs the rest (Providers,
    /// ProviderConfigs, ConfigExports, EC2Instances). `off`: the leader runs everything and
    /// other replicas stand by. See docs/operations.md, "Scale-out".
    #[arg(long, value_enum, default_value_t = Shards::Off, value_name = "MODE")]
    pub shards: Shards,
    /// How many resources are reconciled at once, per kind (and how many DependencyRequests
    /// and ConfigExports are resolved at once).
    #[arg(long, default_value_t = 64)]
    pub concurrency: u16,
    /// How many requests to the API server may be in flight at once (watches aside); each
    /// needs its own connection, kept open afterwards. 0: no limit.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub api_concurrency: usize,
    /// Shut a provider process down after this long without requests (Go duration).
    #[arg(long, default_value = "10m", value_parser = parse_duration, value_name = "DURATION")]
    pub provider_idle_timeout: std::time::Duration,
    /// Let provider processes inherit this variable of the operator's environment (a trailing
    /// `*` matches a prefix: `AWS_*`). Repeatable. Without it a provider gets only PATH, the
    /// proxy and CA-bundle variables, a private HOME and TMPDIR, and what its ProviderConfig
    /// configures: never the operator's credentials. Each opt-in lends the operator's
    /// variables to every namespace's providers; see docs/security.md.
    #[arg(
        long = "provider-env",
        value_name = "NAME",
        env = "KRAKEN_PROVIDER_ENV",
        value_delimiter = ',',
        value_parser = crate::provider::env::parse_pattern
    )]
    pub provider_env: Vec<String>,
    /// GOGC for provider processes (Go's garbage collector target; Terraform's providers are
    /// Go programs). 50 keeps a long-lived provider's heap smaller than Go's default 100 at a
    /// little more GC CPU: hashicorp/aws peaked 16 MiB lower at the same speed in the AWS
    /// benchmark. 0 leaves Go's default; `--provider-env GOGC` passes the operator's own value.
    #[arg(long, default_value_t = 50, value_name = "PERCENT")]
    pub provider_gogc: u32,
    /// Provider processes one namespace may run at once (one per ProviderConfig in use and
    /// provider version). A ProviderConfig past it reports ProviderUnavailable, naming the
    /// limit, until another goes idle or is deleted.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub max_providers_per_namespace: usize,
    /// Let ProviderConfigs set tls: false (talk to their provider without mutual TLS). Off: such
    /// a ProviderConfig is refused, since any namespace user could otherwise weaken the
    /// channel that carries their credentials.
    #[arg(long)]
    pub allow_provider_plaintext: bool,
    /// Where provider processes run unless their ProviderConfig asks for more confinement:
    /// local (each in a `kraken runner` confined with Landlock, reached over mutual TLS: it
    /// cannot read the operator's token, kubeconfig, files or environment), pods (a runner
    /// Deployment per ProviderConfig in its namespace, shared by every replica; needs
    /// --runner-image) or inProcess (a child of the operator with the operator's files and
    /// network: for a single-user install and the demo). A ProviderConfig's spec.runner.placement may ask for more, never less.
    #[arg(long, value_enum, default_value = "local", value_name = "PLACEMENT")]
    pub runner_placement: RunnerPlacement,
    /// A path local runners' providers may also read, e.g. a CA bundle outside /etc/ssl.
    /// Repeatable.
    #[arg(long, value_name = "PATH")]
    pub runner_allow_read: Vec<PathBuf>,
    /// A path local runners' providers may also write beneath. Repeatable. Every namespace's
    /// providers may then write there.
    #[arg(long, value_name = "PATH")]
    pub runner_allow_write: Vec<PathBuf>,
    #[command(flatten)]
    pub runner_pods: super::runner_pods::RunnerPodArgs,
    /// How long a provider may take to apply a change (ApplyResourceChange) before it is
    /// stopped, killed and replaced, and the resource reports ProviderTimeout (Go duration).
    #[arg(long, default_value = "60m", value_parser = parse_duration, value_name = "DURATION")]
    pub provider_apply_timeout: std::time::Duration,
    /// The same for every other provider request (plan, read, import, configure...).
    #[arg(long, default_value = "10m", value_parser = parse_duration, value_name = "DURATION")]
    pub provider_rpc_timeout: std::time::Duration,
    /// Let EC2Instances without credentials of their own (no AwsConfig, or one without
    /// credentials) use the operator's: the AWS SDK's default chain (environment, web
    /// identity, instance metadata). Off: such a resource reports CredentialsRequired.
    #[arg(long)]
    pub aws_ambient_credentials: bool,
    /// An endpoint AwsConfigs may name: an http(s) URL, or one ending in :* for any port
    /// (http://127.0.0.1:* for a local emulator). Repeatable. Without any, AwsConfigs may
    /// not set an endpoint (AWS's own are used).
    #[arg(
        long = "aws-endpoint",
        value_name = "URL",
        env = "KRAKEN_AWS_ENDPOINTS",
        value_delimiter = ',',
        value_parser = crate::ec2::policy::parse_endpoint
    )]
    pub aws_endpoints: Vec<String>,
    /// Let spec.importIds adopt instances that do not carry the tag
    /// kraken.dev/adoptable-by=<namespace>/<name>.
    #[arg(long)]
    pub aws_adopt_untagged: bool,
}

/// `--runner-*` as the source applies them: local runners are this binary's `runner`.
fn placements(args: &OperatorArgs) -> anyhow::Result<crate::source::placement::Placements> {
    use crate::core_kinds::provider_config::Placement;
    let (read, write) = (&args.runner_allow_read, &args.runner_allow_write);
    let default = match args.runner_placement {
        RunnerPlacement::InProcess => Placement::InProcess,
        RunnerPlacement::Local => Placement::Local,
        RunnerPlacement::Pods => Placement::Pods,
    };
    let api_server = std::env::var("KUBERNETES_SERVICE_HOST")
        .ok()
        .and_then(|h| h.parse::<std::net::IpAddr>().ok())
        .map(|ip| {
            if ip.is_ipv4() {
                format!("{ip}/32")
            } else {
                format!("{ip}/128")
            }
        });
    let pods = args.runner_pods.settings(
        &args.lease_namespace,
        args.provider_mirror.as_deref(),
        api_server,
        (read, write),
    )?;
    anyhow::ensure!(
        default != Placement::Pods || pods.is_some(),
        "--runner-placement pods needs --runner-image (the image runner Pods run)"
    );
    let program = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find this kraken binary to start runners: {e}"))?;
    let mut args: Vec<std::ffi::OsString> = vec!["runner".into(), "--sandbox=landlock".into()];
    for (flag, paths) in [("--allow-read", read), ("--allow-write", write)] {
        for path in paths {
            args.push(flag.into());
            args.push(path.clone().into_os_string());
        }
    }
    Ok(crate::source::placement::Placements {
        default,
        local: Some(crate::provider::Via { program, args }),
        pods,
    })
}

/// A lease of at least 3 s: its renew period (2/15) must leave room for an API round trip.
fn parse_lease_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(s)?;
    if d < std::time::Duration::from_secs(3) {
        return Err(format!("a lease of {s} is too short: at least 3s"));
    }
    Ok(d)
}

pub(super) fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    crate::kit::time::parse_duration(s)
        .ok_or_else(|| format!("invalid duration {s:?} (e.g. 10m, 90s, 1h30m)"))
}

/// `--runner-placement`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RunnerPlacement {
    /// Children of the operator: its files, token, environment and network.
    #[value(name = "inProcess")]
    InProcess,
    /// `kraken runner` processes on this machine, each in a Landlock sandbox.
    Local,
    /// A runner Deployment per ProviderConfig, in its namespace (needs --runner-image).
    Pods,
}

/// `--shards`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shards {
    /// One leader runs every controller.
    Off,
    /// The live replicas split the managed resources between them.
    Auto,
}

pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !(args.shards == Shards::Auto && args.no_leader_elect),
        "--shards auto needs leader election (the leader runs what is not sharded, and the \
         shard ring's Leases fence each replica's writes): drop --no-leader-elect"
    );
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "kraken".into());
    let placements = placements(&args)?;
    let opts = crate::operator::Options {
        kubeconfig: args.kubeconfig,
        plugin_dirs: args.plugin_dirs,
        metrics_addr: args.metrics_addr,
        health_addr: args.health_addr,
        leader_elect: !args.no_leader_elect,
        lease_namespace: args.lease_namespace,
        lease_name: args.lease_name,
        lease_duration: args.lease_duration,
        shards: args.shards == Shards::Auto,
        identity: format!("{host}-{}", std::process::id()),
        concurrency: args.concurrency.max(1),
        api_concurrency: args.api_concurrency,
        provider_idle_timeout: args.provider_idle_timeout,
        provider_env: args.provider_env,
        provider_gogc: args.provider_gogc,
        allow_provider_plaintext: args.allow_provider_plaintext,
        placements,
        runner_client_secret: args.runner_pods.runner_client_secret.clone(),
        max_providers_per_namespace: args.max_providers_per_namespace.max(1),
        provider_deadlines: crate::provider::Deadlines {
            apply: args.provider_apply_timeout,
            other: args.provider_rpc_timeout,
            ..crate::provider::Deadlines::default()
        },
        aws: crate::ec2::policy::AwsPolicy {
            ambient_credentials: args.aws_ambient_credentials,
            endpoints: args.aws_endpoints,
            adopt_untagged: args.aws_adopt_untagged,
        },
        provider_max_concurrency: crate::core_kinds::provider_config::DEFAULT_MAX_CONCURRENCY
            as usize,
        install: crate::installer::InstallSettings {
            cache_dir: args
                .plugin_cache
                .unwrap_or_else(kraken_registry_fetch::PluginCache::default_root),
            default_mirror: args.provider_mirror,
            ca_certs: args.ca_cert,
            // Schemas are read in a child (`kraken generate-crds`): their memory is its own.
            generator: std::env::current_exe().ok(),
        },
    };
    crate::operator::run(opts).await
}

//! Wiring of `kraken operator`: the HTTP endpoints, the provider pool, leader election, and a
//! supervisor that starts one controller per generated kind as its CRD becomes Established.
//!
//! Losing the Lease (say the API server was unreachable for longer than the lease) stops the
//! controllers — they finish the provider calls already in flight, an apply is never cut off —
//! and the operator campaigns again instead of exiting: a restart would gain nothing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use tokio::sync::watch;

use super::http::{self, HttpState};
use super::leader::LeaderElection;
use super::shard::Membership;
use super::supervise::supervise_kinds;
use kraken_installer::provider_config::ProviderConfigs;
use kraken_installer::{InstallSettings, Installer};
use kraken_kit::Kit;
use kraken_kit::metrics::Metrics;
use kraken_managed::Context;
use kraken_provider::pool::{PoolOptions, ProviderPool};
use kraken_provider::resolve::Resolver;
use kraken_source::Source;

/// What `kraken operator` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub kubeconfig: Option<PathBuf>,
    pub plugin_dirs: Vec<PathBuf>,
    pub metrics_addr: SocketAddr,
    /// A second listener for `/healthz` and `/readyz` only (`--health-addr`), so the probes
    /// can listen on the pod's address while `/metrics` stays on loopback.
    pub health_addr: Option<SocketAddr>,
    pub leader_elect: bool,
    pub lease_namespace: String,
    pub lease_name: String,
    /// The Lease's duration; the renew deadline and retry period follow from it.
    pub lease_duration: Duration,
    /// `--shards auto`: every replica reconciles its share of the managed resources (and
    /// resolves its consumers' DependencyRequests); the leader runs the rest.
    pub shards: bool,
    pub identity: String,
    pub concurrency: u16,
    /// API-server requests (other than watches) in flight at once (`--api-concurrency`).
    pub api_concurrency: usize,
    pub provider_idle_timeout: Duration,
    /// Variables of the operator's environment providers may inherit (`--provider-env`).
    pub provider_env: Vec<String>,
    /// Provider processes one namespace may have at once (`--max-providers-per-namespace`).
    pub max_providers_per_namespace: usize,
    /// Whether ProviderConfigs may set `tls: false` (`--allow-provider-plaintext`).
    pub allow_provider_plaintext: bool,
    /// Where provider processes run (`--runner-*`).
    pub placements: kraken_source::placement::Placements,
    /// The Secret (in `lease_namespace`) of the client certificate `pods` runners accept.
    pub runner_client_secret: String,
    /// How long provider RPCs may take (`--provider-apply-timeout`, `--provider-rpc-timeout`).
    pub provider_deadlines: kraken_provider::Deadlines,
    /// What EC2Instances may do with the operator's standing (`--aws-*`).
    pub aws: kraken_ec2::policy::AwsPolicy,
    pub provider_max_concurrency: usize,
    /// GOGC for provider processes (`--provider-gogc`; 0: Go's default).
    pub provider_gogc: u32,
    /// How `Provider`s are installed: plugin cache, default mirror, extra CAs.
    pub install: InstallSettings,
}

pub async fn run(opts: Options) -> anyhow::Result<()> {
    // The Leases (leadership, shard membership) renew over a client of their own: queued
    // behind a burst of requests waiting for `--api-concurrency`'s permits, a renewal could
    // miss its deadline and hand the work over for nothing.
    let leases = client(opts.kubeconfig.as_deref(), 0).await?;
    let client = client(opts.kubeconfig.as_deref(), opts.api_concurrency).await?;
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(kraken_kit::readiness::Readiness::default());
    let state = HttpState {
        metrics: metrics.clone(),
        ready: ready.clone(),
        with_metrics: true,
    };
    let (addr, _server) = http::serve(opts.metrics_addr, state.clone()).await?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    let _health = match opts.health_addr {
        Some(health) => {
            let only_health = HttpState {
                with_metrics: false,
                ..state
            };
            let (addr, task) = http::serve(health, only_health).await?;
            tracing::info!(%addr, "serving /healthz and /readyz");
            Some(task)
        }
        None => None,
    };

    let pool = Arc::new(
        ProviderPool::new(PoolOptions {
            max_concurrency_per_process: opts.provider_max_concurrency,
            idle_timeout: opts.provider_idle_timeout,
        })
        .with_rpc_observer(metrics.clone())
        .with_inherited_env(opts.provider_env.clone())
        .with_default_env(match opts.provider_gogc {
            0 => Vec::new(),
            gogc => vec![("GOGC".to_owned(), gogc.to_string())],
        })
        .with_deadlines(opts.provider_deadlines)
        .with_namespace_limit(opts.max_providers_per_namespace),
    );
    // Looked at as often as the idle timeout asks, at most every 30 s.
    let reap_every =
        (opts.provider_idle_timeout / 2).clamp(Duration::from_secs(1), Duration::from_secs(30));
    let _reaper = pool.clone().spawn_reaper(reap_every);
    let _gauges = spawn_pool_gauges(pool.clone(), metrics.clone());
    let plan_key =
        kraken_managed::plan_key::PlanKey::load_or_create(&client, &opts.lease_namespace)
            .await
            .context("the key of plan ids")?;
    kraken_managed::seal::seal_existing(&client, &opts.lease_namespace, &plan_key)
        .await
        .context("sealing the state Secrets written before states were sealed")?;
    let opts = with_runner_identity(opts, &client).await?;
    let wiring = wire(&opts, &client, (&metrics, &ready), &pool, plan_key);
    if opts.shards {
        run_sharded(&opts, &leases, &wiring, &ready).await;
    } else {
        let table = controllers(&wiring, false);
        lead(&opts, &leases, &wiring, &table, Some(&ready)).await;
    }
    let mut waiting = wiring.kit.events.flush(Duration::from_secs(5)).await;
    if !Arc::ptr_eq(&wiring.kit, &wiring.managed.kit) {
        waiting += wiring
            .managed
            .kit
            .events
            .flush(Duration::from_secs(5))
            .await;
    }
    if waiting > 0 {
        tracing::warn!("{waiting} events were not published before shutdown");
    }
    tracing::info!("shutting down provider processes");
    pool.shutdown_all().await;
    Ok(())
}

/// `opts` with the client certificate `pods` runners accept, when the placement is offered.
async fn with_runner_identity(mut opts: Options, client: &kube::Client) -> anyhow::Result<Options> {
    if let Some(settings) = opts.placements.pods.as_mut() {
        let identity = kraken_source::pods::operator_identity(
            client,
            &opts.lease_namespace,
            &opts.runner_client_secret,
        )
        .await
        .map_err(anyhow::Error::msg)
        .context("the client certificate of pods runners")?;
        Arc::make_mut(settings).identity = Some(Arc::new(identity));
    }
    Ok(opts)
}

/// Builds what the controllers share: the kit, the provider source, the hub's index.
fn wire(
    opts: &Options,
    client: &kube::Client,
    (metrics, ready): (&Arc<Metrics>, &Arc<kraken_kit::readiness::Readiness>),
    pool: &Arc<ProviderPool>,
    plan_key: kraken_managed::plan_key::PlanKey,
) -> Wiring {
    let mut dirs = opts.plugin_dirs.clone();
    dirs.push(opts.install.cache_dir.clone());
    let fence = if opts.leader_elect {
        kraken_kit::fence::Fence::leased()
    } else {
        kraken_kit::fence::Fence::open()
    };
    let kit = Arc::new(
        Kit::new(client.clone(), metrics.clone())
            .with_fence(fence)
            .with_readiness(ready.clone()),
    );
    let mut source = Source::new(client.clone(), pool.clone(), Resolver::new(dirs));
    source.allow_plaintext = opts.allow_provider_plaintext;
    source.placements = opts.placements.clone();
    match opts.placements.default {
        kraken_core_kinds::provider_config::Placement::InProcess => tracing::warn!(
            "providers run inside the operator (--runner-placement inProcess): they can read \
             its ServiceAccount token, kubeconfig, files and environment; use local for any \
             cluster with more than one user"
        ),
        placement => tracing::info!(%placement, "providers run in kraken runner sandboxes"),
    }
    source.schema_cache = Some(kraken_installer::schema_cache_dir(&opts.install));
    // What a ProviderConfig may launch is what the installed Providers recorded: one watch of
    // them, no request per reconcile.
    tokio::spawn(source.watch_providers());
    let source = Arc::new(source);
    let hub_index = Arc::new(kraken_hub::Index::default());
    // Sharded, the managed resources' writes are fenced by this replica's membership in the
    // ring, the leader's controllers' by the leader Lease.
    let managed_kit = if opts.shards {
        Arc::new(
            Kit::new(client.clone(), metrics.clone())
                .with_fence(kraken_kit::fence::Fence::leased())
                .with_readiness(ready.clone()),
        )
    } else {
        kit.clone()
    };
    let managed = Arc::new(Context {
        kit: managed_kit,
        source: source.clone(),
        hub_index: hub_index.clone(),
        plan_key,
        floors: kraken_managed::floor::Floors::watch(client.clone()),
        share: kraken_managed::share::Share::all(),
    });
    let provider_configs = Arc::new(ProviderConfigs {
        kit: kit.clone(),
        source,
    });
    let installer = Arc::new(Installer::new(kit.clone(), opts.install.clone()));
    Wiring {
        kit,
        provider_configs,
        installer,
        managed,
        hub_index,
        concurrency: opts.concurrency,
        aws: opts.aws.clone(),
    }
}

/// Campaigns for the Lease (when leader election is on), runs the controllers while leading,
/// stops them when leadership is lost and campaigns again, until shutdown is requested.
async fn lead(
    opts: &Options,
    leases: &kube::Client,
    wiring: &Wiring,
    table: &[(&'static str, Start)],
    ready: Option<&kraken_kit::readiness::Readiness>,
) {
    let election = LeaderElection::new(
        leases.clone(),
        &opts.lease_namespace,
        &opts.lease_name,
        opts.identity.clone(),
    )
    .with_lease_duration(opts.lease_duration)
    .with_fence(wiring.kit.fence.clone());
    let metrics = &wiring.kit.metrics;
    let mut shutdown = Box::pin(shutdown_signal());
    loop {
        // A standby is ready: it serves its endpoints and waits for the Lease.
        if let Some(ready) = ready {
            ready.set_started();
        }
        let mut leadership = if opts.leader_elect {
            tracing::info!(lease = %opts.lease_name, identity = %opts.identity, "campaigning for leadership");
            tokio::select! {
                l = election.acquire() => Some(l),
                () = &mut shutdown => break,
            }
        } else {
            None
        };
        metrics.set_leader(true);
        if let Some(ready) = ready {
            ready.set_leading(true);
        }
        // Another replica may have published while this one was not leading.
        wiring.hub_index.forget_published();
        tracing::info!("leading: starting controllers");
        let (stop_tx, stop_rx) = watch::channel(false);
        let running: Vec<(&str, tokio::task::JoinHandle<()>)> = table
            .iter()
            .map(|(name, start)| (*name, tokio::spawn(start(stop_rx.clone()))))
            .collect();
        let lost = async {
            match leadership.as_mut() {
                Some(l) => l.lost().await,
                None => std::future::pending().await,
            }
        };
        let exiting = tokio::select! {
            () = lost => {
                tracing::warn!("lost leadership: stopping controllers, then campaigning again");
                false
            }
            () = &mut shutdown => true,
        };
        let _ = stop_tx.send(true);
        for (name, task) in running {
            if let Err(err) = task.await {
                tracing::error!("{name} failed: {err}");
            }
        }
        metrics.set_leader(false);
        if let Some(ready) = ready {
            ready.set_leading(false);
        }
        if exiting {
            if let Some(l) = leadership {
                l.release().await;
            }
            break;
        }
    }
}

/// What the controllers are built from.
struct Wiring {
    kit: Arc<Kit>,
    provider_configs: Arc<ProviderConfigs>,
    installer: Arc<Installer>,
    managed: Arc<Context>,
    hub_index: Arc<kraken_hub::Index>,
    concurrency: u16,
    aws: kraken_ec2::policy::AwsPolicy,
}

/// Starts a controller that runs until its receiver turns `true`.
type Start = Box<dyn Fn(watch::Receiver<bool>) -> BoxFuture<'static, ()> + Send + Sync>;

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// The controllers a leader runs, by name: each started when leadership is won, stopped (in
/// flight work finished) when it is lost.
fn controllers(w: &Wiring, sharded: bool) -> Vec<(&'static str, Start)> {
    let concurrency = w.concurrency;
    let provider_configs = w.provider_configs.clone();
    let installer = w.installer.clone();
    let hub = Arc::new(hub(w, &w.kit));
    let exporter = Arc::new(kraken_hub::export::Exporter {
        kit: w.kit.clone(),
        index: w.hub_index.clone(),
    });
    let ec2_ctx = Arc::new(kraken_ec2::controller::Context {
        kit: w.kit.clone(),
        hub_index: w.hub_index.clone(),
        policy: w.aws.clone(),
    });
    let aws_configs = Arc::new(kraken_ec2::config::AwsConfigs { kit: w.kit.clone() });
    let ec2 = Arc::new(kraken_ec2::controller::Ec2Controller::new(ec2_ctx));
    let managed = w.managed.clone();
    let mut table: Vec<(&'static str, Start)> = vec![
        (
            "ProviderConfig controller",
            Box::new(move |stop| {
                kraken_installer::provider_config::run(provider_configs.clone(), stopped(stop))
                    .boxed()
            }),
        ),
        (
            "Provider controller",
            Box::new(move |stop| kraken_installer::run(installer.clone(), stopped(stop)).boxed()),
        ),
        (
            "ConfigExport controller",
            Box::new(move |stop| {
                kraken_hub::export::run(exporter.clone(), concurrency, stopped(stop)).boxed()
            }),
        ),
        (
            "EC2Instance controller",
            Box::new(move |stop| {
                kraken_ec2::controller::run(ec2.clone(), concurrency, stopped(stop)).boxed()
            }),
        ),
        (
            "AwsConfig controller",
            Box::new(move |stop| {
                kraken_ec2::config::run(aws_configs.clone(), stopped(stop)).boxed()
            }),
        ),
    ];
    // Sharded, every replica runs these on its share (see `run_sharded`).
    if !sharded {
        table.push((
            "dependency hub",
            Box::new(move |stop| {
                kraken_hub::controller::run(hub.clone(), concurrency, stopped(stop)).boxed()
            }),
        ));
        table.push((
            "managed-resource supervisor",
            Box::new(move |stop| supervise_kinds(managed.clone(), concurrency, stop, None).boxed()),
        ));
    }
    table
}

/// The dependency hub over `kit`: its fence is the term the hub's writes pass under (the
/// leader's, or sharded, this replica's membership).
fn hub(w: &Wiring, kit: &Arc<Kit>) -> kraken_hub::controller::Hub {
    kraken_hub::controller::Hub::new(kit.clone(), w.hub_index.clone())
}

/// `--shards auto`: joins the shard ring and runs the managed resources and the hub on this
/// replica's share, while campaigning for the leader Lease for everything else; on shutdown,
/// stops the share's work, then leaves the ring so the others take over at once.
async fn run_sharded(
    opts: &Options,
    leases: &kube::Client,
    wiring: &Wiring,
    ready: &kraken_kit::readiness::Readiness,
) {
    let membership = Membership::new(
        leases.clone(),
        &opts.lease_namespace,
        &opts.lease_name,
        &opts.identity,
        opts.lease_duration,
    )
    .with_fence(wiring.managed.kit.fence.clone())
    .with_metrics(wiring.kit.metrics.clone());
    let (shard, link) = membership.start();
    let (stop_tx, stop) = watch::channel(false);
    let hub = Arc::new(hub(wiring, &wiring.managed.kit).with_shard(link.ownership.clone()));
    let concurrency = wiring.concurrency;
    let hub_task = tokio::spawn(kraken_hub::controller::run(
        hub,
        concurrency,
        stopped(stop.clone()),
    ));
    let kinds = tokio::spawn(supervise_kinds(
        wiring.managed.clone(),
        concurrency,
        stop,
        Some(link),
    ));
    // Every member works; /readyz waits for its caches.
    ready.set_started();
    ready.set_leading(true);
    let table = controllers(wiring, true);
    lead(opts, leases, wiring, &table, None).await;
    let _ = stop_tx.send(true);
    for (name, task) in [
        ("dependency hub", hub_task),
        ("managed-resource supervisor", kinds),
    ] {
        if let Err(err) = task.await {
            tracing::error!("{name} failed: {err}");
        }
    }
    ready.set_leading(false);
    shard.leave(&membership).await;
}

/// A client for `kubeconfig` (else the environment's), with at most `api_concurrency`
/// requests other than watches in flight (0: no limit; see [`kraken_kit::api_limit`]).
pub async fn client(
    kubeconfig: Option<&std::path::Path>,
    api_concurrency: usize,
) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("failed to read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .with_context(|| format!("invalid kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config) and not running in a cluster",
        )?,
    };
    let builder = kube::client::ClientBuilder::try_from(config)
        .context("failed to create a Kubernetes client")?;
    // The limit waits for a permit before it calls the stack below, so it needs a handle to
    // that stack it can clone: a buffer in front of it.
    let buffer = tower::buffer::BufferLayer::<hyper::Request<kube::client::Body>>::new(1024);
    Ok(builder
        .with_layer(&buffer)
        .with_layer(&kraken_kit::api_limit::ApiLimitLayer::new(api_concurrency))
        .build())
}

/// SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
    tracing::info!("shutdown requested");
}

fn spawn_pool_gauges(
    pool: Arc<ProviderPool>,
    metrics: Arc<Metrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            let stats = pool.stats();
            metrics.set_provider_processes(i64::try_from(stats.processes).unwrap_or(i64::MAX));
            metrics.set_provider_launches(i64::try_from(stats.launches).unwrap_or(i64::MAX));
            metrics.set_provider_memory(&pool.memory().await);
            metrics.set_provider_restarts(&pool.restarts());
        }
    })
}

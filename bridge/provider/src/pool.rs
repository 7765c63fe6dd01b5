//! The provider pool: one long-lived, configured [`ProviderHost`] per (provider address, version,
//! ProviderConfig: its UID, generation and a digest of its resolved configuration), shared by
//! every resource that uses it.
//!
//! Reconcilers ask [`ProviderPool::get`] for a host on every pass instead of keeping one, so the
//! pool sees each use and can:
//!
//! - launch and `Configure` a process exactly once per key, however many reconciles race for it
//!   (a per-key [`OnceCell`]);
//! - roll a ProviderConfig change: a newer generation of the same ProviderConfig, the same one
//!   with a different resolved configuration (a rotated credentials Secret), or a ProviderConfig
//!   deleted and created again under the same name (another UID: maybe another account) retires
//!   the older host, which is shut down gracefully once the last caller holding it lets go — an
//!   apply in flight is never cut off by a config change;
//! - reap processes nobody has asked for within `idle_timeout`.
//!
//! Concurrency per process is bounded by the host's own semaphore. Crash restarts are the host's
//! business (it relaunches and replays `Configure`); the pool keeps the host across them.

mod rss;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::host::HostError;
use super::observe::{Observer, RpcObserver};
use super::{
    DiagnosticsExt as _, LaunchOptions, Plugin as _, ProviderError, ProviderHost, ProviderSchema,
    REPORTED_TERRAFORM_VERSION,
};
use kraken_value::Value;

/// How often a retired host checks whether its last user has let go. Short, because a retired
/// process is pure waste once it is free, and the check is two atomic loads.
const RETIRE_POLL: Duration = Duration::from_millis(50);

/// Identifies one pooled process: a provider build configured by one ProviderConfig as it
/// resolved at one moment.
///
/// The parts are explicit (rather than folded into an opaque string) so the pool can tell
/// "a newer version of the same ProviderConfig" — which replaces the old process — from
/// "a different ProviderConfig", which lives alongside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    /// Provider source address, e.g. `registry.terraform.io/hashicorp/random`.
    pub address: String,
    pub version: String,
    /// The ProviderConfig, e.g. `team-a/default`.
    pub config_name: String,
    /// The ProviderConfig's `metadata.uid`: a ProviderConfig deleted and created again under the
    /// same name is another one.
    pub uid: String,
    /// The ProviderConfig's `metadata.generation`.
    pub generation: i64,
    /// A digest of the configuration the process is configured with (Secret values included),
    /// so a rotated Secret, which changes no generation, starts a fresh process.
    pub digest: String,
}

impl PoolKey {
    fn same_config(&self, other: &PoolKey) -> bool {
        self.address == other.address
            && self.version == other.version
            && self.config_name == other.config_name
    }

    /// Whether `self` is an older configuration of `newer`'s ProviderConfig: an older
    /// generation of the same object, another configuration at the same generation, or another
    /// object of the same name.
    fn superseded_by(&self, newer: &PoolKey) -> bool {
        self.same_config(newer)
            && self != newer
            && (self.uid != newer.uid || self.generation <= newer.generation)
    }
}

impl fmt::Display for PoolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} ({}@{})",
            self.address, self.version, self.config_name, self.generation
        )
    }
}

#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Requests one provider process may serve at once.
    pub max_concurrency_per_process: usize,
    /// A process nobody has asked for in this long is shut down by [`ProviderPool::reap_idle`].
    pub idle_timeout: Duration,
}

impl PoolKey {
    /// The namespace of the ProviderConfig (`team-a` of `team-a/default`).
    fn namespace(&self) -> &str {
        self.config_name.split_once('/').map_or("", |(ns, _)| ns)
    }
}

/// Gauges for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Configured hosts alive in the pool, including retired ones still draining.
    pub processes: usize,
    /// Hosts the pool has launched since it was created (restarts inside a host not counted).
    pub launches: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("could not start provider {key}")]
    Launch {
        key: PoolKey,
        #[source]
        source: Box<HostError>,
    },
    /// The configuration could not be built from the ProviderConfig (e.g. an unknown field).
    #[error("invalid configuration for provider {key}: {message}")]
    Config { key: PoolKey, message: String },
    /// The provider's own verdict on the ProviderConfig; `summary` is its error text.
    #[error("provider {key} rejected its configuration: {summary}")]
    Configure { key: PoolKey, summary: String },
    #[error("provider {key} failed while being configured")]
    Provider {
        key: PoolKey,
        #[source]
        source: Box<ProviderError>,
    },
    /// Asked for a generation older than one already in use: serving it would relaunch the
    /// outdated configuration and retire the current one.
    #[error("ProviderConfig generation {key} is older than generation {current} already in use")]
    Stale { key: PoolKey, current: i64 },
    /// The namespace already runs as many provider processes as the operator allows.
    #[error(
        "namespace {namespace} already runs {limit} provider processes, the most this operator \
         allows per namespace (kraken operator --max-providers-per-namespace); remove unused \
         ProviderConfigs or ask an administrator"
    )]
    NamespaceFull { namespace: String, limit: usize },
}

type Cell = Arc<OnceCell<Arc<ProviderHost>>>;

struct Entry {
    cell: Cell,
    last_used: Instant,
}

impl Entry {
    /// Nobody holds the host or is in the middle of obtaining it: only the pool's references
    /// remain. Checked under the pool lock, so no new holder can appear after the check.
    fn unheld(&self) -> bool {
        Arc::strong_count(&self.cell) == 1
            && self.cell.get().is_none_or(|h| Arc::strong_count(h) == 1)
    }
}

#[derive(Default)]
struct State {
    entries: HashMap<PoolKey, Entry>,
    /// Retired hosts still draining; weak so the retire task alone decides when they go.
    retiring: Vec<Weak<ProviderHost>>,
}

pub struct ProviderPool {
    options: PoolOptions,
    state: Mutex<State>,
    launches: AtomicU64,
    rpc_observer: Observer,
    /// `kraken operator --provider-env`: what the processes may inherit.
    inherit_env: Vec<String>,
    /// `kraken operator --provider-gogc`: set unless inherited.
    default_env: Vec<(String, String)>,
    /// `kraken operator --provider-*-timeout`: how long their RPCs may take.
    deadlines: Option<super::Deadlines>,
    /// `kraken operator --max-providers-per-namespace`.
    per_namespace: Option<usize>,
}

impl ProviderPool {
    pub fn new(options: PoolOptions) -> Self {
        Self {
            options,
            state: Mutex::new(State::default()),
            launches: AtomicU64::new(0),
            rpc_observer: None,
            inherit_env: Vec::new(),
            default_env: Vec::new(),
            deadlines: None,
            per_namespace: None,
        }
    }

    /// Serve at most `limit` configured processes per namespace (one per ProviderConfig and
    /// provider version, so at most `limit` ProviderConfigs in use at once).
    pub fn with_namespace_limit(mut self, limit: usize) -> Self {
        self.per_namespace = Some(limit);
        self
    }

    /// Give every process this pool launches these RPC deadlines.
    pub fn with_deadlines(mut self, deadlines: super::Deadlines) -> Self {
        self.deadlines = Some(deadlines);
        self
    }

    /// Let every process this pool launches inherit the operator's variables matching
    /// `patterns` (names, or prefixes ending in `*`), besides the network settings every
    /// provider gets ([`super::env`]); unless the caller's [`LaunchOptions`] name their own.
    pub fn with_inherited_env(mut self, patterns: Vec<String>) -> Self {
        self.inherit_env = patterns;
        self
    }

    /// Set these variables for every process this pool launches unless it inherits them
    /// (unless the caller's [`LaunchOptions`] name their own).
    pub fn with_default_env(mut self, vars: Vec<(String, String)>) -> Self {
        self.default_env = vars;
        self
    }

    /// Report every RPC of every process this pool launches to `observer` (unless the
    /// caller's [`LaunchOptions`] bring their own).
    pub fn with_rpc_observer(mut self, observer: Arc<dyn RpcObserver>) -> Self {
        self.rpc_observer = Some(observer);
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is a map updated in single statements; a panic elsewhere cannot leave it
        // half-written, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configured host for `key`, launching and configuring it on first use.
    ///
    /// Racing callers for a new key share one launch. A failed launch or `Configure` caches
    /// nothing, so the next call tries again (e.g. after the user fixed the ProviderConfig);
    /// callers that were waiting on the failed launch each try once more, one at a time.
    pub async fn get(
        &self,
        key: &PoolKey,
        launch: LaunchOptions,
        config: &Value,
    ) -> Result<Arc<ProviderHost>, PoolError> {
        self.get_with(key, launch, |_| Ok(config.clone())).await
    }

    /// [`get`](Self::get) for callers whose configuration value depends on the provider's
    /// schema (field names, types): `build` runs once the process is up, only on launch. An
    /// `Err(message)` from `build` is reported as [`PoolError::Config`] and nothing is cached.
    pub async fn get_with<F>(
        &self,
        key: &PoolKey,
        launch: LaunchOptions,
        build: F,
    ) -> Result<Arc<ProviderHost>, PoolError>
    where
        F: Fn(&ProviderSchema) -> Result<Value, String>,
    {
        let (cell, retired) = {
            let mut state = self.state();
            let (cell, retired) =
                checkout(&mut state.entries, key, Instant::now(), self.per_namespace)
                    .map_err(|e| *e)?;
            state.retiring.retain(|w| w.strong_count() > 0);
            state
                .retiring
                .extend(retired.iter().filter_map(|c| c.get().map(Arc::downgrade)));
            (cell, retired)
        };
        for old in retired {
            retire(old);
        }
        let result = cell
            .get_or_try_init(|| self.launch(key, launch, &build))
            .await
            .cloned();
        let mut state = self.state();
        match &result {
            // Launching may take a while; idle time starts when the caller gets the host.
            Ok(_) => {
                if let Some(e) = state.entries.get_mut(key) {
                    e.last_used = Instant::now();
                }
            }
            // Callers still waiting on this cell retry the launch themselves (OnceCell hands
            // init to the next waiter), so only the last one out drops the entry; dropping it
            // earlier would let a retry succeed in a cell the pool no longer tracks.
            Err(_) => {
                let last_out = Arc::strong_count(&cell) == 2;
                if last_out
                    && state
                        .entries
                        .get(key)
                        .is_some_and(|e| Arc::ptr_eq(&e.cell, &cell) && e.cell.get().is_none())
                {
                    state.entries.remove(key);
                }
            }
        }
        result
    }

    /// Launch a host and bring it to the configured state, or shut it down again.
    async fn launch<F>(
        &self,
        key: &PoolKey,
        mut launch: LaunchOptions,
        build: &F,
    ) -> Result<Arc<ProviderHost>, PoolError>
    where
        F: Fn(&ProviderSchema) -> Result<Value, String>,
    {
        if launch.rpc_observer.is_none() {
            launch.rpc_observer = self.rpc_observer.clone();
        }
        if launch.inherit_env.is_empty() {
            launch.inherit_env = self.inherit_env.clone();
        }
        if launch.default_env.is_empty() {
            launch.default_env = self.default_env.clone();
        }
        if let Some(d) = self.deadlines {
            launch.deadlines = d;
        }
        let concurrency = launch
            .max_concurrency
            .unwrap_or(self.options.max_concurrency_per_process);
        let host = Arc::new(ProviderHost::new(launch, concurrency));
        host.start().await.map_err(|e| PoolError::Launch {
            key: key.clone(),
            source: Box::new(e),
        })?;
        self.launches.fetch_add(1, Ordering::Relaxed);
        info!(provider = %key, "launched pooled provider");
        let config = match host.schema_for(&[]).await {
            Ok(schema) => build(&schema).map_err(|message| PoolError::Config {
                key: key.clone(),
                message,
            }),
            Err(source) => Err(PoolError::Provider {
                key: key.clone(),
                source: Box::new(source),
            }),
        };
        let configured = match config {
            Ok(config) => configure(&host, key, &config).await,
            Err(err) => Err(err),
        };
        if let Err(err) = configured {
            host.shutdown().await;
            return Err(err);
        }
        Ok(host)
    }

    /// Shut down hosts nobody has asked for within `idle_timeout` and nobody holds. Returns how
    /// many were shut down.
    pub async fn reap_idle(&self) -> usize {
        let idle: Vec<(PoolKey, Cell)> = {
            let mut state = self.state();
            let timeout = self.options.idle_timeout;
            let keys: Vec<PoolKey> = state
                .entries
                .iter()
                .filter(|(_, e)| e.last_used.elapsed() >= timeout && e.unheld())
                .map(|(k, _)| k.clone())
                .collect();
            keys.into_iter()
                .filter_map(|k| state.entries.remove(&k).map(|e| (k, e.cell)))
                .collect()
        };
        let mut reaped = 0;
        for (key, cell) in idle {
            if let Some(host) = cell.get() {
                info!(provider = %key, "shutting down idle provider");
                host.shutdown().await;
                reaped += 1;
            }
        }
        reaped
    }

    /// Call [`reap_idle`](Self::reap_idle) every `every` until the pool is dropped.
    pub fn spawn_reaper(self: Arc<Self>, every: Duration) -> JoinHandle<()> {
        // Weak, so a forgotten reaper task does not keep the pool (and its processes) alive.
        let pool = Arc::downgrade(&self);
        drop(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(pool) = pool.upgrade() else { return };
                pool.reap_idle().await;
            }
        })
    }

    /// Shut down every process, held or not — for operator shutdown. Callers still holding a
    /// host would relaunch it on their next request, so stop using the pool first.
    pub async fn shutdown_all(&self) {
        let hosts: Vec<Arc<ProviderHost>> = {
            let mut state = self.state();
            let mut hosts: Vec<_> = state
                .entries
                .drain()
                .filter_map(|(_, e)| e.cell.get().cloned())
                .collect();
            hosts.extend(state.retiring.drain(..).filter_map(|w| w.upgrade()));
            hosts
        };
        shutdown_each(hosts).await;
    }

    /// The resident memory of each live process, with what it started (a `kraken runner` and
    /// its provider count together), as `(provider address and version, ProviderConfig,
    /// bytes)`, read from `/proc` (empty where there is none).
    pub async fn memory(&self) -> Vec<(String, String, u64)> {
        let hosts: Vec<(PoolKey, Arc<ProviderHost>)> = self
            .state()
            .entries
            .iter()
            .filter_map(|(k, e)| e.cell.get().map(|h| (k.clone(), h.clone())))
            .collect();
        let mut samples = Vec::with_capacity(hosts.len());
        for (key, host) in hosts {
            let Some(pid) = host.plugin().await.and_then(|c| c.pid()) else {
                continue;
            };
            if let Some(bytes) = rss::tree_resident_bytes(pid) {
                let provider = format!("{} {}", key.address, key.version);
                samples.push((provider, key.config_name.clone(), bytes));
            }
        }
        samples
    }

    /// How often each live host relaunched its process after it died, as `(provider,
    /// ProviderConfig, restarts)`.
    pub fn restarts(&self) -> Vec<(String, String, u64)> {
        let state = self.state();
        state
            .entries
            .iter()
            .filter_map(|(k, e)| e.cell.get().map(|h| (k, h.launches())))
            .map(|(k, launches)| {
                let provider = format!("{} {}", k.address, k.version);
                (provider, k.config_name.clone(), launches.saturating_sub(1))
            })
            .collect()
    }

    pub fn stats(&self) -> PoolStats {
        let state = self.state();
        let live = state.entries.values().filter(|e| e.cell.get().is_some());
        let draining = state.retiring.iter().filter(|w| w.strong_count() > 0);
        PoolStats {
            processes: live.count() + draining.count(),
            launches: self.launches.load(Ordering::Relaxed),
        }
    }
}

/// Find or create the cell for `key`, removing (and returning) the older configurations of the
/// same ProviderConfig name. Pure map logic, kept apart so it can be tested without processes.
fn checkout(
    entries: &mut HashMap<PoolKey, Entry>,
    key: &PoolKey,
    now: Instant,
    per_namespace: Option<usize>,
) -> Result<(Cell, Vec<Cell>), Box<PoolError>> {
    let newest = entries
        .keys()
        .filter(|k| k.same_config(key) && k.uid == key.uid)
        .map(|k| k.generation)
        .max();
    if let Some(current) = newest.filter(|g| *g > key.generation) {
        return Err(Box::new(PoolError::Stale {
            key: key.clone(),
            current,
        }));
    }
    let older: Vec<PoolKey> = entries
        .keys()
        .filter(|k| k.superseded_by(key))
        .cloned()
        .collect();
    if let Some(limit) = per_namespace
        && !entries.contains_key(key)
    {
        let live = entries
            .keys()
            .filter(|k| k.namespace() == key.namespace() && !older.contains(k))
            .count();
        if live >= limit {
            return Err(Box::new(PoolError::NamespaceFull {
                namespace: key.namespace().to_owned(),
                limit,
            }));
        }
    }
    let retired = older
        .iter()
        .filter_map(|k| entries.remove(k).map(|e| e.cell))
        .collect();
    let entry = entries.entry(key.clone()).or_insert_with(|| Entry {
        cell: Arc::default(),
        last_used: now,
    });
    entry.last_used = now;
    Ok((entry.cell.clone(), retired))
}

/// Validate and configure a fresh host the way Terraform does before first use.
async fn configure(host: &ProviderHost, key: &PoolKey, config: &Value) -> Result<(), PoolError> {
    let provider_err = |source| PoolError::Provider {
        key: key.clone(),
        source: Box::new(source),
    };
    let mut diags = host
        .validate_provider_config(config)
        .await
        .map_err(provider_err)?;
    if !diags.has_errors() {
        diags = host
            .configure(REPORTED_TERRAFORM_VERSION, config)
            .await
            .map_err(provider_err)?;
    }
    if diags.has_errors() {
        return Err(PoolError::Configure {
            key: key.clone(),
            summary: diags.error_summary(),
        });
    }
    Ok(())
}

/// Shut a retired host down once its last user lets go.
///
/// Polling the reference count (rather than, say, a drop guard handed to callers) keeps the
/// caller's API a plain `Arc<ProviderHost>`; a retired host is rare and the poll is cheap.
/// Once removed from the map, the cell's only source of new clones is gone, so a count of
/// one stays one.
fn retire(cell: Cell) {
    tokio::spawn(async move {
        loop {
            let unheld = Arc::strong_count(&cell) == 1
                && cell.get().is_none_or(|h| Arc::strong_count(h) == 1);
            if unheld {
                break;
            }
            tokio::time::sleep(RETIRE_POLL).await;
        }
        if let Some(host) = cell.get() {
            info!("shutting down provider of a superseded ProviderConfig generation");
            host.shutdown().await;
        }
    });
}

async fn shutdown_each(hosts: Vec<Arc<ProviderHost>>) {
    let mut tasks = tokio::task::JoinSet::new();
    for host in hosts {
        tasks.spawn(async move { host.shutdown().await });
    }
    while let Some(res) = tasks.join_next().await {
        if let Err(err) = res {
            warn!("provider shutdown task failed: {err}");
        }
    }
}

#[cfg(test)]
#[path = "pool/tests.rs"]
mod tests;

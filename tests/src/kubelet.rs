//! Pods without a kubelet: the real kube-controller-manager and kube-scheduler (built from the
//! same Go module as the kube-apiserver) beside the test control plane, and a small test kubelet
//! that plays the node.
//!
//! The controllers make Deployments, ReplicaSets, garbage collection, Namespaces and
//! ServiceAccounts real, and the scheduler binds Pods to the one Node the test kubelet
//! registers. The test kubelet watches the Pods bound to its Node and runs each one's first
//! container as a local process:
//!
//! - the image names a local binary (a table the test gives: `kraken` → this checkout's
//!   binary); `command[1..]` and `args` are its arguments;
//! - the environment is the container's (`value`, `fieldRef`, `secretKeyRef`), plus
//!   `KUBECONFIG`: a kubeconfig holding a token the TokenRequest API minted for the Pod's
//!   ServiceAccount, bound to the Pod (unless `automountServiceAccountToken: false`), so the
//!   real API server decides what the process may do;
//! - volumes are directories of the Pod's own: `projected` ServiceAccount tokens (with their
//!   audience: what IRSA mounts), Secrets and `emptyDir`; an environment value or argument
//!   under a volume's `mountPath` is rewritten to that directory (the process has no mount
//!   namespace);
//! - `$(VAR)` in `command` and `args` is the container's variable, as a kubelet expands it;
//! - each Pod has an address of its own on loopback (`podIP` 127.b.x.y, also in `fieldRef:
//!   status.podIP`), so two Pods may serve on the same port; `b` is a block this kubelet holds
//!   a lock on for its life, so the kubelets of tests running side by side (in one process or
//!   many) never hand out the same address;
//! - the Pod's status says Running and Ready once the process started;
//!   a process that exits is started again (the Pod's `restartCount` counts it);
//! - a Pod being deleted has its process stopped (SIGTERM, then SIGKILL after its grace
//!   period, at most 10 s) and is then removed, as a kubelet confirms a deletion.

mod controllers;
mod pod;
mod status;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube::runtime::{WatchStreamExt as _, watcher};

pub use controllers::Controllers;
use status::{register_node, report_failed, report_running};

use crate::ControlPlane;

/// The Node the test kubelet registers.
pub const NODE: &str = "kraken-test-node";

/// What the test kubelet runs for an image: the part of the image's name before `:` (and
/// after the last `/`) → a local binary.
#[derive(Debug, Clone, Default)]
pub struct Images(pub BTreeMap<String, PathBuf>);

impl Images {
    fn binary(&self, image: &str) -> Option<&PathBuf> {
        let name = image.rsplit('/').next().unwrap_or(image);
        let name = name.split([':', '@']).next().unwrap_or(name);
        self.0.get(name)
    }
}

/// One Pod's process as the test kubelet runs it.
struct Running {
    uid: String,
    child: Child,
    restarts: u32,
    started: Instant,
    dir: PathBuf,
    spec: Launch,
}

/// How to start (and restart) a Pod's process.
#[derive(Clone)]
struct Launch {
    binary: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// The Pod's address on loopback.
    ip: String,
}

type Table = Arc<Mutex<HashMap<(String, String), Running>>>;

/// The test kubelet: a thread with a runtime of its own, stopped (its processes killed) on drop.
pub struct TestKubelet {
    pods_dir: PathBuf,
    /// Where the Pods' volumes are: a short path (a unix socket's path has at most 107 bytes,
    /// and a provider makes its socket in its work volume, as its container's short mount
    /// paths allow).
    _volumes: tempfile::TempDir,
    /// The lock on this kubelet's address block (released when the kubelet is dropped).
    _block: std::fs::File,
    table: Table,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for TestKubelet {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        for (_, run) in table.iter_mut() {
            kill_group(&run.child, "KILL");
            let _ = run.child.wait();
        }
    }
}

impl TestKubelet {
    /// Registers [`NODE`] (Ready, room for 110 Pods) and starts running the Pods bound to it.
    pub fn start(cp: &ControlPlane, images: Images) -> anyhow::Result<Self> {
        let pods_dir = cp.run_dir().join("pods");
        std::fs::create_dir_all(&pods_dir)?;
        let volumes = tempfile::Builder::new().prefix("ktk-").tempdir_in("/tmp")?;
        let kubeconfig = cp.kubeconfig().to_path_buf();
        let api_server = api_server_of(&kubeconfig)?;
        let ca = cp.run_dir().join("pki").join("ca.crt");
        let (block, block_file) = claim_address_block()?;
        let table: Table = Arc::default();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let node = NodeLoop {
            images,
            pods_dir: pods_dir.clone(),
            volumes_dir: volumes.path().to_path_buf(),
            api_server,
            ca,
            table: table.clone(),
            block,
            addresses: Default::default(),
        };
        let thread = std::thread::Builder::new()
            .name("test-kubelet".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(anyhow::anyhow!("runtime: {e}")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let client = match crate::bench::kube_client(&kubeconfig).await {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    if let Err(e) = register_node(&client).await {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                    let _ = ready_tx.send(Ok(()));
                    tokio::select! {
                        () = node.run(client) => {}
                        _ = stopped => {}
                    }
                });
            })?;
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .context("the test kubelet did not start")??;
        Ok(Self {
            pods_dir,
            _volumes: volumes,
            _block: block_file,
            table,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where a Pod's directory (its log `container.log`, its volumes) is.
    pub fn pod_dir(&self, namespace: &str, name: &str) -> PathBuf {
        self.pods_dir.join(format!("{namespace}_{name}"))
    }

    /// The log of a Pod's process (all its runs).
    pub fn log(&self, namespace: &str, name: &str) -> String {
        std::fs::read_to_string(self.pod_dir(namespace, name).join("container.log"))
            .unwrap_or_default()
    }

    /// The Pods whose processes run now: (namespace, name, pid).
    pub fn running(&self) -> Vec<(String, String, u32)> {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table
            .iter()
            .map(|((ns, name), run)| (ns.clone(), name.clone(), run.child.id()))
            .collect()
    }

    /// Kills a Pod's process with SIGKILL, as a crash would (it is started again).
    pub fn crash(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let run = table
            .get_mut(&(namespace.to_owned(), name.to_owned()))
            .with_context(|| format!("no process for Pod {namespace}/{name}"))?;
        kill_group(&run.child, "KILL");
        Ok(())
    }
}

/// A second octet for this kubelet's Pod addresses that no other live kubelet on this machine
/// has: the first of 1..=254 whose lock file this process can lock. The lock goes with the file
/// (also when the process dies), so a crashed test leaves no block taken.
fn claim_address_block() -> anyhow::Result<(u8, std::fs::File)> {
    let dir = std::env::temp_dir().join("kraken-test-kubelet");
    std::fs::create_dir_all(&dir)?;
    for block in 1..=254u8 {
        let path = dir.join(format!("127.{block}.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => return Ok((block, file)),
            Err(std::fs::TryLockError::WouldBlock) => continue,
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
    }
    anyhow::bail!("every test kubelet address block (127.1-254) is taken")
}

fn api_server_of(kubeconfig: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(kubeconfig)?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .map(|s| s.trim().to_owned())
        .context("no server in the admin kubeconfig")
}

/// The node while it runs: what it needs to start Pods, and the processes it started.
struct NodeLoop {
    images: Images,
    pods_dir: PathBuf,
    volumes_dir: PathBuf,
    api_server: String,
    ca: PathBuf,
    table: Table,
    /// The second octet of this kubelet's addresses.
    block: u8,
    /// Pod addresses handed out so far.
    addresses: std::sync::atomic::AtomicU32,
}

impl NodeLoop {
    /// A loopback address no other Pod has: 127.b.x.y, y in 2..=251.
    fn next_ip(&self) -> String {
        let n = self
            .addresses
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("127.{}.{}.{}", self.block, (n / 250) % 256, n % 250 + 2)
    }

    async fn run(self, client: kube::Client) {
        let pods: Api<Pod> = Api::all(client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={NODE}"));
        let mut events = watcher(pods, config).default_backoff().boxed();
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                ev = events.next() => match ev {
                    Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                        if let Err(e) = self.on_pod(&client, pod).await {
                            eprintln!("test kubelet: {e:#}");
                        }
                    }
                    // Deleted without a grace period (the kubelet was not asked): stop it now.
                    Some(Ok(watcher::Event::Delete(pod))) => self.forget(&pod).await,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => eprintln!("test kubelet: watching Pods: {e}"),
                    None => return,
                },
                _ = tick.tick() => self.restart_exited(&client).await,
            }
        }
    }

    /// Stops the process of a Pod that is gone (if it is this Pod's, by UID).
    async fn forget(&self, pod: &Pod) {
        let key = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let run = {
            let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
            match table.get(&key) {
                Some(run) if Some(&run.uid) == pod.metadata.uid.as_ref() => table.remove(&key),
                _ => None,
            }
        };
        if let Some(run) = run {
            stop(run.child, Duration::ZERO).await;
        }
    }

    /// A Pod being deleted: its process stopped (SIGTERM, SIGKILL after its grace period, at
    /// most 10 s), then the deletion confirmed, as a kubelet does.
    async fn confirm_deletion(
        &self,
        client: &kube::Client,
        pod: &Pod,
        key: (String, String),
    ) -> anyhow::Result<()> {
        let (ns, name) = key.clone();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .unwrap_or(30)
            .clamp(0, 10);
        let run = self
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        if let Some(run) = run {
            stop(run.child, Duration::from_secs(grace as u64)).await;
        }
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    async fn on_pod(&self, client: &kube::Client, pod: Pod) -> anyhow::Result<()> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let key = (ns.clone(), name.clone());
        if pod.metadata.deletion_timestamp.is_some() {
            return self.confirm_deletion(client, &pod, key).await;
        }
        let known = self
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .map(|r| r.uid.clone());
        if known.as_deref() == Some(uid.as_str()) {
            return Ok(());
        }
        if known.is_some() {
            // A new Pod of the same name: the old one's process goes first.
            let old = self
                .table
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
            if let Some(old) = old {
                stop(old.child, Duration::ZERO).await;
            }
        }
        let dir = self.pods_dir.join(format!("{ns}_{name}"));
        std::fs::create_dir_all(&dir)?;
        let launch = match self.prepare(client, &pod, &dir).await {
            Ok(launch) => launch,
            Err(e) => {
                report_failed(client, &ns, &name, &format!("{e:#}")).await?;
                return Ok(());
            }
        };
        let child = spawn(&launch, &dir)?;
        let pid = child.id();
        let ip = launch.ip.clone();
        self.table.lock().unwrap_or_else(|e| e.into_inner()).insert(
            key,
            Running {
                uid,
                child,
                restarts: 0,
                started: Instant::now(),
                dir,
                spec: launch,
            },
        );
        report_running(client, &pod, 0, &ip).await?;
        eprintln!("test kubelet: started Pod {ns}/{name} (pid {pid})");
        Ok(())
    }

    /// Starts again the processes that exited (after a second, like a short CrashLoopBackOff).
    async fn restart_exited(&self, client: &kube::Client) {
        let mut restarted = Vec::new();
        {
            let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
            for ((ns, name), run) in table.iter_mut() {
                let exited = matches!(run.child.try_wait(), Ok(Some(_)));
                if !exited || run.started.elapsed() < Duration::from_secs(1) {
                    continue;
                }
                match spawn(&run.spec, &run.dir) {
                    Ok(child) => {
                        run.child = child;
                        run.restarts += 1;
                        run.started = Instant::now();
                        restarted.push((
                            ns.clone(),
                            name.clone(),
                            run.restarts,
                            run.spec.ip.clone(),
                        ));
                    }
                    Err(e) => eprintln!("test kubelet: restarting {ns}/{name}: {e:#}"),
                }
            }
        }
        for (ns, name, restarts, ip) in restarted {
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            if let Ok(pod) = api.get(&name).await {
                let _ = report_running(client, &pod, restarts, &ip).await;
            }
        }
    }
}

fn spawn(launch: &Launch, dir: &Path) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("container.log"))?;
    use std::os::unix::process::CommandExt as _;
    Command::new(&launch.binary)
        // A group of its own: a crash or stop ends every process of the "container", as a
        // container's end does (a provider its runner started included).
        .process_group(0)
        .args(&launch.args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", launch.binary.display()))
}

/// Sends `signal` to the process group `child` leads.
fn kill_group(child: &Child, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), "--", &format!("-{}", child.id())])
        .status();
}

/// SIGTERM, then SIGKILL after `grace` (to the whole group).
async fn stop(mut child: Child, grace: Duration) {
    kill_group(&child, "TERM");
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kill_group(&child, "KILL");
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::claim_address_block;

    #[test]
    fn two_kubelets_alive_at_once_hold_different_address_blocks() -> anyhow::Result<()> {
        let (a, held) = claim_address_block()?;
        let (b, _b_held) = claim_address_block()?;
        assert_ne!(a, b, "a block held by one kubelet is not handed to another");
        drop(held);
        // A released block is free again; the held one still is not.
        let (c, _c_held) = claim_address_block()?;
        assert_ne!(c, b);
        Ok(())
    }
}

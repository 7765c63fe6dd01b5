//! Leader election (`kraken_bridge::operator::leader`) against a real kube-apiserver + etcd
//! (`scripts/testenv.sh up`): one leader at a time on a shared Lease, a released Lease is taken
//! over at once, an abandoned one once it expires, a leader notices when another identity has
//! written itself into the Lease, and one cut off from a frozen API server steps down within
//! the renew deadline and wins the Lease back once the server answers again.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kraken_bridge::operator::leader::LeaderElection;
use kraken_tests::ControlPlane;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

const NAMESPACE: &str = "lease-test";
const LEASE: &str = "kraken-operator";

/// Short timing so the test takes seconds: lease 3 s, renew deadline 2 s, retry 0.5 s.
fn candidate(client: &kube::Client, identity: &str) -> LeaderElection {
    LeaderElection::new(client.clone(), NAMESPACE, LEASE, identity.to_owned()).with_timing(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(500),
    )
}

async fn holder(leases: &Api<Lease>) -> anyhow::Result<(Option<String>, Option<i32>)> {
    let spec = leases.get(LEASE).await?.spec.unwrap_or_default();
    Ok((spec.holder_identity, spec.lease_transitions))
}

#[test]
fn lease_has_one_holder_and_passes_on_release_and_expiry() -> anyhow::Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("kraken_bridge=debug")
        .with_test_writer()
        .try_init();
    let cp = ControlPlane::start("operator-lease")?;
    cp.kubectl(&["create", "namespace", NAMESPACE])?;
    tokio::runtime::Runtime::new()?.block_on(elect(&cp))
}

async fn elect(cp: &ControlPlane) -> anyhow::Result<()> {
    let kubeconfig = Kubeconfig::read_from(&cp.kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("failed to load the control plane's kubeconfig")?;
    let client = kube::Client::try_from(config)?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);

    // The first candidate creates the Lease and holds it.
    let mut first =
        tokio::time::timeout(Duration::from_secs(10), candidate(&client, "a").acquire())
            .await
            .context("the first candidate must acquire the missing lease")?;
    ensure!(holder(&leases).await? == (Some("a".into()), Some(0)));

    // The second stands by for longer than a lease duration: the first keeps renewing.
    let second = tokio::spawn({
        let b = candidate(&client, "b");
        async move { b.acquire().await }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure!(!second.is_finished(), "b must not lead while a renews");
    ensure!(
        tokio::time::timeout(Duration::from_millis(10), first.lost())
            .await
            .is_err(),
        "a must still lead"
    );
    ensure!(holder(&leases).await?.0.as_deref() == Some("a"));

    // Released, the Lease is free at once: b takes it on its next attempt.
    first.release().await;
    let released = Instant::now();
    let second = tokio::time::timeout(Duration::from_secs(3), second)
        .await
        .context("b must acquire within a couple of seconds of a's release")??;
    eprintln!("b took over {:?} after the release", released.elapsed());
    ensure!(holder(&leases).await? == (Some("b".into()), Some(1)));

    // b stops renewing without releasing: c waits for the Lease to expire, then takes over.
    drop(second);
    let abandoned = Instant::now();
    let mut third =
        tokio::time::timeout(Duration::from_secs(10), candidate(&client, "c").acquire())
            .await
            .context("c must take over the abandoned lease once it expires")?;
    let waited = abandoned.elapsed();
    eprintln!("c took over {waited:?} after b stopped renewing");
    ensure!(
        waited >= Duration::from_millis(2000),
        "c must wait for the 3 s lease to expire, took over after {waited:?}"
    );
    ensure!(holder(&leases).await? == (Some("c".into()), Some(2)));

    // Someone else writes itself into the Lease: c's next renewal sees it and c steps down.
    // c renews every 0.5 s, so the write may conflict with a renewal: re-read and retry.
    let mut attempts = 0;
    loop {
        let mut lease = leases.get(LEASE).await?;
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = Some("intruder".into());
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        match leases.replace(LEASE, &PostParams::default(), &lease).await {
            Ok(_) => break,
            Err(kube::Error::Api(status)) if status.is_conflict() && attempts < 10 => {
                attempts += 1;
            }
            Err(err) => return Err(err.into()),
        }
    }
    tokio::time::timeout(Duration::from_secs(3), third.lost())
        .await
        .context("c must notice that another identity holds the lease")?;
    ensure!(holder(&leases).await?.0.as_deref() == Some("intruder"));

    // The intruder never renews; d takes over once its Lease expires.
    let d = candidate(&client, "d");
    let mut fourth = tokio::time::timeout(Duration::from_secs(10), d.acquire())
        .await
        .context("d must take over the intruder's expired lease")?;

    // The API server freezes (SIGSTOP: connections hang, as behind a partition). d cannot
    // renew, so it must step down within the 2 s renew deadline — before its 3 s lease could
    // expire for anyone else.
    let frozen = Frozen::stop(cp.apiserver_pid()?)?;
    let since = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), fourth.lost())
        .await
        .context("d must step down when it cannot renew")?;
    let stepped_down = since.elapsed();
    eprintln!("d stepped down {stepped_down:?} after the API server froze");
    ensure!(
        stepped_down <= Duration::from_millis(2600),
        "d must step down within the renew deadline, took {stepped_down:?}"
    );

    // Campaigning against the frozen server only logs and retries; once it answers again, d
    // finds its own name in the Lease and leads again.
    let again = tokio::spawn(async move { d.acquire().await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        !again.is_finished(),
        "nobody can acquire from a frozen server"
    );
    drop(frozen);
    tokio::time::timeout(Duration::from_secs(10), again)
        .await
        .context("d must lead again once the API server answers")??;
    ensure!(holder(&leases).await?.0.as_deref() == Some("d"));
    Ok(())
}

/// A process stopped with SIGSTOP, continued on drop (also when the test fails, so the control
/// plane can be shut down).
struct Frozen(u32);

impl Frozen {
    fn stop(pid: u32) -> anyhow::Result<Self> {
        signal("-STOP", pid)?;
        Ok(Self(pid))
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Err(err) = signal("-CONT", self.0) {
            eprintln!("failed to continue process {}: {err:#}", self.0);
        }
    }
}

fn signal(sig: &str, pid: u32) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()?;
    ensure!(status.success(), "kill {sig} {pid} failed: {status}");
    Ok(())
}

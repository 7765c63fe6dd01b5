//! Provider install benchmark: `cargo bench -p kraken-tests --bench install`.
//!
//! From `kubectl apply` of a `Provider` to its first managed resource Ready, for `random`
//! (`random_pet`) and `time` (`time_static`), both from the test environment's filesystem
//! mirror. Each sample gets a fresh control plane with only the core CRDs and a fresh
//! `kraken operator` (release build; started and ready before the clock starts). The clock
//! starts when `kubectl apply` of the Provider starts; the ProviderConfig and the resource are
//! applied (with kubectl, retried until the API server serves the new kind) right after; the
//! clock stops when the resource is Ready at its generation, seen by polling through the kube
//! client every 20 ms. Split times: Provider Ready (package installed, schema read, CRD
//! Established) and resource admitted.
//!
//! Two cache states: *cold* (an empty plugin cache: the package is copied from the mirror and
//! hashed) and *warm* (the plugin cache already holds it, as after an operator restart).
//!
//! Knobs: `KRAKEN_BENCH_INSTALL_RUNS` (samples per row, default 5), `KRAKEN_BENCH_LOG` (the
//! operator's `RUST_LOG`, default `warn`). `KRAKEN_BENCH_SMOKE=1`: one sample per row, and
//! only `random` (`time` goes through the same code with another manifest).

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kraken_tests::operator::{Operator, OperatorOptions};
use kraken_tests::{ControlPlane, TestEnv, repo_root, scratch_dir};
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Case {
    provider: &'static str,
    source: &'static str,
    resource_type: &'static str,
    /// kubectl's name for the kind, fully qualified.
    resource: &'static str,
    manifest: Value,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            provider: "random",
            source: "hashicorp/random",
            resource_type: "random_pet",
            resource: "pets.random.tf.kraken.dev",
            manifest: json!({"apiVersion": "random.tf.kraken.dev/v1alpha1", "kind": "Pet",
                "metadata": {"name": "first", "namespace": "bench"},
                "spec": {"providerConfigRef": {"name": "default"}, "forProvider": {"length": 2}}}),
        },
        Case {
            provider: "time",
            source: "hashicorp/time",
            resource_type: "time_static",
            resource: "statics.time.tf.kraken.dev",
            manifest: json!({"apiVersion": "time.tf.kraken.dev/v1alpha1", "kind": "Static",
                "metadata": {"name": "first", "namespace": "bench"},
                "spec": {"providerConfigRef": {"name": "default"}, "forProvider": {}}}),
        },
    ]
}

struct Sample {
    provider_ready: Duration,
    admitted: Duration,
    resource_ready: Duration,
}

fn main() -> anyhow::Result<()> {
    kraken_tests::bench::knobs::start("install")?;
    let runs: usize = kraken_tests::bench::knob("KRAKEN_BENCH_INSTALL_RUNS", 5, 1)?;
    anyhow::ensure!(runs > 0, "KRAKEN_BENCH_INSTALL_RUNS must be at least 1");
    let cases = if kraken_tests::bench::smoke() {
        cases().into_iter().take(1).collect()
    } else {
        cases()
    };
    let env = TestEnv::load()?;
    let mirror = env.path("KRAKEN_TEST_PLUGIN_DIR")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    for case in cases {
        for warm in [false, true] {
            let mut samples = Vec::new();
            // One cache per row; a warm row fills it with one unmeasured install first.
            let cache = scratch_dir("bench-plugin-cache-")?;
            if warm {
                sample(&rt, &case, &mirror, cache.path(), 0)?;
            }
            for i in 0..runs {
                let fresh;
                let dir = if warm {
                    cache.path()
                } else {
                    fresh = scratch_dir("bench-plugin-cache-")?;
                    fresh.path()
                };
                let s = sample(&rt, &case, &mirror, dir, i + 1)?;
                eprintln!(
                    "  {} {} #{}: Provider Ready {:.2} s, first resource Ready {:.2} s",
                    case.provider,
                    if warm { "warm" } else { "cold" },
                    i + 1,
                    s.provider_ready.as_secs_f64(),
                    s.resource_ready.as_secs_f64()
                );
                samples.push(s);
            }
            rows.push((case.provider, warm, samples));
        }
    }
    print_table(&rows, runs);
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn print_table(rows: &[(&str, bool, Vec<Sample>)], runs: usize) {
    println!(
        "### From `kubectl apply` of a Provider to its first resource Ready ({runs} runs each, medians)\n"
    );
    println!(
        "| provider | plugin cache | Provider Ready s | resource admitted s | first resource Ready s | min s | max s | target |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (provider, warm, samples) in rows {
        let ready: Vec<Duration> = samples.iter().map(|s| s.resource_ready).collect();
        let min = ready.iter().min().copied().unwrap_or_default();
        let max = ready.iter().max().copied().unwrap_or_default();
        println!(
            "| {provider} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            if *warm { "warm" } else { "cold" },
            median(samples.iter().map(|s| s.provider_ready).collect()).as_secs_f64(),
            median(samples.iter().map(|s| s.admitted).collect()).as_secs_f64(),
            median(ready).as_secs_f64(),
            min.as_secs_f64(),
            max.as_secs_f64(),
            if *warm { "< 5 s" } else { "" },
        );
    }
}

/// A fresh control plane with the core CRDs and a ready operator with its own plugin cache;
/// the moment the core CRDs were Established.
fn bed(
    case: &Case,
    cache: &std::path::Path,
    n: usize,
) -> anyhow::Result<(ControlPlane, Operator, Instant)> {
    let cp = ControlPlane::start(&format!("bench-install-{}-{n}", case.provider))?;
    cp.install_crds(
        &repo_root().join("generated-crds/core"),
        "kraken.dev/core=true",
    )?;
    let core_established = Instant::now();
    cp.create_namespace("bench")?;
    let mut op = Operator::start(
        &cp,
        OperatorOptions {
            label: "install".into(),
            rust_log: std::env::var("KRAKEN_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            args: vec!["--plugin-cache".into(), cache.display().to_string()],
            leader_elect: false,
            ..OperatorOptions::default()
        },
    )?;
    op.wait_ready(Duration::from_secs(60))?;
    Ok((cp, op, core_established))
}

/// Applies the resource as a user would, again and again until the API server serves its
/// kind: when it was admitted, and each attempt (for `KRAKEN_BENCH_LOG`).
fn apply_until_admitted(
    cp: &ControlPlane,
    op: &Operator,
    case: &Case,
    start: Instant,
) -> anyhow::Result<(Duration, Vec<String>)> {
    let mut attempts = Vec::new();
    loop {
        let t0 = start.elapsed();
        let r = cp.try_apply_yaml("bench", &case.manifest.to_string())?;
        attempts.push(format!(
            "{:.2}-{:.2} {}",
            t0.as_secs_f64(),
            start.elapsed().as_secs_f64(),
            match &r {
                Ok(_) => "ok".to_string(),
                Err(e) => e
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .chars()
                    .take(100)
                    .collect(),
            }
        ));
        if r.is_ok() {
            return Ok((start.elapsed(), attempts));
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!(
                "the kind {} was not served within 60 s:\n{}",
                case.resource,
                op.log_tail(30)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sample(
    rt: &tokio::runtime::Runtime,
    case: &Case,
    mirror: &std::path::Path,
    cache: &std::path::Path,
    n: usize,
) -> anyhow::Result<Sample> {
    // kube-apiserver delays every create of a custom resource by 2 s while its CRD has been
    // Established for less than 2 s (an HA safeguard in apiextensions-apiserver). In a cluster
    // where Kraken was installed earlier that delay is long past for the core kinds, so the
    // clock starts only after it; it is not past for the kinds a Provider installs, and that
    // is measured.
    let (cp, op, core_established) = bed(case, cache, n)?;
    let client = rt.block_on(kube_client(cp.kubeconfig()))?;
    let provider = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "Provider",
        "metadata": {"name": case.provider},
        "spec": {"source": case.source, "mirror": mirror, "resources": [case.resource_type]}});
    let pc = json!({"apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
        "metadata": {"name": "default", "namespace": "bench"},
        "spec": {"providerRef": {"name": case.provider}}});

    std::thread::sleep(Duration::from_millis(2100).saturating_sub(core_established.elapsed()));

    let start = Instant::now();
    // The Provider is watched from another thread, since the kubectl retries below block.
    let provider_ready = {
        let kubeconfig = cp.kubeconfig().to_path_buf();
        let name = case.provider;
        std::thread::spawn(move || -> anyhow::Result<Duration> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(wait_provider_ready(&kubeconfig, name, start))
        })
    };
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    cp.apply_yaml("", &format!("{provider}\n---\n{pc}"))?;
    let applied_provider = start.elapsed();
    let (admitted, attempts) = apply_until_admitted(&cp, &op, case, start)?;
    let resource_ready = rt.block_on(wait_ready(&client, case, start))?;
    let provider_ready = provider_ready
        .join()
        .map_err(|_| anyhow::anyhow!("the Provider watcher panicked"))??;
    if std::env::var_os("KRAKEN_BENCH_LOG").is_some() {
        eprintln!(
            "Provider applied at {:.2} s; resource apply attempts:\n  {}",
            applied_provider.as_secs_f64(),
            attempts.join("\n  ")
        );
        eprintln!(
            "operator log (the clock started at {:.3} s since the epoch):\n{}",
            wall.as_secs_f64(),
            op.log_tail(200)
        );
    }
    drop(op);
    drop(cp);
    Ok(Sample {
        provider_ready,
        admitted,
        resource_ready,
    })
}

async fn kube_client(kubeconfig: &std::path::Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

fn ready(obj: &Value) -> bool {
    let current = obj["status"]["observedGeneration"] == obj["metadata"]["generation"];
    current
        && obj["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Polls the Provider every 20 ms; returns when it became Ready at its generation.
async fn wait_provider_ready(
    kubeconfig: &std::path::Path,
    name: &str,
    start: Instant,
) -> anyhow::Result<Duration> {
    use kube::api::{Api, DynamicObject};
    use kube::core::{ApiResource, GroupVersionKind};
    let client = kube_client(kubeconfig).await?;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("core.kraken.dev", "v1alpha1", "Provider"),
        "providers",
    );
    let providers: Api<DynamicObject> = Api::all_with(client, &ar);
    loop {
        if let Some(p) = providers.get_opt(name).await?
            && ready(&serde_json::to_value(&p)?)
        {
            return Ok(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!("the Provider {name} was not Ready within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the resource every 20 ms; returns when it became Ready at its generation.
async fn wait_ready(
    client: &kube::Client,
    case: &Case,
    start: Instant,
) -> anyhow::Result<Duration> {
    use kube::api::{Api, DynamicObject};
    use kube::core::{ApiResource, GroupVersionKind};
    let (plural, group) = case.resource.split_once('.').context("resource name")?;
    let kind = case.manifest["kind"].as_str().unwrap_or_default();
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", kind), plural);
    let objects: Api<DynamicObject> = Api::namespaced_with(client.clone(), "bench", &ar);
    loop {
        if let Some(o) = objects.get_opt("first").await?
            && ready(&serde_json::to_value(&o)?)
        {
            return Ok(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!("the first {} was not Ready within 120 s", case.resource);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

//! The runner's cost: `cargo bench -p kraken-tests --bench runner`.
//!
//! The same provider binary launched two ways, side by side in one run: directly (the
//! `inProcess` placement) and through `kraken runner --sandbox=landlock` (the `local`
//! placement, the default). Prints markdown tables (copied into `docs/benchmarks.md`, "The
//! runner"):
//! 1. start-up, spawn to the first answered GetProviderSchema, per placement (interleaved);
//! 2. p50/p99 of PlanResourceChange and ApplyResourceChange (creates) through Kraken's plugin
//!    host, on `random_pet` (protocol 5, no I/O of its own) and `fixture_object` (protocol 6,
//!    writes its ledger), the two placements' samples interleaved one by one;
//! 3. the resident memory of the runner process itself beside its provider's.
//!
//! The latencies include the `pods` placement's wire: `kraken runner --listen` serving over TCP
//! with mutual TLS, dialed by the host as the operator dials a runner Pod (started here, not
//! through a cluster: what differs from `local` per RPC is the hop, not the scheduling).
//!
//! Knobs: `KRAKEN_BENCH_RPCS` (samples per RPC and placement, default 1000),
//! `KRAKEN_BENCH_STARTS` (start-ups per placement, default 10), `KRAKEN_BENCH_SMOKE=1` (5 and 2).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use kraken_bridge::provider::lifecycle::{self, Plan};
use kraken_bridge::provider::{
    DiagnosticsExt as _, LaunchOptions, Plugin as _, ProviderHost, REPORTED_TERRAFORM_VERSION, Via,
};
use kraken_bridge::value::Value;
use kraken_bridge::value::kube::from_kube_json;
use kraken_tests::bench::{knob, pct};
use kraken_tests::{ProviderBin, TestEnv, rss_anon_bytes, rss_bytes};
use serde_json::json;

#[path = "runner/served.rs"]
mod served;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    InProcess,
    Local,
    Pods,
}

impl Placement {
    const BOTH: [Self; 2] = [Self::InProcess, Self::Local];

    fn name(self) -> &'static str {
        match self {
            Self::InProcess => "inProcess (direct)",
            Self::Local => "local (kraken runner, Landlock)",
            Self::Pods => "pods (kraken runner --listen, TCP + mutual TLS)",
        }
    }
}

/// What one provider is launched with: its binary, environment, configuration and a resource.
struct Case {
    label: &'static str,
    bin: ProviderBin,
    env: Vec<(String, String)>,
    provider_config: serde_json::Value,
    type_name: &'static str,
    resource: serde_json::Value,
    protocol: u32,
}

fn options(
    case: &Case,
    placement: Placement,
    writable: &std::path::Path,
) -> anyhow::Result<LaunchOptions> {
    let mut opts = LaunchOptions::new(&case.bin.path);
    opts.name = case.bin.address.clone();
    opts.env = case.env.clone();
    if placement == Placement::Local {
        opts.via = Some(Via {
            program: kraken_tests::kraken_bin()?,
            args: vec![
                "runner".into(),
                "--sandbox=landlock".into(),
                "--allow-write".into(),
                writable.as_os_str().to_owned(),
            ],
        });
    }
    Ok(opts)
}

/// A configured host with the create plan of `case`'s resource.
struct Subject {
    /// The runner a `pods` subject dials.
    served: Option<served::Served>,
    host: Arc<ProviderHost>,
    plan: Plan,
    config: Value,
    type_name: &'static str,
}

async fn subject(
    case: &Case,
    placement: Placement,
    writable: &std::path::Path,
) -> anyhow::Result<Subject> {
    let mut opts = options(case, placement, writable)?;
    let served = match placement {
        Placement::Pods => {
            let served = served::serve(&case.bin.path, case.protocol, writable)?;
            opts.dial = Some(served.dial.clone());
            Some(served)
        }
        _ => None,
    };
    let host = Arc::new(ProviderHost::new(opts, 8));
    let schema = host.schema().await?;
    let cfg = from_kube_json(&case.provider_config, &schema.provider.block.implied_type())?;
    let diags = host.configure(REPORTED_TERRAFORM_VERSION, &cfg).await?;
    ensure!(!diags.has_errors(), "{}", diags.error_summary());
    let block = &schema.resource(case.type_name).context("resource")?.block;
    let config = from_kube_json(&case.resource, &block.implied_type())?;
    let plan = lifecycle::plan(host.as_ref(), case.type_name, &Value::Null, &[], &config).await?;
    Ok(Subject {
        served,
        host,
        plan,
        config,
        type_name: case.type_name,
    })
}

#[derive(Default)]
struct Samples {
    plan: Vec<Duration>,
    apply: Vec<Duration>,
}

async fn sample(s: &Subject, out: &mut Samples) -> anyhow::Result<()> {
    let t = Instant::now();
    let plan = lifecycle::plan(s.host.as_ref(), s.type_name, &Value::Null, &[], &s.config).await?;
    out.plan.push(t.elapsed());
    std::hint::black_box(plan);
    let t = Instant::now();
    let applied = lifecycle::apply(s.host.as_ref(), &s.plan).await?;
    out.apply.push(t.elapsed());
    ensure!(
        !applied.diagnostics.has_errors(),
        "{}",
        applied.diagnostics.error_summary()
    );
    Ok(())
}

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

fn ratio(a: Duration, b: Duration) -> String {
    if b.is_zero() {
        return "-".into();
    }
    format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64())
}

async fn startups(case: &Case, n: usize, writable: &std::path::Path) -> anyhow::Result<()> {
    println!(
        "\n### Start-up of {} to the first schema, {n} each, interleaved (ms)\n",
        case.label
    );
    println!("| placement | p50 | max |");
    println!("|---|---:|---:|");
    let mut seen: [Vec<Duration>; 2] = [vec![], vec![]];
    for _ in 0..n {
        for (i, placement) in Placement::BOTH.into_iter().enumerate() {
            let t = Instant::now();
            let host = ProviderHost::new(options(case, placement, writable)?, 1);
            host.schema().await?;
            seen[i].push(t.elapsed());
            host.shutdown().await;
        }
    }
    for (i, placement) in Placement::BOTH.into_iter().enumerate() {
        seen[i].sort();
        let max = seen[i].last().copied().unwrap_or_default();
        println!(
            "| {} | {:.1} | {:.1} |",
            placement.name(),
            pct(&seen[i], 0.5).as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
    Ok(())
}

async fn latencies(case: &Case, n: usize, writable: &std::path::Path) -> anyhow::Result<()> {
    let direct = subject(case, Placement::InProcess, writable).await?;
    let relayed = subject(case, Placement::Local, writable).await?;
    let dialed = subject(case, Placement::Pods, writable).await?;
    let (mut d, mut r, mut p) = (Samples::default(), Samples::default(), Samples::default());
    for _ in 0..n {
        sample(&direct, &mut d).await?;
        sample(&relayed, &mut r).await?;
        sample(&dialed, &mut p).await?;
    }
    for v in [
        &mut d.plan,
        &mut d.apply,
        &mut r.plan,
        &mut r.apply,
        &mut p.plan,
        &mut p.apply,
    ] {
        v.sort();
    }
    println!(
        "\n### {} RPCs through the plugin host, {n} samples per placement, interleaved (µs)\n",
        case.label
    );
    println!("| RPC | quantile | inProcess | local | ratio | pods | ratio | pods added |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (rpc, a, b, c) in [
        ("PlanResourceChange", &d.plan, &r.plan, &p.plan),
        ("ApplyResourceChange (create)", &d.apply, &r.apply, &p.apply),
    ] {
        for q in [0.5, 0.99] {
            let (a, b, c) = (pct(a, q), pct(b, q), pct(c, q));
            println!(
                "| {rpc} | p{:.0} | {} | {} | {} | {} | {} | {} |",
                q * 100.0,
                us(a),
                us(b),
                ratio(b, a),
                us(c),
                ratio(c, a),
                us(c.saturating_sub(a))
            );
        }
    }
    memory(case, &direct, &relayed).await?;
    if let Some(served) = &dialed.served {
        let pid = served::pid(served);
        let provider = provider_of(case, pid).context("the served runner's provider")?;
        println!(
            "Served runner (pods) {} MiB + its provider {} MiB.",
            mib(rss_bytes(pid)?),
            mib(rss_bytes(provider)?)
        );
    }
    for s in [&direct, &relayed, &dialed] {
        s.host.shutdown().await;
    }
    Ok(())
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1 << 20) as f64)
}

fn provider_of(case: &Case, runner_pid: u32) -> Option<u32> {
    kraken_tests::bench::fair::provider_pids(
        runner_pid,
        &case
            .bin
            .path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy(),
    )
    .into_iter()
    .next()
}

/// The runner's own resident memory, beside its provider's and the direct provider's.
async fn memory(case: &Case, direct: &Subject, relayed: &Subject) -> anyhow::Result<()> {
    let pid_of = |s: &Subject| {
        let host = s.host.clone();
        async move { host.plugin().await.and_then(|p| p.pid()) }
    };
    let direct_pid = pid_of(direct).await.context("direct provider pid")?;
    let runner_pid = pid_of(relayed).await.context("runner pid")?;
    let provider_pid = provider_of(case, runner_pid).context("the runner's provider")?;
    let both = |pid| -> anyhow::Result<String> {
        Ok(format!(
            "{} ({} anonymous)",
            mib(rss_bytes(pid)?),
            mib(rss_anon_bytes(pid)?)
        ))
    };
    println!(
        "\nResident memory (MiB): direct provider {}; runner {} + its provider {}.",
        both(direct_pid)?,
        both(runner_pid)?,
        both(provider_pid)?
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    kraken_tests::bench::knobs::start("runner")?;
    let n = knob("KRAKEN_BENCH_RPCS", 1000, 5)?;
    let starts = knob("KRAKEN_BENCH_STARTS", 10, 2)?;
    let env = TestEnv::load()?;
    let ledger = kraken_tests::fixture_dir("bench-runner-")?;
    let cases = [
        Case {
            label: "hashicorp/random (protocol 5) random_pet",
            bin: env.provider("random")?,
            env: vec![],
            provider_config: json!({}),
            type_name: "random_pet",
            resource: json!({"length": 2}),
            protocol: 5,
        },
        Case {
            label: "fixture (protocol 6) fixture_object",
            bin: env.provider("fixture")?,
            env: vec![],
            provider_config: json!({"ledger_dir": ledger.path().to_string_lossy()}),
            type_name: "fixture_object",
            resource: json!({"name": "bench", "size": 1}),
            protocol: 6,
        },
    ];
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        println!(
            "## Runner benchmark ({} cores)",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        for case in &cases {
            startups(case, starts, ledger.path()).await?;
            latencies(case, n, ledger.path()).await?;
        }
        Ok(())
    })
}

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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    InProcess,
    Local,
}

impl Placement {
    const BOTH: [Self; 2] = [Self::InProcess, Self::Local];

    fn name(self) -> &'static str {
        match self {
            Self::InProcess => "inProcess (direct)",
            Self::Local => "local (kraken runner, Landlock)",
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
    let host = Arc::new(ProviderHost::new(options(case, placement, writable)?, 8));
    let schema = host.schema().await?;
    let cfg = from_kube_json(&case.provider_config, &schema.provider.block.implied_type())?;
    let diags = host.configure(REPORTED_TERRAFORM_VERSION, &cfg).await?;
    ensure!(!diags.has_errors(), "{}", diags.error_summary());
    let block = &schema.resource(case.type_name).context("resource")?.block;
    let config = from_kube_json(&case.resource, &block.implied_type())?;
    let plan = lifecycle::plan(host.as_ref(), case.type_name, &Value::Null, &[], &config).await?;
    Ok(Subject {
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
    let (mut d, mut r) = (Samples::default(), Samples::default());
    for _ in 0..n {
        sample(&direct, &mut d).await?;
        sample(&relayed, &mut r).await?;
    }
    for v in [&mut d.plan, &mut d.apply, &mut r.plan, &mut r.apply] {
        v.sort();
    }
    println!(
        "\n### {} RPCs through the plugin host, {n} samples per placement, interleaved (µs)\n",
        case.label
    );
    println!("| RPC | inProcess p50 | local p50 | ratio | inProcess p99 | local p99 | ratio |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (rpc, a, b) in [
        ("PlanResourceChange", &d.plan, &r.plan),
        ("ApplyResourceChange (create)", &d.apply, &r.apply),
    ] {
        let (a50, b50, a99, b99) = (pct(a, 0.5), pct(b, 0.5), pct(a, 0.99), pct(b, 0.99));
        println!(
            "| {rpc} | {} | {} | {} | {} | {} | {} |",
            us(a50),
            us(b50),
            ratio(b50, a50),
            us(a99),
            us(b99),
            ratio(b99, a99)
        );
    }
    memory(case, &direct, &relayed).await?;
    direct.host.shutdown().await;
    relayed.host.shutdown().await;
    Ok(())
}

/// The runner's own resident memory, beside its provider's and the direct provider's.
async fn memory(case: &Case, direct: &Subject, relayed: &Subject) -> anyhow::Result<()> {
    let pid_of = |s: &Subject| {
        let host = s.host.clone();
        async move { host.plugin().await.and_then(|p| p.pid()) }
    };
    let direct_pid = pid_of(direct).await.context("direct provider pid")?;
    let runner_pid = pid_of(relayed).await.context("runner pid")?;
    let provider_pid = kraken_tests::bench::fair::provider_pids(
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
    .context("the runner's provider")?;
    let mib = |b: u64| format!("{:.1}", b as f64 / (1 << 20) as f64);
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
        },
        Case {
            label: "fixture (protocol 6) fixture_object",
            bin: env.provider("fixture")?,
            env: vec![],
            provider_config: json!({"ledger_dir": ledger.path().to_string_lossy()}),
            type_name: "fixture_object",
            resource: json!({"name": "bench", "size": 1}),
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

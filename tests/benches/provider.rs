//! Plugin-host benchmark: `cargo bench -p kraken-tests --bench provider`.
//!
//! Prints markdown tables (copied into `docs/benchmarks.md`):
//! 1. provider start-up, spawn to the first answered RPC (GetProviderSchema), per test provider;
//! 2. p50/p99 of ReadResource, PlanResourceChange and ApplyResourceChange through Kraken's
//!    `Provider` trait on `random_pet` and `time_static`, beside the same RPC sent as a
//!    pre-encoded request on the raw gRPC client, and the mean CPU time of Kraken's translation
//!    for that RPC (msgpack encode of the request values, decode of the response value);
//! 3. 1,000 `random_pet` planned and applied through Kraken's plugin host at concurrency P (P
//!    creates at once, P RPCs in flight), beside `terraform apply -parallelism=P` creating the
//!    same 1,000 with the same provider binary (hashed from both sides' processes) under the
//!    same `GOGC`, for each level P, repeated and interleaved in one run; the ratios printed.
//!
//! Sections (arguments): `startup`, `latency`, `terraform`; default all.
//!
//! Knobs: `KRAKEN_BENCH_RPCS` (samples per RPC, default 300), `KRAKEN_BENCH_PETS` (default
//! 1000), `KRAKEN_BENCH_REPS` (repetitions of the comparison, default 3),
//! `KRAKEN_BENCH_PARALLELISM` (levels, default `10,32`), `KRAKEN_BENCH_GOGC` (`default`: Go's
//! own on both sides, or a percentage for both), `KRAKEN_BENCH_SMOKE=1` (5 RPCs, 10 pets, one
//! repetition, 2 start-ups per provider).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use kraken_bridge::provider::lifecycle::{self, Action};
use kraken_bridge::provider::{
    DiagnosticsExt as _, LaunchOptions, PlanRequest, Plugin, ProviderHost,
    REPORTED_TERRAFORM_VERSION, ReadRequest, launch, proposed::proposed_new,
};
use kraken_bridge::value::kube::from_kube_json;
use kraken_bridge::value::{Value, msgpack};
use kraken_proto::tfplugin5;
use kraken_tests::bench::{Gogc, Ratios, Spy, fair, knob, smoke};
use kraken_tests::{ProviderBin, TestEnv};
use serde_json::json;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

fn host(p: &ProviderBin, concurrency: usize, gogc: Gogc) -> Arc<ProviderHost> {
    let mut opts = LaunchOptions::new(&p.path);
    opts.name = p.address.clone();
    opts.default_env = gogc.launch_env();
    Arc::new(ProviderHost::new(opts, concurrency))
}

async fn startup(env: &TestEnv) -> anyhow::Result<()> {
    let runs = if smoke() { 2 } else { 10 };
    println!("\n### Provider start-up (spawn → first answered RPC), {runs} runs each\n");
    println!("| provider | protocol | p50 ms | min ms | max ms |");
    println!("|---|---|---|---|---|");
    for p in env.all_providers()? {
        let mut samples = Vec::with_capacity(runs);
        let mut protocol = 0;
        for _ in 0..runs {
            let mut opts = LaunchOptions::new(&p.path);
            opts.name = p.address.clone();
            let started = Instant::now();
            let client = launch(&opts).await?;
            protocol = client.protocol;
            let provider = kraken_bridge::provider::host::adapter(client.clone());
            provider.schema().await?;
            samples.push(started.elapsed());
            client.shutdown().await;
        }
        samples.sort();
        println!(
            "| {} {} | {protocol} | {} | {} | {} |",
            p.name,
            p.version,
            ms(percentile(&samples, 0.5)),
            ms(samples[0]),
            ms(samples[samples.len() - 1])
        );
    }
    Ok(())
}

struct Rpcs {
    read: Vec<Duration>,
    plan: Vec<Duration>,
    apply: Vec<Duration>,
    raw_read: Vec<Duration>,
    raw_plan: Vec<Duration>,
    /// Mean CPU time of Kraken's translation for one ReadResource / PlanResourceChange:
    /// msgpack encode of the request values and decode of the response value.
    translate_read: Duration,
    translate_plan: Duration,
}

/// Mean time of `f` over enough iterations to be stable on a noisy machine (a few in the
/// smoke mode, which only checks that it runs).
fn mean_of(mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Duration> {
    let (warm, iterations) = if smoke() { (10, 100) } else { (1000, 20_000) };
    for _ in 0..warm {
        f()?;
    }
    let started = Instant::now();
    for _ in 0..iterations {
        f()?;
    }
    Ok(started.elapsed() / iterations)
}

/// One object of `type_name` created through a launched provider, and the requests the
/// samples repeat: through Kraken's trait and pre-encoded for the raw client.
struct Subject {
    client: kraken_bridge::provider::PluginClient,
    provider: Arc<dyn Plugin>,
    type_name: String,
    ty: kraken_bridge::value::Type,
    config: Value,
    state: Value,
    proposed: Value,
    plan: lifecycle::Plan,
    raw_read: tfplugin5::read_resource::Request,
    raw_plan: tfplugin5::plan_resource_change::Request,
}

async fn subject(
    p: &ProviderBin,
    type_name: &str,
    cfg: serde_json::Value,
) -> anyhow::Result<Subject> {
    let mut opts = LaunchOptions::new(&p.path);
    opts.name = p.address.clone();
    let client = launch(&opts).await?;
    let provider = kraken_bridge::provider::host::adapter(client.clone());
    let schema = provider.schema().await?;
    let provider_cfg = from_kube_json(&json!({}), &schema.provider.block.implied_type())?;
    let diags = provider
        .configure(REPORTED_TERRAFORM_VERSION, &provider_cfg)
        .await?;
    ensure!(!diags.has_errors(), "{}", diags.error_summary());
    let block = &schema.resource(type_name).context("resource")?.block;
    let ty = block.implied_type();
    let config = from_kube_json(&cfg, &ty)?;
    let plan = lifecycle::plan(provider.as_ref(), type_name, &Value::Null, &[], &config).await?;
    let state = lifecycle::apply(provider.as_ref(), &plan).await?.new_state;
    let proposed = proposed_new(block, &state, &config);
    let dv = |v: &Value| -> anyhow::Result<tfplugin5::DynamicValue> {
        Ok(tfplugin5::DynamicValue {
            msgpack: msgpack::encode(v, &ty)?,
            json: vec![],
        })
    };
    let raw_read = tfplugin5::read_resource::Request {
        type_name: type_name.into(),
        current_state: Some(dv(&state)?),
        ..Default::default()
    };
    let raw_plan = tfplugin5::plan_resource_change::Request {
        type_name: type_name.into(),
        prior_state: Some(dv(&state)?),
        proposed_new_state: Some(dv(&proposed)?),
        config: Some(dv(&config)?),
        ..Default::default()
    };
    Ok(Subject {
        client,
        provider,
        type_name: type_name.into(),
        ty,
        config,
        state,
        proposed,
        plan,
        raw_read,
        raw_plan,
    })
}

/// One sample of each RPC, through Kraken and raw (over the same connection), into `out`.
async fn sample_once(s: &Subject, out: &mut Rpcs) -> anyhow::Result<()> {
    let mut raw = tfplugin5::provider_client::ProviderClient::new(s.client.channel.clone());
    let t = Instant::now();
    s.provider
        .read_resource(ReadRequest {
            type_name: s.type_name.clone(),
            current_state: s.state.clone(),
            private: vec![],
        })
        .await?;
    out.read.push(t.elapsed());
    let t = Instant::now();
    raw.read_resource(s.raw_read.clone()).await?;
    out.raw_read.push(t.elapsed());
    let t = Instant::now();
    s.provider
        .plan_resource_change(PlanRequest {
            type_name: s.type_name.clone(),
            prior_state: s.state.clone(),
            proposed_new_state: s.proposed.clone(),
            config: s.config.clone(),
            prior_private: vec![],
        })
        .await?;
    out.plan.push(t.elapsed());
    let t = Instant::now();
    raw.plan_resource_change(s.raw_plan.clone()).await?;
    out.raw_plan.push(t.elapsed());
    // Apply measured on creates (the common write); each creates a new object.
    let t = Instant::now();
    let applied = lifecycle::apply(s.provider.as_ref(), &s.plan).await?;
    out.apply.push(t.elapsed());
    ensure!(
        !applied.diagnostics.has_errors(),
        "{}",
        applied.diagnostics.error_summary()
    );
    Ok(())
}

async fn rpc_latency(
    p: &ProviderBin,
    type_name: &str,
    cfg: serde_json::Value,
    n: usize,
) -> anyhow::Result<Rpcs> {
    let s = subject(p, type_name, cfg).await?;
    let mut out = Rpcs {
        read: vec![],
        plan: vec![],
        apply: vec![],
        raw_read: vec![],
        raw_plan: vec![],
        translate_read: Duration::ZERO,
        translate_plan: Duration::ZERO,
    };
    for _ in 0..n {
        sample_once(&s, &mut out).await?;
    }
    let mut raw = tfplugin5::provider_client::ProviderClient::new(s.client.channel.clone());
    let read_resp = raw.read_resource(s.raw_read.clone()).await?.into_inner();
    let plan_resp = raw
        .plan_resource_change(s.raw_plan.clone())
        .await?
        .into_inner();
    let read_bytes = read_resp
        .new_state
        .context("read returned no state")?
        .msgpack;
    let plan_bytes = plan_resp
        .planned_state
        .context("plan returned no state")?
        .msgpack;
    out.translate_read = mean_of(|| {
        std::hint::black_box(msgpack::encode(&s.state, &s.ty)?);
        std::hint::black_box(msgpack::decode(&read_bytes, &s.ty)?);
        Ok(())
    })?;
    out.translate_plan = mean_of(|| {
        for v in [&s.state, &s.proposed, &s.config] {
            std::hint::black_box(msgpack::encode(v, &s.ty)?);
        }
        std::hint::black_box(msgpack::decode(&plan_bytes, &s.ty)?);
        Ok(())
    })?;
    s.client.shutdown().await;
    for v in [
        &mut out.read,
        &mut out.plan,
        &mut out.apply,
        &mut out.raw_read,
        &mut out.raw_plan,
    ] {
        v.sort();
    }
    Ok(out)
}

async fn latencies(env: &TestEnv) -> anyhow::Result<()> {
    let n = knob("KRAKEN_BENCH_RPCS", 300, 5)?;
    println!("\n### RPC latency through Kraken's client, {n} samples each (µs)\n");
    println!(
        "| resource | RPC | p50 | p99 | raw gRPC p50 | Kraken translation (mean) | translation / raw p50 |"
    );
    println!("|---|---|---|---|---|---|---|");
    let cases = [
        ("random", "random_pet", json!({"length": 2})),
        ("time", "time_static", json!({"triggers": {"k": "v"}})),
    ];
    for (prov, ty, cfg) in cases {
        let r = rpc_latency(&env.provider(prov)?, ty, cfg, n).await?;
        for (name, s, raw) in [
            (
                "ReadResource",
                &r.read,
                Some((&r.raw_read, r.translate_read)),
            ),
            (
                "PlanResourceChange",
                &r.plan,
                Some((&r.raw_plan, r.translate_plan)),
            ),
            ("ApplyResourceChange", &r.apply, None),
        ] {
            let p50 = percentile(s, 0.5);
            let (raw_col, over_col, ratio_col) = match raw {
                Some((raw, cost)) => {
                    let raw50 = percentile(raw, 0.5);
                    (
                        us(raw50),
                        format!("{:.1}", cost.as_secs_f64() * 1e6),
                        format!(
                            "{:.2}%",
                            100.0 * cost.as_secs_f64() / raw50.as_secs_f64().max(1e-9)
                        ),
                    )
                }
                None => ("—".into(), "—".into(), "—".into()),
            };
            println!(
                "| {ty} | {name} | {} | {} | {raw_col} | {over_col} | {ratio_col} |",
                us(p50),
                us(percentile(s, 0.99))
            );
        }
    }
    Ok(())
}

/// 1,000 pets through Kraken's plugin host at `concurrency`: the wall time (process start
/// included) and the provider processes it started.
async fn kraken_pets(
    p: &ProviderBin,
    n: usize,
    concurrency: usize,
    gogc: Gogc,
) -> anyhow::Result<(Duration, BTreeSet<fair::Seen>)> {
    let spy = Spy::start(std::process::id());
    let started = Instant::now();
    let host = host(p, concurrency, gogc);
    let schema = host.schema().await?;
    let provider_cfg = from_kube_json(&json!({}), &schema.provider.block.implied_type())?;
    host.configure(REPORTED_TERRAFORM_VERSION, &provider_cfg)
        .await?;
    let ty = schema
        .resource("random_pet")
        .context("random_pet")?
        .block
        .implied_type();
    let config = from_kube_json(&json!({}), &ty)?;
    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let host = host.clone();
        let config = config.clone();
        let permit = sem.clone().acquire_owned().await?;
        tasks.spawn(async move {
            let _permit = permit;
            let plan =
                lifecycle::plan(host.as_ref(), "random_pet", &Value::Null, &[], &config).await?;
            anyhow::ensure!(plan.action == Action::Create);
            let applied = lifecycle::apply(host.as_ref(), &plan).await?;
            anyhow::ensure!(!applied.new_state.is_null() && !applied.diagnostics.has_errors());
            Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let took = started.elapsed();
    let seen = spy.finish();
    host.shutdown().await;
    Ok((took, seen))
}

/// `terraform apply -parallelism=P` of the n pets from an empty state.
fn terraform_pets(
    dir: &std::path::Path,
    n: usize,
    parallelism: usize,
    gogc: Gogc,
) -> anyhow::Result<kraken_tests::bench::Watched> {
    let _ = std::fs::remove_file(dir.join("terraform.tfstate"));
    let p = format!("-parallelism={parallelism}");
    let args = ["apply", "-auto-approve", "-input=false", &p, "-no-color"];
    let run = kraken_tests::bench::terraform_watched(dir, &args, gogc, &[0])?;
    let state = std::fs::read_to_string(dir.join("terraform.tfstate"))?;
    let state: serde_json::Value = serde_json::from_str(&state)?;
    let count = state["resources"][0]["instances"]
        .as_array()
        .map_or(0, Vec::len);
    ensure!(count == n, "terraform created {count} of {n}");
    Ok(run)
}

/// Per level: Kraken's and Terraform's wall times, every repetition.
type PetRuns = Vec<(usize, Vec<Duration>, Vec<Duration>)>;

async fn versus_terraform(env: &TestEnv) -> anyhow::Result<()> {
    let n = knob("KRAKEN_BENCH_PETS", 1000, 10)?;
    let reps = knob("KRAKEN_BENCH_REPS", 3, 1)?;
    let (levels, gogc) = (kraken_tests::bench::levels()?, Gogc::from_env()?);
    let random = env.provider("random")?;
    let dir = kraken_tests::scratch_dir("bench-tf-")?;
    std::fs::write(
        dir.path().join("main.tf"),
        format!(
            "terraform {{\n  required_providers {{\n    random = {{\n      source  = \"hashicorp/random\"\n      version = \"{}\"\n    }}\n  }}\n}}\n\nresource \"random_pet\" \"p\" {{\n  count = {n}\n}}\n",
            random.version
        ),
    )?;
    kraken_tests::bench::terraform(dir.path(), &["init", "-input=false", "-no-color"])?;
    let mut runs: PetRuns = levels.iter().map(|l| (*l, vec![], vec![])).collect();
    let (mut ours_seen, mut theirs_seen) = (BTreeSet::new(), BTreeSet::new());
    for rep in 1..=reps {
        for (level, ours, theirs) in &mut runs {
            let (k, seen) = kraken_pets(&random, n, *level, gogc).await?;
            ours_seen.extend(seen);
            let t = terraform_pets(dir.path(), n, *level, gogc)?;
            theirs_seen.extend(t.seen);
            eprintln!(
                "rep {rep}/{reps}, parallelism {level}: Kraken {:.2} s, Terraform {:.2} s",
                k.as_secs_f64(),
                t.took.as_secs_f64()
            );
            ours.push(k);
            theirs.push(t.took);
        }
    }
    let same = fair::same_provider(&random.path, gogc, &ours_seen, &theirs_seen)?;
    print_pets(env, n, reps, &runs, &[gogc.describe(), same.to_string()])
}

fn print_pets(
    env: &TestEnv,
    n: usize,
    reps: usize,
    runs: &PetRuns,
    fairness: &[String],
) -> anyhow::Result<()> {
    println!(
        "\n### {n} random_pet created at the same parallelism, {reps} interleaved runs (median wall time)\n"
    );
    for line in fairness {
        println!("- {line}");
    }
    println!("\n| client | parallelism | median s | runs (s) | resources/s |");
    println!("|---|---|---|---|---|");
    let fmt_runs = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let tf = env.var("KRAKEN_TEST_TERRAFORM_VERSION")?;
    let mut ratios = Ratios::default();
    for (level, ours, theirs) in runs {
        let (o, t) = (percentile_of(ours), percentile_of(theirs));
        for (who, v, mid) in [
            (
                format!("Kraken plugin host, {level} RPCs in flight"),
                ours,
                o,
            ),
            (
                format!("terraform {tf} apply -parallelism={level}"),
                theirs,
                t,
            ),
        ] {
            println!(
                "| {who} | {level} | {:.2} | {} | {:.0} |",
                mid.as_secs_f64(),
                fmt_runs(v),
                n as f64 / mid.as_secs_f64()
            );
        }
        ratios.add(
            &format!("{n} random_pet created"),
            *level,
            o.as_secs_f64(),
            t.as_secs_f64(),
        )?;
    }
    ratios.print(fairness)
}

/// The median of unsorted samples.
fn percentile_of(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    percentile(&v, 0.5)
}

fn main() -> anyhow::Result<()> {
    kraken_tests::bench::knobs::start("provider")?;
    // `cargo bench` passes `--bench`; a filter argument selects sections.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wants = |s: &str| filter.is_empty() || filter.iter().any(|f| s.contains(f.as_str()));
    let env = TestEnv::load()?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        println!(
            "## Plugin host benchmark ({} cores)",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        if wants("startup") {
            startup(&env).await?;
        }
        if wants("latency") {
            latencies(&env).await?;
        }
        if wants("terraform") {
            versus_terraform(&env).await?;
        }
        Ok(())
    })
}

//! Plugin-host benchmark: `cargo bench -p kraken-tests --bench provider`.
//!
//! Prints markdown tables (copied into `docs/benchmarks.md`):
//! 1. provider start-up, spawn to the first answered RPC (GetProviderSchema), per test provider;
//! 2. p50/p99 of ReadResource, PlanResourceChange and ApplyResourceChange through Kraken's
//!    `Provider` trait on `random_pet` and `time_static`, beside the same RPC sent as a
//!    pre-encoded request on the raw gRPC client, and the mean CPU time of Kraken's translation
//!    for that RPC (msgpack encode of the request values, decode of the response value);
//! 3. 1,000 `random_pet` planned and applied at concurrency 10 through Kraken, beside
//!    `terraform apply -parallelism=10` creating the same 1,000 with the same provider binary,
//!    repeated and interleaved in one run.
//!
//! Knobs: `KRAKEN_BENCH_RPCS` (samples per RPC, default 300), `KRAKEN_BENCH_PETS` (default
//! 1000), `KRAKEN_BENCH_REPS` (repetitions of the 1,000-pet comparison, default 3).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kraken_bridge::provider::lifecycle::{self, Action};
use kraken_bridge::provider::{
    DiagnosticsExt as _, LaunchOptions, PlanRequest, Plugin, ProviderHost,
    REPORTED_TERRAFORM_VERSION, ReadRequest, launch, proposed::proposed_new,
};
use kraken_bridge::value::kube::from_kube_json;
use kraken_bridge::value::{Value, msgpack};
use kraken_proto::tfplugin5;
use kraken_tests::{ProviderBin, TestEnv};
use serde_json::json;

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

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

fn host(p: &ProviderBin, concurrency: usize) -> Arc<ProviderHost> {
    let mut opts = LaunchOptions::new(&p.path);
    opts.name = p.address.clone();
    Arc::new(ProviderHost::new(opts, concurrency))
}

async fn startup(env: &TestEnv) -> anyhow::Result<()> {
    let runs = 10;
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

/// Mean time of `f` over enough iterations to be stable on a noisy machine.
fn mean_of(mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Duration> {
    const ITERATIONS: u32 = 20_000;
    for _ in 0..1000 {
        f()?;
    }
    let started = Instant::now();
    for _ in 0..ITERATIONS {
        f()?;
    }
    Ok(started.elapsed() / ITERATIONS)
}

async fn rpc_latency(
    p: &ProviderBin,
    type_name: &str,
    cfg: serde_json::Value,
    n: usize,
) -> anyhow::Result<Rpcs> {
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
    let created = lifecycle::apply(provider.as_ref(), &plan).await?;
    let state = created.new_state;

    let mut out = Rpcs {
        read: vec![],
        plan: vec![],
        apply: vec![],
        raw_read: vec![],
        raw_plan: vec![],
        translate_read: Duration::ZERO,
        translate_plan: Duration::ZERO,
    };
    let proposed = proposed_new(block, &state, &config);
    let mut raw = tfplugin5::provider_client::ProviderClient::new(client.channel.clone());
    let dv = |v: &Value| -> anyhow::Result<tfplugin5::DynamicValue> {
        Ok(tfplugin5::DynamicValue {
            msgpack: msgpack::encode(v, &ty)?,
            json: vec![],
        })
    };
    let raw_read_req = tfplugin5::read_resource::Request {
        type_name: type_name.into(),
        current_state: Some(dv(&state)?),
        ..Default::default()
    };
    let raw_plan_req = tfplugin5::plan_resource_change::Request {
        type_name: type_name.into(),
        prior_state: Some(dv(&state)?),
        proposed_new_state: Some(dv(&proposed)?),
        config: Some(dv(&config)?),
        ..Default::default()
    };
    for _ in 0..n {
        let t = Instant::now();
        provider
            .read_resource(ReadRequest {
                type_name: type_name.into(),
                current_state: state.clone(),
                private: vec![],
            })
            .await?;
        out.read.push(t.elapsed());

        let t = Instant::now();
        raw.read_resource(raw_read_req.clone()).await?;
        out.raw_read.push(t.elapsed());

        let t = Instant::now();
        provider
            .plan_resource_change(PlanRequest {
                type_name: type_name.into(),
                prior_state: state.clone(),
                proposed_new_state: proposed.clone(),
                config: config.clone(),
                prior_private: vec![],
            })
            .await?;
        out.plan.push(t.elapsed());

        let t = Instant::now();
        raw.plan_resource_change(raw_plan_req.clone()).await?;
        out.raw_plan.push(t.elapsed());

        // Apply measured on creates (the common write); each creates a new object.
        let t = Instant::now();
        let applied = lifecycle::apply(provider.as_ref(), &plan).await?;
        out.apply.push(t.elapsed());
        ensure!(
            !applied.diagnostics.has_errors(),
            "{}",
            applied.diagnostics.error_summary()
        );
    }
    let read_resp = raw.read_resource(raw_read_req.clone()).await?.into_inner();
    let plan_resp = raw
        .plan_resource_change(raw_plan_req.clone())
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
        std::hint::black_box(msgpack::encode(&state, &ty)?);
        std::hint::black_box(msgpack::decode(&read_bytes, &ty)?);
        Ok(())
    })?;
    out.translate_plan = mean_of(|| {
        for v in [&state, &proposed, &config] {
            std::hint::black_box(msgpack::encode(v, &ty)?);
        }
        std::hint::black_box(msgpack::decode(&plan_bytes, &ty)?);
        Ok(())
    })?;
    client.shutdown().await;
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
    let n = env_usize("KRAKEN_BENCH_RPCS", 300);
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

async fn kraken_pets(p: &ProviderBin, n: usize, concurrency: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let host = host(p, concurrency);
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
    host.shutdown().await;
    Ok(started.elapsed())
}

fn terraform_pets(env: &TestEnv, dir: &std::path::Path, n: usize) -> anyhow::Result<Duration> {
    let tf = env.path("KRAKEN_TEST_TERRAFORM")?;
    let rc = env.path("KRAKEN_TEST_TF_CLI_CONFIG")?;
    let _ = std::fs::remove_file(dir.join("terraform.tfstate"));
    let started = Instant::now();
    let out = std::process::Command::new(&tf)
        .current_dir(dir)
        .env("TF_CLI_CONFIG_FILE", &rc)
        .env("TF_IN_AUTOMATION", "1")
        .args([
            "apply",
            "-auto-approve",
            "-input=false",
            "-parallelism=10",
            "-no-color",
        ])
        .output()?;
    let elapsed = started.elapsed();
    if !out.status.success() {
        bail!(
            "terraform apply failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let state = std::fs::read_to_string(dir.join("terraform.tfstate"))?;
    let state: serde_json::Value = serde_json::from_str(&state)?;
    let count = state["resources"][0]["instances"]
        .as_array()
        .map_or(0, Vec::len);
    ensure!(count == n, "terraform created {count} of {n}");
    Ok(elapsed)
}

async fn versus_terraform(env: &TestEnv) -> anyhow::Result<()> {
    let n = env_usize("KRAKEN_BENCH_PETS", 1000);
    let reps = env_usize("KRAKEN_BENCH_REPS", 3);
    let random = env.provider("random")?;
    let dir = kraken_tests::scratch_dir("bench-tf-")?;
    std::fs::write(
        dir.path().join("main.tf"),
        format!(
            "terraform {{\n  required_providers {{\n    random = {{\n      source  = \"hashicorp/random\"\n      version = \"{}\"\n    }}\n  }}\n}}\n\nresource \"random_pet\" \"p\" {{\n  count = {n}\n}}\n",
            random.version
        ),
    )?;
    let init = std::process::Command::new(env.path("KRAKEN_TEST_TERRAFORM")?)
        .current_dir(dir.path())
        .env("TF_CLI_CONFIG_FILE", env.path("KRAKEN_TEST_TF_CLI_CONFIG")?)
        .args(["init", "-input=false", "-no-color"])
        .output()?;
    if !init.status.success() {
        bail!(
            "terraform init failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
    }
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..reps {
        ours.push(kraken_pets(&random, n, 10).await?);
        theirs.push(terraform_pets(env, dir.path(), n)?);
    }
    ours.sort();
    theirs.sort();
    let (o, t) = (percentile(&ours, 0.5), percentile(&theirs, 0.5));
    println!(
        "\n### {n} random_pet created at concurrency 10, {reps} interleaved runs (median wall time)\n"
    );
    println!("| client | median s | runs (s) | resources/s |");
    println!("|---|---|---|---|");
    let fmt_runs = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "| Kraken plugin host | {:.2} | {} | {:.0} |",
        o.as_secs_f64(),
        fmt_runs(&ours),
        n as f64 / o.as_secs_f64()
    );
    println!(
        "| terraform {} apply -parallelism=10 | {:.2} | {} | {:.0} |",
        env.var("KRAKEN_TEST_TERRAFORM_VERSION")?,
        t.as_secs_f64(),
        fmt_runs(&theirs),
        n as f64 / t.as_secs_f64()
    );
    println!(
        "\nKraken / Terraform wall time: {:.3} (target < 0.2)",
        o.as_secs_f64() / t.as_secs_f64()
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
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

//! The markdown tables. Medians of the runs; every sample is shown beside its median so a
//! noisy run is visible. Memory in MB and KB (10^6, 10^3 bytes), the units of the targets.
//! This file holds the header, the throughput and change tables and the Kraken / Terraform
//! ratios; the others are in `tables.rs`.

use std::time::Duration;

use kraken_tests::TestEnv;

use kraken_tests::bench::Ratios;

use crate::{Config, Key, Measured, Prov, Results, tables};

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

pub fn percentile(v: &[Duration], p: f64) -> Option<Duration> {
    let mut v = v.to_vec();
    v.sort();
    let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(idx.min(v.len().saturating_sub(1))).copied()
}

fn list(v: &[f64], digits: usize) -> String {
    if v.is_empty() {
        return "—".into();
    }
    v.iter()
        .map(|x| format!("{x:.digits$}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn opt(v: Option<f64>, digits: usize) -> String {
    // `+ 0.0` turns a negative zero (a difference of equal counters) into 0.
    v.map_or("—".into(), |x| format!("{:.digits$}", x + 0.0))
}

pub fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// The first line of a command's output, or "?".
fn version_of(cmd: &std::path::Path, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "?".into())
}

/// The machine and versions, at the top.
pub fn machine(env: &TestEnv, cfg: &Config) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU".to_string(), |(_, m)| m.trim().to_string());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = kraken_tests::status_kib(&meminfo, "MemTotal:").unwrap_or(0) as f64 / 1048576.0;
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let rev = std::process::Command::new("git")
        .current_dir(kraken_tests::repo_root())
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let var = |k: &str| env.var(k).unwrap_or_else(|_| "?".into());
    println!("## Operator benchmark\n");
    println!("- machine: {nproc} × {model}, {mem_gib:.1} GiB");
    println!(
        "- kube-apiserver {}, etcd {}, terraform {}, kraken {rev}",
        var("KRAKEN_TEST_KUBE_VERSION"),
        var("KRAKEN_TEST_ETCD_VERSION"),
        var("KRAKEN_TEST_TERRAFORM_VERSION"),
    );
    if let Ok(k) = env.path("KRAKEN_TEST_KUBECTL") {
        println!("- kubectl: {}", version_of(&k, &["version", "--client"]));
    }
    let levels: Vec<String> = cfg.levels.iter().map(ToString::to_string).collect();
    println!(
        "- parallelism levels {}: at each P, `kraken operator --no-leader-elect --concurrency P {}` with the ProviderConfig's `maxConcurrency: P`, and `terraform apply -parallelism=P`",
        levels.join(", "),
        cfg.gogc.operator_args().join(" ")
    );
    println!("- {}", cfg.gogc.describe());
    println!(
        "- operator RUST_LOG={}; kubectl: {} processes × {} documents{}",
        cfg.rust_log,
        cfg.kubectl_parallel,
        cfg.batch,
        if kraken_tests::bench::smoke() {
            "; **smoke run: tiny sizes, not a measurement**"
        } else {
            ""
        }
    );
    for b in &cfg.operators {
        println!(
            "- operator build `{}`: {} {}",
            b.label,
            b.bin.display(),
            b.args.join(" ")
        );
    }
}

/// Every table with something in it, then the ratios; fails when a comparison that ran has
/// nothing to compare (a ratio of missing numbers).
pub fn print(cfg: &Config, r: &Results) -> anyhow::Result<()> {
    if !r.plumbing.is_empty() {
        tables::plumbing(r);
    }
    if !r.drift.is_empty() {
        tables::drift(r);
    }
    if r.measured.is_empty() {
        return Ok(());
    }
    throughput(cfg, &r.measured);
    tables::memory(cfg, &r.measured);
    tables::writes(cfg, &r.measured);
    tables::requests(cfg, &r.measured);
    changes(cfg, &r.measured);
    tables::plans(cfg, &r.measured);
    let ratios = ratios(cfg, &r.measured)?;
    if ratios.is_empty() {
        return Ok(());
    }
    let mut fairness = vec![cfg.gogc.describe()];
    fairness.extend(r.fairness.iter().cloned());
    ratios.print(&fairness)
}

/// Kraken / Terraform at each level: the create (kubectl in front, and the backlog: the
/// operator alone), and one change (against Terraform's full apply and its targeted one).
fn ratios(cfg: &Config, ms: &[Measured]) -> anyhow::Result<Ratios> {
    let mut out = Ratios::default();
    let secs = |v: Vec<Duration>| median(v.iter().map(Duration::as_secs_f64).collect());
    for m in ms {
        let (prov, n) = (m.prov().name(), m.n);
        for key in &cfg.keys() {
            let level = key.level;
            let (Some(tf), Some(k)) = (
                secs(Measured::at(&m.terraform, level)),
                median(m.kraken_of(key).map(|r| r.total.as_secs_f64()).collect()),
            ) else {
                continue;
            };
            out.add(
                &format!(
                    "{prov}: create {n}, `kubectl apply` → all Ready ({})",
                    key.build
                ),
                level,
                k,
                tf,
            )?;
            if let Some(b) = median(m.backlog_of(key).map(|r| r.total.as_secs_f64()).collect()) {
                out.add(
                    &format!(
                        "{prov}: create {n}, backlog, the operator alone ({})",
                        key.build
                    ),
                    level,
                    b,
                    tf,
                )?;
            }
            change_ratios(m, key, &mut out)?;
        }
    }
    Ok(out)
}

fn change_ratios(m: &Measured, key: &Key, out: &mut Ratios) -> anyhow::Result<()> {
    let (prov, n) = (m.prov().name(), m.n);
    let Some((_, c)) = m.kraken_change.iter().find(|(k, _)| k == key) else {
        return Ok(());
    };
    let Some(k) = percentile(&c.latencies, 0.5) else {
        return Ok(());
    };
    for (what, list) in [
        ("`terraform apply`", &m.tf_change),
        (
            "`terraform apply -refresh=false -target=…`",
            &m.tf_change_targeted,
        ),
    ] {
        let tf = Measured::at(list, key.level);
        if let Some(t) = median(tf.iter().map(Duration::as_secs_f64).collect()) {
            out.add(
                &format!(
                    "{prov}: one change among {n}, p50 ({}) vs {what}",
                    key.build
                ),
                key.level,
                k.as_secs_f64(),
                t,
            )?;
        }
    }
    Ok(())
}

/// One row of the throughput table: a side's wall times.
struct Side {
    name: String,
    /// The parallelism level it ran at (none for kubectl alone).
    level: Option<usize>,
    runs: Vec<f64>,
    /// The kubectl apply's own end, for create runs with kubectl in front.
    kubectl_done: Option<f64>,
}

fn sides(cfg: &Config, m: &Measured) -> Vec<Side> {
    let mut out = Vec::new();
    for &level in &cfg.levels {
        for key in cfg.keys().iter().filter(|k| k.level == level) {
            let runs: Vec<&crate::kraken::CreateRun> = m.kraken_of(key).collect();
            if !runs.is_empty() {
                out.push(Side {
                    name: format!("Kraken {} (kubectl apply → all Ready)", key.build),
                    level: Some(level),
                    runs: runs.iter().map(|r| r.total.as_secs_f64()).collect(),
                    kubectl_done: median(runs.iter().map(|r| r.apply.as_secs_f64()).collect()),
                });
            }
            let backlog: Vec<f64> = m.backlog_of(key).map(|r| r.total.as_secs_f64()).collect();
            if !backlog.is_empty() {
                out.push(Side {
                    name: format!("Kraken {} backlog (operator start → all Ready)", key.build),
                    level: Some(level),
                    runs: backlog,
                    kubectl_done: None,
                });
            }
        }
        let runs: Vec<f64> = Measured::at(&m.terraform, level)
            .iter()
            .map(Duration::as_secs_f64)
            .collect();
        if !runs.is_empty() {
            out.push(Side {
                name: format!("terraform apply -parallelism={level}"),
                level: Some(level),
                runs,
                kubectl_done: None,
            });
        }
    }
    if !m.ceiling.is_empty() {
        out.push(Side {
            name: "kubectl alone, no operator (the load generator's ceiling)".into(),
            level: None,
            runs: m.ceiling.iter().map(|c| c.seen_all.as_secs_f64()).collect(),
            kubectl_done: median(m.ceiling.iter().map(|c| c.apply.as_secs_f64()).collect()),
        });
    }
    out
}

fn spread(v: &[f64]) -> Option<f64> {
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    let mid = median(v.to_vec())?;
    (mid > 0.0).then(|| (hi - lo) / mid * 100.0)
}

fn throughput(cfg: &Config, ms: &[Measured]) {
    println!("\n### Create N resources until all Ready (median of interleaved runs)\n");
    println!(
        "| provider | N | side | parallelism | median s | runs (s) | spread % | kubectl done s | res/s | ÷ terraform at the same parallelism |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for m in ms {
        let all = sides(cfg, m);
        for side in &all {
            let mid = median(side.runs.clone());
            let tf = side.level.and_then(|p| {
                let t = Measured::at(&m.terraform, p);
                median(t.iter().map(Duration::as_secs_f64).collect())
            });
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                m.prov().name(),
                m.n,
                side.name,
                side.level.map_or("—".into(), |p| p.to_string()),
                opt(mid, 2),
                list(&side.runs, 2),
                opt(spread(&side.runs), 0),
                opt(side.kubectl_done, 2),
                opt(mid.map(|s| m.n as f64 / s), 0),
                mid.zip(tf)
                    .map_or("—".into(), |(k, t)| kraken_tests::bench::fair::fmt_ratio(
                        k / t
                    ))
            );
        }
    }
}

fn changes(cfg: &Config, ms: &[Measured]) {
    if ms.iter().all(|m| {
        m.kraken_change.is_empty() && m.tf_change.is_empty() && m.tf_change_targeted.is_empty()
    }) {
        return;
    }
    println!(
        "\n### One changed resource among N (Kraken: {} changes, `kubectl apply` → Ready at the new generation; target p50 < 1 s)\n",
        cfg.changes
    );
    println!(
        "| provider | N | change | side | parallelism | p50 ms | p90 ms | max ms | samples | kubectl alone p50 ms | API writes per change (Events) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for m in ms {
        let row =
            |side: &str, level: usize, v: &[Duration], kubectl: Option<f64>, writes: String| {
                let at = |p: f64| percentile(v, p).map(|d| d.as_secs_f64() * 1e3);
                println!(
                    "| {} | {} | {} | {side} | {level} | {} | {} | {} | {} | {} | {writes} |",
                    m.prov().name(),
                    m.n,
                    Prov::change(m.prov()),
                    opt(at(0.5), 0),
                    opt(at(0.9), 0),
                    opt(at(1.0), 0),
                    v.len(),
                    opt(kubectl, 0),
                );
            };
        for &level in &cfg.levels {
            for (key, c) in m.kraken_change.iter().filter(|(k, _)| k.level == level) {
                let k = c.latencies.len().max(1) as f64;
                row(
                    &format!("Kraken {}", key.build),
                    level,
                    &c.latencies,
                    percentile(&c.kubectl, 0.5).map(|d| d.as_secs_f64() * 1e3),
                    format!("{:.2} ({:.2})", c.delta.total() / k, c.delta.events() / k),
                );
            }
            for (side, list) in [
                ("terraform apply (refreshes all N)", &m.tf_change),
                (
                    "terraform apply -refresh=false -target=…",
                    &m.tf_change_targeted,
                ),
            ] {
                let v = Measured::at(list, level);
                if !v.is_empty() {
                    row(side, level, &v, None, "—".into());
                }
            }
        }
    }
}

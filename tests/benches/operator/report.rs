//! The markdown tables. Medians of the runs; every sample is shown beside its median so a
//! noisy run is visible. Memory in MB and KB (10^6, 10^3 bytes), the units of the targets.

use std::time::Duration;

use kraken_tests::TestEnv;

use crate::{Config, Measured, Prov, Results};

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

fn percentile(v: &[Duration], p: f64) -> Option<Duration> {
    let mut v = v.to_vec();
    v.sort();
    let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(idx.min(v.len().saturating_sub(1))).copied()
}

fn secs(v: &[Duration]) -> Vec<f64> {
    v.iter().map(Duration::as_secs_f64).collect()
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

fn opt(v: Option<f64>, digits: usize) -> String {
    // `+ 0.0` turns a negative zero (a difference of equal counters) into 0.
    v.map_or("—".into(), |x| format!("{:.digits$}", x + 0.0))
}

fn mb(bytes: u64) -> f64 {
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
    println!(
        "- operator: `--no-leader-elect --concurrency {}`, RUST_LOG={}; kubectl: {} processes × {} documents",
        cfg.concurrency, cfg.rust_log, cfg.kubectl_parallel, cfg.batch
    );
}

/// Every table with something in it.
pub fn print(cfg: &Config, r: &Results) {
    if !r.plumbing.is_empty() {
        plumbing(r);
    }
    if !r.drift.is_empty() {
        drift(r);
    }
    if !r.measured.is_empty() {
        throughput(&r.measured);
        if r.measured.iter().any(|m| !m.kraken.is_empty()) {
            memory(&r.measured);
            writes(&r.measured);
        }
        changes(cfg, &r.measured);
    }
}

fn plumbing(r: &Results) {
    println!("\n### Plumbing (no operator): applies, watch, RSS sampler\n");
    println!(
        "| provider | objects | kubectl apply s | objects/s | watch saw all s | change: kubectl ms | change seen ms | API server RSS MB | children sampled MB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for p in &r.plumbing {
        println!(
            "| {} | {} | {:.2} | {:.0} | {:.2} | {:.0} | {:.0} | {:.1} | {:.1} |",
            p.prov.name(),
            p.n,
            p.apply.as_secs_f64(),
            p.n as f64 / p.apply.as_secs_f64(),
            p.seen_all.as_secs_f64(),
            p.change_kubectl.as_secs_f64() * 1e3,
            p.change_seen.as_secs_f64() * 1e3,
            mb(p.apiserver.rss),
            mb(p.children_rss)
        );
    }
}

fn drift(r: &Results) {
    println!("\n### No-op drift checks (target: 0 API writes)\n");
    println!(
        "| provider | objects | driftInterval | window s | reconciles (checks) | API writes | of which Events | writes per check |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (prov, d) in &r.drift {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.3} |",
            prov.name(),
            d.n,
            d.interval,
            d.window.as_secs_f64(),
            d.delta.reconciles,
            d.delta.total(),
            d.delta.events(),
            d.delta.total() / d.delta.reconciles.max(1.0)
        );
    }
}

fn target_ratio(n: usize) -> &'static str {
    match n {
        1000 => "< 1",
        10_000 => "≤ 0.33",
        _ => "—",
    }
}

fn throughput(ms: &[Measured]) {
    println!("\n### Create N resources until all Ready (median of interleaved runs)\n");
    println!(
        "| provider | N | Kraken s | runs (s) | kubectl done s | Kraken res/s | terraform s | runs (s) | terraform res/s | Kraken / Terraform | target |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for m in ms {
        let k: Vec<f64> = m.kraken.iter().map(|r| r.total.as_secs_f64()).collect();
        let kubectl: Vec<f64> = m.kraken.iter().map(|r| r.apply.as_secs_f64()).collect();
        let t = secs(&m.terraform);
        let (km, tm) = (median(k.clone()), median(t.clone()));
        let rate = |s: Option<f64>| s.map(|s| m.n as f64 / s);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            m.prov.name(),
            m.n,
            opt(km, 2),
            list(&k, 2),
            opt(median(kubectl), 2),
            opt(rate(km), 0),
            opt(tm, 2),
            list(&t, 2),
            opt(rate(tm), 0),
            opt(km.zip(tm).map(|(k, t)| k / t), 3),
            target_ratio(m.n)
        );
    }
}

fn memory(ms: &[Measured]) {
    println!(
        "\n### Operator memory (targets: idle < 40 MB, < 4 KB per managed resource; median of runs)\n"
    );
    println!(
        "| provider | N | RSS idle MB | RSS at N MB | KB per resource (vs idle) | KB per resource (marginal, vs the previous N) | peak (VmHWM) MB | provider processes MB | managed (gauge) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let loaded = |m: &Measured| median(m.kraken.iter().map(|r| r.loaded.rss as f64).collect());
    for (i, m) in ms.iter().enumerate().filter(|(_, m)| !m.kraken.is_empty()) {
        let col =
            |f: &dyn Fn(&crate::kraken::CreateRun) -> f64| median(m.kraken.iter().map(f).collect());
        // The slope between two sizes leaves out what any N costs once (the provider's
        // schema, connections, the first reconcile's allocations).
        let previous = ms[..i]
            .iter()
            .rev()
            .find(|p| p.prov == m.prov && !p.kraken.is_empty() && p.n < m.n);
        let marginal = previous.and_then(|p| {
            let (a, b) = (loaded(p)?, loaded(m)?);
            Some((b - a) / 1e3 / (m.n - p.n) as f64)
        });
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            m.prov.name(),
            m.n,
            opt(col(&|r| mb(r.idle.rss)), 1),
            opt(col(&|r| mb(r.loaded.rss)), 1),
            opt(
                col(&|r| (r.loaded.rss as f64 - r.idle.rss as f64) / 1e3 / m.n as f64),
                2
            ),
            opt(marginal, 2),
            opt(col(&|r| mb(r.loaded.hwm)), 1),
            opt(col(&|r| mb(r.loaded.children_rss)), 1),
            opt(col(&|r| r.delta.managed), 0)
        );
    }
}

fn writes(ms: &[Measured]) {
    println!(
        "\n### API writes per created resource (target ≤ 4; Lease renewals excluded; median of runs)\n"
    );
    println!(
        "| provider | N | writes / resource | of which Events | without Events | reconciles / resource | by resource and verb, per resource (last run) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for m in ms.iter().filter(|m| !m.kraken.is_empty()) {
        let n = m.n as f64;
        let col =
            |f: &dyn Fn(&crate::kraken::CreateRun) -> f64| median(m.kraken.iter().map(f).collect());
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            m.prov.name(),
            m.n,
            opt(col(&|r| r.delta.total() / n), 2),
            opt(col(&|r| r.delta.events() / n), 2),
            opt(col(&|r| (r.delta.total() - r.delta.events()) / n), 2),
            opt(col(&|r| r.delta.reconciles / n), 2),
            m.kraken.last().map_or("—".into(), |r| r.delta.breakdown(n))
        );
    }
}

fn changes(cfg: &Config, ms: &[Measured]) {
    if ms
        .iter()
        .all(|m| m.kraken_change.is_none() && m.tf_change.is_empty())
    {
        return;
    }
    println!(
        "\n### One changed resource among N (Kraken: {} changes, `kubectl apply` → Ready at the new generation; target p50 < 1 s)\n",
        cfg.changes
    );
    println!(
        "| provider | N | change | Kraken p50 ms | p90 ms | max ms | kubectl alone p50 ms | API writes per change (Events) | terraform apply s | runs (s) | Kraken p50 / Terraform |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for m in ms {
        let c = m.kraken_change.as_ref();
        let ms_at = |p: f64| {
            c.and_then(|c| percentile(&c.latencies, p))
                .map(|d| d.as_secs_f64() * 1e3)
        };
        let t = secs(&m.tf_change);
        let tm = median(t.clone());
        let per_change = c.map(|c| {
            let k = c.latencies.len().max(1) as f64;
            format!("{:.2} ({:.2})", c.delta.total() / k, c.delta.events() / k)
        });
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            m.prov.name(),
            m.n,
            Prov::change(m.prov),
            opt(ms_at(0.5), 0),
            opt(ms_at(0.9), 0),
            opt(ms_at(1.0), 0),
            opt(
                c.and_then(|c| percentile(&c.kubectl, 0.5))
                    .map(|d| d.as_secs_f64() * 1e3),
                0
            ),
            per_change.unwrap_or_else(|| "—".into()),
            opt(tm, 2),
            list(&t, 2),
            opt(ms_at(0.5).zip(tm).map(|(k, t)| k / 1e3 / t), 4)
        );
    }
}

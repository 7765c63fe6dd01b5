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
    for b in &cfg.operators {
        println!("- operator build `{}`: {}", b.label, b.bin.display());
    }
    println!(
        "- terraform: -parallelism {}",
        cfg.tf_parallelism
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
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
        throughput(cfg, &r.measured);
        memory(cfg, &r.measured);
        writes(cfg, &r.measured);
        requests(cfg, &r.measured);
        changes(cfg, &r.measured);
        plans(cfg, &r.measured);
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
        "| provider | build | objects | driftInterval | window s | reconciles (checks) | API writes | of which Events | writes per check |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (prov, build, d) in &r.drift {
        println!(
            "| {} | {build} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.3} |",
            prov.name(),
            d.n,
            d.interval,
            d.window.as_secs_f64(),
            d.delta.reconciles,
            // `+ 0.0`: a difference of equal counters is -0, shown as "-0".
            d.delta.total() + 0.0,
            d.delta.events() + 0.0,
            d.delta.total() / d.delta.reconciles.max(1.0) + 0.0
        );
    }
}

/// One row of the throughput table: a side's wall times.
struct Side {
    name: String,
    runs: Vec<f64>,
    /// The kubectl apply's own end, for create runs with kubectl in front.
    kubectl_done: Option<f64>,
}

fn sides(cfg: &Config, m: &Measured) -> Vec<Side> {
    let mut out = Vec::new();
    for b in &cfg.operators {
        let runs: Vec<&crate::kraken::CreateRun> = m.kraken_of(&b.label).collect();
        if !runs.is_empty() {
            out.push(Side {
                name: format!("Kraken {} (kubectl apply → all Ready)", b.label),
                runs: runs.iter().map(|r| r.total.as_secs_f64()).collect(),
                kubectl_done: median(runs.iter().map(|r| r.apply.as_secs_f64()).collect()),
            });
        }
        let backlog: Vec<f64> = m
            .backlog
            .iter()
            .filter(|(l, _)| *l == b.label)
            .map(|(_, r)| r.total.as_secs_f64())
            .collect();
        if !backlog.is_empty() {
            out.push(Side {
                name: format!("Kraken {} backlog (operator start → all Ready)", b.label),
                runs: backlog,
                kubectl_done: None,
            });
        }
    }
    if !m.ceiling.is_empty() {
        out.push(Side {
            name: "kubectl alone, no operator (the load generator's ceiling)".into(),
            runs: m.ceiling.iter().map(|c| c.seen_all.as_secs_f64()).collect(),
            kubectl_done: median(m.ceiling.iter().map(|c| c.apply.as_secs_f64()).collect()),
        });
    }
    for &p in &cfg.tf_parallelism {
        let runs: Vec<f64> = m
            .terraform
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|(_, d)| d.as_secs_f64())
            .collect();
        if !runs.is_empty() {
            out.push(Side {
                name: format!("terraform apply -parallelism={p}"),
                runs,
                kubectl_done: None,
            });
        }
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
    let tf: Vec<String> = cfg
        .tf_parallelism
        .iter()
        .map(|p| format!("÷ terraform p={p}"))
        .collect();
    println!(
        "| provider | N | side | median s | runs (s) | spread % | kubectl done s | res/s | {} |",
        tf.join(" | ")
    );
    println!(
        "|---|---|---|---|---|---|---|---|{}",
        "---|".repeat(tf.len())
    );
    for m in ms {
        let all = sides(cfg, m);
        let tf_medians: Vec<Option<f64>> = cfg
            .tf_parallelism
            .iter()
            .map(|p| {
                let name = format!("terraform apply -parallelism={p}");
                all.iter()
                    .find(|s| s.name == name)
                    .and_then(|s| median(s.runs.clone()))
            })
            .collect();
        for side in &all {
            let mid = median(side.runs.clone());
            let ratios: Vec<String> = tf_medians
                .iter()
                .map(|t| opt(mid.zip(*t).map(|(k, t)| k / t), 3))
                .collect();
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                m.prov().name(),
                m.n,
                side.name,
                opt(mid, 2),
                list(&side.runs, 2),
                opt(spread(&side.runs), 0),
                opt(side.kubectl_done, 2),
                opt(mid.map(|s| m.n as f64 / s), 0),
                ratios.join(" | ")
            );
        }
    }
}

fn memory(cfg: &Config, ms: &[Measured]) {
    println!(
        "\n### Memory with N managed resources (targets: idle < 40 MB, < 4 KB per managed resource; median of runs)\n"
    );
    println!(
        "| provider | N | build | RSS idle MB | RSS at N MB | KB per resource (vs idle) | KB per resource (marginal) | peak (VmHWM) MB | provider processes at N MB | operator + providers at N MB | KB per resource incl. providers (vs idle) | managed (gauge) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, m) in ms.iter().enumerate() {
        for b in &cfg.operators {
            let runs: Vec<&crate::kraken::CreateRun> = m.kraken_of(&b.label).collect();
            if runs.is_empty() {
                continue;
            }
            let col = |f: &dyn Fn(&crate::kraken::CreateRun) -> f64| {
                median(runs.iter().map(|r| f(r)).collect())
            };
            let loaded =
                |m: &Measured| median(m.kraken_of(&b.label).map(|r| r.loaded.rss as f64).collect());
            // The slope between two sizes leaves out what any N costs once (the provider's
            // schema, connections, the first reconcile's allocations).
            let previous = ms[..i]
                .iter()
                .rev()
                .find(|p| p.prov == m.prov && p.n < m.n && p.kraken_of(&b.label).next().is_some());
            let marginal = previous.and_then(|p| {
                let (a, c) = (loaded(p)?, loaded(m)?);
                Some((c - a) / 1e3 / (m.n - p.n) as f64)
            });
            let n = m.n as f64;
            let total = |mem: &crate::kraken::Memory| (mem.rss + mem.children_rss) as f64;
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                m.prov().name(),
                m.n,
                b.label,
                opt(col(&|r| mb(r.idle.rss)), 1),
                opt(col(&|r| mb(r.loaded.rss)), 1),
                opt(
                    col(&|r| (r.loaded.rss as f64 - r.idle.rss as f64) / 1e3 / n),
                    2
                ),
                opt(marginal, 2),
                opt(col(&|r| mb(r.loaded.hwm)), 1),
                opt(col(&|r| mb(r.loaded.children_rss)), 1),
                opt(col(&|r| total(&r.loaded) / 1e6), 1),
                opt(col(&|r| (total(&r.loaded) - total(&r.idle)) / 1e3 / n), 2),
                opt(col(&|r| r.delta.managed), 0)
            );
        }
    }
}

fn writes(cfg: &Config, ms: &[Measured]) {
    println!(
        "\n### The operator's API writes per created resource (its `kraken_api_writes_total`; target ≤ 4; median of runs)\n"
    );
    println!(
        "| provider | N | build | run | writes / resource | of which Events | without Events | reconciles / resource | by resource and verb, per resource (last run) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for m in ms {
        let n = m.n as f64;
        for b in &cfg.operators {
            let create: Vec<&crate::kraken::Snapshot> =
                m.kraken_of(&b.label).map(|r| &r.delta).collect();
            let backlog: Vec<&crate::kraken::Snapshot> = m
                .backlog
                .iter()
                .filter(|(l, _)| *l == b.label)
                .map(|(_, r)| &r.delta)
                .collect();
            for (run, snaps) in [("create", create), ("backlog", backlog)] {
                if snaps.is_empty() {
                    continue;
                }
                let col = |f: &dyn Fn(&crate::kraken::Snapshot) -> f64| {
                    median(snaps.iter().map(|s| f(s)).collect())
                };
                println!(
                    "| {} | {} | {} | {run} | {} | {} | {} | {} | {} |",
                    m.prov().name(),
                    m.n,
                    b.label,
                    opt(col(&|s| s.total() / n), 2),
                    opt(col(&|s| s.events() / n), 2),
                    opt(col(&|s| (s.total() - s.events()) / n), 2),
                    opt(col(&|s| s.reconciles / n), 2),
                    snaps.last().map_or("—".into(), |s| s.breakdown(n))
                );
            }
        }
    }
}

const MUTATING: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

/// Per-resource requests of one run: (mutating, reads, "verb resource x.xx, ..." of the
/// mutating ones).
fn per_resource(req: &crate::kraken::Requests, n: f64) -> (f64, f64, String) {
    let (mut writes, mut reads, mut parts) = (0.0, 0.0, Vec::new());
    for ((verb, resource), v) in req {
        if MUTATING.contains(&verb.as_str()) {
            writes += v;
            parts.push(format!("{verb} {resource} {:.2}", v / n));
        } else {
            reads += v;
        }
    }
    (writes / n, reads / n, parts.join(", "))
}

fn requests(cfg: &Config, ms: &[Measured]) {
    println!(
        "\n### The API server's own count (`apiserver_request_total`, every client: kubectl, the operator, the benchmark's watch) per created resource, median of runs\n"
    );
    println!(
        "| provider | N | run | mutating requests / resource | reads (GET, LIST, WATCH) / resource | mutating, by verb and resource (last run) |"
    );
    println!("|---|---|---|---|---|---|");
    for m in ms {
        let n = m.n as f64;
        let mut rows: Vec<(String, Vec<&crate::kraken::Requests>)> = Vec::new();
        for b in &cfg.operators {
            rows.push((
                format!("Kraken {} create (kubectl + operator)", b.label),
                m.kraken_of(&b.label).map(|r| &r.apiserver).collect(),
            ));
            rows.push((
                format!("Kraken {} backlog (operator only)", b.label),
                m.backlog
                    .iter()
                    .filter(|(l, _)| *l == b.label)
                    .map(|(_, r)| &r.apiserver)
                    .collect(),
            ));
        }
        rows.push((
            "kubectl alone".into(),
            m.ceiling.iter().map(|c| &c.apiserver).collect(),
        ));
        for (name, reqs) in rows.into_iter().filter(|(_, r)| !r.is_empty()) {
            let each: Vec<(f64, f64, String)> = reqs.iter().map(|r| per_resource(r, n)).collect();
            println!(
                "| {} | {} | {name} | {} | {} | {} |",
                m.prov().name(),
                m.n,
                opt(median(each.iter().map(|e| e.0).collect()), 2),
                opt(median(each.iter().map(|e| e.1).collect()), 2),
                each.last().map_or("—".into(), |e| e.2.clone())
            );
        }
    }
}

fn plans(cfg: &Config, ms: &[Measured]) {
    if ms.iter().all(|m| m.kraken_plan.is_empty()) {
        return;
    }
    println!(
        "\n### A plan among N (planPolicy: Manual, {} changes: `kubectl apply` → `status.plan` visible, target p50 < 1 s; approval → applied)\n",
        cfg.changes
    );
    println!(
        "| provider | N | build | apply → plan p50 ms | p90 ms | max ms | approve → applied p50 ms | p90 ms | API writes per plan + apply (Events) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for m in ms {
        for (label, p) in &m.kraken_plan {
            let ms_at = |v: &[Duration], q: f64| percentile(v, q).map(|d| d.as_secs_f64() * 1e3);
            let k = p.visible.len().max(1) as f64;
            println!(
                "| {} | {} | {label} | {} | {} | {} | {} | {} | {:.2} ({:.2}) |",
                m.prov().name(),
                m.n,
                opt(ms_at(&p.visible, 0.5), 0),
                opt(ms_at(&p.visible, 0.9), 0),
                opt(ms_at(&p.visible, 1.0), 0),
                opt(ms_at(&p.approved, 0.5), 0),
                opt(ms_at(&p.approved, 0.9), 0),
                p.delta.total() / k,
                p.delta.events() / k,
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
        "| provider | N | change | side | p50 ms | p90 ms | max ms | samples | kubectl alone p50 ms | API writes per change (Events) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for m in ms {
        let row = |side: &str, v: &[Duration], kubectl: Option<f64>, writes: String| {
            let at = |p: f64| percentile(v, p).map(|d| d.as_secs_f64() * 1e3);
            println!(
                "| {} | {} | {} | {side} | {} | {} | {} | {} | {} | {writes} |",
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
        for (label, c) in &m.kraken_change {
            let k = c.latencies.len().max(1) as f64;
            row(
                &format!("Kraken {label}"),
                &c.latencies,
                percentile(&c.kubectl, 0.5).map(|d| d.as_secs_f64() * 1e3),
                format!("{:.2} ({:.2})", c.delta.total() / k, c.delta.events() / k),
            );
        }
        if !m.tf_change.is_empty() {
            row(
                "terraform apply (refreshes all N)",
                &m.tf_change,
                None,
                "—".into(),
            );
        }
        if !m.tf_change_targeted.is_empty() {
            row(
                "terraform apply -refresh=false -target=…",
                &m.tf_change_targeted,
                None,
                "—".into(),
            );
        }
    }
}

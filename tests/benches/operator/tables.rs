//! The operator benchmark's tables beside the throughput and change ones: plumbing, drift
//! checks, memory, API writes, the API server's requests and plans. One row per operator build
//! and parallelism level; medians of the runs.

use std::time::Duration;

use crate::report::{mb, median, opt, percentile};
use crate::{Config, Measured, Results};

pub fn plumbing(r: &Results) {
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

pub fn drift(r: &Results) {
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

pub fn memory(cfg: &Config, ms: &[Measured]) {
    println!(
        "\n### Memory with N managed resources (targets: idle < 40 MB, < 4 KB per managed resource; median of runs)\n"
    );
    println!(
        "| provider | N | build, parallelism | RSS idle MB | RSS at N MB | KB per resource (vs idle) | KB per resource (marginal) | peak (VmHWM) MB | provider processes at N MB | operator + providers at N MB | KB per resource incl. providers (vs idle) | managed (gauge) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, m) in ms.iter().enumerate() {
        for key in &cfg.keys() {
            let runs: Vec<&crate::kraken::CreateRun> = m.kraken_of(key).collect();
            if runs.is_empty() {
                continue;
            }
            let col = |f: &dyn Fn(&crate::kraken::CreateRun) -> f64| {
                median(runs.iter().map(|r| f(r)).collect())
            };
            let loaded =
                |m: &Measured| median(m.kraken_of(key).map(|r| r.loaded.rss as f64).collect());
            // The slope between two sizes leaves out what any N costs once (the provider's
            // schema, connections, the first reconcile's allocations).
            let previous = ms[..i]
                .iter()
                .rev()
                .find(|p| p.prov == m.prov && p.n < m.n && p.kraken_of(key).next().is_some());
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
                key,
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

pub fn writes(cfg: &Config, ms: &[Measured]) {
    println!(
        "\n### The operator's API writes per created resource (its `kraken_api_writes_total`; target ≤ 4; median of runs)\n"
    );
    println!(
        "| provider | N | build, parallelism | run | writes / resource | of which Events | without Events | reconciles / resource | by resource and verb, per resource (last run) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for m in ms {
        let n = m.n as f64;
        for key in &cfg.keys() {
            let create: Vec<&crate::kraken::Snapshot> =
                m.kraken_of(key).map(|r| &r.delta).collect();
            let backlog: Vec<&crate::kraken::Snapshot> =
                m.backlog_of(key).map(|r| &r.delta).collect();
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
                    key,
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

pub fn requests(cfg: &Config, ms: &[Measured]) {
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
        let keys = cfg.keys();
        for key in &keys {
            rows.push((
                format!("Kraken {key} create (kubectl + operator)"),
                m.kraken_of(key).map(|r| &r.apiserver).collect(),
            ));
            rows.push((
                format!("Kraken {key} backlog (operator only)"),
                m.backlog_of(key).map(|r| &r.apiserver).collect(),
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

pub fn plans(cfg: &Config, ms: &[Measured]) {
    if ms.iter().all(|m| m.kraken_plan.is_empty()) {
        return;
    }
    println!(
        "\n### A plan among N (planPolicy: Manual, {} changes: `kubectl apply` → `status.plan` visible, target p50 < 1 s; approval → applied)\n",
        cfg.changes
    );
    println!(
        "| provider | N | build, parallelism | apply → plan p50 ms | p90 ms | max ms | approve → applied p50 ms | p90 ms | API writes per plan + apply (Events) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for m in ms {
        for (key, p) in &m.kraken_plan {
            let ms_at = |v: &[Duration], q: f64| percentile(v, q).map(|d| d.as_secs_f64() * 1e3);
            let k = p.visible.len().max(1) as f64;
            println!(
                "| {} | {} | {key} | {} | {} | {} | {} | {} | {:.2} ({:.2}) |",
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

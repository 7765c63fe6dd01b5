//! The AWS bench's tables: creates and changes of each Kraken pass and each Terraform pass,
//! their memory, and the Kraken / Terraform ratios at each parallelism level.

use std::time::Duration;

use kraken_tests::bench::{Ratios, pct};

use crate::kraken::{KrakenRun, Target};
use crate::terraform::TerraformRun;

const MIB: f64 = 1024.0 * 1024.0;

fn secs(d: &Duration) -> f64 {
    d.as_secs_f64()
}

/// Seconds with one decimal, or `—` when not measured.
pub fn opt(d: Option<Duration>) -> String {
    d.map_or_else(|| "—".to_owned(), |d| format!("{:.1}", d.as_secs_f64()))
}

/// The median of each target's samples, for progress lines.
pub fn p50s(changes: &[(Target, Vec<Duration>)]) -> String {
    let each: Vec<String> = changes
        .iter()
        .map(|(t, v)| format!("{}: {:.2} s", t.label(), secs(&pct(v, 0.5))))
        .collect();
    each.join(", ")
}

fn kraken_samples(r: &KrakenRun, target: Target) -> &[Duration] {
    r.changes
        .iter()
        .find(|(t, _)| *t == target)
        .map_or(&[][..], |(_, v)| v.as_slice())
}

/// Terraform's (full, targeted) samples of `target`.
fn tf_samples(r: &TerraformRun, target: Target) -> (&[Duration], &[Duration]) {
    r.changes
        .iter()
        .find(|(t, _, _)| *t == target)
        .map_or((&[][..], &[][..]), |(_, f, t)| (f.as_slice(), t.as_slice()))
}

fn cell(v: &[Duration]) -> String {
    if v.is_empty() {
        return "—".to_owned();
    }
    format!(
        "{:.3} (p90 {:.3}, n={})",
        secs(&pct(v, 0.5)),
        secs(&pct(v, 0.9)),
        v.len()
    )
}

pub fn timings(n: usize, version: &str, runs: &[KrakenRun], tf: &[TerraformRun]) {
    println!(
        "### {n} aws_instance + {n} aws_sqs_queue + {n} aws_sns_topic against moto (hashicorp/aws {version})\n"
    );
    println!(
        "| tool | parallelism | apply → all Ready s | change: an instance's tag, p50 s | change: a queue's visibility timeout, p50 s | delete all s | API writes per create / per change |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in runs {
        println!(
            "| Kraken {}, `maxConcurrency: {}` | {} | {:.1} | {} | {} | {} | {:.2} / {:.2} |",
            r.build,
            r.concurrency,
            r.concurrency,
            r.ready.iter().max().map(secs).unwrap_or_default(),
            cell(kraken_samples(r, Target::InstanceTag)),
            cell(kraken_samples(r, Target::QueueTimeout)),
            opt(r.deleted),
            r.writes_per_create,
            r.writes_per_change
        );
    }
    for t in tf {
        let (tag_full, tag_targeted) = tf_samples(t, Target::InstanceTag);
        let (q_full, q_targeted) = tf_samples(t, Target::QueueTimeout);
        for (how, tag, queue, apply, destroy) in [
            (
                "`apply` (refresh all, plan, apply)",
                tag_full,
                q_full,
                Some(t.apply),
                t.destroy,
            ),
            (
                "`apply -refresh=false -target=…`",
                tag_targeted,
                q_targeted,
                None,
                None,
            ),
        ] {
            println!(
                "| Terraform 1.8.5, `-parallelism={p}`, a change as {how} | {p} | {} | {} | {} | {} | — |",
                opt(apply),
                cell(tag),
                cell(queue),
                opt(destroy),
                p = t.parallelism,
            );
        }
    }
    let moto: Vec<String> = runs.iter().map(|r| format!("{:.1}", r.moto_ms)).collect();
    println!(
        "\nmoto's own latency, one DescribeInstances, after each Kraken pass: {} ms (median of 21)\n",
        moto.join(", ")
    );
}

pub fn memory(runs: &[KrakenRun], tf: &[TerraformRun]) {
    let mib = |b: u64| format!("{:.0} MiB", b as f64 / MIB);
    println!("| process | idle (before the Provider install) | peak | after the run |");
    println!("|---|---|---|---|");
    for r in runs {
        let at = |i: usize| r.memory.get(i).copied().unwrap_or_default();
        let (op, prov, both) = (at(0), at(1), at(2));
        let c = r.concurrency;
        println!(
            "| Kraken {} operator (release), `maxConcurrency: {c}` | {} | {} | {} |",
            r.build,
            mib(r.operator_idle),
            mib(op.0),
            mib(op.1)
        );
        println!(
            "| its AWS provider process | — | {} | {} |",
            mib(prov.0),
            mib(prov.1)
        );
        println!(
            "| operator + provider, at one instant | | {} ({} MB) | {} |",
            mib(both.0),
            both.0 / 1_000_000,
            mib(both.1)
        );
    }
    for t in tf {
        println!(
            "| terraform + its AWS provider process, `-parallelism={}` | — | {} | — |",
            t.parallelism,
            mib(t.memory.0)
        );
    }
}

/// Kraken / Terraform for each Kraken pass, against Terraform's pass at the same level.
pub fn ratios(runs: &[KrakenRun], tf: &[TerraformRun]) -> anyhow::Result<Ratios> {
    let mut out = Ratios::default();
    for r in runs {
        let Some(t) = tf.iter().find(|t| t.parallelism == r.concurrency) else {
            anyhow::bail!("no Terraform pass at parallelism {}", r.concurrency);
        };
        let level = r.concurrency;
        let created = r.ready.iter().max().map(secs).unwrap_or_default();
        let what = |s: &str| format!("{s} ({})", r.build);
        out.add(
            &what("create all, apply → all Ready"),
            level,
            created,
            secs(&t.apply),
        )?;
        for target in [Target::InstanceTag, Target::QueueTimeout] {
            let k = kraken_samples(r, target);
            let (full, targeted) = tf_samples(t, target);
            if k.is_empty() {
                continue;
            }
            let k = secs(&pct(k, 0.5));
            let label = target.label();
            out.add(
                &what(&format!("change {label}, p50 vs `terraform apply`")),
                level,
                k,
                secs(&pct(full, 0.5)),
            )?;
            out.add(
                &what(&format!(
                    "change {label}, p50 vs `terraform apply -refresh=false -target`"
                )),
                level,
                k,
                secs(&pct(targeted, 0.5)),
            )?;
        }
        if let (Some(k), Some(d)) = (r.deleted, t.destroy) {
            out.add(
                &what("delete all vs `terraform destroy`"),
                level,
                secs(&k),
                secs(&d),
            )?;
        }
    }
    Ok(out)
}

//! The knobs every benchmark shares: the smoke mode CI runs, the parallelism levels at which
//! Kraken and Terraform are paired, and strict parsing, so a typo fails the run instead of
//! quietly measuring a default for an hour.

use std::str::FromStr;

/// The variable that turns the smoke mode on.
pub const SMOKE: &str = "KRAKEN_BENCH_SMOKE";

/// The variable that lists the parallelism levels.
pub const PARALLELISM: &str = "KRAKEN_BENCH_PARALLELISM";

/// Terraform's default `-parallelism`, and the level Kraken's benches are tuned to
/// (`maxConcurrency: 32` in the AWS bench): both sides run at each, in the same run.
pub const DEFAULT_LEVELS: &str = "10,32";

/// `KRAKEN_BENCH_SMOKE=1`: every bench at a tiny size (a handful of objects, one run, one
/// change), still through every code path it has, the Terraform side included, so that CI can
/// run them all in a few minutes and a broken bench fails it.
pub fn smoke() -> bool {
    std::env::var(SMOKE).is_ok_and(|v| v.trim() == "1")
}

/// Checks the shared knobs once at the start of a bench and says on stderr how it runs.
pub fn start(bench: &str) -> anyhow::Result<()> {
    if let Ok(v) = std::env::var(SMOKE) {
        anyhow::ensure!(
            matches!(v.trim(), "" | "0" | "1"),
            "{SMOKE}={v:?}: 1 (smoke run) or 0"
        );
    }
    eprintln!(
        "bench {bench}: {}",
        if smoke() {
            "smoke run (tiny sizes, every code path)"
        } else {
            "full size"
        }
    );
    Ok(())
}

/// `key` parsed, else `full`, or `smoke` in the smoke mode. A set value always wins, so a
/// smoke run can be made a little larger; a malformed one is an error.
pub fn knob<T: FromStr>(key: &str, full: T, smoke_value: T) -> anyhow::Result<T> {
    match std::env::var(key) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("{key}={v:?} is not a valid value")),
        _ => Ok(if smoke() { smoke_value } else { full }),
    }
}

/// A comma-separated list of positive numbers from `key`, else `default`; no duplicates.
pub fn positive_list(key: &str, default: &str) -> anyhow::Result<Vec<usize>> {
    let text = std::env::var(key).unwrap_or_else(|_| default.to_owned());
    let mut out: Vec<usize> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let n = part
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| anyhow::anyhow!("{key}: {part:?} is not a positive number"))?;
        anyhow::ensure!(!out.contains(&n), "{key}: {n} is listed twice");
        out.push(n);
    }
    anyhow::ensure!(!out.is_empty(), "{key} is empty");
    Ok(out)
}

/// `KRAKEN_BENCH_PARALLELISM` (default `10,32`): the levels every Kraken-vs-Terraform
/// comparison runs at. At each, Kraken's concurrency (the operator's `--concurrency`, the
/// ProviderConfig's `maxConcurrency`, `kraken plan --concurrency`, the plugin host's permits)
/// equals Terraform's `-parallelism`. The smoke mode keeps both levels: switching between them
/// is a code path of its own (a new ProviderConfig generation, a new provider process).
pub fn levels() -> anyhow::Result<Vec<usize>> {
    positive_list(PARALLELISM, DEFAULT_LEVELS)
}

/// [`levels`] for a bench that starts a fresh bed at every level: in the smoke mode only the
/// first (unless `KRAKEN_BENCH_PARALLELISM` is set), since a second level on a bed of its own
/// runs no code the first did not.
pub fn levels_on_fresh_beds() -> anyhow::Result<Vec<usize>> {
    let mut levels = levels()?;
    if smoke() && std::env::var_os(PARALLELISM).is_none() {
        levels.truncate(1);
    }
    Ok(levels)
}

/// Fails when a knob that no longer exists is set, naming what replaced it: a stale
/// `KRAKEN_BENCH_CONCURRENCY=64` must not silently run the new defaults.
pub fn retired(knobs: &[(&str, &str)]) -> anyhow::Result<()> {
    for (key, instead) in knobs {
        anyhow::ensure!(std::env::var_os(key).is_none(), "{key} is gone: {instead}");
    }
    Ok(())
}

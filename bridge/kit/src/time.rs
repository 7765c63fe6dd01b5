//! Durations: Go-style duration text (`10m`, `1h30m`) as users write it in specs, jitter for
//! requeues, and the exponential backoff every controller applies to failures.

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::Mutex;
use std::time::Duration;

/// `d` scaled by a random factor in `[1 - spread, 1 + spread]`.
pub fn jitter(d: Duration, spread: f64) -> Duration {
    let r = random_unit();
    d.mul_f64(1.0 - spread + 2.0 * spread * r)
}

/// A number in `[0, 1)` good enough for jitter, without a dependency: std's randomly keyed
/// hasher fed a counter.
fn random_unit() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher_default();
    COUNTER.fetch_add(1, Ordering::Relaxed).hash(&mut h);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

trait BuildHasherDefault {
    fn build_hasher_default(&self) -> std::collections::hash_map::DefaultHasher;
}

impl BuildHasherDefault for std::collections::hash_map::RandomState {
    fn build_hasher_default(&self) -> std::collections::hash_map::DefaultHasher {
        std::hash::BuildHasher::build_hasher(self)
    }
}

/// The shortest `driftInterval` honoured: a shorter one (`1ns`) would make every object a hot
/// loop against its cloud and the API server, for every tenant.
pub const MIN_DRIFT_INTERVAL: Duration = Duration::from_secs(1);

/// When a managed object looks for drift next, from its `driftInterval` (default 10 minutes,
/// at least [`MIN_DRIFT_INTERVAL`], ±10 %): `None` for `0` (drift checks off). An unparsable
/// value (the CRDs' pattern refuses them) counts as the default.
pub fn drift_after(interval: Option<&str>) -> Option<Duration> {
    let default = Duration::from_secs(600);
    match parse_duration(interval.unwrap_or("10m")) {
        Some(d) if d.is_zero() => None,
        Some(d) => Some(jitter(d.max(MIN_DRIFT_INTERVAL), 0.1)),
        None => Some(jitter(default, 0.1)),
    }
}

/// Parses a Go duration (`10m`, `1h30m`, `2.5s`, `500ms`, `0`).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// Consecutive failures per object UID, turned into an exponential, jittered wait: 1 s doubling to
/// 5 min, ±20 %. Entries are dropped when the object succeeds.
#[derive(Debug, Default)]
pub struct Backoff {
    /// Failures in a row and when the last one was, per object uid.
    failures: Mutex<HashMap<String, (u32, std::time::Instant)>>,
}

/// Past this many tracked objects, entries of objects that have not failed for
/// [`BACKOFF_FORGET`] are dropped (deleted objects never report success).
const BACKOFF_PRUNE_AT: usize = 4096;
/// Longer than the longest wait: an entry this old belongs to an object that is gone or fixed.
const BACKOFF_FORGET: Duration = Duration::from_secs(15 * 60);

impl Backoff {
    /// Records a failure of `uid` and returns how long to wait before the next try.
    pub fn failed(&self, uid: &str) -> Duration {
        let now = std::time::Instant::now();
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= BACKOFF_PRUNE_AT {
            failures.retain(|_, (_, at)| now.duration_since(*at) < BACKOFF_FORGET);
        }
        let (n, at) = failures.entry(uid.to_owned()).or_insert((0, now));
        *n = n.saturating_add(1);
        *at = now;
        let base = Duration::from_secs(1 << (*n - 1).min(8)).min(Duration::from_secs(300));
        jitter(base, 0.2)
    }

    /// The failures in a row on record for `uid` (0 once it succeeded, or never failed).
    pub fn failures(&self, uid: &str) -> u32 {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .map_or(0, |(n, _)| *n)
    }

    /// How many objects have failures on record.
    pub fn tracked(&self) -> usize {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Forgets the failures of `uid`.
    pub fn succeeded(&self, uid: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_counts_of_objects_long_quiet_are_forgotten() {
        let b = Backoff::default();
        let old = std::time::Instant::now() - BACKOFF_FORGET - Duration::from_secs(1);
        {
            let mut f = b.failures.lock().expect("lock");
            for i in 0..BACKOFF_PRUNE_AT {
                f.insert(format!("gone-{i}"), (3, old));
            }
        }
        b.failed("live");
        assert_eq!(b.tracked(), 1, "deleted objects' counts were kept");
        let second = b.failed("live");
        assert!(second >= Duration::from_millis(1600), "{second:?}");
    }

    #[test]
    fn drift_intervals_have_a_floor_and_zero_turns_them_off() {
        assert_eq!(drift_after(Some("0")), None);
        let floor = drift_after(Some("1ns")).expect("on");
        assert!(floor >= MIN_DRIFT_INTERVAL.mul_f64(0.9), "{floor:?}");
        let default = drift_after(None).expect("on");
        assert!((540..=660).contains(&default.as_secs()), "{default:?}");
        let fallback = drift_after(Some("nonsense")).expect("on");
        assert!((540..=660).contains(&fallback.as_secs()), "{fallback:?}");
    }

    #[test]
    fn parses_go_durations() {
        let cases = [
            ("10m", Some(600.0)),
            ("1h30m", Some(5400.0)),
            ("2.5s", Some(2.5)),
            ("500ms", Some(0.5)),
            ("0", Some(0.0)),
            ("", None),
            ("10", None),
            ("5d", None),
        ];
        for (text, want) in cases {
            assert_eq!(
                parse_duration(text).map(|d| d.as_secs_f64()),
                want,
                "{text}"
            );
        }
    }

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..1000 {
            let d = jitter(Duration::from_secs(100), 0.1);
            assert!(d >= Duration::from_secs(90) && d <= Duration::from_secs(110));
        }
    }

    #[test]
    fn backoff_doubles_and_resets() {
        let b = Backoff::default();
        let first = b.failed("a");
        let second = b.failed("a");
        assert!(first <= Duration::from_millis(1200) && second >= Duration::from_millis(1600));
        b.succeeded("a");
        assert!(b.failed("a") <= Duration::from_millis(1200));
    }
}

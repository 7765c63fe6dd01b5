//! The pure half of leader election: what a candidate may do with the Lease record it has read
//! ([`decide`]) and the record it writes back ([`claim`], [`fresh`], [`released`]). No client,
//! so every rule is tested with a table.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

/// What a candidate does with the Lease it has just read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// This identity holds it: renew.
    Renew,
    /// Nobody holds it (released, or never held): take it.
    Acquire,
    /// Another identity holds it but has let it expire: take it over.
    TakeOver { from: String },
    /// Another identity holds it and it is still valid.
    Wait { holder: String },
}

/// Decides what `identity` may do with `lease` at wall-clock `now`, having seen this exact
/// record (same `resourceVersion`) for `unchanged_for`. `default_duration` stands in for a
/// missing `leaseDurationSeconds`.
pub(crate) fn decide(
    lease: &Lease,
    identity: &str,
    now: Timestamp,
    unchanged_for: Duration,
    default_duration: Duration,
) -> Decision {
    let spec = lease.spec.as_ref();
    let Some(holder) = spec
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
    else {
        return Decision::Acquire;
    };
    if holder == identity {
        return Decision::Renew;
    }
    let duration = spec
        .and_then(|s| s.lease_duration_seconds)
        .and_then(|secs| u64::try_from(secs).ok())
        .filter(|&secs| secs > 0)
        .map_or(default_duration, Duration::from_secs);
    let expired_by_renew_time = spec
        .and_then(|s| s.renew_time.as_ref().or(s.acquire_time.as_ref()))
        .is_some_and(|renewed| {
            SignedDuration::try_from(duration)
                .is_ok_and(|duration| now.duration_since(renewed.0) >= duration)
        });
    if expired_by_renew_time || unchanged_for >= duration {
        Decision::TakeOver {
            from: holder.to_owned(),
        }
    } else {
        Decision::Wait {
            holder: holder.to_owned(),
        }
    }
}

/// `lease` rewritten so `identity` holds it as of `now` (keeps `resourceVersion`, so the
/// replace fails if someone wrote in between).
pub(crate) fn claim(mut lease: Lease, identity: &str, now: Timestamp, duration: Duration) -> Lease {
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(identity) {
        spec.holder_identity = Some(identity.to_owned());
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
    }
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(whole_seconds(duration));
    lease
}

/// A new Lease held by `identity` as of `now`.
pub(crate) fn fresh(name: &str, identity: &str, now: Timestamp, duration: Duration) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(identity.to_owned()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_duration_seconds: Some(whole_seconds(duration)),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
    }
}

/// `lease` given up: no holder, and (as client-go writes it) a one-second duration.
pub(crate) fn released(mut lease: Lease, now: Timestamp) -> Lease {
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.acquire_time = Some(MicroTime(now));
    spec.renew_time = Some(MicroTime(now));
    lease
}

/// `leaseDurationSeconds` is whole seconds; round up so others never expire us early.
fn whole_seconds(duration: Duration) -> i32 {
    let secs = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

pub(crate) fn holder_of(lease: &Lease) -> String {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

/// How long this candidate has seen the same Lease record: client-go's `observedTime`.
#[derive(Debug, Default)]
pub(crate) struct Observer {
    seen: Option<(Option<String>, Instant)>,
}

impl Observer {
    pub(crate) fn unchanged_for(&mut self, lease: &Lease) -> Duration {
        let version = lease.metadata.resource_version.clone();
        match &self.seen {
            Some((seen, since)) if *seen == version => since.elapsed(),
            _ => {
                self.seen = Some((version, Instant::now()));
                Duration::ZERO
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("in range")
    }

    fn lease(holder: Option<&str>, renewed: Option<i64>, duration: Option<i32>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("kraken-operator".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: renewed.map(|s| MicroTime(at(s))),
                lease_duration_seconds: duration,
                lease_transitions: Some(2),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn decide_table() {
        let wait = |h: &str| Decision::Wait { holder: h.into() };
        let take = |h: &str| Decision::TakeOver { from: h.into() };
        // (name, lease, now, unchanged_for, want)
        let cases = [
            ("no spec", Lease::default(), 0, 0, Decision::Acquire),
            (
                "no holder",
                lease(None, Some(0), Some(15)),
                0,
                0,
                Decision::Acquire,
            ),
            (
                "released",
                lease(Some(""), Some(0), Some(1)),
                0,
                0,
                Decision::Acquire,
            ),
            (
                "ours",
                lease(Some("me"), Some(0), Some(15)),
                100,
                100,
                Decision::Renew,
            ),
            (
                "valid",
                lease(Some("other"), Some(0), Some(15)),
                14,
                0,
                wait("other"),
            ),
            (
                "expired by renewTime",
                lease(Some("other"), Some(0), Some(15)),
                15,
                0,
                take("other"),
            ),
            (
                "long expired",
                lease(Some("other"), Some(0), Some(15)),
                3600,
                0,
                take("other"),
            ),
            // The holder's clock runs ahead: renewTime is in our future, yet the record has not
            // changed for a whole lease duration on our clock.
            (
                "skewed, unchanged",
                lease(Some("other"), Some(600), Some(15)),
                0,
                15,
                take("other"),
            ),
            (
                "skewed, fresh",
                lease(Some("other"), Some(600), Some(15)),
                0,
                14,
                wait("other"),
            ),
            (
                "no renewTime",
                lease(Some("other"), None, Some(15)),
                100,
                0,
                wait("other"),
            ),
            (
                "no renewTime, unchanged",
                lease(Some("other"), None, Some(15)),
                100,
                15,
                take("other"),
            ),
            (
                "default duration",
                lease(Some("other"), Some(0), None),
                9,
                0,
                wait("other"),
            ),
            (
                "default duration passed",
                lease(Some("other"), Some(0), None),
                10,
                0,
                take("other"),
            ),
            (
                "zero duration uses default",
                lease(Some("other"), Some(0), Some(0)),
                9,
                0,
                wait("other"),
            ),
        ];
        for (name, lease, now, unchanged, want) in cases {
            let got = decide(&lease, "me", at(now), unchanged * SECOND, 10 * SECOND);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn claim_table() {
        let ms = Duration::from_millis(2500);
        // (name, lease, identity, want holder, want transitions, acquire_time set to now)
        let cases = [
            (
                "renew keeps acquire time",
                lease(Some("me"), Some(0), Some(15)),
                "me",
                2,
                false,
            ),
            (
                "take over counts a transition",
                lease(Some("other"), Some(0), Some(15)),
                "me",
                3,
                true,
            ),
            (
                "after release counts a transition",
                lease(None, Some(0), Some(1)),
                "me",
                3,
                true,
            ),
        ];
        for (name, lease, identity, transitions, acquired) in cases {
            let claimed = claim(lease, identity, at(50), ms);
            let spec = claimed.spec.expect("claimed lease has a spec");
            assert_eq!(spec.holder_identity.as_deref(), Some(identity), "{name}");
            assert_eq!(spec.lease_transitions, Some(transitions), "{name}");
            assert_eq!(spec.renew_time, Some(MicroTime(at(50))), "{name}");
            assert_eq!(spec.lease_duration_seconds, Some(3), "{name}: rounded up");
            assert_eq!(
                spec.acquire_time == Some(MicroTime(at(50))),
                acquired,
                "{name}"
            );
            assert_eq!(
                claimed.metadata.resource_version.as_deref(),
                Some("7"),
                "{name}"
            );
        }
    }

    #[test]
    fn fresh_lease_is_ours_with_no_transitions() {
        let lease = fresh("kraken-operator", "me", at(0), 15 * SECOND);
        assert_eq!(
            decide(&lease, "me", at(0), Duration::ZERO, SECOND),
            Decision::Renew
        );
        assert_eq!(
            decide(&lease, "other", at(14), Duration::ZERO, SECOND),
            Decision::Wait {
                holder: "me".into()
            }
        );
        let spec = lease.spec.expect("lease has a spec");
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(0))));
    }

    #[test]
    fn released_lease_is_free_at_once() {
        let lease = released(lease(Some("me"), Some(0), Some(15)), at(5));
        assert_eq!(
            decide(&lease, "other", at(5), Duration::ZERO, SECOND),
            Decision::Acquire
        );
        let spec = lease.spec.expect("lease has a spec");
        assert_eq!(spec.lease_transitions, Some(2));
        assert_eq!(spec.lease_duration_seconds, Some(1));
    }

    #[test]
    fn observer_restarts_when_the_record_changes() {
        let mut observer = Observer::default();
        let mut l = lease(Some("other"), Some(0), Some(15));
        assert_eq!(observer.unchanged_for(&l), Duration::ZERO);
        std::thread::sleep(Duration::from_millis(20));
        assert!(observer.unchanged_for(&l) >= Duration::from_millis(20));
        l.metadata.resource_version = Some("8".into());
        assert_eq!(observer.unchanged_for(&l), Duration::ZERO);
    }

    #[test]
    fn whole_seconds_round_up() {
        let cases = [(0, 1), (1000, 1), (1001, 2), (2500, 3), (15_000, 15)];
        for (millis, want) in cases {
            assert_eq!(
                whole_seconds(Duration::from_millis(millis)),
                want,
                "{millis} ms"
            );
        }
    }
}

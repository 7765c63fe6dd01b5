//! Faults that prove where they landed. A chaos test that converges after its kills proves
//! little unless the kills hit what it says they hit, so each [`Kill`] looks, while the
//! operator and its providers are down, at the create fences open at that moment: an object
//! carrying `kraken.dev/create-attempt` that no state Secret records as completed is a create
//! the kill interrupted (docs/operator.md, "The create fence"). The fixture's ledger adds the
//! provider's side ([`crate::ledger::in_flight_at`]: creates the provider was running when the
//! operator died), and moto's recorder the lookups the recovery made.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, ensure};
use serde_json::Value;

use crate::ControlPlane;
use crate::operator::Operator;
use crate::operator::bed::secret_data;

/// The create fence annotation.
pub const CREATE_ATTEMPT: &str = "kraken.dev/create-attempt";

/// SplitMix64: a tiny, seedable generator, so that a failing schedule can be replayed.
pub struct Rng(u64);

impl Rng {
    /// Seeded from `KRAKEN_CHAOS_SEED`, else from the clock and pid; returns the seed to print.
    pub fn from_env_or_clock() -> anyhow::Result<(Self, u64)> {
        let seed = match std::env::var("KRAKEN_CHAOS_SEED") {
            Ok(s) => s.parse().context("KRAKEN_CHAOS_SEED must be a u64")?,
            Err(_) => {
                let t = SystemTime::now().duration_since(UNIX_EPOCH)?;
                // Truncated on purpose: any 64 bits of the clock make a seed.
                t.as_nanos() as u64 ^ u64::from(std::process::id())
            }
        };
        Ok((Self(seed), seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }
}

/// Nanoseconds since the Unix epoch: the clock of the fixture's ledger lines.
pub fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// An object whose create fence was open: the attempt annotated, no state completing it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct OpenFence {
    /// The resource kubectl lists it as (`objects.fixture.tf.kraken.dev`).
    pub resource: String,
    pub name: String,
    pub uid: String,
    /// The annotation's value: when the create began.
    pub attempt: String,
}

/// The create fences open now on the objects of `resources` in `ns`: each object whose
/// `kraken.dev/create-attempt` is not the `createAttempt` of the state Secret it owns (or
/// that owns none). Only a true snapshot while nothing writes: the operator is down.
pub fn open_fences(
    cp: &ControlPlane,
    ns: &str,
    resources: &[&str],
) -> anyhow::Result<Vec<OpenFence>> {
    let mut completed: BTreeMap<String, String> = BTreeMap::new();
    for secret in cp.list_json(ns, "secrets")? {
        if secret["type"] != "kraken.dev/tfstate" {
            continue;
        }
        let attempt = secret_data(&secret, "createAttempt")?.unwrap_or_default();
        let attempt = String::from_utf8(attempt).context("createAttempt is not UTF-8")?;
        for owner in secret["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(uid) = owner["uid"].as_str() {
                completed.insert(uid.to_owned(), attempt.clone());
            }
        }
    }
    let mut open = Vec::new();
    for resource in resources {
        for obj in cp.list_json(ns, resource)? {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            let attempt = &obj["metadata"]["annotations"][CREATE_ATTEMPT];
            let uid = text(&obj["metadata"]["uid"]);
            let Some(attempt) = attempt.as_str() else {
                continue;
            };
            if completed.get(&uid).map(String::as_str) != Some(attempt) {
                open.push(OpenFence {
                    resource: (*resource).to_owned(),
                    name: text(&obj["metadata"]["name"]),
                    uid,
                    attempt: attempt.to_owned(),
                });
            }
        }
    }
    Ok(open)
}

/// One SIGKILL of the operator (and its providers), and the creates it interrupted.
#[derive(Debug, Clone)]
pub struct Kill {
    /// When the kill began ([`unix_nanos`]): the operator was stopped from here on.
    pub at: u128,
    /// When the operator and every provider below it were gone.
    pub done: u128,
    /// The create fences open while it was down.
    pub open: Vec<OpenFence>,
}

/// SIGKILL the operator with its providers ([`Operator::kill`]), look at the create fences of
/// `resources` in `ns` while nothing runs, and start it again.
pub fn kill_and_restart(
    op: &mut Operator,
    cp: &ControlPlane,
    ns: &str,
    resources: &[&str],
) -> anyhow::Result<Kill> {
    let at = unix_nanos();
    op.kill()?;
    let done = unix_nanos();
    let open = open_fences(cp, ns, resources).context("looking at the create fences")?;
    op.restart()?;
    Ok(Kill { at, done, open })
}

/// A test's kills, in order.
#[derive(Debug, Clone, Default)]
pub struct Kills(pub Vec<Kill>);

impl Kills {
    /// The creates kill `i` interrupted: the fences open at it that the kill before did not
    /// find open. A fence an earlier kill left open stays open until a later process gets to
    /// its object, and is not this kill's doing; a fence opened again (a new attempt) is.
    pub fn interrupted(&self, i: usize) -> Vec<&OpenFence> {
        let before: BTreeSet<&OpenFence> = match i.checked_sub(1) {
            Some(prev) => self.0[prev].open.iter().collect(),
            None => BTreeSet::new(),
        };
        self.0
            .get(i)
            .map(|k| k.open.iter().filter(|f| !before.contains(f)).collect())
            .unwrap_or_default()
    }

    /// How many kills interrupted at least one create ([`Self::interrupted`]).
    pub fn in_creates(&self) -> usize {
        (0..self.0.len())
            .filter(|i| !self.interrupted(*i).is_empty())
            .count()
    }

    /// Every object a kill interrupted in the middle of its create.
    pub fn fenced(&self) -> BTreeSet<OpenFence> {
        (0..self.0.len())
            .flat_map(|i| self.interrupted(i).into_iter().cloned())
            .collect()
    }

    /// One line per kill: its number, time of day and the creates it interrupted.
    pub fn story(&self) -> String {
        let lines: Vec<String> = (0..self.0.len())
            .map(|i| {
                let names: Vec<&str> = self
                    .interrupted(i)
                    .iter()
                    .map(|f| f.name.as_str())
                    .collect();
                let (at, open) = (crate::clock(self.0[i].at), self.0[i].open.len());
                format!("#{} at {at}: {open} fences open, new {names:?}", i + 1)
            })
            .collect();
        lines.join("\n  ")
    }

    /// At least `n` kills landed inside a create (an open fence while the operator was down).
    pub fn expect_in_creates(&self, n: usize) -> anyhow::Result<()> {
        ensure!(
            self.in_creates() >= n,
            "only {} of {} kills landed inside a create (a create fence opened since the kill \
             before, open while the operator was down); the test needs {n}:\n  {}",
            self.in_creates(),
            self.0.len(),
            self.story()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(name: &str, attempt: &str) -> OpenFence {
        OpenFence {
            resource: "objects".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            attempt: attempt.into(),
        }
    }

    fn kill(open: Vec<OpenFence>) -> Kill {
        Kill {
            at: 0,
            done: 0,
            open,
        }
    }

    #[test]
    fn a_kill_interrupts_only_the_fences_opened_since_the_kill_before() {
        let kills = Kills(vec![
            kill(vec![fence("a", "t1")]),
            // a is still open from the first kill (no process got to it): not this kill's.
            kill(vec![fence("a", "t1")]),
            // a was tried again (a new attempt) and b begun: both this kill's.
            kill(vec![fence("a", "t3"), fence("b", "t3")]),
            kill(vec![]),
        ]);
        let names = |i: usize| -> Vec<String> {
            kills
                .interrupted(i)
                .iter()
                .map(|f| f.name.clone())
                .collect()
        };
        assert_eq!(names(0), ["a"]);
        assert!(names(1).is_empty());
        assert_eq!(names(2), ["a", "b"]);
        assert!(names(3).is_empty());
        assert_eq!(kills.in_creates(), 2);
        assert_eq!(kills.fenced().len(), 3, "a at t1 and t3, b at t3");
        assert!(kills.expect_in_creates(2).is_ok());
        let err = kills.expect_in_creates(3).expect_err("only two landed");
        assert!(format!("{err}").contains("only 2 of 4 kills"), "{err}");
    }
}

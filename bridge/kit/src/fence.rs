//! Fencing a replica's writes by its leadership.
//!
//! Leader election alone does not stop a leader that was paused (SIGSTOP, a long GC-like stall,
//! a frozen VM) from waking up after its Lease expired and finishing what it was doing: its
//! renewal task notices the loss only when it next runs, and the controllers may run first. So
//! every write that changes the outside world or the recorded state asks the [`Fence`] first:
//! - it passes only while this replica's leadership is *current*: renewed less than the renew
//!   deadline ago, timed on the monotonic clock, which keeps running while a process is
//!   stopped — a replica that wakes after a pause finds its term over before it writes;
//! - it hands out the term's [`Epoch`] (the Lease's uid and its `leaseTransitions` when this
//!   replica took it), which state writes record; a replica that finds a newer epoch of the
//!   same Lease recorded stops. (Epochs of another Lease — deleted and made again, or renamed —
//!   are not compared: `leaseTransitions` starts over with it.)
//!
//! The last gap — a check that passes just before a pause and a write sent just after it — is
//! closed where the write lands: state writes carry the `resourceVersion` they read, so one
//! that comes after the new leader's is refused by the API server.
//!
//! Without leader election (`--no-leader-elect`) the fence is [`Fence::open`]: every check
//! passes, with epoch 0.

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A replica's right to write, shared by the leader election (which grants and revokes it) and
/// every writer (which checks it). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Fence(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// Whether writes need a term at all (leader election on).
    leased: bool,
    term: Mutex<Option<Term>>,
}

#[derive(Clone, Debug)]
struct Term {
    epoch: Epoch,
    until: Instant,
}

/// A leadership term's identity: the Lease (by uid) and how many times it had changed holders.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Epoch {
    pub lease: String,
    pub n: u64,
}

impl Epoch {
    /// Written on state Secrets as `<n>@<lease uid>`.
    pub fn parse(s: &str) -> Option<Self> {
        let (n, lease) = s.split_once('@')?;
        Some(Self {
            lease: lease.to_owned(),
            n: n.parse().ok()?,
        })
    }
}

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.n, self.lease)
    }
}

/// A write refused because this replica's leadership is not current.
#[derive(Debug, Clone, thiserror::Error)]
#[error("this replica's leadership is not current ({0}): writes are fenced until it leads again")]
pub struct Fenced(pub String);

impl Fence {
    /// No leader election: every check passes, epoch 0.
    pub fn open() -> Self {
        Self(Arc::new(Inner {
            leased: false,
            term: Mutex::new(None),
        }))
    }

    /// Leader election on: closed until [`Self::grant`].
    pub fn leased() -> Self {
        Self(Arc::new(Inner {
            leased: true,
            term: Mutex::new(None),
        }))
    }

    fn term(&self) -> std::sync::MutexGuard<'_, Option<Term>> {
        self.0.term.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This replica leads in `epoch` until `until` (the last renewal's start plus the renew
    /// deadline): on acquiring the Lease and on each renewal.
    pub fn grant(&self, epoch: Epoch, until: Instant) {
        *self.term() = Some(Term { epoch, until });
    }

    /// Leadership is lost (or being handed over).
    pub fn revoke(&self) {
        *self.term() = None;
    }

    /// The current term's epoch (`None` without leader election), or why writing is not
    /// allowed now.
    pub fn check(&self) -> Result<Option<Epoch>, Fenced> {
        if !self.0.leased {
            return Ok(None);
        }
        match &*self.term() {
            None => Err(Fenced("not leading".into())),
            Some(t) => {
                let now = Instant::now();
                if now < t.until {
                    Ok(Some(t.epoch.clone()))
                } else {
                    Err(Fenced(format!(
                        "epoch {}, not renewed for {:?} past its deadline",
                        t.epoch,
                        now.duration_since(t.until)
                    )))
                }
            }
        }
    }

    /// Whether a record written in `recorded` epoch is newer than this replica's term (of the
    /// same Lease): a newer leader has written it, and this replica must not write over it.
    pub fn superseded_by(&self, recorded: Option<&Epoch>) -> Result<(), Fenced> {
        let (Some(mine), Some(recorded)) = (self.check()?, recorded) else {
            return Ok(());
        };
        if recorded.lease == mine.lease && recorded.n > mine.n {
            return Err(Fenced(format!(
                "epoch {mine}; a leader of epoch {recorded} has written since"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn epoch(n: u64) -> Epoch {
        Epoch {
            lease: "uid-1".into(),
            n,
        }
    }

    #[test]
    fn open_always_passes_without_an_epoch() {
        let f = Fence::open();
        assert_eq!(f.check().ok(), Some(None));
        assert!(f.superseded_by(Some(&epoch(7))).is_ok());
    }

    #[test]
    fn leased_passes_only_inside_a_current_term() {
        let f = Fence::leased();
        assert!(f.check().is_err(), "closed before any grant");
        f.grant(epoch(3), Instant::now() + Duration::from_secs(10));
        assert_eq!(f.check().ok(), Some(Some(epoch(3))));
        assert!(f.superseded_by(Some(&epoch(3))).is_ok());
        assert!(f.superseded_by(Some(&epoch(2))).is_ok());
        assert!(f.superseded_by(None).is_ok());
        let newer = f
            .superseded_by(Some(&epoch(4)))
            .expect_err("a newer epoch wrote");
        assert!(newer.to_string().contains("epoch 4@uid-1"), "{newer}");
        // Another Lease (deleted and made again): its count started over; not compared.
        let other = Epoch {
            lease: "uid-2".into(),
            n: 9,
        };
        assert!(f.superseded_by(Some(&other)).is_ok());
        f.grant(epoch(3), Instant::now() - Duration::from_millis(1));
        let stale = f.check().expect_err("past the deadline");
        assert!(stale.to_string().contains("past its deadline"), "{stale}");
        f.grant(epoch(4), Instant::now() + Duration::from_secs(10));
        f.revoke();
        assert!(f.check().is_err(), "revoked");
    }

    #[test]
    fn epochs_round_trip_through_their_text() {
        assert_eq!(Epoch::parse(&epoch(12).to_string()), Some(epoch(12)));
        assert_eq!(Epoch::parse("12"), None);
        assert_eq!(Epoch::parse("x@uid"), None);
    }
}

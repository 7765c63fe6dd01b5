//! Which replica reconciles which object when `--shards auto` splits the work: a consistent-hash
//! ring over the live replicas, and the [`Ownership`] a replica acts on while the ring changes.
//!
//! Pure: no I/O. The membership that feeds it (one Lease per replica, each naming the ring view
//! its holder has drained for) is `operator::shard`.
//!
//! - A [`View`] is one set of members. Each member sits on the ring at [`VNODES`] points (hashes
//!   of its name); an object belongs to the first point at or after the hash of its UID. Adding a
//!   member moves only the objects that land on its points (about `1/N`); removing one moves
//!   only its objects.
//! - While the ring changes, a replica may be in the middle of work on objects that are about to
//!   move. So a replica acts on the [`Ownership`] it has *drained for*: the last view every member
//!   confirmed (settled) and every view it confirmed since. It owns an object only when all of
//!   those views give it that object, so objects that stay keep being reconciled, and an object
//!   that moves is reconciled by its new owner only once the old owner has confirmed it stopped.

use std::collections::BTreeSet;

use super::hash::{fnv1a, fnv1a_parts};

/// Points per member on the ring. The largest of 3 members' shares is then typically 2 % above a
/// third, rarely more than 6 % (with 128 points: 7 %, and up to 20 %); the largest share sets the
/// memory and CPU every replica must be given. A view of 50 members is 51,200 points, 800 KB;
/// lookups are a binary search.
pub const VNODES: u32 = 1024;

/// A set of members: the replicas whose membership Leases were live when it was taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    members: BTreeSet<String>,
    /// `(point, member index)`, sorted by point.
    points: Vec<(u64, usize)>,
}

/// SplitMix64's finalizer: FNV-1a of short, similar strings clusters; this spreads it.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl View {
    pub fn new<I, S>(members: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let members: BTreeSet<String> = members.into_iter().map(Into::into).collect();
        let mut points: Vec<(u64, usize)> = members
            .iter()
            .enumerate()
            .flat_map(|(i, m)| {
                (0..VNODES).map(move |v| (mix(fnv1a_parts(&[m.as_bytes(), &v.to_le_bytes()])), i))
            })
            .collect();
        points.sort_unstable();
        Self { members, points }
    }

    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(String::as_str)
    }

    pub fn contains(&self, member: &str) -> bool {
        self.members.contains(member)
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether every member of `other` is one of `self`'s. Adding members to a ring only moves
    /// objects to the new members, so then a member of `other` owns in `self` only objects it
    /// owned in `other`.
    pub fn includes(&self, other: &View) -> bool {
        other.members.is_subset(&self.members)
    }

    /// A short stable name of the member set and of the ring's layout ([`VNODES`]), written on
    /// membership Leases as the view a replica has drained for. Replicas that would place
    /// objects differently (a version with another layout, during a rolling upgrade) never
    /// confirm the same view, so none of them widens to a share the other still works on: the
    /// share of a departed replica waits until they agree (the old version is gone).
    pub fn id(&self) -> String {
        self.id_at(VNODES)
    }

    /// [`id`](Self::id) for a ring of `vnodes` points per member.
    fn id_at(&self, vnodes: u32) -> String {
        let layout = vnodes.to_le_bytes();
        let parts: Vec<&[u8]> = std::iter::once(&layout[..])
            .chain(self.members.iter().map(String::as_bytes))
            .collect();
        format!("{:016x}", fnv1a_parts(&parts))
    }

    /// The member that owns `key` (an object's UID); `None` for an empty view.
    ///
    /// The key's place on the ring is the 64-bit FNV-1a of its bytes, unmixed: the hash the
    /// API server's server-side sharded list and watch (`shardRange(object.metadata.uid, …)`,
    /// alpha in Kubernetes 1.36) filters on, so a member's share is a set of ranges that API
    /// can serve.
    pub fn owner(&self, key: &str) -> Option<&str> {
        let h = fnv1a(key.as_bytes());
        let at = self.points.partition_point(|(p, _)| *p < h);
        let (_, i) = self.points.get(at).or_else(|| self.points.first())?;
        self.members.iter().nth(*i).map(String::as_str)
    }
}

/// What a replica reconciles now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Sharding off: everything (the leader runs every controller).
    All,
    /// Sharded: objects that every one of `views` gives to `me`; none while `views` is empty
    /// (a replica that joined and has not seen a view settle yet).
    Shard { me: String, views: Vec<View> },
}

impl Ownership {
    pub fn owns(&self, key: &str) -> bool {
        match self {
            Self::All => true,
            Self::Shard { me, views } => {
                !views.is_empty() && views.iter().all(|v| v.owner(key) == Some(me.as_str()))
            }
        }
    }

    /// Whether every object `self` owns is also owned by `before`: moving from `before` to
    /// `self` gives up work and gains none, so it needs a drain but no wait.
    pub fn nothing_new_since(&self, before: &Self) -> bool {
        match (before, self) {
            (Self::All, _) => true,
            (Self::Shard { .. }, Self::All) => false,
            (Self::Shard { views: old, me }, Self::Shard { views: new, .. }) => {
                // No views owns nothing: from there, any view is new work. Else each old view
                // must be covered by a new one with all of its members (a view that only
                // gained members gives `me` no object it did not have).
                new.is_empty()
                    || (!old.is_empty()
                        && old
                            .iter()
                            .all(|o| o.contains(me) && new.iter().any(|n| n.includes(o))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uids(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("6f1c2a4e-{:04x}-4b7e-9d2c-{:012x}", i % 65_536, i * 7_919))
            .collect()
    }

    #[test]
    fn three_members_share_evenly() {
        let view = View::new(["replica-a", "replica-b", "replica-c"]);
        let keys = uids(30_000);
        for m in view.members() {
            let share = keys.iter().filter(|k| view.owner(k) == Some(m)).count();
            // a third ± 6 %
            assert!((9_400..=10_600).contains(&share), "{m}: {share} of 30000");
        }
    }

    #[test]
    fn a_new_member_takes_only_its_share() {
        let before = View::new(["a", "b", "c"]);
        let after = View::new(["a", "b", "c", "d"]);
        let keys = uids(20_000);
        let mut moved = 0;
        for k in &keys {
            let (old, new) = (before.owner(k), after.owner(k));
            if old != new {
                assert_eq!(new, Some("d"), "{k} moved between old members");
                moved += 1;
            }
        }
        // about a quarter
        assert!((4_000..=6_000).contains(&moved), "{moved} of 20000 moved");
    }

    #[test]
    fn a_removed_member_gives_up_only_its_share() {
        let before = View::new(["a", "b", "c"]);
        let after = View::new(["a", "c"]);
        for k in uids(5_000) {
            if before.owner(&k) != Some("b") {
                assert_eq!(before.owner(&k), after.owner(&k));
            }
        }
    }

    #[test]
    fn a_view_is_named_by_its_members_and_the_layout() {
        assert_eq!(View::new(["b", "a"]).id(), View::new(["a", "b"]).id());
        assert_ne!(View::new(["a", "b"]).id(), View::new(["a", "bc"]).id());
        // the same members on a ring of another layout (128 points, the old one) are another view
        let ab = View::new(["a", "b"]);
        assert_eq!(ab.id(), ab.id_at(VNODES));
        assert_ne!(ab.id(), ab.id_at(128));
        assert_eq!(View::new(Vec::<String>::new()).owner("x"), None);
    }

    #[test]
    fn while_moving_an_object_has_at_most_one_owner() {
        // "a" drained for {a,b} → {a,b,c} and acts on both; "c" has not seen {a,b,c} settle
        // and owns nothing; "b" still acts on the settled {a,b}.
        let (old, new) = (View::new(["a", "b"]), View::new(["a", "b", "c"]));
        let a = Ownership::Shard {
            me: "a".into(),
            views: vec![old.clone(), new.clone()],
        };
        let b = Ownership::Shard {
            me: "b".into(),
            views: vec![old.clone()],
        };
        let c = Ownership::Shard {
            me: "c".into(),
            views: vec![],
        };
        for k in uids(5_000) {
            let owners = [&a, &b, &c].iter().filter(|o| o.owns(&k)).count();
            assert!(owners <= 1, "{k} has {owners} owners");
        }
        assert!(a.nothing_new_since(&Ownership::Shard {
            me: "a".into(),
            views: vec![old.clone()],
        }));
        let settled = Ownership::Shard {
            me: "a".into(),
            views: vec![new],
        };
        assert!(
            settled.nothing_new_since(&a),
            "a member joined: settling on the new view gives a nothing it lacked"
        );
        for k in uids(5_000) {
            assert!(!settled.owns(&k) || a.owns(&k), "{k}");
        }
        let left = Ownership::Shard {
            me: "a".into(),
            views: vec![View::new(["a", "c"])],
        };
        assert!(
            !left.nothing_new_since(&settled),
            "b left: a gains some of its objects"
        );
        assert!(uids(5_000).iter().any(|k| left.owns(k) && !settled.owns(k)));
        assert!(
            !settled.nothing_new_since(&c),
            "owning nothing, the first settled view is all new"
        );
        assert!(
            c.nothing_new_since(&a),
            "giving everything up gains nothing"
        );
        assert!(Ownership::All.owns("anything"));
    }
}

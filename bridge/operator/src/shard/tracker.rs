//! The pure half of shard membership: from the live members' Leases (and which view each has
//! drained for) to the [`Ownership`] this replica acts on, and the view it confirms next.
//!
//! The handshake, per replica:
//! 1. The live members form a new view → act on less at once: the objects the last settled view,
//!    every view confirmed since, *and* the new one all give this replica. The running
//!    controllers take it in place (`managed::share`: no reconcile of an object that left starts,
//!    and those in flight finish), then report the generation applied.
//! 2. Drained → confirm the new view on the Lease (`ack`).
//! 3. Every live member has confirmed the same view → it is settled: act on all of its share.
//!
//! A replica that joins (nothing confirmed yet) waits until it has seen the same members in two
//! rounds in a row, so replicas started together settle on all of them at once instead of the
//! first taking everything and handing most of it on a moment later.
//!
//! An object moving from A to B is never worked on by both: B gains it only at step 3, after A
//! confirmed at step 2 that it stopped. A replica that dies stops renewing; once its Lease
//! expires the others drop it from the view, and its fence (renewed less than the renew
//! deadline ago, which is shorter than the Lease) stopped its writes before that.

use kraken_kit::ring::{Ownership, View};

/// One live member as its Lease says: name, and the view id it has confirmed.
pub struct Member {
    pub name: String,
    pub ack: Option<String>,
}

/// This replica's side of the handshake.
#[derive(Debug)]
pub struct Tracker {
    me: String,
    /// The last view every member confirmed, as this replica saw it.
    settled: Option<View>,
    /// Views confirmed since `settled`, oldest first.
    since: Vec<View>,
    /// What this replica last confirmed (on its Lease).
    ack: Option<View>,
    /// A view being drained for, and the generation of the ownership that drains it.
    target: Option<(View, u64)>,
    /// The members seen in the previous round.
    seen: Option<View>,
    generation: u64,
    ownership: Ownership,
}

impl Tracker {
    /// A replica that has just joined: owns nothing until a view with it settles.
    pub fn new(me: &str) -> Self {
        Self {
            me: me.to_owned(),
            settled: None,
            since: Vec::new(),
            ack: None,
            target: None,
            seen: None,
            generation: 0,
            ownership: Ownership::Shard {
                me: me.to_owned(),
                views: Vec::new(),
            },
        }
    }

    /// The view id to write on this replica's Lease.
    pub fn ack_id(&self) -> Option<String> {
        self.ack.as_ref().map(View::id)
    }

    pub fn settled(&self) -> Option<&View> {
        self.settled.as_ref()
    }

    pub fn ownership(&self) -> (Ownership, u64) {
        (self.ownership.clone(), self.generation)
    }

    fn publish(&mut self, views: Vec<View>) -> (Ownership, u64) {
        self.generation += 1;
        self.ownership = Ownership::Shard {
            me: self.me.clone(),
            views,
        };
        self.ownership()
    }

    /// This replica's own Lease lapsed: the others will take its share, so it gives up all and
    /// joins again from the start.
    pub fn reset(&mut self) -> Option<(Ownership, u64)> {
        let owned_some =
            !matches!(&self.ownership, Ownership::Shard { views, .. } if views.is_empty());
        self.settled = None;
        self.since.clear();
        self.ack = None;
        self.target = None;
        owned_some.then(|| self.publish(Vec::new()))
    }

    /// One round: `live` are the members whose Leases are current (this replica's own entry is
    /// ignored: it is `self`), `applied` the ownership generation the controllers run. Returns
    /// a new ownership to apply, if any.
    pub fn observe(&mut self, live: &[Member], applied: u64) -> Option<(Ownership, u64)> {
        let others: Vec<&Member> = live.iter().filter(|m| m.name != self.me).collect();
        let current = View::new(
            others
                .iter()
                .map(|m| m.name.clone())
                .chain([self.me.clone()]),
        );
        let quiet = self.seen.replace(current.clone()).as_ref() == Some(&current);
        if self.ack.is_none() && self.target.is_none() && !quiet {
            // joining: wait until the membership holds still for a round
            return None;
        }
        let mut out = None;
        let draining = self.target.as_ref().map(|(v, _)| v);
        if self.ack.as_ref() != Some(&current) && draining != Some(&current) {
            // 1. act on less at once
            let views = match &self.settled {
                Some(s) => std::iter::once(s.clone())
                    .chain(self.since.iter().cloned())
                    .chain([current.clone()])
                    .collect(),
                None => Vec::new(),
            };
            let published = self.publish(views);
            self.target = Some((current.clone(), published.1));
            out = Some(published);
        }
        // 2. drained: confirm
        if let Some((view, _)) = self.target.take_if(|(_, g)| applied >= *g) {
            if self.settled.as_ref() != Some(&view) && !self.since.contains(&view) {
                self.since.push(view.clone());
            }
            self.ack = Some(view);
        }
        // 3. everyone confirmed the same view: settled
        let id = current.id();
        let all_confirmed = self.target.is_none()
            && self.ack.as_ref() == Some(&current)
            && others.iter().all(|m| m.ack.as_deref() == Some(id.as_str()));
        if all_confirmed && self.settled.as_ref() != Some(&current) {
            self.settled = Some(current.clone());
            self.since.clear();
            out = Some(self.publish(vec![current]));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, ack: Option<&View>) -> Member {
        Member {
            name: name.into(),
            ack: ack.map(View::id),
        }
    }

    fn views(o: &(Ownership, u64)) -> usize {
        match &o.0 {
            Ownership::Shard { views, .. } => views.len(),
            Ownership::All => usize::MAX,
        }
    }

    #[test]
    fn a_lone_replica_drains_confirms_and_settles() {
        let mut a = Tracker::new("a");
        assert_eq!(
            a.observe(&[], 0),
            None,
            "joining: the members must hold still a round"
        );
        // joins: nothing to own until it settles; drains for {a}
        let first = a.observe(&[], 0).expect("a new view");
        assert_eq!(views(&first), 0);
        assert_eq!(a.ack_id(), None, "not drained yet");
        // the controllers applied generation 1 → confirm and (alone) settle at once
        let settled = a.observe(&[], first.1).expect("settled");
        assert_eq!(views(&settled), 1);
        assert!(settled.0.owns("any-uid"));
        assert_eq!(a.ack_id(), Some(View::new(["a"]).id()));
        assert_eq!(a.observe(&[], settled.1), None, "steady");
    }

    /// Drives `t` until it confirms, with `live` as it stands.
    fn drain(t: &mut Tracker, live: &[Member]) -> Option<(Ownership, u64)> {
        // (a joining replica waits a round first)
        let started = t.observe(live, 0).or_else(|| t.observe(live, 0));
        let g = t.ownership().1;
        t.observe(live, g).or(started)
    }

    #[test]
    fn a_joining_replica_gains_only_once_everyone_confirmed() {
        let ab = View::new(["a", "b"]);
        let abc = View::new(["a", "b", "c"]);
        let mut a = Tracker::new("a");
        drain(&mut a, &[member("b", None)]);
        a.observe(&[member("b", Some(&ab))], a.ownership().1);
        assert_eq!(a.settled(), Some(&ab));

        // c joins: a narrows to {a,b} ∩ {a,b,c}, confirms, but does not settle while b has not
        let mut c = Tracker::new("c");
        let live_for_c = [member("a", Some(&ab)), member("b", Some(&ab))];
        drain(&mut c, &live_for_c);
        assert!(
            !c.ownership().0.owns("x"),
            "c gains nothing before b confirmed"
        );
        assert_eq!(c.settled(), None);

        let live_for_a = [member("b", Some(&ab)), member("c", Some(&abc))];
        let narrowed = drain(&mut a, &live_for_a).expect("narrowed");
        assert_eq!(views(&narrowed), 2);
        assert_eq!(a.ack_id(), Some(abc.id()));
        assert_eq!(a.settled(), Some(&ab));

        // b confirms too: a and c settle on {a,b,c}
        let all = [member("b", Some(&abc)), member("c", Some(&abc))];
        let widened = a.observe(&all, a.ownership().1).expect("settled");
        assert_eq!(views(&widened), 1);
        let c_all = [member("a", Some(&abc)), member("b", Some(&abc))];
        let c_settled = c.observe(&c_all, c.ownership().1).expect("settled");
        assert_eq!(
            c_settled.0,
            Ownership::Shard {
                me: "c".into(),
                views: vec![abc]
            }
        );
    }

    #[test]
    fn a_view_that_changes_again_before_draining_is_replaced() {
        let mut a = Tracker::new("a");
        drain(&mut a, &[]);
        let first = a
            .observe(&[member("b", None)], a.ownership().1)
            .expect("drain");
        // c appears before the controllers applied the first: drain for {a,b,c} instead
        let second = a
            .observe(&[member("b", None), member("c", None)], first.1 - 1)
            .expect("drain again");
        assert!(second.1 > first.1);
        assert_eq!(views(&second), 2, "{{a}} and {{a,b,c}}");
        assert_eq!(
            a.ack_id(),
            Some(View::new(["a"]).id()),
            "only {{a}} confirmed"
        );
    }

    #[test]
    fn a_joining_replica_waits_for_the_members_to_hold_still() {
        let mut a = Tracker::new("a");
        assert_eq!(a.observe(&[], 0), None);
        // b appeared meanwhile: not quiet yet
        assert_eq!(a.observe(&[member("b", None)], 0), None);
        let first = a
            .observe(&[member("b", None)], 0)
            .expect("the same members twice");
        assert_eq!(views(&first), 0, "drains for {{a,b}}, owning nothing yet");
        let settled = a.observe(&[member("b", Some(&View::new(["a", "b"])))], first.1);
        let settled = settled.expect("confirmed by both: settled on {a,b} at once");
        assert_eq!(views(&settled), 1);
        assert_eq!(a.settled(), Some(&View::new(["a", "b"])));
    }

    #[test]
    fn losing_its_lease_gives_everything_up() {
        let mut a = Tracker::new("a");
        drain(&mut a, &[]);
        assert!(a.ownership().0.owns("x"));
        let gave_up = a.reset().expect("gives up");
        assert!(!gave_up.0.owns("x"));
        assert_eq!(a.ack_id(), None);
        assert_eq!(a.reset(), None, "nothing more to give up");
    }
}

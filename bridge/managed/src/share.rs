//! This replica's share of the managed resources, changed in place while the controllers run
//! (`--shards auto`; without sharding the share is everything and never changes).
//!
//! One [`Share`] serves every kind's controller:
//! - **The gate**: a reconcile [`enter`](Share::enter)s its object's uid before it does anything,
//!   and is turned away when the object is not in the share. Entering and changing the share
//!   take the same lock, so after [`set`](Share::set) returns, no reconcile of an object that
//!   left can start, and [`drained`](Share::drained) waits for the ones already running. That is
//!   the drain half of the handshake (`operator::shard`), without stopping a controller.
//! - **The caches** ([`events`]): each kind's watch keeps only the share's objects. When the
//!   share narrows, the objects that left are dropped from the cache (no list); when it may have
//!   grown, the kind is listed again and the objects gained come in.
//! - **The triggers** ([`triggers`], one per controller run): what each cached object last
//!   looked like to the controller. An object that stays is not reconciled again on a change of
//!   share; one gained is reconciled once, even if it was owned, left and came back unchanged;
//!   a controller started again (leadership regained) reconciles every object once.
//! - **The pace** ([`Pacer`]): what a list brings goes into the queue a window at a time, so a
//!   user's change made during a replica's first pass, or its take-over of a dead replica's
//!   share, waits behind a window of listed objects, not behind all of them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::stream::BoxStream;
use futures::{Stream, StreamExt as _};
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::sync::{Notify, watch};

use kraken_kit::ring::Ownership;

mod pace;
pub use pace::Pacer;

type Meta = PartialObjectMeta<DynamicObject>;
type Event = Result<watcher::Event<Meta>, watcher::Error>;

/// What this replica reconciles now, and what is running.
pub struct Share {
    state: Mutex<State>,
    /// Every reconcile that leaves: [`Share::drained`] looks again.
    left: Notify,
    /// The ownership, for the kinds' watches.
    changes: watch::Sender<Ownership>,
}

struct State {
    owns: Ownership,
    /// uid → reconciles running (one per kind and object in practice).
    running: HashMap<String, usize>,
}

/// A reconcile in progress; leaving the share's books when dropped.
pub struct Entered {
    share: Arc<Share>,
    uid: String,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let mut state = self.share.lock();
        if let Some(n) = state.running.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                state.running.remove(&self.uid);
            }
        }
        drop(state);
        self.share.left.notify_waiters();
    }
}

impl Share {
    pub fn new(owns: Ownership) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                owns: owns.clone(),
                running: HashMap::new(),
            }),
            left: Notify::new(),
            changes: watch::Sender::new(owns),
        })
    }

    /// Everything, for good (sharding off).
    pub fn all() -> Arc<Self> {
        Self::new(Ownership::All)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn owns(&self, uid: &str) -> bool {
        self.lock().owns.owns(uid)
    }

    /// Starts a reconcile of `uid`, if it is in the share.
    pub fn enter(self: &Arc<Self>, uid: &str) -> Option<Entered> {
        let mut state = self.lock();
        if !state.owns.owns(uid) {
            return None;
        }
        *state.running.entry(uid.to_owned()).or_default() += 1;
        Some(Entered {
            share: self.clone(),
            uid: uid.to_owned(),
        })
    }

    /// Acts on `owns` from now on: no reconcile of an object outside it starts after this
    /// returns.
    pub fn set(&self, owns: Ownership) {
        let mut state = self.lock();
        state.owns = owns.clone();
        drop(state);
        self.changes.send_replace(owns);
    }

    /// Waits until no reconcile of an object outside the share is running.
    pub async fn drained(&self) {
        loop {
            let mut left = pin!(self.left.notified());
            left.as_mut().enable();
            {
                let state = self.lock();
                if state.running.keys().all(|uid| state.owns.owns(uid)) {
                    return;
                }
            }
            left.await;
        }
    }

    /// The objects running now (for tests and logs).
    pub fn running(&self) -> usize {
        self.lock().running.len()
    }
}

/// The uid of an event's object, if it has one.
fn uid_of(ev: &Event) -> Option<&str> {
    match ev {
        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o)) => {
            o.metadata.uid.as_deref()
        }
        _ => None,
    }
}

type Lister = Box<dyn Fn() -> BoxStream<'static, Event> + Send>;

/// Where one kind's watch stands.
struct Watch {
    store: Store<Meta>,
    list: Lister,
    changes: watch::Receiver<Ownership>,
    events: BoxStream<'static, Event>,
    /// The watch `events` replaced, kept while `events` lists: its changes go on meanwhile (the
    /// new list's watch delivers them again from the list's snapshot, which the cache and the
    /// triggers take as unchanged), so a change is not held for a whole list.
    live: Option<BoxStream<'static, Event>>,
    owns: Ownership,
    /// Between a list's `Init` and `InitDone`.
    listing: bool,
    /// Objects that left the share, to drop from the cache.
    dropped: Vec<Meta>,
}

impl Watch {
    /// The share changed to `owns`: drop what left from the cache, or list again when
    /// something may have been gained (or a list is under way, which may bring what left).
    fn reshare(&mut self, owns: Ownership) {
        if owns.nothing_new_since(&self.owns) && !self.listing {
            self.dropped = self
                .store
                .state()
                .iter()
                .filter(|o| !owns.owns(o.metadata.uid.as_deref().unwrap_or_default()))
                .map(|o| Meta::clone(o))
                .collect();
        } else {
            let watching = std::mem::replace(&mut self.events, (self.list)());
            if !self.listing {
                self.live = Some(watching);
            }
            self.listing = true;
        }
        self.owns = owns;
    }

    /// Passes `ev` on if it is about an object in the share.
    fn pass(&mut self, ev: Event) -> Option<Event> {
        match &ev {
            Ok(watcher::Event::Init) => self.listing = true,
            Ok(watcher::Event::InitDone) => {
                self.listing = false;
                self.live = None;
            }
            _ => {}
        }
        uid_of(&ev)
            .is_none_or(|uid| self.owns.owns(uid))
            .then_some(ev)
    }

    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(obj) = self.dropped.pop() {
                return Some(Ok(watcher::Event::Delete(obj)));
            }
            tokio::select! {
                biased;
                Ok(()) = self.changes.changed() => {
                    let owns = self.changes.borrow_and_update().clone();
                    self.reshare(owns);
                }
                ev = self.events.next() => {
                    if let Some(ev) = self.pass(ev?) {
                        return Some(ev);
                    }
                }
                ev = next_live(&mut self.live) => {
                    // only changes: the old watch's own relists and errors are its business
                    if matches!(ev, Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)))
                        && uid_of(&ev).is_some_and(|uid| self.owns.owns(uid))
                    {
                        return Some(ev);
                    }
                }
            }
        }
    }
}

/// The next event of the watch kept during a list; never, without one (or once it ended).
async fn next_live(live: &mut Option<BoxStream<'static, Event>>) -> Event {
    loop {
        match live.as_mut() {
            Some(s) => match s.next().await {
                Some(ev) => return ev,
                None => *live = None,
            },
            None => return std::future::pending().await,
        }
    }
}

/// One kind's watch events, only for objects in `share` (see the module's notes); `store` is
/// the cache the events feed, `list` starts a watch (with its initial list).
pub fn events(
    share: Arc<Share>,
    store: Store<Meta>,
    list: impl Fn() -> BoxStream<'static, Event> + Send + 'static,
) -> impl Stream<Item = Event> + Send {
    let mut changes = share.changes.subscribe();
    let owns = changes.borrow_and_update().clone();
    let first = Watch {
        events: list(),
        store,
        list: Box::new(list),
        changes,
        owns,
        live: None,
        listing: true,
        dropped: Vec::new(),
    };
    futures::stream::unfold(first, |mut w| async move {
        let ev = w.next().await?;
        Some((ev, w))
    })
}

/// One controller run's memory of what each object looked like when it was last triggered.
#[derive(Default)]
struct Seen {
    hashes: HashMap<String, u64>,
    /// The uids a list under way has brought so far.
    listing: Option<HashSet<String>>,
    /// Objects that list brought worth a reconcile, queued once it is done.
    listed: Vec<Meta>,
    /// Listed objects not let out yet (see [`Pacer`]), and which of them still need it: a
    /// live event triggers one at once, a deletion forgets it.
    backlog: VecDeque<Meta>,
    held: HashSet<String>,
}

fn uid(o: &Meta) -> &str {
    o.metadata.uid.as_deref().unwrap_or_default()
}

impl Seen {
    /// Whether `o` (its trigger hash `hash`) is in the share and new or changed to this run.
    fn worth(&mut self, share: &Share, o: &Meta, hash: u64) -> bool {
        let uid = uid(o);
        share.owns(uid) && self.hashes.insert(uid.to_owned(), hash) != Some(hash)
    }

    /// What `ev` triggers now; objects a list brought go to the backlog.
    fn on(
        &mut self,
        share: &Share,
        pacer: &Pacer,
        ev: Event,
        hash: fn(&Meta) -> u64,
    ) -> Option<Result<Meta, watcher::Error>> {
        match ev {
            Err(err) => return Some(Err(err)),
            Ok(watcher::Event::Apply(o)) => {
                let h = hash(&o);
                if self.worth(share, &o, h) {
                    self.held.remove(uid(&o));
                    return Some(Ok(o));
                }
            }
            Ok(watcher::Event::Init) => self.listing = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(o)) => {
                if let Some(seen) = self.listing.as_mut() {
                    seen.insert(uid(&o).to_owned());
                }
                let h = hash(&o);
                if self.worth(share, &o, h) {
                    self.listed.push(o);
                }
            }
            // (objects kept across a list that starts over: their hashes are recorded already)
            Ok(watcher::Event::InitDone) => {
                if let Some(seen) = self.listing.take() {
                    // what the list did not bring is gone, or outside the share
                    self.hashes.retain(|uid, _| seen.contains(uid));
                }
                // taken, not drained: a drained Vec would keep room for a whole share
                for o in std::mem::take(&mut self.listed) {
                    if self.held.insert(uid(&o).to_owned()) {
                        self.backlog.push_back(o);
                    }
                }
            }
            Ok(watcher::Event::Delete(o)) => {
                let uid = uid(&o);
                self.hashes.remove(uid);
                self.held.remove(uid);
                pacer.finished(uid);
            }
        }
        None
    }

    /// The next backlog object still worth a reconcile (in the share, not deleted, not
    /// triggered by a live event since), marked let out.
    fn release(&mut self, share: &Share, pacer: &Pacer) -> Option<Meta> {
        while let Some(o) = self.backlog.pop_front() {
            let uid = uid(&o);
            if self.held.remove(uid) && self.hashes.contains_key(uid) && share.owns(uid) {
                pacer.released(uid.to_owned());
                return Some(o);
            }
        }
        if self.backlog.capacity() > 64 {
            self.backlog = VecDeque::new();
            self.held = HashSet::new();
        }
        None
    }
}

/// The objects of `events` (after the cache) worth a reconcile: in the share, and new to this
/// controller run or changed (their trigger `hash`). Objects a list brings are passed on only
/// once it is done (until then the cache does not show them, and a reconcile of an object the
/// cache does not show is dropped by the controller), and then at `pacer`'s pace; live events
/// go first. An object dropped from the cache (deleted, or left the share) is forgotten, so it
/// is reconciled once if it comes back. When `events` ends, the backlog is let out at once.
pub fn triggers(
    events: impl Stream<Item = Event> + Send + 'static,
    share: Arc<Share>,
    pacer: Arc<Pacer>,
    hash: fn(&Meta) -> u64,
) -> impl Stream<Item = Result<Meta, watcher::Error>> + Send {
    struct Run {
        events: Option<BoxStream<'static, Event>>,
        seen: Seen,
        share: Arc<Share>,
        pacer: Arc<Pacer>,
        hash: fn(&Meta) -> u64,
    }
    let run = Run {
        events: Some(events.boxed()),
        seen: Seen::default(),
        share,
        pacer,
        hash,
    };
    futures::stream::unfold(run, |mut r| async move {
        loop {
            let Some(events) = r.events.as_mut() else {
                let o = r.seen.release(&r.share, &r.pacer)?;
                return Some((Ok(o), r));
            };
            let ev = if r.seen.backlog.is_empty() {
                events.next().await
            } else {
                tokio::select! {
                    biased;
                    ev = events.next() => ev,
                    () = r.pacer.room() => {
                        match r.seen.release(&r.share, &r.pacer) {
                            Some(o) => return Some((Ok(o), r)),
                            None => continue,
                        }
                    }
                }
            };
            let Some(ev) = ev else {
                r.events = None;
                continue;
            };
            if let Some(out) = r.seen.on(&r.share, &r.pacer, ev, r.hash) {
                return Some((out, r));
            }
        }
    })
}

/// Starts watching `api` (metadata only), each object stripped by `strip`. The list is paged
/// (500 objects a page) rather than read whole from the watch cache: a sharded replica decodes
/// every object of the kind to keep a third of them, and a whole list holds all of them at once
/// (managedFields included) while the kept ones are allocated among them, so the replica's
/// memory would keep the shape of the whole list rather than of its share.
pub fn lister(
    api: Api<Meta>,
    strip: fn(&mut Meta),
) -> impl Fn() -> BoxStream<'static, Event> + Send + 'static {
    move || {
        watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .modify(strip)
            .boxed()
    }
}

#[cfg(test)]
#[path = "share/tests.rs"]
mod tests;

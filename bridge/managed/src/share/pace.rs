//! The pace at which a list's objects go into a controller's queue.
//!
//! kube-runtime's queue has no priorities: when a replica gains a share (it started, took over a
//! dead replica's objects, or regained leadership) and the list's thousands of objects go in at
//! once, a change a user makes a moment later waits behind all of them. So the objects a list
//! brings are held back here and let out at most [`Pacer::window`] at a time: one more each
//! time a reconcile of one of them ends. Live watch events are not held; they go into the
//! queue behind at most a window of listed objects, which keeps the controller's workers busy
//! (the window is its concurrency) without a long line in front of a user's change.

use std::collections::HashSet;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

/// How long the pacer waits for a released reconcile to end before it lets one more out
/// anyway: the controller may drop a trigger it never reports back (the object was deleted
/// between the release and its turn), and a slow provider must not stop the pass.
const STALL: Duration = Duration::from_secs(2);

/// One controller run's listed objects in the queue whose reconcile has not ended.
pub struct Pacer {
    window: usize,
    stall: Duration,
    released: Mutex<HashSet<String>>,
    ended: Notify,
}

/// A reconcile of a possibly released object; it frees the object's place when dropped.
pub struct Reconciling {
    pacer: Arc<Pacer>,
    uid: String,
}

impl Drop for Reconciling {
    fn drop(&mut self) {
        self.pacer.finished(&self.uid);
    }
}

impl Pacer {
    /// Lets at most `window` listed objects be queued or running at once.
    pub fn new(window: usize) -> Arc<Self> {
        Self::with_stall(window, STALL)
    }

    /// [`Pacer::new`] with another wait than [`STALL`] for a reconcile that does not end.
    pub fn with_stall(window: usize, stall: Duration) -> Arc<Self> {
        Arc::new(Self {
            window: window.max(1),
            stall,
            released: Mutex::default(),
            ended: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<String>> {
        self.released.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Listed objects let out whose reconcile has not ended.
    pub fn in_flight(&self) -> usize {
        self.lock().len()
    }

    /// Marks a reconcile of `uid` under way: its place is freed when the guard drops (the
    /// reconcile ended, or was turned away).
    pub fn reconciling(self: &Arc<Self>, uid: &str) -> Reconciling {
        Reconciling {
            pacer: self.clone(),
            uid: uid.to_owned(),
        }
    }

    pub(super) fn released(&self, uid: String) {
        self.lock().insert(uid);
    }

    /// `uid`'s reconcile ended, or the object is gone: its place is free.
    pub(super) fn finished(&self, uid: &str) {
        if self.lock().remove(uid) {
            self.ended.notify_waiters();
        }
    }

    /// Waits until one more listed object may be let out: fewer than the window are in
    /// flight, or none of them ended for the stall time ([`STALL`] by default).
    pub(super) async fn room(&self) {
        loop {
            let mut ended = pin!(self.ended.notified());
            ended.as_mut().enable();
            if self.lock().len() < self.window {
                return;
            }
            if tokio::time::timeout(self.stall, ended).await.is_err() {
                return;
            }
        }
    }
}

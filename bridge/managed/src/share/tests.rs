use super::*;
use kraken_kit::ring::View;

fn shard(me: &str, views: &[&[&str]]) -> Ownership {
    Ownership::Shard {
        me: me.into(),
        views: views.iter().map(|v| View::new(v.iter().copied())).collect(),
    }
}

/// Uids `a`'s share of {a, b} gives to `a` and to `b`.
fn split(n: usize) -> (Vec<String>, Vec<String>) {
    let ab = shard("a", &[&["a", "b"]]);
    (0..n)
        .map(|i| format!("uid-{i}"))
        .partition(|uid| ab.owns(uid))
}

#[test]
fn a_reconcile_outside_the_share_is_turned_away() {
    let share = Share::new(shard("a", &[&["a", "b"]]));
    let (mine, theirs) = split(50);
    assert!(share.enter(&mine[0]).is_some());
    assert!(share.enter(&theirs[0]).is_none());
    assert_eq!(share.running(), 0, "guards dropped");
}

#[tokio::test]
async fn drained_waits_only_for_objects_that_left() {
    let share = Share::new(shard("a", &[&["a"]]));
    let (stays, leaves) = split(50);
    let staying = share.enter(&stays[0]).expect("owned");
    let leaving = share.enter(&leaves[0]).expect("owned while alone");
    share.set(shard("a", &[&["a"], &["a", "b"]]));
    assert!(
        share.enter(&leaves[1]).is_none(),
        "no new work on what left"
    );
    let wait = tokio::time::timeout(std::time::Duration::from_millis(50), share.drained());
    assert!(
        wait.await.is_err(),
        "a reconcile of an object that left is running"
    );
    drop(leaving);
    tokio::time::timeout(std::time::Duration::from_secs(1), share.drained())
        .await
        .expect("drained once it finished, with the staying one still running");
    drop(staying);
}

fn meta(uid: &str) -> Meta {
    let mut m = Meta {
        types: None,
        metadata: Default::default(),
        _phantom: Default::default(),
    };
    m.metadata.name = Some(uid.to_owned());
    m.metadata.namespace = Some("ns".into());
    m.metadata.uid = Some(uid.to_owned());
    m
}

/// A list of `uids`, as a watch delivers it: Init, InitApply…, InitDone.
fn list_events(uids: &[String]) -> Vec<Event> {
    std::iter::once(Ok(watcher::Event::Init))
        .chain(uids.iter().map(|u| Ok(watcher::Event::InitApply(meta(u)))))
        .chain([Ok(watcher::Event::InitDone)])
        .collect()
}

/// A fake watch: every list replays `objects` (Init, InitApply…, InitDone), then waits.
fn fake_lister(
    objects: Vec<String>,
    lists: Arc<std::sync::atomic::AtomicUsize>,
) -> impl Fn() -> BoxStream<'static, Event> + Send + 'static {
    move || {
        lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        futures::stream::iter(list_events(&objects))
            .chain(futures::stream::pending())
            .boxed()
    }
}

#[tokio::test]
async fn the_cache_follows_the_share_listing_only_when_it_may_grow() {
    use kube::runtime::reflector::store::Writer;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    let (stays, leaves) = split(200);
    let all: Vec<String> = stays.iter().chain(&leaves).cloned().collect();
    let share = Share::new(shard("a", &[&["a"]]));
    let ar = kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let writer: Writer<Meta> = Writer::new(ar);
    let store = writer.as_reader();
    let lists = Arc::new(AtomicUsize::new(0));
    let stream = events(
        share.clone(),
        store.clone(),
        fake_lister(all.clone(), lists.clone()),
    )
    .reflect(writer);
    let task = tokio::spawn(stream.for_each(|_| std::future::ready(())));
    let cached = |n: usize| {
        let store = store.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(5), async {
                while store.state().len() != n {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .is_ok()
        }
    };
    assert!(cached(all.len()).await, "alone, a caches every object");

    share.set(shard("a", &[&["a"], &["a", "b"]]));
    assert!(
        cached(stays.len()).await,
        "narrowed: the objects that left are dropped"
    );
    assert_eq!(lists.load(Ordering::SeqCst), 1, "without listing again");
    assert!(
        store
            .state()
            .iter()
            .all(|o| share.owns(o.metadata.uid.as_deref().unwrap_or_default()))
    );

    share.set(shard("a", &[&["a"]]));
    assert!(
        cached(all.len()).await,
        "widened: listed again, the gained ones back"
    );
    assert_eq!(lists.load(Ordering::SeqCst), 2);
    task.abort();
}

/// The names `triggers` passes on for a finite `evs`, in order.
async fn triggered(evs: Vec<Event>, share: Arc<Share>) -> Vec<String> {
    triggers(
        futures::stream::iter(evs),
        share,
        Pacer::new(4),
        hash_of_name,
    )
    .map(|r| r.expect("no error").metadata.name.unwrap_or_default())
    .collect()
    .await
}

fn hash_of_name(m: &Meta) -> u64 {
    m.metadata.name.as_deref().map_or(0, |n| n.len() as u64)
}

#[tokio::test]
async fn what_a_list_brings_is_triggered_once_it_is_in_the_cache() {
    let share = Share::all();
    let evs: Vec<Event> = vec![
        Ok(watcher::Event::Init),
        Ok(watcher::Event::InitApply(meta("x"))),
        // the list starts over (a wider share) before it was done
        Ok(watcher::Event::Init),
        Ok(watcher::Event::InitApply(meta("x"))),
        Ok(watcher::Event::InitApply(meta("y"))),
        Ok(watcher::Event::InitDone),
        Ok(watcher::Event::Apply(meta("y"))),
        Ok(watcher::Event::Apply(meta("zz"))),
    ];
    let out = triggered(evs, share).await;
    assert_eq!(
        out,
        ["zz", "x", "y"],
        "the live event first; x once, after the list; y unchanged"
    );
}

#[tokio::test]
async fn an_object_that_left_and_came_back_is_reconciled_once_more() {
    let share = Share::all();
    let evs: Vec<Event> = vec![
        Ok(watcher::Event::Apply(meta("x"))),
        Ok(watcher::Event::Apply(meta("x"))),
        // dropped from the cache (it left the share), then listed again unchanged
        Ok(watcher::Event::Delete(meta("x"))),
        Ok(watcher::Event::Init),
        Ok(watcher::Event::InitApply(meta("x"))),
        Ok(watcher::Event::InitDone),
    ];
    let out = triggered(evs, share).await;
    assert_eq!(out, ["x", "x"]);
}

#[tokio::test]
async fn a_controller_started_again_reconciles_every_object_once() {
    let share = Share::all();
    let list = || -> Vec<Event> {
        vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(meta("x"))),
            Ok(watcher::Event::InitDone),
        ]
    };
    for run in 0..2 {
        let out: Vec<Result<Meta, watcher::Error>> = triggers(
            futures::stream::iter(list()),
            share.clone(),
            Pacer::new(4),
            hash_of_name,
        )
        .collect()
        .await;
        assert_eq!(out.len(), 1, "run {run}: its first list reconciles x");
    }
}

#[tokio::test]
async fn objects_outside_the_share_are_never_triggered() {
    let share = Share::new(shard("a", &[&["a", "b"]]));
    let (mine, theirs) = split(200);
    let evs: Vec<Event> = vec![
        Ok(watcher::Event::Apply(meta(&mine[0]))),
        Ok(watcher::Event::Apply(meta(&theirs[0]))),
    ];
    let out = triggered(evs, share).await;
    assert_eq!(out, [mine[0].clone()]);
}

/// A watch fed by hand: the sender's events, then nothing more (the stream stays open).
fn fed() -> (
    tokio::sync::mpsc::UnboundedSender<Event>,
    impl Stream<Item = Event> + Send + 'static,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    (tx, tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
}

fn list_of(tx: &tokio::sync::mpsc::UnboundedSender<Event>, uids: &[String]) {
    for ev in list_events(uids) {
        let _ = tx.send(ev);
    }
}

/// The next trigger's uid, or `None` if nothing comes within `wait`.
async fn next_within(
    out: &mut (impl Stream<Item = Result<Meta, watcher::Error>> + Unpin),
    wait: std::time::Duration,
) -> Option<String> {
    let o = tokio::time::timeout(wait, out.next()).await.ok()??;
    o.ok()?.metadata.uid
}

const SHORT: std::time::Duration = std::time::Duration::from_millis(100);

#[tokio::test]
async fn listed_objects_are_let_out_a_window_at_a_time() {
    let uids: Vec<String> = (0..8).map(|i| format!("u{i}")).collect();
    let (tx, events) = fed();
    let pacer = Pacer::with_stall(3, std::time::Duration::from_secs(60));
    let mut out = Box::pin(triggers(events, Share::all(), pacer.clone(), hash_of_name));
    list_of(&tx, &uids);
    let mut first = Vec::new();
    for _ in 0..3 {
        first.push(
            next_within(&mut out, SHORT)
                .await
                .expect("a window's worth"),
        );
    }
    assert_eq!(first, ["u0", "u1", "u2"], "in list order");
    assert_eq!(pacer.in_flight(), 3);
    assert_eq!(
        next_within(&mut out, SHORT).await,
        None,
        "the window is full"
    );
    drop(pacer.reconciling("u1"));
    assert_eq!(next_within(&mut out, SHORT).await.as_deref(), Some("u3"));
    assert_eq!(next_within(&mut out, SHORT).await, None, "full again");
    // a reconcile turned away (or of an object deleted meanwhile) frees its place too
    let _ = tx.send(Ok(watcher::Event::Delete(meta("u0"))));
    assert_eq!(next_within(&mut out, SHORT).await.as_deref(), Some("u4"));
}

#[tokio::test]
async fn a_live_change_goes_before_the_backlog_and_is_not_repeated() {
    let uids: Vec<String> = (0..6).map(|i| format!("u{i}")).collect();
    let (tx, events) = fed();
    let pacer = Pacer::with_stall(2, std::time::Duration::from_secs(60));
    let mut out = Box::pin(triggers(events, Share::all(), pacer.clone(), hash_of_name));
    list_of(&tx, &uids);
    assert_eq!(next_within(&mut out, SHORT).await.as_deref(), Some("u0"));
    assert_eq!(next_within(&mut out, SHORT).await.as_deref(), Some("u1"));
    // a user changes u4 (its trigger hash changes) while the window is full
    let mut changed = meta("u4");
    changed.metadata.name = Some("u4-renamed".into());
    let _ = tx.send(Ok(watcher::Event::Apply(changed)));
    assert_eq!(
        next_within(&mut out, SHORT).await.as_deref(),
        Some("u4"),
        "a live change waits for no window"
    );
    // a deleted one is never let out
    let _ = tx.send(Ok(watcher::Event::Delete(meta("u3"))));
    let mut rest = Vec::new();
    for done in ["u0", "u1", "u2", "u5"] {
        drop(pacer.reconciling(done));
        if let Some(u) = next_within(&mut out, SHORT).await {
            rest.push(u);
        }
    }
    assert_eq!(rest, ["u2", "u5"], "u3 deleted, u4 already triggered");
}

#[tokio::test]
async fn a_reconcile_that_never_ends_holds_the_pass_only_for_the_stall_time() {
    let uids: Vec<String> = (0..3).map(|i| format!("u{i}")).collect();
    let (tx, events) = fed();
    let pacer = Pacer::with_stall(1, std::time::Duration::from_millis(200));
    let mut out = Box::pin(triggers(events, Share::all(), pacer, hash_of_name));
    list_of(&tx, &uids);
    assert_eq!(next_within(&mut out, SHORT).await.as_deref(), Some("u0"));
    assert_eq!(
        next_within(&mut out, SHORT).await,
        None,
        "u0 still in flight"
    );
    let wait = std::time::Duration::from_secs(2);
    assert_eq!(next_within(&mut out, wait).await.as_deref(), Some("u1"));
}

#[tokio::test]
async fn changes_go_on_while_a_wider_share_is_listed() {
    use kube::runtime::reflector::store::Writer;
    use std::time::Duration;

    let (mine, theirs) = split(40);
    let share = Share::new(shard("a", &[&["a", "b"]]));
    let ar = kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let writer: Writer<Meta> = Writer::new(ar);
    // the first watch: a's objects listed, then whatever the test sends; the second (after the
    // share widens): a list that has not finished
    let (live_tx, live_rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let first_watch = Arc::new(Mutex::new(Some((mine.clone(), live_rx))));
    let lister = move || -> BoxStream<'static, Event> {
        match first_watch.lock().expect("lock").take() {
            Some((objects, rx)) => futures::stream::iter(list_events(&objects))
                .chain(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
                .boxed(),
            None => futures::stream::iter([Ok(watcher::Event::Init)])
                .chain(futures::stream::pending())
                .boxed(),
        }
    };
    let mut out = Box::pin(events(share.clone(), writer.as_reader(), lister));
    let mut seen = Vec::new();
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(100), out.next()).await {
        seen.push(ev);
    }
    assert_eq!(seen.len(), mine.len() + 2, "a's first list");
    share.set(shard("a", &[&["a"]]));
    assert!(
        matches!(next_event(&mut out).await, Some(Ok(watcher::Event::Init))),
        "the wider share is listed"
    );
    // the list is under way; a change on the old watch still comes through
    let _ = live_tx.send(Ok(watcher::Event::Apply(meta(&theirs[0]))));
    let _ = live_tx.send(Ok(watcher::Event::Init));
    let _ = live_tx.send(Ok(watcher::Event::Apply(meta(&mine[1]))));
    let uid = |ev: Option<Event>| match ev {
        Some(Ok(watcher::Event::Apply(o))) => o.metadata.uid,
        _ => None,
    };
    assert_eq!(
        uid(next_event(&mut out).await),
        Some(theirs[0].clone()),
        "now in the share"
    );
    assert_eq!(
        uid(next_event(&mut out).await),
        Some(mine[1].clone()),
        "the old watch's own relist is not passed on"
    );
    assert!(next_event(&mut out).await.is_none());
}

async fn next_event(out: &mut (impl Stream<Item = Event> + Unpin)) -> Option<Event> {
    tokio::time::timeout(std::time::Duration::from_millis(200), out.next())
        .await
        .ok()
        .flatten()
}

use super::*;
use crate::kit::ring::View;

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

/// A fake watch: every list replays `objects` (Init, InitApply…, InitDone), then waits.
fn fake_lister(
    objects: Vec<String>,
    lists: Arc<std::sync::atomic::AtomicUsize>,
) -> impl Fn() -> BoxStream<'static, Event> + Send + 'static {
    move || {
        lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let evs: Vec<Event> = std::iter::once(Ok(watcher::Event::Init))
            .chain(
                objects
                    .iter()
                    .map(|u| Ok(watcher::Event::InitApply(meta(u)))),
            )
            .chain([Ok(watcher::Event::InitDone)])
            .collect();
        futures::stream::iter(evs)
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
    let out: Vec<String> = triggers(futures::stream::iter(evs), share, hash_of_name)
        .map(|r| r.expect("no error").metadata.name.unwrap_or_default())
        .collect()
        .await;
    assert_eq!(out, ["x", "y", "zz"], "x once, after the list; y unchanged");
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
    let out: Vec<String> = triggers(futures::stream::iter(evs), share, hash_of_name)
        .map(|r| r.expect("no error").metadata.name.unwrap_or_default())
        .collect()
        .await;
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
        let out: Vec<Result<Meta, watcher::Error>> =
            triggers(futures::stream::iter(list()), share.clone(), hash_of_name)
                .collect()
                .await;
        assert_eq!(out.len(), 1, "run {run}: its first list reconciles x");
    }
}

#[tokio::test]
async fn objects_outside_the_share_are_never_triggered() {
    let share = Share::new(shard("a", &[&["a", "b"]]));
    let (mine, theirs) = split(20);
    let evs: Vec<Event> = vec![
        Ok(watcher::Event::Apply(meta(&mine[0]))),
        Ok(watcher::Event::Apply(meta(&theirs[0]))),
    ];
    let out: Vec<String> = triggers(futures::stream::iter(evs), share, hash_of_name)
        .map(|r| r.expect("no error").metadata.name.unwrap_or_default())
        .collect()
        .await;
    assert_eq!(out, [mine[0].clone()]);
}

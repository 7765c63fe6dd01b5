use super::*;

fn key(config: &str, generation: i64) -> PoolKey {
    PoolKey {
        address: "registry.terraform.io/hashicorp/random".into(),
        version: "3.6.0".into(),
        config_name: config.into(),
        uid: "uid-1".into(),
        generation,
        digest: "d1".into(),
    }
}

#[test]
fn a_namespace_gets_at_most_its_share_of_processes() {
    let mut map = HashMap::new();
    let now = Instant::now();
    let limit = Some(2);
    checkout(&mut map, &key("a/one", 1), now, limit).expect("first");
    checkout(&mut map, &key("a/two", 1), now, limit).expect("second");
    let err = checkout(&mut map, &key("a/three", 1), now, limit).err();
    assert!(
        matches!(err.as_deref(), Some(PoolError::NamespaceFull { namespace, limit: 2 }) if namespace == "a"),
        "{err:?}"
    );
    // Other namespaces are not affected; a known key and a newer generation still pass.
    checkout(&mut map, &key("b/one", 1), now, limit).expect("another namespace");
    checkout(&mut map, &key("a/one", 1), now, limit).expect("the same key");
    checkout(&mut map, &key("a/one", 2), now, limit).expect("a newer generation replaces");
}

#[test]
fn a_rotated_secret_or_a_recreated_config_retires_the_process() {
    let mut map = HashMap::new();
    let now = Instant::now();
    let (first, _) = checkout(&mut map, &key("a/default", 1), now, None).expect("checkout");
    // Same generation, another resolved configuration: the credentials Secret was rotated.
    let rotated = PoolKey {
        digest: "d2".into(),
        ..key("a/default", 1)
    };
    let (second, retired) = checkout(&mut map, &rotated, now, None).expect("checkout");
    assert_eq!(retired.len(), 1);
    assert!(Arc::ptr_eq(&retired[0], &first) && !Arc::ptr_eq(&first, &second));
    // Deleted and created again: a new UID at generation 1 is not "older" than 3.
    let (_, _) = checkout(&mut map, &key("a/default", 3), now, None).expect("checkout");
    let recreated = PoolKey {
        uid: "uid-2".into(),
        ..key("a/default", 1)
    };
    let (_, retired) = checkout(&mut map, &recreated, now, None).expect("checkout");
    assert_eq!(retired.len(), 1, "the old object's process goes");
    assert_eq!(map.len(), 1);
    assert!(map.contains_key(&recreated));
}

#[test]
fn checkout_reuses_the_cell_for_the_same_key() {
    let mut map = HashMap::new();
    let now = Instant::now();
    let (a, retired) = checkout(&mut map, &key("a/default", 1), now, None).expect("checkout");
    assert!(retired.is_empty());
    let (b, _) = checkout(&mut map, &key("a/default", 1), now, None).expect("checkout");
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(map.len(), 1);
}

#[test]
fn checkout_keeps_other_configs_and_versions_apart() {
    let mut map = HashMap::new();
    let now = Instant::now();
    let (a, _) = checkout(&mut map, &key("a/default", 1), now, None).expect("checkout");
    let (b, retired) = checkout(&mut map, &key("b/default", 1), now, None).expect("checkout");
    assert!(retired.is_empty());
    let mut other_version = key("a/default", 2);
    other_version.version = "3.7.0".into();
    let (c, retired) = checkout(&mut map, &other_version, now, None).expect("checkout");
    assert!(
        retired.is_empty(),
        "another version is not a newer generation"
    );
    assert!(!Arc::ptr_eq(&a, &b) && !Arc::ptr_eq(&a, &c));
    assert_eq!(map.len(), 3);
}

#[test]
fn a_newer_generation_retires_older_ones_and_refuses_going_back() {
    let mut map = HashMap::new();
    let now = Instant::now();
    let (g1, _) = checkout(&mut map, &key("a/default", 1), now, None).expect("checkout");
    let (_, retired) = checkout(&mut map, &key("a/default", 3), now, None).expect("checkout");
    assert_eq!(retired.len(), 1);
    assert!(Arc::ptr_eq(&retired[0], &g1));
    assert!(!map.contains_key(&key("a/default", 1)));
    let err = checkout(&mut map, &key("a/default", 2), now, None).err();
    assert!(
        matches!(err.as_deref(), Some(PoolError::Stale { current: 3, .. })),
        "{err:?}"
    );
}

#[test]
fn entry_is_held_while_a_caller_holds_the_cell() {
    let entry = Entry {
        cell: Arc::default(),
        last_used: Instant::now(),
    };
    assert!(entry.unheld());
    let caller = entry.cell.clone();
    assert!(!entry.unheld());
    drop(caller);
    assert!(entry.unheld());
}

#[tokio::test]
async fn a_failed_launch_caches_nothing() {
    let pool = ProviderPool::new(PoolOptions {
        max_concurrency_per_process: 2,
        idle_timeout: Duration::from_secs(60),
    });
    let mut launch = LaunchOptions::new("/nonexistent/terraform-provider-nothing");
    launch.handshake_timeout = Duration::from_secs(5);
    let err = pool
        .get(&key("a/default", 1), launch, &Value::Null)
        .await
        .err();
    assert!(matches!(err, Some(PoolError::Launch { .. })), "{err:?}");
    assert_eq!(pool.stats(), PoolStats::default());
    assert!(pool.state().entries.is_empty());
}

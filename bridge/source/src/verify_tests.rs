use std::time::Duration;

use super::*;
use kraken_kit::fake_api::FakeApi;
use kraken_provider::pool::PoolOptions;

#[tokio::test]
async fn a_package_changed_after_install_is_not_launched() {
    let api = FakeApi::new();
    let pool = Arc::new(ProviderPool::new(PoolOptions {
        max_concurrency_per_process: 1,
        idle_timeout: Duration::from_secs(60),
    }));
    let source = Source::new(api.client(), pool, Resolver::new(Vec::new()));
    let dir = tempfile::tempdir().expect("tempdir");
    let binary = dir.path().join("terraform-provider-x_v1.0.0");
    std::fs::write(&binary, b"the provider as installed").expect("write");
    let h1 = kraken_registry_fetch::hash::dir_hash(dir.path())
        .expect("hash")
        .as_str()
        .to_owned();
    let resolved = Resolved {
        address: "registry.terraform.io/x/x".into(),
        version: "1.0.0".into(),
        binary: binary.clone(),
    };
    let recorded = vec![h1, "zh:0000".to_owned()];
    assert_eq!(source.verify(&resolved, &recorded).await, Ok(()));
    // Someone with write access to the plugin cache swaps the binary.
    std::fs::write(&binary, b"something else entirely!").expect("write");
    let err = source
        .verify(&resolved, &recorded)
        .await
        .expect_err("refused");
    assert!(err.contains("will not be launched"), "{err}");
    // Nothing recorded (installed before hashes were kept): nothing to compare.
    assert_eq!(source.verify(&resolved, &[]).await, Ok(()));
}

#[tokio::test]
async fn field_maps_no_one_holds_are_dropped_past_the_bound() {
    let pool = Arc::new(ProviderPool::new(PoolOptions {
        max_concurrency_per_process: 1,
        idle_timeout: Duration::from_secs(60),
    }));
    let source = Source::new(FakeApi::new().client(), pool, Resolver::new(Vec::new()));
    let schema = kraken_codegen::schema::Schema::default();
    let key = |i: usize| ("p".to_owned(), "1".to_owned(), format!("t{i}"));
    let held = source.field_map(key(0), || FieldMap::for_resource("t0", &schema));
    for i in 1..MAX_FIELD_MAPS {
        source.field_map(key(i), || FieldMap::for_resource("t", &schema));
    }
    let count = || {
        source
            .field_maps
            .lock()
            .map(|m| m.len())
            .unwrap_or_default()
    };
    assert_eq!(count(), MAX_FIELD_MAPS);
    // One more: the unused ones go, the held one stays (the same map, not rebuilt).
    source.field_map(key(MAX_FIELD_MAPS), || FieldMap::for_resource("t", &schema));
    assert_eq!(count(), 2);
    let again = source.field_map(key(0), || FieldMap::for_resource("t0", &schema));
    assert!(Arc::ptr_eq(&held, &again));
}

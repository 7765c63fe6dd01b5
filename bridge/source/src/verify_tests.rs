use std::time::Duration;

use super::*;
use installed::Lookup;
use kraken_kit::fake_api::FakeApi;
use kraken_provider::pool::PoolOptions;

/// A plugin directory with `versions` of a provider (each binary's content its version).
fn plugin_dir(versions: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for v in versions {
        let pkg = dir
            .path()
            .join("registry.terraform.io/x/x")
            .join(v)
            .join(kraken_registry_fetch::Platform::current().to_string());
        std::fs::create_dir_all(&pkg).expect("mkdir");
        std::fs::write(pkg.join(format!("terraform-provider-x_v{v}")), v).expect("write");
    }
    dir
}

fn h1(dir: &std::path::Path, version: &str) -> String {
    let pkg = dir
        .join("registry.terraform.io/x/x")
        .join(version)
        .join(kraken_registry_fetch::Platform::current().to_string());
    kraken_registry_fetch::hash::dir_hash(&pkg)
        .expect("hash")
        .as_str()
        .to_owned()
}

fn source_over(api: &FakeApi, dir: &std::path::Path) -> Source {
    let pool = Arc::new(ProviderPool::new(PoolOptions {
        max_concurrency_per_process: 1,
        idle_timeout: Duration::from_secs(60),
    }));
    Source::new(api.client(), pool, Resolver::new(vec![dir.to_path_buf()]))
}

fn provider(name: &str, version: &str, hashes: &[String]) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "core.kraken.dev/v1alpha1", "kind": "Provider",
        "metadata": {"name": name},
        "spec": {"source": "x/x"},
        "status": {"address": "registry.terraform.io/x/x", "version": version, "hashes": hashes},
    })
}

fn config(spec: serde_json::Value) -> ProviderConfig {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
        "metadata": {"name": "pc", "namespace": "team"},
        "spec": spec,
    }))
    .expect("ProviderConfig")
}

#[tokio::test]
async fn a_package_changed_after_install_is_not_launched() {
    let api = FakeApi::new();
    let dir = plugin_dir(&["1.0.0"]);
    let recorded = vec![h1(dir.path(), "1.0.0"), "zh:0000".to_owned()];
    api.insert("providers", provider("x", "1.0.0", &recorded));
    let source = source_over(&api, dir.path());
    let by_ref = config(serde_json::json!({"providerRef": {"name": "x"}}));
    let got = installed::binary(&source, &by_ref, Lookup::Watched)
        .await
        .expect("launched");
    assert_eq!(got.version, "1.0.0");
    // Someone with write access to the plugin cache swaps the binary.
    std::fs::write(&got.binary, b"something else entirely!").expect("write");
    let err = installed::binary(&source, &by_ref, Lookup::Watched)
        .await
        .expect_err("refused");
    assert!(err.contains("will not be launched"), "{err}");
    assert!(err.contains("Provider x"), "{err}");
    // Nothing checkable recorded: refused too.
    api.insert("providers", provider("y", "1.0.0", &["zh:0000".to_owned()]));
    let err = installed::binary(
        &source,
        &config(serde_json::json!({"providerRef": {"name": "y"}})),
        Lookup::Watched,
    )
    .await
    .expect_err("refused");
    assert!(err.contains("no h1: hash"), "{err}");
}

#[tokio::test]
async fn spec_source_launches_only_what_a_provider_or_a_lock_file_recorded() {
    let api = FakeApi::new();
    // 0.9.0 is an older build nobody records any more; 1.0.0 a Provider installed.
    let dir = plugin_dir(&["0.9.0", "1.0.0"]);
    api.insert(
        "providers",
        provider("x", "1.0.0", &[h1(dir.path(), "1.0.0")]),
    );
    let source = source_over(&api, dir.path());
    let got = installed::binary(
        &source,
        &config(serde_json::json!({"source": "x/x"})),
        Lookup::Watched,
    )
    .await
    .expect("the recorded version");
    assert_eq!(got.version, "1.0.0");
    let old = config(serde_json::json!({"source": "x/x", "version": "= 0.9.0"}));
    let err = installed::binary(&source, &old, Lookup::Watched)
        .await
        .expect_err("not recorded");
    assert!(err.contains("only recorded packages are launched"), "{err}");
    // The administrator pins it in the directory's lock file: now it may run.
    let lock = format!(
        "provider \"registry.terraform.io/x/x\" {{\n  version = \"0.9.0\"\n  hashes = [\"{}\"]\n}}\n",
        h1(dir.path(), "0.9.0")
    );
    std::fs::write(dir.path().join(kraken_provider::pins::LOCK_FILE), lock).expect("lock");
    let got = installed::binary(&source, &old, Lookup::Watched)
        .await
        .expect("pinned");
    assert_eq!(got.version, "0.9.0");
}

/// A fetcher that installs the package a Provider recorded into a plugin directory.
struct Installs(std::path::PathBuf, std::sync::Mutex<Vec<String>>);

#[async_trait::async_trait]
impl FetchInstalled for Installs {
    async fn fetch(&self, p: &kraken_core_kinds::Provider) -> std::result::Result<(), String> {
        let version = p
            .status
            .as_ref()
            .and_then(|s| s.version.clone())
            .unwrap_or_default();
        self.1.lock().expect("lock").push(version.clone());
        let pkg = self
            .0
            .join("registry.terraform.io/x/x")
            .join(&version)
            .join(kraken_registry_fetch::Platform::current().to_string());
        std::fs::create_dir_all(&pkg).map_err(|e| e.to_string())?;
        std::fs::write(
            pkg.join(format!("terraform-provider-x_v{version}")),
            &version,
        )
        .map_err(|e| e.to_string())
    }
}

#[tokio::test]
async fn a_recorded_package_not_here_is_fetched_when_the_source_can() {
    let api = FakeApi::new();
    // The hash of the package as the operator installed it (elsewhere).
    let there = plugin_dir(&["1.0.0"]);
    api.insert(
        "providers",
        provider("x", "1.0.0", &[h1(there.path(), "1.0.0")]),
    );
    let here = tempfile::tempdir().expect("tempdir");
    let mut source = source_over(&api, here.path());
    let by_ref = config(serde_json::json!({"providerRef": {"name": "x"}}));
    let err = installed::binary(&source, &by_ref, Lookup::Watched)
        .await
        .expect_err("not here");
    assert!(err.contains("no version of"), "{err}");
    let fetcher = Arc::new(Installs(here.path().to_path_buf(), Default::default()));
    source.fetch = Some(fetcher.clone());
    let got = installed::binary(&source, &by_ref, Lookup::Watched)
        .await
        .expect("fetched");
    assert_eq!(got.version, "1.0.0");
    assert_eq!(*fetcher.1.lock().expect("lock"), ["1.0.0"]);
    // Found now: not fetched again.
    installed::binary(&source, &by_ref, Lookup::Watched)
        .await
        .expect("here");
    assert_eq!(fetcher.1.lock().expect("lock").len(), 1);
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

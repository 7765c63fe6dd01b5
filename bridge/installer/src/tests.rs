use super::package::{fetch_reason, locked};
use super::*;
use kraken_core_kinds::ProviderSpec;

/// Step 3 for the selection of `p`.
fn generate(
    p: &Provider,
    address: &str,
    schema: &ProviderSchema,
) -> Result<Vec<kraken_codegen::GeneratedCrd>, Failure> {
    super::crds::generate(&p.spec.resources, &p.spec.data_sources, address, schema)
}

fn provider(resources: &[&str]) -> Provider {
    let spec = ProviderSpec {
        source: "hashicorp/random".into(),
        version: None,
        mirror: None,
        resources: resources.iter().map(|s| (*s).to_owned()).collect(),
        data_sources: Vec::new(),
        allow_unsigned: false,
        remove_crds: false,
    };
    Provider::new("random", spec)
}

fn random_schema() -> ProviderSchema {
    test_schema("random")
}

/// The committed schema of test provider `hashicorp/<name>`.
fn test_schema(name: &str) -> ProviderSchema {
    // At run time: a build cache shared between checkouts may run a binary built in another.
    let path = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(
            || env!("CARGO_MANIFEST_DIR").into(),
            std::path::PathBuf::from,
        )
        .join(format!("../../codegen/testdata/schemas/{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let json: Json = serde_json::from_str(&text).unwrap_or_default();
    kraken_codegen::tfjson::parse_provider_schemas(&json)
        .ok()
        .and_then(|mut all| all.remove(&format!("registry.terraform.io/hashicorp/{name}")))
        .unwrap_or_else(|| panic!("{} holds the {name} provider's schema", path.display()))
}

/// `spec.dataSources` selects data source kinds on their own: listing only data sources
/// installs no resource kind, and a data source pattern matching nothing is refused by name.
#[test]
fn data_sources_are_selected_apart_from_resources() -> Result<(), Failure> {
    let schema = test_schema("null");
    let address = "registry.terraform.io/hashicorp/null";
    let mut p = provider(&[]);
    p.spec.data_sources = vec!["null_data_source".into()];
    let crds = generate(&p, address, &schema)?;
    let kinds: Vec<(&str, &str)> = crds
        .iter()
        .map(|c| (c.kind.as_str(), c.group.as_str()))
        .collect();
    assert_eq!(kinds, [("DataDataSource", "data.null.tf.kraken.dev")]);
    p.spec.resources = vec!["null_resource".into()];
    let kinds: Vec<String> = generate(&p, address, &schema)?
        .iter()
        .map(|c| c.kind.clone())
        .collect();
    assert_eq!(kinds, ["Resource", "DataDataSource"]);
    p.spec.data_sources = vec!["null_nonesuch".into()];
    let message = generate(&p, address, &schema)
        .err()
        .map(|f| f.message)
        .unwrap_or_default();
    assert!(message.contains("data source null_nonesuch"), "{message}");
    Ok(())
}

#[test]
fn kinds_are_generated_only_for_the_selected_types() -> Result<(), Failure> {
    let schema = random_schema();
    let address = "registry.terraform.io/hashicorp/random";
    assert!(generate(&provider(&[]), address, &schema)?.is_empty());
    let crds = generate(&provider(&["random_pet", "random_i*"]), address, &schema)?;
    let kinds: Vec<&str> = crds.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, ["Id", "Integer", "Pet"]);
    let err = generate(
        &provider(&["random_pet", "random_nonesuch"]),
        address,
        &schema,
    )
    .err()
    .map(|f| (f.reason, f.message));
    let (reason, message) = err.unwrap_or_default();
    assert_eq!(reason, reason::UNKNOWN_RESOURCE_TYPES);
    assert!(message.contains("random_nonesuch"), "{message}");
    Ok(())
}

#[test]
fn install_failures_map_to_reasons_a_user_can_act_on() {
    use fetch::Error as E;
    let mismatch = E::ChecksumMismatch {
        what: "zip".into(),
        expected: "a".into(),
        actual: "b".into(),
    };
    assert_eq!(fetch_reason(&mismatch), reason::VERIFICATION_FAILED);
    let unknown_key = E::SignatureUnknownKey { key_id: "x".into() };
    assert_eq!(fetch_reason(&unknown_key), reason::VERIFICATION_FAILED);
    let timeout = E::Timeout {
        url: "https://x".into(),
    };
    assert_eq!(fetch_reason(&timeout), reason::FETCH_FAILED);
    assert!(timeout.is_transient());
}

#[test]
fn the_installed_version_is_kept_like_a_lock_file_entry() {
    let provider: fetch::ProviderAddress =
        "hashicorp/random".parse().unwrap_or_else(|e| panic!("{e}"));
    let mut status = ProviderStatus {
        address: Some("registry.terraform.io/hashicorp/random".into()),
        version: Some("3.6.0".into()),
        hashes: vec!["h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".into()],
        ..Default::default()
    };
    let lock = locked(&status, &provider).map(|l| (l.version.to_string(), l.hashes.len()));
    assert_eq!(lock, Some(("3.6.0".to_owned(), 1)));
    status.address = Some("registry.terraform.io/hashicorp/time".into());
    assert!(locked(&status, &provider).is_none());
}

mod controller;

//! Golden files: the CRDs generated from `codegen/testdata/schemas/<provider>.json` must equal
//! the committed `generated-crds/<provider>/` byte for byte.
//!
//! Regenerate them with one command:
//!
//! ```text
//! KRAKEN_UPDATE_GOLDEN=1 cargo test -p kraken-codegen --test golden
//! ```
//!
//! (`scripts/generate.sh` also refreshes the schemas from the provider binaries first.)
//! Golden output includes data sources, so both kinds of CRD are reviewed in diffs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kraken_codegen::tfjson::parse_provider_schemas;
use kraken_codegen::{Generated, Options, generate, provider_type, write_dir};

/// From the `CARGO_MANIFEST_DIR` cargo sets when it runs the test (not the one compiled in: a
/// build cache shared between two checkouts may run a binary compiled in the other one).
fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .parent()
        .expect("codegen lives in the workspace")
        .to_owned()
}

/// (provider type, address, generated) for every test schema.
fn generate_all() -> Vec<(String, Generated)> {
    let dir = repo_root().join("codegen/testdata/schemas");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("testdata/schemas")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no schemas in {}", dir.display());
    let opts = Options {
        data_sources: true,
        ..Options::default()
    };
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read schema");
        let doc: serde_json::Value = serde_json::from_str(&text).expect("schema json");
        for (address, schema) in parse_provider_schemas(&doc).expect("parse schema") {
            let generated = generate(&address, &schema, &opts).expect("generate");
            assert!(
                generated.report.errors.is_empty(),
                "{address}: {}",
                generated.report
            );
            out.push((provider_type(&address).to_owned(), generated));
        }
    }
    out
}

fn read_dir_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read"))
        })
        .collect()
}

#[test]
fn generated_crds_match_the_committed_files() {
    let update = std::env::var_os("KRAKEN_UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (provider, generated) in generate_all() {
        let golden = repo_root().join("generated-crds").join(&provider);
        if update {
            write_dir(&generated, &golden).expect("write golden files");
            continue;
        }
        let fresh = tempfile::tempdir().expect("tempdir");
        write_dir(&generated, fresh.path()).expect("write");
        let want = read_dir_files(fresh.path());
        let got = read_dir_files(&golden);
        for name in want.keys().chain(got.keys()) {
            if want.get(name) != got.get(name) {
                stale.push(format!("generated-crds/{provider}/{name}"));
            }
        }
    }
    stale.sort();
    stale.dedup();
    assert!(
        stale.is_empty(),
        "golden files differ: {stale:?}\nrun KRAKEN_UPDATE_GOLDEN=1 cargo test -p kraken-codegen --test golden"
    );
}

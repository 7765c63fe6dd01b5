//! `kraken codegen` as a user runs it: from a real provider binary or a schema file to CRD files,
//! and a clear error for every input a user can get wrong.

use std::path::Path;
use std::process::{Command, Output};

use anyhow::ensure;
use kraken_tests::{TestEnv, kraken_bin, repo_root, scratch_dir};

fn kraken(args: &[&str]) -> anyhow::Result<Output> {
    Ok(Command::new(kraken_bin()?).args(args).output()?)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The YAML files of a directory, by name.
fn yaml_files(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            files.push((name, std::fs::read_to_string(&path)?));
        }
    }
    files.sort();
    Ok(files)
}

#[test]
fn codegen_from_the_binary_matches_the_committed_crds() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let random = env.provider("random")?;
    let out = scratch_dir("codegen-cli-")?;
    let run = kraken(&[
        "codegen",
        "--provider",
        &random.path.to_string_lossy(),
        "--data-sources",
        "--out",
        &out.path().to_string_lossy(),
    ])?;
    ensure!(
        run.status.success(),
        "kraken codegen failed: {}",
        stderr(&run)
    );
    let summary = String::from_utf8_lossy(&run.stdout);
    ensure!(
        summary.contains("CRDs for registry.terraform.io/hashicorp/random"),
        "{summary}"
    );
    let got = yaml_files(out.path())?;
    let want = yaml_files(&repo_root().join("generated-crds/random"))?;
    ensure!(
        got == want,
        "CRDs generated from the binary differ from generated-crds/random"
    );
    Ok(())
}

#[test]
fn resources_filter_installs_only_what_is_asked() -> anyhow::Result<()> {
    let out = scratch_dir("codegen-cli-")?;
    let schema = repo_root().join("codegen/testdata/schemas/random.json");
    let run = kraken(&[
        "codegen",
        "--schema",
        &schema.to_string_lossy(),
        "--resources",
        "random_pet,random_id",
        "--out",
        &out.path().to_string_lossy(),
    ])?;
    ensure!(run.status.success(), "{}", stderr(&run));
    let names: Vec<String> = yaml_files(out.path())?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    ensure!(
        names
            == [
                "index.yaml",
                "kustomization.yaml",
                "random.tf.kraken.dev_ids.yaml",
                "random.tf.kraken.dev_pets.yaml"
            ],
        "{names:?}"
    );
    Ok(())
}

#[test]
fn bad_inputs_get_clear_errors() -> anyhow::Result<()> {
    let out = scratch_dir("codegen-cli-")?;
    let dir = out.path().to_string_lossy().into_owned();
    let schema = repo_root().join("codegen/testdata/schemas/random.json");
    let schema = schema.to_string_lossy();
    let garbage = out.path().join("garbage.json");
    std::fs::write(&garbage, "{not json")?;
    let garbage = garbage.to_string_lossy();
    let cases: [(&[&str], &str); 5] = [
        (&["codegen", "--out", &dir], "--provider"),
        (
            &[
                "codegen",
                "--schema",
                "/nonexistent/schema.json",
                "--out",
                &dir,
            ],
            "cannot read /nonexistent/schema.json",
        ),
        (
            &["codegen", "--schema", &garbage, "--out", &dir],
            "is not valid JSON",
        ),
        (
            &[
                "codegen",
                "--schema",
                &schema,
                "--address",
                "example.com/x/y",
                "--out",
                &dir,
            ],
            "has no provider example.com/x/y",
        ),
        (
            &[
                "codegen",
                "--schema",
                &schema,
                "--resources",
                "nope_*",
                "--out",
                &dir,
            ],
            "the pattern matches no resource type",
        ),
    ];
    for (args, want) in cases {
        let run = kraken(args)?;
        ensure!(!run.status.success(), "{args:?} must fail");
        ensure!(
            stderr(&run).contains(want),
            "{args:?}: expected {want:?} in:\n{}",
            stderr(&run)
        );
    }
    Ok(())
}

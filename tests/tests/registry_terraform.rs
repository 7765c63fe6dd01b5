//! Lock-file and cache compatibility with the real Terraform CLI (1.8.5, built from source):
//! Kraken reads and verifies a `.terraform.lock.hcl` that `terraform init` wrote, writes lock
//! files `terraform init` accepts (and rejects when tampered with), and produces the same lock
//! as Terraform installing from the same registry.

mod registry_common;

use std::path::Path;
use std::process::Command;

use kraken_tests::TestEnv;
use registry_common::{fixture, json_of, output};

const MAIN_TF: &str = r#"terraform {
  required_providers {
    random = { source = "SOURCE", version = "~> 3.6" }
  }
}
"#;

fn terraform(
    dir: &Path,
    cli_config: &Path,
    extra_env: &[(&str, &Path)],
) -> anyhow::Result<Command> {
    let env = TestEnv::load()?;
    let mut cmd = Command::new(env.path("KRAKEN_TEST_TERRAFORM")?);
    cmd.current_dir(dir)
        .args(["init", "-input=false", "-no-color"])
        .env("TF_CLI_CONFIG_FILE", cli_config)
        .env("CHECKPOINT_DISABLE", "1")
        .env_remove("TF_PLUGIN_CACHE_DIR");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    Ok(cmd)
}

#[tokio::test(flavor = "multi_thread")]
async fn kraken_verifies_and_preserves_a_lock_terraform_wrote() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let work = tempfile::tempdir()?;
    std::fs::write(
        work.path().join("main.tf"),
        MAIN_TF.replace("SOURCE", "hashicorp/random"),
    )?;
    let out = output(terraform(
        work.path(),
        &env.path("KRAKEN_TEST_TF_CLI_CONFIG")?,
        &[],
    )?)
    .await?;
    anyhow::ensure!(
        out.status.success(),
        "terraform init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lock = work.path().join(".terraform.lock.hcl");
    let written = std::fs::read_to_string(&lock)?;
    // Kraken's renderer reproduces Terraform's file byte for byte.
    assert_eq!(
        written.parse::<kraken_registry_fetch::LockFile>()?.render(),
        written
    );

    let cache = tempfile::tempdir()?;
    let mut cmd = Command::new(kraken_tests::kraken_bin()?);
    cmd.args([
        "fetch",
        "hashicorp/random",
        "--version",
        "~> 3.6",
        "--json",
        "--mirror",
    ])
    .arg(env.path("KRAKEN_TEST_PLUGIN_DIR")?)
    .arg("--cache-dir")
    .arg(cache.path())
    .arg("--lock-file")
    .arg(&lock);
    let got = json_of(&output(cmd).await?)?;
    assert!(
        written.contains(got["h1"].as_str().unwrap_or("?")),
        "Kraken's h1 {} is not in\n{written}",
        got["h1"]
    );
    assert_eq!(
        std::fs::read_to_string(&lock)?,
        written,
        "the lock file is left as Terraform wrote it"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn terraform_accepts_the_lock_kraken_writes_and_rejects_a_tampered_one() -> anyhow::Result<()>
{
    let env = TestEnv::load()?;
    let f = fixture("random").await?;
    let work = tempfile::tempdir()?;
    std::fs::write(
        work.path().join("main.tf"),
        MAIN_TF.replace("SOURCE", "hashicorp/random"),
    )?;
    let lock = work.path().join(".terraform.lock.hcl");
    let mut cmd = f.kraken_fetch(&["--version", "~> 3.6", "--json", "--lock-file"])?;
    cmd.arg(&lock);
    json_of(&output(cmd).await?)?;
    let ours = std::fs::read_to_string(&lock)?;

    // Terraform installs from its own filesystem mirror and must find our h1 there.
    let cli_config = env.path("KRAKEN_TEST_TF_CLI_CONFIG")?;
    let out = output(terraform(work.path(), &cli_config, &[])?).await?;
    anyhow::ensure!(
        out.status.success(),
        "terraform init rejected Kraken's lock:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&lock)?,
        ours,
        "Terraform had nothing to change"
    );

    // Control: Terraform really checks the hash Kraken wrote.
    std::fs::remove_dir_all(work.path().join(".terraform"))?;
    std::fs::write(
        &lock,
        ours.replace(&f.h1, "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
    )?;
    let out = output(terraform(work.path(), &cli_config, &[])?).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("checksums"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn terraform_and_kraken_install_from_the_same_registry_identically() -> anyhow::Result<()> {
    let f = fixture("random").await?;
    let source = format!("{}/hashicorp/random", f.server.host());
    let work = tempfile::tempdir()?;
    std::fs::write(
        work.path().join("main.tf"),
        MAIN_TF.replace("SOURCE", &source),
    )?;
    let cli_config = work.path().join("terraformrc");
    std::fs::write(&cli_config, "disable_checkpoint = true\n")?;
    // Go trusts the test CA through SSL_CERT_FILE; Terraform verifies our OpenPGP signature.
    let out = output(terraform(
        work.path(),
        &cli_config,
        &[("SSL_CERT_FILE", f.server.ca_file())],
    )?)
    .await?;
    anyhow::ensure!(
        out.status.success(),
        "terraform init from the test registry:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let terraform_lock = std::fs::read_to_string(work.path().join(".terraform.lock.hcl"))?;

    let kraken_lock = work.path().join("kraken.lock.hcl");
    let mut cmd = std::process::Command::new(kraken_tests::kraken_bin()?);
    cmd.args([
        "fetch",
        &source,
        "--version",
        "~> 3.6",
        "--json",
        "--ca-cert",
    ])
    .arg(f.server.ca_file())
    .arg("--cache-dir")
    .arg(f.cache.path())
    .arg("--lock-file")
    .arg(&kraken_lock);
    json_of(&output(cmd).await?)?;
    assert_eq!(std::fs::read_to_string(&kraken_lock)?, terraform_lock);

    // Kraken's cache is a valid TF_PLUGIN_CACHE_DIR for Terraform.
    std::fs::remove_dir_all(work.path().join(".terraform"))?;
    let out = output(terraform(
        work.path(),
        &cli_config,
        &[
            ("SSL_CERT_FILE", f.server.ca_file()),
            ("TF_PLUGIN_CACHE_DIR", f.cache.path()),
        ],
    )?)
    .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("from the shared cache directory"),
        "{stdout}"
    );
    Ok(())
}

//! `kraken convert` over the examples the test providers' own repositories ship (`examples/` of
//! the Go module sources the test environment builds them from), each example file converted on
//! its own with the real provider binaries' schemas, and the conversion rate printed.
//!
//! Many of these examples are fragments for a documentation page rather than modules: they
//! read variables they do not declare, or resources of other providers they do not configure.
//! Terraform refuses those as well. So the table below says, per example, what `kraken convert`
//! gives today — converted (how many instances), or refused with the message that must say why —
//! and a change in either direction fails the test, which keeps the rate in `docs/convert.md`
//! true. (terraform-provider-null's pinned source ships no examples.)

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, ensure};
use kraken_tests::{TestEnv, kraken_bin};

/// What one example gives.
enum Want {
    /// Converted: this many instances, nothing reported.
    Converted(usize),
    /// Converted, with a construct reported as not converted (its message).
    Partly(usize, &'static str),
    /// Refused, saying this.
    Refused(&'static str),
}

use Want::{Converted, Partly, Refused};

const UNDECLARED_AMI: &str = "no variable \"ami_id\" is declared";
const AWS_AMI: &str = "data.aws_ami.example is not declared in this module";
const PROVIDER_FUNCTION: &str = "is not evaluated by kraken convert";

/// Per provider, per example file (relative to its `examples/`): what it gives.
const EXAMPLES: &[(&str, &[(&str, Want)])] = &[
    (
        "RANDOM",
        &[
            ("provider/provider.tf", Refused(UNDECLARED_AMI)),
            (
                "resources/random_bytes/resource.tf",
                Refused("provider \"azurerm\""),
            ),
            ("resources/random_id/resource.tf", Refused(UNDECLARED_AMI)),
            (
                "resources/random_integer/resource.tf",
                Refused("no variable \"listener_arn\" is declared"),
            ),
            ("resources/random_password/resource.tf", Converted(2)),
            ("resources/random_pet/resource.tf", Refused(UNDECLARED_AMI)),
            ("resources/random_shuffle/resource.tf", Converted(2)),
            ("resources/random_string/resource.tf", Converted(1)),
            (
                "resources/random_uuid/resource.tf",
                Refused("provider \"azurerm\""),
            ),
        ],
    ),
    (
        "TIME",
        &[
            (
                "functions/duration_parse/function.tf",
                Partly(0, PROVIDER_FUNCTION),
            ),
            (
                "functions/rfc3339_parse/function.tf",
                Partly(0, PROVIDER_FUNCTION),
            ),
            (
                "functions/unix_timestamp_parse/function.tf",
                Partly(0, PROVIDER_FUNCTION),
            ),
            ("resources/resource_triggers.tf", Refused(AWS_AMI)),
            ("resources/time_offset/resource.tf", Converted(1)),
            (
                "resources/time_offset/resource_multiple_offset.tf",
                Converted(1),
            ),
            (
                "resources/time_offset/resource_triggers.tf",
                Refused(AWS_AMI),
            ),
            ("resources/time_rotating/resource.tf", Converted(1)),
            (
                "resources/time_sleep/resource_delay_create.tf",
                Converted(3),
            ),
            (
                "resources/time_sleep/resource_delay_destroy.tf",
                Converted(3),
            ),
            (
                "resources/time_sleep/resource_triggers.tf",
                Refused("aws_subnet.example is not declared in this module"),
            ),
            ("resources/time_static/resource.tf", Converted(1)),
            (
                "resources/time_static/resource_triggers.tf",
                Refused(AWS_AMI),
            ),
        ],
    ),
];

/// Every `*.tf` below `dir`, relative to it, sorted.
fn tf_files(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "tf") {
                let rel = path.strip_prefix(dir)?.to_string_lossy().into_owned();
                out.push(rel);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Converts `file` on its own: (exit code, stdout + stderr).
fn convert(file: &Path, plugins: &Path) -> anyhow::Result<(Option<i32>, String)> {
    let dir = kraken_tests::scratch_dir("kraken-convert-examples-")?;
    let module = dir.path().join("module");
    std::fs::create_dir(&module)?;
    std::fs::copy(file, module.join("main.tf"))?;
    let out = Command::new(kraken_bin()?)
        .arg("convert")
        .arg(&module)
        .arg("--plugin-dir")
        .arg(plugins)
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .context("running kraken convert")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.code(), text))
}

/// Whether the outcome is what `want` says; the reason if not.
fn check(want: &Want, code: Option<i32>, text: &str) -> Result<(), String> {
    let converted = |n: usize| format!("converted {n} of {n} instances");
    let ok = match want {
        Converted(n) => {
            code == Some(0) && text.contains(&converted(*n)) && !text.contains("not converted")
        }
        Partly(n, why) => code == Some(0) && text.contains(&converted(*n)) && text.contains(why),
        Refused(why) => code != Some(0) && text.contains(why),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("exit {code:?}: {text}"))
    }
}

#[test]
fn the_providers_own_examples_convert_at_the_documented_rate() -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let plugins = env.path("KRAKEN_TEST_PLUGIN_DIR")?;
    let mut wrong = Vec::new();
    let (mut total, mut whole, mut partly) = (0, 0, 0);
    for (provider, table) in EXAMPLES {
        let root: PathBuf = env.path(&format!("KRAKEN_TEST_PROVIDER_{provider}_EXAMPLES"))?;
        let found = tf_files(&root)?;
        let listed: Vec<&str> = table.iter().map(|(f, _)| *f).collect();
        ensure!(
            found == listed,
            "the {provider} examples are {found:?}; the table lists {listed:?}"
        );
        for (file, want) in *table {
            let (code, text) = convert(&root.join(file), &plugins)?;
            total += 1;
            match want {
                Converted(_) => whole += 1,
                Partly(..) => partly += 1,
                Refused(_) => {}
            }
            if let Err(why) = check(want, code, &text) {
                wrong.push(format!("{provider} {file}: {why}"));
            }
            let located = text.contains("main.tf:") || text.contains("provider \"");
            if code != Some(0) && !located {
                wrong.push(format!(
                    "{provider} {file}: refused without saying where: {text}"
                ));
            }
        }
    }
    eprintln!(
        "provider examples: {total}; converted whole {whole}, with a construct reported {partly}, refused {}",
        total - whole - partly
    );
    ensure!(wrong.is_empty(), "{}", wrong.join("\n"));
    Ok(())
}

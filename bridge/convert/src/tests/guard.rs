//! The guard: confinement to the configuration's root, and the bounds on what a configuration
//! may make the conversion read, expand and evaluate. Each case is a configuration someone
//! hostile could write; each must be refused with where it is written, and quickly.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::guard::{Guard, MAX_FILE_BYTES};
use crate::load::{LoadError, load_in, load_sources};
use crate::module::{Evaluated, Inputs, evaluate};

/// How long any refusal below may take, on a loaded 2-core CI machine (each takes
/// milliseconds; without its bound, each ran for minutes or exhausted memory).
const QUICK: Duration = Duration::from_secs(10);

/// Writes `files` (path, contents) under `dir`.
fn write(dir: &Path, files: &[(&str, &str)]) -> anyhow::Result<()> {
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)?;
    }
    Ok(())
}

/// Loads and evaluates the module in `dir`, confined to it or not.
fn evaluated(dir: &Path, confined: bool) -> anyhow::Result<Evaluated> {
    let guard = if confined {
        Guard::confined(dir)?
    } else {
        Guard::unconfined()
    };
    Ok(evaluate(
        &load_in(dir, Arc::new(guard))?,
        &Inputs::default(),
    ))
}

/// `main.tf`'s text evaluated in a directory of its own, with how long it took.
fn evaluate_text(text: &str) -> anyhow::Result<(Evaluated, Duration)> {
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let files = vec![("main.tf".to_owned(), text.as_bytes().to_vec())];
    let module = load_sources(dir.path(), files, Arc::new(Guard::confined(dir.path())?))?;
    let ev = evaluate(&module, &Inputs::default());
    Ok((ev, started.elapsed()))
}

/// The blocking problem written at `file:line` (the file's name only), as text.
fn refusal(ev: &Evaluated, file: &str, line: usize) -> Option<String> {
    ev.problems
        .iter()
        .find(|p| p.blocking && p.at.line == line && p.at.file.ends_with(file))
        .map(ToString::to_string)
}

/// Confined, every way out of the root is refused at the line that asks for it, and nothing
/// outside is read; unconfined, the same configuration reads what Terraform would.
#[test]
fn confined_reads_stay_inside_the_root() -> anyhow::Result<()> {
    let top = tempfile::tempdir()?;
    write(
        top.path(),
        &[
            ("outside/secret.txt", "outside-secret"),
            (
                "outside/mod/main.tf",
                "output \"x\" {\n  value = \"out\"\n}\n",
            ),
            ("root/inside.txt", "inside-text"),
            (
                "root/net/main.tf",
                "locals {\n  shared = file(\"../inside.txt\")\n}\noutput \"x\" {\n  value = local.shared\n}\n",
            ),
        ],
    )?;
    let root = top.path().join("root");
    std::os::unix::fs::symlink(top.path().join("outside/secret.txt"), root.join("link.txt"))?;
    let secret = top.path().join("outside/secret.txt");
    let outside_module = top.path().join("outside/mod");
    let main = format!(
        r#"locals {{
  absolute = file("{}")
  parent   = file("../outside/secret.txt")
  symlink  = file("link.txt")
  inside   = file("./inside.txt")
}}
module "net" {{
  source = "./net"
}}
module "up" {{
  source = "../../../../../../../../..{}"
}}
output "shared" {{
  value = module.net.x
}}
"#,
        secret.display(),
        outside_module.display()
    );
    write(&root, &[("main.tf", &main)])?;

    let ev = evaluated(&root, true)?;
    let cases = [
        (2, "an absolute path", "is outside the configuration's root"),
        (3, "../", "is outside the configuration's root"),
        (
            4,
            "a symlink inside the root",
            "resolves through a symlink to outside",
        ),
        (
            10,
            "a module source ../../..",
            "is outside the configuration's root",
        ),
    ];
    for (line, how, says) in cases {
        let Some(p) = refusal(&ev, "main.tf", line) else {
            panic!(
                "{how}: nothing refused at main.tf:{line}: {:?}",
                ev.problems
            );
        };
        assert!(p.contains(says), "{how}: {p}");
        assert!(p.contains("main.tf:"), "{how}: {p}");
    }
    let all = format!("{ev:?}");
    assert!(!all.contains("outside-secret"), "a file outside was read");
    assert!(!all.contains("\"out\""), "a module outside was read");
    assert_eq!(
        ev.locals["inside"],
        crate::eval::Val::Known("inside-text".into())
    );
    let shared = &ev.outputs["shared"].0;
    assert_eq!(
        *shared,
        crate::eval::Val::Known("inside-text".into()),
        "../ within the root"
    );

    let free = evaluated(&root, false)?;
    let blocking: Vec<_> = free.problems.iter().filter(|p| p.blocking).collect();
    assert!(blocking.is_empty(), "unconfined: {blocking:?}");
    for local in ["absolute", "parent", "symlink"] {
        let want = crate::eval::Val::Known("outside-secret".into());
        assert_eq!(free.locals[local], want, "unconfined {local}");
    }
    Ok(())
}

/// A `*.tf` file or a module's `terraform.tfvars` that is a symlink out of the root is not
/// read when confined.
#[test]
fn confined_configuration_files_may_not_link_out() -> anyhow::Result<()> {
    let top = tempfile::tempdir()?;
    write(
        top.path(),
        &[
            ("outside/evil.tf", "locals {\n  x = \"outside\"\n}\n"),
            ("outside/evil.tfvars", "n = 1\n"),
            ("root/main.tf", "variable \"n\" {\n  default = 0\n}\n"),
        ],
    )?;
    let root = top.path().join("root");
    std::os::unix::fs::symlink(top.path().join("outside/evil.tf"), root.join("evil.tf"))?;
    match evaluated(&root, true) {
        Err(e) => assert!(
            e.to_string()
                .contains("\"evil.tf\" resolves through a symlink")
        ),
        Ok(ev) => panic!("a linked .tf file was read: {:?}", ev.locals),
    }
    std::fs::remove_file(root.join("evil.tf"))?;
    std::os::unix::fs::symlink(
        top.path().join("outside/evil.tfvars"),
        root.join("terraform.tfvars"),
    )?;
    let ev = evaluated(&root, true)?;
    assert_eq!(
        ev.vars["n"],
        serde_json::json!(0),
        "the linked tfvars was read"
    );
    let p = ev
        .problems
        .iter()
        .find(|p| p.blocking)
        .map(ToString::to_string);
    assert!(
        p.as_deref().is_some_and(|p| p.contains("terraform.tfvars")),
        "{p:?}"
    );
    Ok(())
}

/// Each bound of expansion and evaluation, as a configuration that would exceed it: refused
/// at the line that asks, in milliseconds.
#[test]
fn expansion_and_evaluation_are_bounded() -> anyhow::Result<()> {
    let many_counts: String = (0..11)
        .map(|i| format!("resource \"fixture_object\" \"n{i}\" {{\n  count = 10000\n}}\n"))
        .collect();
    let doubling: String = (1..40)
        .map(|i| format!("  s{i} = \"${{local.s{}}}${{local.s{}}}\"\n", i - 1, i - 1))
        .collect();
    let nesting: String = (1..200)
        .map(|i| format!("  d{i} = [local.d{}]\n", i - 1))
        .collect();
    let cases: Vec<(&str, String, usize, &str)> = vec![
        (
            "a count of 100,000,000",
            "resource \"fixture_object\" \"x\" {\n  count = 100000000\n}\n".into(),
            2,
            "over the 10000 one block may have",
        ),
        (
            "a for_each of 10,100 keys",
            "resource \"fixture_object\" \"x\" {\n  for_each = merge([for a in range(101) : \
             {for b in range(100) : \"${a}-${b}\" => b}]...)\n}\n"
                .into(),
            2,
            "10100 instances, over the 10000",
        ),
        (
            "110,000 instances in all",
            many_counts,
            32,
            "over the 100000 one conversion makes",
        ),
        (
            "a module count of 100,000",
            "module \"m\" {\n  source = \"./m\"\n  count  = 100000\n}\n".into(),
            3,
            "over the 10000 one block may have",
        ),
        (
            "a string doubled 39 times",
            format!("locals {{\n  s0 = \"xxxxxxxx\"\n{doubling}}}\n"),
            23,
            "over 16 MiB",
        ),
        (
            "a value nested 200 deep",
            format!("locals {{\n  d0 = 1\n{nesting}}}\n"),
            130,
            "nested over 128 levels deep",
        ),
        (
            "range(1e9)",
            "locals {\n  x = range(1000000000)\n}\n".into(),
            2,
            "more than 1024 elements",
        ),
        (
            "a format width of a billion",
            "locals {\n  x = format(\"%999999999d\", 1)\n}\n".into(),
            2,
            "a width or precision of 999999999",
        ),
        (
            "a format precision of a billion",
            "locals {\n  x = format(\"%.999999999f\", 1)\n}\n".into(),
            2,
            "a width or precision of 999999999",
        ),
        (
            "for over for over for",
            "locals {\n  x = [for a in range(1024) : [for b in range(1024) : \
             [for c in range(1024) : c]]]\n}\n"
                .into(),
            2,
            "over 16 MiB",
        ),
        (
            "a template for repeating its text",
            "locals {\n  x = \"%{ for a in range(1024) }%{ for b in range(1024) }\
             %{ for c in range(1024) }0123456789%{ endfor }%{ endfor }%{ endfor }\"\n}\n"
                .into(),
            2,
            "a template of over 16 MiB",
        ),
    ];
    for (what, text, line, says) in cases {
        let (ev, took) = evaluate_text(&text)?;
        let Some(p) = refusal(&ev, "main.tf", line) else {
            panic!(
                "{what}: nothing refused at main.tf:{line}: {:?}",
                ev.problems
            );
        };
        assert!(p.contains(says), "{what}: {p}");
        assert!(took < QUICK, "{what}: took {took:?}");
    }
    Ok(())
}

/// String functions whose result can dwarf their arguments are refused before they build it;
/// the evaluation as a whole is bounded too.
#[test]
fn string_functions_and_evaluation_are_bounded() -> anyhow::Result<()> {
    // 1 MiB of text, by doubling (each local well under the bound).
    let mib: String = (1..18)
        .map(|i| format!("  s{i} = \"${{local.s{}}}${{local.s{}}}\"\n", i - 1, i - 1))
        .collect();
    let head = format!("locals {{\n  s0 = \"xxxxxxxx\"\n{mib}");
    let cases = [
        (
            "join's separator",
            "  x = join(local.s17, range(1000))\n",
            "join() would make over",
        ),
        (
            "replace into every position",
            "  x = replace(local.s17, \"/x*?/\", local.s17)\n",
            "replace() would make over",
        ),
        (
            "replace of an empty string",
            "  x = replace(local.s17, \"\", local.s17)\n",
            "replace() would make over",
        ),
        (
            "split into every character",
            "  x = split(\"\", local.s17)\n",
            "split() would make over",
        ),
        (
            "repeated copies of a value",
            "  x = [for i in range(1024) : [local.s17, local.s17, local.s17, local.s17]]\n",
            "over 16 MiB",
        ),
    ];
    for (what, line, says) in cases {
        let (ev, took) = evaluate_text(&format!("{head}{line}}}\n"))?;
        let Some(p) = refusal(&ev, "main.tf", 20) else {
            panic!("{what}: nothing refused at main.tf:20: {:?}", ev.problems);
        };
        assert!(p.contains(says), "{what}: {p}");
        assert!(took < QUICK, "{what}: took {took:?}");
    }
    // Every value is charged: 600 copies of 1 MiB, each in bounds, are over the whole
    // evaluation's.
    let copies: String = (0..600)
        .map(|i| format!("  c{i} = upper(local.s17)\n"))
        .collect();
    let (ev, took) = evaluate_text(&format!("{head}{copies}}}\n"))?;
    let p = ev
        .problems
        .iter()
        .find(|p| p.blocking)
        .map(ToString::to_string);
    assert!(
        p.as_deref()
            .is_some_and(|p| p.contains("takes more than kraken convert allows")),
        "{p:?}"
    );
    assert!(took < QUICK * 3, "took {took:?}");
    Ok(())
}

/// A module that calls itself, directly or through another, is a cycle named by its
/// directories; calls nested past the bound are refused; neither recurses without end.
#[test]
fn module_cycles_and_depth_are_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        &[
            ("self/main.tf", "module \"me\" {\n  source = \"./\"\n}\n"),
            ("a/main.tf", "module \"b\" {\n  source = \"../b\"\n}\n"),
            ("b/main.tf", "\n\nmodule \"a\" {\n  source = \"../a\"\n}\n"),
        ],
    )?;
    let ev = evaluated(&dir.path().join("self"), true)?;
    let p = refusal(&ev, "main.tf", 1).unwrap_or_default();
    assert!(p.contains("the module calls itself (. → .)"), "{p}");
    let ev = evaluated(&dir.path().join("a"), false)?;
    let p = refusal(&ev, "main.tf", 3).unwrap_or_default();
    assert!(p.contains("module.b.module.a"), "{p}");
    assert!(p.contains("the module calls itself (. → ../b → .)"), "{p}");

    let deep = dir.path().join("deep");
    let mut at = deep.clone();
    for _ in 0..40 {
        write(
            &at,
            &[("main.tf", "module \"m\" {\n  source = \"./m\"\n}\n")],
        )?;
        at = at.join("m");
    }
    write(&at, &[("main.tf", "locals {}\n")])?;
    let ev = evaluated(&deep, true)?;
    let p = refusal(&ev, "main.tf", 1).unwrap_or_default();
    assert!(p.contains("module calls nest over 32 deep"), "{p}");
    assert_eq!(p.matches("module.m").count(), 33, "{p}");
    Ok(())
}

/// A file over the bound is refused before it is parsed, as one written to the module or
/// handed in; `file()` of one, and of a device, too.
#[test]
fn input_size_is_bounded_before_parsing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let big = "#".repeat(MAX_FILE_BYTES as usize + 1);
    write(dir.path(), &[("big.tf", &big)])?;
    match load_in(dir.path(), Arc::new(Guard::unconfined())) {
        Err(LoadError::Refused(m)) => assert!(m.contains("over the 4 MiB a file may have"), "{m}"),
        other => panic!("{other:?}"),
    }
    let files = vec![("main.tf".to_owned(), big.into_bytes())];
    let loaded = load_sources(dir.path(), files, Arc::new(Guard::unconfined()));
    assert!(matches!(loaded, Err(LoadError::Refused(_))), "{loaded:?}");

    std::fs::rename(dir.path().join("big.tf"), dir.path().join("big.txt"))?;
    write(
        dir.path(),
        &[(
            "main.tf",
            "locals {\n  big  = file(\"big.txt\")\n  zero = file(\"/dev/zero\")\n}\n",
        )],
    )?;
    let ev = evaluated(dir.path(), false)?;
    let p = refusal(&ev, "main.tf", 2).unwrap_or_default();
    assert!(p.contains("over the 4 MiB a file may have"), "{p}");
    let p = refusal(&ev, "main.tf", 3).unwrap_or_default();
    assert!(p.contains("/dev/zero is not a regular file"), "{p}");

    // The whole configuration: 17 files of 4 MiB are over 64 MiB.
    let guard = Guard::unconfined();
    let counted: Vec<_> = (0..17).map(|_| guard.count_bytes(MAX_FILE_BYTES)).collect();
    assert!(counted[..16].iter().all(Result::is_ok));
    let over = counted[16].as_ref().err().cloned().unwrap_or_default();
    assert!(over.contains("over 64 MiB"), "{over}");
    Ok(())
}

/// What fuzzing found (docs/security.md, "Fuzzing"), each input as the fuzzer wrote it: read
/// and evaluated as the fuzz target does, each must end quickly.
#[test]
fn fuzzing_findings_end_quickly() -> anyhow::Result<()> {
    let findings: &[(&str, &str, &str)] = &[
        (
            // Objects opened as binary operands, nested, never closed: hcl-edit parsed each
            // level twice on the way back (2.7 s for these 800 bytes; 20 levels a second more
            // per level). Refused by crate::lex before parsing.
            "main.tf",
            "nested binary operands",
            include_str!("fuzz/nested-operands.tf"),
        ),
        (
            // The same shape, found again by a fuzz binary built from an earlier form of the
            // check: 636 bytes, 16 s unoptimized.
            "main.tf",
            "nested binary operands, again",
            include_str!("fuzz/nested-operands-2.tf"),
        ),
        (
            // A JSON string read as a template: runs of unary operators (`22----source-22/2`)
            // as binary operands, the same exponential parse without brackets: over 10 s.
            "main.tf.json",
            "a run of operators in a JSON template",
            include_str!("fuzz/operator-run.tf.json"),
        ),
        (
            // Nested object operands after `!=`, which the check first read as `!` and an
            // assignment: over 10 s.
            "main.tf",
            "nested operands of !=",
            include_str!("fuzz/not-equal-operands.tf"),
        ),
    ];
    for (file, what, text) in findings {
        let dir = tempfile::tempdir()?;
        let started = Instant::now();
        let files = vec![((*file).to_owned(), text.as_bytes().to_vec())];
        let guard = Arc::new(Guard::confined(dir.path())?);
        if let Ok(module) = load_sources(dir.path(), files, guard) {
            let _ = evaluate(&module, &Inputs::default());
        }
        let took = started.elapsed();
        assert!(took < Duration::from_millis(500), "{what}: took {took:?}");
    }
    Ok(())
}

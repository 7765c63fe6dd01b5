//! Keeps the code easy to read: no source file over [`MAX_FILE_LINES`] lines and no function
//! over [`MAX_FN_LINES`] lines, in every crate that ships (`bridge` and its layers, `codegen`,
//! `registry-fetch`, `proto`) and in the end-to-end tests crate (`tests/src`, the harness;
//! `tests/tests`, the test binaries with their modules; `tests/benches`, the benchmarks). Unit-test modules (`#[cfg(test)]` and
//! `tests.rs` files) and test fakes do not count.
//!
//! A function may be longer when a comment right above it says why, containing the words
//! "lines because" (for example a table that reads best as one match).

use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 80;

fn workspace() -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
    Path::new(&manifest)
        .parent()
        .expect("bridge has a parent")
        .to_path_buf()
}

/// The directories of the end-to-end tests crate (`tests/`) under the rule: its harness, its
/// test binaries and its benchmarks (read as often as the code they measure).
const TESTS_CRATE_DIRS: &[&str] = &["src", "tests", "benches"];

/// The source roots under the rule: each shipping crate's `src`, then [`TESTS_CRATE_DIRS`]
/// (marked `true`).
fn roots() -> Vec<(PathBuf, bool)> {
    let root = workspace();
    let mut crates = vec![
        root.join("codegen"),
        root.join("registry-fetch"),
        root.join("proto"),
    ];
    // bridge and each layer under it.
    crates.push(root.join("bridge"));
    for entry in std::fs::read_dir(root.join("bridge"))
        .expect("read bridge")
        .flatten()
    {
        if entry.path().join("Cargo.toml").is_file() {
            crates.push(entry.path());
        }
    }
    assert!(crates.len() >= 15, "crates: {crates:?}");
    let mut roots: Vec<(PathBuf, bool)> = crates.iter().map(|c| (c.join("src"), false)).collect();
    roots.extend(
        TESTS_CRATE_DIRS
            .iter()
            .map(|d| (root.join("tests").join(d), true)),
    );
    roots
}

fn sources() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut tests_crate = 0;
    for (dir, in_tests_crate) in roots() {
        let mut found = Vec::new();
        collect(&dir, &mut found);
        // Unit tests and fakes are left out by their place below the root (the root itself
        // may be the tests crate's `tests`).
        found.retain(|p| {
            let below = p.strip_prefix(&dir).unwrap_or(p);
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            !below.iter().any(|c| c == "tests")
                && !matches!(name.as_deref(), Some("tests.rs" | "proptests.rs"))
                && !name.as_deref().is_some_and(|n| n.starts_with("fake"))
        });
        if in_tests_crate {
            tests_crate += found.len();
        }
        out.extend(found);
    }
    assert!(out.len() > 50, "found only {} source files", out.len());
    assert!(
        tests_crate > 40,
        "found only {tests_crate} files in the tests crate"
    );
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The lines of a file without its test-only items: each `#[cfg(test)]` item (a module, a
/// `mod x;` declaration, a helper) is left out, with the attributes after the `#[cfg(test)]`,
/// wherever it stands. (Counting only up to the first `#[cfg(test)]` let a `#[cfg(test)] mod
/// fake;` at the top hide a whole file.)
fn production_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "#[cfg(test)]" {
            out.push(lines[i]);
            i += 1;
            continue;
        }
        i += 1;
        while i < lines.len() && lines[i].trim_start().starts_with("#[") {
            i += 1;
        }
        let (mut depth, mut opened) = (0usize, false);
        while i < lines.len() {
            let (o, c) = braces(lines[i]);
            depth += o;
            opened |= o > 0;
            depth = depth.saturating_sub(c);
            let ends = if opened {
                depth == 0
            } else {
                lines[i].trim_end().ends_with(';')
            };
            i += 1;
            if ends {
                break;
            }
        }
    }
    out
}

/// `{` and `}` of a line outside string and char literals and comments.
fn braces(line: &str) -> (usize, usize) {
    let (mut open, mut close) = (0, 0);
    let mut chars = line.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' if in_str => {
                chars.next();
            }
            '"' => in_str = !in_str,
            '/' if !in_str && chars.peek() == Some(&'/') => break,
            '\'' if !in_str => {
                // A char literal ('{', '\'' ...) or a lifetime ('a): skip a literal whole.
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with('\\') {
                    chars.nth(2);
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.nth(1);
                }
            }
            '{' if !in_str => open += 1,
            '}' if !in_str => close += 1,
            _ => {}
        }
    }
    (open, close)
}

fn fn_name(line: &str) -> Option<String> {
    let t = line.trim_start();
    let idx = t.find("fn ")?;
    let before = &t[..idx];
    let words_ok = before.split_whitespace().all(|w| {
        matches!(w, "pub" | "async" | "const" | "unsafe" | "extern") || w.starts_with("pub(")
    });
    if !words_ok || t.trim_end().ends_with(';') {
        return None;
    }
    let name: String = t[idx + 3..]
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Functions over the limit in `lines`: (first line number, name, length).
fn long_functions(lines: &[&str]) -> Vec<(usize, String, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = fn_name(lines[i]) else {
            i += 1;
            continue;
        };
        let (mut depth, mut opened, mut j) = (0usize, false, i);
        while j < lines.len() {
            let (o, c) = braces(lines[j]);
            depth += o;
            opened |= o > 0;
            depth = depth.saturating_sub(c);
            if opened && depth == 0 {
                break;
            }
            j += 1;
        }
        let len = j - i + 1;
        let excused = lines[i.saturating_sub(6)..i]
            .iter()
            .any(|l| l.trim_start().starts_with("//") && l.contains("lines because"));
        if len > MAX_FN_LINES && !excused {
            out.push((i + 1, name, len));
        }
        // Nested functions are counted within their parent only.
        i = j + 1;
    }
    out
}

#[test]
fn files_and_functions_stay_short() {
    let root = workspace();
    let mut problems = Vec::new();
    for path in sources() {
        let text = std::fs::read_to_string(&path).expect("read source");
        let lines = production_lines(&text);
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        if lines.len() > MAX_FILE_LINES {
            problems.push(format!(
                "{rel}: {} lines (limit {MAX_FILE_LINES})",
                lines.len()
            ));
        }
        for (line, name, len) in long_functions(&lines) {
            problems.push(format!(
                "{rel}:{line}: fn {name} is {len} lines (limit {MAX_FN_LINES})"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "split these by responsibility:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_scanner_counts_bodies_not_strings() {
    let src = [
        "fn a() {",
        "    let s = \"{{{\";",
        "    let c = '{';",
        "    if x { y() }",
        "}",
        "fn b<'a>(x: &'a str) {}",
    ];
    let mut lines: Vec<&str> = src.to_vec();
    assert!(long_functions(&lines).is_empty());
    let filler = vec!["    x();"; MAX_FN_LINES];
    lines.splice(1..1, filler);
    let found = long_functions(&lines);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1, "a");
}

#[test]
fn test_only_items_are_left_out_wherever_they_stand() {
    let src = "#[cfg(test)]\nmod fake;\nfn a() {}\n#[cfg(test)]\n#[path = \"x/tests.rs\"]\nmod tests;\n\
        fn b() {\n}\n#[cfg(test)]\nmod more {\n    fn c() {}\n}\nfn d() {}\n";
    assert_eq!(
        production_lines(src),
        ["fn a() {}", "fn b() {", "}", "fn d() {}"]
    );
}

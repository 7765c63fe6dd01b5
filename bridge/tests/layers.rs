//! The layering of `bridge/src`, enforced (docs/architecture.md draws it).
//!
//! Every top-level module may import only the modules its row of [`LAYERS`] names; an import
//! that points up, or sideways between the controllers, fails this test with the file and line.
//! Inside a module, the files other than `mod.rs` must not import each other in a cycle.
//!
//! The check reads the sources as text: every path that starts with `crate::` (including the
//! members of `use crate::{a, b::c}` groups) and every `super::` chain that climbs out of its
//! top-level module counts as an import. Comments are skipped, so a doc link may point anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom up: each module and the modules it may import.
const LAYERS: &[(&str, &[&str])] = &[
    ("kit", &[]),
    ("value", &["kit"]),
    ("provider", &["kit", "value"]),
    ("core_kinds", &["kit", "value"]),
    ("hub", &["kit", "value", "core_kinds"]),
    ("source", &["kit", "value", "provider", "core_kinds"]),
    // The kinds' controllers are peers: none imports another.
    (
        "managed",
        &["kit", "value", "provider", "core_kinds", "hub", "source"],
    ),
    (
        "installer",
        &["kit", "value", "provider", "core_kinds", "source"],
    ),
    ("ec2", &["kit", "value", "core_kinds", "hub"]),
    // kraken convert: a library for the CLI, beside the controllers.
    ("convert", &["kit", "value", "provider", "core_kinds"]),
    (
        "operator",
        &[
            "kit",
            "value",
            "provider",
            "core_kinds",
            "hub",
            "source",
            "managed",
            "installer",
            "ec2",
        ],
    ),
    (
        "cli",
        &[
            "kit",
            "value",
            "provider",
            "core_kinds",
            "hub",
            "source",
            "managed",
            "installer",
            "ec2",
            "convert",
            "operator",
        ],
    ),
];

fn src_dir() -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
    Path::new(&manifest).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read bridge/src")
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file below `src`: `managed/write.rs` → `[managed, write]`,
/// `managed/mod.rs` → `[managed]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" && stem != "main" {
            parts.push(stem.to_owned());
        }
    }
    parts
}

/// Whether `ident` starts at byte `i` of `line` (not in the middle of a longer word).
fn word_at(line: &str, i: usize, ident: &str) -> bool {
    line[i..].starts_with(ident)
        && line[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The module paths one source line imports, relative to the crate root. `crate::a::b` gives
/// `[a, b]`; `use crate::{a::x, b}` gives `[a, x]` and `[b]`; `super::` is resolved against
/// `here`.
fn imports(line: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < line.len() {
        if word_at(line, i, "crate::") {
            let rest = &line[i + "crate::".len()..];
            out.extend(paths_after(rest, Vec::new()));
            i += "crate::".len();
        } else if word_at(line, i, "super::") {
            // `super` in `a/b.rs` (module [a, b]) is `a`; in `a/mod.rs` (module [a]) it is the
            // crate root: one segment up either way.
            let mut base: Vec<String> = here.to_vec();
            let mut rest = &line[i..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            let consumed = line.len() - i - rest.len();
            out.extend(paths_after(rest, base));
            i += consumed.max(1);
        } else {
            i += line[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

/// The paths that `rest` (text after `crate::` or `super::`) names, prefixed with `base`.
fn paths_after(rest: &str, base: Vec<String>) -> Vec<Vec<String>> {
    if let Some(group) = rest.strip_prefix('{') {
        // Members of a group at depth 1, each up to its first two segments.
        let mut out = Vec::new();
        let mut depth = 0;
        let mut member = String::new();
        for c in group.chars() {
            match c {
                '{' => {
                    depth += 1;
                    member.push(c);
                }
                '}' if depth == 0 => break,
                '}' => {
                    depth -= 1;
                    member.push(c);
                }
                ',' if depth == 0 => {
                    out.push(member_path(&member, &base));
                    member.clear();
                }
                _ => member.push(c),
            }
        }
        out.push(member_path(&member, &base));
        out.retain(|p| p.len() > base.len());
        out
    } else {
        let p = member_path(rest, &base);
        if p.len() > base.len() {
            vec![p]
        } else {
            vec![]
        }
    }
}

fn member_path(member: &str, base: &[String]) -> Vec<String> {
    let mut path = base.to_vec();
    let mut rest = member.trim();
    for _ in 0..2 {
        let id = ident(rest);
        if id.is_empty() || id == "self" {
            break;
        }
        rest = &rest[id.len()..];
        path.push(id);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    path
}

struct Import {
    file: String,
    line: usize,
    from: Vec<String>,
    to: Vec<String>,
}

fn all_imports() -> Vec<Import> {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 20,
        "found only {} files in {}",
        files.len(),
        src.display()
    );
    let mut out = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&src).expect("below src").to_path_buf();
        let mut here = module_path(&rel);
        let text = std::fs::read_to_string(&path).expect("read source");
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            // An inline `mod tests {` (or any inline module) is one level deeper for `super`.
            if let Some(m) = line.trim_start().strip_prefix("mod ")
                && line.trim_end().ends_with('{')
            {
                here.push(ident(m));
            }
            for to in imports(line, &here) {
                out.push(Import {
                    file: rel.display().to_string(),
                    line: n + 1,
                    from: here.clone(),
                    to,
                });
            }
        }
    }
    out
}

#[test]
fn the_layer_table_is_ordered_bottom_up() {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for (module, allowed) in LAYERS {
        for a in *allowed {
            assert!(
                seen.contains(a),
                "{module} may import {a}, which is not below it"
            );
        }
        seen.insert(module);
    }
}

#[test]
fn every_top_level_module_is_in_the_table() {
    let src = src_dir();
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let mut declared: Vec<String> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_owned())
        .collect();
    declared.sort();
    let mut table: Vec<&str> = LAYERS.iter().map(|(m, _)| *m).collect();
    table.sort_unstable();
    assert_eq!(
        declared, table,
        "every module lib.rs declares has a row in LAYERS"
    );
}

#[test]
fn imports_point_down() {
    let allowed: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut violations = Vec::new();
    for imp in all_imports() {
        let (Some(from), Some(to)) = (imp.from.first(), imp.to.first()) else {
            continue;
        };
        if from == to || !allowed.contains_key(to.as_str()) {
            continue;
        }
        let ok = allowed
            .get(from.as_str())
            .is_some_and(|a| a.contains(&to.as_str()));
        if !ok {
            violations.push(format!("{}:{}: {from} imports {to}", imp.file, imp.line));
        }
    }
    assert!(
        violations.is_empty(),
        "imports that point up or sideways (see the table in bridge/tests/layers.rs):\n{}",
        violations.join("\n")
    );
}

#[test]
fn files_inside_a_module_import_each_other_without_cycles() {
    // Edges between sibling files of one top-level module, leaving out the module's root
    // (`mod.rs`), which declares its children and re-exports from them.
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for imp in all_imports() {
        if imp.from.len() < 2 || imp.to.len() < 2 || imp.from[0] != imp.to[0] {
            continue;
        }
        let (a, b) = (imp.from[..2].join("::"), imp.to[..2].join("::"));
        if a != b {
            edges.entry(a).or_default().insert(b);
        }
    }
    let mut cycles = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut visited = BTreeSet::new();
        while let Some((node, path)) = stack.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(next.clone());
                    cycles.push(cycle.join(" → "));
                } else if visited.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    cycles.sort();
    cycles.dedup();
    assert!(
        cycles.is_empty(),
        "file import cycles:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_parser_sees_groups_and_super_chains() {
    let here = vec!["managed".to_owned(), "write".to_owned()];
    let got = imports("use crate::{kit::events, hub::{self, Index}};", &here);
    assert_eq!(
        got,
        [
            vec!["kit".to_owned(), "events".to_owned()],
            vec!["hub".to_owned()]
        ]
    );
    let got = imports("use super::super::hub::Index;", &here);
    assert_eq!(got, [vec!["hub".to_owned(), "Index".to_owned()]]);
    let got = imports("use super::state;", &here);
    assert_eq!(got, [vec!["managed".to_owned(), "state".to_owned()]]);
    let got = imports("use super::x;", &["managed".to_owned()]);
    assert_eq!(got, [vec!["x".to_owned()]]);
}

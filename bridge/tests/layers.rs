//! The layering of the operator's crates (docs/architecture.md draws it).
//!
//! Cargo holds the direction between layers: each is a crate, and a crate reaches only the
//! crates its `Cargo.toml` names. What is left to check here:
//! - the table in docs/architecture.md names, for each layer, exactly the `kraken-*` crates its
//!   `Cargo.toml` depends on, and every crate under `bridge/` has a row;
//! - inside one crate, the files do not import each other in a cycle (the crate's `lib.rs`
//!   aside: it declares its children and re-exports from them). The sources are parsed with
//!   `syn`, so an import wrapped over lines, a `pub use`, a path in an expression and an inline
//!   module all count as what they are.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

fn workspace() -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
    Path::new(&manifest)
        .parent()
        .expect("bridge has a parent")
        .to_path_buf()
}

/// Crates that are not layers of the operator (they know nothing of it).
const NOT_LAYERS: &[&str] = &["kraken-codegen", "kraken-registry-fetch", "kraken-proto"];

/// One row of the layer table: the layer, its crate, and the layers it may depend on.
#[derive(Debug)]
struct Row {
    layer: String,
    krate: String,
    depends_on: BTreeSet<String>,
}

/// The words in backticks of a table cell.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The table of docs/architecture.md headed `| layer | crate | role | depends on |`.
fn table(doc: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut inside = false;
    for line in doc.lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        if line.starts_with("| layer | crate |") {
            inside = true;
            continue;
        }
        if !inside || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let (Some(layer), Some(krate), Some(deps)) = (
            ticked(cells[0]).into_iter().next(),
            ticked(cells[1]).into_iter().next(),
            cells.last(),
        ) else {
            panic!("a row of the layer table without a layer or a crate: {line}");
        };
        let depends_on = if deps.trim() == "every layer" {
            rows.iter().map(|r: &Row| r.layer.clone()).collect()
        } else {
            ticked(deps).into_iter().collect()
        };
        rows.push(Row {
            layer,
            krate,
            depends_on,
        });
    }
    rows
}

/// The `kraken-*` crates a manifest's `[dependencies]` names (not the dev-dependencies).
fn kraken_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        let name: String = line
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        if in_deps && name.starts_with("kraken-") && !NOT_LAYERS.contains(&name.as_str()) {
            out.insert(name);
        }
    }
    out
}

/// The directory of a layer's crate: `kraken-core-kinds` → `bridge/core-kinds`; the CLI's
/// `kraken-bridge` is `bridge` itself.
fn crate_dir(krate: &str) -> PathBuf {
    let bridge = workspace().join("bridge");
    match krate.strip_prefix("kraken-") {
        Some("bridge") | None => bridge,
        Some(dir) => bridge.join(dir),
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn the_table_names_each_layers_dependencies() {
    let rows = table(&read(&workspace().join("docs/architecture.md")));
    assert!(rows.len() >= 12, "found only {} rows: {rows:?}", rows.len());
    let crate_of: BTreeMap<&str, &str> = rows
        .iter()
        .map(|r| (r.layer.as_str(), r.krate.as_str()))
        .collect();
    let mut problems = Vec::new();
    for row in &rows {
        let want: BTreeSet<String> = row
            .depends_on
            .iter()
            .map(|l| {
                crate_of
                    .get(l.as_str())
                    .map_or_else(|| format!("<no layer {l}>"), |c| (*c).to_owned())
            })
            .collect();
        let manifest = crate_dir(&row.krate).join("Cargo.toml");
        let have = kraken_dependencies(&read(&manifest));
        if want != have {
            problems.push(format!(
                "{} ({}): the table says {want:?}, Cargo.toml says {have:?}",
                row.layer, row.krate
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_table_is_ordered_bottom_up() {
    let rows = table(&read(&workspace().join("docs/architecture.md")));
    let mut seen = BTreeSet::new();
    for row in &rows {
        for dep in &row.depends_on {
            assert!(
                seen.contains(dep),
                "{} depends on {dep}, which is not above it in the table",
                row.layer
            );
        }
        seen.insert(row.layer.clone());
    }
}

#[test]
fn every_crate_under_bridge_has_a_row() {
    let rows = table(&read(&workspace().join("docs/architecture.md")));
    let listed: BTreeSet<PathBuf> = rows.iter().map(|r| crate_dir(&r.krate)).collect();
    let root = read(&workspace().join("Cargo.toml"));
    let members: Vec<PathBuf> = root
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("\"bridge"))
        .map(|rest| {
            let rest = rest.trim_end_matches(',').trim_end_matches('"');
            workspace().join(format!("bridge{rest}"))
        })
        .collect();
    assert!(members.len() >= 12, "members under bridge: {members:?}");
    for m in members {
        assert!(
            listed.contains(&m),
            "{} is a workspace member without a row in docs/architecture.md",
            m.display()
        );
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
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

/// The module path of a file below `src`: `write.rs` → `[write]`, `share/pace.rs` →
/// `[share, pace]`, `share/mod.rs` → `[share]`, `lib.rs` → `[]`.
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

/// Collects every path of a file that names something of its own crate (`crate::…`,
/// `super::…`, `self::…`), resolved to a module path from the crate root, with the module it
/// is written in.
struct Imports {
    /// The module of the file, then each inline `mod x { … }` entered.
    here: Vec<String>,
    /// (written in, names).
    found: Vec<(Vec<String>, Vec<String>)>,
}

impl Imports {
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let first = segments.first()?;
        let mut base = match first.as_str() {
            "crate" => Vec::new(),
            "self" | "super" => self.here.clone(),
            _ => return None,
        };
        let mut rest = &segments[1..];
        if first == "super" {
            base.pop();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn note(&mut self, segments: Vec<String>) {
        if let Some(path) = self.resolve(&segments) {
            self.found.push((self.here.clone(), path));
        }
    }

    /// Every full path a `use` tree names (a group is each of its members).
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                path.push(n.ident.to_string());
                self.note(path);
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                path.push(r.ident.to_string());
                self.note(path);
            }
            syn::UseTree::Glob(_) => self.note(prefix.clone()),
            syn::UseTree::Group(g) => {
                for item in &g.items {
                    self.use_tree(prefix, item);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Imports {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.note(segments);
        syn::visit::visit_path(self, path);
    }

    /// A macro's tokens are not parsed as Rust, so its paths are read from the tokens:
    /// `crate :: a :: b`, `super :: …`, `self :: …`.
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        syn::visit::visit_macro(self, mac);
        let mut tokens = Vec::new();
        flatten(mac.tokens.clone(), &mut tokens);
        let mut i = 0;
        while i < tokens.len() {
            let mut path = vec![tokens[i].clone()];
            let mut j = i + 1;
            while j + 2 < tokens.len() + 1
                && tokens[j] == ":"
                && tokens.get(j + 1).map(String::as_str) == Some(":")
            {
                match tokens.get(j + 2) {
                    Some(next) if next.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                        path.push(next.clone());
                        j += 3;
                    }
                    _ => break,
                }
            }
            if path.len() > 1 {
                self.note(path);
            }
            i = j.max(i + 1);
        }
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if item.content.is_some() {
            self.here.push(item.ident.to_string());
            syn::visit::visit_item_mod(self, item);
            self.here.pop();
        }
    }
}

/// The tokens of a stream with its groups opened, each as text (`::` is two `:` tokens).
fn flatten(stream: proc_macro2::TokenStream, out: &mut Vec<String>) {
    for tt in stream {
        match tt {
            proc_macro2::TokenTree::Group(g) => flatten(g.stream(), out),
            other => out.push(other.to_string()),
        }
    }
}

/// The paths of the crate's own items that `source` (a file whose module is `here`) names.
fn imports_of(source: &str, here: Vec<String>) -> Vec<(Vec<String>, Vec<String>)> {
    let file = syn::parse_file(source).unwrap_or_else(|e| panic!("parse {here:?}: {e}"));
    let mut v = Imports {
        here,
        found: Vec::new(),
    };
    v.visit_file(&file);
    v.found
}

/// Import cycles between the top-level modules of the crate whose sources are in `src`, and
/// how many edges between them it read.
fn cycles(src: &Path) -> (Vec<String>, usize) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|f| module_path(f.strip_prefix(src).ok()?).first().cloned())
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in &files {
        let rel = path.strip_prefix(src).expect("below src");
        for (from, to) in imports_of(&read(path), module_path(rel)) {
            let (Some(a), Some(b)) = (from.first(), to.first()) else {
                continue;
            };
            if a != b && modules.contains(b) {
                edges.entry(a.clone()).or_default().insert(b.clone());
            }
        }
    }
    let mut found = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut visited = BTreeSet::new();
        while let Some((node, path)) = stack.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(next.clone());
                    found.push(cycle.join(" → "));
                } else if visited.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    (found, edges.values().map(BTreeSet::len).sum())
}

#[test]
fn files_inside_a_crate_import_each_other_without_cycles() {
    let rows = table(&read(&workspace().join("docs/architecture.md")));
    let (mut all, mut edges) = (Vec::new(), 0);
    for row in &rows {
        let src = crate_dir(&row.krate).join("src");
        let (found, n) = cycles(&src);
        edges += n;
        all.extend(found.into_iter().map(|c| format!("{}: {c}", row.krate)));
    }
    // The crates have about 200: far fewer means the parser missed the imports.
    assert!(edges > 150, "read only {edges} edges between files");
    assert!(all.is_empty(), "file import cycles:\n{}", all.join("\n"));
}

fn names(paths: &[(Vec<String>, Vec<String>)]) -> Vec<String> {
    paths.iter().map(|(_, p)| p.join("::")).collect()
}

#[test]
fn the_parser_sees_wrapped_groups_re_exports_paths_and_inline_modules() {
    let here = vec!["hub".to_owned()];
    // A group rustfmt wrapped over lines, with a nested group and a rename.
    let src = "use crate::{\n    kit::x,\n    managed::write::{Writer, self as w},\n};\n";
    assert_eq!(
        names(&imports_of(src, here.clone())),
        ["kit::x", "managed::write::Writer", "managed::write::self"]
    );
    // A re-export and a path in an expression count too.
    let src = "pub use super::state::Seal;\nfn f() { crate::plan::go(); }\n";
    assert_eq!(
        names(&imports_of(src, here.clone())),
        ["state::Seal", "plan::go"]
    );
    // Paths inside a macro's tokens.
    let src = "fn f() { tracing::info!(x = %crate::names::of(1), \"{}\", super::y::z); }\n";
    assert_eq!(
        names(&imports_of(src, vec!["hub".to_owned(), "w".to_owned()])),
        ["names::of", "hub::y::z"]
    );
    // Inside an inline module, `super` is the file's module.
    let src = "mod tests {\n    use super::super::decide::x;\n    use super::y;\n}\n";
    let got = imports_of(src, vec!["managed".to_owned(), "write".to_owned()]);
    assert_eq!(names(&got), ["managed::decide::x", "managed::write::y"]);
    assert_eq!(got[0].0, ["managed", "write", "tests"]);
    // A path into another crate or a child module of the file is not the crate's sibling.
    assert!(imports_of("use kraken_kit::Kit;\nuse child::x;\n", here).is_empty());
}

#[test]
fn a_cycle_is_found_across_a_wrapped_group() {
    let dir = std::env::temp_dir().join(format!("layers-cycle-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    let write = |name: &str, text: &str| std::fs::write(src.join(name), text).expect("write");
    write("lib.rs", "mod a;\nmod b;\nmod c;\n");
    write("a.rs", "use crate::{\n    b::f,\n};\n");
    write("b.rs", "pub fn f() { super::c::g() }\n");
    write("c.rs", "pub use crate::a::*;\npub fn g() {}\n");
    let (found, edges) = cycles(&src);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found, ["a → b → c → a", "b → c → a → b", "c → a → b → c"]);
    assert_eq!(edges, 3);
}

#[test]
fn the_table_parser_reads_rows_and_every_layer() {
    let doc = "intro\n| layer | crate | role | depends on |\n|---|---|---|---|\n\
        | `kit` | `kraken-kit` | low | — |\n| `value` | `kraken-value` | values | `kit` |\n\
        | `cli` | `kraken-bridge` | top | every layer |\n\nafter\n";
    let rows = table(doc);
    assert_eq!(rows.len(), 3);
    assert!(rows[0].depends_on.is_empty());
    assert_eq!(rows[1].depends_on, BTreeSet::from(["kit".to_owned()]));
    assert_eq!(
        rows[2].depends_on,
        BTreeSet::from(["kit".to_owned(), "value".to_owned()])
    );
}

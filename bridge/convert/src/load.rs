//! Reading a Terraform module: every `*.tf` (native syntax) and `*.tf.json` file of a
//! directory, in name order, into the blocks conversion works on, each with its file and line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hcl::Expression;
use hcl::edit::Span as _;
use hcl::edit::structure::{BlockLabel, Body as EditBody, Structure};
use serde_json::Value as Json;

use super::guard::{Guard, MAX_FILE_BYTES};

pub use super::ast::{Block, Body, Location};

/// What a module declares.
#[derive(Debug, Clone, Default)]
pub struct Module {
    pub dir: PathBuf,
    /// Every top-level block, in file-name then source order (shared: a module called with
    /// `count` is read once and evaluated per instance).
    pub blocks: Arc<Vec<Block>>,
    /// What the conversion may read and spend, shared by every module it calls.
    pub guard: Arc<Guard>,
}

impl Module {
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Block> + 'a {
        self.blocks.iter().filter(move |b| b.kind == kind)
    }
}

/// Why a module could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{at}: {message}")]
    Syntax { at: Location, message: String },
    #[error("{0} holds no *.tf or *.tf.json files")]
    Empty(String),
    /// A read the [`Guard`] refuses: outside the confined root, or over a size bound.
    #[error("{0}")]
    Refused(String),
}

/// Reads every `*.tf` and `*.tf.json` file of `dir`, wherever its paths lead (as Terraform
/// does), within the [`Guard`]'s size bounds.
pub fn load(dir: &Path) -> Result<Module, LoadError> {
    load_in(dir, Arc::new(Guard::unconfined()))
}

/// Reads every `*.tf` and `*.tf.json` file of `dir` through `guard`: when it is confined, a
/// file that is a symlink out of its root is refused.
pub fn load_in(dir: &Path, guard: Arc<Guard>) -> Result<Module, LoadError> {
    let read_err = |path: &Path, source| LoadError::Read {
        path: path.display().to_string(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| read_err(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            p.is_file() && is_config_file(name)
        })
        .collect();
    files.sort();
    let mut sources = Vec::with_capacity(files.len());
    for path in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let real = guard.resolve(dir, &name).map_err(LoadError::Refused)?;
        let bytes = guard.read(&real).map_err(LoadError::Refused)?;
        sources.push((name, bytes));
    }
    load_sources(dir, sources, guard)
}

/// Whether a file name is one of a module's configuration files.
fn is_config_file(name: &str) -> bool {
    name.ends_with(".tf") || name.ends_with(".tf.json")
}

/// A module from its files' names and contents, as if read from `dir`: what [`load_in`] does
/// once the files are read, and what the fuzz targets feed arbitrary bytes. Names that are
/// not `*.tf` or `*.tf.json` are left out; a file over [`MAX_FILE_BYTES`] is refused before
/// it is parsed.
pub fn load_sources(
    dir: &Path,
    mut files: Vec<(String, Vec<u8>)>,
    guard: Arc<Guard>,
) -> Result<Module, LoadError> {
    files.retain(|(name, _)| is_config_file(name));
    files.sort_by(|a, b| a.0.cmp(&b.0));
    if files.is_empty() {
        return Err(LoadError::Empty(dir.display().to_string()));
    }
    let mut blocks = Vec::new();
    for (file, bytes) in files {
        let path = dir.join(&file);
        let name = path.display().to_string();
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(LoadError::Refused(format!(
                "{name} is {} bytes, over the {} MiB a file may have",
                bytes.len(),
                MAX_FILE_BYTES >> 20
            )));
        }
        let text = String::from_utf8(bytes).map_err(|e| LoadError::Read {
            path: name.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
        })?;
        blocks.extend(if name.ends_with(".json") {
            json_file(&name, &text)?
        } else {
            native_file(&name, &text)?.blocks
        });
    }
    Ok(Module {
        dir: dir.to_path_buf(),
        blocks: Arc::new(blocks),
        guard,
    })
}

/// Line and column (1-based) of byte `offset` in `text`.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, column)
}

/// One file's top-level body: a `.tfvars` or `.tfvars.json` file's assignments, read
/// through `guard` (within its size bounds; `path` is resolved already).
pub fn load_file(path: &Path, guard: &Guard) -> Result<Body, LoadError> {
    let bytes = guard.read(path).map_err(LoadError::Refused)?;
    let name = path.display().to_string();
    let text = String::from_utf8(bytes).map_err(|e| LoadError::Read {
        path: name.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
    })?;
    if !name.ends_with(".json") {
        return native_file(&name, &text);
    }
    let doc: Json = serde_json::from_str(&text).map_err(|e| LoadError::Syntax {
        at: Location {
            file: name.clone(),
            line: e.line(),
            column: e.column(),
        },
        message: e.to_string(),
    })?;
    let at = Location {
        file: name,
        line: 1,
        column: 1,
    };
    let mut body = Body::default();
    if let Json::Object(m) = doc {
        for (k, v) in m {
            body.attributes.push((k, json_value(&v), at.clone()));
        }
    }
    Ok(body)
}

/// A JSON value as a constant expression (no templates: a variables file holds values).
fn json_value(v: &Json) -> Expression {
    match v {
        Json::String(s) => Expression::String(s.clone()),
        Json::Array(a) => Expression::Array(a.iter().map(json_value).collect()),
        Json::Object(m) => {
            let mut obj = hcl::expr::Object::new();
            for (k, v) in m {
                obj.insert(hcl::expr::ObjectKey::from(k.as_str()), json_value(v));
            }
            Expression::Object(obj)
        }
        other => json_expr(other),
    }
}

fn native_file(name: &str, text: &str) -> Result<Body, LoadError> {
    if let Some(line) = super::lex::too_deep(text, false) {
        return Err(LoadError::Syntax {
            at: Location {
                file: name.to_owned(),
                line,
                column: 1,
            },
            message: super::lex::TOO_DEEP.into(),
        });
    }
    let body = hcl::edit::parser::parse_body(text).map_err(|e| LoadError::Syntax {
        at: Location {
            file: name.to_owned(),
            line: e.location().line(),
            column: e.location().column(),
        },
        message: e.message().to_string(),
    })?;
    Ok(native_body(name, text, body))
}

fn native_body(name: &str, text: &str, body: EditBody) -> Body {
    let at = |span: Option<std::ops::Range<usize>>| {
        let (line, column) = position(text, span.map_or(0, |s| s.start));
        Location {
            file: name.to_owned(),
            line,
            column,
        }
    };
    let mut out = Body::default();
    for structure in body.into_iter() {
        match structure {
            Structure::Attribute(a) => {
                let loc = at(a.span());
                out.attributes
                    .push((a.key.to_string(), Expression::from(a.value), loc));
            }
            Structure::Block(b) => {
                let loc = at(b.span());
                let labels = b
                    .labels
                    .iter()
                    .map(|l| match l {
                        BlockLabel::Ident(i) => i.to_string(),
                        BlockLabel::String(s) => s.to_string(),
                    })
                    .collect();
                out.blocks.push(Block {
                    kind: b.ident.to_string(),
                    labels,
                    body: native_body(name, text, b.body),
                    at: loc,
                });
            }
        }
    }
    out
}

/// How many labels each top-level block type of the JSON syntax nests.
fn json_labels(kind: &str) -> usize {
    match kind {
        "resource" | "data" => 2,
        "variable" | "output" | "module" | "provider" => 1,
        _ => 0,
    }
}

fn json_file(name: &str, text: &str) -> Result<Vec<Block>, LoadError> {
    let doc: Json = serde_json::from_str(text).map_err(|e| LoadError::Syntax {
        at: Location {
            file: name.to_owned(),
            line: e.line(),
            column: e.column(),
        },
        message: e.to_string(),
    })?;
    let at = Location {
        file: name.to_owned(),
        line: 1,
        column: 1,
    };
    let Json::Object(top) = doc else {
        return Err(LoadError::Syntax {
            at,
            message: "a .tf.json file must hold an object".into(),
        });
    };
    let mut blocks = Vec::new();
    for (kind, v) in top {
        json_blocks(&kind, Vec::new(), json_labels(&kind), &v, &at, &mut blocks);
    }
    Ok(blocks)
}

fn json_blocks(
    kind: &str,
    labels: Vec<String>,
    depth: usize,
    v: &Json,
    at: &Location,
    out: &mut Vec<Block>,
) {
    if depth > 0 {
        if let Json::Object(m) = v {
            for (label, inner) in m {
                let mut l = labels.clone();
                l.push(label.clone());
                json_blocks(kind, l, depth - 1, inner, at, out);
            }
        }
        return;
    }
    let items: Vec<&Json> = match v {
        Json::Array(a) => a.iter().collect(),
        other => vec![other],
    };
    for item in items {
        out.push(Block {
            kind: kind.to_owned(),
            labels: labels.clone(),
            body: json_body(item, at),
            at: at.clone(),
        });
    }
}

/// The meta-blocks that stay blocks in JSON syntax; other objects are attributes (the
/// provider schema tells nested blocks apart later).
const JSON_BLOCKS: &[&str] = &[
    "lifecycle",
    "dynamic",
    "content",
    "provisioner",
    "connection",
];

fn json_body(v: &Json, at: &Location) -> Body {
    let mut body = Body::default();
    let Json::Object(m) = v else {
        return body;
    };
    for (k, v) in m {
        if JSON_BLOCKS.contains(&k.as_str()) {
            let depth = usize::from(k == "dynamic");
            json_blocks(k, Vec::new(), depth, v, at, &mut body.blocks);
        } else {
            body.attributes.push((k.clone(), json_expr(v), at.clone()));
        }
    }
    body
}

/// A JSON value as an expression: strings are templates (`"${var.x}"`).
fn json_expr(v: &Json) -> Expression {
    match v {
        Json::Null => Expression::Null,
        Json::Bool(b) => Expression::Bool(*b),
        Json::Number(n) => n
            .as_i64()
            .map(Expression::from)
            .or_else(|| n.as_f64().map(Expression::from))
            .unwrap_or(Expression::Null),
        Json::String(s) if s.contains("${") || s.contains("%{") => {
            Expression::TemplateExpr(Box::new(hcl::expr::TemplateExpr::QuotedString(s.clone())))
        }
        Json::String(s) => Expression::String(s.clone()),
        Json::Array(a) => Expression::Array(a.iter().map(json_expr).collect()),
        Json::Object(m) => {
            let mut obj = hcl::expr::Object::new();
            for (k, v) in m {
                obj.insert(hcl::expr::ObjectKey::from(k.as_str()), json_expr(v));
            }
            Expression::Object(obj)
        }
    }
}

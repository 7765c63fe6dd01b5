//! Local modules, inlined: `module "net" { source = "./net" ... }` evaluates the module in
//! `./net` with the block's arguments as its variables, and its resources join the
//! configuration at module path `module.net` (their addresses, `module.net.aws_vpc.main`, and
//! their object names, `net-main`); with `count` or `for_each`, once per instance
//! (`module.net[0]`, object names `net-0-main`). An argument that reads another object stays a
//! reference inside the module; `module.net.<output>` reads the module's output
//! (`module.net[0].<output>`). Modules from a registry or elsewhere are reported and left out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::eval::{Scope, Val, eval};
use super::guard::MAX_MODULE_DEPTH;
use super::load::{Block, Module, load_in};
use super::vars::{Given, Inputs, Problem};

/// A `module` block's arguments that are not the module's variables.
const META: &[&str] = &[
    "source",
    "version",
    "count",
    "for_each",
    "providers",
    "depends_on",
];

/// A local module to evaluate: where it is, its path, and its variables.
pub struct Child {
    pub name: String,
    /// `module.net` (nested: `module.a.module.b`).
    pub path: String,
    pub module: Module,
    pub inputs: Inputs,
    /// The arguments that read other objects, by variable.
    pub refs: BTreeMap<String, Val>,
    /// The directories of the modules calling it, and its own last.
    pub calls: Vec<PathBuf>,
}

/// The module a `module` block names, loaded, with its arguments evaluated in `scope`; or why
/// it is not converted. `key` is the instance's `count` index or `for_each` key: its path is
/// then `module.net[0]` or `module.net["a"]`, as Terraform addresses it.
pub fn prepare(
    module: &Module,
    b: &Block,
    scope: &Scope,
    key: Option<&Json>,
) -> Result<Child, Problem> {
    let name = b.labels.first().cloned().unwrap_or_default();
    let instance = super::value::address(false, "module", &name, key);
    let path = super::value::in_module(&scope.module_path, instance);
    let problem = |message: String, blocking: bool| Problem {
        at: b.at.clone(),
        subject: path.clone(),
        message,
        blocking,
    };
    let source = b
        .body
        .attribute("source")
        .and_then(|(e, _)| eval(e, scope).ok())
        .and_then(|v| v.known().and_then(Json::as_str).map(str::to_owned))
        .ok_or_else(|| problem("source must be a string".into(), true))?;
    if !(source.starts_with("./") || source.starts_with("../")) {
        return Err(problem(
            format!(
                "module source {source:?} is not a local directory: only local modules (./, ../) \
                 are inlined, so its resources are not converted; copy it into the configuration \
                 to convert it"
            ),
            false,
        ));
    }
    let (child, calls) = read(module, &source, scope)
        .map_err(|e| problem(format!("module source {source:?}: {e}"), true))?;
    let mut inputs = Inputs::default();
    let mut refs = BTreeMap::new();
    for (arg, e, at) in &b.body.attributes {
        if META.contains(&arg.as_str()) {
            continue;
        }
        match eval(e, scope) {
            Ok(Val::Known(v)) => inputs.given.push(Given::Value(arg.clone(), v, at.clone())),
            Ok(v) => {
                inputs.refs.insert(arg.clone());
                refs.insert(arg.clone(), v);
            }
            Err(err) => {
                return Err(Problem {
                    at: at.clone(),
                    subject: format!("{path}.{arg}"),
                    message: err.0,
                    blocking: true,
                });
            }
        }
    }
    Ok(Child {
        name,
        path,
        module: child,
        inputs,
        refs,
        calls,
    })
}

/// The module at `source` (relative to `module`'s directory), read through the guard (inside
/// the root when confined; once per conversion), and the calls down to it; an error when it is
/// one of the modules calling it (a cycle) or nests past [`MAX_MODULE_DEPTH`].
fn read(module: &Module, source: &str, scope: &Scope) -> Result<(Module, Vec<PathBuf>), String> {
    let guard = &module.guard;
    let dir = module.dir.join(source);
    let real = guard.resolve(&module.dir, source)?;
    let real = real.canonicalize().unwrap_or(real);
    if let Some(i) = scope.calls.iter().position(|d| *d == real) {
        let mut cycle: Vec<String> = scope.calls[i..].iter().map(|d| shown(d, scope)).collect();
        cycle.push(shown(&real, scope));
        return Err(format!(
            "the module calls itself ({}): a module may not call a module calling it",
            cycle.join(" → ")
        ));
    }
    // The root module is the first of the calls: one past it is the first nested call.
    if scope.calls.len() > MAX_MODULE_DEPTH {
        return Err(format!(
            "module calls nest over {MAX_MODULE_DEPTH} deep, the most kraken convert follows"
        ));
    }
    let mut calls = scope.calls.clone();
    calls.push(real.clone());
    let blocks = match guard.module(&real) {
        Some(loaded) => loaded?,
        None => {
            let loaded = load_in(&dir, guard.clone())
                .map(|m| m.blocks)
                .map_err(|e| e.to_string());
            guard.keep_module(real, loaded.clone());
            loaded?
        }
    };
    let child = Module {
        dir,
        blocks,
        guard: guard.clone(),
    };
    Ok((child, calls))
}

/// A module's directory relative to the root module's: `.`, `net`, `../shared`.
fn shown(dir: &Path, scope: &Scope) -> String {
    let Some(root) = scope.calls.first() else {
        return dir.display().to_string();
    };
    let (mut from, mut to) = (root.components().peekable(), dir.components().peekable());
    while let (Some(a), Some(b)) = (from.peek(), to.peek()) {
        if a != b {
            break;
        }
        from.next();
        to.next();
    }
    let mut rel: PathBuf = from.map(|_| "..").collect();
    rel.extend(to);
    if rel.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        rel.display().to_string()
    }
}

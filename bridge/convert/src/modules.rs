//! Local modules, inlined: `module "net" { source = "./net" ... }` evaluates the module in
//! `./net` with the block's arguments as its variables, and its resources join the
//! configuration at module path `module.net` (their addresses, `module.net.aws_vpc.main`, and
//! their object names, `net-main`); with `count` or `for_each`, once per instance
//! (`module.net[0]`, object names `net-0-main`). An argument that reads another object stays a
//! reference inside the module; `module.net.<output>` reads the module's output
//! (`module.net[0].<output>`). Modules from a registry or elsewhere are reported and left out.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use super::eval::{Scope, Val, eval};
use super::load::{Block, Module, load};
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
    let child = load(&module.dir.join(&source))
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
    })
}

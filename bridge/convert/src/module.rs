//! A module evaluated: variables from their defaults, `TF_VAR_*`, `.tfvars` files and `-var`,
//! checked against their validation blocks; locals in dependency order; every resource and
//! data block expanded by `count` or `for_each` into instances with their arguments evaluated.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use hcl::Expression;
use serde_json::Value as Json;

use super::eval::{EvalError, Scope, Val, entries, eval, text};
use super::load::{Block, Body, Location, Module};
pub use super::vars::{Given, Inputs, Problem};
use super::vars::{note, problem, variables};

/// One instance of a resource or data block.
#[derive(Debug, Clone)]
pub struct Instance {
    /// The module path (`module.net`); empty in the root module.
    pub module: String,
    pub data: bool,
    pub type_name: String,
    /// The block's name (the second label).
    pub name: String,
    /// `count` index or `for_each` key.
    pub key: Option<Json>,
    /// Arguments by Terraform name; nested blocks as lists of objects.
    pub args: BTreeMap<String, Val>,
    /// Where each argument is written.
    pub arg_at: BTreeMap<String, Location>,
    /// `depends_on` addresses.
    pub depends_on: Vec<String>,
    /// The `provider` meta-argument (`aws.west`).
    pub provider: Option<String>,
    /// The `lifecycle` block's settings, evaluated.
    pub lifecycle: BTreeMap<String, Val>,
    pub at: Location,
}

impl Instance {
    /// The Terraform address: `aws_vpc.main`, `data.aws_ami.ubuntu`, `aws_subnet.a[0]`.
    pub fn address(&self) -> String {
        super::value::in_module(
            &self.module,
            super::eval::address(self.data, &self.type_name, &self.name, self.key.as_ref()),
        )
    }
}

/// The evaluated module.
#[derive(Debug, Clone, Default)]
pub struct Evaluated {
    pub vars: BTreeMap<String, Json>,
    pub locals: BTreeMap<String, Val>,
    pub instances: Vec<Instance>,
    /// Outputs by name.
    pub outputs: BTreeMap<String, (Val, Location)>,
    /// The outputs marked `sensitive = true`.
    pub sensitive_outputs: std::collections::BTreeSet<String>,
    pub problems: Vec<Problem>,
}

/// Meta-arguments: not provider arguments.
const META: &[&str] = &["count", "for_each", "provider", "depends_on"];

/// Evaluates the root module `module` with `inputs`.
pub fn evaluate(module: &Module, inputs: &Inputs) -> Evaluated {
    let here = module
        .dir
        .canonicalize()
        .unwrap_or_else(|_| module.dir.clone());
    evaluate_at(module, inputs, "", BTreeMap::new(), vec![here])
}

/// Evaluates every local module `module` calls, once per instance of its `count` or
/// `for_each`, adding their instances and problems to `out` and their outputs to `scope` (for
/// `module.<name>.<output>`, `module.<name>[0].<output>`, `module.<name>["k"].<output>`).
fn inline_modules(module: &Module, scope: &mut Scope, out: &mut Evaluated) {
    for b in module.of_kind("module") {
        let name = b.labels.first().cloned().unwrap_or_default();
        let subject = super::value::in_module(&scope.module_path, format!("module.{name}"));
        let expanded = match expansion(b, scope, &subject) {
            Ok(e) => e,
            Err(p) => {
                out.problems.push(p);
                continue;
            }
        };
        let counted = b.body.attribute("count").is_some();
        let mut each: Vec<(Option<Json>, Val)> = Vec::new();
        for (key, s) in expanded {
            match super::modules::prepare(module, b, &s, key.as_ref()) {
                Ok(child) => {
                    let ev = evaluate_at(
                        &child.module,
                        &child.inputs,
                        &child.path,
                        child.refs,
                        child.calls,
                    );
                    out.instances.extend(ev.instances);
                    out.problems.extend(ev.problems);
                    let outputs = ev.outputs.into_iter().map(|(k, (v, _))| (k, v)).collect();
                    each.push((key, Val::Object(outputs)));
                }
                Err(p) => out.problems.push(p),
            }
        }
        let value = match (counted, each.first()) {
            (_, Some((None, _))) => each.remove(0).1,
            (true, _) => Val::List(each.into_iter().map(|(_, v)| v).collect()),
            (false, _) => Val::Object(
                each.into_iter()
                    .map(|(k, v)| (k.as_ref().map(key_text).unwrap_or_default(), v))
                    .collect(),
            ),
        };
        Arc::make_mut(&mut scope.modules).insert(name, value);
    }
}

/// A `for_each` key as an object key.
fn key_text(k: &Json) -> String {
    match k {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Evaluates `module` at module path `path` (empty for the root), with `refs`: the inputs
/// that read other objects; `calls`: the directories of the modules calling it, and its own
/// last.
pub fn evaluate_at(
    module: &Module,
    inputs: &Inputs,
    path: &str,
    refs: BTreeMap<String, Val>,
    calls: Vec<PathBuf>,
) -> Evaluated {
    let mut out = Evaluated::default();
    let mut scope = Scope {
        module_dir: module.dir.display().to_string(),
        module_path: path.to_owned(),
        var_refs: Arc::new(refs),
        guard: module.guard.clone(),
        calls,
        ..Scope::default()
    };
    let mut objects = BTreeMap::new();
    for b in module.of_kind("resource").chain(module.of_kind("data")) {
        if let [type_name, name] = b.labels.as_slice() {
            let id = if b.kind == "data" {
                format!("data.{type_name}.{name}")
            } else {
                format!("{type_name}.{name}")
            };
            let repeated =
                b.body.attribute("count").is_some() || b.body.attribute("for_each").is_some();
            objects.insert(id, repeated);
        }
    }
    scope.objects = Arc::new(objects);
    out.vars = variables(module, inputs, &mut out.problems);
    scope.vars = Arc::new(out.vars.clone());
    out.locals = locals(module, &scope, &mut out.problems);
    scope.locals = Arc::new(out.locals.clone());
    inline_modules(module, &mut scope, &mut out);
    for b in module.of_kind("resource").chain(module.of_kind("data")) {
        instances(b, &scope, &mut out);
    }
    for b in module.of_kind("output") {
        let name = b.labels.first().cloned().unwrap_or_default();
        match b.body.attribute("value") {
            Some((e, at)) => match eval(e, &scope) {
                Ok(v) => {
                    let sensitive = b
                        .body
                        .attribute("sensitive")
                        .and_then(|(e, _)| eval(e, &scope).ok());
                    if sensitive.as_ref().and_then(Val::known) == Some(&Json::Bool(true)) {
                        out.sensitive_outputs.insert(name.clone());
                    }
                    out.outputs.insert(name, (v, at.clone()));
                }
                Err(e) => out.problems.push(note(at, &format!("output.{name}"), e.0)),
            },
            None => out
                .problems
                .push(note(&b.at, &format!("output.{name}"), "no value".into())),
        }
    }
    out
}

/// Every local, evaluated in dependency order: passes over the ones left until none moves.
fn locals(module: &Module, scope: &Scope, problems: &mut Vec<Problem>) -> BTreeMap<String, Val> {
    let mut pending: Vec<(String, Expression, Location)> = module
        .of_kind("locals")
        .flat_map(|b| b.body.attributes.iter().cloned())
        .collect();
    let mut scope = scope.clone();
    loop {
        let before = pending.len();
        let mut left = Vec::new();
        let mut last_errors = Vec::new();
        for (name, e, at) in pending {
            match eval(&e, &scope) {
                Ok(v) => {
                    Arc::make_mut(&mut scope.locals).insert(name, v);
                }
                Err(err) => {
                    last_errors.push(problem(&at, &format!("local.{name}"), err.0.clone()));
                    left.push((name, e, at));
                }
            }
        }
        if left.is_empty() {
            break;
        }
        if left.len() == before {
            problems.extend(last_errors);
            break;
        }
        pending = left;
    }
    Arc::unwrap_or_clone(scope.locals)
}

/// Expands one resource or data block into its instances.
fn instances(b: &Block, scope: &Scope, out: &mut Evaluated) {
    let [type_name, name] = b.labels.as_slice() else {
        out.problems.push(problem(
            &b.at,
            &b.kind,
            "needs two labels: type and name".into(),
        ));
        return;
    };
    let data = b.kind == "data";
    let subject = if data {
        format!("data.{type_name}.{name}")
    } else {
        format!("{type_name}.{name}")
    };
    let keys = match expansion(b, scope, &subject) {
        Ok(keys) => keys,
        Err(p) => {
            out.problems.push(p);
            return;
        }
    };
    // Written once per block, not per instance: an instance's copy is a clone.
    let provider = b.body.attribute("provider").map(|(e, _)| text(e));
    let depends_on: Vec<String> = match b.body.attribute("depends_on") {
        Some((Expression::Array(items), _)) => items.iter().map(text).collect(),
        _ => Vec::new(),
    };
    for (key, s) in keys {
        let mut inst = Instance {
            module: scope.module_path.clone(),
            data,
            type_name: type_name.clone(),
            name: name.clone(),
            key,
            args: BTreeMap::new(),
            arg_at: BTreeMap::new(),
            depends_on: depends_on.clone(),
            provider: provider.clone(),
            lifecycle: BTreeMap::new(),
            at: b.at.clone(),
        };
        let address = inst.address();
        body_args(&b.body, &s, &address, &mut inst, &mut out.problems);
        out.instances.push(inst);
    }
}

/// The instances a block's `count` or `for_each` makes, each with its scope; at most
/// [`super::guard::MAX_INSTANCES_PER_BLOCK`], counted against the conversion's
/// [`super::guard::MAX_INSTANCES`] before any is made.
fn expansion(
    b: &Block,
    scope: &Scope,
    subject: &str,
) -> Result<Vec<(Option<Json>, Scope)>, Problem> {
    let keys: Vec<(Json, Option<Val>)> =
        match (b.body.attribute("count"), b.body.attribute("for_each")) {
            (Some(_), Some((_, at))) => {
                return Err(problem(at, subject, "count and for_each together".into()));
            }
            (Some((e, at)), None) => {
                let n = count(e, scope).map_err(|m| problem(at, subject, m))?;
                let counted = scope.guard.count_instances(n);
                counted.map_err(|m| problem(at, subject, format!("count = {n}: {m}")))?;
                (0..n).map(|i| (Json::from(i), None)).collect()
            }
            (None, Some((e, at))) => {
                let pairs = for_each_keys(e, scope)
                    .map_err(|err| problem(at, subject, format!("for_each: {}", err.0)))?;
                let counted = scope.guard.count_instances(pairs.len() as u64);
                counted.map_err(|m| problem(at, subject, format!("for_each: {m}")))?;
                pairs.into_iter().map(|(k, v)| (k, Some(v))).collect()
            }
            (None, None) => {
                let counted = scope.guard.count_instances(1);
                counted.map_err(|m| problem(&b.at, subject, m))?;
                return Ok(vec![(None, scope.clone())]);
            }
        };
    Ok(keys
        .into_iter()
        .map(|(k, each)| {
            let mut s = scope.clone();
            match each {
                Some(v) => s.each = Some((k.clone(), v)),
                None => s.count_index = k.as_i64(),
            }
            (Some(k), s)
        })
        .collect())
}

/// A `count`'s value: a known whole number, not negative.
fn count(e: &Expression, scope: &Scope) -> Result<u64, String> {
    match eval(e, scope) {
        Ok(v) => v
            .known()
            .and_then(Json::as_u64)
            .ok_or_else(|| format!("count = {} is not a known whole number", text(e))),
        Err(err) => Err(format!("count: {}", err.0)),
    }
}

/// The keys and values a `for_each` iterates: a map's entries, or a set of strings (each
/// value is its key).
fn for_each_keys(e: &Expression, scope: &Scope) -> Result<Vec<(Json, Val)>, EvalError> {
    let v = eval(e, scope)?;
    match &v {
        Val::Known(Json::Array(items)) => items
            .iter()
            .map(|i| match i {
                Json::String(_) => Ok((i.clone(), Val::Known(i.clone()))),
                other => Err(EvalError(format!(
                    "a for_each set must hold strings, not {other}"
                ))),
            })
            .collect(),
        Val::Known(Json::Object(_)) | Val::Object(_) => entries(&v),
        _ => Err(EvalError(format!(
            "{} is not a known map or set of strings",
            text(e)
        ))),
    }
}

/// Evaluates a block body's arguments into `inst` (nested blocks as lists of objects,
/// `dynamic` blocks expanded); `lifecycle` into its settings.
fn body_args(
    body: &Body,
    scope: &Scope,
    address: &str,
    inst: &mut Instance,
    problems: &mut Vec<Problem>,
) {
    for (name, e, at) in &body.attributes {
        if META.contains(&name.as_str()) {
            continue;
        }
        match eval(e, scope) {
            Ok(v) => {
                inst.args.insert(name.clone(), v);
                inst.arg_at.insert(name.clone(), at.clone());
            }
            Err(err) => problems.push(problem(at, &format!("{address}.{name}"), err.0)),
        }
    }
    let mut nested: BTreeMap<String, Vec<Val>> = BTreeMap::new();
    for b in &body.blocks {
        match b.kind.as_str() {
            "lifecycle" => {
                for (name, e, at) in &b.body.attributes {
                    match eval(e, scope) {
                        Ok(v) => {
                            inst.lifecycle.insert(name.clone(), v);
                        }
                        // ignore_changes and replace_triggered_by name attributes; keep
                        // their text.
                        Err(_) => {
                            inst.lifecycle
                                .insert(name.clone(), Val::Known(Json::String(text(e))));
                            let _ = at;
                        }
                    }
                }
                for inner in &b.body.blocks {
                    problems.push(note(
                        &inner.at,
                        address,
                        format!("lifecycle block {} is not converted", inner.kind),
                    ));
                }
            }
            "provisioner" | "connection" => {
                problems.push(note(
                    &b.at,
                    address,
                    format!(
                        "{} blocks are not converted: Kraken runs no provisioners",
                        b.kind
                    ),
                ));
            }
            "dynamic" => {
                if let Some((kind, items)) = dynamic(b, scope, address, problems) {
                    nested.entry(kind).or_default().extend(items);
                }
            }
            kind => {
                if let Some(v) = block_value(&b.body, scope, &format!("{address}.{kind}"), problems)
                {
                    nested.entry(kind.to_owned()).or_default().push(v);
                    inst.arg_at
                        .entry(kind.to_owned())
                        .or_insert_with(|| b.at.clone());
                }
            }
        }
    }
    for (kind, items) in nested {
        inst.args.insert(kind, Val::list(items));
    }
}

/// A nested block's value: an object of its arguments and its own nested blocks.
fn block_value(
    body: &Body,
    scope: &Scope,
    subject: &str,
    problems: &mut Vec<Problem>,
) -> Option<Val> {
    let mut obj = BTreeMap::new();
    for (name, e, at) in &body.attributes {
        match eval(e, scope) {
            Ok(v) => {
                obj.insert(name.clone(), v);
            }
            Err(err) => problems.push(problem(at, &format!("{subject}.{name}"), err.0)),
        }
    }
    let mut nested: BTreeMap<String, Vec<Val>> = BTreeMap::new();
    for b in &body.blocks {
        if b.kind == "dynamic" {
            if let Some((kind, items)) = dynamic(b, scope, subject, problems) {
                nested.entry(kind).or_default().extend(items);
            }
        } else if let Some(v) =
            block_value(&b.body, scope, &format!("{subject}.{}", b.kind), problems)
        {
            nested.entry(b.kind.clone()).or_default().push(v);
        }
    }
    for (kind, items) in nested {
        obj.insert(kind, Val::list(items));
    }
    Some(Val::object(obj))
}

/// `dynamic "x" { for_each = ...; iterator = it; content { ... } }` → the blocks `x`.
fn dynamic(
    b: &Block,
    scope: &Scope,
    subject: &str,
    problems: &mut Vec<Problem>,
) -> Option<(String, Vec<Val>)> {
    let kind = b.labels.first()?.clone();
    let subject = format!("{subject}.dynamic.{kind}");
    let Some((e, at)) = b.body.attribute("for_each") else {
        problems.push(problem(
            &b.at,
            &subject,
            "a dynamic block needs for_each".into(),
        ));
        return None;
    };
    let iterator = b
        .body
        .attribute("iterator")
        .map(|(e, _)| text(e))
        .unwrap_or_else(|| kind.clone());
    let source = match eval(e, scope) {
        Ok(v) => v,
        Err(err) => {
            problems.push(problem(at, &subject, err.0));
            return None;
        }
    };
    let pairs = match entries(&source) {
        Ok(p) => p,
        Err(err) => {
            problems.push(problem(at, &subject, format!("for_each: {}", err.0)));
            return None;
        }
    };
    let content = b.body.blocks_of("content").next()?;
    let mut items = Vec::new();
    for (k, v) in pairs {
        let mut inner = scope.clone();
        let mut it = BTreeMap::new();
        it.insert("key".to_owned(), Val::Known(k));
        it.insert("value".to_owned(), v);
        inner.bound.push((iterator.clone(), Val::object(it)));
        items.extend(block_value(&content.body, &inner, &subject, problems));
    }
    Some((kind, items))
}

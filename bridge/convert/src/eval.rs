//! Evaluating Terraform expressions with real values, keeping references to other objects as
//! references.
//!
//! Variables, locals, `count.index`, `each.key`/`each.value`, `path.module` and the built-in
//! functions ([`super::funcs`]) evaluate to known values. An attribute of another resource or data
//! source evaluates to a [`Val::Ref`]: after conversion it is a `valuesFrom` entry, so the graph
//! keeps propagating instead of holding a copied value. Text around references becomes a
//! [`Val::Template`] (a `valuesFrom` template). Anything else computed from a reference
//! (arithmetic, a function of it) is [`Val::Opaque`]: reported, never guessed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use hcl::expr::{
    Conditional, Expression, ForExpr, FuncCall, ObjectKey, Operation, TraversalOperator,
    UnaryOperator,
};
use hcl::template::Template;
use serde_json::Value as Json;

pub use super::funcs::{EvalError, Result, num, stringify, to_f64};
use super::guard::Guard;
pub use super::value::{Part, Ref, Val, address, describe_refs, entries, opaque_of};
use super::value::{binary, get};

mod template;
use template::template_value;

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(EvalError(message.into()))
}

/// What names mean while evaluating one expression.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// `var.<name>`: every variable's value. (The maps are shared: a scope is cloned for
    /// every instance and every `for`.)
    pub vars: Arc<BTreeMap<String, Json>>,
    /// `local.<name>`: the locals evaluated so far.
    pub locals: Arc<BTreeMap<String, Val>>,
    /// `count.index` inside a counted resource.
    pub count_index: Option<i64>,
    /// `each.key` and `each.value` inside a `for_each` resource.
    pub each: Option<(Json, Val)>,
    /// `path.module`, `path.root`, `path.cwd`.
    pub module_dir: String,
    /// Names bound by `for` expressions and template `for` directives, innermost last.
    pub bound: Vec<(String, Val)>,
    /// The resources and data sources of the module (`type.name` and `data.type.name`),
    /// with whether they repeat (`count` or `for_each`).
    pub objects: Arc<BTreeMap<String, bool>>,
    /// The module's path (`module.net`); empty in the root module.
    pub module_path: String,
    /// Variables whose value reads another object (a module input such as
    /// `vpc_id = aws_vpc.main.id`): known only as that reference.
    pub var_refs: Arc<BTreeMap<String, Val>>,
    /// `module.<name>`: the local modules evaluated so far, each an object of its outputs (a
    /// module with `count`, a list of them; with `for_each`, an object of them by key).
    pub modules: Arc<BTreeMap<String, Val>>,
    /// What the conversion may read and spend: `file()` reads through it, and every value
    /// evaluated is charged to it.
    pub guard: Arc<Guard>,
    /// The directories of the modules calling this one, outermost first, this one last: a
    /// module may not call one of them (a cycle), nor nest past
    /// [`super::guard::MAX_MODULE_DEPTH`].
    pub calls: Vec<PathBuf>,
}

impl Scope {
    fn lookup(&self, name: &str) -> Option<&Val> {
        self.bound
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }
}

/// The source text of an expression, for reports.
pub fn text(expr: &Expression) -> String {
    hcl::format::to_string(expr).unwrap_or_else(|_| format!("{expr:?}"))
}

/// Evaluates `expr` in `scope`, within what the scope's [`Guard`] allows: every value is
/// weighed and charged (and every error's message), so no expression evaluates forever or to
/// more than the guard's bounds.
pub fn eval(expr: &Expression, scope: &Scope) -> Result<Val> {
    // Spent first: once the budget is gone, nothing more is evaluated (not even a leaf's copy
    // of a large value).
    scope.guard.spend(1).map_err(EvalError)?;
    match eval_unguarded(expr, scope) {
        Ok(v) => {
            scope
                .guard
                .charge(super::value::weight(&v))
                .map_err(EvalError)?;
            Ok(v)
        }
        Err(e) => {
            scope.guard.spend(e.0.len() as u64).map_err(EvalError)?;
            Err(e)
        }
    }
}

fn eval_unguarded(expr: &Expression, scope: &Scope) -> Result<Val> {
    match expr {
        Expression::Null => Ok(Val::null()),
        Expression::Bool(b) => Ok(Val::Known(Json::Bool(*b))),
        Expression::Number(n) => Ok(Val::Known(number(n))),
        Expression::String(s) => Ok(Val::Known(Json::String(s.clone()))),
        Expression::Array(items) => items
            .iter()
            .map(|e| eval(e, scope))
            .collect::<Result<Vec<_>>>()
            .map(Val::list),
        Expression::Object(items) => {
            let mut out = BTreeMap::new();
            for (k, v) in items {
                let key = match k {
                    ObjectKey::Identifier(id) => id.to_string(),
                    ObjectKey::Expression(e) => match eval(e, scope)? {
                        Val::Known(Json::String(s)) => s,
                        Val::Known(j @ (Json::Number(_) | Json::Bool(_))) => j.to_string(),
                        _ => return err(format!("object key {} is not a known string", text(e))),
                    },
                    other => return err(format!("unsupported object key {other:?}")),
                };
                out.insert(key, eval(v, scope)?);
            }
            Ok(Val::object(out))
        }
        Expression::TemplateExpr(t) => {
            let source = match t.as_ref() {
                hcl::expr::TemplateExpr::QuotedString(s) => s.as_str(),
                hcl::expr::TemplateExpr::Heredoc(h) => h.template.as_str(),
            };
            if super::lex::too_deep(source, true).is_some() {
                return err(format!("template: {}", super::lex::TOO_DEEP));
            }
            let template =
                Template::from_expr(t).map_err(|e| EvalError(format!("template: {e}")))?;
            template_value(&template, scope)
        }
        Expression::Variable(v) => variable(v.as_str(), scope),
        Expression::Traversal(t) => traversal(&t.expr, &t.operators, scope),
        Expression::FuncCall(call) => call_function(call, scope),
        Expression::Parenthesis(e) => eval(e, scope),
        Expression::Conditional(c) => conditional(c, scope),
        Expression::Operation(op) => operation(op, expr, scope),
        Expression::ForExpr(f) => for_expr(f, scope),
        other => err(format!("unsupported expression {}", text(other))),
    }
}

/// A number as JSON: integers stay integers.
pub fn number(n: &hcl::Number) -> Json {
    if let Some(i) = n.as_i64() {
        Json::from(i)
    } else {
        n.as_f64().map_or(Json::Null, num)
    }
}

fn variable(name: &str, scope: &Scope) -> Result<Val> {
    if let Some(v) = scope.lookup(name) {
        return Ok(v.clone());
    }
    match name {
        "var" => Ok(Val::Known(Json::Object(
            scope
                .vars
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ))),
        "local" => Ok(Val::object(scope.locals.as_ref().clone())),
        _ => err(format!("unknown name {name:?}")),
    }
}

/// `root.op.op...`: variables, locals, `count`, `each`, `path`, and references to objects.
fn traversal(root: &Expression, ops: &[TraversalOperator], scope: &Scope) -> Result<Val> {
    let Expression::Variable(v) = root else {
        let base = eval(root, scope)?;
        return apply_ops(base, ops, scope);
    };
    let name = v.as_str();
    if scope.lookup(name).is_some() {
        return apply_ops(variable(name, scope)?, ops, scope);
    }
    let attr = |i: usize| match ops.get(i) {
        Some(TraversalOperator::GetAttr(a)) => Some(a.as_str()),
        _ => None,
    };
    match (name, attr(0)) {
        ("var", Some(n)) if scope.var_refs.contains_key(n) => {
            let v = scope.var_refs.get(n).cloned().unwrap_or_else(Val::null);
            apply_ops(v, &ops[1..], scope)
        }
        ("var", Some(n)) => {
            let v = scope
                .vars
                .get(n)
                .ok_or_else(|| EvalError(format!("no variable {n:?} is declared")))?;
            apply_ops(Val::Known(v.clone()), &ops[1..], scope)
        }
        ("local", Some(n)) => {
            let v = scope
                .locals
                .get(n)
                .ok_or_else(|| EvalError(format!("no local {n:?} is defined")))?;
            apply_ops(v.clone(), &ops[1..], scope)
        }
        ("count", Some("index")) => match scope.count_index {
            Some(i) => apply_ops(Val::Known(Json::from(i)), &ops[1..], scope),
            None => err("count.index outside a resource with count"),
        },
        ("each", Some(which @ ("key" | "value"))) => match &scope.each {
            Some((k, v)) => {
                let base = if which == "key" {
                    Val::Known(k.clone())
                } else {
                    v.clone()
                };
                apply_ops(base, &ops[1..], scope)
            }
            None => err(format!("each.{which} outside a resource with for_each")),
        },
        ("path", Some("module" | "root" | "cwd")) => {
            Ok(Val::Known(Json::String(scope.module_dir.clone())))
        }
        ("data", Some(type_name)) => match attr(1) {
            Some(n) => object_ref(true, type_name, n, &ops[2..], scope),
            None => err(format!("data.{type_name} needs a name")),
        },
        ("module", Some(m)) if scope.modules.contains_key(m) => {
            apply_ops(scope.modules[m].clone(), &ops[1..], scope)
        }
        ("module", _) => err(format!(
            "{} reads a module output; module outputs are inlined only for local modules",
            text(&Expression::Traversal(Box::new(hcl::expr::Traversal::new(
                root.clone(),
                ops.to_vec()
            ))))
        )),
        (type_name, Some(n)) => object_ref(false, type_name, n, &ops[1..], scope),
        _ => err(format!("unknown name {name:?}")),
    }
}

/// A reference to `type.name` (or `data.type.name`): its instance key, then the attribute path.
fn object_ref(
    data: bool,
    type_name: &str,
    name: &str,
    ops: &[TraversalOperator],
    scope: &Scope,
) -> Result<Val> {
    let id = if data {
        format!("data.{type_name}.{name}")
    } else {
        format!("{type_name}.{name}")
    };
    let Some(repeated) = scope.objects.get(&id).copied() else {
        return err(format!("{id} is not declared in this module"));
    };
    let mut rest = ops;
    let mut key = None;
    if repeated {
        match rest.first() {
            Some(TraversalOperator::Index(e)) => {
                key =
                    Some(eval(e, scope)?.known().cloned().ok_or_else(|| {
                        EvalError(format!("the instance key of {id} is not known"))
                    })?);
                rest = &rest[1..];
            }
            Some(TraversalOperator::LegacyIndex(i)) => {
                key = Some(Json::from(*i));
                rest = &rest[1..];
            }
            _ => {
                return err(format!(
                    "{id} has count or for_each: pick an instance ({id}[0], {id}[\"key\"]); splats over instances are not converted"
                ));
            }
        }
    }
    let mut path = Vec::new();
    for op in rest {
        match op {
            TraversalOperator::GetAttr(a) => path.push(Json::String(a.to_string())),
            TraversalOperator::Index(e) => path.push(
                eval(e, scope)?
                    .known()
                    .cloned()
                    .ok_or_else(|| EvalError(format!("an index into {id} is not known")))?,
            ),
            TraversalOperator::LegacyIndex(i) => path.push(Json::from(*i)),
            TraversalOperator::AttrSplat | TraversalOperator::FullSplat => {
                return err(format!("a splat inside {id}'s attributes is not converted"));
            }
        }
    }
    if path.is_empty() {
        return err(format!(
            "{id} is used as a whole object; only its attributes can become references"
        ));
    }
    Ok(Val::Ref(Ref {
        module: scope.module_path.clone(),
        data,
        type_name: type_name.to_owned(),
        name: name.to_owned(),
        key,
        path,
    }))
}

/// Applies attribute access, indexing and splats to a value.
fn apply_ops(mut v: Val, ops: &[TraversalOperator], scope: &Scope) -> Result<Val> {
    for (i, op) in ops.iter().enumerate() {
        v = match op {
            TraversalOperator::GetAttr(a) => get(&v, &Json::String(a.to_string()))?,
            TraversalOperator::Index(e) => {
                let k = eval(e, scope)?;
                let Some(k) = k.known() else {
                    return Ok(opaque_of(&v, "an index that is not known"));
                };
                get(&v, k)?
            }
            TraversalOperator::LegacyIndex(n) => get(&v, &Json::from(*n))?,
            TraversalOperator::AttrSplat | TraversalOperator::FullSplat => {
                let items = match &v {
                    Val::Known(Json::Array(a)) => a.iter().cloned().map(Val::Known).collect(),
                    Val::List(items) => items.clone(),
                    Val::Known(Json::Null) => Vec::new(),
                    other => vec![other.clone()],
                };
                let rest = &ops[i + 1..];
                let mapped = items
                    .into_iter()
                    .map(|item| apply_ops(item, rest, scope))
                    .collect::<Result<Vec<_>>>()?;
                return Ok(Val::list(mapped));
            }
        };
    }
    Ok(v)
}

fn conditional(c: &Conditional, scope: &Scope) -> Result<Val> {
    match eval(&c.cond_expr, scope)? {
        Val::Known(Json::Bool(true)) => eval(&c.true_expr, scope),
        Val::Known(Json::Bool(false)) => eval(&c.false_expr, scope),
        Val::Known(other) => err(format!("a condition must be a bool, got {other}")),
        unknown => Ok(opaque_of(
            &unknown,
            &text(&Expression::Conditional(Box::new(c.clone()))),
        )),
    }
}

fn operation(op: &Operation, whole: &Expression, scope: &Scope) -> Result<Val> {
    match op {
        Operation::Unary(u) => {
            let v = eval(&u.expr, scope)?;
            let Some(j) = v.known() else {
                return Ok(opaque_of(&v, &text(whole)));
            };
            match (u.operator, j) {
                (UnaryOperator::Not, Json::Bool(b)) => Ok(Val::Known(Json::Bool(!b))),
                (UnaryOperator::Neg, j) => Ok(Val::Known(num(-to_f64(j)?))),
                (_, j) => err(format!("cannot apply {:?} to {j}", u.operator)),
            }
        }
        Operation::Binary(b) => {
            let (l, r) = (eval(&b.lhs_expr, scope)?, eval(&b.rhs_expr, scope)?);
            let (Some(lj), Some(rj)) = (l.known(), r.known()) else {
                let mut refs = l.refs();
                refs.extend(r.refs());
                return Ok(Val::Opaque {
                    expr: text(whole),
                    refs,
                });
            };
            binary(b.operator, lj, rj).map(Val::Known)
        }
    }
}

fn for_expr(f: &ForExpr, scope: &Scope) -> Result<Val> {
    let source = eval(&f.collection_expr, scope)?;
    if !matches!(source, Val::Known(_) | Val::List(_) | Val::Object(_)) {
        return Ok(opaque_of(
            &source,
            "for expression over a value that is not known",
        ));
    }
    let mut inner = scope.clone();
    let mut list = Vec::new();
    let mut object: BTreeMap<String, Vec<Val>> = BTreeMap::new();
    // The result's weight as it grows: each value is in bounds, their sum must be too before
    // it is all held.
    let mut weight = 0u64;
    for (k, v) in entries(&source)? {
        inner.bound.truncate(scope.bound.len());
        if let Some(kv) = &f.key_var {
            inner.bound.push((kv.to_string(), Val::Known(k.clone())));
        }
        inner.bound.push((f.value_var.to_string(), v));
        if let Some(cond) = &f.cond_expr {
            match eval(cond, &inner)? {
                Val::Known(Json::Bool(true)) => {}
                Val::Known(Json::Bool(false)) => continue,
                other => return Ok(opaque_of(&other, "for expression filter not known")),
            }
        }
        let value = eval(&f.value_expr, &inner)?;
        weight = weight.saturating_add(super::value::weight(&value).0);
        if weight > super::guard::MAX_VALUE_WEIGHT {
            return err(format!(
                "a for expression's result of over {} MiB",
                super::guard::MAX_VALUE_WEIGHT >> 20
            ));
        }
        match &f.key_expr {
            None => list.push(value),
            Some(ke) => {
                let key = match eval(ke, &inner)? {
                    Val::Known(Json::String(s)) => s,
                    Val::Known(j) => j.to_string(),
                    other => return Ok(opaque_of(&other, "for expression key not known")),
                };
                let slot = object.entry(key.clone()).or_default();
                if !f.grouping && !slot.is_empty() {
                    return err(format!(
                        "duplicate key {key:?} in a for expression (use ... to group)"
                    ));
                }
                slot.push(value);
            }
        }
    }
    if f.key_expr.is_none() {
        return Ok(Val::list(list));
    }
    let out = object
        .into_iter()
        .map(|(k, mut vs)| {
            let v = if f.grouping {
                Val::list(vs)
            } else {
                vs.pop().unwrap_or_else(Val::null)
            };
            (k, v)
        })
        .collect();
    Ok(Val::object(out))
}

/// Calls the function `call` names.
fn call_function(call: &FuncCall, scope: &Scope) -> Result<Val> {
    let name = call.name.name.as_str();
    if !call.name.namespace.is_empty() {
        return err(format!(
            "provider-defined function {} is not evaluated by kraken convert",
            text(&hcl::Expression::FuncCall(Box::new(call.clone())))
        ));
    }
    match name {
        "try" => {
            let mut last = None;
            for arg in &call.args {
                match eval(arg, scope) {
                    Ok(v) => return Ok(v),
                    Err(e) => last = Some(e),
                }
            }
            return Err(last.unwrap_or_else(|| EvalError("try() needs arguments".into())));
        }
        "can" => {
            let [arg] = call.args.as_slice() else {
                return err("can() takes one argument");
            };
            return Ok(Val::Known(Json::Bool(eval(arg, scope).is_ok())));
        }
        "file" => {
            let [arg] = call.args.as_slice() else {
                return err("file() takes one argument");
            };
            return file(&eval(arg, scope)?, scope);
        }
        _ => {}
    }
    let mut args = Vec::with_capacity(call.args.len());
    for a in &call.args {
        args.push(eval(a, scope)?);
    }
    if call.expand_final {
        match args.pop() {
            Some(Val::Known(Json::Array(items))) => args.extend(items.into_iter().map(Val::Known)),
            Some(other) => return Ok(opaque_of(&other, &format!("{name}(...)"))),
            None => return err(format!("{name}(...) needs a final argument to expand")),
        }
    }
    let known: Option<Vec<Json>> = args.iter().map(|v| v.known().cloned()).collect();
    let Some(known) = known else {
        // Functions that only pass a value through keep a reference a reference.
        if let ("tostring" | "tonumber" | "tobool", [v]) = (name, args.as_slice()) {
            return Ok(v.clone());
        }
        let whole = text(&hcl::Expression::FuncCall(Box::new(call.clone())));
        let refs = args.iter().flat_map(Val::refs).collect();
        return Ok(Val::Opaque { expr: whole, refs });
    };
    super::funcs::known_call(name, &known).map(Val::Known)
}

/// `file(path)`, relative to the module's directory, through the guard: inside the root when
/// confined, a regular file, within the size bounds.
fn file(path: &Val, scope: &Scope) -> Result<Val> {
    let Some(Json::String(p)) = path.known() else {
        return err("file() needs a known path");
    };
    let fail = |e: String| EvalError(format!("file({p:?}): {e}"));
    let dir = std::path::Path::new(&scope.module_dir);
    let real = scope.guard.resolve(dir, p).map_err(fail)?;
    let bytes = scope.guard.read(&real).map_err(fail)?;
    String::from_utf8(bytes)
        .map(|s| Val::Known(Json::String(s)))
        .map_err(|_| fail("not valid UTF-8".into()))
}

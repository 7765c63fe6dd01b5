//! String templates (`"${a}-${b}"`, `%{if}`, `%{for}`): text when everything is known, a
//! [`Val::Template`] when they splice in references.

use hcl::template::{Directive, Element, Template};
use serde_json::Value as Json;

use super::{
    EvalError, Part, Result, Scope, Val, describe_refs, entries, err, eval, stringify, text,
};

/// A template: text when everything is known, a [`Val::Template`] when it splices in
/// references, opaque otherwise.
pub(super) fn template_value(t: &Template, scope: &Scope) -> Result<Val> {
    let mut rendered = Rendered::default();
    render(t, scope, &mut rendered)?;
    let mut merged: Vec<Part> = Vec::new();
    for p in rendered.parts {
        match (merged.last_mut(), p) {
            (Some(Part::Text(a)), Part::Text(b)) => a.push_str(&b),
            (_, p) => merged.push(p),
        }
    }
    match merged.as_slice() {
        [] => Ok(Val::Known(Json::String(String::new()))),
        [Part::Text(s)] => Ok(Val::Known(Json::String(s.clone()))),
        [Part::Ref(r)] => Ok(Val::Ref(r.clone())),
        _ => Ok(Val::Template(merged)),
    }
}

/// A template's parts as rendered so far, and their size: bounded as it grows, since a
/// `%{for}` repeats its literal text without evaluating (and so charging) it.
#[derive(Default)]
struct Rendered {
    parts: Vec<Part>,
    len: u64,
}

impl Rendered {
    fn push(&mut self, p: Part, scope: &Scope) -> Result<()> {
        let n = match &p {
            Part::Text(s) => s.len() as u64,
            Part::Ref(_) => 32,
        };
        self.len = self.len.saturating_add(n);
        if self.len > crate::guard::MAX_VALUE_WEIGHT {
            return err(format!(
                "a template of over {} MiB",
                crate::guard::MAX_VALUE_WEIGHT >> 20
            ));
        }
        scope.guard.spend(n).map_err(EvalError)?;
        self.parts.push(p);
        Ok(())
    }
}

fn render(t: &Template, scope: &Scope, out: &mut Rendered) -> Result<()> {
    for element in t.elements() {
        match element {
            Element::Literal(s) => out.push(Part::Text(s.clone()), scope)?,
            Element::Interpolation(i) => match eval(&i.expr, scope)? {
                Val::Known(j) => out.push(Part::Text(stringify(&j)?), scope)?,
                Val::Ref(r) => out.push(Part::Ref(r), scope)?,
                Val::Template(parts) => {
                    for p in parts {
                        out.push(p, scope)?;
                    }
                }
                other => {
                    return err(format!(
                        "${{{}}} is computed from {}",
                        text(&i.expr),
                        describe_refs(&other)
                    ));
                }
            },
            Element::Directive(d) => match d.as_ref() {
                Directive::If(d) => match eval(&d.cond_expr, scope)? {
                    Val::Known(Json::Bool(true)) => render(&d.true_template, scope, out)?,
                    Val::Known(Json::Bool(false)) => {
                        if let Some(f) = &d.false_template {
                            render(f, scope, out)?;
                        }
                    }
                    _ => return err("a template %{if} over a value that is not known"),
                },
                Directive::For(d) => {
                    let source = eval(&d.collection_expr, scope)?;
                    let mut inner = scope.clone();
                    for (k, v) in entries(&source)? {
                        inner.bound.truncate(scope.bound.len());
                        if let Some(kv) = &d.key_var {
                            inner.bound.push((kv.to_string(), Val::Known(k)));
                        }
                        inner.bound.push((d.value_var.to_string(), v));
                        render(&d.template, &inner, out)?;
                    }
                }
            },
        }
    }
    Ok(())
}

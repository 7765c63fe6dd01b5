//! Outputs → `ConfigExport`s: the module's outputs keep being published after migration, in a
//! ConfigMap `terraform-outputs` (one key per output) and, for outputs marked `sensitive`, a
//! Secret `terraform-outputs-sensitive`. An output that reads another object stays a reference
//! (`resource:` or a template), so the value follows the object.

use serde_json::{Value as Json, json};

use super::emit::{ADDRESS_ANNOTATION, Manifest, RefCtx, opaque_message, producer, template_text};
use super::module::Evaluated;
use super::value::Val;
use super::vars::Problem;

/// The ConfigExport (and its ConfigMap) of the plain outputs.
pub const OUTPUTS: &str = "terraform-outputs";
/// The ConfigExport (and its Secret) of the sensitive outputs.
pub const SENSITIVE_OUTPUTS: &str = "terraform-outputs-sensitive";
/// The file they are written to.
pub const FILE: &str = "outputs.yaml";

/// The ConfigExports of `ev`'s outputs (none without outputs), and what could not be exported.
pub fn exports(ev: &Evaluated, ctx: &RefCtx<'_>, namespace: &str) -> (Vec<Manifest>, Vec<Problem>) {
    let mut problems = Vec::new();
    let (mut plain, mut secret) = (Vec::new(), Vec::new());
    for (name, (v, at)) in &ev.outputs {
        match entry(name, v, ctx) {
            Ok(Some(e)) if ev.sensitive_outputs.contains(name) => secret.push(e),
            Ok(Some(e)) => plain.push(e),
            Ok(None) => {}
            Err(message) => problems.push(Problem {
                at: at.clone(),
                subject: format!("output.{name}"),
                message,
                blocking: false,
            }),
        }
    }
    let export = |name: &str, kind: &str, data: Vec<Json>| Manifest {
        file: FILE.to_owned(),
        doc: json!({
            "apiVersion": "core.kraken.dev/v1alpha1",
            "kind": "ConfigExport",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {ADDRESS_ANNOTATION: "output"}},
            "spec": {"target": {"kind": kind, "name": name}, "data": data},
        }),
    };
    let mut out = Vec::new();
    if !plain.is_empty() {
        out.push(export(OUTPUTS, "ConfigMap", plain));
    }
    if !secret.is_empty() {
        out.push(export(SENSITIVE_OUTPUTS, "Secret", secret));
    }
    (out, problems)
}

/// One output as a data entry: a literal as a template (non-strings as their JSON text), a
/// reference as `resource:`, text around references as a template. `None` for null.
fn entry(name: &str, v: &Val, ctx: &RefCtx<'_>) -> Result<Option<Json>, String> {
    let source = match v {
        Val::Known(Json::Null) => return Ok(None),
        Val::Known(Json::String(t)) => json!({"template": t.replace("${", "$${")}),
        Val::Known(other) => json!({"template": other.to_string().replace("${", "$${")}),
        Val::Ref(r) => {
            let (api_version, kind, object, path) = producer(r, ctx)?;
            json!({"resource": {"apiVersion": api_version, "kind": kind, "name": object, "path": path}})
        }
        Val::Template(parts) => json!({"template": template_text(parts, ctx)?}),
        Val::List(_) | Val::Object(_) => {
            return Err(
                "a list or object holding references is not exported; export its members as outputs of their own"
                    .into(),
            );
        }
        Val::Opaque { expr, refs } => return Err(opaque_message(expr, refs)),
    };
    let mut e = source;
    e["key"] = Json::String(name.to_owned());
    Ok(Some(e))
}

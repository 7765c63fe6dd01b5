//! A resource's `lifecycle` block in its manifest: `prevent_destroy` → `deletionPolicy:
//! Orphan`, `ignore_changes` → `spec.ignoreChanges` (Terraform paths to field paths),
//! `create_before_destroy` → `replacePolicy: CreateBeforeDestroy`; what the controller does not
//! honour yet is reported.

use serde_json::{Value as Json, json};

use super::module::{Instance, Problem};
use kraken_value::PathStep;
use kraken_value::fields::FieldMap;

/// `lifecycle`: `prevent_destroy` → `deletionPolicy: Orphan`, `ignore_changes` →
/// `ignoreChanges`, `create_before_destroy` → `replacePolicy: CreateBeforeDestroy`; the rest
/// is reported until the controller honours it.
pub fn convert(inst: &Instance, fields: &FieldMap, spec: &mut Json) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (k, v) in &inst.lifecycle {
        match (k.as_str(), v.known()) {
            ("prevent_destroy", Some(Json::Bool(true))) => spec["deletionPolicy"] = json!("Orphan"),
            ("ignore_changes", Some(paths)) => {
                let (ignored, left_out) = ignore_changes(paths, fields, spec);
                if !ignored.is_empty() {
                    spec["ignoreChanges"] = json!(ignored);
                }
                for message in left_out {
                    problems.push(Problem {
                        at: inst.at.clone(),
                        subject: inst.address(),
                        message,
                        blocking: false,
                    });
                }
            }
            ("create_before_destroy", Some(Json::Bool(true))) => {
                spec["replacePolicy"] = json!("CreateBeforeDestroy");
            }
            ("prevent_destroy", Some(Json::Bool(false)))
            | ("create_before_destroy", Some(Json::Bool(false))) => {}
            (other, _) => problems.push(Problem {
                at: inst.at.clone(),
                subject: inst.address(),
                message: format!("lifecycle {other} is not converted yet"),
                blocking: false,
            }),
        }
    }
    problems
}

/// `ignore_changes` (its expression's text, `[tags, rule[0].port]` or `all`, or a list of
/// strings in the old quoted form) as `spec.ignoreChanges` paths, and what could not be kept.
/// `all` becomes every argument the spec sets.
fn ignore_changes(paths: &Json, fields: &FieldMap, spec: &Json) -> (Vec<String>, Vec<String>) {
    let listed: Vec<String> = match paths {
        Json::String(text) if text.trim() == "all" => {
            let mut all: Vec<String> = spec["forProvider"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            let from = spec["valuesFrom"].as_array().into_iter().flatten();
            all.extend(
                from.filter_map(|e| Some(e["path"].as_str()?.split('.').next()?.to_owned())),
            );
            all.sort();
            all.dedup();
            return (all, Vec::new());
        }
        Json::String(text) => text
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split(',')
            .map(|p| p.trim().trim_matches('"').to_owned())
            .filter(|p| !p.is_empty())
            .collect(),
        Json::Array(items) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        other => {
            return (
                Vec::new(),
                vec![format!(
                    "lifecycle ignore_changes {other} is not a list of attributes"
                )],
            );
        }
    };
    let mut kept = Vec::new();
    let mut problems = Vec::new();
    for path in listed {
        match tf_path(&path).and_then(|steps| fields.field_path(&steps, true)) {
            Some(dotted) => kept.push(dotted),
            None => problems.push(format!(
                "lifecycle ignore_changes: {path} is not an argument of this type; left out"
            )),
        }
    }
    (kept, problems)
}

/// A Terraform attribute path as written in `ignore_changes` (`tags["Name"]`, `rule[0].port`).
fn tf_path(text: &str) -> Option<Vec<PathStep>> {
    let mut steps = Vec::new();
    for part in text.split('.') {
        let (name, mut rest) = part.split_once('[').map_or((part, ""), |(n, r)| (n, r));
        if name.is_empty() {
            return None;
        }
        steps.push(PathStep::Attr(name.to_owned()));
        while !rest.is_empty() {
            let (inside, after) = rest.split_once(']')?;
            steps.push(match inside.trim().parse::<i64>() {
                Ok(i) => PathStep::Index(i),
                Err(_) => PathStep::Key(inside.trim().trim_matches('"').to_owned()),
            });
            rest = after.strip_prefix('[').unwrap_or(after);
        }
    }
    Some(steps)
}

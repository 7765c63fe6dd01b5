//! The readable form of a plan: one block per document, symbols as Terraform draws them
//! (`+` create, `~` update, `-/+` replace), a change per attribute, and a summary line.

use std::fmt::Write as _;

use serde_json::Value as Json;

use crate::managed::preview::{Item, ObjectPlan, Outcome, Report, action_word};
use crate::provider::lifecycle::Action;

const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const RED: &str = "\x1b[31m";
const DIM: &str = "\x1b[2m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

struct Paint(bool);

impl Paint {
    fn on(&self, code: &str, text: &str) -> String {
        if self.0 {
            format!("{code}{text}{RESET}")
        } else {
            text.to_owned()
        }
    }
}

/// The whole plan as text; `color` adds ANSI colours.
pub(super) fn text(report: &Report, color: bool) -> String {
    let paint = Paint(color);
    let mut out = String::new();
    for item in &report.items {
        item_text(&mut out, item, &paint);
    }
    let _ = writeln!(out, "{}", paint.on(BOLD, &summary(report)));
    out
}

fn title(item: &Item) -> String {
    match &item.subject {
        Some(s) => {
            let at = match &s.namespace {
                Some(ns) => format!("{ns}/{}", s.name),
                None => s.name.clone(),
            };
            format!("{} {at} ({})", s.kind, s.api_version)
        }
        None => item.origin.clone(),
    }
}

fn item_text(out: &mut String, item: &Item, paint: &Paint) {
    let title = title(item);
    match &item.outcome {
        Outcome::Planned(p) => planned_text(out, &title, p, paint),
        Outcome::AsIs(why) => {
            let _ = writeln!(
                out,
                "{}",
                paint.on(DIM, &format!("  = as-is   {title}: {why}"))
            );
        }
        Outcome::Failed(why) => {
            let line = format!("  ! error   {title} [{}]: {why}", item.origin);
            let _ = writeln!(out, "{}", paint.on(RED, &line));
        }
    }
}

fn planned_text(out: &mut String, title: &str, p: &ObjectPlan, paint: &Paint) {
    let (symbol, code) = match p.action {
        Action::Create => ("+", GREEN),
        Action::Update => ("~", YELLOW),
        Action::Replace => ("-/+", RED),
        Action::NoOp | Action::Delete => ("", DIM),
    };
    let head = format!("{symbol:>3} {:<7} {title}", action_word(p.action));
    let _ = writeln!(out, "{}", paint.on(code, &head));
    // A no-op lists nothing, except an ObserveOnly object's drift (reported, never changed).
    for c in &p.changes {
        let _ = writeln!(out, "{}", change_line(c, p.action, paint));
    }
    for v in &p.values_from {
        let s = |k: &str| v.get(k).and_then(Json::as_str).unwrap_or_default();
        let _ = writeln!(
            out,
            "        valuesFrom {} <- {} = {}",
            s("path"),
            s("from"),
            s("value")
        );
    }
    for n in &p.notes {
        let _ = writeln!(out, "        note: {n}");
    }
}

fn change_line(c: &Json, action: Action, paint: &Paint) -> String {
    let s = |k: &str| c.get(k).and_then(Json::as_str).unwrap_or_default();
    let replaces = c.get("forcesReplacement").and_then(Json::as_bool) == Some(true);
    let line = if action == Action::Create || c.get("before").is_none() {
        paint.on(GREEN, &format!("      + {} = {}", s("path"), s("after")))
    } else {
        paint.on(
            YELLOW,
            &format!("      ~ {}: {} -> {}", s("path"), s("before"), s("after")),
        )
    };
    if replaces {
        format!("{line} {}", paint.on(RED, "# forces replacement"))
    } else {
        line
    }
}

fn summary(report: &Report) -> String {
    let count =
        |f: &dyn Fn(&Outcome) -> bool| report.items.iter().filter(|i| f(&i.outcome)).count();
    let action = |a: Action| move |o: &Outcome| matches!(o, Outcome::Planned(p) if p.action == a);
    let unchanged = count(
        &|o| matches!(o, Outcome::Planned(p) if matches!(p.action, Action::NoOp | Action::Delete)),
    );
    let mut line = format!(
        "Plan: {} to create, {} to update, {} to replace, {unchanged} unchanged",
        count(&action(Action::Create)),
        count(&action(Action::Update)),
        count(&action(Action::Replace)),
    );
    let as_is = count(&|o| matches!(o, Outcome::AsIs(_)));
    if as_is > 0 {
        line.push_str(&format!("; {as_is} not planned (applied as-is)"));
    }
    let failed = count(&|o| matches!(o, Outcome::Failed(_)));
    if failed > 0 {
        line.push_str(&format!("; {failed} cannot be planned"));
    }
    line.push('.');
    line
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::managed::preview::Subject;

    fn item(action: Action, changes: Vec<Json>) -> Item {
        Item {
            origin: "m.yaml#1".into(),
            subject: Some(Subject {
                api_version: "fixture.tf.kraken.dev/v1alpha1".into(),
                kind: "Object".into(),
                namespace: Some("ns".into()),
                name: "web".into(),
            }),
            outcome: Outcome::Planned(ObjectPlan {
                action,
                changes,
                values_from: Vec::new(),
                notes: Vec::new(),
                outputs: None,
            }),
        }
    }

    #[test]
    fn draws_creates_updates_replacements_and_a_summary() {
        let report = Report {
            items: vec![
                item(
                    Action::Create,
                    vec![json!({"path": "spec.forProvider.name", "after": "\"web\""})],
                ),
                item(
                    Action::Replace,
                    vec![
                        json!({"path": "spec.forProvider.name", "before": "\"a\"", "after": "\"b\"",
                                "forcesReplacement": true}),
                    ],
                ),
                item(Action::NoOp, vec![]),
            ],
        };
        let text = text(&report, false);
        assert!(
            text.contains("  + create  Object ns/web (fixture.tf.kraken.dev/v1alpha1)"),
            "{text}"
        );
        assert!(
            text.contains("      + spec.forProvider.name = \"web\""),
            "{text}"
        );
        assert!(
            text.contains("      ~ spec.forProvider.name: \"a\" -> \"b\" # forces replacement"),
            "{text}"
        );
        assert!(text.contains("    no-op   Object ns/web"), "{text}");
        assert!(
            text.ends_with("Plan: 1 to create, 0 to update, 1 to replace, 1 unchanged.\n"),
            "{text}"
        );
        assert!(!text.contains('\x1b'));
        assert!(super::text(&report, true).contains(GREEN));
    }
}

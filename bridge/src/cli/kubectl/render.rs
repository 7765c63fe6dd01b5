//! Pure formatting for people: a plan as lines of changes, conditions, ages and tables the way
//! kubectl prints them. No client here, so everything is unit-tested on values.

use std::fmt::Write as _;

use serde_json::Value as Json;

use crate::managed::plan_status::{MAX_CHANGES, MAX_PLAN_BYTES, PendingPlan, SENSITIVE, UNKNOWN};

/// The most characters of a value the text view shows without `--full`.
const SHOWN: usize = 200;

/// How many hex digits of a plan id a table shows (a git-style short id).
pub(super) const SHORT_ID: usize = 8;

/// A condition as status holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Cond {
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl std::fmt::Display for Cond {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.status)?;
        if !self.reason.is_empty() {
            write!(f, " ({})", self.reason)?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

/// The condition `type_` of an object's `status`, if it has one.
pub(super) fn condition(status: &Json, type_: &str) -> Option<Cond> {
    let c = status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Json::as_str) == Some(type_))?;
    let s = |k: &str| {
        c.get(k)
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Some(Cond {
        status: s("status"),
        reason: s("reason"),
        message: s("message"),
    })
}

pub(super) fn short_id(id: &str) -> &str {
    id.get(..SHORT_ID).unwrap_or(id)
}

/// The plan as a person reads it: its id and action, one line per change with a marker
/// (`+` set, `~` changed, `-/+` forces a replacement), the values before → after, and what is
/// known only after apply; then a stale approval, if any. Values over [`SHOWN`] characters are
/// cut for the terminal, saying so, unless `full`.
pub(super) fn plan_text(plan: &PendingPlan, full: bool) -> String {
    let mut out = format!("plan {} ({})\n", plan.id, plan.action);
    if plan.changes.is_empty() {
        out.push_str("  (no attribute-level changes listed)\n");
    }
    for c in &plan.changes {
        let marker = match (&c.before, c.forces_replacement) {
            (_, true) => "-/+",
            (None, false) => "  +",
            (Some(_), false) => "  ~",
        };
        let shown = |v: &str| {
            if full || v.chars().count() <= SHOWN {
                v.to_owned()
            } else {
                let head: String = v.chars().take(SHOWN).collect();
                format!(
                    "{head}… ({} characters; --full shows it whole)",
                    v.chars().count()
                )
            }
        };
        let value = match &c.before {
            Some(before) => format!("{} → {}", shown(before), shown(&c.after)),
            None => shown(&c.after),
        };
        let _ = write!(out, "{marker} {}: {value}", c.path);
        if c.forces_replacement {
            out.push_str("   # forces replacement");
        }
        if c.unknown && c.after != UNKNOWN && c.after != SENSITIVE {
            out.push_str("   # partly known after apply");
        }
        out.push('\n');
    }
    if plan.omitted > 0 {
        let _ = writeln!(
            out,
            "  … and {} more changes not listed (status.plan lists at most {} changes and {} KiB \
             of values): this plan cannot be shown whole, do not approve it unseen",
            plan.omitted,
            MAX_CHANGES,
            MAX_PLAN_BYTES / 1024
        );
    }
    if let Some(stale) = &plan.stale_approval {
        let _ = writeln!(
            out,
            "stale approval: plan {} is stale: {}",
            stale.id, stale.why
        );
    }
    out
}

/// How long ago, as kubectl's AGE column says it: `45s`, `3m12s`, `17m`, `5h3m`, `20h`,
/// `3d4h`, `12d`, `2y`.
pub(super) fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    match s {
        _ if s < 120 => format!("{s}s"),
        _ if s < 600 => format!("{m}m{}s", s % 60),
        _ if s < 3 * 3600 => format!("{m}m"),
        _ if s < 8 * 3600 => format!("{h}h{}m", m % 60),
        _ if s < 2 * 86_400 => format!("{h}h"),
        _ if s < 8 * 86_400 => format!("{d}d{}h", h % 24),
        _ if s < 2 * 365 * 86_400 => format!("{d}d"),
        _ => format!("{}y", d / 365),
    }
}

/// Left-aligned columns three spaces apart, as kubectl prints tables.
pub(super) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let head: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let mut out = String::new();
    for row in std::iter::once(&head).chain(rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}   ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::managed::plan_status::{Change, StaleApproval};

    fn change(path: &str, before: Option<&str>, after: &str) -> Change {
        Change {
            path: path.into(),
            before: before.map(str::to_owned),
            after: after.into(),
            unknown: false,
            forces_replacement: false,
        }
    }

    #[test]
    fn a_plan_reads_as_changes_with_markers() {
        let plan = PendingPlan {
            id: "3f0c9a61d2b7e845".into(),
            action: "Replace".into(),
            changes: vec![
                change("spec.forProvider.size", Some("1"), "3"),
                Change {
                    forces_replacement: true,
                    ..change("spec.forProvider.zone", Some("\"a\""), "\"b\"")
                },
                Change {
                    unknown: true,
                    ..change("status.atProvider.id", Some("\"x\""), UNKNOWN)
                },
                Change {
                    unknown: true,
                    ..change("status.atProvider.tags", None, "{\"a\":1}")
                },
                Change {
                    unknown: true,
                    ..change("status.atProvider.token", None, SENSITIVE)
                },
            ],
            omitted: 2,
            stale_approval: Some(StaleApproval {
                id: "9a1e".into(),
                why: "the spec changed (generation 4 → 5)".into(),
            }),
        };
        assert_eq!(
            plan_text(&plan, true),
            "plan 3f0c9a61d2b7e845 (Replace)\n  \
             ~ spec.forProvider.size: 1 → 3\n\
             -/+ spec.forProvider.zone: \"a\" → \"b\"   # forces replacement\n  \
             ~ status.atProvider.id: \"x\" → (known after apply)\n  \
             + status.atProvider.tags: {\"a\":1}   # partly known after apply\n  \
             + status.atProvider.token: (sensitive)\n  \
             … and 2 more changes not listed (status.plan lists at most 256 changes and 512 KiB \
             of values): this plan cannot be shown whole, do not approve it unseen\n\
             stale approval: plan 9a1e is stale: the spec changed (generation 4 → 5)\n"
        );
    }

    #[test]
    fn conditions_ages_and_tables() {
        let status = json!({"conditions": [
            {"type": "Ready", "status": "False", "reason": "Creating", "message": "waits"},
            {"type": "Synced", "status": "True"}]});
        let ready = condition(&status, "Ready");
        assert_eq!(
            ready.map(|c| c.to_string()).as_deref(),
            Some("False (Creating): waits")
        );
        assert_eq!(
            condition(&status, "Synced")
                .map(|c| c.to_string())
                .as_deref(),
            Some("True")
        );
        assert_eq!(condition(&Json::Null, "Ready"), None);
        let ages: Vec<String> = [
            -5,
            45,
            192,
            1020,
            5 * 3600 + 180,
            20 * 3600,
            3 * 86_400 + 4 * 3600,
            12 * 86_400,
            800 * 86_400,
        ]
        .into_iter()
        .map(age)
        .collect();
        assert_eq!(
            ages,
            [
                "0s", "45s", "3m12s", "17m", "5h3m", "20h", "3d4h", "12d", "2y"
            ]
        );
        assert_eq!(short_id("0123456789abcdef"), "01234567");
        assert_eq!(short_id("abc"), "abc");
        let t = table(
            &["NAME", "READY"],
            &[vec!["a-long-name".into(), "True".into()]],
        );
        assert_eq!(t, "NAME          READY\na-long-name   True\n");
    }
}

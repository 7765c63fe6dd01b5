//! The pure decisions of a pass, apart from the I/O that gathers their inputs, so every branch
//! of the controller can be checked in a table: where the pass learns what exists
//! ([`origin`]), whether an update puts back drift ([`drifted`]), what it does about a plan
//! ([`act`]), whether it waits for an approval ([`gate`]), and what a deletion does
//! ([`on_delete`]).

use super::spec::PlanPolicy;
use kraken_provider::ImportBy;
use kraken_provider::lifecycle::Action as PlanAction;

/// Where a pass learns what exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Stored state: refresh it from the provider. `pending` is a create fence the stored state
    /// did not complete: a recreate (the stored object had vanished) cut off before its state
    /// was saved, by a crash or an API server outage. If the stored object is gone, what that
    /// create made must be looked for before anything is created again.
    Refresh { pending: Option<String> },
    /// No state, and `importId` or `importIdentity` names an object: adopt it.
    Import(ImportBy),
    /// No state, and a create fence no stored state completed: look for what that create made.
    Recover(String),
    /// Nothing exists yet.
    Nothing,
}

/// What exists, from the stored state (`has_state`), what adopts an object (`import`:
/// `spec.importIdentity` or `spec.importId`), the create fence on the
/// object (`fence`) and the attempt the stored state completed (`completed`).
pub fn origin(
    has_state: bool,
    import: Option<ImportBy>,
    fence: Option<&str>,
    completed: Option<&str>,
) -> Origin {
    let open = fence.filter(|a| Some(*a) != completed).map(str::to_owned);
    if has_state {
        return Origin::Refresh { pending: open };
    }
    if let Some(by) = import {
        return Origin::Import(by);
    }
    match open {
        Some(attempt) => Origin::Recover(attempt),
        None => Origin::Nothing,
    }
}

/// What a pass does once the provider has planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// ObserveOnly: never act; `drifted` when the object differs from spec.
    Observe { drifted: bool },
    /// Nothing to change: persist refreshed state if it changed, report success. (A planned
    /// delete is never carried out by a live object's pass.)
    Settle,
    /// Create, fenced; `recreate` when the object was deleted outside Kraken.
    Create { recreate: bool },
    /// Update in place; `drift` when the object changed outside Kraken ([`Facts::drifted`]).
    Update { drift: bool },
    /// Replace: destroy, then create; `create_first` (`replacePolicy: CreateBeforeDestroy`):
    /// create the new object, then destroy the old one (kept meanwhile as deposed).
    Replace { create_first: bool },
    /// A replacement is needed and `replacePolicy: Refuse` forbids it.
    RefuseReplace,
}

/// What the pass knows besides the plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    pub observe_only: bool,
    pub refuse_replace: bool,
    /// `replacePolicy: CreateBeforeDestroy`.
    pub create_first: bool,
    /// The object was deleted outside Kraken.
    pub recreate: bool,
    /// The external object changed outside Kraken: the spec is unchanged since the last pass
    /// (`status.observedGeneration` is the generation, no spec change held) and the refresh
    /// found the object different from the stored state. An update without this comes from the
    /// spec or from a resolved input (`valuesFrom`, a Secret), not from drift.
    pub drifted: bool,
}

/// What the previous pass left held for approval, as far as drift is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    Nothing,
    /// Drift waits to be put back (`DriftPending`).
    Drift,
    /// A change of the spec or an input, or a delete, waits.
    Change,
}

/// Whether the object drifted ([`Facts::drifted`]): the refresh found it different from the
/// stored state (`moved`), or the drift held before is still what waits (the hold stored the
/// refreshed state, so the next refresh finds nothing new); and the spec is as last observed
/// (`spec_observed`: `status.observedGeneration` is the generation) with no change held.
pub fn drifted(moved: bool, spec_observed: bool, held: Held) -> bool {
    (moved || held == Held::Drift) && spec_observed && held != Held::Change
}

/// The step a plan of `action` calls for.
pub fn act(action: PlanAction, f: Facts) -> Act {
    if f.observe_only {
        return Act::Observe {
            drifted: action != PlanAction::NoOp,
        };
    }
    match action {
        PlanAction::NoOp | PlanAction::Delete => Act::Settle,
        PlanAction::Create => Act::Create {
            recreate: f.recreate,
        },
        PlanAction::Update => Act::Update { drift: f.drifted },
        PlanAction::Replace if f.refuse_replace => Act::RefuseReplace,
        PlanAction::Replace => Act::Replace {
            create_first: f.create_first,
        },
    }
}

/// Whether a change goes ahead under `spec.planPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The policy does not hold this step: carry it out (no plan is shown).
    Go,
    /// The policy holds it and its plan is approved: carry it out.
    Approved,
    /// The policy holds it and its plan is not approved: change nothing, show the plan.
    Hold,
}

/// The gate for step `act` under `policy`, `policies_changed` when the spec's policy fields
/// (`deletionPolicy`, `managementPolicy`, `replacePolicy`, `ignoreChanges`) differ from those in
/// force; `approved` when the approval annotation names the id of the plan just made. Under
/// `Manual` a change of the policy fields waits like a change of the object: each of them can
/// release the object or stop a held change. Deletes never reach here (a live object's pass
/// settles them).
pub fn gate(policy: PlanPolicy, (act, policies_changed): (Act, bool), approved: bool) -> Gate {
    let changes = policies_changed
        || matches!(
            act,
            Act::Create { .. } | Act::Update { .. } | Act::Replace { .. }
        );
    let held = match policy {
        PlanPolicy::Auto => false,
        PlanPolicy::Manual => changes,
        PlanPolicy::ManualForDestructive => matches!(act, Act::Replace { .. }),
    };
    match (held, approved) {
        (false, _) => Gate::Go,
        (true, true) => Gate::Approved,
        (true, false) => Gate::Hold,
    }
}

/// The gate for destroying the external object of a deleted resource: `Manual` and
/// `ManualForDestructive` hold it until its plan is approved.
pub fn gate_delete(policy: PlanPolicy, approved: bool) -> Gate {
    match (policy, approved) {
        (PlanPolicy::Auto, _) => Gate::Go,
        (_, true) => Gate::Approved,
        (_, false) => Gate::Hold,
    }
}

/// What a deletion does once the finalizer is still on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDelete {
    /// Other objects still read the outputs: wait for them.
    Wait,
    /// Release the external object without destroying it.
    Orphan,
    Destroy,
}

/// The deletion step, from whether others still read the object's outputs, `deletionPolicy:
/// Orphan` and `managementPolicy: ObserveOnly` (which never destroys).
pub fn on_delete(readers_waiting: bool, orphan_policy: bool, observe_only: bool) -> OnDelete {
    if readers_waiting {
        OnDelete::Wait
    } else if orphan_policy || observe_only {
        OnDelete::Orphan
    } else {
        OnDelete::Destroy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        let cases = [
            (
                "stored state wins",
                (true, Some("x"), Some("t1"), Some("t1")),
                Origin::Refresh { pending: None },
            ),
            (
                "stored state and a recreate it did not complete",
                (true, None, Some("t2"), Some("t1")),
                Origin::Refresh {
                    pending: Some("t2".into()),
                },
            ),
            (
                "stored state from before fences were completed",
                (true, Some("x"), Some("t1"), None),
                Origin::Refresh {
                    pending: Some("t1".into()),
                },
            ),
            (
                "import",
                (false, Some("x"), Some("t1"), None),
                Origin::Import(ImportBy::Id("x".into())),
            ),
            (
                "fence open",
                (false, None, Some("t1"), None),
                Origin::Recover("t1".into()),
            ),
            (
                "fence completed",
                (false, None, Some("t1"), Some("t1")),
                Origin::Nothing,
            ),
            (
                "older attempt completed",
                (false, None, Some("t2"), Some("t1")),
                Origin::Recover("t2".into()),
            ),
            ("nothing", (false, None, None, None), Origin::Nothing),
        ];
        for (name, (state, import, fence, completed), want) in cases {
            let import = import.map(|id: &str| ImportBy::Id(id.into()));
            assert_eq!(origin(state, import, fence, completed), want, "{name}");
        }
    }

    #[test]
    fn drift_is_the_object_moving_not_the_inputs() {
        let cases = [
            ("refresh moved", (true, true, Held::Nothing), true),
            (
                "an input moved (object as stored)",
                (false, true, Held::Nothing),
                false,
            ),
            ("the spec moved", (true, false, Held::Nothing), false),
            (
                "held drift, stored by its hold",
                (false, true, Held::Drift),
                true,
            ),
            (
                "a held spec change is no drift",
                (true, true, Held::Change),
                false,
            ),
        ];
        for (name, (moved, observed, held), want) in cases {
            assert_eq!(drifted(moved, observed, held), want, "{name}");
        }
    }

    #[test]
    fn acts() {
        let f = Facts::default();
        let observe = Facts {
            observe_only: true,
            ..f
        };
        let refuse = Facts {
            refuse_replace: true,
            ..f
        };
        let recreate = Facts {
            recreate: true,
            ..f
        };
        let create_first = Facts {
            create_first: true,
            ..f
        };
        let refuse_first = Facts {
            refuse_replace: true,
            ..create_first
        };
        let unchanged = Facts { drifted: true, ..f };
        use PlanAction as P;
        let cases = [
            (
                "observe, in sync",
                P::NoOp,
                observe,
                Act::Observe { drifted: false },
            ),
            (
                "observe, drifted",
                P::Update,
                observe,
                Act::Observe { drifted: true },
            ),
            (
                "observe never replaces",
                P::Replace,
                observe,
                Act::Observe { drifted: true },
            ),
            ("no-op", P::NoOp, f, Act::Settle),
            ("never deletes a live object", P::Delete, f, Act::Settle),
            ("create", P::Create, f, Act::Create { recreate: false }),
            (
                "recreate",
                P::Create,
                recreate,
                Act::Create { recreate: true },
            ),
            ("spec changed", P::Update, f, Act::Update { drift: false }),
            ("drift", P::Update, unchanged, Act::Update { drift: true }),
            (
                "replace",
                P::Replace,
                f,
                Act::Replace {
                    create_first: false,
                },
            ),
            (
                "create before destroy",
                P::Replace,
                create_first,
                Act::Replace { create_first: true },
            ),
            (
                "create first only replaces",
                P::Update,
                create_first,
                Act::Update { drift: false },
            ),
            ("refused", P::Replace, refuse, Act::RefuseReplace),
            (
                "refused either way",
                P::Replace,
                refuse_first,
                Act::RefuseReplace,
            ),
        ];
        for (name, action, facts, want) in cases {
            assert_eq!(act(action, facts), want, "{name}");
        }
    }

    const REPLACE: Act = Act::Replace { create_first: true };

    #[test]
    fn gates() {
        use PlanPolicy::{Auto, Manual, ManualForDestructive as Destructive};
        let update = Act::Update { drift: false };
        let create = Act::Create { recreate: false };
        let cases = [
            ("auto applies", Auto, REPLACE, false, Gate::Go),
            ("manual holds a create", Manual, create, false, Gate::Hold),
            ("manual holds an update", Manual, update, false, Gate::Hold),
            (
                "manual holds drift",
                Manual,
                Act::Update { drift: true },
                false,
                Gate::Hold,
            ),
            ("manual holds a replace", Manual, REPLACE, false, Gate::Hold),
            ("approved", Manual, update, true, Gate::Approved),
            ("nothing to hold", Manual, Act::Settle, false, Gate::Go),
            (
                "observing holds nothing",
                Manual,
                Act::Observe { drifted: true },
                false,
                Gate::Go,
            ),
            (
                "refusal is not held",
                Manual,
                Act::RefuseReplace,
                false,
                Gate::Go,
            ),
            (
                "destructive applies updates",
                Destructive,
                update,
                false,
                Gate::Go,
            ),
            (
                "destructive applies creates",
                Destructive,
                create,
                false,
                Gate::Go,
            ),
            (
                "destructive holds replace",
                Destructive,
                REPLACE,
                false,
                Gate::Hold,
            ),
            (
                "destructive approved",
                Destructive,
                REPLACE,
                true,
                Gate::Approved,
            ),
        ];
        for (name, policy, act, approved, want) in cases {
            assert_eq!(gate(policy, (act, false), approved), want, "{name}");
        }
        // A change of the policy fields: held under Manual even when the object would not
        // change; the other policies let it through.
        let settle = (Act::Settle, true);
        assert_eq!(gate(Manual, settle, false), Gate::Hold);
        assert_eq!(gate(Manual, settle, true), Gate::Approved);
        assert_eq!(
            gate(Manual, (Act::Observe { drifted: false }, true), false),
            Gate::Hold
        );
        assert_eq!(gate(Destructive, settle, false), Gate::Go);
        assert_eq!(gate(PlanPolicy::Auto, settle, false), Gate::Go);
    }

    #[test]
    fn delete_gates() {
        use PlanPolicy::{Auto, Manual, ManualForDestructive as Destructive};
        assert_eq!(gate_delete(Auto, false), Gate::Go);
        assert_eq!(gate_delete(Manual, false), Gate::Hold);
        assert_eq!(gate_delete(Destructive, false), Gate::Hold);
        assert_eq!(gate_delete(Manual, true), Gate::Approved);
        assert_eq!(gate_delete(Destructive, true), Gate::Approved);
    }

    #[test]
    fn deletions() {
        let cases = [
            ((true, false, false), OnDelete::Wait),
            ((true, true, true), OnDelete::Wait),
            ((false, true, false), OnDelete::Orphan),
            ((false, false, true), OnDelete::Orphan),
            ((false, false, false), OnDelete::Destroy),
        ];
        for ((readers, orphan, observe), want) in cases {
            assert_eq!(on_delete(readers, orphan, observe), want);
        }
    }
}

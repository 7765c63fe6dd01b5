//! Step: a create-before-destroy replacement (`replacePolicy: CreateBeforeDestroy`, Terraform's
//! `lifecycle { create_before_destroy = true }`) and the deposed object it leaves.
//!
//! The order, each step stored before the next starts, so a crash anywhere leaves nothing
//! behind unknown and nothing made twice:
//! 1. the old object moves from the state Secret's state to its deposed entry (the state is
//!    empty now, the old object still known);
//! 2. the new object is created like any create, behind the create fence: after a crash the
//!    fence's recovery finds it, never taking the deposed object for it (its id is excluded);
//! 3. the new object's state is stored, the deposed entry kept;
//! 4. the deposed object is destroyed, then its entry dropped.
//!
//! Any pass that leaves the object as its spec says finishes step 4 when a deposed object is
//! still stored (a failed or interrupted destroy is retried like any failure); deleting the
//! resource destroys it too (or orphans it with `deletionPolicy: Orphan`).

use super::error::{Error, Result};
use super::target::{Saved, Target, destroy_object, fail_on_errors, plan_paths};
use super::write::Run;
use kraken_kit::conditions::{READY, Set, reason};
use kraken_provider::DiagnosticsExt as _;
use kraken_provider::lifecycle::{self, Plan};
use kraken_value::Value;

/// The object a pass left in place: its state as stored, and the create attempt it completed.
pub(super) struct Current {
    pub(super) state: Value,
    pub(super) private: Vec<u8>,
    pub(super) completed: Option<String>,
}

impl Current {
    /// No object: the resource is being deleted and its own object is destroyed.
    pub(super) fn gone() -> Self {
        Self {
            state: Value::Null,
            private: Vec::new(),
            completed: None,
        }
    }
}

/// Step 1 ([`super::apply`] creates the replacement next, then 3): stores the object `plan`
/// replaces as deposed, its state emptied. A deposed object left by an earlier replacement is
/// destroyed first: one is stored at a time.
pub(super) async fn depose(
    run: &mut Run<'_>,
    t: &Target<'_>,
    plan: &Plan,
    completed: Option<String>,
) -> Result<()> {
    let prior = Current {
        state: plan.prior_state.clone(),
        private: plan.prior_private.clone(),
        completed: completed.clone(),
    };
    destroy_deposed(run, t, &prior).await?;
    let paths = plan_paths(plan, t.fields()).join(", ");
    run.set_conditions(&[Set::new(
        READY,
        false,
        reason::CREATING,
        format!("replacing, the new one first: {paths} changed"),
    )]);
    run.flush_status().await?;
    run.set_deposed(t.depose(&plan.prior_state, &plan.prior_private)?);
    Saved::default()
        .write(run, t, &Value::Null, &[], completed)
        .await
}

/// Step 4: destroys the deposed object, if one is stored, and drops its entry; `current` is
/// what the state Secret keeps beside it. Gone already (deleted outside Kraken, or an
/// interrupted destroy got through) is destroyed too. A failed destroy keeps the entry (with
/// what the provider says is left) for the next pass to retry.
pub(super) async fn destroy_deposed(
    run: &mut Run<'_>,
    t: &Target<'_>,
    current: &Current,
) -> Result<()> {
    let Some(deposed) = run.deposed() else {
        return Ok(());
    };
    let id = deposed.id().unwrap_or_else(|| "without an id".to_owned());
    let old = t.restore_deposed(&deposed).await?;
    let read = lifecycle::read(t.host(), t.type_name, &old.state, &old.private)
        .await
        .map_err(|e| t.lifecycle_err("read the replaced", e))?;
    if !read.new_state.is_null() {
        let applied = destroy_object(run, t, &read.new_state, &read.private).await?;
        if !applied.new_state.is_null() || applied.diagnostics.has_errors() {
            if !applied.new_state.is_null() {
                run.set_deposed(t.depose(&applied.new_state, &applied.private)?);
            }
            keep(run, t, current).await?;
            fail_on_errors(run, t, &applied).await?;
            return Err(Error::Provider(format!(
                "destroying the replaced {} {id} left it in place",
                t.type_name
            )));
        }
    }
    run.set_deposed(None);
    keep(run, t, current).await?;
    let note = format!("destroyed the {} {id} this one replaced", t.type_name);
    run.event(false, "DeposedDestroyed", note).await;
    Ok(())
}

/// Stores `current` with the run's deposed entry as it is now.
async fn keep(run: &Run<'_>, t: &Target<'_>, current: &Current) -> Result<()> {
    Saved::default()
        .write(
            run,
            t,
            &current.state,
            &current.private,
            current.completed.clone(),
        )
        .await
}

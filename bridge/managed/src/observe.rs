//! Step: establish what exists — refresh the stored state, adopt the object `importId` names,
//! or find the object an interrupted create made (the create fence).

use super::CREATE_ATTEMPT_ANNOTATION;
use super::decide::{self, Origin};
use super::error::{Error, Result};
pub(super) use super::recover::recover;
use super::spec::ManagedSpec;
use super::target::{Saved, Target};
use super::write::Run;
use kraken_provider::ImportBy;
use kraken_provider::lifecycle::{self, Applied};
use kraken_value::Value;

/// What exists now, as the pass found it.
pub(super) struct Observed {
    pub(super) state: Value,
    pub(super) private: Vec<u8>,
    /// The object was deleted outside Kraken and must be created again.
    pub(super) recreate: bool,
    /// The refresh found the object different from the stored state: it changed outside
    /// Kraken (or the provider reports it differently now).
    pub(super) moved: bool,
    /// The create attempt the stored state completed.
    pub(super) completed: Option<String>,
    pub(super) saved: Saved,
}

/// Step: establish what exists — restore the stored state and refresh it (when the stored
/// object is gone and a later create fence is open, find what that create made first), or (no
/// state yet) adopt the object `importId` names, or find the object an interrupted create made.
pub(super) async fn observe(
    run: &mut Run<'_>,
    t: &Target<'_>,
    spec: &ManagedSpec,
    config: &Value,
) -> Result<Observed> {
    let restored = t.restore(run.load_state().await?).await?;
    let completed = restored
        .stored
        .as_ref()
        .and_then(|s| s.create_attempt.clone());
    let mut found = Observed {
        state: Value::Null,
        private: Vec::new(),
        recreate: false,
        moved: false,
        completed: completed.clone(),
        saved: Saved::from(&restored),
    };
    let fence = run.annotation(CREATE_ATTEMPT_ANNOTATION).map(str::to_owned);
    let replaced = run.deposed().and_then(|d| d.id());
    let tags = (owner(run, spec), replaced.as_deref());
    let origin = decide::origin(
        !restored.state.is_null(),
        spec.import(),
        fence.as_deref(),
        completed.as_deref(),
    );
    match origin {
        Origin::Refresh { pending } => {
            let read = lifecycle::read(t.host(), t.type_name, &restored.state, &restored.private)
                .await
                .map_err(|e| t.lifecycle_err("read", e))?;
            if !read.new_state.is_null() {
                found.moved = read.new_state != restored.state;
                (found.state, found.private) = (read.new_state, read.private);
            } else if spec.observe_only() {
                return Err(Error::ExternalObjectMissing(format!(
                    "the observed {} no longer exists",
                    t.type_name
                )));
            } else if let Some(attempt) = pending
                && let Some(recovered) = recover(t, spec, config, tags, &attempt).await?
            {
                // The recreate that followed the vanishing made it; its state was never saved.
                adopt_recovered(run, t, recovered, attempt, &mut found).await?;
            } else {
                found.recreate = true;
            }
        }
        Origin::Import(by) => import(run, t, &by, &mut found).await?,
        Origin::Recover(attempt) => {
            if let Some(recovered) = recover(t, spec, config, tags, &attempt).await? {
                adopt_recovered(run, t, recovered, attempt, &mut found).await?;
            }
        }
        Origin::Nothing => {}
    }
    Ok(found)
}

/// The uid the owner tag of the object carries, when Kraken created it (no `importId`).
pub(super) fn owner<'r>(run: &'r Run<'_>, spec: &ManagedSpec) -> Option<&'r str> {
    run.obj
        .metadata
        .uid
        .as_deref()
        .filter(|_| !spec.adopts())
        .filter(|_| run.annotation(super::target::OWNER_TAG_ANNOTATION) != Some("off"))
}

/// Adopts the object `importId` or `importIdentity` names: the finalizer first, then its state.
async fn import(
    run: &mut Run<'_>,
    t: &Target<'_>,
    by: &ImportBy,
    found: &mut Observed,
) -> Result<()> {
    let imported = lifecycle::import(t.host(), t.type_name, by)
        .await
        .map_err(|e| t.lifecycle_err("import", e))?;
    if imported.new_state.is_null() {
        let named = match by {
            ImportBy::Id(id) => format!("with import id {id:?}"),
            ImportBy::Identity(_) => format!("with the {by}"),
        };
        return Err(Error::Provider(format!(
            "no {} {named} exists",
            t.type_name
        )));
    }
    run.set_finalizer(true).await?;
    let completed = found.completed.clone();
    found
        .saved
        .write(run, t, &imported.new_state, &imported.private, completed)
        .await?;
    let note = format!("adopted the existing {} {by}", t.type_name);
    run.event(false, "Imported", note).await;
    (found.state, found.private) = (imported.new_state, imported.private);
    Ok(())
}

/// Adopts what the interrupted create `attempt` made, recording the attempt as completed.
async fn adopt_recovered(
    run: &mut Run<'_>,
    t: &Target<'_>,
    recovered: Applied,
    attempt: String,
    found: &mut Observed,
) -> Result<()> {
    found
        .saved
        .write(
            run,
            t,
            &recovered.new_state,
            &recovered.private,
            Some(attempt.clone()),
        )
        .await?;
    let note = format!(
        "found the {} an interrupted create (at {attempt}) had made, and adopted it",
        t.type_name
    );
    found.completed = Some(attempt);
    run.event(false, "Recovered", note).await;
    (found.state, found.private) = (recovered.new_state, recovered.private);
    Ok(())
}

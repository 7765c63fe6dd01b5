//! The steps up to the plan — configuration → state → import/read → plan — as one code path
//! for the reconcile and for `kraken plan` ([`super::preview`]): establish what exists (restore
//! the stored state and refresh it, adopt the object `importId` names, or find the object an
//! interrupted create made: the create fence), then plan against it.
//!
//! What differs between the two is a [`Pass`]: where the configuration and the stored state
//! come from, and what adopting an object leaves behind. The reconcile's pass
//! ([`super::write::Run`], in [`super::apply`]) puts the finalizer on, writes the state Secret
//! and Events; `kraken plan`'s reads only and writes nothing.

use super::CREATE_ATTEMPT_ANNOTATION;
use super::decide::{self, Origin};
use super::error::{Error, Result};
pub(super) use super::recover::recover;
use super::spec::ManagedSpec;
use super::state::Stored;
use super::target::{OWNER_TAG_ANNOTATION, Saved, Target};
use kraken_provider::ImportBy;
use kraken_provider::lifecycle::{self, Applied, Plan};
use kraken_source::Configured;
use kraken_value::Value;

/// One pass over one object, up to its plan: where it reads, and what it writes when it adopts
/// an object.
pub(crate) trait Pass: Send {
    /// The configured provider of the object's ProviderConfig.
    fn provider(&self, spec: &ManagedSpec) -> impl Future<Output = Result<Configured>> + Send;

    /// The resource's configuration value, with the owner tag Kraken would add; `None` while
    /// its inputs are not resolved (the pass waits).
    fn configuration(
        &mut self,
        t: &Target<'_>,
        spec: &ManagedSpec,
    ) -> impl Future<Output = Result<Option<Value>>> + Send;

    /// What the object's state Secret holds, if it is the object's.
    fn load_state(&mut self) -> impl Future<Output = Result<Option<Stored>>> + Send;

    /// An annotation of the object as it is in the cluster (none before it exists).
    fn annotation(&self, key: &str) -> Option<&str>;

    /// The object's uid in the cluster (none before it exists).
    fn uid(&self) -> Option<&str>;

    /// The object's namespace and name.
    fn who(&self) -> (&str, &str);

    /// What administrators set on the object's namespace (whether it may adopt untagged
    /// objects of a type: [`super::consent`]).
    fn namespace_policy(&self) -> impl Future<Output = crate::floor::NamespacePolicy> + Send;

    /// Whether the create fence `fence` is one Kraken sealed for this object
    /// ([`super::fence`]).
    fn fence_holds(&self, fence: &str) -> bool;

    /// Takes the object an import or a recovery found (`found` holds it) as this object's.
    fn adopt(
        &mut self,
        t: &Target<'_>,
        how: Adoption<'_>,
        found: &mut Observed,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// How an object came to be adopted.
pub(crate) enum Adoption<'a> {
    /// `importId` or `importIdentity` named it.
    Imported(&'a ImportBy),
    /// The interrupted create at this time made it.
    Recovered(&'a str),
}

/// What exists now, as the pass found it.
pub(crate) struct Observed {
    pub(crate) state: Value,
    pub(crate) private: Vec<u8>,
    /// The object was deleted outside Kraken and must be created again.
    pub(crate) recreate: bool,
    /// The refresh found the object different from the stored state: it changed outside
    /// Kraken (or the provider reports it differently now).
    pub(crate) moved: bool,
    /// The create attempt the stored state completed.
    pub(crate) completed: Option<String>,
    pub(crate) saved: Saved,
}

/// What the steps up to the plan found and planned.
pub(crate) struct Planned {
    /// The configuration planned with (`spec.ignoreChanges` taken from the observed state).
    pub(crate) config: Value,
    pub(crate) observed: Observed,
    pub(crate) plan: Plan,
}

/// The steps up to the plan: configuration → state → import/read → plan. `None` while the
/// configuration's inputs are not resolved.
pub(crate) async fn up_to_plan(
    pass: &mut impl Pass,
    t: &Target<'_>,
    spec: &ManagedSpec,
) -> Result<Option<Planned>> {
    let Some(config) = pass.configuration(t, spec).await? else {
        return Ok(None);
    };
    let observed = observe(pass, t, spec, &config).await?;
    let config =
        super::ignore::keep_prior(config, &observed.state, t.fields(), &spec.ignore_changes)
            .map_err(Error::InvalidSpec)?;
    let plan = lifecycle::plan(
        t.host(),
        t.type_name,
        &observed.state,
        &observed.private,
        &config,
    )
    .await
    .map_err(|e| t.lifecycle_err("plan", e))?;
    Ok(Some(Planned {
        config,
        observed,
        plan,
    }))
}

/// Step: establish what exists — restore the stored state and refresh it (when the stored
/// object is gone and a later create fence is open, find what that create made first), or (no
/// state yet) adopt the object `importId` names, or find the object an interrupted create made.
async fn observe(
    pass: &mut impl Pass,
    t: &Target<'_>,
    spec: &ManagedSpec,
    config: &Value,
) -> Result<Observed> {
    let restored = t.restore(pass.load_state().await?).await?;
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
    let fence = pass
        .annotation(CREATE_ATTEMPT_ANNOTATION)
        .map(str::to_owned);
    let replaced = restored
        .stored
        .as_ref()
        .and_then(|s| s.deposed.as_ref())
        .and_then(|d| d.id());
    let owner = owner(pass, spec).map(str::to_owned);
    let tags = (owner.as_deref(), replaced.as_deref());
    // Only a fence Kraken sealed is looked for by name: a planted one could name anything.
    let sealed = fence.as_deref().is_some_and(|f| pass.fence_holds(f));
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
                && let Some(recovered) = recover(t, spec, config, tags, (&attempt, sealed)).await?
            {
                // The recreate that followed the vanishing made it; its state was never saved.
                adopt_recovered(pass, t, recovered, attempt, &mut found).await?;
            } else {
                found.recreate = true;
            }
        }
        Origin::Import(by) => import(pass, t, &by, &mut found).await?,
        Origin::Recover(attempt) => {
            if let Some(recovered) = recover(t, spec, config, tags, (&attempt, sealed)).await? {
                adopt_recovered(pass, t, recovered, attempt, &mut found).await?;
            }
        }
        Origin::Nothing => {}
    }
    Ok(found)
}

/// Imports the object `importId` or `importIdentity` names, and hands it to the pass to adopt.
async fn import(
    pass: &mut impl Pass,
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
    let policy = pass.namespace_policy().await;
    super::consent::check(
        &imported.new_state,
        t.type_name,
        pass.who(),
        (t.takes_tags(), &policy),
    )
    .map_err(Error::AdoptionRefused)?;
    (found.state, found.private) = (imported.new_state, imported.private);
    pass.adopt(t, Adoption::Imported(by), found).await
}

/// Hands what the interrupted create `attempt` made to the pass to adopt, recording the
/// attempt as the one its state completes.
async fn adopt_recovered(
    pass: &mut impl Pass,
    t: &Target<'_>,
    recovered: Applied,
    attempt: String,
    found: &mut Observed,
) -> Result<()> {
    (found.state, found.private) = (recovered.new_state, recovered.private);
    found.completed = Some(attempt.clone());
    pass.adopt(t, Adoption::Recovered(&attempt), found).await
}

/// The uid the owner tag of the object carries, when Kraken created it (no `importId`, the
/// tag not turned off).
pub(super) fn owner<'p>(pass: &'p impl Pass, spec: &ManagedSpec) -> Option<&'p str> {
    pass.uid()
        .filter(|_| !spec.adopts())
        .filter(|_| pass.annotation(OWNER_TAG_ANNOTATION) != Some("off"))
}

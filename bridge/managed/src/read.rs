//! Step: a data source kind — resolve its inputs, read it through the provider, show what it
//! read (`status.atProvider`), publish it like any resource's outputs, and read it again after
//! `spec.refreshInterval`. It never writes outside Kraken: there is nothing to plan, create or
//! destroy, no state Secret and no create fence. It holds a finalizer only while it has hub
//! objects (a DependencyRequest for its `valuesFrom`, a published StateDeclaration), and its
//! deletion only retires them.

use kube::runtime::controller::Action;

use super::apply::{configuration, provider, publish, succeed};
use super::error::Result;
use super::spec::ManagedSpec;
use super::target::Target;
use super::write::Run;
use kraken_provider::lifecycle;

/// Reads a live data source object.
pub(super) async fn read(run: &mut Run<'_>, spec: &ManagedSpec) -> Result<Action> {
    let kind = run.k.kind.clone();
    let p = provider(run, spec).await?;
    let t = Target::new(&p, &kind.type_name)?;
    let Some(config) = configuration(run, &t, spec).await? else {
        return Ok(Action::await_change());
    };
    let (state, _warnings) = lifecycle::read_data(t.host(), t.type_name, &config)
        .await
        .map_err(|e| t.lifecycle_err("read", e))?;
    succeed(run, &t, &state);
    publish(run, &t).await?;
    // Once its outputs are published, the finalizer makes its deletion retire them (where a
    // garbage collector runs, their owner reference would too).
    if run
        .status
        .get("stateDeclaration")
        .is_some_and(|d| !d.is_null())
    {
        run.set_finalizer(true).await?;
    }
    run.flush_status().await?;
    Ok(spec.refresh_action())
}

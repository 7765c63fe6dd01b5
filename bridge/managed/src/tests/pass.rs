//! The steps up to the plan ([`crate::observe::up_to_plan`]) through a pass that writes
//! nothing, as `kraken plan`'s does: what an import or a recovery finds is handed to the pass
//! and planned with, and the API server sees no write. (`kraken plan`'s own pass is proven
//! against the real parts in `tests/tests/plan_cli.rs`.)

use std::collections::BTreeMap;

use super::*;
use crate::CREATE_ATTEMPT_ANNOTATION;
use crate::observe::{Adoption, Observed, Pass, up_to_plan};
use crate::spec::ManagedSpec;
use crate::state::Stored;
use crate::target::Target;
use kraken_kit::fake_api::Served;
use kraken_source::Configured;

/// A pass over an object not in the cluster, reading nothing but what it is given and
/// recording what it was asked to adopt.
struct Given<'e> {
    env: &'e Env,
    config: Value,
    annotations: BTreeMap<String, String>,
    adopted: Vec<String>,
    /// What the namespace allows.
    policy: crate::floor::NamespacePolicy,
    /// Whether the create fence is taken as Kraken's.
    fence_holds: bool,
}

impl<'e> Given<'e> {
    fn new(env: &'e Env, name: &str, annotations: BTreeMap<String, String>) -> Self {
        Self {
            env,
            config: config(name),
            annotations,
            adopted: Vec::new(),
            policy: crate::floor::NamespacePolicy::default(),
            fence_holds: true,
        }
    }
}

/// A namespace whose administrators allow adopting every type untagged.
fn adopt_all() -> crate::floor::NamespacePolicy {
    crate::floor::NamespacePolicy {
        adoptable: vec![glob::Pattern::new("*").expect("pattern")],
        ..Default::default()
    }
}

impl Pass for Given<'_> {
    async fn provider(&self, _: &ManagedSpec) -> crate::error::Result<Configured> {
        let k = &self.env.k;
        Ok(k.ctx.source.provider(&k.kind, NS, "default").await?)
    }

    async fn configuration(
        &mut self,
        _: &Target<'_>,
        _: &ManagedSpec,
    ) -> crate::error::Result<Option<Value>> {
        Ok(Some(self.config.clone()))
    }

    async fn load_state(&mut self) -> crate::error::Result<Option<Stored>> {
        Ok(None)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }

    fn uid(&self) -> Option<&str> {
        None
    }

    fn who(&self) -> (&str, &str) {
        (NS, "given")
    }

    async fn namespace_policy(&self) -> crate::floor::NamespacePolicy {
        self.policy.clone()
    }

    fn fence_holds(&self, _: &str) -> bool {
        self.fence_holds
    }

    async fn adopt(
        &mut self,
        _: &Target<'_>,
        how: Adoption<'_>,
        found: &mut Observed,
    ) -> crate::error::Result<()> {
        let how = match how {
            Adoption::Imported(by) => format!("imported {by}"),
            Adoption::Recovered(attempt) => format!("recovered {attempt}"),
        };
        let completed = found.completed.as_deref().unwrap_or("-");
        self.adopted.push(format!("{how} (completed {completed})"));
        Ok(())
    }
}

/// The configuration of the fake type naming `name`.
fn config(name: &str) -> Value {
    let null = ["zone", "tags", "password", "id", "token"].map(|a| (a, Value::Null));
    let set = [
        ("name", Value::string(name)),
        ("description", Value::string("theirs")),
    ];
    Value::Object(
        set.into_iter()
            .chain(null)
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

fn writes(env: &Env) -> Vec<Served> {
    env.api
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect()
}

#[tokio::test]
async fn an_import_is_handed_to_the_pass_and_planned_with() -> anyhow::Result<()> {
    let env = Env::new();
    existing(&env, "ext");
    let spec: ManagedSpec = serde_json::from_value(json!({"importId": "ext"}))?;
    let mut pass = Given::new(&env, "ext", BTreeMap::new());
    pass.policy = adopt_all();
    let p = pass.provider(&spec).await?;
    let t = Target::new(&p, TYPE)?;
    let planned = up_to_plan(&mut pass, &t, &spec).await?;
    let Some(planned) = planned else {
        anyhow::bail!("a resolved configuration was not planned");
    };
    assert_eq!(pass.adopted, ["imported \"ext\" (completed -)"]);
    let id = kraken_provider::lifecycle::lookup(
        &planned.observed.state,
        &kraken_value::AttrPath::root().attr("id"),
    );
    assert_eq!(id, Some(&Value::string("ext")));
    assert_eq!(planned.plan.prior_state, planned.observed.state);
    assert_eq!(env.plugin.calls("ImportResourceState"), 1);
    assert_eq!(env.plugin.calls("PlanResourceChange"), 1);
    assert_eq!(env.plugin.creates(), 0);
    assert_eq!(writes(&env), [], "the pass wrote nothing, so nothing was");
    Ok(())
}

#[tokio::test]
async fn what_an_interrupted_create_made_is_handed_to_the_pass() -> anyhow::Result<()> {
    let env = Env::new();
    existing(&env, "made");
    let spec = ManagedSpec::default();
    let fence = BTreeMap::from([(CREATE_ATTEMPT_ANNOTATION.to_owned(), "t1".to_owned())]);
    let mut pass = Given::new(&env, "made", fence);
    let p = pass.provider(&spec).await?;
    let t = Target::new(&p, TYPE)?;
    let planned = up_to_plan(&mut pass, &t, &spec).await?;
    let Some(planned) = planned else {
        anyhow::bail!("a resolved configuration was not planned");
    };
    // Found by its name argument, and the attempt recorded as the one it completes.
    assert_eq!(pass.adopted, ["recovered t1 (completed t1)"]);
    assert_eq!(planned.observed.completed.as_deref(), Some("t1"));
    assert!(!planned.observed.recreate);
    assert_eq!(planned.plan.prior_state, planned.observed.state);
    assert_eq!(env.plugin.creates(), 0);
    assert_eq!(writes(&env), []);
    Ok(())
}

#[tokio::test]
async fn an_import_without_consent_is_refused_and_nothing_adopted() -> anyhow::Result<()> {
    let env = Env::new();
    existing(&env, "theirs");
    let spec: ManagedSpec = serde_json::from_value(json!({"importId": "theirs"}))?;
    let mut pass = Given::new(&env, "theirs", BTreeMap::new());
    let p = pass.provider(&spec).await?;
    let t = Target::new(&p, TYPE)?;
    let err = match up_to_plan(&mut pass, &t, &spec).await {
        Err(e) => e,
        Ok(_) => anyhow::bail!("adopted without consent"),
    };
    assert_eq!(err.reason(), "AdoptionRefused", "{err}");
    assert!(
        err.to_string().contains("kraken.dev/adoptable-by=ns/given"),
        "{err}"
    );
    assert!(pass.adopted.is_empty());
    assert_eq!(env.plugin.calls("PlanResourceChange"), 0);
    Ok(())
}

#[tokio::test]
async fn a_fence_kraken_did_not_seal_is_not_looked_up_by_name() -> anyhow::Result<()> {
    let env = Env::new();
    // Someone else's object of the name the resource gives; the tenant plants a fence.
    existing(&env, "made");
    let spec = ManagedSpec::default();
    let fence = BTreeMap::from([(CREATE_ATTEMPT_ANNOTATION.to_owned(), "t1".to_owned())]);
    let mut pass = Given::new(&env, "made", fence);
    pass.fence_holds = false;
    let p = pass.provider(&spec).await?;
    let t = Target::new(&p, TYPE)?;
    let err = match up_to_plan(&mut pass, &t, &spec).await {
        Err(e) => e,
        Ok(_) => anyhow::bail!("recovered by name through a planted fence"),
    };
    assert_eq!(err.reason(), "CreateInterrupted", "{err}");
    assert!(err.to_string().contains("carries no seal"), "{err}");
    assert!(pass.adopted.is_empty());
    assert_eq!(env.plugin.calls("ImportResourceState"), 0);
    Ok(())
}

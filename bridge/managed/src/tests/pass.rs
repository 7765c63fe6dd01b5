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
    let mut pass = Given {
        env: &env,
        config: config("ext"),
        annotations: BTreeMap::new(),
        adopted: Vec::new(),
    };
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
    let mut pass = Given {
        env: &env,
        config: config("made"),
        annotations: BTreeMap::from([(CREATE_ATTEMPT_ANNOTATION.to_owned(), "t1".to_owned())]),
        adopted: Vec::new(),
    };
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

//! Contract: `FakePlugin` (kraken-provider's unit-test provider, behind its `fake` feature)
//! answers as a real provider does. The fixture provider's `fixture_thing` has the shape of
//! the fake's `fake_thing` (the same attributes, flags and identity; the suite checks that
//! first), and one script of plugin calls runs against the fake and against the fixture
//! through Kraken's own plugin host, launched with go-plugin's handshake over protocol 6 and
//! over protocol 5 (the fixture serves 5 when `KRAKEN_FIXTURE_PROTOCOL=5`). Every answer is
//! compared step by step: states (unknowns included), `requires_replace`, diagnostics, whether
//! private data came back, and imported objects.
//!
//! The projection leaves out what is the provider's own to choose: diagnostics are compared
//! by severity and attribute path (not wording), and the sensitive `token` a create generates
//! by whether it is the token of this object, stable across reads and updates.

use std::sync::Arc;

use anyhow::{Context as _, ensure};
use kraken_bridge::provider::proposed::proposed_new;
use kraken_bridge::provider::schema::Block;
use kraken_bridge::provider::{
    ApplyRequest, Diagnostic, ImportBy, LaunchOptions, PlanRequest, PlanResponse, Plugin,
    ProviderHost, ReadRequest, Severity,
};
use kraken_bridge::value::Value;
use kraken_bridge::value::kube::from_kube_json;
use kraken_provider::fake::{self, FakePlugin};
use kraken_tests::TestEnv;
use serde_json::{Value as Json, json};

const TF_VERSION: &str = kraken_bridge::provider::REPORTED_TERRAFORM_VERSION;

type Seen = Vec<(String, Json)>;

#[tokio::test]
async fn fake_plugin_answers_as_the_fixture_over_protocol_6() -> anyhow::Result<()> {
    against_the_fixture(6, false).await
}

#[tokio::test]
async fn fake_plugin_answers_as_the_fixture_over_protocol_5() -> anyhow::Result<()> {
    against_the_fixture(5, false).await
}

/// The same script through `kraken runner` in its Landlock sandbox (the `local` placement):
/// the runner is a transport, so every answer is the same.
#[tokio::test]
async fn fake_plugin_answers_as_the_fixture_through_the_runner_over_protocol_6()
-> anyhow::Result<()> {
    against_the_fixture(6, true).await
}

#[tokio::test]
async fn fake_plugin_answers_as_the_fixture_through_the_runner_over_protocol_5()
-> anyhow::Result<()> {
    against_the_fixture(5, true).await
}

async fn against_the_fixture(protocol: u32, runner: bool) -> anyhow::Result<()> {
    let env = TestEnv::load()?;
    let fixture = env.provider("fixture")?;
    let ledger = kraken_tests::scratch_dir("contract-ledger-")?;
    let mut opts = LaunchOptions::new(&fixture.path);
    opts.name = fixture.address.clone();
    opts.env = vec![("KRAKEN_FIXTURE_PROTOCOL".into(), protocol.to_string())];
    if runner {
        opts.via = Some(kraken_bridge::provider::Via {
            program: kraken_tests::kraken_bin()?,
            args: ["runner", "--sandbox", "landlock", "--allow-write"]
                .iter()
                .map(Into::into)
                .chain([ledger.path().as_os_str().to_owned()])
                .collect(),
        });
    }
    let host = Arc::new(ProviderHost::new(opts, 8));
    let schema = host.schema().await?;
    let config = from_kube_json(
        &json!({"ledger_dir": ledger.path().to_string_lossy()}),
        &schema.provider.block.implied_type(),
    )?;
    let diags = host.configure(TF_VERSION, &config).await?;
    ensure!(diags.is_empty(), "configure: {diags:?}");
    ensure!(
        host.protocol_version() == protocol,
        "the fixture speaks protocol {}",
        host.protocol_version()
    );
    if runner {
        let pid = host
            .plugin()
            .await
            .and_then(|p| p.pid())
            .context("no process")?;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
        ensure!(
            exe == std::fs::canonicalize(kraken_tests::kraken_bin()?)?,
            "the provider host's process is {}, not kraken runner",
            exe.display()
        );
    }
    let things = ledger.path().join("things");
    let real = Backend {
        plugin: host.clone(),
        type_name: "fixture_thing",
        vanish: Box::new(move |id| Ok(std::fs::remove_file(things.join(format!("{id}.json")))?)),
    };
    let real_seen = script(&real).await;
    host.shutdown().await;
    let real_seen = real_seen?;

    let plugin = FakePlugin::new();
    let vanishing = plugin.clone();
    let faked = Backend {
        plugin,
        type_name: fake::TYPE,
        vanish: Box::new(move |id| {
            vanishing.put(id, None);
            Ok(())
        }),
    };
    let fake_seen = script(&faked).await?;
    exercised(&real_seen)?;
    compare(&real_seen, &fake_seen)
}

fn compare(real: &Seen, faked: &Seen) -> anyhow::Result<()> {
    for (step, answer) in real {
        eprintln!("{step}: {answer}");
    }
    let mut differences = Vec::new();
    for ((step, want), (fake_step, got)) in real.iter().zip(faked) {
        ensure!(step == fake_step, "{step} vs {fake_step}");
        if want != got {
            differences.push(format!("{step}\n  real: {want}\n  fake: {got}"));
        }
    }
    ensure!(
        real.len() == faked.len(),
        "the two runs took different steps"
    );
    ensure!(
        differences.is_empty(),
        "FakePlugin differs from the fixture provider in {} of {} steps:\n{}",
        differences.len(),
        real.len(),
        differences.join("\n")
    );
    Ok(())
}

/// The fixture's answers to the steps that carry the point of the suite: a create plan with
/// unknowns, and replacement required only by a change to the force-new attribute.
fn exercised(real: &Seen) -> anyhow::Result<()> {
    let answer = |step: &str| {
        real.iter()
            .find(|(s, _)| s == step)
            .map(|(_, a)| a.clone())
            .with_context(|| format!("no step {step}"))
    };
    let create = answer("plan: create")?;
    ensure!(create["planned"]["id"] == "<unknown>", "{create}");
    let cases = [
        ("plan: an in-place change", json!([])),
        ("plan: a force-new change", json!(["zone"])),
        ("plan: a force-new and an in-place change", json!(["zone"])),
        ("plan: destroy", json!([])),
    ];
    for (step, replace) in cases {
        let plan = answer(step)?;
        ensure!(plan["requires_replace"] == replace, "{step}: {plan}");
    }
    Ok(())
}

/// Deletes the object with an id behind the provider's back.
type Vanish = Box<dyn Fn(&str) -> anyhow::Result<()>>;

struct Backend {
    plugin: Arc<dyn Plugin>,
    type_name: &'static str,
    vanish: Vanish,
}

struct Run<'a> {
    b: &'a Backend,
    block: Block,
    seen: Seen,
    /// The token the first create generated.
    token: Option<String>,
}

async fn script(b: &Backend) -> anyhow::Result<Seen> {
    let schema = b.plugin.schema().await?;
    let block = schema
        .resource(b.type_name)
        .with_context(|| format!("the provider has no {}", b.type_name))?
        .block
        .clone();
    let mut run = Run {
        b,
        block,
        seen: Vec::new(),
        token: None,
    };
    run.schema().await?;
    let missing = run.config(json!({"zone": "z1"}))?;
    let diags = b
        .plugin
        .validate_resource_config(b.type_name, &missing)
        .await?;
    run.seen
        .push(("validate: name missing".into(), diagnostics(&diags)));
    lifecycle(&mut run).await?;
    imports(&mut run).await?;
    gone(&mut run).await?;
    Ok(run.seen)
}

async fn lifecycle(run: &mut Run<'_>) -> anyhow::Result<()> {
    let base = json!({"name": "a", "zone": "z1", "tags": {"team": "x"}, "password": "pw"});
    let c1 = run.config(base.clone())?;
    let plan = run.plan("plan: create", &Value::Null, &[], &c1).await?;
    let (state, private) = run.apply("apply: create", &Value::Null, &plan, &c1).await?;
    run.read("read", &state, &private).await?;
    run.plan("plan: no change", &state, &private, &c1).await?;
    let c2 = run.config(with(&base, json!({"description": "d"})))?;
    let plan = run
        .plan("plan: an in-place change", &state, &private, &c2)
        .await?;
    let (state, private) = run
        .apply("apply: an in-place change", &state, &plan, &c2)
        .await?;
    run.read("read: after the change", &state, &private).await?;
    let c3 = run.config(with(&base, json!({"description": "d", "zone": "z2"})))?;
    run.plan("plan: a force-new change", &state, &private, &c3)
        .await?;
    let c4 = run.config(with(&base, json!({"description": "e", "zone": "z2"})))?;
    run.plan(
        "plan: a force-new and an in-place change",
        &state,
        &private,
        &c4,
    )
    .await?;
    let c5 = run.config(with(&base, json!({"description": "d", "zone": null})))?;
    run.plan("plan: a force-new attribute unset", &state, &private, &c5)
        .await?;
    let destroy = run
        .plan("plan: destroy", &state, &private, &Value::Null)
        .await?;
    let (gone, _) = run
        .apply("apply: destroy", &state, &destroy, &Value::Null)
        .await?;
    ensure!(gone.is_null(), "destroyed: {gone:?}");
    run.read("read: destroyed", &state, &private).await?;
    Ok(())
}

async fn imports(run: &mut Run<'_>) -> anyhow::Result<()> {
    let c = run.config(json!({"name": "i", "description": "imported"}))?;
    let plan = run.plan("import: create", &Value::Null, &[], &c).await?;
    run.apply("import: created", &Value::Null, &plan, &c)
        .await?;
    run.import("import: by id", &ImportBy::Id("i".into()))
        .await?;
    let identity = json!({"id": "i"}).as_object().cloned().unwrap_or_default();
    run.import("import: by identity", &ImportBy::Identity(identity))
        .await?;
    run.import("import: an id nothing has", &ImportBy::Id("nothing".into()))
        .await?;
    Ok(())
}

async fn gone(run: &mut Run<'_>) -> anyhow::Result<()> {
    let c = run.config(json!({"name": "b"}))?;
    let plan = run.plan("gone: create", &Value::Null, &[], &c).await?;
    let (state, private) = run.apply("gone: created", &Value::Null, &plan, &c).await?;
    (run.b.vanish)("b")?;
    run.read("read: deleted behind the provider's back", &state, &private)
        .await?;
    Ok(())
}

fn with(base: &Json, changes: Json) -> Json {
    let mut out = base.clone();
    if let (Some(o), Some(c)) = (out.as_object_mut(), changes.as_object()) {
        for (k, v) in c {
            o.insert(k.clone(), v.clone());
        }
    }
    out
}

impl Run<'_> {
    fn config(&self, cfg: Json) -> anyhow::Result<Value> {
        Ok(from_kube_json(&cfg, &self.block.implied_type())?)
    }

    async fn schema(&mut self) -> anyhow::Result<()> {
        let attributes: serde_json::Map<String, Json> = self
            .block
            .attributes
            .iter()
            .map(|(name, a)| {
                let ty = a.ty.as_ref().map(|t| format!("{t:?}"));
                let flags = json!({"type": ty, "required": a.required, "optional": a.optional,
                    "computed": a.computed, "sensitive": a.sensitive});
                (name.clone(), flags)
            })
            .collect();
        let identities = self.b.plugin.identity_schemas().await?;
        let identity: Vec<Json> = identities
            .get(self.b.type_name)
            .map(|s| s.attributes.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|a| json!([a.name, a.required_for_import]))
            .collect();
        let blocks: Vec<&String> = self.block.block_types.keys().collect();
        let seen = json!({"attributes": attributes, "blocks": blocks, "identity": identity});
        self.seen.push(("schema".into(), seen));
        Ok(())
    }

    async fn plan(
        &mut self,
        step: &str,
        prior: &Value,
        prior_private: &[u8],
        config: &Value,
    ) -> anyhow::Result<PlanResponse> {
        let proposed = if config.is_null() {
            Value::Null
        } else {
            proposed_new(&self.block, prior, config)
        };
        let resp = self
            .b
            .plugin
            .plan_resource_change(PlanRequest {
                type_name: self.b.type_name.into(),
                prior_state: prior.clone(),
                proposed_new_state: proposed,
                config: config.clone(),
                prior_private: prior_private.to_vec(),
            })
            .await?;
        let replace: Vec<String> = resp
            .requires_replace
            .iter()
            .map(ToString::to_string)
            .collect();
        let seen = json!({
            "planned": self.show(&resp.planned_state),
            "requires_replace": replace,
            "diagnostics": diagnostics(&resp.diagnostics),
            "legacy_type_system": resp.legacy_type_system,
            "private": !resp.planned_private.is_empty(),
        });
        self.seen.push((step.into(), seen));
        Ok(resp)
    }

    async fn apply(
        &mut self,
        step: &str,
        prior: &Value,
        plan: &PlanResponse,
        config: &Value,
    ) -> anyhow::Result<(Value, Vec<u8>)> {
        let resp = self
            .b
            .plugin
            .apply_resource_change(ApplyRequest {
                type_name: self.b.type_name.into(),
                prior_state: prior.clone(),
                planned_state: plan.planned_state.clone(),
                config: config.clone(),
                planned_private: plan.planned_private.clone(),
            })
            .await?;
        if self.token.is_none()
            && let Value::Object(m) = &resp.new_state
            && let Some(Value::String(t)) = m.get("token")
        {
            self.token = Some(t.clone());
        }
        let seen = json!({
            "new_state": self.show(&resp.new_state),
            "diagnostics": diagnostics(&resp.diagnostics),
            "private": !resp.private.is_empty(),
        });
        self.seen.push((step.into(), seen));
        Ok((resp.new_state, resp.private))
    }

    async fn read(&mut self, step: &str, state: &Value, private: &[u8]) -> anyhow::Result<()> {
        let resp = self
            .b
            .plugin
            .read_resource(ReadRequest {
                type_name: self.b.type_name.into(),
                current_state: state.clone(),
                private: private.to_vec(),
            })
            .await?;
        let seen = json!({
            "new_state": self.show(&resp.new_state),
            "diagnostics": diagnostics(&resp.diagnostics),
            "private": !resp.private.is_empty(),
        });
        self.seen.push((step.into(), seen));
        Ok(())
    }

    /// Imports, then reads what was imported, as `terraform import` does.
    async fn import(&mut self, step: &str, by: &ImportBy) -> anyhow::Result<()> {
        let resp = self
            .b
            .plugin
            .import_resource_state(self.b.type_name, by)
            .await?;
        let mut imported = Vec::new();
        for found in &resp.imported {
            ensure!(
                found.type_name == self.b.type_name,
                "imported {}",
                found.type_name
            );
            let state = self.show(&found.state);
            let read = self
                .b
                .plugin
                .read_resource(ReadRequest {
                    type_name: found.type_name.clone(),
                    current_state: found.state.clone(),
                    private: found.private.clone(),
                })
                .await?;
            imported.push(json!({"state": state, "private": !found.private.is_empty(),
                                 "read": self.show(&read.new_state),
                                 "read_private": !read.private.is_empty(),
                                 "read_diagnostics": diagnostics(&read.diagnostics)}));
        }
        let seen = json!({"imported": imported, "diagnostics": diagnostics(&resp.diagnostics)});
        self.seen.push((step.into(), seen));
        Ok(())
    }

    /// A value as JSON, with unknowns as `<unknown>` and the generated token by whose it is.
    fn show(&self, v: &Value) -> Json {
        show(v, self.token.as_deref(), false)
    }
}

fn show(v: &Value, token: Option<&str>, is_token: bool) -> Json {
    match v.untyped() {
        Value::Null => Json::Null,
        Value::Unknown(r) if *r == Default::default() => json!("<unknown>"),
        Value::Unknown(r) => json!(format!("<unknown {r:?}>")),
        Value::String(s) if is_token => json!(match token {
            Some(t) if t == s => "<the token of the first create>",
            _ if s.is_empty() => "<empty>",
            _ => "<another token>",
        }),
        Value::Bool(b) => json!(b),
        Value::Number(n) => json!(format!("{n:?}")),
        Value::String(s) => json!(s),
        Value::List(items) | Value::Set(items) | Value::Tuple(items) => {
            Json::Array(items.iter().map(|i| show(i, token, false)).collect())
        }
        Value::Map(m) | Value::Object(m) => Json::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), show(v, token, k == "token")))
                .collect(),
        ),
        Value::Typed(_, inner) => show(inner, token, is_token),
    }
}

/// Diagnostics by severity and attribute path: the wording is each provider's own.
fn diagnostics(diags: &[Diagnostic]) -> Json {
    Json::Array(
        diags
            .iter()
            .map(|d| {
                let severity = match d.severity {
                    Severity::Error => "error",
                    _ => "warning",
                };
                json!([severity, d.attribute.as_ref().map(ToString::to_string)])
            })
            .collect(),
    )
}

//! One pass, dispatched: paused, being deleted (→ [`super::cleanup`]) or live (the finalizer,
//! then up to [`ROUNDS`] rounds of observe → plan → act, then the status). A failure the
//! object can carry is reported on it before it is returned; the span, the metrics and the
//! requeue are the runner's (`kraken_kit::reconciler`).

use std::sync::Arc;

use kube::ResourceExt as _;
use kube::api::Api;
use kube::runtime::controller::Action;

use super::super::plan::{Desired, Plan, plan};
use super::{Ec2Controller, Error, Pass, ROUNDS, Result};
use kraken_core_kinds::ec2::EC2Instance;
use kraken_core_kinds::{FINALIZER, PAUSED_ANNOTATION};
use kraken_kit::conditions::{SYNCED, Set, reason};
use kraken_kit::finalizer::{self, Phase};

/// One pass over the object `obj` names, read afresh.
pub(super) async fn reconcile(obj: Arc<EC2Instance>, ctrl: Arc<Ec2Controller>) -> Result<Action> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let api: Api<EC2Instance> = Api::namespaced(ctrl.ctx.client.clone(), &ns);
    // The cached copy may lag our own writes: act on the current object.
    let Some(obj) = api.get_opt(&name).await? else {
        return Ok(Action::await_change());
    };
    let uid = obj.uid().unwrap_or_default();
    let status = obj.status.clone().unwrap_or_default();
    let mut pass = Pass {
        ctrl: &ctrl,
        before: serde_json::to_value(&status).unwrap_or_default(),
        status,
        obj,
        api,
        ns,
        name,
        uid,
    };
    match pass.dispatch().await {
        Ok(action) => Ok(action),
        // The API server is away, or this replica may not write: nothing to report on it.
        Err(e @ (Error::Kube(_) | Error::Fenced(_))) => Err(e),
        Err(err) => {
            pass.report(&err).await?;
            Err(err)
        }
    }
}

impl Pass<'_> {
    async fn dispatch(&mut self) -> Result<Action> {
        let paused = self
            .obj
            .annotations()
            .get(PAUSED_ANNOTATION)
            .map(String::as_str)
            == Some("true");
        if paused {
            self.set(&[Set::new(
                SYNCED,
                false,
                reason::RECONCILE_PAUSED,
                format!("reconciliation is paused by the annotation {PAUSED_ANNOTATION}"),
            )]);
            self.flush().await?;
            return Ok(Action::await_change());
        }
        match finalizer::phase(&self.obj.metadata, FINALIZER) {
            Phase::Apply { add } => {
                if add {
                    self.set_finalizer(true).await?;
                }
                self.apply().await
            }
            Phase::Cleanup => self.cleanup().await,
            Phase::Released => Ok(Action::await_change()),
        }
    }

    /// Puts Kraken's finalizer on or takes it off (one merge patch carrying the
    /// resourceVersion, through the shared finalizer flow).
    pub(super) async fn set_finalizer(&mut self, on: bool) -> Result<(), kube::Error> {
        let ctx = &self.ctrl.ctx;
        let patched = finalizer::ensure(
            &self.api,
            &self.obj.metadata,
            FINALIZER,
            on,
            &ctx.metrics,
            "ec2instances",
        )
        .await?;
        if let Some(obj) = patched {
            self.obj = obj;
        }
        Ok(())
    }

    async fn apply(&mut self) -> Result<Action> {
        let Some(spec) = self.resolve().await? else {
            return Ok(Action::await_change());
        };
        let desired = Desired::from_spec(&spec).map_err(Error::InvalidSpec)?;
        let ec2 = self.ec2(&spec).await?;
        let owner = self.owner();
        let digest = desired.digest();
        // The spec has not changed since the last pass: whatever differs was changed outside.
        let drift = self.status.spec_digest.as_deref() == Some(digest.as_str());
        let mut last = Plan::default();
        for round in 0..ROUNDS {
            let observed = self.observe(ec2.as_ref()).await?;
            last = plan(&desired, &owner, &observed, &self.status.instances);
            if last.steps.is_empty() || round + 1 == ROUNDS {
                break;
            }
            self.act(ec2.as_ref(), &desired, &last, drift).await?;
        }
        self.conclude(&spec, &desired, &last, digest).await
    }
}

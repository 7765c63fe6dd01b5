//! What a pass writes about itself: conditions, the status (one merge patch, only when it
//! changed), Events, the StateDeclaration of its outputs, and when to look again.

use std::collections::BTreeMap;

use kube::Resource as _;
use kube::runtime::controller::Action;
use serde_json::{Value as Json, json};

use super::super::plan::{Desired, Plan};
use super::{Error, Pass, SETTLE, reasons};
use kraken_core_kinds::ec2::{EC2InstanceSpec, LastPlan};
use kraken_kit::conditions::{self, READY, SYNCED, Set, reason};

impl Pass<'_> {
    /// Sets conditions; the status then speaks of the current generation.
    pub(super) fn set(&mut self, updates: &[Set]) {
        self.status.observed_generation = self.obj.metadata.generation;
        let now = conditions::now();
        self.status.conditions = conditions::merge(
            &self.status.conditions,
            updates,
            self.obj.metadata.generation,
            &now,
        );
    }

    pub(super) fn condition(&self, type_: &str) -> Option<(String, String, String)> {
        self.status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| {
                (
                    format!("{:?}", c.status),
                    c.reason.clone(),
                    c.message.clone(),
                )
            })
    }

    /// Writes the status built so far, if it changed: a merge patch that also removes what
    /// the new status no longer has. `observedGeneration` moves only with the conditions
    /// ([`Self::set`]), so the launch fence written mid-pass does not claim the new generation.
    pub(super) async fn flush(&mut self) -> Result<(), kube::Error> {
        let after = serde_json::to_value(&self.status).map_err(kube::Error::SerdeError)?;
        if after == self.before {
            return Ok(());
        }
        let mut patch = after.clone();
        if let (Some(p), Some(b)) = (patch.as_object_mut(), self.before.as_object()) {
            for k in b.keys() {
                p.entry(k.clone()).or_insert(Json::Null);
            }
        }
        self.obj = kraken_kit::status::merge(
            &self.api,
            &self.ctrl.ctx.metrics,
            "ec2instances",
            &self.name,
            &patch,
        )
        .await?;
        self.before = after;
        Ok(())
    }

    pub(super) async fn event(&self, warning: bool, reason: &str, note: impl Into<String>) {
        let note = note.into();
        self.ctrl.ctx.event(
            (warning, reason, &note, "Reconcile"),
            self.obj.object_ref(&()),
        );
    }

    /// A failed pass: `Synced=False` with the error, `Ready` kept if the instances run, an
    /// Event when the error is new.
    pub(super) async fn report(&mut self, err: &Error) -> Result<(), kube::Error> {
        let message = kraken_kit::errors::chain(err);
        let previous = self.condition(SYNCED);
        let mut updates = vec![Set::new(SYNCED, false, err.reason(), message.clone())];
        if self.obj.metadata.deletion_timestamp.is_some() {
            updates.push(Set::new(
                READY,
                false,
                reason::DELETING,
                format!("deletion is waiting: {}", err.reason()),
            ));
        } else if self.condition(READY).is_none_or(|(s, _, _)| s != "True") {
            updates.push(Set::new(
                READY,
                false,
                reason::CREATING,
                format!("waiting: {}; see the Synced condition", err.reason()),
            ));
        }
        self.set(&updates);
        self.flush().await?;
        let repeated =
            previous.is_some_and(|(s, r, m)| s == "False" && r == err.reason() && m == message);
        if !repeated {
            self.event(true, err.reason(), message).await;
        }
        Ok(())
    }

    /// Publishes the instances as the StateDeclaration `ec2instance-<name>.aws.kraken.dev`, once
    /// something reads it.
    pub(super) async fn publish(&mut self) -> Result<(), kube::Error> {
        let instances: Vec<Json> = self
            .status
            .instances
            .iter()
            .filter(|s| !s.id.is_empty())
            .map(|s| {
                json!({
                    "index": s.index, "id": s.id, "state": s.state,
                    "instanceType": s.instance_type, "imageId": s.image_id,
                    "subnetId": s.subnet_id, "privateIp": s.private_ip,
                    "publicIp": s.public_ip, "privateDns": s.private_dns,
                    "publicDns": s.public_dns,
                })
            })
            .collect();
        let ids: Vec<&Json> = instances.iter().map(|i| &i["id"]).collect();
        let private_ips: Vec<&Json> = instances.iter().map(|i| &i["privateIp"]).collect();
        let outputs = json!({
            "instances": instances,
            "ids": ids,
            "privateIps": private_ips,
            "count": self.status.instances.len(),
        });
        let record = self
            .producer()
            .publish(
                outputs,
                BTreeMap::new(),
                self.status.state_declaration.as_ref(),
            )
            .await?;
        if record.is_some() {
            self.status.state_declaration = record;
        }
        Ok(())
    }

    /// After the rounds: the status from the last plan, the outputs published, `Ready` and
    /// `Synced` set and written; when to look again.
    pub(super) async fn conclude(
        &mut self,
        spec: &EC2InstanceSpec,
        desired: &Desired,
        last: &Plan,
        digest: String,
    ) -> Result<Action, Error> {
        self.status.instances = last.slots.clone();
        self.status.running = last.slots.iter().filter(|s| s.state == "running").count() as i64;
        self.status.spec_digest = Some(digest);
        if last.steps.is_empty() && last.refused.is_empty() {
            self.status.last_plan = Some(LastPlan {
                action: "NoOp".into(),
                ..Default::default()
            });
        }
        self.publish().await?;
        let mut updates = vec![self.ready(desired)];
        if last.refused.is_empty() {
            updates.push(Set::new(
                SYNCED,
                true,
                reason::RECONCILE_SUCCESS,
                "the instances are as declared, or on their way",
            ));
        } else {
            updates.push(self.refused(last).await);
        }
        self.set(&updates);
        self.flush().await?;
        Ok(if last.settled && !last.transitional {
            drift_action(spec.drift_interval.as_deref())
        } else {
            Action::requeue(SETTLE)
        })
    }

    fn ready(&self, desired: &Desired) -> Set {
        let running = self.status.running;
        let message = format!("{running} of {} instances running", desired.count);
        if running == desired.count {
            return Set::new(READY, true, reason::AVAILABLE, message);
        }
        let why = if self.condition(READY).is_some_and(|(s, _, _)| s == "True") {
            reasons::UPDATING
        } else {
            reason::CREATING
        };
        Set::new(READY, false, why, message)
    }

    /// `Synced=False` for replacements `spec.replacePolicy: Refuse` holds back, with an Event
    /// when the message is new.
    async fn refused(&mut self, last: &Plan) -> Set {
        let message = last
            .refused
            .iter()
            .map(|r| {
                format!(
                    "{} (index {}) would be replaced for {}",
                    r.id,
                    r.index,
                    r.paths.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let message = format!(
            "{message}, and spec.replacePolicy is Refuse: set it to Replace to go ahead, or revert the change"
        );
        let previous = self.condition(SYNCED);
        self.status.last_plan = Some(LastPlan {
            action: "Replace".into(),
            paths: last.refused[0].paths.clone(),
            instances: last.refused.iter().map(|r| r.id.clone()).collect(),
        });
        if previous.is_none_or(|(_, r, m)| r != reason::REPLACE_REFUSED || m != message) {
            self.event(true, reason::REPLACE_REFUSED, message.clone())
                .await;
        }
        Set::new(SYNCED, false, reason::REPLACE_REFUSED, message)
    }
}

/// When to look for drift next.
pub(super) fn drift_action(interval: Option<&str>) -> Action {
    kraken_kit::time::drift_after(interval).map_or_else(Action::await_change, Action::requeue)
}

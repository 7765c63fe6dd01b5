//! Deletion: wait while other objects read the outputs, terminate the instances (unless
//! `deletionPolicy: Orphan`) and wait until they are gone, then retire the StateDeclaration
//! and release the finalizer.

use kube::ResourceExt as _;
use kube::runtime::controller::Action;

use super::super::client::{Instance, OWNER_TAG};
use super::{Pass, Result, SETTLE};
use kraken_core_kinds::ec2::{DeletionPolicy, LastPlan};
use kraken_hub::consumer::IN_USE;
use kraken_hub::producer::{forced, in_use_message};
use kraken_kit::conditions::{READY, Set, reason};

impl Pass<'_> {
    /// One step of the deletion of an object that still carries the finalizer.
    pub(super) async fn cleanup(&mut self) -> Result<Action> {
        if self.in_use().await? {
            return Ok(Action::requeue(SETTLE));
        }
        let orphan = self.obj.spec.deletion_policy == Some(DeletionPolicy::Orphan);
        if !orphan && self.terminating().await? {
            return Ok(Action::requeue(SETTLE));
        }
        self.forget();
        self.producer().retire().await?;
        self.set_finalizer(false).await?;
        if orphan {
            let ids: Vec<&str> = self
                .status
                .instances
                .iter()
                .filter(|s| !s.id.is_empty())
                .map(|s| s.id.as_str())
                .collect();
            self.event(
                false,
                "Orphaned",
                format!("released {} without terminating them", ids.join(", ")),
            )
            .await;
        } else {
            self.event(false, "Deleted", "terminated every instance")
                .await;
        }
        Ok(Action::await_change())
    }

    /// Whether other objects still read the outputs; says so in `Ready` (an Event the first
    /// time).
    async fn in_use(&mut self) -> Result<bool> {
        let readers = self
            .producer()
            .readers(forced(self.obj.annotations()))
            .await?;
        if readers.is_empty() {
            return Ok(false);
        }
        let message = in_use_message(&readers);
        let first = self
            .condition(READY)
            .is_none_or(|(_, r, m)| r != IN_USE || m != message);
        self.set(&[Set::new(READY, false, IN_USE, message.clone())]);
        self.flush().await?;
        if first {
            self.event(false, IN_USE, message).await;
        }
        Ok(true)
    }

    /// Terminates the object's live instances; whether any is still on its way out.
    async fn terminating(&mut self) -> Result<bool> {
        let spec = self.obj.spec.clone();
        let ec2 = self.ec2(&spec).await?;
        let live: Vec<Instance> = self
            .observe(ec2.as_ref())
            .await?
            .into_iter()
            .filter(|i| i.tag(OWNER_TAG) == Some(self.uid.as_str()))
            .filter(|i| i.state != "terminated")
            .collect();
        if live.is_empty() {
            return Ok(false);
        }
        let ids: Vec<String> = live
            .iter()
            .filter(|i| i.state != "shutting-down")
            .map(|i| i.id.clone())
            .collect();
        if !ids.is_empty() {
            ec2.terminate(&ids).await?;
            self.event(false, "Deleting", format!("terminating {}", ids.join(", ")))
                .await;
        }
        self.status.last_plan = Some(LastPlan {
            action: "Delete".into(),
            instances: live.iter().map(|i| i.id.clone()).collect(),
            ..Default::default()
        });
        self.set(&[Set::new(
            READY,
            false,
            reason::DELETING,
            format!("waiting for {} instances to terminate", live.len()),
        )]);
        self.flush().await?;
        Ok(true)
    }
}

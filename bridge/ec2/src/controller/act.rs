//! Carrying out a plan's steps on EC2, one Event per change a user would want to know about.
//! Launches are fenced: their numbers are written to status before RunInstances, so a crash
//! in between relaunches with the same idempotency token and finds the same instance.

use std::collections::BTreeMap;

use super::super::client::{Ec2, ErrorKind, INDEX_TAG, NAME_TAG, OWNER_TAG};
use super::super::plan::{Desired, Plan, Step, Surplus};
use super::super::policy::Refusal;
use super::{Error, Pass, Result, reasons};
use kraken_core_kinds::ec2::LastPlan;

/// Why an index gets a launch, for its Event.
struct LaunchWhy<'a> {
    replaces: Option<&'a (String, Vec<String>)>,
    relaunch_of: Option<&'a String>,
}

impl Pass<'_> {
    /// Carries out one plan: the launch fence first, then every step in order.
    pub(super) async fn act(
        &mut self,
        ec2: &dyn Ec2,
        desired: &Desired,
        plan: &Plan,
        drift: bool,
    ) -> Result<()> {
        // A replica whose leadership lapsed (paused past its Lease) must not act on what it
        // read before: the leader now may have.
        self.ctrl.ctx.fence.check()?;
        if plan.steps.iter().any(|s| matches!(s, Step::Launch { .. })) {
            self.fence(plan).await?;
        }
        for step in &plan.steps {
            self.step(ec2, desired, step, drift).await?;
        }
        Ok(())
    }

    /// Writes the slots (with their pending launch numbers) and what the pass is doing.
    async fn fence(&mut self, plan: &Plan) -> Result<()> {
        let replacing: Vec<&(String, Vec<String>)> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Launch {
                    replaces: Some(r), ..
                } => Some(r),
                _ => None,
            })
            .collect();
        self.status.instances = plan.slots.clone();
        self.status.last_plan = Some(match replacing.first() {
            Some((_, paths)) => LastPlan {
                action: "Replace".into(),
                paths: paths.clone(),
                instances: replacing.iter().map(|(id, _)| id.clone()).collect(),
            },
            None => LastPlan {
                action: "Create".into(),
                ..Default::default()
            },
        });
        self.flush().await?;
        Ok(())
    }

    async fn step(
        &mut self,
        ec2: &dyn Ec2,
        desired: &Desired,
        step: &Step,
        drift: bool,
    ) -> Result<()> {
        self.ctrl.ctx.fence.check()?;
        match step {
            Step::Launch {
                index,
                launch,
                replaces,
                relaunch_of,
            } => {
                let why = LaunchWhy {
                    replaces: replaces.as_ref(),
                    relaunch_of: relaunch_of.as_ref(),
                };
                self.launch(ec2, desired, *index, *launch, why).await?;
            }
            Step::Adopt { index, id } => self.adopt(ec2, desired, *index, id).await?,
            Step::Terminate { id, why } => {
                ec2.terminate(std::slice::from_ref(id)).await?;
                let note = match why {
                    Surplus::ScaleDown => {
                        format!("terminated {id}: spec.count is {}", desired.count)
                    }
                    Surplus::Superseded => {
                        format!("terminated {id}: a newer instance serves its index")
                    }
                };
                self.event(false, "Terminated", note).await;
            }
            Step::StopToResize { id } => {
                ec2.stop(std::slice::from_ref(id)).await?;
                let note = format!(
                    "stopping {id} to change its type to {}",
                    desired.instance_type
                );
                self.event(false, "Resizing", note).await;
            }
            Step::Resize { id, to } => {
                ec2.set_instance_type(id, to).await?;
                ec2.start(std::slice::from_ref(id)).await?;
                let (warning, reason) = if drift {
                    (true, reasons::DRIFT)
                } else {
                    (false, "Resized")
                };
                let note = format!("set the type of {id} to {to} and started it");
                self.event(warning, reason, note).await;
            }
            Step::Start { id } => {
                ec2.start(std::slice::from_ref(id)).await?;
                let note = format!("instance {id} was stopped outside Kraken; started it");
                self.event(true, reasons::DRIFT, note).await;
            }
            Step::SetGroups { id, groups } => {
                ec2.set_security_groups(id, groups).await?;
                let reason = if drift { reasons::DRIFT } else { "Updated" };
                let note = format!("set the security groups of {id} to {}", groups.join(", "));
                self.event(drift, reason, note).await;
            }
            Step::Retag { id, set, remove } => self.retag(ec2, id, set, remove, drift).await?,
        }
        Ok(())
    }

    async fn launch(
        &mut self,
        ec2: &dyn Ec2,
        desired: &Desired,
        index: i64,
        launch: i64,
        why: LaunchWhy<'_>,
    ) -> Result<()> {
        let l = desired.launch(&self.owner(), index, launch);
        let instance = match ec2.run(&l).await {
            Ok(i) => i,
            Err(e) => {
                // EC2 refused: nothing was launched, the fence can go.
                if e.kind == ErrorKind::Api
                    && let Some(s) = self.status.instances.iter_mut().find(|s| s.index == index)
                {
                    s.pending_launch = None;
                }
                return Err(e.into());
            }
        };
        self.remember(&instance);
        let (warning, reason, note) = match (why.replaces, why.relaunch_of) {
            (Some((old, paths)), _) => (
                false,
                "Replacing",
                format!(
                    "launched {} at index {index} to replace {old} ({} changed)",
                    instance.id,
                    paths.join(", ")
                ),
            ),
            (None, Some(old)) => (
                true,
                reasons::DRIFT,
                format!(
                    "instance {old} at index {index} was terminated outside Kraken; launched {} in its place",
                    instance.id
                ),
            ),
            (None, None) => (
                false,
                "Launched",
                format!("launched {} at index {index}", instance.id),
            ),
        };
        self.event(warning, reason, note).await;
        Ok(())
    }

    async fn retag(
        &self,
        ec2: &dyn Ec2,
        id: &str,
        set: &BTreeMap<String, String>,
        remove: &[String],
        drift: bool,
    ) -> Result<()> {
        if !set.is_empty() {
            ec2.create_tags(id, set).await?;
        }
        if !remove.is_empty() {
            ec2.delete_tags(id, remove).await?;
        }
        // Kraken's own tags are bookkeeping, not news.
        let keys: Vec<&str> = set
            .keys()
            .chain(remove.iter())
            .map(String::as_str)
            .filter(|k| !k.starts_with("kraken.dev/"))
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let note = if drift {
            format!(
                "tags of {id} were changed outside Kraken; reverted {}",
                keys.join(", ")
            )
        } else {
            format!("updated the tags {} of {id}", keys.join(", "))
        };
        self.event(drift, if drift { reasons::DRIFT } else { "Updated" }, note)
            .await;
        Ok(())
    }

    /// Takes `importIds[index]` over: it must exist, be live and belong to no other object.
    async fn adopt(&self, ec2: &dyn Ec2, desired: &Desired, index: i64, id: &str) -> Result<()> {
        let found = match ec2.describe(&[id.to_owned()]).await {
            Ok(found) => found,
            Err(e) if e.is_not_found() => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let Some(instance) = found.into_iter().find(|i| i.id == id) else {
            return Err(Error::ImportFailed(format!(
                "spec.importIds[{index}]: instance {id} does not exist"
            )));
        };
        if !instance.is_live() {
            return Err(Error::ImportFailed(format!(
                "spec.importIds[{index}]: instance {id} is {}",
                instance.state
            )));
        }
        if let Some(other) = instance.tag(OWNER_TAG).filter(|o| *o != self.uid) {
            let name = instance.tag(NAME_TAG).unwrap_or(other);
            return Err(Error::ImportFailed(format!(
                "spec.importIds[{index}]: instance {id} is managed by EC2Instance {name}"
            )));
        }
        if let Some(other) = instance.tag(INDEX_TAG).filter(|i| *i != index.to_string()) {
            return Err(Error::ImportFailed(format!(
                "spec.importIds[{index}]: instance {id} is already this object's index {other}"
            )));
        }
        if instance.tag(OWNER_TAG) != Some(self.uid.as_str()) {
            // Not ours yet: the tenant must show it is theirs to hand over.
            self.ctrl
                .ctx
                .policy
                .may_adopt(&instance, &self.ns, &self.name)
                .map_err(|r| match r {
                    Refusal::NotAdoptable(m) => {
                        Error::ImportFailed(format!("spec.importIds[{index}]: {m}"))
                    }
                    other => Error::Refused(other),
                })?;
        }
        ec2.create_tags(id, &desired.tags_for(&self.owner(), index, 0))
            .await?;
        self.event(false, "Adopted", format!("adopted {id} as index {index}"))
            .await;
        Ok(())
    }
}

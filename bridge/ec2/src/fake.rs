//! A stateful, in-memory EC2 for unit tests, behind the same [`Ec2`] and [`Ec2Factory`] traits
//! as aws-sdk-ec2, so the controller's reconcile runs end to end in milliseconds. The real
//! thing (moto, then AWS) is exercised by `tests/ec2_native.rs`; this fake exists to make
//! states, races and failures cheap to reach.
//!
//! What it keeps: instances by id with state, type, image, subnet, key, security groups and
//! tags; client tokens (a repeated token returns the instance it launched, launching nothing).
//! States move one step each time EC2 is looked at (`owned`/`describe` show the transitional
//! state, the next look shows where it ends): pending → running, stopping → stopped,
//! shutting-down → terminated. Terminated instances stay listed, as in EC2.
//!
//! Optional eventual consistency ([`FakeEc2::set_lag`]): an instance just launched is missing
//! from the next few `owned` listings. Faults ([`FakeEc2::fail_next`]): the next call of an
//! operation fails with throttling, an authorization failure or an invalid parameter.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::client::{
    Ec2, Ec2Error, Ec2Factory, ErrorKind, Instance, Launch, OWNER_TAG, Result, Target,
};

/// An error EC2 answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// RequestLimitExceeded: transient.
    Throttling,
    /// AuthFailure: the credentials were refused.
    Unauthorized,
    /// InvalidParameterValue: the request cannot succeed as it is.
    InvalidParameter,
}

impl Fault {
    fn error(self, operation: &'static str) -> Ec2Error {
        let (kind, code, message) = match self {
            Fault::Throttling => (
                ErrorKind::Api,
                "RequestLimitExceeded",
                "Request limit exceeded.",
            ),
            Fault::Unauthorized => (
                ErrorKind::Credentials,
                "AuthFailure",
                "AWS was not able to validate the provided access credentials",
            ),
            Fault::InvalidParameter => (
                ErrorKind::Api,
                "InvalidParameterValue",
                "Value (t9.huge) for parameter instanceType is invalid.",
            ),
        };
        api_error(operation, kind, code, message)
    }
}

fn api_error(operation: &'static str, kind: ErrorKind, code: &str, message: &str) -> Ec2Error {
    Ec2Error {
        operation,
        kind,
        code: Some(code.to_owned()),
        message: format!("{code}: {message}"),
    }
}

#[derive(Debug, Default)]
struct State {
    instances: BTreeMap<String, Instance>,
    tokens: HashMap<String, String>,
    launched: u64,
    lag: usize,
    /// Launched, not listed by `owned` for this many more listings.
    hidden: BTreeMap<String, usize>,
    faults: VecDeque<(&'static str, Fault)>,
    calls: Vec<&'static str>,
    targets: Vec<Target>,
}

impl State {
    /// Records the call; the injected fault for it, if any.
    fn call(&mut self, operation: &'static str) -> Result<()> {
        self.calls.push(operation);
        match self.faults.iter().position(|(op, _)| *op == operation) {
            Some(i) => {
                let (_, fault) = self
                    .faults
                    .remove(i)
                    .unwrap_or((operation, Fault::Throttling));
                Err(fault.error(operation))
            }
            None => Ok(()),
        }
    }

    /// Every transitional state one step on.
    fn advance(&mut self) {
        for i in self.instances.values_mut() {
            let next = match i.state.as_str() {
                "pending" => "running",
                "stopping" => "stopped",
                "shutting-down" => "terminated",
                _ => continue,
            };
            i.state = next.to_owned();
        }
    }

    fn get_mut(&mut self, operation: &'static str, id: &str) -> Result<&mut Instance> {
        self.instances.get_mut(id).ok_or_else(|| {
            api_error(
                operation,
                ErrorKind::Api,
                "InvalidInstanceID.NotFound",
                &format!("The instance ID '{id}' does not exist"),
            )
        })
    }

    /// Moves each of `ids` from one of `from` to `to`; a terminated one is left alone.
    fn transition(
        &mut self,
        operation: &'static str,
        ids: &[String],
        from: &[&str],
        to: &str,
    ) -> Result<()> {
        for id in ids {
            let i = self.get_mut(operation, id)?;
            if from.contains(&i.state.as_str()) {
                i.state = to.to_owned();
            } else if i.state != "terminated" && i.state != to {
                let message = format!(
                    "The instance '{id}' is not in a state from which it can be changed ({})",
                    i.state
                );
                return Err(api_error(
                    operation,
                    ErrorKind::Api,
                    "IncorrectInstanceState",
                    &message,
                ));
            }
        }
        Ok(())
    }
}

/// The fake; clones share one state.
#[derive(Debug, Clone, Default)]
pub struct FakeEc2 {
    state: Arc<Mutex<State>>,
}

impl FakeEc2 {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Launched instances are missing from the next `listings` `owned` listings (0: listed
    /// at once).
    pub fn set_lag(&self, listings: usize) {
        self.lock().lag = listings;
    }

    /// The next call of `operation` (`RunInstances`, `DescribeInstances`, ...) fails.
    pub fn fail_next(&self, operation: &'static str, fault: Fault) {
        self.lock().faults.push_back((operation, fault));
    }

    /// How many instances RunInstances created (a repeated token creates none).
    pub fn launches(&self) -> u64 {
        self.lock().launched
    }

    /// Every instance, terminated ones included.
    pub fn instances(&self) -> Vec<Instance> {
        self.lock().instances.values().cloned().collect()
    }

    /// The instances not terminated or on their way there.
    pub fn live(&self) -> Vec<Instance> {
        self.instances()
            .into_iter()
            .filter(Instance::is_live)
            .collect()
    }

    pub fn instance(&self, id: &str) -> Option<Instance> {
        self.lock().instances.get(id).cloned()
    }

    /// The operations called so far, in order.
    pub fn calls(&self) -> Vec<&'static str> {
        self.lock().calls.clone()
    }

    /// The targets clients were asked for, in order.
    pub fn targets(&self) -> Vec<Target> {
        self.lock().targets.clone()
    }

    /// An instance made outside Kraken (to adopt, or to change behind its back).
    pub fn put(&self, instance: Instance) {
        self.lock().instances.insert(instance.id.clone(), instance);
    }

    /// Changes an instance outside Kraken (terminates, stops or retags it).
    pub fn change(&self, id: &str, f: impl FnOnce(&mut Instance)) {
        if let Some(i) = self.lock().instances.get_mut(id) {
            f(i);
        }
    }
}

#[async_trait]
impl Ec2Factory for FakeEc2 {
    async fn client(&self, target: &Target) -> Arc<dyn Ec2> {
        self.lock().targets.push(target.clone());
        Arc::new(self.clone())
    }
}

#[async_trait]
impl Ec2 for FakeEc2 {
    async fn owned(&self, owner_uid: &str) -> Result<Vec<Instance>> {
        let mut s = self.lock();
        s.call("DescribeInstances")?;
        let out = s
            .instances
            .values()
            .filter(|i| i.tag(OWNER_TAG) == Some(owner_uid) && !s.hidden.contains_key(&i.id))
            .cloned()
            .collect();
        s.hidden.retain(|_, left| {
            *left -= 1;
            *left > 0
        });
        s.advance();
        Ok(out)
    }

    async fn describe(&self, ids: &[String]) -> Result<Vec<Instance>> {
        let mut s = self.lock();
        s.call("DescribeInstances")?;
        let mut out = Vec::new();
        for id in ids {
            out.push(s.get_mut("DescribeInstances", id)?.clone());
        }
        s.advance();
        Ok(out)
    }

    async fn root_device(&self, _image_id: &str) -> Result<Option<String>> {
        self.lock().call("DescribeImages")?;
        Ok(Some("/dev/xvda".to_owned()))
    }

    async fn run(&self, launch: &Launch) -> Result<Instance> {
        let mut s = self.lock();
        s.call("RunInstances")?;
        if let Some(id) = s.tokens.get(&launch.client_token).cloned() {
            return Ok(s.get_mut("RunInstances", &id)?.clone());
        }
        s.launched += 1;
        let n = s.launched;
        let groups = if launch.security_group_ids.is_empty() {
            vec!["sg-default".to_owned()]
        } else {
            launch.security_group_ids.clone()
        };
        let instance = Instance {
            id: format!("i-{n:017x}"),
            state: "pending".into(),
            instance_type: launch.instance_type.clone(),
            image_id: launch.image_id.clone(),
            subnet_id: launch
                .subnet_id
                .clone()
                .unwrap_or_else(|| "subnet-default".into()),
            key_name: launch.key_name.clone().unwrap_or_default(),
            security_group_ids: groups,
            private_ip: format!("10.0.0.{n}"),
            private_dns: format!("ip-10-0-0-{n}.ec2.internal"),
            tags: launch.tags.clone(),
            ..Instance::default()
        };
        s.tokens
            .insert(launch.client_token.clone(), instance.id.clone());
        s.instances.insert(instance.id.clone(), instance.clone());
        if s.lag > 0 {
            let lag = s.lag;
            s.hidden.insert(instance.id.clone(), lag);
        }
        Ok(instance)
    }

    async fn terminate(&self, ids: &[String]) -> Result<()> {
        let mut s = self.lock();
        s.call("TerminateInstances")?;
        let from = ["pending", "running", "stopping", "stopped"];
        s.transition("TerminateInstances", ids, &from, "shutting-down")
    }

    async fn stop(&self, ids: &[String]) -> Result<()> {
        let mut s = self.lock();
        s.call("StopInstances")?;
        s.transition("StopInstances", ids, &["running"], "stopping")
    }

    async fn start(&self, ids: &[String]) -> Result<()> {
        let mut s = self.lock();
        s.call("StartInstances")?;
        s.transition("StartInstances", ids, &["stopped"], "pending")
    }

    async fn set_instance_type(&self, id: &str, instance_type: &str) -> Result<()> {
        const OP: &str = "ModifyInstanceAttribute";
        let mut s = self.lock();
        s.call(OP)?;
        let i = s.get_mut(OP, id)?;
        if i.state != "stopped" {
            let message = format!("The instance '{id}' is not in the 'stopped' state.");
            return Err(api_error(
                OP,
                ErrorKind::Api,
                "IncorrectInstanceState",
                &message,
            ));
        }
        i.instance_type = instance_type.to_owned();
        Ok(())
    }

    async fn set_security_groups(&self, id: &str, groups: &[String]) -> Result<()> {
        const OP: &str = "ModifyInstanceAttribute";
        let mut s = self.lock();
        s.call(OP)?;
        s.get_mut(OP, id)?.security_group_ids = groups.to_vec();
        Ok(())
    }

    async fn create_tags(&self, id: &str, tags: &BTreeMap<String, String>) -> Result<()> {
        let mut s = self.lock();
        s.call("CreateTags")?;
        let i = s.get_mut("CreateTags", id)?;
        i.tags
            .extend(tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(())
    }

    async fn delete_tags(&self, id: &str, keys: &[String]) -> Result<()> {
        let mut s = self.lock();
        s.call("DeleteTags")?;
        let i = s.get_mut("DeleteTags", id)?;
        i.tags.retain(|k, _| !keys.contains(k));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(token: &str) -> Launch {
        Launch {
            client_token: token.into(),
            image_id: "ami-1".into(),
            instance_type: "t3.micro".into(),
            tags: BTreeMap::from([(OWNER_TAG.to_owned(), "u".to_owned())]),
            ..Launch::default()
        }
    }

    #[tokio::test]
    async fn tokens_are_idempotent_and_states_move_one_look_at_a_time() -> anyhow::Result<()> {
        let ec2 = FakeEc2::new();
        let a = ec2.run(&launch("t1")).await?;
        let again = ec2.run(&launch("t1")).await?;
        assert_eq!((a.id.as_str(), ec2.launches()), (again.id.as_str(), 1));
        assert_eq!(ec2.owned("u").await?[0].state, "pending");
        assert_eq!(ec2.owned("u").await?[0].state, "running");
        let err = ec2.set_instance_type(&a.id, "t3.small").await;
        assert!(err.is_err_and(|e| e.code.as_deref() == Some("IncorrectInstanceState")));
        ec2.stop(std::slice::from_ref(&a.id)).await?;
        ec2.owned("u").await?;
        ec2.set_instance_type(&a.id, "t3.small").await?;
        ec2.terminate(std::slice::from_ref(&a.id)).await?;
        assert_eq!(ec2.owned("u").await?[0].state, "shutting-down");
        assert_eq!(ec2.owned("u").await?[0].state, "terminated");
        assert!(ec2.owned("other").await?.is_empty());
        Ok(())
    }

    #[tokio::test]
    async fn lag_hides_a_launch_from_one_listing_and_faults_fire_once() -> anyhow::Result<()> {
        let ec2 = FakeEc2::new();
        ec2.set_lag(2);
        ec2.run(&launch("t1")).await?;
        assert!(ec2.owned("u").await?.is_empty());
        assert!(ec2.owned("u").await?.is_empty());
        assert_eq!(ec2.owned("u").await?.len(), 1);
        ec2.fail_next("RunInstances", Fault::Throttling);
        let err = ec2.run(&launch("t2")).await;
        assert!(err.is_err_and(|e| e.code.as_deref() == Some("RequestLimitExceeded")));
        ec2.run(&launch("t2")).await?;
        assert_eq!(ec2.launches(), 2);
        let missing = ec2.describe(&["i-nope".into()]).await;
        assert!(missing.is_err_and(|e| e.is_not_found()));
        Ok(())
    }
}

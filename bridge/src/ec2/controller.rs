//! The EC2Instance controller: a hand-written controller in the same world as the generated
//! kinds — the same `Ready`/`Synced` conditions, Events, finalizer, `valuesFrom` through a
//! DependencyRequest, outputs published as the StateDeclaration `ec2instance-<name>`, and
//! deletion waiting while other objects read them.
//!
//! A pass: finalizer → values of `spec.valuesFrom` (wait while unresolved) → desired state →
//! EC2 client from the AwsConfig → up to [`ROUNDS`] rounds of observe (the instances tagged
//! with the object's uid) → plan ([`super::plan`]) → act, fencing launches in status first →
//! status, StateDeclaration, conditions. EC2 is the source of truth on every pass, so an
//! operator restart, a lost status write or a crash between RunInstances and recording its
//! answer finds the instance again by its tags and never launches a second one.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use kube::{Resource as _, ResourceExt as _};
use serde_json::{Value as Json, json};

use super::client::{Clients, Ec2, Ec2Error, ErrorKind, INDEX_TAG, Instance, OWNER_TAG, Target};
use super::plan::{Desired, Owner, Plan, Step, Surplus, plan};
use crate::core_kinds::ec2::{
    ARGUMENTS, AwsConfig, DeletionPolicy, EC2Instance, EC2InstanceSpec, EC2InstanceStatus, GROUP,
    LastPlan,
};
use crate::core_kinds::hub::{ObjectReference, ValueReference};
use crate::core_kinds::{FINALIZER, PAUSED_ANNOTATION};
use crate::hub::consumer::{Values, consumer_triggers, request_values};
use crate::hub::producer::{Producer, forced};
use crate::kit::Kit;
use crate::kit::conditions::{self, READY, SYNCED, Set, reason};
use crate::kit::events::event;
use crate::kit::time::{jitter, parse_duration};
use crate::value::fields::set_json_path;

/// Most observe → plan → act rounds in one pass (a resize is stop, then modify and start).
const ROUNDS: usize = 4;
/// How soon to look again while instances move between states.
const SETTLE: Duration = Duration::from_secs(2);
/// The label of this kind in metrics and logs.
const LABEL: &str = "EC2Instance.aws.kraken.dev";

/// Reasons of the EC2Instance's conditions beyond the shared ones.
pub mod reasons {
    /// The AwsConfig named by spec.awsConfigRef does not exist.
    pub const AWS_CONFIG_MISSING: &str = "AwsConfigMissing";
    /// No credentials: none in the chain, or EC2 refused them.
    pub const CREDENTIALS: &str = "CredentialsInvalid";
    /// The EC2 endpoint did not answer.
    pub const UNREACHABLE: &str = "EndpointUnreachable";
    /// EC2 refused a parameter (an AMI, subnet, group or key that does not exist).
    pub const INVALID_PARAMETER: &str = "InvalidParameter";
    /// EC2 refused for another reason (limits, capacity, throttling).
    pub const AWS_ERROR: &str = "AwsError";
    /// An importIds entry cannot be adopted.
    pub const IMPORT_FAILED: &str = "ImportFailed";
    /// Correcting a change made outside Kraken.
    pub const DRIFT: &str = "DriftCorrected";
    pub const UPDATING: &str = "Updating";
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("{0}")]
    InvalidSpec(String),
    #[error("{0}")]
    AwsConfigMissing(String),
    #[error("{0}")]
    SecretMissing(String),
    #[error("{0}")]
    ImportFailed(String),
    #[error("{0}")]
    Ec2(#[from] Ec2Error),
    #[error("kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
}

impl Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => reason::INVALID_SPEC,
            Error::AwsConfigMissing(_) => reasons::AWS_CONFIG_MISSING,
            Error::SecretMissing(_) => reason::SECRET_MISSING,
            Error::ImportFailed(_) => reasons::IMPORT_FAILED,
            Error::Ec2(e) => match e.kind {
                ErrorKind::Credentials => reasons::CREDENTIALS,
                ErrorKind::Unreachable | ErrorKind::Timeout => reasons::UNREACHABLE,
                ErrorKind::Api
                    if e.code.as_deref().is_some_and(|c| {
                        c.starts_with("Invalid")
                            || c.starts_with("Missing")
                            || c.starts_with("Unsupported")
                    }) =>
                {
                    reasons::INVALID_PARAMETER
                }
                ErrorKind::Api | ErrorKind::Other => reasons::AWS_ERROR,
            },
            Error::Kube(_) => reason::API_ERROR,
        }
    }
}

type Result<T, E = Error> = std::result::Result<T, E>;

/// What the EC2 controller shares with the others: the kit and the hub's index.
pub struct Context {
    pub kit: Arc<Kit>,
    pub hub_index: Arc<crate::hub::Index>,
}

impl std::ops::Deref for Context {
    type Target = Kit;
    fn deref(&self) -> &Kit {
        &self.kit
    }
}

/// Shared by every reconcile.
pub struct Ec2Controller {
    pub ctx: Arc<Context>,
    clients: Clients,
    /// Instances a pass launched, by object uid, until EC2 lists them (eventual consistency):
    /// planning counts them as observed.
    launched: Mutex<HashMap<String, Vec<Instance>>>,
}

impl Ec2Controller {
    pub fn new(ctx: Arc<Context>) -> Self {
        Self {
            ctx,
            clients: Clients::default(),
            launched: Mutex::default(),
        }
    }
}

/// What makes an event worth a reconcile: spec changes, deletion, the pause annotation. The
/// controller's own status writes change none of these.
fn trigger_hash(obj: &EC2Instance) -> Option<u64> {
    use std::hash::{Hash as _, Hasher as _};
    let m = &obj.metadata;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.generation.hash(&mut h);
    m.deletion_timestamp.is_some().hash(&mut h);
    m.uid.hash(&mut h);
    m.annotations
        .as_ref()
        .and_then(|a| a.get(PAUSED_ANNOTATION))
        .hash(&mut h);
    Some(h.finish())
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctrl: Arc<Ec2Controller>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctrl.ctx.client.clone();
    let api: Api<EC2Instance> = Api::all(client.clone());
    let (reader, writer) = reflector::store();
    let instances = reader.clone();
    let stream = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .modify(|o: &mut EC2Instance| o.metadata.managed_fields = None)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(trigger_hash, Default::default());
    let triggers = consumer_triggers(&ctrl.ctx.hub_index, GROUP, "EC2Instance")
        .map(|(name, ns)| ObjectRef::<EC2Instance>::new(&name).within(&ns));
    tracing::info!(kind = LABEL, "starting controller");
    // An AwsConfig created or changed (a fixed endpoint, region or Secret reference)
    // reconciles the EC2Instances that name it, at once rather than at their next retry.
    let configs: Api<AwsConfig> = Api::all(client.clone());
    let users = move |cfg: AwsConfig| {
        let (ns, name) = (cfg.namespace(), cfg.name_any());
        instances
            .state()
            .into_iter()
            .filter(|o| o.namespace() == ns)
            .filter(|o| {
                o.spec
                    .aws_config_ref
                    .as_ref()
                    .is_some_and(|r| r.name == name)
            })
            .map(|o| ObjectRef::from_obj(&*o))
            .collect::<Vec<_>>()
    };
    Controller::for_stream(stream, reader)
        .watches(configs, watcher::Config::default().any_semantic(), users)
        .reconcile_on(triggers)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctrl)
        .for_each(|res| {
            if let Err(err) = res {
                tracing::debug!(kind = LABEL, "controller: {err}");
            }
            std::future::ready(())
        })
        .await;
    tracing::info!(kind = LABEL, "controller stopped");
}

/// Only for errors the reconcile could not report on the object (the API server is away).
fn error_policy(obj: Arc<EC2Instance>, err: &kube::Error, ctrl: Arc<Ec2Controller>) -> Action {
    let wait = ctrl.ctx.backoff.failed(&obj.uid().unwrap_or_default());
    ctrl.ctx.metrics.reconcile_failed(LABEL, reason::API_ERROR);
    tracing::warn!(kind = LABEL, name = %obj.name_any(), "reconcile failed: {err}; retrying in {wait:?}");
    Action::requeue(wait)
}

/// One pass over one object, with the status being built.
struct Pass<'a> {
    ctrl: &'a Ec2Controller,
    obj: EC2Instance,
    api: Api<EC2Instance>,
    ns: String,
    name: String,
    uid: String,
    /// The status as read, and as being built.
    before: Json,
    status: EC2InstanceStatus,
}

async fn reconcile(obj: Arc<EC2Instance>, ctrl: Arc<Ec2Controller>) -> Result<Action, kube::Error> {
    let _timer = ctrl.ctx.metrics.reconcile(LABEL);
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
        uid: uid.clone(),
    };
    let result = if pass
        .obj
        .annotations()
        .get(PAUSED_ANNOTATION)
        .map(String::as_str)
        == Some("true")
    {
        pass.set(&[Set::new(
            SYNCED,
            false,
            reason::RECONCILE_PAUSED,
            format!("reconciliation is paused by the annotation {PAUSED_ANNOTATION}"),
        )]);
        pass.flush()
            .await
            .map(|()| Action::await_change())
            .map_err(Error::from)
    } else if pass.obj.metadata.deletion_timestamp.is_some() {
        pass.cleanup().await
    } else {
        pass.apply().await
    };
    match result {
        Ok(action) => {
            ctrl.ctx.backoff.succeeded(&uid);
            Ok(action)
        }
        Err(Error::Kube(e)) => Err(e),
        Err(err) => {
            ctrl.ctx.metrics.reconcile_failed(LABEL, err.reason());
            pass.report(&err).await?;
            Ok(Action::requeue(ctrl.ctx.backoff.failed(&uid)))
        }
    }
}

impl Pass<'_> {
    fn owner(&self) -> Owner {
        Owner {
            uid: self.uid.clone(),
            namespace: self.ns.clone(),
            name: self.name.clone(),
        }
    }

    fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: EC2Instance::api_version(&()).into_owned(),
            kind: EC2Instance::kind(&()).into_owned(),
            name: self.name.clone(),
            uid: self.uid.clone(),
        }
    }

    fn producer(&self) -> Producer<'_> {
        Producer {
            client: &self.ctrl.ctx.client,
            metrics: &self.ctrl.ctx.metrics,
            index: &self.ctrl.ctx.hub_index,
            namespace: &self.ns,
            object: self.reference(),
        }
    }

    /// Sets conditions; the status then speaks of the current generation.
    fn set(&mut self, updates: &[Set]) {
        self.status.observed_generation = self.obj.metadata.generation;
        let now = conditions::now();
        self.status.conditions = conditions::merge(
            &self.status.conditions,
            updates,
            self.obj.metadata.generation,
            &now,
        );
    }

    fn condition(&self, type_: &str) -> Option<(String, String, String)> {
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
    async fn flush(&mut self) -> Result<(), kube::Error> {
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
        self.ctrl
            .ctx
            .metrics
            .api_write("ec2instances", "patch-status");
        self.obj = self
            .api
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": patch})),
            )
            .await?;
        self.before = after;
        Ok(())
    }

    async fn event(&self, warning: bool, reason: &str, note: impl Into<String>) {
        let ev = event(warning, reason, &note.into(), "Reconcile");
        self.ctrl.ctx.metrics.api_write("events", "create");
        self.ctrl.ctx.events.send(ev, self.obj.object_ref(&()));
    }

    async fn set_finalizer(&mut self, on: bool) -> Result<(), kube::Error> {
        let finalizers = crate::kit::finalizer::with(self.obj.finalizers(), FINALIZER, on);
        self.ctrl.ctx.metrics.api_write("ec2instances", "patch");
        self.obj = self
            .api
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {
                    "finalizers": finalizers,
                    "resourceVersion": self.obj.resource_version(),
                }})),
            )
            .await?;
        Ok(())
    }

    fn has_finalizer(&self) -> bool {
        self.obj.finalizers().iter().any(|f| f == FINALIZER)
    }

    /// A failed pass: `Synced=False` with the error, `Ready` kept if the instances run, an
    /// Event when the error is new.
    async fn report(&mut self, err: &Error) -> Result<(), kube::Error> {
        let message = err.to_string();
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
        tracing::info!(kind = LABEL, namespace = %self.ns, name = %self.name, reason = err.reason(), "reconcile failed: {message}");
        let repeated =
            previous.is_some_and(|(s, r, m)| s == "False" && r == err.reason() && m == message);
        if !repeated {
            self.event(true, err.reason(), message).await;
        }
        Ok(())
    }

    /// The EC2 client of the object's AwsConfig (or of the operator's environment).
    async fn ec2(&self, spec: &EC2InstanceSpec) -> Result<Arc<dyn Ec2>> {
        let Some(r) = &spec.aws_config_ref else {
            return Ok(Arc::new(self.ctrl.clients.get(&Target::default()).await));
        };
        let client = &self.ctrl.ctx.client;
        let cfg = Api::<AwsConfig>::namespaced(client.clone(), &self.ns)
            .get_opt(&r.name)
            .await?
            .ok_or_else(|| {
                Error::AwsConfigMissing(format!(
                    "AwsConfig {} (spec.awsConfigRef) not found in namespace {}",
                    r.name, self.ns
                ))
            })?;
        let mut target = Target {
            region: cfg.spec.region.clone(),
            endpoint: cfg.spec.endpoint.clone(),
            credentials: None,
        };
        if let Some(c) = &cfg.spec.credentials {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &self.ns);
            let read = |key: &crate::core_kinds::provider_config::SecretKeyRef, what: &str| {
                let secrets = secrets.clone();
                let (name, key, what) = (key.name.clone(), key.key.clone(), what.to_owned());
                let cfg_name = r.name.clone();
                async move {
                    let secret = secrets.get_opt(&name).await?.ok_or_else(|| {
                        Error::SecretMissing(format!(
                            "AwsConfig {cfg_name}: Secret {name} (credentials.{what}) not found"
                        ))
                    })?;
                    secret
                        .data
                        .as_ref()
                        .and_then(|d| d.get(&key))
                        .and_then(|b| String::from_utf8(b.0.clone()).ok())
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .ok_or_else(|| {
                            Error::SecretMissing(format!(
                                "AwsConfig {cfg_name}: Secret {name} has no key {key} (credentials.{what})"
                            ))
                        })
                }
            };
            let id = read(&c.access_key_id_secret_ref, "accessKeyIdSecretRef").await?;
            let secret = read(&c.secret_access_key_secret_ref, "secretAccessKeySecretRef").await?;
            let token = match &c.session_token_secret_ref {
                Some(t) => Some(read(t, "sessionTokenSecretRef").await?),
                None => None,
            };
            target.credentials = Some((id, secret, token));
        }
        Ok(Arc::new(self.ctrl.clients.get(&target).await))
    }

    /// The spec with `valuesFrom` merged in, or `None` while the hub has not resolved it
    /// (the status then says why; the request's change retriggers).
    async fn resolve(&mut self) -> Result<Option<EC2InstanceSpec>> {
        let spec = self.obj.spec.clone();
        let had_request = self.status.dependency_request.is_some();
        if spec.values_from.is_empty() && !had_request {
            return Ok(Some(spec));
        }
        let mut references = Vec::with_capacity(spec.values_from.len());
        for (i, entry) in spec.values_from.iter().enumerate() {
            let mut r: ValueReference = serde_json::from_value(entry.clone())
                .map_err(|e| Error::InvalidSpec(format!("spec.valuesFrom[{i}]: {e}")))?;
            r.r#type = Some(argument_type(&r.path).ok_or_else(|| {
                Error::InvalidSpec(format!(
                    "spec.valuesFrom[{i}].path: EC2Instance has no argument {}",
                    r.path
                ))
            })?);
            // User data often carries secrets: never in a request's status.
            r.sensitive = r.path == "userData";
            references.push(r);
        }
        let ctx = &self.ctrl.ctx;
        let values = request_values(
            &ctx.client,
            &ctx.metrics,
            &ctx.hub_index,
            &self.ns,
            &self.reference(),
            GROUP,
            references,
        )
        .await?;
        let request = crate::hub::object_key("EC2Instance", &self.name);
        match values {
            Values::None => {
                self.status.dependency_request = None;
                Ok(Some(spec))
            }
            Values::Waiting { reason, message } => {
                self.status.dependency_request = Some(request);
                let previous = self.condition(SYNCED).map(|(_, _, m)| m);
                let (conditions, event) =
                    crate::hub::consumer::waiting(&reason, message, previous.as_deref());
                self.set(&conditions);
                self.flush().await?;
                if let Some(message) = event {
                    self.event(true, crate::hub::consumer::WAITING, message)
                        .await;
                }
                Ok(None)
            }
            Values::Ready { values, .. } => {
                self.status.dependency_request = Some(request);
                let mut merged = serde_json::to_value(&spec)
                    .map_err(|e| Error::InvalidSpec(format!("spec: {e}")))?;
                for (path, value) in values {
                    set_json_path(&mut merged, &path, value)
                        .map_err(|e| Error::InvalidSpec(format!("spec.valuesFrom: {e}")))?;
                }
                serde_json::from_value(merged)
                    .map(Some)
                    .map_err(|e| Error::InvalidSpec(format!("spec.valuesFrom: {e}")))
            }
        }
    }

    async fn apply(&mut self) -> Result<Action> {
        if !self.has_finalizer() {
            self.set_finalizer(true).await?;
        }
        let Some(spec) = self.resolve().await? else {
            return Ok(Action::await_change());
        };
        let desired = Desired::from_spec(&spec).map_err(Error::InvalidSpec)?;
        let ec2 = self.ec2(&spec).await?;
        let owner = self.owner();
        let digest = desired.digest();
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
        let running = self.status.running;
        let ready = running == desired.count;
        let mut updates = vec![if ready {
            Set::new(
                READY,
                true,
                reason::AVAILABLE,
                format!("{running} of {} instances running", desired.count),
            )
        } else {
            Set::new(
                READY,
                false,
                if self.condition(READY).is_some_and(|(s, _, _)| s == "True") {
                    reasons::UPDATING
                } else {
                    reason::CREATING
                },
                format!("{running} of {} instances running", desired.count),
            )
        }];
        let refused = !last.refused.is_empty();
        if refused {
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
            updates.push(Set::new(
                SYNCED,
                false,
                reason::REPLACE_REFUSED,
                message.clone(),
            ));
            self.status.last_plan = Some(LastPlan {
                action: "Replace".into(),
                paths: last.refused[0].paths.clone(),
                instances: last.refused.iter().map(|r| r.id.clone()).collect(),
            });
            if previous.is_none_or(|(_, r, m)| r != reason::REPLACE_REFUSED || m != message) {
                self.event(true, reason::REPLACE_REFUSED, message).await;
            }
        } else {
            updates.push(Set::new(
                SYNCED,
                true,
                reason::RECONCILE_SUCCESS,
                "the instances are as declared, or on their way",
            ));
        }
        self.set(&updates);
        self.flush().await?;
        Ok(if last.settled && !last.transitional {
            drift_action(spec.drift_interval.as_deref())
        } else {
            Action::requeue(SETTLE)
        })
    }

    /// The instances tagged as this object's, plus launches EC2 does not list yet.
    async fn observe(&self, ec2: &dyn Ec2) -> Result<Vec<Instance>> {
        let mut observed = ec2.owned(&self.uid).await?;
        let mut launched = self.ctrl.launched.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mine) = launched.get_mut(&self.uid) {
            mine.retain(|l| !observed.iter().any(|o| o.id == l.id));
            observed.extend(mine.iter().cloned());
            if mine.is_empty() {
                launched.remove(&self.uid);
            }
        }
        Ok(observed)
    }

    /// Carries out one plan. Launches are fenced first: their numbers are written to status
    /// before RunInstances, so a crash in between relaunches with the same token.
    async fn act(
        &mut self,
        ec2: &dyn Ec2,
        desired: &Desired,
        plan: &Plan,
        drift: bool,
    ) -> Result<()> {
        let owner = self.owner();
        let launches = plan.steps.iter().any(|s| matches!(s, Step::Launch { .. }));
        let replacing: Vec<(String, Vec<String>)> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Launch {
                    replaces: Some(r), ..
                } => Some(r.clone()),
                _ => None,
            })
            .collect();
        if launches {
            self.status.instances = plan.slots.clone();
            if let Some((_, paths)) = replacing.first() {
                self.status.last_plan = Some(LastPlan {
                    action: "Replace".into(),
                    paths: paths.clone(),
                    instances: replacing.iter().map(|(id, _)| id.clone()).collect(),
                });
            } else {
                self.status.last_plan = Some(LastPlan {
                    action: "Create".into(),
                    ..Default::default()
                });
            }
            self.flush().await?;
        }
        for step in &plan.steps {
            match step {
                Step::Launch {
                    index,
                    launch,
                    replaces,
                    relaunch_of,
                } => {
                    let l = desired.launch(&owner, *index, *launch);
                    let got = ec2.run(&l).await;
                    let instance = match got {
                        Ok(i) => i,
                        Err(e) => {
                            // EC2 refused: nothing was launched, the fence can go.
                            if e.kind == ErrorKind::Api
                                && let Some(s) =
                                    self.status.instances.iter_mut().find(|s| s.index == *index)
                            {
                                s.pending_launch = None;
                            }
                            return Err(e.into());
                        }
                    };
                    self.ctrl
                        .launched
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(self.uid.clone())
                        .or_default()
                        .push(instance.clone());
                    let (warning, reason, note) = match (replaces, relaunch_of) {
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
                    self.event(
                        false,
                        "Resizing",
                        format!(
                            "stopping {id} to change its type to {}",
                            desired.instance_type
                        ),
                    )
                    .await;
                }
                Step::Resize { id, to } => {
                    ec2.set_instance_type(id, to).await?;
                    ec2.start(std::slice::from_ref(id)).await?;
                    let (warning, reason) = if drift {
                        (true, reasons::DRIFT)
                    } else {
                        (false, "Resized")
                    };
                    self.event(
                        warning,
                        reason,
                        format!("set the type of {id} to {to} and started it"),
                    )
                    .await;
                }
                Step::Start { id } => {
                    ec2.start(std::slice::from_ref(id)).await?;
                    self.event(
                        true,
                        reasons::DRIFT,
                        format!("instance {id} was stopped outside Kraken; started it"),
                    )
                    .await;
                }
                Step::SetGroups { id, groups } => {
                    ec2.set_security_groups(id, groups).await?;
                    self.event(
                        drift,
                        if drift { reasons::DRIFT } else { "Updated" },
                        format!("set the security groups of {id} to {}", groups.join(", ")),
                    )
                    .await;
                }
                Step::Retag { id, set, remove } => {
                    if !set.is_empty() {
                        ec2.create_tags(id, set).await?;
                    }
                    if !remove.is_empty() {
                        ec2.delete_tags(id, remove).await?;
                    }
                    let keys: Vec<&str> = set
                        .keys()
                        .chain(remove.iter())
                        .map(String::as_str)
                        .filter(|k| !k.starts_with("kraken.dev/"))
                        .collect();
                    if !keys.is_empty() {
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
                    }
                }
            }
        }
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
            let name = instance.tag(super::client::NAME_TAG).unwrap_or(other);
            return Err(Error::ImportFailed(format!(
                "spec.importIds[{index}]: instance {id} is managed by EC2Instance {name}"
            )));
        }
        if let Some(other) = instance.tag(INDEX_TAG).filter(|i| *i != index.to_string()) {
            return Err(Error::ImportFailed(format!(
                "spec.importIds[{index}]: instance {id} is already this object's index {other}"
            )));
        }
        ec2.create_tags(id, &desired.tags_for(&self.owner(), index, 0))
            .await?;
        self.event(false, "Adopted", format!("adopted {id} as index {index}"))
            .await;
        Ok(())
    }

    /// Publishes the instances as the StateDeclaration `ec2instance-<name>`.
    async fn publish(&mut self) -> Result<(), kube::Error> {
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
        self.status.state_declaration = Some(record);
        Ok(())
    }

    async fn cleanup(&mut self) -> Result<Action> {
        if !self.has_finalizer() {
            return Ok(Action::await_change());
        }
        let readers = self
            .producer()
            .readers(forced(self.obj.annotations()))
            .await?;
        if !readers.is_empty() {
            let message = crate::hub::producer::in_use_message(&readers);
            let first = self
                .condition(READY)
                .is_none_or(|(_, r, m)| r != crate::hub::consumer::IN_USE || m != message);
            self.set(&[Set::new(
                READY,
                false,
                crate::hub::consumer::IN_USE,
                message.clone(),
            )]);
            self.flush().await?;
            if first {
                self.event(false, crate::hub::consumer::IN_USE, message)
                    .await;
            }
            return Ok(Action::requeue(SETTLE));
        }
        let spec = self.obj.spec.clone();
        let orphan = spec.deletion_policy == Some(DeletionPolicy::Orphan);
        if !orphan {
            let ec2 = self.ec2(&spec).await?;
            let live: Vec<Instance> = self
                .observe(ec2.as_ref())
                .await?
                .into_iter()
                .filter(|i| i.tag(OWNER_TAG) == Some(self.uid.as_str()))
                .filter(|i| i.state != "terminated")
                .collect();
            if !live.is_empty() {
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
                return Ok(Action::requeue(SETTLE));
            }
        }
        self.ctrl
            .launched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.uid);
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
}

/// The Terraform type (as JSON) a valuesFrom value for `path` is converted to.
fn argument_type(path: &str) -> Option<Json> {
    let parse = |t: &str| serde_json::from_str::<Json>(t).ok();
    for (name, ty, subpaths) in ARGUMENTS {
        if path == *name {
            return if *name == "rootVolume" {
                Some(json!("dynamic"))
            } else {
                parse(ty)
            };
        }
        if let Some(rest) = path.strip_prefix(name).and_then(|r| r.strip_prefix('.'))
            && *subpaths
            && !rest.is_empty()
        {
            return match *name {
                "tags" => Some(json!("string")),
                "securityGroupIds" => rest.parse::<usize>().ok().map(|_| json!("string")),
                "rootVolume" => match rest {
                    "size" => Some(json!("number")),
                    "type" => Some(json!("string")),
                    _ => None,
                },
                _ => None,
            };
        }
    }
    None
}

/// When to look for drift next.
fn drift_action(interval: Option<&str>) -> Action {
    match parse_duration(interval.unwrap_or("10m")) {
        Some(d) if d.is_zero() => Action::await_change(),
        Some(d) => Action::requeue(jitter(d, 0.1)),
        None => Action::requeue(jitter(Duration::from_secs(600), 0.1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_types_follow_the_arguments() {
        assert_eq!(argument_type("imageId"), Some(json!("string")));
        assert_eq!(argument_type("count"), Some(json!("number")));
        assert_eq!(argument_type("tags"), Some(json!(["map", "string"])));
        assert_eq!(argument_type("tags.team"), Some(json!("string")));
        assert_eq!(
            argument_type("securityGroupIds"),
            Some(json!(["list", "string"]))
        );
        assert_eq!(argument_type("securityGroupIds.1"), Some(json!("string")));
        assert_eq!(argument_type("securityGroupIds.x"), None);
        assert_eq!(argument_type("rootVolume"), Some(json!("dynamic")));
        assert_eq!(argument_type("rootVolume.size"), Some(json!("number")));
        assert_eq!(argument_type("rootVolume.iops"), None);
        assert_eq!(argument_type("imageIdx"), None);
        assert_eq!(argument_type("nope"), None);
    }

    #[test]
    fn errors_map_to_reasons_a_user_can_act_on() {
        let ec2 = |kind, code: Option<&str>| {
            Error::Ec2(Ec2Error {
                operation: "RunInstances",
                kind,
                code: code.map(str::to_owned),
                message: "m".into(),
            })
        };
        assert_eq!(
            ec2(ErrorKind::Api, Some("InvalidAMIID.NotFound")).reason(),
            reasons::INVALID_PARAMETER
        );
        assert_eq!(
            ec2(ErrorKind::Api, Some("InsufficientInstanceCapacity")).reason(),
            reasons::AWS_ERROR
        );
        assert_eq!(
            ec2(ErrorKind::Credentials, None).reason(),
            reasons::CREDENTIALS
        );
        assert_eq!(
            ec2(ErrorKind::Unreachable, None).reason(),
            reasons::UNREACHABLE
        );
        assert_eq!(ec2(ErrorKind::Timeout, None).reason(), reasons::UNREACHABLE);
    }
}

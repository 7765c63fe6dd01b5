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
//!
//! This file holds what the steps share (the controller, its errors, the watch and one
//! [`Pass`]); the steps live beside it: [`reconcile`] (dispatch and the rounds),
//! [`inputs`] (valuesFrom, AwsConfig → EC2 client), [`observe`], [`act`], [`status`]
//! (conditions, status writes, Events, the StateDeclaration) and [`cleanup`].

mod act;
mod cleanup;
mod inputs;
mod observe;
mod reconcile;
mod status;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use kube::{Resource as _, ResourceExt as _};
use serde_json::Value as Json;

use super::client::{Clients, Ec2Error, Ec2Factory, ErrorKind, Instance};
use super::plan::Owner;
use super::policy::{AwsPolicy, Refusal};
use kraken_core_kinds::PAUSED_ANNOTATION;
use kraken_core_kinds::ec2::{AwsConfig, EC2Instance, EC2InstanceStatus, GROUP};
use kraken_core_kinds::hub::ObjectReference;
use kraken_hub::consumer::consumer_triggers;
use kraken_hub::producer::Producer;
use kraken_kit::Kit;
use kraken_kit::conditions::reason;
use kraken_kit::reconciler::{ReconcileError, Reconciler};

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
    /// No credentials of its own, and the operator lends none.
    pub const CREDENTIALS_REQUIRED: &str = "CredentialsRequired";
    /// The AwsConfig's endpoint is not on the operator's allow-list.
    pub const ENDPOINT_NOT_ALLOWED: &str = "EndpointNotAllowed";
    /// Correcting a change made outside Kraken.
    pub const DRIFT: &str = "DriftCorrected";
    pub const UPDATING: &str = "Updating";
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidSpec(String),
    #[error("{0}")]
    AwsConfigMissing(String),
    #[error("{0}")]
    SecretMissing(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    ImportFailed(String),
    /// The administrator's [`AwsPolicy`] refuses it.
    #[error("{}", refusal_message(.0))]
    Refused(Refusal),
    #[error("{0}")]
    Ec2(#[from] Ec2Error),
    /// The condition shows the API server's answer after this (`kit::errors::chain`).
    #[error("kubernetes API request failed")]
    Kube(#[from] kube::Error),
    /// This replica's leadership is not current: nothing is written, not even the condition.
    #[error(transparent)]
    Fenced(#[from] kraken_kit::fence::Fenced),
}

impl Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => reason::INVALID_SPEC,
            Error::AwsConfigMissing(_) => reasons::AWS_CONFIG_MISSING,
            Error::SecretMissing(_) => reason::SECRET_MISSING,
            Error::Forbidden(_) => reason::FORBIDDEN,
            Error::ImportFailed(_) => reasons::IMPORT_FAILED,
            Error::Refused(Refusal::CredentialsRequired(_)) => reasons::CREDENTIALS_REQUIRED,
            Error::Refused(Refusal::EndpointNotAllowed(_)) => reasons::ENDPOINT_NOT_ALLOWED,
            Error::Refused(Refusal::NotAdoptable(_)) => reasons::IMPORT_FAILED,
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
            Error::Fenced(_) => reason::FENCED,
        }
    }

    /// Whether the pass is tried again with backoff (`true`) or waits for a change of the
    /// object (`false`): a spec it cannot act on, or what the administrator's policy refuses
    /// (changing the EC2Instance or the AwsConfig it names, which is watched, wakes it). EC2's
    /// refusals are retried: a missing AMI or subnet may appear, limits and capacity change.
    fn is_transient(&self) -> bool {
        !matches!(
            self,
            Error::InvalidSpec(_)
                | Error::Refused(Refusal::CredentialsRequired(_) | Refusal::EndpointNotAllowed(_))
        )
    }
}

impl ReconcileError for Error {
    fn reason(&self) -> &str {
        Error::reason(self)
    }

    fn is_transient(&self) -> bool {
        Error::is_transient(self)
    }
}

type Result<T, E = Error> = std::result::Result<T, E>;

fn refusal_message(r: &Refusal) -> &str {
    match r {
        Refusal::CredentialsRequired(m)
        | Refusal::EndpointNotAllowed(m)
        | Refusal::NotAdoptable(m) => m,
    }
}

/// What the EC2 controller shares with the others: the kit and the hub's index; and its own
/// limits, set by the administrator.
pub struct Context {
    pub kit: Arc<Kit>,
    pub hub_index: Arc<kraken_hub::Index>,
    pub policy: AwsPolicy,
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
    /// Where EC2 clients come from: the SDK in production, a fake in unit tests.
    factory: Arc<dyn Ec2Factory>,
    /// Instances a pass launched, by object uid, until EC2 lists them (eventual consistency):
    /// planning counts them as observed.
    launched: Mutex<HashMap<String, Vec<Instance>>>,
}

impl Ec2Controller {
    /// The controller on aws-sdk-ec2.
    pub fn new(ctx: Arc<Context>) -> Self {
        Self::with_factory(ctx, Arc::new(Clients::default()))
    }

    /// The controller over another source of EC2 clients (a fake, in unit tests).
    pub fn with_factory(ctx: Arc<Context>, factory: Arc<dyn Ec2Factory>) -> Self {
        Self {
            ctx,
            factory,
            launched: Mutex::default(),
        }
    }
}

/// What makes an event worth a reconcile: spec changes, deletion, the pause and publish
/// annotations. The
/// controller's own status writes change none of these.
fn trigger_hash(obj: &EC2Instance) -> Option<u64> {
    use std::hash::{Hash as _, Hasher as _};
    let m = &obj.metadata;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.generation.hash(&mut h);
    m.deletion_timestamp.is_some().hash(&mut h);
    m.uid.hash(&mut h);
    for key in [PAUSED_ANNOTATION, kraken_hub::producer::PUBLISH_ANNOTATION] {
        m.annotations.as_ref().and_then(|a| a.get(key)).hash(&mut h);
    }
    Some(h.finish())
}

/// What makes an AwsConfig event worth reconciling the EC2Instances that name it: a new
/// object (a new uid, even under an old name) or a new generation (spec change).
fn config_hash(cfg: &AwsConfig) -> Option<u64> {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cfg.metadata.uid.hash(&mut h);
    cfg.metadata.generation.hash(&mut h);
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
    // Only a new AwsConfig or a new spec: its status (written by the AwsConfig controller) is
    // no reason to look at EC2 again.
    let config_changes = watcher(configs, watcher::Config::default().any_semantic())
        .default_backoff()
        .touched_objects()
        .predicate_filter(config_hash, Default::default());
    let controller = Controller::for_stream(stream, reader)
        .watches_stream(config_changes, users)
        .reconcile_on(triggers)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown);
    kraken_kit::reconciler::drive(controller, ctrl).await;
    tracing::info!(kind = LABEL, "controller stopped");
}

/// The EC2Instance controller in the shape every controller has (`kraken_kit::reconciler`).
impl Reconciler for Ec2Controller {
    type Object = EC2Instance;
    type Error = Error;

    fn kit(&self) -> &Kit {
        &self.ctx.kit
    }

    fn kind(&self) -> &str {
        LABEL
    }

    fn reconcile(
        self: Arc<Self>,
        obj: Arc<EC2Instance>,
    ) -> impl std::future::Future<Output = Result<Action>> + Send {
        reconcile::reconcile(obj, self)
    }
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
            always: kraken_hub::producer::always_published(self.obj.annotations()),
        }
    }
}

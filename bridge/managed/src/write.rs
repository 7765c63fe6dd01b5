//! The writes a reconcile makes, in one place so each is counted (`kraken_api_writes_total`)
//! and none happens when nothing changed: metadata (finalizer, create fence), the state
//! Secret, status, Events.

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Resource as _, ResourceExt as _};
use serde_json::{Value as Json, json};

use super::error::{Error, Result};
use super::seal;
use super::state::{self, Deposed, Stored};
use super::{FIELD_MANAGER, FINALIZER, KindContext};
use kraken_kit::conditions::Condition;
use kraken_kit::conditions::{self, Set};
use kraken_kit::finalizer;
use kraken_kit::ownership::{self, Claim};
use kraken_kit::status;

/// One reconcile of one object: the object as last read or written, and the status being built.
pub struct Run<'a> {
    pub k: &'a KindContext,
    pub api: Api<DynamicObject>,
    pub secrets: Api<Secret>,
    pub obj: DynamicObject,
    pub namespace: String,
    pub name: String,
    pub status: Json,
    /// The provider state a successful pass left, to publish as the StateDeclaration.
    pub outputs: Option<kraken_value::Value>,
    /// Top-level attributes (Terraform names) set from a sensitive value through
    /// `spec.valuesFrom` (a Secret, a sensitive output, a template using one): kept out of
    /// `status.atProvider` and published only in the outputs Secret, whatever the schema
    /// says of the argument.
    pub sensitive_inputs: std::collections::BTreeSet<String>,
    /// The sensitive values themselves, to find where the provider echoes them
    /// ([`super::echo`]): never shown.
    pub sensitive_values: super::echo::Secrets,
    /// The uid and resourceVersion of this object's state Secret, once loaded or written
    /// (`None`: none is known to be this object's). Writes are conditional on the version.
    state_uid: std::sync::Mutex<Option<(String, Option<String>)>>,
    /// The uid of the old-named state Secret this pass read (see `load_legacy_state`).
    legacy_uid: std::sync::Mutex<Option<String>>,
    /// The deposed object the state Secret holds (read by `load_state`, changed by
    /// `set_deposed`): every state write keeps it.
    deposed: std::sync::Mutex<Option<Deposed>>,
    /// The policy fields in force, as the state Secret recorded them (read by `load_state`,
    /// changed by `set_policies`): every state write keeps them.
    policies: std::sync::Mutex<Option<Vec<u8>>>,
}

impl<'a> Run<'a> {
    pub fn new(k: &'a KindContext, obj: DynamicObject, namespace: String) -> Self {
        let api = Api::namespaced_with(k.ctx.client.clone(), &namespace, &k.kind.resource);
        let secrets = Api::namespaced(k.ctx.client.clone(), &namespace);
        let status = obj
            .data
            .get("status")
            .cloned()
            .filter(Json::is_object)
            .unwrap_or_else(|| json!({}));
        let name = obj.name_any();
        Self {
            k,
            api,
            secrets,
            obj,
            namespace,
            name,
            status,
            outputs: None,
            sensitive_inputs: Default::default(),
            sensitive_values: Default::default(),
            state_uid: Default::default(),
            legacy_uid: Default::default(),
            deposed: Default::default(),
            policies: Default::default(),
        }
    }

    pub fn generation(&self) -> Option<i64> {
        self.obj.metadata.generation
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.obj.annotations().get(key).map(String::as_str)
    }

    pub fn has_finalizer(&self) -> bool {
        finalizer::has(&self.obj.metadata, FINALIZER)
    }

    /// Where the object is in the finalizer flow.
    pub fn finalizer_phase(&self) -> finalizer::Phase {
        finalizer::phase(&self.obj.metadata, FINALIZER)
    }

    /// Puts the finalizer on (`on`) or takes it off, unless it already is so.
    pub async fn set_finalizer(&mut self, on: bool) -> Result<()> {
        let resource = &self.k.kind.resource.plural;
        let metrics = &self.k.ctx.metrics;
        let Some(obj) = finalizer::ensure(
            &self.api,
            &self.obj.metadata,
            FINALIZER,
            on,
            metrics,
            resource,
        )
        .await?
        else {
            return Ok(());
        };
        self.obj = obj;
        self.remember_write(on);
        Ok(())
    }

    /// Records the version this controller wrote; once the finalizer is gone the object may
    /// vanish, so there is nothing to remember.
    fn remember_write(&self, finalizer_on: bool) {
        let version = self.obj.resource_version();
        self.k.wrote(
            &self.obj.uid().unwrap_or_default(),
            finalizer_on.then_some(version.as_deref()).flatten(),
        );
    }

    fn count(&self, resource: &str, verb: &str) {
        self.k.ctx.metrics.api_write(resource, verb);
    }

    /// Sets annotations (a `None` value removes one) and adds or removes the finalizer in one
    /// write (the create fence carries the finalizer to save a write), guarded by the resourceVersion read: a concurrent change makes it fail rather
    /// than act on a stale view.
    pub async fn patch_metadata(
        &mut self,
        annotations: &[(&str, Option<&str>)],
        finalizer: bool,
    ) -> Result<()> {
        let finalizers = finalizer::with(self.obj.finalizers(), FINALIZER, finalizer);
        let ann: serde_json::Map<String, Json> = annotations
            .iter()
            .map(|(k, v)| {
                (
                    (*k).to_owned(),
                    v.map_or(Json::Null, |v| Json::String(v.to_owned())),
                )
            })
            .collect();
        let patch = json!({
            "metadata": {
                "resourceVersion": self.obj.resource_version(),
                "finalizers": finalizers,
                "annotations": ann,
            }
        });
        self.count(&self.k.kind.resource.plural, "patch");
        self.obj = self
            .api
            .patch(
                &self.name,
                &kraken_kit::status::patch_params(),
                &Patch::Merge(&patch),
            )
            .await?;
        self.remember_write(finalizer);
        Ok(())
    }

    /// Records the uid of this object's state Secret; returns the one recorded before.
    /// Remembers the state Secret this pass read or wrote (by its metadata), returning the
    /// uid known before.
    fn set_state_seen(&self, meta: Option<&ObjectMeta>) -> Option<String> {
        let seen = meta.and_then(|m| Some((m.uid.clone()?, m.resource_version.clone())));
        let mut known = self.state_uid.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *known, seen).map(|(uid, _)| uid)
    }

    /// The resourceVersion of the state Secret this pass last read or wrote, if any.
    fn state_version(&self) -> Option<String> {
        let known = self.state_uid.lock().unwrap_or_else(|e| e.into_inner());
        known.as_ref().and_then(|(_, rv)| rv.clone())
    }

    /// The deposed object of a create-before-destroy replacement, while there is one.
    pub fn deposed(&self) -> Option<Deposed> {
        self.deposed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The policy fields in force, as the state recorded them (JSON).
    pub fn policies(&self) -> Option<Vec<u8>> {
        self.policies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records the policy fields in force (JSON); the next state write stores them.
    pub fn set_policies(&self, policies: Option<Vec<u8>>) {
        *self.policies.lock().unwrap_or_else(|e| e.into_inner()) = policies;
    }

    /// What a loaded state carries that every write keeps: the deposed object, the policies.
    fn remember(&self, stored: &Stored) {
        self.set_deposed(stored.deposed.clone());
        self.set_policies(stored.policies.clone());
    }

    /// Records (or, `None`, forgets) the deposed object; the next state write stores it.
    pub fn set_deposed(&self, deposed: Option<Deposed>) {
        *self.deposed.lock().unwrap_or_else(|e| e.into_inner()) = deposed;
    }

    /// The state Secret's name (`kit::names`).
    pub fn state_secret_name(&self) -> String {
        let r = &self.k.kind.resource;
        state::secret_name(&r.group, &r.kind, &self.name)
    }

    fn owner(&self) -> Result<OwnerReference> {
        self.obj
            .controller_owner_ref(&self.k.kind.resource)
            .ok_or_else(|| Error::InvalidSpec("object has no uid".into()))
    }

    /// The state this object stored, if any. A state Secret left by an earlier object of this
    /// kind and name (deleted, not collected yet) is not this one's state; any other Secret of
    /// the name is someone else's (a user's, another provider's kind of the same name) and
    /// stops the pass as `NotOwned`: taking it would lose their state, or create a duplicate
    /// of their object.
    pub async fn load_state(&self) -> Result<Option<Stored>> {
        let name = self.state_secret_name();
        let Some(secret) = self.secrets.get_opt(&name).await? else {
            self.set_state_seen(None);
            return self.load_legacy_state().await;
        };
        if state::is_seeded(&secret) {
            return self.adopt_seeded_state(&secret).await.map(Some);
        }
        match ownership::claim(&secret.metadata, &self.owner()?) {
            Claim::Mine => {
                // A newer leader wrote it: this replica must not act on it, nor over it.
                self.k
                    .ctx
                    .fence
                    .superseded_by(state::epoch_of(&secret).as_ref())?;
                self.verify_seal(&secret)?;
                self.set_state_seen(Some(&secret.metadata));
                let stored = Stored::from_secret(&secret)?;
                self.remember(&stored);
                Ok(Some(stored))
            }
            Claim::Predecessor => {
                self.set_state_seen(None);
                Ok(None)
            }
            Claim::Foreign(whose) => Err(Error::NotOwned(ownership::refused(
                &format!("Secret {name}"),
                &whose,
            ))),
        }
    }

    /// A state seeded from Terraform's (`kraken convert --state --seed-state`), which no
    /// object owns yet: this object's. Written back at once, owned, so it is never taken again
    /// and goes with the object.
    async fn adopt_seeded_state(&self, secret: &Secret) -> Result<Stored> {
        self.seeding_authorized(secret).await?;
        self.set_state_seen(Some(&secret.metadata));
        let stored = Stored::from_secret(secret)?;
        self.remember(&stored);
        self.save_state(&stored).await?;
        Ok(stored)
    }

    /// Whether the state Secret is as Kraken wrote it for this object ([`seal`]).
    fn verify_seal(&self, secret: &Secret) -> Result<()> {
        let uid = self.obj.uid().unwrap_or_default();
        Ok(seal::verify(secret, &self.k.ctx.plan_key, &uid)?)
    }

    /// A seeded state is taken only where the admission policy [`seal::SEEDING_POLICY`] is
    /// bound: there, a Secret labelled as seeded was written by a user allowed to seed.
    async fn seeding_authorized(&self, secret: &Secret) -> Result<()> {
        let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(self.k.ctx.client.clone());
        if bindings.get_opt(seal::SEEDING_POLICY).await?.is_some() {
            return Ok(());
        }
        Err(state::StateError::SeedNotAuthorized {
            name: secret.metadata.name.clone().unwrap_or_default(),
            policy: seal::SEEDING_POLICY,
        }
        .into())
    }

    /// An object created before state Secrets were named with the group keeps its state under
    /// the old name: read it there (only for an object that was created or adopted: the fence
    /// annotation or an external id says so), and let the next write move it.
    async fn load_legacy_state(&self) -> Result<Option<Stored>> {
        let created = self.annotation(super::CREATE_ATTEMPT_ANNOTATION).is_some()
            || self.status.get("externalId").is_some_and(|v| !v.is_null());
        if !created {
            return Ok(None);
        }
        let r = &self.k.kind.resource;
        let legacy = state::legacy_secret_name(&r.kind, &self.name);
        let Some(secret) = self.secrets.get_opt(&legacy).await? else {
            return Ok(None);
        };
        if ownership::claim(&secret.metadata, &self.owner()?) != Claim::Mine {
            return Ok(None);
        }
        self.verify_seal(&secret)?;
        *self.legacy_uid.lock().unwrap_or_else(|e| e.into_inner()) = secret.metadata.uid.clone();
        let stored = Stored::from_secret(&secret)?;
        self.remember(&stored);
        // Moved now, not on the next change: a settled object would read two names each pass.
        self.save_state(&stored).await?;
        Ok(Some(stored))
    }

    /// Deletes the old-named state Secret [`Self::load_legacy_state`] read, by uid, once the
    /// state is safe under its new name (or the object is gone).
    async fn retire_legacy_state(&self) -> Result<()> {
        let uid = self
            .legacy_uid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(uid) = uid else {
            return Ok(());
        };
        let legacy = state::legacy_secret_name(&self.k.kind.resource.kind, &self.name);
        self.count("secrets", "delete");
        Ok(ownership::delete_by_uid(&self.secrets, &legacy, &uid).await?)
    }

    /// Writes the state Secret, stamped with this replica's leader epoch (`kit::fence`), only
    /// while its leadership is current. It carries this object as its controller owner, so the
    /// API server refuses the write when another object controls a Secret of this name (made
    /// since [`Self::load_state`] looked). It is conditional on the version this pass read or
    /// last wrote: one written in between (by a newer leader) is not written over, and the
    /// pass stops as fenced.
    pub async fn save_state(&self, stored: &Stored) -> Result<()> {
        let name = self.state_secret_name();
        let epoch = self.k.ctx.fence.check()?;
        let stored = Stored {
            deposed: self.deposed(),
            policies: self.policies(),
            ..stored.clone()
        };
        let owner = self.owner()?;
        let mut secret = stored.to_secret(&name, &self.namespace, owner.clone());
        state::stamp_epoch(&mut secret, epoch.as_ref());
        seal::seal_secret(&mut secret, &self.k.ctx.plan_key, &owner.uid);
        let version = match self.state_version() {
            Some(v) => Some(v),
            None => self.version_to_write_over(&name).await?,
        };
        secret.metadata.resource_version = version;
        self.count("secrets", "apply");
        let written = self
            .secrets
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&secret),
            )
            .await;
        match written {
            Ok(s) => {
                self.set_state_seen(Some(&s.metadata));
                self.retire_legacy_state().await
            }
            // The precondition failed (an ownership refusal is a 422, below).
            Err(kube::Error::Api(e)) if e.code == 409 => Err(kraken_kit::fence::Fenced(format!(
                "the state Secret {name} changed since this pass read it"
            ))
            .into()),
            Err(e) if ownership::is_refusal(&e) => Err(Error::NotOwned(
                ownership::refusal_message(&e, &format!("Secret {name}")),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Writing a state Secret this pass did not read: the version of the one there now when
    /// it is a predecessor's (left by an earlier object of this name, taken over), `None` when
    /// there is none; one of this object's that appeared since the pass looked was written by
    /// another replica, and this pass stops as fenced.
    async fn version_to_write_over(&self, name: &str) -> Result<Option<String>> {
        let Some(current) = self.secrets.get_opt(name).await? else {
            return Ok(None);
        };
        match ownership::claim(&current.metadata, &self.owner()?) {
            Claim::Mine => Err(kraken_kit::fence::Fenced(format!(
                "the state Secret {name} was written since this pass looked"
            ))
            .into()),
            Claim::Predecessor => Ok(current.metadata.resource_version),
            // Written over by the apply, which the API server refuses (controller owner).
            Claim::Foreign(_) => Ok(current.metadata.resource_version),
        }
    }

    /// Deletes the state Secret this object stored (by uid: never a Secret of the name that is
    /// not the one it loaded or wrote).
    pub async fn delete_state(&self) -> Result<()> {
        self.retire_legacy_state().await?;
        let name = self.state_secret_name();
        let known = self.set_state_seen(None);
        let uid = match known {
            Some(uid) => Some(uid),
            // Not read in this pass (an orphaning deletion): whether there is one of this
            // object's, once, on the way out.
            None => match self.secrets.get_opt(&name).await? {
                Some(s) if ownership::claim(&s.metadata, &self.owner()?) == Claim::Mine => {
                    s.metadata.uid
                }
                _ => None,
            },
        };
        let Some(uid) = uid else {
            return Ok(());
        };
        self.count("secrets", "delete");
        Ok(ownership::delete_by_uid(&self.secrets, &name, &uid).await?)
    }

    /// Sets conditions in the status being built.
    /// Sets conditions; a message quoting a sensitive value this pass resolved shows
    /// `(sensitive)` in its place ([`super::echo`]).
    pub fn set_conditions(&mut self, updates: &[Set]) {
        let redacted: Vec<Set>;
        let updates = if self.sensitive_values.is_empty() {
            updates
        } else {
            redacted = updates
                .iter()
                .map(|u| Set {
                    message: self.sensitive_values.redact(&u.message),
                    ..u.clone()
                })
                .collect();
            &redacted
        };
        let current: Vec<Condition> = self
            .status
            .get("conditions")
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default();
        let now = kraken_kit::conditions::now();
        let merged = conditions::merge(&current, updates, self.generation(), &now);
        self.status["conditions"] = serde_json::to_value(merged).unwrap_or_else(|_| json!([]));
    }

    pub fn set_status_field(&mut self, key: &str, value: Json) {
        if value.is_null() {
            if let Some(map) = self.status.as_object_mut() {
                map.remove(key);
            }
        } else {
            self.status[key] = value;
        }
    }

    /// Writes the status built so far, if it differs from what the object has.
    pub async fn flush_status(&mut self) -> Result<()> {
        self.status["observedGeneration"] = json!(self.generation());
        if self.obj.data.get("status") == Some(&self.status) {
            return Ok(());
        }
        self.k.ctx.fence.check()?;
        for attempt in 0..3 {
            let mut body = self.obj.clone();
            body.data["status"] = self.status.clone();
            body.metadata.managed_fields = None;
            let plural = &self.k.kind.resource.plural;
            match status::replace(&self.api, &self.k.ctx.metrics, plural, &self.name, &body).await {
                Ok(obj) => {
                    self.obj = obj;
                    if self.has_finalizer() {
                        let version = self.obj.resource_version();
                        self.k
                            .wrote(&self.obj.uid().unwrap_or_default(), version.as_deref());
                    }
                    return Ok(());
                }
                Err(kube::Error::Api(e)) if e.code == 409 && attempt < 2 => {
                    // The object changed meanwhile (a spec edit, another writer): write the
                    // status on top of the current version; a new generation retriggers anyway.
                    if let Some(fresh) = self.api.get_opt(&self.name).await? {
                        self.obj = fresh;
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Queues an Event about the object (published in the background; see `events`).
    /// Publishes an Event; a note quoting a sensitive value this pass resolved shows
    /// `(sensitive)` in its place ([`super::echo`]).
    pub async fn event(&self, warning: bool, reason: &str, note: impl Into<String>) {
        let reference = self.obj.object_ref(&self.k.kind.resource);
        let note = self.sensitive_values.redact(&note.into());
        self.k
            .ctx
            .event((warning, reason, &note, "Reconcile"), reference);
    }
}

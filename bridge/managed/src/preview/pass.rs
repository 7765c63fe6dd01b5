//! Where `kraken plan` reads what a pass reads, writing nothing: [`DryRun`], the preview's
//! [`Pass`] through the shared steps up to the plan ([`crate::observe::up_to_plan`]). The
//! ProviderConfig is the set's, else the cluster's; the configuration comes from
//! [`super::values`] and the Secrets `spec.forProvider` names (the set's standing in for the
//! cluster's), with the arguments fed by outputs not known yet unknown; the stored state is the
//! live object's state Secret, read as a pass reads it (or a state seeded from Terraform's for
//! an object not applied yet). What an import or a recovery finds is planned with and never
//! written: no finalizer, no state Secret, no Event.

use std::collections::BTreeSet;

use kube::api::{Api, DynamicObject};
use kube::{Resource as _, ResourceExt as _};
use serde_json::Value as Json;

use super::super::target::OWNER_TAG_ANNOTATION;
use super::Shared;
use super::values::{self, Inputs};
use crate::CREATE_ATTEMPT_ANNOTATION;
use crate::error::{Error, Result};
use crate::observe::{Adoption, Observed, Pass};
use crate::spec::ManagedSpec;
use crate::state::{self, Stored};
use crate::target::Target;
use kraken_core_kinds::KindInfo;
use kraken_kit::ownership::{self, Claim};
use kraken_source::{Configured, config_value, provider_from, read_provider_config, secret_text};
use kraken_value::{PathStep, Value};

/// One object of the set, planned without a write.
pub(super) struct DryRun<'a> {
    shared: &'a Shared,
    /// The declarations whose outputs are not known yet.
    unknown: &'a BTreeSet<(String, String)>,
    kind: &'a KindInfo,
    doc: &'a Json,
    ns: &'a str,
    name: &'a str,
    /// The object as the cluster has it, when it is applied already.
    pub(super) live: Option<DynamicObject>,
    /// What administrators set on the namespace, as far as the user may read it.
    policy: crate::floor::NamespacePolicy,
    /// What the configuration step resolved (`valuesFrom` as shown, sensitive attributes).
    pub(super) inputs: Inputs,
    /// The state is one seeded from Terraform's, for an object not applied yet.
    pub(super) seeded: bool,
    /// The policy fields in force, as the state recorded them.
    pub(super) policies: Option<Vec<u8>>,
}

impl<'a> DryRun<'a> {
    pub(super) fn new(
        shared: &'a Shared,
        unknown: &'a BTreeSet<(String, String)>,
        (kind, doc): (&'a KindInfo, &'a Json),
        (ns, name): (&'a str, &'a str),
        (live, policy): (Option<DynamicObject>, crate::floor::NamespacePolicy),
    ) -> Self {
        Self {
            policy,
            shared,
            unknown,
            kind,
            doc,
            ns,
            name,
            live,
            inputs: Inputs::default(),
            seeded: false,
            policies: None,
        }
    }

    /// The configuration value, with the owner tag the operator would add; records the inputs
    /// it was resolved from.
    pub(super) async fn resolve(&mut self, t: &Target<'_>, spec: &ManagedSpec) -> Result<Value> {
        let inputs = values::inputs(
            self.shared,
            self.unknown,
            (t.p, t.type_name),
            self.ns,
            (&spec.for_provider, &spec.values_from),
        )
        .await?;
        let config = configuration(self.shared, t, self.ns, spec, &inputs).await?;
        self.inputs = inputs;
        Ok(owned(t, spec, self.doc, self.live.as_ref(), config))
    }
}

impl Pass for DryRun<'_> {
    async fn provider(&self, spec: &ManagedSpec) -> Result<Configured> {
        let pc = provider_config(self.shared, self.ns, spec.provider_config()).await?;
        Ok(provider_from(&self.shared.source, self.kind, self.ns, &pc).await?)
    }

    /// Always resolved: an input not known yet is unknown, not waited for.
    async fn configuration(&mut self, t: &Target<'_>, spec: &ManagedSpec) -> Result<Option<Value>> {
        self.resolve(t, spec).await.map(Some)
    }

    async fn load_state(&mut self) -> Result<Option<Stored>> {
        let stored = match &self.live {
            Some(obj) => load_state(self.shared, self.kind, obj).await?,
            None => seeded_state(self.shared, self.kind, (self.ns, self.name)).await?,
        };
        self.seeded = self.live.is_none() && stored.is_some();
        self.policies = stored.as_ref().and_then(|s| s.policies.clone());
        Ok(stored)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        let live = self.live.as_ref()?;
        live.annotations().get(key).map(String::as_str)
    }

    fn uid(&self) -> Option<&str> {
        self.live.as_ref()?.metadata.uid.as_deref()
    }

    fn who(&self) -> (&str, &str) {
        (self.ns, self.name)
    }

    async fn namespace_policy(&self) -> crate::floor::NamespacePolicy {
        self.policy.clone()
    }

    /// A dry run has no key to check a seal with: only the owner tag proves what an interrupted
    /// create made.
    fn fence_holds(&self, _: &str) -> bool {
        false
    }

    /// Planned with, never written.
    async fn adopt(&mut self, _: &Target<'_>, _: Adoption<'_>, _: &mut Observed) -> Result<()> {
        Ok(())
    }
}

/// `config` with the owner tag the operator would add: the live object's uid, unknown before
/// it exists (none for an object adopted by importId or with the tag turned off).
fn owned(
    t: &Target<'_>,
    spec: &ManagedSpec,
    doc: &Json,
    live: Option<&DynamicObject>,
    config: Value,
) -> Value {
    let tag_off = doc["metadata"]["annotations"][OWNER_TAG_ANNOTATION] == "off";
    if spec.adopts() || tag_off {
        return config;
    }
    let uid = live
        .and_then(|o| o.metadata.uid.clone())
        .map_or_else(|| Value::Unknown(Default::default()), Value::string);
    t.with_owner_tag(config, uid)
}

/// The ProviderConfig `name`: the set's, else the cluster's (read once).
async fn provider_config(
    shared: &Shared,
    ns: &str,
    name: &str,
) -> Result<kraken_core_kinds::ProviderConfig> {
    let key = (ns.to_owned(), name.to_owned());
    if let Some(pc) = shared.provider_configs.get(&key) {
        return Ok(pc.clone());
    }
    let cached = shared
        .cluster_provider_configs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned();
    if let Some(pc) = cached {
        return Ok(pc);
    }
    let pc = read_provider_config(&shared.client, ns, name).await?;
    shared
        .cluster_provider_configs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, pc.clone());
    Ok(pc)
}

/// The configuration value, with the arguments fed by outputs not known yet unknown.
async fn configuration(
    shared: &Shared,
    t: &Target<'_>,
    ns: &str,
    spec: &ManagedSpec,
    inputs: &Inputs,
) -> Result<Value> {
    // The Secrets spec.forProvider names: the set's stand in for the cluster's.
    let mut secrets = std::collections::HashMap::new();
    for r in t.fields().secret_refs(&inputs.for_provider) {
        let Some(secret) = values::secret(shared, ns, &r.name).await? else {
            let missing = format!("Secret {} not found", r.name);
            return Err(kraken_source::Error::SecretMissing(missing).into());
        };
        let text = secret_text(&secret, &r.name, &r.key)?;
        secrets.insert(r, text);
    }
    let with_values = !spec.values_from.is_empty();
    let mut config = config_value(
        t.p,
        t.type_name,
        &inputs.for_provider,
        with_values,
        &secrets,
    )?;
    for steps in &inputs.unknown {
        set_unknown(&mut config, steps);
    }
    Ok(config)
}

/// Makes the value at `steps` unknown; where the path runs through a null or a map key not
/// there yet, the value above it becomes unknown as a whole (what it will hold is not known
/// either, and a change shows an unknown whole value as `(known after apply)`, where a
/// partly unknown one would print its unknown parts as null).
fn set_unknown(v: &mut Value, steps: &[PathStep]) {
    let Some((first, rest)) = steps.split_first() else {
        *v = Value::unknown();
        return;
    };
    if let Value::Typed(_, inner) = v {
        return set_unknown(inner, steps);
    }
    let is_object = matches!(v, Value::Object(_));
    let child = match (first, &mut *v) {
        (PathStep::Attr(k) | PathStep::Key(k), Value::Object(m) | Value::Map(m)) => m.get_mut(k),
        (PathStep::Index(i), Value::List(items) | Value::Tuple(items)) => {
            usize::try_from(*i).ok().and_then(|i| items.get_mut(i))
        }
        _ => None,
    };
    match child {
        Some(c) if c.is_null() => *c = Value::unknown(),
        Some(c) => set_unknown(c, rest),
        // A map key not there yet; an object always holds every attribute (never reached).
        None if !is_object => *v = Value::unknown(),
        None => {}
    }
}

/// The state seeded from Terraform's for an object not applied yet (`kraken convert --state
/// --seed-state`): the pass will take it as its own.
async fn seeded_state(
    shared: &Shared,
    kind: &KindInfo,
    (ns, name): (&str, &str),
) -> Result<Option<Stored>> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(shared.client.clone(), ns);
    let r = &kind.resource;
    match secrets
        .get_opt(&state::secret_name(&r.group, &r.kind, name))
        .await?
    {
        Some(s) if state::is_seeded(&s) => Ok(Some(Stored::from_secret(&s)?)),
        _ => Ok(None),
    }
}

/// The state the live object stored, read as a pass reads it (a Secret of its predecessor is
/// not its state; one of someone else stops the plan as it would stop the pass).
async fn load_state(
    shared: &Shared,
    kind: &KindInfo,
    obj: &DynamicObject,
) -> Result<Option<Stored>> {
    let (ns, name) = (
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default(),
    );
    let r = &kind.resource;
    let owner = obj
        .controller_owner_ref(r)
        .ok_or_else(|| Error::InvalidSpec("the live object has no uid".into()))?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(shared.client.clone(), &ns);
    let current = state::secret_name(&r.group, &r.kind, &name);
    if let Some(secret) = secrets.get_opt(&current).await? {
        if state::is_seeded(&secret) {
            return Ok(Some(Stored::from_secret(&secret)?));
        }
        return match ownership::claim(&secret.metadata, &owner) {
            Claim::Mine => Ok(Some(Stored::from_secret(&secret)?)),
            Claim::Predecessor => Ok(None),
            Claim::Foreign(whose) => Err(Error::NotOwned(ownership::refused(
                &format!("Secret {current}"),
                &whose,
            ))),
        };
    }
    let created = obj.annotations().contains_key(CREATE_ATTEMPT_ANNOTATION)
        || obj
            .data
            .pointer("/status/externalId")
            .is_some_and(|v| !v.is_null());
    if !created {
        return Ok(None);
    }
    let legacy = state::legacy_secret_name(&r.kind, &name);
    match secrets.get_opt(&legacy).await? {
        Some(s) if ownership::claim(&s.metadata, &owner) == Claim::Mine => {
            Ok(Some(Stored::from_secret(&s)?))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_values_land_at_their_path_or_replace_the_null_above_it() {
        let attr = |n: &str| PathStep::Attr(n.into());
        let key = |k: &str| PathStep::Key(k.into());
        let mut v = Value::object([
            ("name", Value::string("d")),
            (
                "tags",
                Value::Map([("mode".into(), Value::string("fast"))].into()),
            ),
            ("settings", Value::Null),
            ("labels", Value::List(vec![Value::string("x")])),
        ]);
        set_unknown(&mut v, &[attr("labels"), PathStep::Index(0)]);
        set_unknown(&mut v, &[attr("tags"), key("src")]);
        set_unknown(&mut v, &[attr("settings"), attr("mode")]);
        set_unknown(&mut v, &[attr("name")]);
        let want = Value::object([
            ("name", Value::unknown()),
            ("tags", Value::unknown()),
            ("settings", Value::unknown()),
            ("labels", Value::List(vec![Value::unknown()])),
        ]);
        assert_eq!(v, want);
    }
}

//! The provider and resource type a pass works with ([`Target`]), and what it does with them
//! that every step shares: restore stored state, carry out a plan, persist state ([`Saved`]),
//! and word the provider's diagnostics in Kubernetes field names.

use super::error::{Error, Result};
use super::state::{Deposed, Stored};
use super::write::Run;
use kraken_kit::errors::chain as anyhow_chain;
use kraken_provider::lifecycle::{self, Action as PlanAction, Applied, LifecycleError, Plan};
use kraken_provider::{Diagnostic, DiagnosticsExt as _, ProviderError, Severity, UpgradeRequest};
use kraken_source::Configured;
use kraken_value::fields::FieldMap;
use kraken_value::json::{decode_json_bytes, encode_json_bytes};
use kraken_value::{AttrPath, Type, Value};

/// What the state Secret held, restored to a value of the current schema.
pub(super) struct Restored {
    pub(super) state: Value,
    pub(super) private: Vec<u8>,
    pub(super) stored: Option<Stored>,
    /// The state must be written back even if unchanged (it was upgraded).
    upgraded: bool,
}

/// The tag Kraken adds to every object it creates of a type with a `tags` argument (a map of
/// strings), valued with the managed resource's uid: after a crash between the create and the
/// save of its state, it is how the object is found again (see [`super::observe::recover`]).
/// It is part of the configuration Kraken plans with, not of `spec`, so it is never drift; an
/// object adopted with `spec.importId` never gets it (adoption changes nothing).
pub const OWNER_TAG: &str = "kraken.dev/owner-uid";
/// `"off"` on a managed resource: Kraken adds no [`OWNER_TAG`] to what it creates (tag
/// policies that forbid it, or an endpoint that cannot tag: moto's S3 Control on loopback).
/// Recovery after an interrupted create then has only `importId` and `name` to go by.
pub const OWNER_TAG_ANNOTATION: &str = "kraken.dev/owner-tag";

/// Everything one pass needs about the resource's provider and type.
pub(super) struct Target<'p> {
    pub(super) p: &'p Configured,
    pub(super) type_name: &'p str,
    ty: Type,
    version: i64,
}

impl<'p> Target<'p> {
    /// Resource type `type_name` of provider `p`.
    pub(super) fn new(p: &'p Configured, type_name: &'p str) -> Result<Self> {
        let resource = p.resource(type_name)?;
        Ok(Self {
            p,
            type_name,
            ty: resource.block.implied_type(),
            version: resource.version,
        })
    }

    /// Whether objects of this type take tags: a `tags` argument that is a map of strings (a
    /// data source never does: it creates nothing).
    pub(super) fn takes_tags(&self) -> bool {
        !self.p.data_source
            && matches!(&self.ty, Type::Object(o)
                if matches!(o.attributes.get("tags"), Some(Type::Map(e)) if **e == Type::String))
    }

    /// `config` with the [`OWNER_TAG`] set to `uid` (a value, or unknown while the object is
    /// not applied yet) when the type takes tags.
    pub(super) fn with_owner_tag(&self, mut config: Value, uid: Value) -> Value {
        if !self.takes_tags() {
            return config;
        }
        if let Value::Object(attrs) = &mut config {
            let tags = attrs.entry("tags".to_owned()).or_insert(Value::Null);
            match tags {
                Value::Map(m) => {
                    m.insert(OWNER_TAG.to_owned(), uid);
                }
                Value::Null => {
                    *tags = Value::Map([(OWNER_TAG.to_owned(), uid)].into_iter().collect());
                }
                // Unknown until an input resolves: the provider sees the tag once it does.
                _ => {}
            }
        }
        config
    }

    pub(super) fn host(&self) -> &dyn kraken_provider::Plugin {
        self.p.host.as_ref()
    }

    pub(super) fn fields(&self) -> &FieldMap {
        &self.p.fields
    }

    pub(super) fn lifecycle_err(&self, what: &str, e: LifecycleError) -> Error {
        match e {
            LifecycleError::Rejected(diags) => Error::Provider(describe(&diags, self.fields())),
            LifecycleError::Provider(pe @ ProviderError::Timeout { .. }) => {
                Error::ProviderTimeout(format!("{what} {}: {}", self.type_name, anyhow_chain(&pe)))
            }
            LifecycleError::Provider(pe) => Error::ProviderUnavailable(format!(
                "{what} {}: {}",
                self.type_name,
                anyhow_chain(&pe)
            )),
        }
    }

    pub(super) fn encode(&self, state: &Value) -> Result<Option<Vec<u8>>> {
        if state.is_null() {
            return Ok(None);
        }
        encode_json_bytes(state, &self.ty).map(Some).map_err(|e| {
            Error::Provider(format!(
                "the provider returned a state Kraken cannot store: {e}"
            ))
        })
    }

    /// The object `state` describes, as the deposed object of a create-before-destroy
    /// replacement.
    pub(super) fn depose(&self, state: &Value, private: &[u8]) -> Result<Option<Deposed>> {
        Ok(self.encode(state)?.map(|state| Deposed {
            state,
            private: private.to_vec(),
            schema_version: self.version,
        }))
    }

    /// A deposed object's state, restored to a value of the current schema.
    pub(super) async fn restore_deposed(&self, deposed: &Deposed) -> Result<Restored> {
        self.restore(Some(Stored {
            state: Some(deposed.state.clone()),
            private: deposed.private.clone(),
            schema_version: deposed.schema_version,
            ..Stored::default()
        }))
        .await
    }

    pub(super) async fn restore(&self, stored: Option<Stored>) -> Result<Restored> {
        let Some(bytes) = stored.as_ref().and_then(|s| s.state.clone()) else {
            return Ok(Restored {
                state: Value::Null,
                private: stored
                    .as_ref()
                    .map(|s| s.private.clone())
                    .unwrap_or_default(),
                stored,
                upgraded: false,
            });
        };
        let private = stored
            .as_ref()
            .map(|s| s.private.clone())
            .unwrap_or_default();
        let from_version = stored.as_ref().map_or(0, |s| s.schema_version);
        if from_version == self.version
            && let Ok(state) = decode_json_bytes(&bytes, &self.ty)
        {
            return Ok(Restored {
                state,
                private,
                stored,
                upgraded: false,
            });
        }
        let resp = self
            .host()
            .upgrade_resource_state(UpgradeRequest {
                type_name: self.type_name.to_owned(),
                version: from_version,
                raw_state_json: bytes,
            })
            .await
            .map_err(|e| {
                Error::ProviderUnavailable(format!("upgrading state: {}", anyhow_chain(&e)))
            })?;
        if resp.diagnostics.has_errors() {
            return Err(Error::Provider(describe(&resp.diagnostics, self.fields())));
        }
        Ok(Restored {
            state: resp.upgraded_state,
            private,
            stored,
            upgraded: true,
        })
    }
}

/// Plans the destroy of the object `state` describes and carries it out.
pub(super) async fn destroy_object(
    run: &Run<'_>,
    t: &Target<'_>,
    state: &Value,
    private: &[u8],
) -> Result<Applied> {
    let plan = lifecycle::plan(t.host(), t.type_name, state, private, &Value::Null)
        .await
        .map_err(|e| t.lifecycle_err("plan destroy", e))?;
    apply_plan(run, t, &plan).await
}

/// Carries out a plan; a failed conversation (crash, transport) is an `ApplyFailed` Event
/// and a transient error: the provider may or may not have acted. Only while this replica's
/// leadership is current (`kit::fence`): one that wakes from a pause acts on nothing.
pub(super) async fn apply_plan(run: &Run<'_>, t: &Target<'_>, plan: &Plan) -> Result<Applied> {
    run.k.ctx.fence.check()?;
    match lifecycle::apply(t.host(), plan).await {
        Ok(applied) => Ok(applied),
        Err(e) => {
            let err = t.lifecycle_err(&format!("{} of", plan.action), e);
            run.event(true, "ApplyFailed", err.message()).await;
            Err(err)
        }
    }
}

/// An apply the provider answered with errors: an `ApplyFailed` Event and a provider error.
pub(super) async fn fail_on_errors(run: &Run<'_>, t: &Target<'_>, applied: &Applied) -> Result<()> {
    if applied.diagnostics.has_errors() {
        let message = describe(&applied.diagnostics, t.fields());
        run.event(true, "ApplyFailed", message.clone()).await;
        return Err(Error::Provider(message));
    }
    Ok(())
}

/// The state Secret's content as last written, so unchanged state is not written again.
pub(super) struct Saved {
    state: Value,
    private: Vec<u8>,
    upgraded: bool,
}

impl Default for Saved {
    fn default() -> Self {
        Self {
            state: Value::Null,
            private: Vec::new(),
            upgraded: false,
        }
    }
}

impl Saved {
    pub(super) fn from(r: &Restored) -> Self {
        Self {
            state: r.state.clone(),
            private: r.private.clone(),
            upgraded: r.upgraded,
        }
    }

    pub(super) async fn write(
        &mut self,
        run: &Run<'_>,
        t: &Target<'_>,
        state: &Value,
        private: &[u8],
        attempt: Option<String>,
    ) -> Result<()> {
        let stored = Stored {
            state: t.encode(state)?,
            private: private.to_vec(),
            schema_version: t.version,
            create_attempt: attempt,
            // The run's: `save_state` keeps them.
            deposed: None,
            policies: None,
        };
        run.save_state(&stored).await?;
        self.state = state.clone();
        self.private = private.to_vec();
        self.upgraded = false;
        Ok(())
    }

    /// The next [`Self::write_if_changed`] writes even if the state is unchanged (something
    /// else the state Secret records changed: the policy fields in force).
    pub(super) fn must_write(&mut self) {
        self.upgraded = true;
    }

    pub(super) async fn write_if_changed(
        &mut self,
        run: &Run<'_>,
        t: &Target<'_>,
        state: &Value,
        private: &[u8],
        attempt: Option<String>,
    ) -> Result<()> {
        if !self.upgraded && self.state == *state && self.private == private {
            return Ok(());
        }
        self.write(run, t, state, private, attempt).await
    }
}

/// The paths a plan changes, as Kubernetes field paths: for a replacement the ones forcing it,
/// for an update every top-level attribute whose value changes, for a create or delete none
/// (the whole object).
pub(super) fn plan_paths(plan: &Plan, fields: &FieldMap) -> Vec<String> {
    if matches!(plan.action, PlanAction::Create | PlanAction::Delete) {
        return Vec::new();
    }
    let mut paths: Vec<String> = if plan.action == PlanAction::Replace {
        plan.requires_replace
            .iter()
            .map(|p| fields.kube_path(p))
            .collect()
    } else {
        let empty = Default::default();
        let before = match plan.prior_state.untyped() {
            Value::Object(m) => m,
            _ => &empty,
        };
        match plan.planned_state.untyped() {
            Value::Object(after) => after
                .iter()
                .filter(|(k, v)| before.get(*k) != Some(*v))
                .map(|(k, _)| fields.kube_path(&AttrPath::root().attr(k.clone())))
                .collect(),
            _ => Vec::new(),
        }
    };
    paths.sort();
    paths.dedup();
    paths
}

/// Error diagnostics as one message, attribute paths in Kubernetes field names.
pub(super) fn describe(diags: &[Diagnostic], fields: &FieldMap) -> String {
    let parts: Vec<String> = diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| {
            let mut s = d.summary.clone();
            if !d.detail.is_empty() {
                s.push_str(": ");
                s.push_str(d.detail.trim());
            }
            if let Some(path) = &d.attribute {
                s.push_str(&format!(" (at {})", fields.kube_path(path)));
            }
            s
        })
        .collect();
    if parts.is_empty() {
        "the provider reported an error without a message".into()
    } else {
        parts.join("; ")
    }
}

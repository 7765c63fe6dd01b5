//! Resource lifecycle on top of [`Provider`]: plan a change the way Terraform does, then carry
//! it out.
//!
//! `plan` validates the configuration, builds the proposed new state, asks the provider for a
//! plan and classifies it (create, update, replace, delete, no-op). A replacement is only a
//! replacement if an attribute the provider says forces one actually changes (Terraform filters
//! `requires_replace` the same way). `apply` then runs the plan; a replacement is
//! destroy-then-create, each half planned and applied on its own so the provider sees the same
//! calls Terraform would make.

use std::fmt;

use super::proposed::proposed_new;
use super::{
    ApplyRequest, Diagnostic, DiagnosticsExt as _, PlanRequest, Plugin, ProviderError, ReadRequest,
};
use kraken_value::{AttrPath, PathStep, Value};

/// What a plan will do to the real object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    NoOp,
    Create,
    Update,
    Replace,
    Delete,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::NoOp => "NoOp",
            Action::Create => "Create",
            Action::Update => "Update",
            Action::Replace => "Replace",
            Action::Delete => "Delete",
        })
    }
}

/// A classified plan, ready for [`apply`].
#[derive(Debug, Clone)]
pub struct Plan {
    pub action: Action,
    pub type_name: String,
    pub prior_state: Value,
    pub prior_private: Vec<u8>,
    pub config: Value,
    pub planned_state: Value,
    pub planned_private: Vec<u8>,
    /// The paths that force replacement and actually change.
    pub requires_replace: Vec<AttrPath>,
    /// Warnings from validation and planning.
    pub diagnostics: Vec<Diagnostic>,
}

/// The result of carrying out a plan. `new_state` is the truth even when `diagnostics` has
/// errors: a failed apply may still have created something, and the provider says what.
#[derive(Debug, Clone)]
pub struct Applied {
    pub new_state: Value,
    pub private: Vec<u8>,
    pub diagnostics: Vec<Diagnostic>,
}

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error("{}", .0.error_summary())]
    Rejected(Vec<Diagnostic>),
}

/// Plan moving `type_name` from `prior` (null: does not exist) to `config` (null: destroy).
pub async fn plan(
    provider: &dyn Plugin,
    type_name: &str,
    prior: &Value,
    prior_private: &[u8],
    config: &Value,
) -> Result<Plan, LifecycleError> {
    let schema = provider
        .schema_for(&[(super::TypeOf::Resource, type_name)])
        .await?;
    let Some(resource) = schema.resource(type_name) else {
        return Err(ProviderError::UnknownType {
            kind: "resource",
            type_name: type_name.to_string(),
        }
        .into());
    };
    let mut diagnostics = Vec::new();
    if !config.is_null() {
        let diags = provider.validate_resource_config(type_name, config).await?;
        if diags.has_errors() {
            return Err(LifecycleError::Rejected(diags));
        }
        diagnostics.extend(diags);
    }
    if config.is_null() && prior.is_null() {
        return Ok(noop(type_name, prior, prior_private, config, diagnostics));
    }
    let proposed = proposed_new(&resource.block, prior, config);
    let resp = provider
        .plan_resource_change(PlanRequest {
            type_name: type_name.to_string(),
            prior_state: prior.clone(),
            proposed_new_state: proposed,
            config: config.clone(),
            prior_private: prior_private.to_vec(),
        })
        .await?;
    if resp.diagnostics.has_errors() {
        return Err(LifecycleError::Rejected(resp.diagnostics));
    }
    diagnostics.extend(resp.diagnostics);
    let requires_replace: Vec<AttrPath> = resp
        .requires_replace
        .into_iter()
        .filter(|path| lookup(prior, path) != lookup(&resp.planned_state, path))
        .collect();
    let action = if prior.is_null() {
        Action::Create
    } else if config.is_null() {
        Action::Delete
    } else if !requires_replace.is_empty() {
        Action::Replace
    } else if resp.planned_state != *prior {
        // As Terraform decides: by the values alone. A plan that only changes the provider's
        // private data (SDKv2 providers put their timeouts and schema version there, which an
        // import leaves out) changes nothing in the cloud; applying it would run the
        // provider's update for nothing.
        Action::Update
    } else {
        Action::NoOp
    };
    Ok(Plan {
        action,
        type_name: type_name.to_string(),
        prior_state: prior.clone(),
        prior_private: prior_private.to_vec(),
        config: config.clone(),
        planned_state: resp.planned_state,
        planned_private: resp.planned_private,
        requires_replace,
        diagnostics,
    })
}

fn noop(
    type_name: &str,
    prior: &Value,
    prior_private: &[u8],
    config: &Value,
    diagnostics: Vec<Diagnostic>,
) -> Plan {
    Plan {
        action: Action::NoOp,
        type_name: type_name.to_string(),
        prior_state: prior.clone(),
        prior_private: prior_private.to_vec(),
        config: config.clone(),
        planned_state: prior.clone(),
        planned_private: prior_private.to_vec(),
        requires_replace: Vec::new(),
        diagnostics,
    }
}

/// Carry out a plan. A replacement destroys the old object first, then creates the new one;
/// if the destroy fails, nothing is created and the old state is returned with the errors.
pub async fn apply(provider: &dyn Plugin, plan: &Plan) -> Result<Applied, LifecycleError> {
    match plan.action {
        Action::NoOp => Ok(Applied {
            new_state: plan.prior_state.clone(),
            private: plan.prior_private.clone(),
            diagnostics: Vec::new(),
        }),
        Action::Create | Action::Update | Action::Delete => apply_one(provider, plan).await,
        Action::Replace => {
            let destroy = self::plan(
                provider,
                &plan.type_name,
                &plan.prior_state,
                &plan.prior_private,
                &Value::Null,
            )
            .await?;
            let destroyed = apply_one(provider, &destroy).await?;
            if destroyed.diagnostics.has_errors() || !destroyed.new_state.is_null() {
                return Ok(destroyed);
            }
            let create =
                self::plan(provider, &plan.type_name, &Value::Null, &[], &plan.config).await?;
            apply_one(provider, &create).await
        }
    }
}

async fn apply_one(provider: &dyn Plugin, plan: &Plan) -> Result<Applied, LifecycleError> {
    let resp = provider
        .apply_resource_change(ApplyRequest {
            type_name: plan.type_name.clone(),
            prior_state: plan.prior_state.clone(),
            planned_state: plan.planned_state.clone(),
            config: plan.config.clone(),
            planned_private: plan.planned_private.clone(),
        })
        .await?;
    Ok(Applied {
        new_state: resp.new_state,
        private: resp.private,
        diagnostics: resp.diagnostics,
    })
}

/// Import an existing object by its provider-specific id or its resource identity, and read it
/// back, as `terraform import` does. Returns the state and private bytes of the object of
/// `type_name`.
pub async fn import(
    provider: &dyn Plugin,
    type_name: &str,
    by: &super::ImportBy,
) -> Result<Applied, LifecycleError> {
    let resp = provider.import_resource_state(type_name, by).await?;
    if resp.diagnostics.has_errors() {
        return Err(LifecycleError::Rejected(resp.diagnostics));
    }
    let Some(found) = resp.imported.into_iter().find(|r| r.type_name == type_name) else {
        return Err(LifecycleError::Rejected(vec![Diagnostic {
            severity: super::Severity::Error,
            summary: format!("import of {type_name} {by} returned no object"),
            detail: String::new(),
            attribute: None,
        }]));
    };
    read(provider, type_name, &found.state, &found.private).await
}

/// Refresh: read the live object. A null `new_state` means it no longer exists.
pub async fn read(
    provider: &dyn Plugin,
    type_name: &str,
    state: &Value,
    private: &[u8],
) -> Result<Applied, LifecycleError> {
    let resp = provider
        .read_resource(ReadRequest {
            type_name: type_name.to_string(),
            current_state: state.clone(),
            private: private.to_vec(),
        })
        .await?;
    if resp.diagnostics.has_errors() {
        return Err(LifecycleError::Rejected(resp.diagnostics));
    }
    Ok(Applied {
        new_state: resp.new_state,
        private: resp.private,
        diagnostics: resp.diagnostics,
    })
}

/// Read data source `type_name` with `config`: validate it, then read. The state it answers
/// (the configuration with the computed attributes filled in) and its warnings.
pub async fn read_data(
    provider: &dyn Plugin,
    type_name: &str,
    config: &Value,
) -> Result<(Value, Vec<Diagnostic>), LifecycleError> {
    let mut diagnostics = provider
        .validate_data_source_config(type_name, config)
        .await?;
    if diagnostics.has_errors() {
        return Err(LifecycleError::Rejected(diagnostics));
    }
    let resp = provider.read_data_source(type_name, config).await?;
    if resp.diagnostics.has_errors() {
        return Err(LifecycleError::Rejected(resp.diagnostics));
    }
    diagnostics.extend(resp.diagnostics);
    if resp.state.is_null() {
        return Err(LifecycleError::Rejected(vec![Diagnostic {
            severity: super::Severity::Error,
            summary: format!("reading data source {type_name} returned no state"),
            detail: String::new(),
            attribute: None,
        }]));
    }
    Ok((resp.state, diagnostics))
}

/// The value at `path`, or `None` when the path does not exist in `v`.
pub fn lookup<'a>(v: &'a Value, path: &AttrPath) -> Option<&'a Value> {
    let mut cur = v;
    for step in &path.steps {
        cur = match (step, cur.untyped()) {
            (PathStep::Attr(name), Value::Object(map)) => map.get(name)?,
            (PathStep::Key(key), Value::Map(map) | Value::Object(map)) => map.get(key)?,
            (PathStep::Index(i), Value::List(items) | Value::Tuple(items) | Value::Set(items)) => {
                items.get(usize::try_from(*i).ok()?)?
            }
            _ => return None,
        };
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_follows_attributes_keys_and_indexes() {
        let v = Value::Object(
            [(
                "rules".to_string(),
                Value::List(vec![Value::Map(
                    [("k".to_string(), Value::String("v".into()))].into(),
                )]),
            )]
            .into(),
        );
        let path = AttrPath::root().attr("rules").index(0).key("k");
        assert_eq!(lookup(&v, &path), Some(&Value::String("v".into())));
        let missing = AttrPath::root().attr("nope");
        assert_eq!(lookup(&v, &missing), None);
        let bad_index = AttrPath::root().attr("rules").index(-1);
        assert_eq!(lookup(&v, &bad_index), None);
    }
}

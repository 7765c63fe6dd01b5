//! Kubernetes field names ↔ Terraform attribute names, for one resource type.
//!
//! The generated CRDs name every field in lowerCamelCase and replace a sensitive argument `x`
//! with `xSecretRef`; the provider speaks Terraform's names. A [`FieldMap`] translates in the
//! steps of a reconcile that cross that line:
//!
//! - *build the configuration*: [`FieldMap::secret_refs`] says which Secrets to fetch, then
//!   [`FieldMap::spec_to_tf`] renames `spec.forProvider`, resolves the Secret references and
//!   fills in absent nested blocks, ready for [`crate::kube::from_kube_json`];
//! - *write status*: [`FieldMap::state_to_status`] turns state into `status.atProvider`;
//! - *report*: [`FieldMap::kube_path`] names a provider diagnostic's or a plan's attribute path
//!   as the field a user wrote.
//!
//! The map is built from codegen's IR ([`kraken_codegen::ir::build`]), so it is by
//! construction the mapping the CRDs were generated with. The IR does not say which fields
//! are nested blocks nor the types of sensitive arguments, so the constructor reads those from
//! the schema alongside and keeps a compact tree without descriptions (submodule `tree`): a
//! map lives as long as its kind's controller and is shared by every reconcile.
//!
//! Scalars, and values whose JSON shape does not match the schema, pass through unchanged:
//! `from_kube_json` checks them against the type and reports a Terraform path, which
//! [`FieldMap::kube_path`] maps back. Below `dynamic` and tuple types values are plain JSON
//! keyed by Terraform's own names (as in the CRDs, see [`kraken_codegen::names`]).

mod json_path;
mod render;
mod tree;
mod walk;

pub use json_path::set_json_path;
pub use walk::ArgsToSpec;

use kraken_codegen::names::SECRET_REF_SUFFIX;
use kraken_codegen::schema::Schema;
use serde_json::{Map, Value as Json};

use crate::{AttrPath, PathStep};
use render::render;
use tree::{Level, Node, Slot, views};
use walk::{args_object, refs_in_object, secret_ref, status_object};

#[cfg(test)]
mod tests;

/// Why a spec could not be translated. The `Secret*` variants are made by the caller's
/// Secret lookup and passed through unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error("{path}: unknown field")]
    UnknownField { path: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("{path}: already set")]
    AlreadySet { path: String },
    #[error("secret {name} not found")]
    SecretNotFound { name: String },
    #[error("secret {name} has no key {key}")]
    SecretKeyNotFound { name: String, key: String },
}

/// A key of a Secret in the resource's namespace, as an `xSecretRef` field names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SecretRef {
    pub name: String,
    pub key: String,
}

/// The field mapping of one resource type (or of a provider's configuration block).
#[derive(Debug, Clone)]
pub struct FieldMap {
    spec: Level,
    status: Level,
    /// Where `spec` sits in the object (`spec.forProvider`), for error and diagnostic paths.
    spec_base: &'static [&'static str],
    /// Where `status` sits; `None` when the object has no status view (a ProviderConfig).
    status_base: Option<&'static [&'static str]>,
    /// A sensitive argument may also be given as a plain value under its own name.
    plain_sensitive: bool,
}

impl FieldMap {
    /// For a managed resource type: `spec.forProvider` and `status.atProvider`.
    pub fn for_resource(type_name: &str, schema: &Schema) -> Self {
        let (spec, status) = views(type_name, schema);
        Self {
            spec,
            status,
            spec_base: &["spec", "forProvider"],
            status_base: Some(&["status", "atProvider"]),
            plain_sensitive: false,
        }
    }

    /// For a provider's configuration block (`ProviderConfig.spec.config`): a sensitive
    /// argument `x` is accepted under its plain name `x` (the operator has already merged
    /// `configFrom` Secret values in), as well as `xSecretRef`.
    pub fn for_provider_config(schema: &Schema) -> Self {
        let (spec, status) = views("provider", schema);
        Self {
            spec,
            status,
            spec_base: &["spec", "config"],
            status_base: None,
            plain_sensitive: true,
        }
    }

    /// `spec.forProvider` (Kubernetes names) → JSON keyed by Terraform names, ready for
    /// [`crate::kube::from_kube_json`] with the block's implied type.
    ///
    /// `xSecretRef` fields are resolved through `secret`, whose errors are returned as they
    /// are. A Secret value is the argument's text, or its JSON (keyed by Terraform names)
    /// when the argument's type is a collection, object or `dynamic`. Absent or null nested
    /// blocks become what Terraform configures for a block that is not written: `[]` for
    /// list and set nesting, `{}` for map nesting, the empty object for group nesting, null
    /// for single nesting.
    pub fn spec_to_tf(
        &self,
        for_provider: &Json,
        secret: &mut dyn FnMut(&SecretRef) -> Result<String, FieldError>,
    ) -> Result<Json, FieldError> {
        self.walk_spec(for_provider, secret, self.plain_sensitive)
    }

    /// Like [`FieldMap::spec_to_tf`], with sensitive arguments also accepted under their
    /// plain names: for a `spec.forProvider` into which the operator merged values resolved
    /// from `spec.valuesFrom` (the CRD itself has no such field, so users cannot write one).
    pub fn spec_to_tf_with_values(
        &self,
        for_provider: &Json,
        secret: &mut dyn FnMut(&SecretRef) -> Result<String, FieldError>,
    ) -> Result<Json, FieldError> {
        self.walk_spec(for_provider, secret, true)
    }

    fn walk_spec(
        &self,
        for_provider: &Json,
        secret: &mut dyn FnMut(&SecretRef) -> Result<String, FieldError>,
        plain_sensitive: bool,
    ) -> Result<Json, FieldError> {
        let mut walk = ToTf {
            plain_sensitive,
            secret,
            path: base_path(self.spec_base),
        };
        match for_provider {
            Json::Null => walk.object(&self.spec, &Map::new()),
            Json::Object(members) => walk.object(&self.spec, members),
            _ => Err(walk.invalid("expected an object")),
        }
    }

    /// The argument a `valuesFrom` path names (dotted Kubernetes field names below
    /// `spec.forProvider`, a sensitive argument by its plain name): its Terraform path and
    /// whether it is sensitive. Below `dynamic` and tuple values the remaining segments are
    /// kept as they are.
    pub fn argument(&self, dotted: &str) -> Result<(Vec<PathStep>, bool), String> {
        let mut steps = Vec::new();
        let mut level = Some(&self.spec);
        let mut node: Option<&Node> = None;
        let mut sensitive = false;
        for (i, seg) in dotted.split('.').enumerate() {
            if seg.is_empty() {
                return Err(format!("{dotted}: empty path segment"));
            }
            let upto = || dotted.split('.').take(i).collect::<Vec<_>>().join(".");
            if let Some(l) = level.take() {
                let slot = l
                    .by_name(seg)
                    .filter(|s| !matches!(s.node, Node::Secret { .. }))
                    .or_else(|| {
                        l.by_name(&format!("{seg}{SECRET_REF_SUFFIX}"))
                            .filter(|s| matches!(s.node, Node::Secret { .. }))
                    })
                    .ok_or_else(|| match i {
                        0 => format!("{seg}: no such argument"),
                        _ => format!("{}: {} has no field {seg}", dotted, upto()),
                    })?;
                steps.push(PathStep::Attr(slot.tf_name.clone()));
                sensitive |= matches!(slot.node, Node::Secret { .. });
                node = Some(&slot.node);
            } else {
                match node {
                    Some(Node::List(item)) => {
                        let index: usize = seg.parse().map_err(|_| {
                            format!("{dotted}: {} is a list; {seg} is not an index", upto())
                        })?;
                        steps.push(index_step(index));
                        node = Some(item);
                    }
                    Some(Node::Map(item)) => {
                        steps.push(PathStep::Key(seg.to_owned()));
                        node = Some(item);
                    }
                    Some(Node::Any) => {
                        steps.push(match seg.parse::<usize>() {
                            Ok(index) => index_step(index),
                            Err(_) => PathStep::Attr(seg.to_owned()),
                        });
                    }
                    _ => return Err(format!("{dotted}: {} has no fields", upto())),
                }
            }
            if let Some(Node::Object(l)) = node {
                level = Some(l);
            }
        }
        Ok((steps, sensitive))
    }

    /// A configuration's argument values (keyed by Terraform names, as `kraken convert` reads
    /// them) → `spec.forProvider`. Arguments the schema does not have are left out and named
    /// in `unknown`; sensitive ones are left out and returned with the dotted Kubernetes path
    /// of their `xSecretRef` field, since a manifest must not hold them.
    pub fn args_to_spec(&self, args: &Map<String, Json>) -> ArgsToSpec {
        let mut out = ArgsToSpec::default();
        let spec = args_object(&self.spec, args, "", &mut out);
        out.for_provider = spec;
        out
    }

    /// The dotted Kubernetes path (as `valuesFrom` and StateDeclaration outputs take it) of
    /// the Terraform attribute path `steps`: below `spec.forProvider` for an argument (a
    /// sensitive one by its plain name) with `spec`, else below `status.atProvider`. `None`
    /// when the schema has no such attribute.
    pub fn field_path(&self, steps: &[PathStep], spec: bool) -> Option<String> {
        let path = AttrPath {
            steps: steps.to_vec(),
        };
        let level = if spec { &self.spec } else { &self.status };
        let rendered = render(level, &path, spec).ok()?;
        let parts: Vec<String> = rendered
            .iter()
            .map(|s| match s {
                PathStep::Attr(a) | PathStep::Key(a) => a.clone(),
                PathStep::Index(i) => i.to_string(),
            })
            .collect();
        Some(parts.join("."))
    }

    /// Every Secret reference in `spec.forProvider`, each once, in order of appearance, so
    /// the caller can fetch those Secrets before [`FieldMap::spec_to_tf`]. Fields the schema
    /// does not know are skipped here; `spec_to_tf` reports them.
    pub fn secret_refs(&self, for_provider: &Json) -> Vec<SecretRef> {
        let mut out = Vec::new();
        if let Json::Object(members) = for_provider {
            refs_in_object(&self.spec, members, &mut out);
        }
        out
    }

    /// Terraform state as JSON (from [`crate::kube::to_kube_json`]) →
    /// `status.atProvider`: Kubernetes names, without sensitive and write-only attributes,
    /// without nulls (in objects and maps; list elements keep their positions). Anything
    /// but an object gives an empty object.
    pub fn state_to_status(&self, state: &Json) -> Json {
        match state {
            Json::Object(members) => status_object(&self.status, members),
            _ => Json::Object(Map::new()),
        }
    }

    /// A Terraform attribute path as the Kubernetes field path a user knows: under
    /// `spec.forProvider` when it names an argument (a sensitive one as its `xSecretRef`
    /// field; in a ProviderConfig under `spec.config` by its plain name), else under
    /// `status.atProvider`. Steps the schema does not know keep their Terraform names.
    pub fn kube_path(&self, path: &AttrPath) -> String {
        let spec = render(&self.spec, path, self.plain_sensitive);
        let (base, steps) = match (spec, self.status_base) {
            (Ok(steps), _) => (self.spec_base, steps),
            (Err(steps), None) => (self.spec_base, steps),
            (Err(_), Some(status_base)) => {
                let steps = render(&self.status, path, false).unwrap_or_else(|steps| steps);
                (status_base, steps)
            }
        };
        AttrPath::from(steps).prefixed(&base_path(base)).to_string()
    }
}

fn base_path(base: &[&str]) -> AttrPath {
    AttrPath::from(
        base.iter()
            .map(|s| PathStep::Attr((*s).to_owned()))
            .collect::<Vec<_>>(),
    )
}

fn index_step(i: usize) -> PathStep {
    PathStep::Index(i64::try_from(i).unwrap_or(i64::MAX))
}

/// The walk of [`FieldMap::spec_to_tf`]; `path` is the Kubernetes path of the value at hand.
struct ToTf<'s> {
    plain_sensitive: bool,
    secret: &'s mut dyn FnMut(&SecretRef) -> Result<String, FieldError>,
    path: AttrPath,
}

impl ToTf<'_> {
    fn invalid(&self, message: impl Into<String>) -> FieldError {
        FieldError::Invalid {
            path: self.path.to_string(),
            message: message.into(),
        }
    }

    /// Runs `f` with `step` appended to the path.
    fn at<T>(&mut self, step: PathStep, f: impl FnOnce(&mut Self) -> T) -> T {
        self.path.push(step);
        let out = f(self);
        self.path.steps.pop();
        out
    }

    fn object(&mut self, level: &Level, members: &Map<String, Json>) -> Result<Json, FieldError> {
        let mut out = Map::new();
        for (name, value) in members {
            self.at(PathStep::Attr(name.clone()), |walk| {
                let (slot, plain) = walk.find(level, name)?;
                if value.is_null() {
                    return Ok(());
                }
                let tf_value = if plain {
                    value.clone()
                } else {
                    walk.value(&slot.node, value)?
                };
                // Only a sensitive argument has two names (`x`, `xSecretRef`).
                if out.insert(slot.tf_name.clone(), tf_value).is_some() {
                    let plain = slot.name.strip_suffix(SECRET_REF_SUFFIX);
                    let message = format!(
                        "set twice, as {} and as {}",
                        plain.unwrap_or(&slot.name),
                        slot.name
                    );
                    return Err(walk.invalid(message));
                }
                Ok(())
            })?;
        }
        for slot in &level.slots {
            if let Some(absent) = &slot.absent {
                out.entry(slot.tf_name.clone())
                    .or_insert_with(|| absent.clone());
            }
        }
        Ok(Json::Object(out))
    }

    /// The slot a Kubernetes field names, and whether it is a sensitive argument given by
    /// its plain name.
    fn find<'l>(&self, level: &'l Level, name: &str) -> Result<(&'l Slot, bool), FieldError> {
        if let Some(slot) = level.by_name(name) {
            return Ok((slot, false));
        }
        let plain = level
            .by_name(&format!("{name}{SECRET_REF_SUFFIX}"))
            .filter(|s| self.plain_sensitive && matches!(s.node, Node::Secret { .. }));
        match plain {
            Some(slot) => Ok((slot, true)),
            None => Err(FieldError::UnknownField {
                path: self.path.to_string(),
            }),
        }
    }

    fn value(&mut self, node: &Node, value: &Json) -> Result<Json, FieldError> {
        match (node, value) {
            (_, Json::Null) => Ok(Json::Null),
            (Node::Object(level), Json::Object(members)) => self.object(level, members),
            (Node::List(item), Json::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, v) in items.iter().enumerate() {
                    out.push(self.at(index_step(i), |walk| walk.value(item, v))?);
                }
                Ok(Json::Array(out))
            }
            (Node::Map(item), Json::Object(members)) => {
                let mut out = Map::new();
                for (key, v) in members {
                    let converted = self.at(PathStep::Key(key.clone()), |w| w.value(item, v))?;
                    out.insert(key.clone(), converted);
                }
                Ok(Json::Object(out))
            }
            (Node::Secret { json }, _) => self.secret_value(value, *json),
            // Scalars, dynamic values and mismatched shapes: from_kube_json checks them.
            _ => Ok(value.clone()),
        }
    }

    fn secret_value(&mut self, value: &Json, json: bool) -> Result<Json, FieldError> {
        let Some(reference) = secret_ref(value) else {
            return Err(self.invalid("expected a secret reference with name and key"));
        };
        let text = (self.secret)(&reference)?;
        if !json {
            return Ok(Json::String(text));
        }
        serde_json::from_str(&text).map_err(|_| {
            self.invalid(format!(
                "key {} of secret {} must hold JSON for this argument's type",
                reference.key, reference.name
            ))
        })
    }
}

//! `spec.valuesFrom` for a plan, resolved through the cluster directly instead of through a
//! DependencyRequest (which would be a write): the hub's own parsing ([`kraken_hub::parse`]),
//! the objects it names read with GETs (a ConfigMap or Secret of the manifest set stands in for
//! the cluster's), and the hub's own resolution and type conversion
//! ([`kraken_hub::resolve::resolve`]).
//!
//! Two differences from the running hub, both about timing. A producer of the set that is
//! created or changed has outputs nobody knows yet: the arguments they feed are unknown in the
//! plan. And a producer that exists but has not published (producers publish once something
//! reads them) is read from its `status.atProvider`, which is what it would publish.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::DynamicObject;
use serde_json::{Value as Json, json};

use super::Shared;
use crate::deps;
use crate::error::{Error, Result};
use crate::plan::{MAX_VALUE, SENSITIVE, UNKNOWN};
use kraken_core_kinds::StateDeclaration;
use kraken_core_kinds::hub::{ObjectReference, ValueReference};
use kraken_hub::resolve::{Sources, resolve};
use kraken_hub::{Failure, Parsed, Source, group_of, object_key, parse};
use kraken_kit::text::truncate;
use kraken_source::Configured;
use kraken_value::PathStep;

/// A declaration: (namespace, name).
type Declaration = (String, String);

/// `spec.forProvider` as it would be configured, and what the plan must know about it.
#[derive(Default)]
pub(super) struct Inputs {
    /// With the resolved values merged in.
    pub(super) for_provider: Json,
    /// The arguments (Terraform paths) whose values come from outputs not known yet.
    pub(super) unknown: Vec<Vec<PathStep>>,
    /// Top-level attributes set from sensitive sources.
    pub(super) sensitive: BTreeSet<String>,
    /// Per `valuesFrom` entry: `{path, from, value}`, values redacted or unknown as shown.
    pub(super) shown: Vec<Json>,
}

/// The StateDeclarations the document's `valuesFrom` reads, whatever they resolve to.
pub(super) fn declarations_read(shared: &Shared, doc: &Json, ns: &str) -> BTreeSet<Declaration> {
    let entries = doc
        .pointer("/spec/valuesFrom")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    let groups = |k: &str| shared.kinds.groups_of(k);
    entries
        .iter()
        .filter_map(|e| serde_json::from_value::<ValueReference>(e.clone()).ok())
        .filter_map(|r| parse(&r, ns, &groups).ok())
        .flat_map(|p| {
            p.sources()
                .into_iter()
                .filter_map(|s| match s {
                    Source::Output { declaration, .. } => {
                        Some((ns.to_owned(), declaration.clone()))
                    }
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Resolves `values_from` for the object of `type_name` in `ns`; outputs of `unknown`
/// declarations are unknown.
pub(super) async fn inputs(
    shared: &Shared,
    unknown: &BTreeSet<Declaration>,
    (p, type_name): (&Configured, &str),
    ns: &str,
    (for_provider, values_from): (&Json, &[Json]),
) -> Result<Inputs> {
    let mut out = Inputs {
        for_provider: for_provider.clone(),
        unknown: Vec::new(),
        sensitive: BTreeSet::new(),
        shown: Vec::new(),
    };
    if values_from.is_empty() {
        return Ok(out);
    }
    let references = deps::references(p, type_name, values_from)?;
    let groups = |k: &str| shared.kinds.groups_of(k);
    let parsed: Vec<(&ValueReference, std::result::Result<Parsed, Failure>)> = references
        .iter()
        .map(|r| (r, parse(r, ns, &groups)))
        .collect();
    let reads_unknown = |p: &std::result::Result<Parsed, Failure>| {
        p.as_ref().is_ok_and(|p| {
            p.sources().iter().any(|s| {
                matches!(s, Source::Output { declaration, .. }
                    if unknown.contains(&(ns.to_owned(), declaration.clone())))
            })
        })
    };
    let (unknown_refs, known): (Vec<_>, Vec<_>) =
        parsed.iter().cloned().partition(|(_, p)| reads_unknown(p));
    let values = resolved(&known, &gather(shared, ns, &known).await?)?;
    let sensitive_paths: Vec<String> = values
        .iter()
        .filter(|(_, (_, secret))| *secret)
        .map(|(k, _)| k.clone())
        .collect();
    out.sensitive = deps::sensitive_attributes(p, &sensitive_paths);
    out.for_provider = deps::merge(
        for_provider,
        values.iter().map(|(k, (v, _))| (k.clone(), v.clone())),
    )?;
    for (r, _) in &unknown_refs {
        let (steps, _) = p.fields.argument(&r.path).map_err(Error::InvalidSpec)?;
        out.unknown.push(steps);
    }
    out.shown = parsed
        .iter()
        .map(|(r, p)| shown(r, p.as_ref().ok(), reads_unknown(p), &values))
        .collect();
    Ok(out)
}

/// The values the known references resolve to, by path, each with whether it is sensitive;
/// a reference that does not resolve is an error (the operator would wait for it).
fn resolved(
    known: &[(&ValueReference, std::result::Result<Parsed, Failure>)],
    sources: &Sources,
) -> Result<BTreeMap<String, (Json, bool)>> {
    let resolution = resolve(known, sources);
    if !resolution.failures.is_empty() {
        let why: Vec<String> = resolution
            .failures
            .iter()
            .map(|f| f.message.clone())
            .collect();
        return Err(Error::InvalidSpec(format!(
            "spec.valuesFrom cannot be resolved (the operator would wait): {}",
            why.join("; ")
        )));
    }
    let mut values: BTreeMap<String, (Json, bool)> = BTreeMap::new();
    for v in resolution.values {
        values.insert(v.path, (v.value, false));
    }
    for (path, text) in resolution.sensitive {
        let value = serde_json::from_str(&text).unwrap_or(Json::String(text));
        values.insert(path, (value, true));
    }
    Ok(values)
}

/// One `valuesFrom` entry as shown: `{path, from, value}`, redacted or unknown.
fn shown(
    r: &ValueReference,
    p: Option<&Parsed>,
    unknown: bool,
    values: &BTreeMap<String, (Json, bool)>,
) -> Json {
    if unknown {
        return json!({"path": r.path, "from": from(p), "value": UNKNOWN, "unknown": true});
    }
    let value = match values.get(&r.path) {
        Some((_, true)) => SENSITIVE.to_owned(),
        Some((v, false)) => truncate(&v.to_string(), MAX_VALUE),
        None => "null".to_owned(),
    };
    json!({"path": r.path, "from": from(p), "value": value})
}

fn from(p: Option<&Parsed>) -> String {
    match p {
        Some(Parsed::Single(s)) => s.describe(),
        Some(Parsed::Template(parts)) => {
            let refs: Vec<String> = Parsed::Template(parts.clone())
                .sources()
                .iter()
                .map(|s| s.describe())
                .collect();
            format!("template over {}", refs.join(", "))
        }
        None => String::new(),
    }
}

/// Reads every object the references name, once each: a ConfigMap or Secret of the set in
/// place of the cluster's, a producer's `status.atProvider` where it has not published.
async fn gather(
    shared: &Shared,
    ns: &str,
    parsed: &[(&ValueReference, std::result::Result<Parsed, Failure>)],
) -> Result<Sources> {
    let mut sources = Sources::default();
    for (r, p) in parsed {
        let Ok(p) = p else { continue };
        for source in p.sources() {
            match source {
                Source::Output { declaration, path } => {
                    if !sources.declarations.contains_key(declaration) {
                        let sd = declaration_of(shared, ns, declaration, r).await?;
                        sources.declarations.insert(declaration.clone(), sd);
                    }
                    if let Some(name) = sources.outputs_secret(declaration, path) {
                        secret_into(shared, ns, &name, &mut sources).await?;
                    }
                }
                Source::ConfigMap { name, .. } => {
                    if !sources.config_maps.contains_key(name) {
                        let cm = config_map(shared, ns, name).await?;
                        sources.config_maps.insert(name.clone(), cm);
                    }
                }
                Source::Secret { name, .. } => secret_into(shared, ns, name, &mut sources).await?,
            }
        }
    }
    Ok(sources)
}

/// The StateDeclaration `name`, or what the producer `r` names would publish: planned without
/// a change in this set, or as its `status.atProvider` shows.
async fn declaration_of(
    shared: &Shared,
    ns: &str,
    name: &str,
    r: &ValueReference,
) -> Result<Option<StateDeclaration>> {
    let api: Api<StateDeclaration> = Api::namespaced(shared.client.clone(), ns);
    if let Some(sd) = api.get_opt(name).await? {
        return Ok(Some(sd));
    }
    let planned = shared
        .planned_outputs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&(ns.to_owned(), name.to_owned()))
        .cloned();
    if planned.is_some() {
        return Ok(planned);
    }
    let Some(res) = &r.resource else {
        return Ok(None);
    };
    let group = match res.api_version.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => group_of(v).to_owned(),
        None => match shared.kinds.groups_of(&res.kind).as_slice() {
            [one] => one.clone(),
            _ => return Ok(None),
        },
    };
    let Some(resource) = shared.kinds.resource(&group, &res.kind) else {
        return Ok(None);
    };
    if object_key(&group, &resource.kind, &res.name) != name {
        return Ok(None);
    }
    let api: Api<DynamicObject> = Api::namespaced_with(shared.client.clone(), ns, &resource);
    let Some(producer) = api.get_opt(&res.name).await? else {
        return Ok(None);
    };
    let Some(outputs) = producer
        .data
        .pointer("/status/atProvider")
        .filter(|o| o.is_object())
    else {
        return Ok(None);
    };
    let producer = ObjectReference {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
        name: res.name.clone(),
        uid: producer.metadata.uid.clone().unwrap_or_default(),
    };
    let sd = kraken_hub::trust::stand_in(name, producer, outputs.clone());
    Ok(Some(sd))
}

async fn config_map(shared: &Shared, ns: &str, name: &str) -> Result<Option<ConfigMap>> {
    if let Some(doc) = shared.config_maps.get(&(ns.to_owned(), name.to_owned())) {
        let cm = serde_json::from_value(doc.clone())
            .map_err(|e| Error::InvalidSpec(format!("ConfigMap {name} of the manifests: {e}")))?;
        return Ok(Some(cm));
    }
    Ok(Api::<ConfigMap>::namespaced(shared.client.clone(), ns)
        .get_opt(name)
        .await?)
}

async fn secret_into(shared: &Shared, ns: &str, name: &str, sources: &mut Sources) -> Result<()> {
    if !sources.secrets.contains_key(name) {
        let secret = secret(shared, ns, name).await?;
        sources.secrets.insert(name.to_owned(), secret);
    }
    Ok(())
}

/// The Secret `name` in `ns`: the set's, else the cluster's.
pub(super) async fn secret(shared: &Shared, ns: &str, name: &str) -> Result<Option<Secret>> {
    match shared.secrets.get(&(ns.to_owned(), name.to_owned())) {
        Some(doc) => serde_json::from_value::<Secret>(doc.clone())
            .map(Some)
            .map_err(|e| Error::InvalidSpec(format!("Secret {name} of the manifests: {e}"))),
        None => Ok(Api::<Secret>::namespaced(shared.client.clone(), ns)
            .get_opt(name)
            .await?),
    }
}

//! A managed resource in the dependency hub: as a consumer, its `spec.valuesFrom`
//! becomes a DependencyRequest whose resolved values are merged into `spec.forProvider`; as
//! a producer, it publishes its outputs as the StateDeclaration `<kind>-<name>`, and its
//! deletion waits while other objects still read them.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use kube::ResourceExt as _;
use serde_json::{Value as Json, json};

use super::error::{Error, Result};
use super::write::Run;
use kraken_core_kinds::hub::{ObjectReference, ValueReference};
use kraken_hub::consumer::{Values, request_values};
use kraken_hub::consumer::{WAITING, waiting};
use kraken_hub::object_key;
use kraken_hub::producer::Producer;
use kraken_kit::conditions::SYNCED;
use kraken_source::Configured;
use kraken_value::fields::{FieldError, set_json_path};
use kraken_value::kube::to_kube_json;
use kraken_value::{PathStep, Type, Value};

/// `status.dependencyRequest`: the name of the object's request while it has one.
const STATUS_REQUEST: &str = "dependencyRequest";
/// `status.stateDeclaration`: `{name, hash}` of what was last published.
const STATUS_DECLARATION: &str = "stateDeclaration";
fn consumer(run: &Run<'_>) -> ObjectReference {
    ObjectReference {
        api_version: run.k.kind.resource.api_version.clone(),
        kind: run.k.kind.resource.kind.clone(),
        name: run.name.clone(),
        uid: run.obj.uid().unwrap_or_default(),
    }
}

/// `spec.forProvider` with the values of `spec.valuesFrom` merged in, or `None` while they
/// are not resolved (the status then says why; the request's change retriggers).
pub async fn inputs(
    run: &mut Run<'_>,
    p: &Configured,
    type_name: &str,
    for_provider: &Json,
    values_from: &[Json],
) -> Result<Option<Json>> {
    let had_request = run.status.get(STATUS_REQUEST).is_some();
    if values_from.is_empty() && !had_request {
        return Ok(Some(for_provider.clone()));
    }
    let references = references(p, type_name, values_from)?;
    // The request must go when the object goes: the finalizer first, so its deletion runs
    // the cleanup that deletes the request.
    if !values_from.is_empty() {
        run.set_finalizer(true).await?;
    }
    let ctx = run.k.ctx.clone();
    let values = request_values(
        &ctx.client,
        &ctx.metrics,
        &ctx.hub_index,
        &run.namespace,
        &consumer(run),
        &run.k.kind.resource.group,
        references,
    )
    .await?;
    match values {
        Values::None => {
            run.set_status_field(STATUS_REQUEST, Json::Null);
            Ok(Some(for_provider.clone()))
        }
        Values::Waiting { reason, message } => {
            run.set_status_field(
                STATUS_REQUEST,
                json!(object_key(
                    &run.k.kind.resource.group,
                    &run.k.kind.resource.kind,
                    &run.name
                )),
            );
            let previous = run
                .status
                .get("conditions")
                .and_then(Json::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == SYNCED))
                .map(|c| c["message"].as_str().unwrap_or_default().to_owned());
            let (conditions, event) = waiting(&reason, message, previous.as_deref());
            run.set_conditions(&conditions);
            run.flush_status().await?;
            if let Some(message) = event {
                run.event(true, WAITING, message).await;
            }
            Ok(None)
        }
        Values::Ready { values, sensitive } => {
            run.set_status_field(
                STATUS_REQUEST,
                json!(object_key(
                    &run.k.kind.resource.group,
                    &run.k.kind.resource.kind,
                    &run.name
                )),
            );
            run.sensitive_inputs = sensitive_attributes(p, &sensitive);
            run.sensitive_values = super::echo::Secrets::from_values(
                values
                    .iter()
                    .filter(|(path, _)| sensitive.contains(path))
                    .map(|(_, v)| v),
            );
            merge(for_provider, values).map(Some)
        }
    }
}

/// The top-level attributes the sensitive `valuesFrom` paths set (a value inside `tags` makes
/// all of `tags` sensitive, as Terraform marks a whole value derived from a sensitive one).
pub(super) fn sensitive_attributes(
    p: &Configured,
    paths: &[String],
) -> std::collections::BTreeSet<String> {
    paths
        .iter()
        .filter_map(|path| match p.fields.argument(path).ok()?.0.first()? {
            PathStep::Attr(name) => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// `state` as Kubernetes JSON, without the attributes set from sensitive inputs.
/// Shows the external object `state` describes (`status.atProvider`, `status.externalId`)
/// and records it as the outputs to publish.
pub(super) fn show_live(run: &mut Run<'_>, fields: &kraken_value::fields::FieldMap, state: &Value) {
    run.outputs = Some(state.clone());
    let public = without_sensitive_inputs(run, state);
    run.set_status_field("atProvider", fields.state_to_status(&public));
    // An id made of a sensitive value is not shown either.
    let id = to_kube_json(state)
        .get("id")
        .and_then(Json::as_str)
        .map(|s| {
            if run.sensitive_values.found_in(s) {
                json!(super::echo::REDACTED)
            } else {
                json!(s)
            }
        });
    run.set_status_field("externalId", id.unwrap_or(Json::Null));
}

/// Attributes that echo a sensitive value ([`super::echo`]: `tags_all` for `tags`) are left out
/// as well. The owner tag Kraken adds ([`super::target::OWNER_TAG`]) is left out too: it is
/// Kraken's bookkeeping, not the user's, so status and published outputs show the tags the
/// spec gives.
pub fn without_sensitive_inputs(run: &Run<'_>, state: &Value) -> Json {
    let mut json = to_kube_json(state);
    let echoed = run.sensitive_values.echoed_in(&json);
    if let Some(members) = json.as_object_mut() {
        members.retain(|k, _| !run.sensitive_inputs.contains(k) && !echoed.contains(k));
        for attr in ["tags", "tags_all"] {
            if let Some(Json::Object(tags)) = members.get_mut(attr) {
                tags.remove(super::target::OWNER_TAG);
            }
        }
    }
    json
}

/// The references `spec.valuesFrom` makes, each with the type and sensitivity of the argument
/// it sets.
pub(super) fn references(
    p: &Configured,
    type_name: &str,
    values_from: &[Json],
) -> Result<Vec<ValueReference>> {
    let schema = p.resource(type_name)?;
    let ty = schema.block.implied_type();
    let mut references = Vec::with_capacity(values_from.len());
    for (i, entry) in values_from.iter().enumerate() {
        let mut r: ValueReference = serde_json::from_value(entry.clone())
            .map_err(|e| Error::InvalidSpec(format!("spec.valuesFrom[{i}]: {e}")))?;
        let (steps, sensitive) = p
            .fields
            .argument(&r.path)
            .map_err(|m| Error::InvalidSpec(format!("spec.valuesFrom[{i}].path: {m}")))?;
        r.r#type = Some(reference_type(type_at(&ty, &steps)));
        r.sensitive = sensitive;
        references.push(r);
    }
    Ok(references)
}

/// `for_provider` with the resolved `values` set at their paths; a path also set in
/// `spec.forProvider` is an error.
pub(super) fn merge(
    for_provider: &Json,
    values: impl IntoIterator<Item = (String, Json)>,
) -> Result<Json> {
    let mut merged = match for_provider {
        Json::Object(_) => for_provider.clone(),
        _ => json!({}),
    };
    for (path, value) in values {
        set_json_path(&mut merged, &path, value).map_err(|e| match e {
            FieldError::AlreadySet { path } => Error::InvalidSpec(format!(
                "spec.valuesFrom: {path} is also set in spec.forProvider; set each argument in one place"
            )),
            other => Error::InvalidSpec(format!("spec.valuesFrom: {other}")),
        })?;
    }
    Ok(merged)
}

/// The type at a Terraform path below `ty`.
fn type_at(ty: &Type, steps: &[PathStep]) -> Type {
    let mut at = ty.clone();
    for step in steps {
        at = match (&at, step) {
            (Type::Object(o), PathStep::Attr(name)) => {
                o.attributes.get(name).cloned().unwrap_or(Type::Dynamic)
            }
            (Type::List(e) | Type::Set(e) | Type::Map(e), _) => (**e).clone(),
            (Type::Tuple(items), PathStep::Index(i)) => usize::try_from(*i)
                .ok()
                .and_then(|i| items.get(i).cloned())
                .unwrap_or(Type::Dynamic),
            _ => Type::Dynamic,
        };
    }
    at
}

/// What the hub converts a value to: the argument's type, or `dynamic` (take the value as
/// it is) where objects are involved, whose attributes the spec names in Kubernetes names.
fn reference_type(ty: Type) -> Json {
    fn has_object(t: &Type) -> bool {
        match t {
            Type::Object(_) | Type::Tuple(_) | Type::Dynamic => true,
            Type::List(e) | Type::Set(e) | Type::Map(e) => has_object(e),
            _ => false,
        }
    }
    if has_object(&ty) {
        json!("dynamic")
    } else {
        ty.to_json()
    }
}

fn producer<'r>(run: &'r Run<'_>) -> Producer<'r> {
    Producer {
        client: &run.k.ctx.client,
        metrics: &run.k.ctx.metrics,
        index: &run.k.ctx.hub_index,
        namespace: &run.namespace,
        object: consumer(run),
        always: kraken_hub::producer::always_published(run.obj.annotations()),
    }
}

/// Publishes the object's outputs, once something reads them: `state` (the provider's) as the
/// StateDeclaration `<kind>-<name>.<group>`, sensitive attributes into the Secret
/// `<kind>-<name>.<group>-outputs`. Writes only what changed.
pub async fn publish(
    run: &mut Run<'_>,
    p: &Configured,
    type_name: &str,
    state: &Value,
) -> Result<()> {
    let json = to_kube_json(state);
    let outputs = p
        .fields
        .state_to_status(&without_sensitive_inputs(run, state));
    let schema = p.resource(type_name)?;
    let names =
        kraken_codegen::names::field_names(schema.block.attributes.keys().map(String::as_str));
    let mut secret_values: BTreeMap<String, ByteString> = BTreeMap::new();
    let echoed = run.sensitive_values.echoed_in(&json);
    for (tf, attr) in &schema.block.attributes {
        if !attr.sensitive && !run.sensitive_inputs.contains(tf) && !echoed.contains(tf) {
            continue;
        }
        let Some(v) = json.get(tf).filter(|v| !v.is_null()) else {
            continue;
        };
        let kube = names.to_kube(tf).unwrap_or(tf).to_owned();
        secret_values.insert(kube, ByteString(v.to_string().into_bytes()));
    }
    let recorded = run.status.get(STATUS_DECLARATION).cloned();
    let record = producer(run)
        .publish(outputs, secret_values, recorded.as_ref())
        .await?;
    if let Some(record) = record {
        run.set_status_field(STATUS_DECLARATION, record);
    }
    Ok(())
}

/// The consumers that still read this object's outputs (their DependencyRequests' names),
/// unless it is annotated `kraken.dev/force-delete`.
pub async fn readers(run: &Run<'_>) -> Result<Vec<String>> {
    let force = kraken_hub::producer::forced(run.obj.annotations());
    Ok(producer(run).readers(force).await?)
}

/// After a deletion: the object's request, StateDeclaration and outputs Secret go too
/// (nothing else collects them where no controller manager runs).
pub async fn retire(run: &Run<'_>) -> Result<()> {
    Ok(producer(run).retire().await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_types_follow_the_schema() {
        let ty = Type::object([
            ("length", Type::Number),
            ("keepers", Type::map(Type::String)),
            ("rules", Type::list(Type::object([("port", Type::Number)]))),
        ]);
        let at = |steps: &[PathStep]| reference_type(type_at(&ty, steps));
        assert_eq!(at(&[PathStep::Attr("length".into())]), json!("number"));
        assert_eq!(
            at(&[PathStep::Attr("keepers".into())]),
            json!(["map", "string"])
        );
        assert_eq!(
            at(&[PathStep::Attr("keepers".into()), PathStep::Key("a".into())]),
            json!("string")
        );
        assert_eq!(at(&[PathStep::Attr("rules".into())]), json!("dynamic"));
        assert_eq!(
            at(&[
                PathStep::Attr("rules".into()),
                PathStep::Index(0),
                PathStep::Attr("port".into())
            ]),
            json!("number")
        );
    }
}

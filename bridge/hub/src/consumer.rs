//! The consumer's side of the hub, shared by every kind that consumes values (bridged
//! resources, EC2Instance, ConfigExport): asking for values and reading them
//! ([`request_values`]), dropping the request ([`drop_request`]), being woken when it changes
//! ([`consumer_triggers`]), and the shared words of how a consumer that waits reports it
//! ([`waiting`]) and how a producer that is still read reports why its deletion waits.
//!
//! [`request_values`] runs the seven steps of the reference design: build the spec → get →
//! delete if empty → create → update → wait if not ready → use the values, reading the request
//! from the hub's cache.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::Stream;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::Resource as _;
use kube::api::{Api, Patch, PostParams};
use serde_json::{Value as Json, json};

use super::{
    CONSUMER_GROUP_LABEL, CONSUMER_KIND_LABEL, Index, group_of, object_key, values_secret_name,
};
use kraken_core_kinds::hub::{
    DependencyRequest, DependencyRequestSpec, DependencyRequestStatus, ObjectReference,
    ValueReference,
};
use kraken_kit::conditions::{READY, SYNCED, Set};
use kraken_kit::metrics::Metrics;
use kraken_kit::names::label_value;
use kraken_kit::ownership::{self, Claim};

/// Reason on `Ready` while references are not resolved.
pub const WAITING: &str = "WaitingForDependencies";
/// Reason on `Ready` while a deletion waits for consumers.
pub const IN_USE: &str = kraken_kit::conditions::reason::IN_USE;

/// A consumer whose values are not resolved: its conditions (`Synced` carries the request's
/// reason and message), and the message of a Warning Event when that reason is a problem a
/// user can fix and is new (`previous`: the Synced message before).
pub fn waiting(
    reason: &str,
    message: String,
    previous: Option<&str>,
) -> ([Set; 2], Option<String>) {
    let message = if reason == WAITING {
        message
    } else {
        format!("{reason}: {message}")
    };
    let event = (previous != Some(message.as_str()) && reason != WAITING).then(|| message.clone());
    // Waiting does not fix a reference Kraken refuses to follow: say so in the reason.
    let synced = if reason == kraken_kit::conditions::reason::FORBIDDEN {
        kraken_kit::conditions::reason::FORBIDDEN
    } else {
        WAITING
    };
    (
        [
            Set::new(
                READY,
                false,
                WAITING,
                "waiting for the values of spec.valuesFrom; see the Synced condition",
            ),
            Set::new(SYNCED, false, synced, message),
        ],
        event,
    )
}

/// Where a consumer's request stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// No references: no request (an old one was deleted).
    None,
    /// Resolved: (path, value) pairs, sensitive ones included, and the paths that are
    /// sensitive.
    Ready {
        values: Vec<(String, Json)>,
        sensitive: Vec<String>,
    },
    /// Not yet, or not resolvable: the request's reason and message.
    Waiting { reason: String, message: String },
}

fn wait(message: impl Into<String>) -> Values {
    Values::Waiting {
        reason: WAITING.into(),
        message: message.into(),
    }
}

/// The consumer's steps: make its DependencyRequest (named like its StateDeclaration) say
/// `references`, and return the values once the hub has resolved them. `consumer` must carry
/// the consumer's uid (the request is owned by it); `group` labels the request so the
/// consumer's controller can watch its requests.
pub async fn request_values(
    client: &Client,
    metrics: &Metrics,
    index: &Index,
    ns: &str,
    consumer: &ObjectReference,
    group: &str,
    references: Vec<ValueReference>,
) -> Result<Values, kube::Error> {
    let name = object_key(
        group_of(&consumer.api_version),
        &consumer.kind,
        &consumer.name,
    );
    let api: Api<DependencyRequest> = Api::namespaced(client.clone(), ns);
    // From the hub's cache, which has at least the change that woke this consumer. A stale
    // spec there costs one patch that changes nothing; a request the cache does not have yet
    // one create answered 409.
    let existing = match index.request(ns, &name) {
        Some(dr) => dr,
        None => api.get_opt(&name).await?.map(Arc::new),
    };
    let me = owner_ref(consumer);
    drop_legacy_request(&api, metrics, index, ns, consumer, &me).await?;
    if references.is_empty() {
        if existing.is_some() {
            drop_request(client, metrics, ns, &name, &me).await?;
        }
        return Ok(Values::None);
    }
    // A request of this name that is not this consumer's: an earlier consumer's of the same
    // kind and name (deleted, not collected) is replaced; anyone else's is left alone.
    let existing = match existing {
        Some(dr) => match ownership::claim(&dr.metadata, &me) {
            Claim::Mine => Some(dr),
            Claim::Predecessor => {
                metrics.api_write("dependencyrequests", "delete");
                let uid = dr.metadata.uid.clone().unwrap_or_default();
                ownership::delete_by_uid(&api, &name, &uid).await?;
                None
            }
            Claim::Foreign(whose) => {
                return Ok(Values::Waiting {
                    reason: super::reason::NOT_OWNED.into(),
                    message: ownership::refused(&format!("DependencyRequest {name}"), &whose),
                });
            }
        },
        None => None,
    };
    let spec = DependencyRequestSpec {
        consumer: consumer.clone(),
        references,
    };
    let Some(dr) = existing else {
        create_request(&api, metrics, ns, &name, group, spec).await?;
        return Ok(wait("resolving references"));
    };
    if dr.spec != spec {
        metrics.api_write("dependencyrequests", "patch");
        api.patch(
            &name,
            &kraken_kit::status::patch_params(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await?;
        return Ok(wait("resolving changed references"));
    }
    let Some(status) = dr
        .status
        .as_ref()
        .filter(|s| s.observed_generation == dr.metadata.generation)
    else {
        return Ok(wait("resolving references"));
    };
    read_values(client, ns, &name, status).await
}

/// Deletes the request a consumer had under the name requests had before they carried the
/// group (`<kind>-<name>`), when the hub's cache shows one of this consumer's: a consumer
/// created before an upgrade would otherwise keep an extra request the hub resolves, and that
/// holds its producers in deletion. Costs nothing when there is none (the cache answers).
async fn drop_legacy_request(
    api: &Api<DependencyRequest>,
    metrics: &Metrics,
    index: &Index,
    ns: &str,
    consumer: &ObjectReference,
    me: &OwnerReference,
) -> Result<(), kube::Error> {
    let legacy = format!(
        "{}-{}",
        consumer.kind.to_lowercase(),
        consumer.name.to_lowercase()
    );
    let Some(Some(dr)) = index.request(ns, &legacy) else {
        return Ok(());
    };
    if ownership::claim(&dr.metadata, me) != Claim::Mine {
        return Ok(());
    }
    metrics.api_write("dependencyrequests", "delete");
    let uid = dr.metadata.uid.clone().unwrap_or_default();
    ownership::delete_by_uid(api, &legacy, &uid).await
}

/// Creates the request `name` for `spec`'s consumer; one that exists already (the hub's cache
/// had not seen it) is as good.
async fn create_request(
    api: &Api<DependencyRequest>,
    metrics: &Metrics,
    ns: &str,
    name: &str,
    group: &str,
    spec: DependencyRequestSpec,
) -> Result<(), kube::Error> {
    let consumer = spec.consumer.clone();
    let mut dr = DependencyRequest::new(name, spec);
    dr.metadata.namespace = Some(ns.to_owned());
    dr.metadata.labels = Some(BTreeMap::from([
        (CONSUMER_GROUP_LABEL.to_owned(), label_value(group)),
        (
            CONSUMER_KIND_LABEL.to_owned(),
            label_value(&consumer.kind.to_lowercase()),
        ),
    ]));
    dr.metadata.owner_references = Some(vec![owner_ref(&consumer)]);
    metrics.api_write("dependencyrequests", "create");
    match api.create(&PostParams::default(), &dr).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The consumer as the owner of its request.
fn owner_ref(consumer: &ObjectReference) -> OwnerReference {
    OwnerReference {
        api_version: consumer.api_version.clone(),
        kind: consumer.kind.clone(),
        name: consumer.name.clone(),
        uid: consumer.uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The values a current `status` of request `name` gives: from status, and the sensitive
/// ones from its values Secret.
async fn read_values(
    client: &Client,
    ns: &str,
    name: &str,
    status: &DependencyRequestStatus,
) -> Result<Values, kube::Error> {
    let Some(ready) = status.conditions.iter().find(|c| c.type_ == READY) else {
        return Ok(wait("resolving references"));
    };
    if ready.status != kraken_kit::conditions::ConditionStatus::True {
        return Ok(Values::Waiting {
            reason: ready.reason.clone(),
            message: ready.message.clone(),
        });
    }
    let mut out: Vec<(String, Json)> = status
        .values
        .iter()
        .map(|v| (v.path.clone(), v.value.clone()))
        .collect();
    if !status.sensitive_paths.is_empty() {
        let secret_name = status
            .secret_name
            .clone()
            .unwrap_or_else(|| values_secret_name(name));
        let secret = Api::<Secret>::namespaced(client.clone(), ns)
            .get_opt(&secret_name)
            .await?;
        for p in &status.sensitive_paths {
            let text = secret
                .as_ref()
                .and_then(|s| s.data.as_ref())
                .and_then(|d| d.get(p))
                .and_then(|b| String::from_utf8(b.0.clone()).ok());
            let Some(text) = text else {
                return Ok(wait(format!(
                    "the sensitive value for {p} is not in Secret {secret_name} yet"
                )));
            };
            out.push((
                p.clone(),
                serde_json::from_str(&text).unwrap_or(Json::String(text)),
            ));
        }
    }
    Ok(Values::Ready {
        values: out,
        sensitive: status.sensitive_paths.clone(),
    })
}

/// Deletes the consumer's request `name` and its values Secret (nothing garbage-collects
/// them where no controller manager runs) — each only if it is `owner`'s (the request) and
/// the request's (the Secret), by uid.
pub async fn drop_request(
    client: &Client,
    metrics: &Metrics,
    ns: &str,
    name: &str,
    owner: &OwnerReference,
) -> Result<(), kube::Error> {
    let api = Api::<DependencyRequest>::namespaced(client.clone(), ns);
    let Some(dr) = api.get_opt(name).await? else {
        return Ok(());
    };
    if ownership::claim(&dr.metadata, owner) != Claim::Mine {
        return Ok(());
    }
    metrics.api_write("dependencyrequests", "delete");
    let uid = dr.metadata.uid.clone().unwrap_or_default();
    ownership::delete_by_uid(&api, name, &uid).await?;
    let Some(request) = dr.controller_owner_ref(&()) else {
        return Ok(());
    };
    ownership::delete_owned(
        &Api::<Secret>::namespaced(client.clone(), ns),
        &values_secret_name(name),
        &request,
    )
    .await
}

/// The consumers (owner name, namespace) whose DependencyRequests change, for the consumer
/// kind `kind` of `group`, as the hub's watch sees them (see [`Index::subscribe`]).
pub fn consumer_triggers(
    index: &Index,
    group: &str,
    kind: &str,
) -> impl Stream<Item = (String, String)> + Send + 'static {
    tokio_stream::wrappers::UnboundedReceiverStream::new(index.subscribe(group, kind))
}

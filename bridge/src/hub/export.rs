//! The ConfigExport controller: values of other objects written into a ConfigMap or Secret
//! the ConfigExport owns, kept in sync through its DependencyRequest.
//!
//! A pass: finalizer → request the values (every entry as a string) → when resolved, check
//! the target (it must not exist unless this ConfigExport made it; sensitive values only go
//! to a Secret) → write it when it differs. Deleting the ConfigExport deletes its target
//! and its request, then releases the finalizer.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource as _, ResourceExt as _};
use serde_json::{Value as Json, json};

use super::controller::{Values, consumer_triggers, drop_request, request_values};
use super::{object_key, to_text};
use crate::core_kinds::GROUP;
use crate::core_kinds::hub::{
    ConfigExport, ConfigExportStatus, ObjectReference, TargetKind, ValueReference,
};
use crate::kit::Kit;
use crate::kit::conditions::{self, READY, Set};

const FINALIZER: &str = "kraken.dev/config-export";
/// Label on a target: the ConfigExport that owns it.
pub const EXPORT_LABEL: &str = "kraken.dev/config-export";
const MANAGER: &str = "kraken-config-export";

pub struct Exporter {
    pub kit: Arc<Kit>,
    pub index: Arc<super::Index>,
}

impl std::ops::Deref for Exporter {
    type Target = Kit;
    fn deref(&self) -> &Kit {
        &self.kit
    }
}

/// Runs the ConfigExport controller, at most `concurrency` exports at once, until `shutdown`
/// resolves.
pub async fn run(
    ex: Arc<Exporter>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<ConfigExport> = Api::all(ex.client.clone());
    let triggers = consumer_triggers(&ex.index, GROUP, "ConfigExport")
        .map(|(name, ns)| ObjectRef::<ConfigExport>::new(&name).within(&ns));
    Controller::new(api, watcher::Config::default().any_semantic())
        .reconcile_on(triggers)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ex)
        .for_each(|_| std::future::ready(()))
        .await;
}

fn error_policy(_: Arc<ConfigExport>, err: &kube::Error, _: Arc<Exporter>) -> Action {
    tracing::warn!("config export: {err}; retrying");
    Action::requeue(std::time::Duration::from_secs(5))
}

async fn reconcile(ce: Arc<ConfigExport>, ex: Arc<Exporter>) -> Result<Action, kube::Error> {
    let ns = ce.namespace().unwrap_or_default();
    let name = ce.name_any();
    let api: Api<ConfigExport> = Api::namespaced(ex.client.clone(), &ns);
    let request = object_key("ConfigExport", &name);
    if ce.metadata.deletion_timestamp.is_some() {
        if !ce.finalizers().iter().any(|f| f == FINALIZER) {
            return Ok(Action::await_change());
        }
        delete_target(&ex, &ce, &ns).await?;
        drop_request(&ex.client, &ex.metrics, &ns, &request).await?;
        let finalizers: Vec<&String> = ce.finalizers().iter().filter(|f| *f != FINALIZER).collect();
        ex.metrics.api_write("configexports", "patch");
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers, "resourceVersion": ce.resource_version()}})),
        )
        .await?;
        return Ok(Action::await_change());
    }
    if !ce.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = ce.finalizers().to_vec();
        finalizers.push(FINALIZER.to_owned());
        ex.metrics.api_write("configexports", "patch");
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await?;
    }
    let references: Vec<ValueReference> = ce
        .spec
        .data
        .iter()
        .map(|d| ValueReference {
            path: d.key.clone(),
            r#type: None,
            sensitive: false,
            resource: d.resource.clone(),
            state_declaration: d.state_declaration.clone(),
            config_map_key_ref: d.config_map_key_ref.clone(),
            secret_key_ref: d.secret_key_ref.clone(),
            template: d.template.clone(),
        })
        .collect();
    let consumer = ObjectReference {
        api_version: ConfigExport::api_version(&()).into_owned(),
        kind: "ConfigExport".into(),
        name: name.clone(),
        uid: ce.uid().unwrap_or_default(),
    };
    let values = request_values(
        &ex.client,
        &ex.metrics,
        &ex.index,
        &ns,
        &consumer,
        GROUP,
        references,
    )
    .await?;
    let update = match values {
        Values::None => Set::new(READY, false, "NoData", "spec.data is empty"),
        Values::Waiting { reason, message } => Set::new(
            READY,
            false,
            "WaitingForDependencies",
            format!("{reason}: {message}"),
        ),
        Values::Ready { sensitive, .. }
            if !sensitive.is_empty() && ce.spec.target.kind == TargetKind::ConfigMap =>
        {
            Set::new(
                READY,
                false,
                "SensitiveValue",
                format!(
                    "{} come from Secrets or sensitive outputs and are never written to a ConfigMap; export them to a Secret (spec.target.kind: Secret)",
                    sensitive.join(", ")
                ),
            )
        }
        Values::Ready { values, .. } => write_target(&ex, &ce, &ns, &values).await?,
    };
    write_status(&ex, &ce, &api, update).await?;
    Ok(Action::await_change())
}

async fn write_status(
    ex: &Exporter,
    ce: &ConfigExport,
    api: &Api<ConfigExport>,
    update: Set,
) -> Result<(), kube::Error> {
    let old = ce.status.clone().unwrap_or_default();
    let now = crate::kit::conditions::now();
    let status = ConfigExportStatus {
        observed_generation: ce.metadata.generation,
        conditions: conditions::merge(
            &old.conditions,
            std::slice::from_ref(&update),
            ce.metadata.generation,
            &now,
        ),
    };
    if status == old {
        return Ok(());
    }
    let changed = old
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .is_none_or(|c| c.reason != update.reason || c.message != update.message);
    ex.metrics.api_write("configexports", "patch-status");
    api.patch_status(
        &ce.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await?;
    if changed && update.reason != "WaitingForDependencies" {
        let ev =
            crate::kit::events::event(!update.status, update.reason, &update.message, "Export");
        ex.kit.events.send(ev, ce.object_ref(&()));
    }
    Ok(())
}

/// Writes the target if it is ours (or absent) and differs; the condition to report.
async fn write_target(
    ex: &Exporter,
    ce: &ConfigExport,
    ns: &str,
    values: &[(String, Json)],
) -> Result<Set, kube::Error> {
    let name = &ce.spec.target.name;
    let data: BTreeMap<String, String> = values
        .iter()
        .map(|(k, v)| (k.clone(), to_text(v)))
        .collect();
    let owner = ce.controller_owner_ref(&()).map(|o| vec![o]);
    let labels = Some(BTreeMap::from([(EXPORT_LABEL.to_owned(), ce.name_any())]));
    let ours = |meta: &ObjectMeta| {
        meta.owner_references
            .as_ref()
            .is_some_and(|os| os.iter().any(|o| Some(&o.uid) == ce.metadata.uid.as_ref()))
    };
    let not_owned = || {
        Set::new(
            READY,
            false,
            "TargetNotOwned",
            format!(
                "{:?} {name} exists and was not made by this ConfigExport; Kraken does not overwrite it (delete it or choose another name)",
                ce.spec.target.kind
            ),
        )
    };
    match ce.spec.target.kind {
        TargetKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(ex.client.clone(), ns);
            if let Some(existing) = api.get_opt(name).await? {
                if !ours(&existing.metadata) {
                    return Ok(not_owned());
                }
                if existing.data.as_ref() == Some(&data) {
                    return Ok(ready(ce, data.len()));
                }
            }
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(ns.to_owned()),
                    owner_references: owner,
                    labels,
                    ..Default::default()
                },
                data: Some(data.clone()),
                ..Default::default()
            };
            ex.metrics.api_write("configmaps", "apply");
            api.patch(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(serde_json::to_value(&cm).map_err(kube::Error::SerdeError)?),
            )
            .await?;
        }
        TargetKind::Secret => {
            let api: Api<Secret> = Api::namespaced(ex.client.clone(), ns);
            let bytes: BTreeMap<String, ByteString> = data
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
                .collect();
            if let Some(existing) = api.get_opt(name).await? {
                if !ours(&existing.metadata) {
                    return Ok(not_owned());
                }
                if existing.data.as_ref() == Some(&bytes) {
                    return Ok(ready(ce, data.len()));
                }
            }
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(ns.to_owned()),
                    owner_references: owner,
                    labels,
                    ..Default::default()
                },
                data: Some(bytes),
                type_: Some("Opaque".into()),
                ..Default::default()
            };
            ex.metrics.api_write("secrets", "apply");
            api.patch(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(serde_json::to_value(&secret).map_err(kube::Error::SerdeError)?),
            )
            .await?;
        }
    }
    Ok(ready(ce, data.len()))
}

fn ready(ce: &ConfigExport, n: usize) -> Set {
    Set::new(
        READY,
        true,
        "Exported",
        format!(
            "{n} keys written to {:?} {}",
            ce.spec.target.kind, ce.spec.target.name
        ),
    )
}

async fn delete_target(ex: &Exporter, ce: &ConfigExport, ns: &str) -> Result<(), kube::Error> {
    let name = &ce.spec.target.name;
    let uid = ce.metadata.uid.clone();
    let ours = |meta: &ObjectMeta| {
        meta.owner_references
            .as_ref()
            .is_some_and(|os| os.iter().any(|o| Some(&o.uid) == uid.as_ref()))
    };
    let dp = DeleteParams::default();
    match ce.spec.target.kind {
        TargetKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(ex.client.clone(), ns);
            if let Some(o) = api.get_opt(name).await?
                && ours(&o.metadata)
            {
                ex.metrics.api_write("configmaps", "delete");
                api.delete(name, &dp).await?;
            }
        }
        TargetKind::Secret => {
            let api: Api<Secret> = Api::namespaced(ex.client.clone(), ns);
            if let Some(o) = api.get_opt(name).await?
                && ours(&o.metadata)
            {
                ex.metrics.api_write("secrets", "delete");
                api.delete(name, &dp).await?;
            }
        }
    }
    Ok(())
}

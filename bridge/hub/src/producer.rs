//! The producer's side of the hub, shared by every kind that publishes outputs — the generic
//! managed-resource controller and the native EC2 controller alike: publishing the
//! StateDeclaration `<kind>-<name>.<group>` (sensitive outputs into the Secret
//! `<kind>-<name>.<group>-outputs`) once something reads it, finding the consumers that still read it before a deletion, and
//! retiring the hub objects after one.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, Patch, PostParams};
use serde_json::{Value as Json, json};

use super::consumer::drop_request;
use super::{Index, ObjectKey, Published, SourceKind, group_of, object_key, outputs_secret_name};
use kraken_core_kinds::hub::{
    DependencyRequest, ObjectReference, SensitiveOutputs, StateDeclaration, StateDeclarationSpec,
};
use kraken_kit::hash::fnv1a_parts;
use kraken_kit::metrics::Metrics;
use kraken_kit::ownership::{self, Claim};

/// On a producer: publish its StateDeclaration even while nothing reads it.
pub const PUBLISH_ANNOTATION: &str = "kraken.dev/publish";

/// Whether `annotations` ask for the declaration to be published always.
pub fn always_published(annotations: &BTreeMap<String, String>) -> bool {
    annotations.get(PUBLISH_ANNOTATION).map(String::as_str) == Some("true")
}

/// Field manager of the StateDeclarations' Secrets.
const MANAGER: &str = "kraken";

/// One object that publishes outputs: who it is and what it talks to.
pub struct Producer<'a> {
    pub client: &'a Client,
    pub metrics: &'a Metrics,
    pub index: &'a Index,
    pub namespace: &'a str,
    /// The producer itself (its uid owns what it publishes).
    pub object: ObjectReference,
    /// Publish even while nothing reads it (the object's `kraken.dev/publish: "true"`).
    pub always: bool,
}

impl Producer<'_> {
    /// The name of its StateDeclaration (and of its DependencyRequest).
    pub fn key(&self) -> String {
        object_key(
            group_of(&self.object.api_version),
            &self.object.kind,
            &self.object.name,
        )
    }

    fn owner(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.object.api_version.clone(),
            kind: self.object.kind.clone(),
            name: self.object.name.clone(),
            uid: self.object.uid.clone(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    /// Publishes `outputs` (non-sensitive, Kubernetes field names) and `sensitive` (one key
    /// per output, its value as JSON text) and returns what to record in the producer's
    /// `status.stateDeclaration`, or `None` while nothing reads the object and nothing was
    /// published before: a declaration is written once a request reads it (the hub wakes the
    /// producer then, [`Index::wake_producer`]), or always with [`PUBLISH_ANNOTATION`], so a
    /// create nobody depends on costs two writes less. `recorded` is what the status says was
    /// published last:
    /// without sensitive outputs a hash in it says whether anything changed, so a pass that
    /// changes nothing costs no API call here (the hash covers no sensitive value; with
    /// sensitive outputs the objects are compared instead).
    pub async fn publish(
        &self,
        outputs: Json,
        sensitive: BTreeMap<String, ByteString>,
        recorded: Option<&Json>,
    ) -> Result<Option<Json>, kube::Error> {
        let name = self.key();
        if recorded.is_none() && !self.always && !self.is_read(&name) {
            return Ok(None);
        }
        let secret_name = outputs_secret_name(&name);
        let spec = StateDeclarationSpec {
            producer: self.object.clone(),
            outputs,
            sensitive: (!sensitive.is_empty()).then(|| SensitiveOutputs {
                secret_name: secret_name.clone(),
                keys: sensitive.keys().cloned().collect(),
            }),
        };
        let text = serde_json::to_string(&spec).unwrap_or_default();
        let hash = sensitive.is_empty().then(|| status_hash(&name, &text));
        let record = match &hash {
            Some(h) => json!({"name": name, "hash": h}),
            None => json!({"name": name}),
        };
        if hash.is_some() && recorded == Some(&record) {
            return Ok(Some(record));
        }
        // What this process published last: unchanged parts are not written again, and changed
        // ones are written without reading them first.
        let uid = self.object.uid.as_str();
        let memo = self.index.published(uid);
        let now = Published {
            spec: fnv1a_parts(&[name.as_bytes(), text.as_bytes()]),
            secret: secret_digest(&sensitive),
        };
        if memo == Some(now) {
            return Ok(Some(record));
        }
        if !sensitive.is_empty() && memo.map(|m| m.secret) != Some(now.secret) {
            self.write_secret(&secret_name, sensitive, memo.is_none())
                .await?;
        }
        if memo.map(|m| m.spec) != Some(now.spec) {
            // With a hash, a different one means different outputs: write without reading
            // first (a patch to what is already there changes nothing on the server). Without
            // one (sensitive outputs) and nothing published by this process yet, compare with
            // what is there.
            let compare = hash.is_none() && memo.is_none();
            self.write_declaration(&name, spec, compare, recorded.is_none())
                .await?;
        }
        self.index.set_published(uid, Some(now));
        Ok(Some(record))
    }

    /// Whether a request (other than the object's own) reads declaration `name`.
    fn is_read(&self, name: &str) -> bool {
        self.index
            .readers(
                self.namespace,
                &ObjectKey(SourceKind::StateDeclaration, name.to_owned()),
            )
            .iter()
            .any(|r| r != name)
    }

    /// Writes the StateDeclaration `name`: with `compare`, only if it says something else;
    /// `first` when nothing was recorded as published (create, else patch).
    async fn write_declaration(
        &self,
        name: &str,
        spec: StateDeclarationSpec,
        compare: bool,
        first: bool,
    ) -> Result<(), kube::Error> {
        let api: Api<StateDeclaration> = Api::namespaced(self.client.clone(), self.namespace);
        if compare && api.get_opt(name).await?.is_some_and(|sd| sd.spec == spec) {
            return Ok(());
        }
        // A JSON patch replacing spec is cheaper for the API server than a server-side apply
        // (no managed-fields merge). Never published (nothing recorded): create; else patch.
        let published = BTreeMap::from([(
            super::PUBLISHED_AT_ANNOTATION.to_owned(),
            k8s_openapi::jiff::Timestamp::now().to_string(),
        )]);
        let create = || {
            let mut sd = StateDeclaration::new(name, spec.clone());
            sd.metadata.namespace = Some(self.namespace.to_owned());
            sd.metadata.owner_references = Some(vec![self.owner()]);
            sd.metadata.annotations = Some(published.clone());
            sd
        };
        let created = first && {
            self.metrics.api_write("statedeclarations", "create");
            match api.create(&PostParams::default(), &create()).await {
                Ok(_) => true,
                Err(kube::Error::Api(e)) if e.code == 409 => false,
                Err(e) => return Err(e),
            }
        };
        if created {
            return Ok(());
        }
        // The test makes the server refuse the patch unless this producer owns the object
        // (it is the only owner Kraken puts on it): a StateDeclaration of this name made by
        // someone else is never overwritten, and no read is needed to know.
        let replace = json!([
            {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": self.object.uid},
            {"op": "replace", "path": "/spec", "value": spec},
            // Kraken's own object: its annotations are only this stamp.
            {"op": "add", "path": "/metadata/annotations", "value": published},
        ]);
        let patch = serde_json::from_value(replace).map_err(kube::Error::SerdeError)?;
        self.metrics.api_write("statedeclarations", "patch");
        match api
            .patch(
                name,
                &kraken_kit::status::patch_params(),
                &Patch::<Json>::Json(patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if ownership::is_refusal(&e) || is_failed_test(&e) => Err(ownership::refusal(
                &format!("StateDeclaration {name}"),
                "someone else",
            )),
            Err(kube::Error::Api(e)) if e.code == 404 && !first => {
                self.metrics.api_write("statedeclarations", "create");
                api.create(&PostParams::default(), &create()).await?;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Writes the sensitive outputs; with `compare`, only if the Secret holds other values.
    async fn write_secret(
        &self,
        secret_name: &str,
        values: BTreeMap<String, ByteString>,
        compare: bool,
    ) -> Result<(), kube::Error> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), self.namespace);
        if compare && let Some(current) = secrets.get_opt(secret_name).await? {
            if let Claim::Foreign(whose) = ownership::claim(&current.metadata, &self.owner()) {
                return Err(ownership::refusal(&format!("Secret {secret_name}"), &whose));
            }
            if current.data.as_ref() == Some(&values) {
                return Ok(());
            }
        }
        super::apply_owned_secret(
            &secrets,
            (self.metrics, MANAGER),
            (self.namespace, secret_name),
            Some(self.owner()),
            values,
        )
        .await
    }

    /// The consumers that still read this object's outputs (their DependencyRequests'
    /// names); none when `force` (the `kraken.dev/force-delete` annotation).
    pub async fn readers(&self, force: bool) -> Result<Vec<String>, kube::Error> {
        if force {
            return Ok(Vec::new());
        }
        let own = self.key();
        let listed = self.index.readers(
            self.namespace,
            &ObjectKey(SourceKind::StateDeclaration, own.clone()),
        );
        // The index can lag a deletion by a moment: a reader counts only while its request
        // exists.
        let api: Api<DependencyRequest> = Api::namespaced(self.client.clone(), self.namespace);
        let mut out = Vec::new();
        for r in listed.into_iter().filter(|r| *r != own) {
            if api.get_opt(&r).await?.is_some() {
                out.push(r);
            } else {
                self.index.forget(self.namespace, &r);
            }
        }
        Ok(out)
    }

    /// After a deletion: the object's request, StateDeclaration and outputs Secret go too
    /// (nothing else collects them where no controller manager runs) — each only if it is
    /// this object's, and by uid.
    pub async fn retire(&self) -> Result<(), kube::Error> {
        let name = self.key();
        self.index.set_published(&self.object.uid, None);
        drop_request(
            self.client,
            self.metrics,
            self.namespace,
            &name,
            &self.owner(),
        )
        .await?;
        self.metrics.api_write("statedeclarations", "delete");
        ownership::delete_owned(
            &Api::<StateDeclaration>::namespaced(self.client.clone(), self.namespace),
            &name,
            &self.owner(),
        )
        .await?;
        ownership::delete_owned(
            &Api::<Secret>::namespaced(self.client.clone(), self.namespace),
            &outputs_secret_name(&name),
            &self.owner(),
        )
        .await
    }
}

/// Whether the API server refused the owner-testing JSON patch: a failed `test` (the owner
/// differs, or the object has none) comes back as `422 Invalid` without details, and nothing
/// else in that patch can be invalid (its spec is the one a create would write).
fn is_failed_test(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(r) if r.code == 422 && r.reason == "Invalid")
}

/// The hash recorded in a producer's status for a StateDeclaration without sensitive outputs.
fn status_hash(name: &str, text: &str) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    text.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// The digest of the sensitive outputs kept in memory (never written); `None` without any.
fn secret_digest(sensitive: &BTreeMap<String, ByteString>) -> Option<u64> {
    (!sensitive.is_empty()).then(|| {
        let parts: Vec<&[u8]> = sensitive
            .iter()
            .flat_map(|(k, v)| [k.as_bytes(), v.0.as_slice()])
            .collect();
        fnv1a_parts(&parts)
    })
}

/// The `InUse` message of a producer whose deletion waits for `readers`.
pub fn in_use_message(readers: &[String]) -> String {
    format!(
        "deletion waits: values of this object are still read by {}; they are deleted first (or annotate {}=true)",
        readers.join(", "),
        super::FORCE_DELETE_ANNOTATION
    )
}

/// Whether the `kraken.dev/force-delete` annotation asks to skip waiting for readers.
pub fn forced(annotations: &BTreeMap<String, String>) -> bool {
    annotations
        .get(super::FORCE_DELETE_ANNOTATION)
        .is_some_and(|v| v != "false")
}

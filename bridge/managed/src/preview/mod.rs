//! `kraken plan`: what applying a set of manifests would do, computed against the live cluster
//! and the real providers, writing nothing — no objects, no state Secrets, no annotations, no
//! `ApplyResourceChange`.
//!
//! It is the reconcile's own first half, run on objects that are not applied yet: the same
//! steps up to the plan, through the same code ([`super::observe::up_to_plan`]: configuration
//! → state → import/read → plan), with a pass that reads only ([`pass`]); the same
//! ProviderConfig → provider (`source`), the same configuration value (`spec.forProvider`,
//! `valuesFrom` resolved with the hub's reference rules, Secret references), and the same
//! change list as `status.plan` ([`super::plan::changes`]), so `kraken plan` and a held plan
//! agree. What differs is where inputs come from when they are not
//! in the cluster yet: a ProviderConfig, ConfigMap or Secret of the manifest set is taken from
//! the set, and an output of a producer the set creates or changes is unknown (known after
//! apply), as Terraform shows it.
//!
//! The files: [`manifests`] (files → documents), [`kinds`] (documents → what the cluster serves
//! them as), [`values`] (`valuesFrom` through the cluster), [`pass`] (where one object's plan
//! reads), [`object`] (one object's plan), and
//! this root, which plans the set in waves (producers before the consumers that read them),
//! each wave concurrently and bounded.

pub mod manifests;

mod kinds;
mod object;
mod pass;
mod values;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::StreamExt as _;
use serde_json::{Value as Json, json};

use kraken_core_kinds::ProviderConfig;
use kraken_provider::lifecycle::Action;
use kraken_source::Source;
pub use manifests::{Manifest, ManifestError};

/// What `kraken plan` works with.
pub struct Planner {
    pub client: kube::Client,
    /// The provider source, over a pool of its own: one process per ProviderConfig.
    pub source: Arc<Source>,
    /// The namespace of documents that name none (`--namespace`, else the kubeconfig's).
    pub namespace: String,
    /// How many objects are planned at once.
    pub concurrency: usize,
}

/// One document of the set: which object it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub api_version: String,
    pub kind: String,
    /// `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    pub name: String,
}

/// What applying one document would do.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A managed kind, planned through its provider.
    Planned(ObjectPlan),
    /// Not a kind `kraken plan` plans (a ConfigMap, a Provider, a ProviderConfig...): applied
    /// as it is.
    AsIs(String),
    /// It could not be planned: why, in words that name what to fix.
    Failed(String),
}

/// The plan of one managed object.
#[derive(Debug, Clone)]
pub struct ObjectPlan {
    pub action: Action,
    /// Per top-level attribute, as in `status.plan.changes` (Kubernetes field names,
    /// `(sensitive)`, `(known after apply)`, `forcesReplacement`), unbounded.
    pub changes: Vec<Json>,
    /// What each `spec.valuesFrom` entry resolves to.
    pub values_from: Vec<Json>,
    /// What the operator would do besides (a plan held for approval, a refused replacement).
    pub notes: Vec<String>,
    /// What the object would publish (its `status.atProvider`) when the plan changes nothing:
    /// from the refreshed or imported state. Consumers in the set read it, so objects adopted
    /// together (`spec.importId`) plan against each other's real values.
    pub outputs: Option<Json>,
}

/// One document and its outcome.
#[derive(Debug, Clone)]
pub struct Item {
    /// `file` or `file#n` (the n-th document, from 1).
    pub origin: String,
    pub subject: Option<Subject>,
    pub outcome: Outcome,
}

/// The plan of a manifest set, in the order of the documents.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub items: Vec<Item>,
}

impl Report {
    /// Whether applying would change anything a provider manages.
    pub fn has_changes(&self) -> bool {
        self.items.iter().any(|i| match &i.outcome {
            Outcome::Planned(p) => changes_anything(p.action),
            _ => false,
        })
    }

    /// Whether any document could not be planned.
    pub fn has_failures(&self) -> bool {
        self.items
            .iter()
            .any(|i| matches!(i.outcome, Outcome::Failed(_)))
    }

    /// The machine-readable form (`kraken plan --json`).
    pub fn to_json(&self) -> Json {
        let items: Vec<Json> = self.items.iter().map(item_json).collect();
        let count = |a: Action| {
            self.items
                .iter()
                .filter(|i| matches!(&i.outcome, Outcome::Planned(p) if p.action == a))
                .count()
        };
        json!({
            "items": items,
            "summary": {
                "create": count(Action::Create),
                "update": count(Action::Update),
                "replace": count(Action::Replace),
                "noOp": count(Action::NoOp) + count(Action::Delete),
                "asIs": self.items.iter().filter(|i| matches!(i.outcome, Outcome::AsIs(_))).count(),
                "failed": self.items.iter().filter(|i| matches!(i.outcome, Outcome::Failed(_))).count(),
            },
            "changes": self.has_changes(),
        })
    }
}

/// Whether an action changes the external object. A planned delete of a live object is never
/// carried out by a reconcile (it settles), so it counts as no change.
pub fn changes_anything(action: Action) -> bool {
    matches!(action, Action::Create | Action::Update | Action::Replace)
}

/// The lower-case word an action is shown as (`create`, `update`, `replace`, `no-op`).
pub fn action_word(action: Action) -> &'static str {
    match action {
        Action::Create => "create",
        Action::Update => "update",
        Action::Replace => "replace",
        Action::NoOp | Action::Delete => "no-op",
    }
}

fn item_json(i: &Item) -> Json {
    let mut out = json!({"origin": i.origin});
    if let Some(s) = &i.subject {
        out["apiVersion"] = json!(s.api_version);
        out["kind"] = json!(s.kind);
        out["name"] = json!(s.name);
        if let Some(ns) = &s.namespace {
            out["namespace"] = json!(ns);
        }
    }
    match &i.outcome {
        Outcome::Planned(p) => {
            out["action"] = json!(action_word(p.action));
            out["changes"] = json!(p.changes);
            if !p.values_from.is_empty() {
                out["valuesFrom"] = json!(p.values_from);
            }
            if !p.notes.is_empty() {
                out["notes"] = json!(p.notes);
            }
        }
        Outcome::AsIs(why) => {
            out["action"] = json!("as-is");
            out["note"] = json!(why);
        }
        Outcome::Failed(why) => {
            out["action"] = json!("error");
            out["error"] = json!(why);
        }
    }
    out
}

/// What every object's plan may consult: the cluster's kinds, and the objects of the set that
/// stand in for ones not applied yet.
struct Shared {
    client: kube::Client,
    source: Arc<Source>,
    kinds: kinds::Kinds,
    /// ProviderConfigs, ConfigMaps and Secrets of the set, by (namespace, name).
    provider_configs: HashMap<(String, String), ProviderConfig>,
    /// ProviderConfigs read from the cluster, so a thousand objects make one GET each.
    cluster_provider_configs: std::sync::Mutex<HashMap<(String, String), ProviderConfig>>,
    config_maps: HashMap<(String, String), Json>,
    secrets: HashMap<(String, String), Json>,
    /// What producers of the set planned without a change would publish, by (namespace,
    /// declaration), filled wave by wave.
    planned_outputs:
        std::sync::Mutex<HashMap<(String, String), kraken_core_kinds::StateDeclaration>>,
}

/// A managed object of the set waiting to be planned.
struct Pending {
    index: usize,
    kind: kraken_core_kinds::KindInfo,
    doc: Json,
    namespace: String,
    name: String,
    /// Its StateDeclaration's name (what references to it read).
    declaration: (String, String),
    /// The declarations of the set it reads.
    reads: BTreeSet<(String, String)>,
}

impl Planner {
    /// Plans every document of `manifests`. Errors only when the cluster cannot be asked what
    /// it serves; every problem of one document is that document's [`Outcome::Failed`].
    pub async fn plan(&self, manifests: Vec<Manifest>) -> Result<Report, kube::Error> {
        let kinds = kinds::Kinds::discover(&self.client).await?;
        let mut shared = Shared {
            client: self.client.clone(),
            source: self.source.clone(),
            kinds,
            provider_configs: HashMap::new(),
            cluster_provider_configs: std::sync::Mutex::default(),
            config_maps: HashMap::new(),
            secrets: HashMap::new(),
            planned_outputs: std::sync::Mutex::default(),
        };
        let mut items = Vec::with_capacity(manifests.len());
        let mut pending = Vec::new();
        for (index, m) in manifests.into_iter().enumerate() {
            let (item, managed) = self.classify(&mut shared, m).await;
            if let Some((kind, doc)) = managed
                && let Some(s) = &item.subject
            {
                let namespace = s.namespace.clone().unwrap_or_default();
                let declaration = (
                    namespace.clone(),
                    kraken_hub::object_key(&kind.resource.group, &kind.resource.kind, &s.name),
                );
                pending.push(Pending {
                    index,
                    kind,
                    doc,
                    name: s.name.clone(),
                    namespace,
                    declaration,
                    reads: BTreeSet::new(),
                });
            }
            items.push(item);
        }
        let shared = Arc::new(shared);
        for p in &mut pending {
            p.reads = values::declarations_read(&shared, &p.doc, &p.namespace);
        }
        self.in_waves(&shared, pending, &mut items).await;
        Ok(Report { items })
    }

    /// The subject of a document and what it is: managed (to plan), as-is, or failed.
    async fn classify(
        &self,
        shared: &mut Shared,
        m: Manifest,
    ) -> (Item, Option<(kraken_core_kinds::KindInfo, Json)>) {
        let (subject, class) = kinds::classify(shared, &m.doc, &self.namespace).await;
        let outcome = match class {
            kinds::Class::Managed(kind) => {
                let item = Item {
                    origin: m.origin,
                    subject,
                    outcome: Outcome::AsIs(String::new()),
                };
                return (item, Some((kind, m.doc)));
            }
            kinds::Class::AsIs(why) => {
                if let Some(s) = &subject {
                    stand_in(shared, s, &m.doc);
                }
                Outcome::AsIs(why)
            }
            kinds::Class::Failed(why) => Outcome::Failed(why),
        };
        let item = Item {
            origin: m.origin,
            subject,
            outcome,
        };
        (item, None)
    }

    /// Plans the managed objects: each wave those whose producers in the set are planned, so a
    /// consumer knows whether the outputs it reads will change.
    async fn in_waves(&self, shared: &Arc<Shared>, mut pending: Vec<Pending>, items: &mut [Item]) {
        let in_set: BTreeSet<(String, String)> =
            pending.iter().map(|p| p.declaration.clone()).collect();
        let mut planned: BTreeMap<(String, String), Option<Action>> = BTreeMap::new();
        while !pending.is_empty() {
            let (ready, waiting): (Vec<Pending>, Vec<Pending>) =
                pending.into_iter().partition(|p| {
                    p.reads.iter().all(|d| {
                        !in_set.contains(d) || planned.contains_key(d) || *d == p.declaration
                    })
                });
            if ready.is_empty() {
                for p in &waiting {
                    items[p.index].outcome = Outcome::Failed(
                        "its valuesFrom and those of other objects of the set form a cycle"
                            .to_owned(),
                    );
                }
                return;
            }
            // Outputs of a producer the set creates, changes or fails to plan are unknown.
            let unknown: BTreeSet<(String, String)> = planned
                .iter()
                .filter(|(_, a)| !matches!(a, Some(Action::NoOp | Action::Delete)))
                .map(|(d, _)| d.clone())
                .collect();
            let unknown = Arc::new(unknown);
            let results: Vec<(Pending, Outcome)> = futures::stream::iter(ready)
                .map(|p| {
                    let (shared, unknown) = (shared.clone(), unknown.clone());
                    async move {
                        let outcome = object::plan_object(
                            &shared,
                            &unknown,
                            (&p.kind, &p.doc),
                            (&p.namespace, &p.name),
                        )
                        .await;
                        (p, outcome)
                    }
                })
                .buffer_unordered(self.concurrency.max(1))
                .collect()
                .await;
            for (p, outcome) in results {
                let action = match &outcome {
                    // A data source read after apply: what it reads is not known yet.
                    Outcome::Planned(plan) if p.kind.data_source && plan.outputs.is_none() => None,
                    Outcome::Planned(plan) => Some(plan.action),
                    _ => None,
                };
                if let Outcome::Planned(ObjectPlan {
                    outputs: Some(outputs),
                    ..
                }) = &outcome
                {
                    publish_planned(shared, &p, outputs.clone());
                }
                planned.insert(p.declaration.clone(), action);
                items[p.index].outcome = outcome;
            }
            pending = waiting;
        }
    }
}

/// Records what `p`, planned without a change, would publish, for the consumers of later waves.
fn publish_planned(shared: &Shared, p: &Pending, outputs: Json) {
    use kraken_core_kinds::hub::ObjectReference;
    let producer = ObjectReference {
        api_version: p.kind.resource.api_version.clone(),
        kind: p.kind.resource.kind.clone(),
        name: p.name.clone(),
        uid: String::new(),
    };
    let sd = kraken_hub::trust::stand_in(&p.declaration.1, producer, outputs);
    shared
        .planned_outputs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(p.declaration.clone(), sd);
}

/// Keeps a ProviderConfig, ConfigMap or Secret of the set: what will be there once applied.
fn stand_in(shared: &mut Shared, s: &Subject, doc: &Json) {
    let key = (s.namespace.clone().unwrap_or_default(), s.name.clone());
    let group = kraken_hub::group_of(&s.api_version);
    match (group, s.kind.as_str()) {
        ("core.kraken.dev", "ProviderConfig") => {
            if let Ok(pc) = serde_json::from_value::<ProviderConfig>(doc.clone()) {
                shared.provider_configs.insert(key, pc);
            }
        }
        ("", "ConfigMap") => {
            shared.config_maps.insert(key, doc.clone());
        }
        ("", "Secret") => {
            shared.secrets.insert(key, doc.clone());
        }
        _ => {}
    }
}

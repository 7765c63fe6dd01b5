//! A stateful in-memory provider for unit tests: implements [`Plugin`] over a table of objects
//! keyed by id, so a controller's whole plan → apply → read cycle runs in-process.
//!
//! For the unit tests of this crate and the layers above (the end-to-end tests in `tests/`
//! drive real provider binaries). It is compiled into the library rather than kept behind a
//! feature: a feature turned on by the layers' dev-dependencies made `cargo test --workspace`
//! build every layer twice (with and without it), and nothing in the binary calls it, so the
//! linker drops it.
//!
//! One resource type, [`TYPE`], with a required argument `name` (also the id the object gets,
//! as for providers whose objects are named by the user), an optional `description`, an
//! optional `zone` that forces replacement, optional `tags`, an optional sensitive `password`, a computed `id`
//! and a computed sensitive `token`.
//! Its list resource (`ListResource`) lists every object, or those of one `zone`; its resource
//! identity is `{id}` (an import by identity names the id). An import answers private data
//! that the read after it consumes, as framework providers do.
//! The data source of the same name looks an object up by `name` and answers its `description`,
//! `zone`, `id` and sensitive `token`; it errors when none has that name.
//! It plans as Terraform providers do (unknown computed values on create, `requires_replace`
//! for `zone` when an update changes it), applies to the table, and reads a missing object as
//! null state (gone). `tests/tests/contract_provider.rs` holds this resource type to the
//! fixture provider's `fixture_thing`, which has its shape, over both protocols: the same
//! calls, the same answers.
//!
//! Faults: error diagnostics on plan, apply or import ([`FakePlugin::plan_diagnostics`],
//! [`FakePlugin::apply_diagnostics`], [`FakePlugin::import_diagnostics`]) and a crash mid-create ([`FakePlugin::crash_next_create`]:
//! the object is made, then the call fails as when the process dies). Every RPC is counted
//! ([`FakePlugin::calls`]), and so are the objects created, updated and deleted.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

mod import;

use super::schema::{Attribute, Block, ProviderSchema, Schema};
use super::{
    ApplyRequest, ApplyResponse, Diagnostic, ImportResponse, ListRequest, ListResponse, Listed,
    PlanRequest, PlanResponse, Plugin, ProviderError, ReadDataResponse, ReadRequest, ReadResponse,
    Result, Severity, UpgradeRequest, UpgradeResponse,
};
use kraken_value::json::decode_json_bytes;
use kraken_value::{AttrPath, Type, Value};

/// The one resource type the fake serves.
pub const TYPE: &str = "fake_thing";

/// The private data an import answers with and the read after it consumes, as framework
/// providers mark an imported state for the read that follows.
const IMPORTED: &[u8] = b"fake:imported";

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<String, Value>,
    calls: HashMap<&'static str, usize>,
    creates: usize,
    updates: usize,
    deletes: usize,
    plan_error: bool,
    apply_error: bool,
    delete_error: bool,
    import_error: bool,
    list_error: bool,
    crash_next_create: bool,
    fresh_ids: bool,
    /// Private data every plan answers with, when set (as SDKv2 providers add their own).
    plan_private: Option<Vec<u8>>,
}

/// The fake provider; share it with `Arc` (the table lives inside).
#[derive(Debug, Default)]
pub struct FakePlugin {
    state: Mutex<State>,
}

fn attr(ty: Type, required: bool, optional: bool, computed: bool) -> Attribute {
    Attribute {
        ty: Some(ty),
        required,
        optional,
        computed,
        ..Attribute::default()
    }
}

/// The fake's schema: see the module docs.
pub fn schema() -> ProviderSchema {
    let mut token = attr(Type::String, false, false, true);
    token.sensitive = true;
    let mut password = attr(Type::String, false, true, false);
    password.sensitive = true;
    let attributes = BTreeMap::from([
        ("name".to_owned(), attr(Type::String, true, false, false)),
        (
            "description".to_owned(),
            attr(Type::String, false, true, false),
        ),
        ("zone".to_owned(), attr(Type::String, false, true, false)),
        (
            "tags".to_owned(),
            attr(Type::map(Type::String), false, true, false),
        ),
        ("password".to_owned(), password),
        ("id".to_owned(), attr(Type::String, false, false, true)),
        ("token".to_owned(), token),
    ]);
    let resource = Schema {
        version: 0,
        block: Block {
            attributes,
            ..Block::default()
        },
    };
    let data_attributes = BTreeMap::from([
        ("name".to_owned(), attr(Type::String, true, false, false)),
        (
            "description".to_owned(),
            attr(Type::String, false, false, true),
        ),
        ("zone".to_owned(), attr(Type::String, false, false, true)),
        ("id".to_owned(), attr(Type::String, false, false, true)),
        ("token".to_owned(), {
            let mut token = attr(Type::String, false, false, true);
            token.sensitive = true;
            token
        }),
    ]);
    let data_source = Schema {
        version: 0,
        block: Block {
            attributes: data_attributes,
            ..Block::default()
        },
    };
    // Its list resource: every object, or those of one `zone`.
    let list = Schema {
        version: 0,
        block: Block {
            attributes: BTreeMap::from([(
                "zone".to_owned(),
                attr(Type::String, false, true, false),
            )]),
            ..Block::default()
        },
    };
    ProviderSchema {
        resources: BTreeMap::from([(TYPE.to_owned(), resource)]),
        data_sources: BTreeMap::from([(TYPE.to_owned(), data_source)]),
        list_resources: BTreeMap::from([(TYPE.to_owned(), list)]),
        ..ProviderSchema::default()
    }
}

fn error(summary: &str, attribute: Option<&str>) -> Diagnostic {
    Diagnostic {
        severity: Severity::Error,
        summary: summary.to_owned(),
        detail: String::new(),
        attribute: attribute.map(|a| AttrPath::root().attr(a)),
    }
}

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v.untyped() {
        Value::Object(m) => m.get(key),
        _ => None,
    }
}

fn set(v: &mut Value, key: &str, value: Value) {
    if let Value::Object(m) = v {
        m.insert(key.to_owned(), value);
    }
}

fn id_of(v: &Value) -> Option<String> {
    match get(v, "id").map(Value::untyped) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    }
}

impl FakePlugin {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, rpc: &'static str) {
        *self.lock().calls.entry(rpc).or_default() += 1;
    }

    /// How many times the RPC `rpc` (e.g. `ApplyResourceChange`) was called.
    pub fn calls(&self, rpc: &str) -> usize {
        self.lock().calls.get(rpc).copied().unwrap_or_default()
    }

    /// Objects created, updated and deleted so far.
    pub fn creates(&self) -> usize {
        self.lock().creates
    }

    pub fn updates(&self) -> usize {
        self.lock().updates
    }

    pub fn deletes(&self) -> usize {
        self.lock().deletes
    }

    /// The objects that exist now, by id.
    pub fn objects(&self) -> BTreeMap<String, Value> {
        self.lock().objects.clone()
    }

    /// Changes (`Some`) or deletes an object behind Kraken's back, as drift.
    pub fn put(&self, id: &str, object: Option<Value>) {
        let mut s = self.lock();
        match object {
            Some(o) => s.objects.insert(id.to_owned(), o),
            None => s.objects.remove(id),
        };
    }

    /// While on, every plan answers with an error diagnostic.
    pub fn plan_diagnostics(&self, on: bool) {
        self.lock().plan_error = on;
    }

    /// While on, every apply changes nothing and answers with an error diagnostic.
    pub fn apply_diagnostics(&self, on: bool) {
        self.lock().apply_error = on;
    }

    /// While on, every destroy changes nothing and answers with an error diagnostic.
    pub fn delete_diagnostics(&self, on: bool) {
        self.lock().delete_error = on;
    }

    /// While on, every import answers with an error diagnostic (the provider cannot tell).
    pub fn import_diagnostics(&self, on: bool) {
        self.lock().import_error = on;
    }

    /// While on, every list answers with an error diagnostic.
    pub fn list_diagnostics(&self, on: bool) {
        self.lock().list_error = on;
    }

    /// From now on a create gives each object an id of its own (`<name>-<n>`), as most clouds
    /// do, instead of its name; an import by name still finds it.
    pub fn fresh_ids(&self) {
        self.lock().fresh_ids = true;
    }

    /// From now on every plan answers with `private` as the planned private data.
    pub fn plan_private(&self, private: &[u8]) {
        self.lock().plan_private = Some(private.to_vec());
    }

    /// The next create makes the object and then fails as a crashed process does.
    pub fn crash_next_create(&self) {
        self.lock().crash_next_create = true;
    }

    /// A planned create or update, with unknowns resolved as the "cloud" would.
    fn created_or_updated(&self, req: &ApplyRequest) -> Result<Value> {
        let mut s = self.lock();
        let mut object = req.planned_state.clone();
        if req.prior_state.is_null() {
            let name = match get(&object, "name").map(Value::untyped) {
                Some(Value::String(n)) => n.clone(),
                _ => String::new(),
            };
            s.creates += 1;
            let id = if s.fresh_ids {
                format!("{name}-{}", s.creates)
            } else {
                name.clone()
            };
            set(&mut object, "id", Value::string(id.clone()));
            set(&mut object, "token", Value::string(format!("token-{name}")));
            s.objects.insert(id, object.clone());
            if std::mem::take(&mut s.crash_next_create) {
                return Err(ProviderError::Crashed {
                    rpc: "ApplyResourceChange",
                });
            }
        } else {
            let id = id_of(&req.prior_state).unwrap_or_default();
            s.objects.insert(id, object.clone());
            s.updates += 1;
        }
        Ok(object)
    }
}

#[async_trait]
impl Plugin for FakePlugin {
    fn protocol_version(&self) -> u32 {
        6
    }

    async fn schema(&self) -> Result<Arc<ProviderSchema>> {
        self.count("GetProviderSchema");
        Ok(Arc::new(schema()))
    }

    async fn validate_provider_config(&self, _config: &Value) -> Result<Vec<Diagnostic>> {
        self.count("ValidateProviderConfig");
        Ok(Vec::new())
    }

    async fn validate_resource_config(
        &self,
        _type_name: &str,
        config: &Value,
    ) -> Result<Vec<Diagnostic>> {
        self.count("ValidateResourceConfig");
        match get(config, "name") {
            Some(v) if !v.is_null() => Ok(Vec::new()),
            _ => Ok(vec![error("Missing required argument", Some("name"))]),
        }
    }

    async fn validate_data_source_config(
        &self,
        _type_name: &str,
        _config: &Value,
    ) -> Result<Vec<Diagnostic>> {
        self.count("ValidateDataResourceConfig");
        Ok(Vec::new())
    }

    async fn configure(&self, _version: &str, _config: &Value) -> Result<Vec<Diagnostic>> {
        self.count("ConfigureProvider");
        Ok(Vec::new())
    }

    async fn upgrade_resource_state(&self, req: UpgradeRequest) -> Result<UpgradeResponse> {
        self.count("UpgradeResourceState");
        let ty = schema()
            .resource(&req.type_name)
            .map(|r| r.block.implied_type())
            .unwrap_or(Type::Dynamic);
        let (upgraded_state, diagnostics) = match decode_json_bytes(&req.raw_state_json, &ty) {
            Ok(v) => (v, Vec::new()),
            Err(e) => (Value::Null, vec![error(&e.to_string(), None)]),
        };
        Ok(UpgradeResponse {
            upgraded_state,
            diagnostics,
        })
    }

    async fn read_resource(&self, req: ReadRequest) -> Result<ReadResponse> {
        self.count("ReadResource");
        let found = id_of(&req.current_state).and_then(|id| self.lock().objects.get(&id).cloned());
        let private = if req.private == IMPORTED {
            Vec::new()
        } else {
            req.private
        };
        Ok(ReadResponse {
            new_state: found.unwrap_or(Value::Null),
            private,
            diagnostics: Vec::new(),
        })
    }

    async fn plan_resource_change(&self, req: PlanRequest) -> Result<PlanResponse> {
        self.count("PlanResourceChange");
        let mut resp = PlanResponse {
            planned_state: Value::Null,
            requires_replace: Vec::new(),
            planned_private: self
                .lock()
                .plan_private
                .clone()
                .unwrap_or(req.prior_private),
            diagnostics: Vec::new(),
            legacy_type_system: false,
        };
        if self.lock().plan_error {
            resp.diagnostics
                .push(error("plan refused by the fake", Some("description")));
            return Ok(resp);
        }
        if req.config.is_null() {
            return Ok(resp);
        }
        let mut planned = req.proposed_new_state;
        if req.prior_state.is_null() {
            set(&mut planned, "id", Value::unknown());
            set(&mut planned, "token", Value::unknown());
        } else {
            for computed in ["id", "token"] {
                let prior = get(&req.prior_state, computed).cloned();
                set(&mut planned, computed, prior.unwrap_or(Value::Null));
            }
            // As a framework provider's RequiresReplace: only when the value changes.
            if get(&req.prior_state, "zone") != get(&planned, "zone") {
                resp.requires_replace.push(AttrPath::root().attr("zone"));
            }
        }
        resp.planned_state = planned;
        Ok(resp)
    }

    async fn apply_resource_change(&self, req: ApplyRequest) -> Result<ApplyResponse> {
        self.count("ApplyResourceChange");
        let mut resp = ApplyResponse {
            new_state: req.prior_state.clone(),
            private: req.planned_private.clone(),
            diagnostics: Vec::new(),
            legacy_type_system: false,
        };
        let destroy = req.planned_state.is_null();
        if self.lock().apply_error || (destroy && self.lock().delete_error) {
            resp.diagnostics
                .push(error("apply failed in the fake", None));
            return Ok(resp);
        }
        if destroy {
            let mut s = self.lock();
            if let Some(id) = id_of(&req.prior_state) {
                s.objects.remove(&id);
            }
            s.deletes += 1;
            resp.new_state = Value::Null;
            return Ok(resp);
        }
        resp.new_state = self.created_or_updated(&req)?;
        Ok(resp)
    }

    async fn import_resource_state(
        &self,
        type_name: &str,
        by: &super::ImportBy,
    ) -> Result<ImportResponse> {
        self.count("ImportResourceState");
        Ok(self.import(type_name, by))
    }

    async fn identity_schemas(&self) -> Result<Arc<super::IdentitySchemas>> {
        Ok(Arc::new(import::identity_schemas()))
    }

    async fn read_data_source(&self, _type_name: &str, config: &Value) -> Result<ReadDataResponse> {
        self.count("ReadDataSource");
        let name = get(config, "name").cloned().unwrap_or(Value::Null);
        let found = self
            .lock()
            .objects
            .values()
            .find(|o| get(o, "name") == Some(&name))
            .cloned();
        let Some(object) = found else {
            return Ok(ReadDataResponse {
                state: Value::Null,
                diagnostics: vec![error("no object has this name", Some("name"))],
            });
        };
        let mut state = config.clone();
        for key in ["description", "zone", "id", "token"] {
            set(
                &mut state,
                key,
                get(&object, key).cloned().unwrap_or(Value::Null),
            );
        }
        Ok(ReadDataResponse {
            state,
            diagnostics: Vec::new(),
        })
    }

    async fn list_resource(&self, req: ListRequest) -> Result<ListResponse> {
        self.count("ListResource");
        if self.lock().list_error {
            return Ok(ListResponse {
                items: Vec::new(),
                diagnostics: vec![error("listing failed", None)],
            });
        }
        let zone = get(&req.config, "zone").filter(|z| !z.is_null()).cloned();
        let items = self
            .lock()
            .objects
            .values()
            .filter(|o| zone.is_none() || get(o, "zone") == zone.as_ref())
            .take(usize::try_from(req.limit).unwrap_or(usize::MAX))
            .map(|o| Listed {
                display_name: id_of(o).unwrap_or_default(),
                resource_object: req.include_resource_object.then(|| o.clone()),
            })
            .collect();
        Ok(ListResponse {
            items,
            diagnostics: Vec::new(),
        })
    }

    async fn stop(&self) -> Result<String> {
        self.count("StopProvider");
        Ok(String::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::{self, Action, LifecycleError, Plan};

    fn config(name: &str, zone: &str) -> Value {
        Value::Object(BTreeMap::from([
            ("name".to_owned(), Value::string(name)),
            ("description".to_owned(), Value::Null),
            ("zone".to_owned(), Value::string(zone)),
            ("password".to_owned(), Value::Null),
            ("id".to_owned(), Value::Null),
            ("token".to_owned(), Value::Null),
        ]))
    }

    async fn plan(p: &FakePlugin, prior: &Value, config: &Value) -> anyhow::Result<Plan> {
        Ok(lifecycle::plan(p, TYPE, prior, &[], config).await?)
    }

    #[tokio::test]
    async fn plans_creates_updates_replaces_and_deletes() -> anyhow::Result<()> {
        let p = FakePlugin::new();
        let create = plan(&p, &Value::Null, &config("a", "z1")).await?;
        assert_eq!(create.action, Action::Create);
        assert!(!get(&create.planned_state, "id").is_some_and(Value::is_known));
        let created = lifecycle::apply(p.as_ref(), &create).await?;
        assert_eq!(id_of(&created.new_state).as_deref(), Some("a"));
        assert_eq!(p.creates(), 1);
        let state = created.new_state;
        let same = plan(&p, &state, &config("a", "z1")).await?;
        assert_eq!(same.action, Action::NoOp);
        let mut described = config("a", "z1");
        set(&mut described, "description", Value::string("d"));
        assert_eq!(plan(&p, &state, &described).await?.action, Action::Update);
        // The provider itself names `zone` only when it changes, before any filtering.
        let raw = p
            .plan_resource_change(PlanRequest {
                type_name: TYPE.into(),
                prior_state: state.clone(),
                proposed_new_state: described.clone(),
                config: described.clone(),
                prior_private: Vec::new(),
            })
            .await?;
        assert!(
            raw.requires_replace.is_empty(),
            "{:?}",
            raw.requires_replace
        );
        let moved = plan(&p, &state, &config("a", "z2")).await?;
        assert_eq!(moved.action, Action::Replace);
        assert_eq!(moved.requires_replace, [AttrPath::root().attr("zone")]);
        let delete = plan(&p, &state, &Value::Null).await?;
        let gone = lifecycle::apply(p.as_ref(), &delete).await?;
        assert!(gone.new_state.is_null());
        assert!(p.objects().is_empty());
        let read = lifecycle::read(p.as_ref(), TYPE, &state, &[]).await?;
        assert!(read.new_state.is_null(), "a missing object reads as gone");
        assert_eq!(p.calls("ApplyResourceChange"), 2);
        Ok(())
    }

    #[tokio::test]
    async fn imports_by_id_and_injects_faults() -> anyhow::Result<()> {
        let p = FakePlugin::new();
        let create = plan(&p, &Value::Null, &config("a", "z1")).await?;
        p.crash_next_create();
        let crashed = lifecycle::apply(p.as_ref(), &create).await;
        assert!(matches!(
            crashed,
            Err(LifecycleError::Provider(ProviderError::Crashed { .. }))
        ));
        assert_eq!(p.creates(), 1, "the crash came after the create");
        let found = lifecycle::import(p.as_ref(), TYPE, &crate::ImportBy::Id("a".into())).await?;
        assert_eq!(id_of(&found.new_state).as_deref(), Some("a"));
        assert!(
            found.private.is_empty(),
            "the read consumed the import's mark"
        );
        let missing = lifecycle::import(p.as_ref(), TYPE, &crate::ImportBy::Id("b".into())).await?;
        assert!(missing.new_state.is_null());
        p.plan_diagnostics(true);
        let refused = plan(&p, &Value::Null, &config("b", "z1")).await;
        let rejected = refused
            .err()
            .and_then(|e| e.downcast::<LifecycleError>().ok());
        assert!(matches!(rejected, Some(LifecycleError::Rejected(_))));
        p.plan_diagnostics(false);
        p.apply_diagnostics(true);
        let create = plan(&p, &Value::Null, &config("b", "z1")).await?;
        let failed = lifecycle::apply(p.as_ref(), &create).await?;
        assert_eq!(failed.diagnostics.len(), 1);
        assert_eq!(p.creates(), 1);
        Ok(())
    }
}

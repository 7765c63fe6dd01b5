//! The plan a person reads and approves (`status.plan`), built purely from the provider's plan:
//! a content-addressed id ([`Basis`]), the action and the attribute-level changes in
//! Kubernetes field names. Written only while a change is held by `spec.planPolicy`, so under
//! `Auto` nothing here costs a write.
//!
//! Size: what the approver reads is what is applied, so values are shown whole up to
//! [`MAX_VALUE`] bytes (a longer one is cut, and says so), and changes are listed until
//! [`MAX_CHANGES`] of them or [`MAX_PLAN_BYTES`] of values (the rest counted in `omitted`,
//! which `kubectl kraken show-plan` reports): a plan is written only while it is held, and the
//! bound keeps the object within what the API server stores.
//! Sensitive values (sensitive or write-only in the schema, or set from a sensitive
//! `valuesFrom` source) are shown as `(sensitive)` and never stored.

use serde_json::{Map, Value as Json, json};

use super::plan_key::PlanKey;
use kraken_kit::text::truncate;
use kraken_provider::lifecycle::Plan;
use kraken_value::fields::FieldMap;
use kraken_value::kube::to_kube_json;
use kraken_value::{AttrPath, PathStep, Value};

/// The most changes `status.plan.changes` lists.
pub const MAX_CHANGES: usize = 256;
/// The most bytes of one value shown in a change.
pub const MAX_VALUE: usize = 64 * 1024;
/// The most bytes of values `status.plan.changes` lists in all.
pub const MAX_PLAN_BYTES: usize = 512 * 1024;
/// How a redacted value is shown.
pub const SENSITIVE: &str = "(sensitive)";
/// How a value the provider knows only after apply is shown.
pub const UNKNOWN: &str = "(known after apply)";

/// What a plan was computed from. Its digest is the plan's id: any part moving (spec,
/// resolved inputs, the external object, the provider, its ProviderConfig) makes a new id, so
/// an approval of the old one is stale. The digests (`state`, `inputs`, `provider_config`)
/// and the id are keyed ([`PlanKey`]): they are shown in `status` but computed from Secret
/// values, so without the key they allow no guessing of those values.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Basis {
    /// The object's `metadata.generation` (the spec).
    pub generation: i64,
    /// Keyed digest of the prior state (the external object as refreshed, with its private data).
    pub state: String,
    /// Keyed digest of the resolved configuration (`forProvider`, `valuesFrom`, Secret values).
    pub inputs: String,
    /// The provider's address and version.
    pub provider: String,
    /// Keyed digest of `Configured::config_digest` of the ProviderConfig.
    pub provider_config: String,
}

fn value_json(v: &Value) -> Vec<u8> {
    to_kube_json(v).to_string().into_bytes()
}

impl Basis {
    /// The basis of `plan`, for the object at `generation`. Every digest is keyed with `key`
    /// ([`PlanKey`]): they are computed from sensitive values and shown in `status`.
    pub fn of(
        key: &PlanKey,
        plan: &Plan,
        generation: i64,
        provider: &str,
        provider_config: &str,
    ) -> Self {
        Self {
            generation,
            state: key.digest(
                "state",
                &[&value_json(&plan.prior_state), &plan.prior_private],
            ),
            inputs: key.digest("inputs", &[&value_json(&plan.config)]),
            provider: provider.to_owned(),
            provider_config: key.digest("providerConfig", &[provider_config.as_bytes()]),
        }
    }

    /// The plan's id: a keyed digest of every part of the basis and the type.
    pub fn id(&self, key: &PlanKey, type_name: &str) -> String {
        let generation = self.generation.to_le_bytes();
        key.digest(
            "id",
            &[
                type_name.as_bytes(),
                &generation,
                self.state.as_bytes(),
                self.inputs.as_bytes(),
                self.provider.as_bytes(),
                self.provider_config.as_bytes(),
            ],
        )
    }

    pub fn to_json(&self) -> Json {
        json!({"generation": self.generation, "state": self.state, "inputs": self.inputs,
               "provider": self.provider, "providerConfig": self.provider_config})
    }

    pub fn from_json(j: &Json) -> Option<Self> {
        let s = |k: &str| j.get(k).and_then(Json::as_str).map(str::to_owned);
        Some(Self {
            generation: j.get("generation").and_then(Json::as_i64)?,
            state: s("state")?,
            inputs: s("inputs")?,
            provider: s("provider")?,
            provider_config: s("providerConfig")?,
        })
    }

    /// What moved from `before` to `self`, in words; empty when nothing did.
    pub fn moved_since(&self, before: &Basis) -> Vec<String> {
        let mut why = Vec::new();
        if self.generation != before.generation {
            why.push(format!(
                "the spec changed (generation {} → {})",
                before.generation, self.generation
            ));
        }
        if self.inputs != before.inputs {
            why.push("the resolved inputs changed (valuesFrom, Secrets)".to_owned());
        }
        if self.state != before.state {
            why.push("the external object changed (drift)".to_owned());
        }
        if self.provider != before.provider {
            why.push(format!(
                "the provider changed ({} → {})",
                before.provider, self.provider
            ));
        }
        if self.provider_config != before.provider_config {
            why.push("the ProviderConfig changed".to_owned());
        }
        why
    }
}

/// Which top-level attributes (Terraform names) must be redacted.
pub trait Redact {
    fn sensitive(&self, attr: &str) -> bool;
}

impl<F: Fn(&str) -> bool> Redact for F {
    fn sensitive(&self, attr: &str) -> bool {
        self(attr)
    }
}

/// `status.plan`: id, action, changes (bounded) and the basis.
pub fn view(plan: &Plan, id: &str, basis: &Basis, fields: &FieldMap, redact: &dyn Redact) -> Json {
    let changes = bounded(changes(plan, fields, redact));
    let (changes, omitted) = (changes.0, changes.1);
    let mut out = json!({"id": id, "action": plan.action.to_string(),
                         "changes": changes, "basis": basis.to_json()});
    if omitted > 0 {
        out["omitted"] = json!(omitted);
    }
    out
}

/// The changes that fit [`MAX_CHANGES`] and [`MAX_PLAN_BYTES`], in order, and how many do not.
fn bounded(all: Vec<Json>) -> (Vec<Json>, usize) {
    let total = all.len();
    let mut bytes = 0;
    let mut listed = Vec::new();
    for change in all {
        let size = ["before", "after"]
            .iter()
            .filter_map(|k| change[*k].as_str())
            .map(str::len)
            .sum::<usize>();
        if listed.len() == MAX_CHANGES || bytes + size > MAX_PLAN_BYTES {
            break;
        }
        bytes += size;
        listed.push(change);
    }
    let omitted = total - listed.len();
    (listed, omitted)
}

/// The attribute-level changes of `plan`, one per top-level attribute whose value changes,
/// sorted by Kubernetes path.
pub fn changes(plan: &Plan, fields: &FieldMap, redact: &dyn Redact) -> Vec<Json> {
    let members = |v: &Value| match v.untyped() {
        Value::Object(m) => m.clone(),
        _ => std::collections::BTreeMap::new(),
    };
    let (before, after) = (members(&plan.prior_state), members(&plan.planned_state));
    let existed = !plan.prior_state.is_null();
    let mut names: Vec<&String> = before.keys().chain(after.keys()).collect();
    names.sort();
    names.dedup();
    let mut out: Vec<(String, Json)> = Vec::new();
    for name in names {
        let (b, a) = (
            before.get(name).unwrap_or(&Value::Null),
            after.get(name).unwrap_or(&Value::Null),
        );
        if b == a || (!existed && a.is_null()) {
            continue;
        }
        let path = fields.kube_path(&AttrPath::root().attr(name.clone()));
        let secret = redact.sensitive(name);
        let mut change = Map::new();
        change.insert("path".into(), json!(path));
        if existed {
            change.insert("before".into(), json!(shown(fields, name, b, secret)));
        }
        change.insert("after".into(), json!(shown(fields, name, a, secret)));
        if !a.is_wholly_known() {
            change.insert("unknown".into(), json!(true));
        }
        if forces_replacement(plan, name) {
            change.insert("forcesReplacement".into(), json!(true));
        }
        out.push((path, Json::Object(change)));
    }
    out.sort_by(|x, y| x.0.cmp(&y.0));
    out.into_iter().map(|(_, c)| c).collect()
}

fn forces_replacement(plan: &Plan, name: &str) -> bool {
    plan.requires_replace
        .iter()
        .any(|p| matches!(p.steps.first(), Some(PathStep::Attr(a)) if a == name))
}

/// A value as shown in a change: redacted, unknown, or compact JSON through the status view
/// (which drops nested sensitive and write-only attributes, so none leaks from a block).
fn shown(fields: &FieldMap, name: &str, v: &Value, secret: bool) -> String {
    if v.is_null() {
        return "null".to_owned();
    }
    if secret {
        return SENSITIVE.to_owned();
    }
    if !v.is_known() {
        return UNKNOWN.to_owned();
    }
    let one = json!({ name: to_kube_json(v) });
    match fields
        .state_to_status(&one)
        .as_object()
        .and_then(|m| m.values().next())
    {
        Some(j) => truncate(&j.to_string(), MAX_VALUE),
        // The status view has no place for it: sensitive or write-only.
        None => SENSITIVE.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kraken_provider::fake::{TYPE, schema};
    use kraken_provider::lifecycle::Action;

    fn plan(action: Action, prior: Value, planned: Value) -> Plan {
        Plan {
            action,
            type_name: TYPE.into(),
            prior_state: prior,
            prior_private: Vec::new(),
            config: Value::Null,
            planned_state: planned,
            planned_private: Vec::new(),
            requires_replace: vec![AttrPath::root().attr("zone")],
            diagnostics: Vec::new(),
        }
    }

    fn fields() -> FieldMap {
        let s = schema();
        FieldMap::for_resource(TYPE, &s.resources[TYPE])
    }

    #[test]
    fn changes_name_fields_mark_unknowns_replacements_and_redact() {
        let prior = Value::object([
            ("name", Value::string("a")),
            ("zone", Value::string("z1")),
            ("password", Value::string("hunter2")),
            ("id", Value::string("a")),
        ]);
        let planned = Value::object([
            ("name", Value::string("a")),
            ("zone", Value::string("z2")),
            ("password", Value::string("hunter3")),
            ("id", Value::unknown()),
        ]);
        let p = plan(Action::Replace, prior, planned);
        let got = changes(&p, &fields(), &|a: &str| a == "password");
        let text = serde_json::to_string(&got).unwrap_or_default();
        assert!(!text.contains("hunter"), "{text}");
        assert_eq!(
            got,
            [
                json!({"path": "spec.forProvider.passwordSecretRef", "before": SENSITIVE, "after": SENSITIVE}),
                json!({"path": "spec.forProvider.zone", "before": "\"z1\"", "after": "\"z2\"",
                       "forcesReplacement": true}),
                json!({"path": "status.atProvider.id", "before": "\"a\"", "after": UNKNOWN,
                       "unknown": true}),
            ]
        );
    }

    #[test]
    fn a_create_lists_what_it_sets_whole_and_the_list_is_bounded() {
        let key = PlanKey::from_bytes([7; 32]);
        let view_of = |n: usize, size: usize| -> Json {
            let planned = Value::object(
                (0..n).map(|i| (format!("x{i:03}"), Value::string("v".repeat(size)))),
            );
            let p = plan(Action::Create, Value::Null, planned);
            let basis = Basis::of(&key, &p, 1, "fake 0.0.0", "pc");
            view(&p, &basis.id(&key, TYPE), &basis, &fields(), &|_: &str| {
                false
            })
        };
        // Values are shown whole; past MAX_CHANGES the rest is counted.
        let v = view_of(300, 500);
        assert_eq!(v["changes"].as_array().map(Vec::len), Some(MAX_CHANGES));
        assert_eq!(v["omitted"], 300 - MAX_CHANGES);
        assert!(v["changes"][0].get("before").is_none());
        // A long value is shown whole.
        let long = Value::object([("description", Value::string("d".repeat(5000)))]);
        let p = plan(Action::Create, Value::Null, long);
        let basis = Basis::of(&key, &p, 1, "fake 0.0.0", "pc");
        let v = view(&p, "id", &basis, &fields(), &|_: &str| false);
        assert_eq!(v["changes"][0]["after"].as_str().map(str::len), Some(5002));
        // Past MAX_PLAN_BYTES of values too, whole changes only.
        let big: Vec<Json> = (0..40)
            .map(|i| json!({"path": format!("p{i}"), "after": "v".repeat(30 * 1024)}))
            .collect();
        let (listed, omitted) = bounded(big);
        assert_eq!(listed.len(), MAX_PLAN_BYTES / (30 * 1024));
        assert_eq!(omitted, 40 - listed.len());
    }

    #[test]
    fn the_id_moves_with_every_part_of_the_basis() {
        let key = PlanKey::from_bytes([7; 32]);
        let p = plan(
            Action::Update,
            Value::object([("name", Value::string("a"))]),
            Value::Null,
        );
        let b = Basis::of(&key, &p, 1, "fake 0.0.0", "pc");
        assert_eq!(
            b.id(&key, TYPE),
            Basis::of(&key, &p, 1, "fake 0.0.0", "pc").id(&key, TYPE)
        );
        assert_eq!(Basis::from_json(&b.to_json()), Some(b.clone()));
        // Each part of the plan a basis is computed from moves its own part, and the id.
        let other_state = Plan {
            prior_state: Value::object([("name", Value::string("b"))]),
            ..p.clone()
        };
        let other_private = Plan {
            prior_private: b"p".to_vec(),
            ..p.clone()
        };
        let other_inputs = Plan {
            config: Value::object([("password", Value::string("hunter2"))]),
            ..p.clone()
        };
        let moved = [
            Basis::of(&key, &p, 2, "fake 0.0.0", "pc"),
            Basis::of(&key, &other_state, 1, "fake 0.0.0", "pc"),
            Basis::of(&key, &other_private, 1, "fake 0.0.0", "pc"),
            Basis::of(&key, &other_inputs, 1, "fake 0.0.0", "pc"),
            Basis::of(&key, &p, 1, "fake 0.0.1", "pc"),
            Basis::of(&key, &p, 1, "fake 0.0.0", "pc2"),
        ];
        for m in moved {
            assert_ne!(m.id(&key, TYPE), b.id(&key, TYPE), "{m:?}");
            assert_eq!(m.moved_since(&b).len(), 1, "{m:?}");
        }
        assert_ne!(b.id(&key, TYPE), b.id(&key, "fake_other"));
    }

    #[test]
    fn ids_and_basis_digests_are_keyed() {
        let p = Plan {
            config: Value::object([("password", Value::string("hunter2"))]),
            ..plan(Action::Create, Value::Null, Value::Null)
        };
        let (k1, k2) = (PlanKey::from_bytes([1; 32]), PlanKey::from_bytes([2; 32]));
        let (b1, b2) = (
            Basis::of(&k1, &p, 1, "fake 0.0.0", "pc"),
            Basis::of(&k2, &p, 1, "fake 0.0.0", "pc"),
        );
        assert_ne!(b1.id(&k1, TYPE), b2.id(&k2, TYPE));
        assert_ne!(b1.state, b2.state);
        assert_ne!(b1.inputs, b2.inputs);
        assert_ne!(b1.provider_config, b2.provider_config);
        // Nothing shown is the unkeyed digest of what it was computed from.
        let unkeyed = format!(
            "{:016x}",
            kraken_kit::hash::fnv1a(to_kube_json(&p.config).to_string().as_bytes())
        );
        let shown = view(&p, &b1.id(&k1, TYPE), &b1, &fields(), &|_: &str| true).to_string();
        assert!(!shown.contains(&unkeyed), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("\"pc\""), "{shown}");
    }
}

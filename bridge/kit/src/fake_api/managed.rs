//! Field ownership, as the API server keeps it in `metadata.managedFields`: one entry per
//! (manager, operation, subresource), each with the set of fields it owns. An update takes
//! the fields it changes from their owners; an apply owns what its configuration names,
//! conflicts with another owner of a field it would change (unless forced, when it takes the
//! field), and removes the fields it named last time, names no more and nobody else owns.

use serde_json::{Value as Json, json};

use super::fields::{self, Comparison, Elem, Path, Set};

/// Fields the server keeps to itself: never owned by anyone.
const SERVER_FIELDS: [&str; 9] = [
    "name",
    "namespace",
    "creationTimestamp",
    "selfLink",
    "uid",
    "generation",
    "managedFields",
    "resourceVersion",
    "deletionTimestamp",
];

/// Which part of an object a write may touch: all of it, all but status (the main resource
/// of a kind with a status subresource) or only status (that subresource).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Whole,
    AllButStatus,
    Status,
}

impl Scope {
    /// Whether a write in this scope may own the field at `path`.
    pub fn owns(self, path: &Path) -> bool {
        let top = match path.first() {
            Some(Elem::Field(f)) => f.as_str(),
            _ => return false,
        };
        let server = match (top, path.get(1)) {
            ("apiVersion" | "kind", _) => true,
            ("metadata", None) => true,
            ("metadata", Some(Elem::Field(f))) => SERVER_FIELDS.contains(&f.as_str()),
            _ => false,
        };
        !server
            && match self {
                Scope::Whole => true,
                Scope::AllButStatus => top != "status",
                Scope::Status => top == "status",
            }
    }

    fn subresource(self) -> Option<&'static str> {
        (self == Scope::Status).then_some("status")
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Entry {
    manager: String,
    operation: &'static str,
    subresource: Option<String>,
    api_version: String,
    set: Set,
}

/// The ownership of one object.
#[derive(Debug, Clone, PartialEq)]
pub struct Owners(Vec<Entry>);

/// An apply refused: who owns which of the fields it would change.
#[derive(Debug)]
pub struct Conflicts(pub Vec<(String, String)>);

impl Conflicts {
    /// The server's message: `Apply failed with 1 conflict: conflict with "a": .data.k`.
    pub fn message(&self) -> String {
        let n = self.0.len();
        let plural = if n == 1 { "" } else { "s" };
        let each: Vec<String> = self
            .0
            .iter()
            .map(|(who, path)| format!("conflict with \"{who}\": {path}"))
            .collect();
        format!(
            "Apply failed with {n} conflict{plural}: {}",
            each.join(", ")
        )
    }
}

impl Owners {
    /// The owners recorded in `object`.
    pub fn of(object: &Json) -> Self {
        let entries = object["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| Entry {
                manager: e["manager"].as_str().unwrap_or_default().to_owned(),
                operation: if e["operation"] == "Apply" {
                    "Apply"
                } else {
                    "Update"
                },
                subresource: e["subresource"].as_str().map(str::to_owned),
                api_version: e["apiVersion"].as_str().unwrap_or_default().to_owned(),
                set: fields::from_fields_v1(&e["fieldsV1"]),
            })
            .collect();
        Self(entries)
    }

    /// Writes the owners into `object` (no `managedFields` when there are none).
    pub fn write(&self, object: &mut Json) {
        let entries: Vec<Json> = self
            .0
            .iter()
            .map(|e| {
                let mut entry = json!({
                    "manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                    "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": fields::to_fields_v1(&e.set),
                });
                if let Some(s) = &e.subresource {
                    entry["subresource"] = json!(s);
                }
                entry
            })
            .collect();
        if let Some(meta) = object["metadata"].as_object_mut() {
            if entries.is_empty() {
                meta.remove("managedFields");
            } else {
                meta.insert("managedFields".into(), Json::Array(entries));
            }
        }
    }

    fn position(&self, manager: &str, operation: &str, scope: Scope) -> Option<usize> {
        self.0.iter().position(|e| {
            e.manager == manager
                && e.operation == operation
                && e.subresource.as_deref() == scope.subresource()
        })
    }

    /// Puts `set` as the fields of (manager, operation) in `scope`.
    fn set(
        &mut self,
        manager: &str,
        operation: &'static str,
        scope: Scope,
        version: &str,
        set: Set,
    ) {
        match self.position(manager, operation, scope) {
            Some(i) => {
                self.0[i].set = set;
                self.0[i].api_version = version.to_owned();
            }
            None => self.0.push(Entry {
                manager: manager.to_owned(),
                operation,
                subresource: scope.subresource().map(str::to_owned),
                api_version: version.to_owned(),
                set,
            }),
        }
    }

    /// The other entries give up what `c` changed and removed; `conflicting` lists who owned
    /// a changed field (before giving it up).
    fn give_up(&mut self, except: Option<usize>, c: &Comparison) -> Vec<(String, String)> {
        let changed = c.changed();
        let mut conflicting = Vec::new();
        for (i, e) in self.0.iter_mut().enumerate() {
            if Some(i) == except {
                continue;
            }
            for p in e.set.intersection(&changed) {
                conflicting.push((e.manager.clone(), fields::display(p)));
            }
            e.set
                .retain(|p| !changed.contains(p) && !c.removed.contains(p));
        }
        conflicting
    }

    fn drop_empty(&mut self) {
        self.0.retain(|e| !e.set.is_empty());
    }

    /// An update by `manager` from `old` to `new`: it owns what it added or changed, and the
    /// others lose that and whatever it removed.
    pub fn update(&mut self, manager: &str, scope: Scope, old: &Json, new: &Json) {
        let mut c = fields::compare(old, new);
        c.retain(|p| scope.owns(p));
        let mine = self.position(manager, "Update", scope);
        self.give_up(mine, &c);
        let mut set = mine.map(|i| self.0[i].set.clone()).unwrap_or_default();
        set.retain(|p| !c.removed.contains(p));
        set.extend(c.changed());
        self.set(manager, "Update", scope, api_version(new), set);
        self.drop_empty();
    }

    /// An apply of `config` by `manager` over `live`: the object it makes, or the conflicts
    /// that refuse it (and leave the owners as they were).
    pub fn apply(
        &mut self,
        manager: &str,
        scope: Scope,
        live: &Json,
        config: &Json,
        force: bool,
    ) -> Result<Json, Conflicts> {
        let mut next = self.clone();
        let applied = next.applied(manager, scope, live, config, force)?;
        *self = next;
        Ok(applied)
    }

    fn applied(
        &mut self,
        manager: &str,
        scope: Scope,
        live: &Json,
        config: &Json,
        force: bool,
    ) -> Result<Json, Conflicts> {
        let merged = fields::merge(live, config);
        let last = self
            .position(manager, "Apply", scope)
            .map(|i| self.0[i].set.clone())
            .unwrap_or_default();
        let mut set = fields::applied(config);
        set.retain(|p| scope.owns(p));
        self.set(manager, "Apply", scope, api_version(config), set);
        let owned: Set = self.0.iter().flat_map(|e| e.set.iter().cloned()).collect();
        let owned_below = |p: &Path| owned.iter().any(|o| o.starts_with(p));
        let orphans: Set = last.into_iter().filter(|p| !owned_below(p)).collect();
        let pruned = fields::remove(&merged, &orphans).unwrap_or_else(|| json!({}));
        let mut c = fields::compare(live, &pruned);
        c.retain(|p| scope.owns(p));
        let mine = self.position(manager, "Apply", scope);
        let conflicting = self.give_up(mine, &c);
        if !force && !conflicting.is_empty() {
            return Err(Conflicts(conflicting));
        }
        self.drop_empty();
        Ok(pruned)
    }
}

fn api_version(object: &Json) -> &str {
    object["apiVersion"].as_str().unwrap_or("v1")
}

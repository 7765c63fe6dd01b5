//! Field paths and sets, as the API server's field manager sees an object (structured merge
//! diff, without a schema): the set of fields an applied configuration names, the fields an
//! update added, changed and removed, the structural merge of an apply, and the removal of
//! the fields no manager owns any more. Sets are read from and written to `fieldsV1`.
//!
//! With no schema, every list is atomic except the few whose merge key the real server knows
//! and Kraken's objects use: `metadata.ownerReferences` (keyed by `uid`, each reference
//! atomic), `status.conditions` (keyed by `type`, as Kraken's CRDs and the built-in kinds
//! declare it) and `metadata.finalizers` (a set). A map is a node of its own only when empty or null, where
//! the real server also counts map entries of schemaless or `map[string]…` fields.

use std::collections::BTreeSet;

use serde_json::{Map, Value as Json};

/// One step of a field path: `f:name`, `k:{"uid":…}` (an item of a keyed list) or `v:…` (an
/// item of a set), holding the key or value as compact JSON.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Elem {
    Field(String),
    Key(String),
    Value(String),
}

pub type Path = Vec<Elem>;
pub type Set = BTreeSet<Path>;

/// How the items of the list at a path merge.
enum ListKind {
    Atomic,
    /// Items keyed by one field; `true` when each item is atomic (owned and replaced whole).
    Keyed(&'static str, bool),
    Set,
}

fn list_kind(path: &[Elem]) -> ListKind {
    let names: Vec<&str> = path
        .iter()
        .filter_map(|e| match e {
            Elem::Field(f) => Some(f.as_str()),
            _ => None,
        })
        .collect();
    match names.as_slice() {
        ["metadata", "ownerReferences"] => ListKind::Keyed("uid", true),
        ["metadata", "finalizers"] => ListKind::Set,
        ["status", "conditions"] => ListKind::Keyed("type", false),
        _ => ListKind::Atomic,
    }
}

/// The path step of `item` in the list at `path` (`None` for an atomic list).
fn item_elem(path: &[Elem], item: &Json) -> Option<Elem> {
    match list_kind(path) {
        ListKind::Atomic => None,
        ListKind::Keyed(key, _) => {
            Some(Elem::Key(serde_json::json!({ key: item[key] }).to_string()))
        }
        ListKind::Set => Some(Elem::Value(item.to_string())),
    }
}

/// Whether the items of the list at `path` are owned and replaced whole.
fn atomic_items(path: &[Elem]) -> bool {
    !matches!(list_kind(path), ListKind::Keyed(_, false))
}

fn child(path: &[Elem], elem: Elem) -> Path {
    let mut p = path.to_vec();
    p.push(elem);
    p
}

/// The fields an applied configuration names: its leaves, the items of keyed lists and sets,
/// and its empty or null maps.
pub fn applied(config: &Json) -> Set {
    let mut out = Set::new();
    applied_walk(config, &[], &mut out);
    out
}

fn applied_walk(value: &Json, path: &[Elem], out: &mut Set) {
    match value {
        Json::Object(m) => {
            for (k, v) in m {
                let p = child(path, Elem::Field(k.clone()));
                applied_walk(v, &p, out);
                if v.is_null() || v.as_object().is_some_and(Map::is_empty) {
                    out.insert(p);
                }
            }
        }
        Json::Array(items) if !matches!(list_kind(path), ListKind::Atomic) => {
            for item in items {
                if let Some(e) = item_elem(path, item) {
                    let p = child(path, e);
                    if !atomic_items(path) {
                        applied_walk(item, &p, out);
                    }
                    out.insert(p);
                }
            }
        }
        _ => {
            out.insert(path.to_vec());
        }
    }
}

/// What an update did, field by field.
#[derive(Debug, Default)]
pub struct Comparison {
    pub added: Set,
    pub modified: Set,
    pub removed: Set,
}

impl Comparison {
    /// Leaves out the fields `keep` refuses (the server's own fields, reset fields).
    pub fn retain(&mut self, keep: impl Fn(&Path) -> bool) {
        self.added.retain(&keep);
        self.modified.retain(&keep);
        self.removed.retain(&keep);
    }

    pub fn changed(&self) -> Set {
        self.added.union(&self.modified).cloned().collect()
    }
}

/// Compares `old` with `new`: nodes added or removed (with everything below them) and leaves
/// whose value changed.
pub fn compare(old: &Json, new: &Json) -> Comparison {
    let mut c = Comparison::default();
    compare_walk(Some(old), Some(new), &[], &mut c);
    c.added.remove(&Vec::new());
    c.removed.remove(&Vec::new());
    c
}

fn compare_walk(old: Option<&Json>, new: Option<&Json>, path: &[Elem], c: &mut Comparison) {
    let either = new.or(old);
    let whole_item = matches!(path.last(), Some(Elem::Key(_) | Elem::Value(_)))
        && atomic_items(&path[..path.len() - 1]);
    let is_map = |v: Option<&Json>| !whole_item && v.is_none_or(Json::is_object);
    let is_list = |v: Option<&Json>| v.is_none_or(Json::is_array);
    let keyed = !matches!(list_kind(path), ListKind::Atomic);
    if either.is_some_and(Json::is_object) && is_map(old) && is_map(new) {
        let keys: BTreeSet<&String> = [old, new]
            .into_iter()
            .flatten()
            .filter_map(Json::as_object)
            .flat_map(Map::keys)
            .collect();
        for k in keys {
            let p = child(path, Elem::Field(k.clone()));
            compare_walk(
                old.and_then(|o| o.get(k)),
                new.and_then(|n| n.get(k)),
                &p,
                c,
            );
        }
    } else if keyed && either.is_some_and(Json::is_array) && is_list(old) && is_list(new) {
        let items = |v: Option<&Json>| -> Vec<(Elem, Json)> {
            v.and_then(Json::as_array)
                .into_iter()
                .flatten()
                .filter_map(|i| Some((item_elem(path, i)?, i.clone())))
                .collect()
        };
        let (before, after) = (items(old), items(new));
        let elems: BTreeSet<&Elem> = before.iter().chain(after.iter()).map(|(e, _)| e).collect();
        for e in elems {
            let find =
                |list: &[(Elem, Json)]| list.iter().find(|(x, _)| x == e).map(|(_, i)| i.clone());
            let (b, a) = (find(&before), find(&after));
            compare_walk(b.as_ref(), a.as_ref(), &child(path, e.clone()), c);
        }
    } else {
        match (old, new) {
            (None, Some(_)) => c.added.insert(path.to_vec()),
            (Some(_), None) => c.removed.insert(path.to_vec()),
            (Some(o), Some(n)) if o != n => c.modified.insert(path.to_vec()),
            _ => false,
        };
        return;
    }
    match (old, new) {
        (None, Some(_)) => c.added.insert(path.to_vec()),
        (Some(_), None) => c.removed.insert(path.to_vec()),
        _ => false,
    };
}

/// `live` with `config` merged in as an apply merges: maps key by key, keyed lists and sets
/// item by item (new items after the live ones), anything else replaced.
pub fn merge(live: &Json, config: &Json) -> Json {
    merge_at(live, config, &[])
}

fn merge_at(live: &Json, config: &Json, path: &[Elem]) -> Json {
    match (live, config) {
        (Json::Object(l), Json::Object(c)) => {
            let mut out = l.clone();
            for (k, v) in c {
                let p = child(path, Elem::Field(k.clone()));
                let merged = match l.get(k) {
                    Some(lv) => merge_at(lv, v, &p),
                    None => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Json::Object(out)
        }
        (Json::Array(l), Json::Array(c)) if !matches!(list_kind(path), ListKind::Atomic) => {
            let mut out = l.clone();
            for item in c {
                let elem = item_elem(path, item);
                let at = out.iter().position(|x| item_elem(path, x) == elem);
                match (at, elem) {
                    (Some(i), Some(_)) if atomic_items(path) => out[i] = item.clone(),
                    (Some(i), Some(e)) => {
                        out[i] = merge_at(&out[i], item, &child(path, e));
                    }
                    _ => out.push(item.clone()),
                }
            }
            Json::Array(out)
        }
        _ => config.clone(),
    }
}

/// `value` without the fields in `remove` (paths relative to it). A map or list left empty
/// by a removal is gone itself (`None`), as the server's removal leaves it.
pub fn remove(value: &Json, remove: &Set) -> Option<Json> {
    remove_at(value, remove, &[])
}

fn remove_at(value: &Json, remove: &Set, path: &[Elem]) -> Option<Json> {
    let below = |p: &Path| remove.iter().any(|r| r.len() > p.len() && r.starts_with(p));
    match value {
        Json::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let p = child(path, Elem::Field(k.clone()));
                if remove.contains(&p) {
                    continue;
                }
                let kept = if below(&p) {
                    remove_at(v, remove, &p)
                } else {
                    Some(v.clone())
                };
                if let Some(kept) = kept {
                    out.insert(k.clone(), kept);
                }
            }
            (!out.is_empty()).then_some(Json::Object(out))
        }
        Json::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                let Some(e) = item_elem(path, item) else {
                    out.push(item.clone());
                    continue;
                };
                let p = child(path, e);
                if remove.contains(&p) {
                    continue;
                }
                let kept = if below(&p) {
                    remove_at(item, remove, &p)
                } else {
                    Some(item.clone())
                };
                out.extend(kept);
            }
            (!out.is_empty()).then_some(Json::Array(out))
        }
        other => Some(other.clone()),
    }
}

/// A set as `fieldsV1`: `{"f:data": {"f:k": {}}}`, with `.` marking a node that is a member
/// and has members below it.
pub fn to_fields_v1(set: &Set) -> Json {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for e in path {
            let node = cur
                .entry(elem_text(e))
                .or_insert_with(|| Json::Object(Map::new()));
            let Json::Object(next) = node else {
                break;
            };
            cur = next;
        }
    }
    mark_nodes(&mut root, set, &[]);
    Json::Object(root)
}

/// Adds `.` to each node that is itself in `set` and has children.
fn mark_nodes(node: &mut Map<String, Json>, set: &Set, path: &[Elem]) {
    for (k, v) in node.iter_mut() {
        let Some(e) = elem_of(k) else {
            continue;
        };
        let p = child(path, e);
        if let Json::Object(m) = v
            && !m.is_empty()
        {
            mark_nodes(m, set, &p);
            if set.contains(&p) {
                m.insert(".".into(), Json::Object(Map::new()));
            }
        }
    }
}

/// A `fieldsV1` set read back.
pub fn from_fields_v1(fields: &Json) -> Set {
    let mut out = Set::new();
    read_v1(fields, &[], &mut out);
    out
}

fn read_v1(fields: &Json, path: &[Elem], out: &mut Set) {
    let Some(m) = fields.as_object() else {
        return;
    };
    for (k, v) in m {
        if k == "." {
            out.insert(path.to_vec());
            continue;
        }
        let Some(e) = elem_of(k) else {
            continue;
        };
        let p = child(path, e);
        if v.as_object().is_none_or(Map::is_empty) {
            out.insert(p);
        } else {
            read_v1(v, &p, out);
        }
    }
}

fn elem_text(e: &Elem) -> String {
    match e {
        Elem::Field(f) => format!("f:{f}"),
        Elem::Key(k) => format!("k:{k}"),
        Elem::Value(v) => format!("v:{v}"),
    }
}

fn elem_of(text: &str) -> Option<Elem> {
    let (kind, rest) = text.split_at_checked(2)?;
    match kind {
        "f:" => Some(Elem::Field(rest.to_owned())),
        "k:" => Some(Elem::Key(rest.to_owned())),
        "v:" => Some(Elem::Value(rest.to_owned())),
        _ => None,
    }
}

/// A path as the server names it in a conflict: `.data.k`, `.metadata.ownerReferences[uid=…]`.
pub fn display(path: &[Elem]) -> String {
    path.iter()
        .map(|e| match e {
            Elem::Field(f) => format!(".{f}"),
            Elem::Key(k) => format!("[{k}]"),
            Elem::Value(v) => format!("[={v}]"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(names: &[&str]) -> Path {
        names.iter().map(|n| Elem::Field((*n).to_owned())).collect()
    }

    #[test]
    fn an_applied_config_names_leaves_items_and_empty_maps() {
        let config = json!({"data": {"a": "1"}, "spec": {},
            "metadata": {"ownerReferences": [{"uid": "u", "controller": true}],
                         "finalizers": ["x"]}});
        let set = applied(&config);
        let key = Elem::Key(r#"{"uid":"u"}"#.into());
        let owner = child(&f(&["metadata", "ownerReferences"]), key);
        assert!(set.contains(&f(&["data", "a"])));
        assert!(set.contains(&f(&["spec"])));
        assert!(set.contains(&owner));
        // An owner reference is owned whole.
        assert!(!set.contains(&child(&owner, Elem::Field("controller".into()))));
        let fin = child(&f(&["metadata", "finalizers"]), Elem::Value("\"x\"".into()));
        assert!(set.contains(&fin));
        assert!(!set.contains(&f(&["data"])));
        assert_eq!(from_fields_v1(&to_fields_v1(&set)), set);
    }

    #[test]
    fn a_comparison_tells_added_modified_and_removed() {
        let old = json!({"data": {"a": "1", "b": "2"}});
        let new = json!({"data": {"a": "9"}, "spec": {"x": 1}});
        let c = compare(&old, &new);
        assert_eq!(c.modified, Set::from([f(&["data", "a"])]));
        assert_eq!(c.removed, Set::from([f(&["data", "b"])]));
        assert_eq!(c.added, Set::from([f(&["spec"]), f(&["spec", "x"])]));
    }

    #[test]
    fn keyed_lists_merge_by_key_and_removal_empties_nothing_else() {
        let live = json!({"metadata": {"ownerReferences": [{"uid": "a"}, {"uid": "b"}]}});
        let config = json!({"metadata": {"ownerReferences": [{"uid": "c"}]}});
        let merged = merge(&live, &config);
        assert_eq!(
            merged["metadata"]["ownerReferences"],
            json!([{"uid": "a"}, {"uid": "b"}, {"uid": "c"}])
        );
        let a = child(
            &f(&["metadata", "ownerReferences"]),
            Elem::Key(r#"{"uid":"a"}"#.into()),
        );
        let pruned = remove(&merged, &Set::from([a])).unwrap_or_default();
        assert_eq!(
            pruned["metadata"]["ownerReferences"],
            json!([{"uid": "b"}, {"uid": "c"}])
        );
        let gone = remove(
            &json!({"labels": {"l": "x"}, "k": 1}),
            &Set::from([f(&["labels", "l"])]),
        );
        assert_eq!(gone, Some(json!({"k": 1})));
    }
}

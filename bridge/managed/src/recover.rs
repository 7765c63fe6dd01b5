//! After a create was interrupted (the create fence is open and no state was saved): find out
//! whether it made the object, so a retry never makes a second one. In order:
//!
//! 1. import the identities the spec gives: `importId`, then a `name` argument (only when the
//!    fence is one Kraken sealed, [`super::fence`]: a fence planted by hand must not turn a
//!    name into a way to take someone else's object);
//! 2. list the provider's objects of the type (`ListResource`, protocol 5.10/6.10, for types
//!    the provider declares a list resource for) and take the one carrying the owner tag
//!    ([`OWNER_TAG`]) Kraken put on it at create, asking the provider to filter by that tag
//!    where its list configuration has an EC2-style `filter` block;
//! 3. otherwise stop at `CreateInterrupted`, saying what to check.
//!
//! During a create-before-destroy replacement the old object (deposed) is still there, with
//! the same owner tag and maybe the same name: its id is never taken for the new object.
//!
//! `Ok(Some)` found it, `Ok(None)` proved it absent, `Err(CreateInterrupted)` could not tell.

use super::CREATE_ATTEMPT_ANNOTATION;
use super::error::{Error, Result};
use super::spec::ManagedSpec;
use super::target::{OWNER_TAG, Target, describe};
use kraken_provider::lifecycle::{self, Applied, LifecycleError};
use kraken_provider::{DiagnosticsExt as _, ImportBy, ListRequest};
use kraken_value::{AttrPath, Type, Value};

/// Most objects one recovery lists: beyond this the list is not trusted to be complete.
const LIST_LIMIT: i64 = 10_000;

/// Finds what the interrupted create `attempt` made; `owner` is the uid its owner tag carries
/// (`None` for an object adopted by `importId`, which never gets one); `replaced` is the id
/// of the deposed object a create-before-destroy replacement keeps, which is never it;
/// `sealed` whether the fence `attempt` is one Kraken sealed for this object.
pub(crate) async fn recover(
    t: &Target<'_>,
    spec: &ManagedSpec,
    config: &Value,
    (owner, replaced): (Option<&str>, Option<&str>),
    (attempt, sealed): (&str, bool),
) -> Result<Option<Applied>> {
    let mut candidates: Vec<ImportBy> = Vec::new();
    let mut why = String::from(
        "the spec gives no identity to look it up by (importId, importIdentity or a name argument)",
    );
    if sealed {
        candidates.extend(spec.import());
        if let Some(Value::String(name)) = lifecycle::lookup(config, &AttrPath::root().attr("name"))
            && !candidates.contains(&ImportBy::Id(name.clone()))
        {
            candidates.push(ImportBy::Id(name.clone()));
        }
    } else {
        why = format!(
            "its create fence ({CREATE_ATTEMPT_ANNOTATION}) carries no seal of this operator's, \
             so only the {OWNER_TAG} tag may show what it made"
        );
    }
    for by in &candidates {
        match lifecycle::import(t.host(), t.type_name, by).await {
            Ok(found) if found.new_state.is_null() => return Ok(None),
            Ok(found) if replaced.is_some() && id_of(&found.new_state) == replaced => {
                why = format!("{by} names the object being replaced");
            }
            Ok(found) => return Ok(Some(found)),
            Err(LifecycleError::Rejected(diags)) => {
                why = format!("importing {by} failed: {}", describe(&diags, t.fields()));
            }
            Err(e) => return Err(t.lifecycle_err("import", e)),
        }
    }
    match (owner, listable(t)) {
        (Some(uid), true) => return by_owner_tag(t, (uid, replaced), attempt).await,
        (Some(_), false) if t.takes_tags() => {
            why.push_str(&format!(
                "; the provider declares no list resource for {} to find it by its {OWNER_TAG} tag",
                t.type_name
            ));
        }
        _ => {}
    }
    Err(interrupted(t, attempt, &why))
}

fn interrupted(t: &Target<'_>, attempt: &str, why: &str) -> Error {
    Error::CreateInterrupted(format!(
        "a create of this {} was interrupted at {attempt}, and Kraken cannot tell whether it made the object: {why}. \
         Check the provider for it, then set spec.importId to adopt it, or remove the annotation {CREATE_ATTEMPT_ANNOTATION} to create a new one",
        t.type_name
    ))
}

/// Whether the owner tag can find an object of this type: it takes tags and the provider
/// lists objects of the type.
fn listable(t: &Target<'_>) -> bool {
    t.takes_tags() && t.p.schema.list_resources.contains_key(t.type_name)
}

/// Lists the type's objects and takes the one whose tags carry `uid`; refreshed, so its state
/// and private data are the provider's own.
async fn by_owner_tag(
    t: &Target<'_>,
    (uid, replaced): (&str, Option<&str>),
    attempt: &str,
) -> Result<Option<Applied>> {
    let Some(list_schema) = t.p.schema.list_resources.get(t.type_name) else {
        return Ok(None);
    };
    let config = list_config(&list_schema.block, uid);
    let listed = t
        .host()
        .list_resource(ListRequest {
            type_name: t.type_name.to_owned(),
            config,
            include_resource_object: true,
            limit: LIST_LIMIT,
        })
        .await
        .map_err(|e| t.lifecycle_err("list", LifecycleError::Provider(e)))?;
    if listed.diagnostics.has_errors() {
        let why = format!(
            "listing {} objects to find its {OWNER_TAG} tag failed: {}",
            t.type_name,
            describe(&listed.diagnostics, t.fields())
        );
        return Err(interrupted(t, attempt, &why));
    }
    if i64::try_from(listed.items.len()).unwrap_or(i64::MAX) >= LIST_LIMIT {
        let why = format!(
            "the list of {} objects reached its limit of {LIST_LIMIT}",
            t.type_name
        );
        return Err(interrupted(t, attempt, &why));
    }
    let mut mine = listed
        .items
        .into_iter()
        .filter_map(|item| item.resource_object)
        .filter(|o| tagged(o, uid))
        .filter(|o| replaced.is_none() || id_of(o) != replaced);
    let Some(found) = mine.next() else {
        return Ok(None);
    };
    if mine.next().is_some() {
        let why = format!(
            "more than one {} carries the tag {OWNER_TAG}={uid}",
            t.type_name
        );
        return Err(interrupted(t, attempt, &why));
    }
    let read = lifecycle::read(t.host(), t.type_name, &found, &[])
        .await
        .map_err(|e| t.lifecycle_err("read", e))?;
    Ok((!read.new_state.is_null()).then_some(read))
}

/// The provider's `id` of the object `state` describes.
fn id_of(state: &Value) -> Option<&str> {
    match lifecycle::lookup(state, &AttrPath::root().attr("id")).map(Value::untyped) {
        Some(Value::String(id)) => Some(id),
        _ => None,
    }
}

/// Whether `object`'s `tags` (or `tags_all`) carry the owner tag with `uid`.
fn tagged(object: &Value, uid: &str) -> bool {
    ["tags", "tags_all"].iter().any(|attr| {
        let tag = lifecycle::lookup(object, &AttrPath::root().attr(*attr).key(OWNER_TAG));
        matches!(tag.map(Value::untyped), Some(Value::String(v)) if v == uid)
    })
}

/// The list configuration: nothing set (nested block lists empty), except an EC2-style
/// `filter` block (`name`, `values`) asked for the owner tag, so the provider filters.
fn list_config(block: &kraken_codegen::schema::Block, uid: &str) -> Value {
    let Type::Object(ty) = block.implied_type() else {
        return Value::Null;
    };
    let mut attrs = std::collections::BTreeMap::new();
    for (name, attr_ty) in &ty.attributes {
        let empty = match attr_ty {
            _ if !block.block_types.contains_key(name) => Value::Null,
            Type::List(_) => Value::List(Vec::new()),
            Type::Set(_) => Value::Set(Vec::new()),
            Type::Map(_) => Value::Map(Default::default()),
            _ => Value::Null,
        };
        attrs.insert(name.clone(), empty);
    }
    if let Some(Type::List(e) | Type::Set(e)) = ty.attributes.get("filter")
        && let Type::Object(f) = e.as_ref()
        && f.attributes.get("name") == Some(&Type::String)
        && let Some(values_ty @ (Type::List(_) | Type::Set(_))) = f.attributes.get("values")
    {
        let values = vec![Value::string(uid)];
        let values = match values_ty {
            Type::Set(_) => Value::Set(values),
            _ => Value::List(values),
        };
        let filter = Value::Object(
            [
                ("name".to_owned(), Value::string(format!("tag:{OWNER_TAG}"))),
                ("values".to_owned(), values),
            ]
            .into_iter()
            .collect(),
        );
        let filters = match ty.attributes.get("filter") {
            Some(Type::Set(_)) => Value::Set(vec![filter]),
            _ => Value::List(vec![filter]),
        };
        attrs.insert("filter".to_owned(), filters);
    }
    Value::Object(attrs)
}

//! Adoption needs consent: a resource takes an existing object (`importId`, `importIdentity`)
//! only with proof that its namespace may have it, because deleting the resource then destroys
//! the object, whoever made it.
//!
//! The proof, in order:
//! - the object carries the tag [`ADOPT_TAG`] valued `<namespace>/<name>` of the resource (the
//!   owner's consent: Kraken never writes tags under `kraken.dev/` from a spec), in `tags` or
//!   `tags_all`;
//! - or the administrators allow the type in the namespace (the Namespace annotation
//!   [`kraken_core_kinds::ADOPTABLE_TYPES_ANNOTATION`]): for types that take no tags, and for a
//!   migration an administrator vouches for.
//!
//! A refused adoption stores nothing, so nothing is destroyed when the resource is deleted.
//! The same check guards a recovery after an interrupted create whose fence Kraken cannot vouch
//! for ([`super::fence`]).

use super::floor::NamespacePolicy;
use kraken_core_kinds::{ADOPT_TAG, ADOPTABLE_TYPES_ANNOTATION};
use kraken_provider::lifecycle;
use kraken_value::{AttrPath, Value};

/// Whether the resource `namespace/name` may adopt the object of `type_name` that `state`
/// describes; the refusal says what would allow it.
pub fn check(
    state: &Value,
    type_name: &str,
    (namespace, name): (&str, &str),
    (takes_tags, policy): (bool, &NamespacePolicy),
) -> Result<(), String> {
    let wanted = format!("{namespace}/{name}");
    if takes_tags && tagged(state, &wanted) {
        return Ok(());
    }
    if policy.may_adopt(type_name) {
        return Ok(());
    }
    let tag = if takes_tags {
        format!("tag the object {ADOPT_TAG}={wanted} (its owner's consent), or ")
    } else {
        String::new()
    };
    Err(format!(
        "the existing {type_name} is not adopted: nothing shows that namespace {namespace} may \
         take it, and deleting this resource would destroy it. To adopt it, {tag}have an \
         administrator allow {type_name} in the Namespace's annotation {ADOPTABLE_TYPES_ANNOTATION}"
    ))
}

/// Whether `state`'s `tags` or `tags_all` carry [`ADOPT_TAG`] with `wanted`.
fn tagged(state: &Value, wanted: &str) -> bool {
    ["tags", "tags_all"].iter().any(|attr| {
        let tag = lifecycle::lookup(state, &AttrPath::root().attr(*attr).key(ADOPT_TAG));
        matches!(tag.map(Value::untyped), Some(Value::String(v)) if v == wanted)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(tags: &[(&str, &str)]) -> Value {
        let tags = tags
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::string(*v)))
            .collect();
        Value::Object(
            [("tags_all".to_owned(), Value::Map(tags))]
                .into_iter()
                .collect(),
        )
    }

    fn allowing(patterns: &[&str]) -> NamespacePolicy {
        NamespacePolicy {
            adoptable: patterns
                .iter()
                .map(|p| glob::Pattern::new(p).expect("pattern"))
                .collect(),
            ..NamespacePolicy::default()
        }
    }

    #[test]
    fn the_owners_tag_or_the_administrators_list_allows_adoption() {
        let who = ("team", "web");
        let none = NamespacePolicy::default();
        // (state, takes tags, policy) → allowed
        let table = [
            (state(&[(ADOPT_TAG, "team/web")]), true, &none, true),
            (state(&[(ADOPT_TAG, "other/web")]), true, &none, false),
            (state(&[(ADOPT_TAG, "team/web2")]), true, &none, false),
            (state(&[("Name", "team/web")]), true, &none, false),
            (state(&[]), true, &allowing(&["aws_*"]), true),
            // A tag counts only where the type takes tags.
            (state(&[(ADOPT_TAG, "team/web")]), false, &none, false),
            (state(&[]), false, &allowing(&["aws_instance"]), true),
            (state(&[]), false, &allowing(&["random_*"]), false),
        ];
        for (i, (s, takes, policy, allowed)) in table.into_iter().enumerate() {
            let got = check(&s, "aws_instance", who, (takes, policy));
            assert_eq!(got.is_ok(), allowed, "case {i}: {got:?}");
        }
        let err = check(&state(&[]), "aws_instance", who, (true, &none)).expect_err("refused");
        assert!(err.contains("kraken.dev/adoptable-by=team/web"), "{err}");
        assert!(err.contains(ADOPTABLE_TYPES_ANNOTATION), "{err}");
        let err = check(&Value::Null, "random_pet", who, (false, &none)).expect_err("refused");
        assert!(!err.contains("tag the object"), "{err}");
    }
}

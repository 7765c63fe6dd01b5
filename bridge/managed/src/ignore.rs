//! `spec.ignoreChanges`: arguments whose changes are not applied once the external object
//! exists, Terraform's `lifecycle { ignore_changes = [...] }`.
//!
//! As Terraform does it: before planning an update, each ignored argument of the configuration
//! takes the value the external object has (the prior state), so the plan sees no difference
//! there — neither a change of the spec nor drift made outside is acted on. On create there is
//! no prior state and the spec's values are used.

use kraken_value::fields::FieldMap;
use kraken_value::{PathStep, Value};

/// `config` with every argument `paths` names (dotted Kubernetes paths below
/// `spec.forProvider`, as `valuesFrom` takes them) set to its value in `prior`. An error names
/// a path the kind does not have.
pub fn keep_prior(
    mut config: Value,
    prior: &Value,
    fields: &FieldMap,
    paths: &[String],
) -> Result<Value, String> {
    if prior.is_null() {
        return Ok(config);
    }
    for (i, dotted) in paths.iter().enumerate() {
        let (steps, _) = fields
            .argument(dotted)
            .map_err(|e| format!("spec.ignoreChanges[{i}]: {e}"))?;
        set_from(&mut config, prior, &steps);
    }
    Ok(config)
}

/// Sets the part of `config` at `steps` to the part of `prior` there (a map key `prior` lacks
/// is removed from `config`; a path through a value `config` lacks changes nothing: there is
/// nothing configured there to ignore).
fn set_from(config: &mut Value, prior: &Value, steps: &[PathStep]) {
    let prior = prior.untyped();
    if let Value::Typed(_, inner) = config {
        return set_from(inner, prior, steps);
    }
    let Some((step, rest)) = steps.split_first() else {
        *config = prior.clone();
        return;
    };
    match (config, step) {
        (Value::Object(attrs), PathStep::Attr(name)) => {
            let from = prior.get(name).cloned().unwrap_or(Value::Null);
            if rest.is_empty() {
                attrs.insert(name.clone(), from);
            } else if let Some(inner) = attrs.get_mut(name) {
                set_from(inner, &from, rest);
            }
        }
        (Value::Map(entries), PathStep::Key(key)) => {
            let from = match prior {
                Value::Map(p) => p.get(key),
                _ => None,
            };
            match (from, rest.is_empty()) {
                (Some(v), true) => {
                    entries.insert(key.clone(), v.clone());
                }
                (None, true) => {
                    entries.remove(key);
                }
                (Some(v), false) => {
                    if let Some(inner) = entries.get_mut(key) {
                        set_from(inner, v, rest);
                    }
                }
                (None, false) => {}
            }
        }
        (Value::List(items) | Value::Tuple(items) | Value::Set(items), PathStep::Index(i)) => {
            let from = match prior {
                Value::List(p) | Value::Tuple(p) | Value::Set(p) => {
                    usize::try_from(*i).ok().and_then(|i| p.get(i))
                }
                _ => None,
            };
            let at = usize::try_from(*i).ok().and_then(|i| items.get_mut(i));
            if let (Some(inner), Some(from)) = (at, from) {
                set_from(inner, from, rest);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(attrs: Vec<(&str, Value)>) -> Value {
        Value::object(attrs)
    }

    fn tags(pairs: &[(&str, &str)]) -> Value {
        Value::Map(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Value::string(*v)))
                .collect(),
        )
    }

    #[test]
    fn an_ignored_attribute_keeps_the_prior_value() {
        let config = obj(vec![("size", Value::int(2)), ("name", Value::string("a"))]);
        let prior = obj(vec![
            ("size", Value::int(1)),
            ("name", Value::string("old")),
        ]);
        let mut got = config.clone();
        set_from(&mut got, &prior, &[PathStep::Attr("size".into())]);
        assert_eq!(
            got,
            obj(vec![("size", Value::int(1)), ("name", Value::string("a"))])
        );
    }

    #[test]
    fn one_map_key_is_ignored_and_the_others_apply() {
        let config = obj(vec![("tags", tags(&[("team", "b"), ("Name", "new")]))]);
        let prior = obj(vec![(
            "tags",
            tags(&[("team", "a"), ("Name", "set-outside")]),
        )]);
        let mut got = config.clone();
        set_from(
            &mut got,
            &prior,
            &[PathStep::Attr("tags".into()), PathStep::Key("Name".into())],
        );
        assert_eq!(
            got,
            obj(vec![(
                "tags",
                tags(&[("team", "b"), ("Name", "set-outside")])
            )])
        );
        // A key the object does not have is not added.
        let prior = obj(vec![("tags", tags(&[("team", "a")]))]);
        let mut got = config;
        set_from(
            &mut got,
            &prior,
            &[PathStep::Attr("tags".into()), PathStep::Key("Name".into())],
        );
        assert_eq!(got, obj(vec![("tags", tags(&[("team", "b")]))]));
    }

    #[test]
    fn a_list_element_and_a_missing_path() {
        let config = obj(vec![(
            "rules",
            Value::List(vec![obj(vec![("port", Value::int(80))])]),
        )]);
        let prior = obj(vec![(
            "rules",
            Value::List(vec![obj(vec![("port", Value::int(8080))])]),
        )]);
        let mut got = config.clone();
        set_from(
            &mut got,
            &prior,
            &[
                PathStep::Attr("rules".into()),
                PathStep::Index(0),
                PathStep::Attr("port".into()),
            ],
        );
        assert_eq!(got, prior);
        // Beyond what is configured: nothing to ignore.
        let mut got = config.clone();
        set_from(
            &mut got,
            &prior,
            &[PathStep::Attr("rules".into()), PathStep::Index(3)],
        );
        assert_eq!(got, config);
    }
}

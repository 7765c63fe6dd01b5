//! The "proposed new state" Terraform sends with every `PlanResourceChange`.
//!
//! Providers expect the caller to merge configuration and prior state before planning: every
//! value the user wrote comes from the configuration, and every computed value the user left
//! unset keeps its prior value (so that a provider can tell "unchanged" from "set to null").
//! This mirrors Terraform's `objchange.ProposedNew`. Nested collections pair configuration
//! elements with prior elements by index (lists), key (maps) or by their non-computed content
//! (sets), so computed attributes inside them survive too.

use std::collections::BTreeMap;

use super::schema::{Attribute, Block, BlockNesting, NestedBlock, NestedObject, ObjectNesting};
use kraken_value::Value;

/// The proposed new state for a resource given its prior state and its configuration.
/// A null configuration (a destroy) proposes null.
pub fn proposed_new(block: &Block, prior: &Value, config: &Value) -> Value {
    if config.is_null() {
        return Value::Null;
    }
    let prior = if prior.is_null() {
        empty_value(block)
    } else {
        prior.clone()
    };
    proposed_block(block, &prior, config)
}

/// The value of an empty configuration block: attributes null, repeated blocks empty, single
/// blocks null, group blocks recursively empty (Terraform's `Block.EmptyValue`).
pub fn empty_value(block: &Block) -> Value {
    let mut out = BTreeMap::new();
    for name in block.attributes.keys() {
        out.insert(name.clone(), Value::Null);
    }
    for (name, nested) in &block.block_types {
        let v = match nested.nesting {
            BlockNesting::Single => Value::Null,
            BlockNesting::Group => empty_value(&nested.block),
            BlockNesting::List => Value::List(Vec::new()),
            BlockNesting::Set => Value::Set(Vec::new()),
            BlockNesting::Map => Value::Map(BTreeMap::new()),
        };
        out.insert(name.clone(), v);
    }
    Value::Object(out)
}

fn proposed_block(block: &Block, prior: &Value, config: &Value) -> Value {
    if !config.is_known() || config.is_null() {
        return config.clone();
    }
    let mut out = proposed_attributes(&block.attributes, prior, config);
    for (name, nested) in &block.block_types {
        let p = attr_of(prior, name);
        let c = attr_of(config, name);
        out.insert(name.clone(), proposed_nested_block(nested, &p, &c));
    }
    Value::Object(out)
}

fn proposed_attributes(
    attributes: &BTreeMap<String, Attribute>,
    prior: &Value,
    config: &Value,
) -> BTreeMap<String, Value> {
    attributes
        .iter()
        .map(|(name, attr)| {
            let p = attr_of(prior, name);
            let c = attr_of(config, name);
            (name.clone(), proposed_attribute(attr, &p, &c))
        })
        .collect()
}

fn proposed_attribute(attr: &Attribute, prior: &Value, config: &Value) -> Value {
    if attr.computed && config.is_null() {
        // Left unset by the user: the provider decides, starting from what it decided before.
        return prior.clone();
    }
    match &attr.nested_type {
        Some(nested) if config.is_known() && !config.is_null() => {
            proposed_nested_object(nested, prior, config)
        }
        _ => config.clone(),
    }
}

fn proposed_nested_object(nested: &NestedObject, prior: &Value, config: &Value) -> Value {
    let merge = |p: &Value, c: &Value| -> Value {
        if !c.is_known() || c.is_null() {
            return c.clone();
        }
        let p = if p.is_known() && !p.is_null() {
            p.clone()
        } else {
            Value::Null
        };
        Value::Object(proposed_attributes(&nested.attributes, &p, c))
    };
    let has_computed = nested.attributes.values().any(|a| a.computed);
    match nested.nesting {
        ObjectNesting::Single => merge(prior, config),
        ObjectNesting::List => pair_by_index(prior, config, merge),
        ObjectNesting::Map => pair_by_key(prior, config, merge),
        ObjectNesting::Set if !has_computed => config.clone(),
        ObjectNesting::Set => pair_set(prior, config, merge, |v| {
            strip_computed(v, |name| {
                nested.attributes.get(name).is_some_and(|a| a.computed)
            })
        }),
    }
}

fn proposed_nested_block(nested: &NestedBlock, prior: &Value, config: &Value) -> Value {
    let block = &nested.block;
    let merge = |p: &Value, c: &Value| -> Value {
        let p = if p.is_known() && !p.is_null() {
            p.clone()
        } else {
            empty_value(block)
        };
        proposed_block(block, &p, c)
    };
    if !config.is_known() {
        return config.clone();
    }
    match nested.nesting {
        BlockNesting::Single | BlockNesting::Group => {
            if config.is_null() {
                config.clone()
            } else {
                merge(prior, config)
            }
        }
        BlockNesting::List => pair_by_index(prior, config, merge),
        BlockNesting::Map => pair_by_key(prior, config, merge),
        BlockNesting::Set => pair_set(prior, config, merge, |v| {
            strip_computed(v, |name| {
                block.attributes.get(name).is_some_and(|a| a.computed)
            })
        }),
    }
}

fn attr_of(v: &Value, name: &str) -> Value {
    match v.untyped() {
        Value::Object(map) => map.get(name).cloned().unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

fn elements(v: &Value) -> Option<&[Value]> {
    match v.untyped() {
        Value::List(items) | Value::Set(items) | Value::Tuple(items) => Some(items),
        _ => None,
    }
}

fn pair_by_index(prior: &Value, config: &Value, merge: impl Fn(&Value, &Value) -> Value) -> Value {
    let Some(conf) = elements(config) else {
        return config.clone();
    };
    let prior = elements(prior).unwrap_or(&[]);
    let items = conf
        .iter()
        .enumerate()
        .map(|(i, c)| merge(prior.get(i).unwrap_or(&Value::Null), c))
        .collect();
    rebuild_like(config, items)
}

fn pair_by_key(prior: &Value, config: &Value, merge: impl Fn(&Value, &Value) -> Value) -> Value {
    let (Value::Map(conf) | Value::Object(conf)) = config.untyped() else {
        return config.clone();
    };
    let empty = BTreeMap::new();
    let prior = match prior.untyped() {
        Value::Map(m) | Value::Object(m) => m,
        _ => &empty,
    };
    let out = conf
        .iter()
        .map(|(k, c)| (k.clone(), merge(prior.get(k).unwrap_or(&Value::Null), c)))
        .collect();
    match config.untyped() {
        Value::Object(_) => Value::Object(out),
        _ => Value::Map(out),
    }
}

/// Set elements have no identity, so a configuration element takes the computed values of the
/// prior element whose non-computed content is equal to its own.
fn pair_set(
    prior: &Value,
    config: &Value,
    merge: impl Fn(&Value, &Value) -> Value,
    key: impl Fn(&Value) -> Value,
) -> Value {
    let Some(conf) = elements(config) else {
        return config.clone();
    };
    let mut unused: Vec<&Value> = elements(prior).unwrap_or(&[]).iter().collect();
    let items = conf
        .iter()
        .map(|c| {
            let want = key(c);
            match unused.iter().position(|p| key(p) == want) {
                Some(pos) => merge(unused.swap_remove(pos), c),
                None => merge(&Value::Null, c),
            }
        })
        .collect();
    rebuild_like(config, items)
}

fn strip_computed(v: &Value, is_computed: impl Fn(&str) -> bool) -> Value {
    match v.untyped() {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !is_computed(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn rebuild_like(template: &Value, items: Vec<Value>) -> Value {
    match template.untyped() {
        Value::Set(_) => Value::Set(items),
        Value::Tuple(_) => Value::Tuple(items),
        _ => Value::List(items),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kraken_value::{Number, Type};

    fn attr(ty: Type, optional: bool, computed: bool) -> Attribute {
        Attribute {
            ty: Some(ty),
            optional,
            computed,
            ..Default::default()
        }
    }

    fn obj(pairs: &[(&str, Value)]) -> Value {
        Value::Object(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    fn s(v: &str) -> Value {
        Value::String(v.into())
    }

    fn block() -> Block {
        let mut rule = Block::default();
        rule.attributes
            .insert("port".into(), attr(Type::Number, true, false));
        rule.attributes
            .insert("rule_id".into(), attr(Type::String, false, true));
        let mut b = Block::default();
        b.attributes
            .insert("name".into(), attr(Type::String, true, false));
        b.attributes
            .insert("id".into(), attr(Type::String, false, true));
        b.attributes
            .insert("mode".into(), attr(Type::String, true, true));
        b.block_types.insert(
            "rule".into(),
            NestedBlock {
                block: rule,
                nesting: BlockNesting::Set,
                ..Default::default()
            },
        );
        b
    }

    #[test]
    fn create_keeps_config_and_nulls_computed() {
        let config = obj(&[
            ("name", s("a")),
            ("id", Value::Null),
            ("mode", Value::Null),
            ("rule", Value::Set(vec![])),
        ]);
        let got = proposed_new(&block(), &Value::Null, &config);
        assert_eq!(got, config);
    }

    #[test]
    fn update_keeps_prior_computed_values_and_config_arguments() {
        let rule = |port: i64, id: Value| {
            obj(&[
                ("port", Value::Number(Number::from_i64(port))),
                ("rule_id", id),
            ])
        };
        let prior = obj(&[
            ("name", s("a")),
            ("id", s("obj-1")),
            ("mode", s("fast")),
            (
                "rule",
                Value::Set(vec![rule(80, s("r80")), rule(443, s("r443"))]),
            ),
        ]);
        let config = obj(&[
            ("name", s("b")),
            ("id", Value::Null),
            ("mode", Value::Null),
            (
                "rule",
                Value::Set(vec![rule(443, Value::Null), rule(22, Value::Null)]),
            ),
        ]);
        let got = proposed_new(&block(), &prior, &config);
        let want = obj(&[
            ("name", s("b")),
            ("id", s("obj-1")),
            ("mode", s("fast")),
            (
                "rule",
                Value::Set(vec![rule(443, s("r443")), rule(22, Value::Null)]),
            ),
        ]);
        assert_eq!(got, want);
    }

    #[test]
    fn optional_computed_set_in_config_wins() {
        let prior = obj(&[
            ("name", s("a")),
            ("id", s("x")),
            ("mode", s("fast")),
            ("rule", Value::Set(vec![])),
        ]);
        let config = obj(&[
            ("name", s("a")),
            ("id", Value::Null),
            ("mode", s("slow")),
            ("rule", Value::Set(vec![])),
        ]);
        let got = proposed_new(&block(), &prior, &config);
        assert_eq!(attr_of(&got, "mode"), s("slow"));
        assert_eq!(attr_of(&got, "id"), s("x"));
    }

    #[test]
    fn destroy_proposes_null() {
        assert_eq!(proposed_new(&block(), &obj(&[]), &Value::Null), Value::Null);
    }
}

//! CEL validation rules (`x-kubernetes-validations`) and a bound on what they cost.
//!
//! # Rules
//!
//! - On `spec`, one rule per required top-level argument: the argument is set literally or
//!   named by a `valuesFrom` entry (`has(self.forProvider.length) || (has(self.valuesFrom)
//!   && self.valuesFrom.exists(v, v.path == 'length'))`). Checking this in the schema rather
//!   than with `required` is what lets the value come from elsewhere, and it still fails at
//!   admission with a message naming the field. For an object, list or map argument an entry
//!   for a path below it (`rules.0.port`) also counts. A sensitive argument is checked as
//!   `<field>SecretRef`, while `valuesFrom` names it by its own field name.
//! - On `spec`, a value may not be given twice: no `valuesFrom` entry names the path of an
//!   argument that is set in `forProvider`, or for an argument that accepts subpaths a path
//!   below it (`!has(self.valuesFrom) || !self.valuesFrom.exists(v, (has(self.forProvider.length)
//!   && v.path == 'length') || (has(self.forProvider.rules) && (v.path == 'rules' ||
//!   v.path.startsWith('rules.'))) || ...)`). One rule covers every argument unless it would
//!   exceed [`STATIC_ESTIMATED_COST_LIMIT`], when the arguments are split over several.
//! - On each `valuesFrom` item: exactly one source is set.
//!
//! # Cost
//!
//! The API server estimates every rule's worst-case cost when the CRD is written and refuses
//! the CRD when one rule exceeds [`STATIC_ESTIMATED_COST_LIMIT`] or all rules together —
//! each multiplied by how many times it can run, i.e. the product of the `maxItems` of the
//! arrays above it — exceed [`STATIC_ESTIMATED_CRD_COST_LIMIT`]. At admission the actual
//! costs of one object may not exceed [`RUNTIME_COST_BUDGET`].
//!
//! The only iteration is `exists` over `valuesFrom`, which is bounded by
//! [`VALUES_FROM_MAX_ITEMS`] entries whose `path` is at most [`VALUES_FROM_PATH_MAX_LENGTH`]
//! bytes, so a required-argument rule costs a few thousand units and a CRD stays far below
//! the limits even with hundreds of required arguments. The conflict rule costs about 15,000
//! units per argument (64 items × its body's bytes and one or two 52-unit comparisons), so
//! one rule holds several hundred arguments. Its actual cost is far lower: an argument that
//! is not set costs one `has` per item, and a comparison traverses the shorter string, the
//! literal path. [`rule_cost_bound`] computes a
//! conservative upper bound of cel-go's estimate for the rules generated here, and
//! [`schema_cost_bound`] sums it over a whole schema; tests hold every generated CRD to all
//! three limits.

use serde_json::{Map, Value as Json};

use crate::ir::TopLevelArg;
use crate::names::cel_field;

/// Per-expression limit on the estimated cost (apiextensions `StaticEstimatedCostLimit`).
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// Limit on the summed estimated cost of a CRD's rules (`StaticEstimatedCRDCostLimit`).
pub const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;
/// Limit on the actual cost of validating one object (apiserver `RuntimeCELCostBudget`).
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;

/// `spec.valuesFrom` holds at most this many entries.
pub const VALUES_FROM_MAX_ITEMS: u64 = 64;
/// `spec.valuesFrom[].path` is at most this long.
pub const VALUES_FROM_PATH_MAX_LENGTH: u64 = 512;
/// A `template` (in `valuesFrom`, DependencyRequests and ConfigExports) is at most this long;
/// what it expands to is bounded by the hub.
pub const TEMPLATE_MAX_LENGTH: u64 = 4096;

/// One `x-kubernetes-validations` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub rule: String,
    pub message: String,
    /// Relative to the node carrying the rule, e.g. `.forProvider.length`.
    pub field_path: Option<String>,
    pub reason: Option<&'static str>,
}

impl Rule {
    pub fn to_json(&self) -> Json {
        let mut map = Map::new();
        map.insert("rule".into(), self.rule.clone().into());
        map.insert("message".into(), self.message.clone().into());
        if let Some(path) = &self.field_path {
            map.insert("fieldPath".into(), path.clone().into());
        }
        if let Some(reason) = self.reason {
            map.insert("reason".into(), reason.into());
        }
        Json::Object(map)
    }
}

/// The rule on `spec` for one required top-level argument.
pub fn required_rule(arg: &TopLevelArg) -> Rule {
    let field = cel_field(&arg.field);
    // Field names are ASCII letters and digits, so they need no escaping in a CEL string.
    let path = &arg.path;
    let matches = if arg.accepts_subpaths {
        format!("v.path == '{path}' || v.path.startsWith('{path}.')")
    } else {
        format!("v.path == '{path}'")
    };
    let rule = format!(
        "has(self.forProvider.{field}) || (has(self.valuesFrom) && self.valuesFrom.exists(v, {matches}))"
    );
    let message = if arg.field == arg.path {
        format!(
            "spec.forProvider.{} is required: set it, or take it from spec.valuesFrom",
            arg.field
        )
    } else {
        format!(
            "spec.forProvider.{} is required: set it, or take {} from spec.valuesFrom",
            arg.field, arg.path
        )
    };
    Rule {
        rule,
        message,
        field_path: Some(format!(".forProvider.{}", arg.field)),
        reason: Some("FieldValueRequired"),
    }
}

/// The message of the rules that refuse a value set twice.
pub const CONFLICT_MESSAGE: &str = "a value is set both in spec.forProvider and in \
     spec.valuesFrom; set each argument in one place";

/// The rules on `spec` that refuse a value given both literally and through `valuesFrom`:
/// no `valuesFrom` entry may name a set `forProvider` field's path, or, for an argument that
/// accepts subpaths, a path below it. Every argument is covered, usually by one rule;
/// arguments are split over several rules only where one would exceed
/// [`STATIC_ESTIMATED_COST_LIMIT`] by [`rule_cost_bound`]. Empty when there are no arguments.
pub fn conflict_rules(args: &[TopLevelArg]) -> Vec<Rule> {
    const HEAD: &str = "!has(self.valuesFrom) || !self.valuesFrom.exists(v, ";
    const TAIL: &str = ")";
    const OR: &str = " || ";
    let traversal = string_traversal(VALUES_FROM_PATH_MAX_LENGTH);
    // What rule_cost_bound charges: the bytes outside the comprehension once, and per item
    // the body's bytes, 10 for bookkeeping and a traversal per comparison.
    let fixed = (HEAD.len() + TAIL.len()) as u64 + VALUES_FROM_MAX_ITEMS * 10;
    let mut chunks: Vec<Vec<String>> = Vec::new();
    let mut cost = fixed;
    for arg in args {
        let (term, comparisons) = conflict_term(arg);
        let add =
            VALUES_FROM_MAX_ITEMS * ((term.len() + OR.len()) as u64 + comparisons * traversal);
        match chunks.last_mut() {
            Some(chunk) if cost + add <= STATIC_ESTIMATED_COST_LIMIT => chunk.push(term),
            _ => {
                chunks.push(vec![term]);
                cost = fixed;
            }
        }
        cost += add;
    }
    chunks
        .into_iter()
        .map(|terms| Rule {
            rule: format!("{HEAD}{}{TAIL}", terms.join(OR)),
            message: CONFLICT_MESSAGE.to_owned(),
            field_path: Some(".valuesFrom".to_owned()),
            reason: Some("FieldValueInvalid"),
        })
        .collect()
}

/// One argument's disjunct in a conflict rule, and how many strings it compares.
fn conflict_term(arg: &TopLevelArg) -> (String, u64) {
    let field = cel_field(&arg.field);
    // Field names are ASCII letters and digits, so they need no escaping in a CEL string.
    let path = &arg.path;
    if arg.accepts_subpaths {
        (
            format!(
                "(has(self.forProvider.{field}) && (v.path == '{path}' || v.path.startsWith('{path}.')))"
            ),
            2,
        )
    } else {
        (
            format!("(has(self.forProvider.{field}) && v.path == '{path}')"),
            1,
        )
    }
}

/// The names of the sources a `valuesFrom` entry can take a value from.
pub const VALUE_SOURCES: [&str; 5] = [
    "resource",
    "stateDeclaration",
    "configMapKeyRef",
    "secretKeyRef",
    "template",
];

/// The rule on each `valuesFrom` item: exactly one source.
pub fn exactly_one_source_rule() -> Rule {
    let count: Vec<String> = VALUE_SOURCES
        .iter()
        .map(|s| format!("(has(self.{s}) ? 1 : 0)"))
        .collect();
    Rule {
        rule: format!("{} == 1", count.join(" + ")),
        message: format!(
            "a valuesFrom entry takes its value from exactly one of {}",
            VALUE_SOURCES.join(", ")
        ),
        field_path: None,
        reason: None,
    }
}

/// cel-go charges string comparison and `startsWith` 0.1 per byte of the shorter operand
/// (`common.StringTraversalCostFactor`).
fn string_traversal(max_len: u64) -> u64 {
    max_len.div_ceil(10)
}

/// A conservative upper bound of the API server's estimate for one of the rules generated
/// here, given the `maxItems` of the list an `exists` iterates and the `maxLength` of the
/// strings it compares.
///
/// Argument: every CEL operation (select, `has`, literal, logical or arithmetic operator,
/// call) needs at least one byte of source and is charged at most 1 plus, for string
/// comparisons, the traversal of the compared string; a comprehension charges its body and
/// its accumulator bookkeeping (bounded by 10) once per element. So the bytes outside the
/// comprehension, plus per element the bytes of the body, 10, and one traversal per
/// comparison, bound the estimate from above.
pub fn rule_cost_bound(rule: &str, list_max_items: u64, string_max_len: u64) -> u64 {
    let Some((outside, body)) = split_comprehension(rule) else {
        return rule.len() as u64;
    };
    let comparisons = (body.matches("==").count() + body.matches("startsWith").count()) as u64;
    let per_item = body.len() as u64 + 10 + comparisons * string_traversal(string_max_len);
    outside as u64 + list_max_items.saturating_mul(per_item)
}

/// (bytes outside, body) of the one `exists(...)` in a rule.
fn split_comprehension(rule: &str) -> Option<(usize, &str)> {
    let start = rule.find(".exists(")? + ".exists(".len();
    let mut depth = 1usize;
    for (i, c) in rule[start..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    let body = &rule[start..start + i];
                    return Some((rule.len() - body.len(), body));
                }
            }
            _ => {}
        }
    }
    None
}

/// The bound for a whole openAPIV3Schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CostBound {
    /// The most expensive single rule, multiplied by how often it can run.
    pub max_rule: u64,
    /// All rules together, each multiplied by how often it can run.
    pub total: u64,
}

/// Sums [`rule_cost_bound`] over every rule in a schema, each multiplied by the product of
/// the `maxItems` of the arrays above it. An `exists` over a list without `maxItems`, a
/// rule below an unbounded array or map, or an `exists` comparing strings without
/// `maxLength` is an error: the API server would estimate it as unbounded too.
pub fn schema_cost_bound(schema: &Json) -> Result<CostBound, String> {
    let mut bound = CostBound::default();
    walk_cost(schema, Some(1), "", &mut bound)?;
    Ok(bound)
}

fn walk_cost(
    node: &Json,
    cardinality: Option<u64>,
    path: &str,
    bound: &mut CostBound,
) -> Result<(), String> {
    if let Some(Json::Array(rules)) = node.get("x-kubernetes-validations") {
        let Some(times) = cardinality else {
            return Err(format!("{path}: rule below an unbounded list or map"));
        };
        for rule in rules {
            let text = rule.get("rule").and_then(Json::as_str).unwrap_or_default();
            let cost = times.saturating_mul(rule_bound_in(node, text, path)?);
            bound.max_rule = bound.max_rule.max(cost);
            bound.total = bound.total.saturating_add(cost);
        }
    }
    if let Some(Json::Object(props)) = node.get("properties") {
        for (name, child) in props {
            walk_cost(child, cardinality, &format!("{path}.{name}"), bound)?;
        }
    }
    if let Some(items) = node.get("items") {
        let max = node.get("maxItems").and_then(Json::as_u64);
        let times = cardinality.zip(max).map(|(c, m)| c.saturating_mul(m));
        walk_cost(items, times, &format!("{path}[]"), bound)?;
    }
    if let Some(values) = node.get("additionalProperties") {
        walk_cost(values, None, &format!("{path}{{}}"), bound)?;
    }
    Ok(())
}

/// The bound of one rule on `node`, reading the bounds of the list it iterates.
fn rule_bound_in(node: &Json, rule: &str, path: &str) -> Result<u64, String> {
    let Some(list_name) = rule
        .split_once(".exists(")
        .and_then(|(before, _)| before.rsplit("self.").next())
    else {
        return Ok(rule_cost_bound(rule, 0, 0));
    };
    let list = &node["properties"][list_name];
    let max_items = list["maxItems"]
        .as_u64()
        .ok_or_else(|| format!("{path}: {list_name} has no maxItems"))?;
    let max_len = list["items"]["properties"]["path"]["maxLength"]
        .as_u64()
        .ok_or_else(|| format!("{path}: {list_name}[].path has no maxLength"))?;
    Ok(rule_cost_bound(rule, max_items, max_len))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn arg(field: &str, path: &str, subpaths: bool) -> TopLevelArg {
        TopLevelArg {
            field: field.into(),
            path: path.into(),
            accepts_subpaths: subpaths,
        }
    }

    #[test]
    fn required_rules_accept_literals_or_values_from() {
        let cases = [
            (
                arg("length", "length", false),
                "has(self.forProvider.length) || (has(self.valuesFrom) && self.valuesFrom.exists(v, v.path == 'length'))",
                "spec.forProvider.length is required: set it, or take it from spec.valuesFrom",
            ),
            (
                arg("passwordSecretRef", "password", false),
                "has(self.forProvider.passwordSecretRef) || (has(self.valuesFrom) && self.valuesFrom.exists(v, v.path == 'password'))",
                "spec.forProvider.passwordSecretRef is required: set it, or take password from spec.valuesFrom",
            ),
            (
                arg("rules", "rules", true),
                "has(self.forProvider.rules) || (has(self.valuesFrom) && self.valuesFrom.exists(v, v.path == 'rules' || v.path.startsWith('rules.')))",
                "spec.forProvider.rules is required: set it, or take it from spec.valuesFrom",
            ),
            (
                arg("namespace", "namespace", false),
                "has(self.forProvider.__namespace__) || (has(self.valuesFrom) && self.valuesFrom.exists(v, v.path == 'namespace'))",
                "spec.forProvider.namespace is required: set it, or take it from spec.valuesFrom",
            ),
        ];
        for (arg, rule, message) in cases {
            let got = required_rule(&arg);
            assert_eq!(got.rule, rule);
            assert_eq!(got.message, message);
            assert_eq!(
                got.field_path.as_deref(),
                Some(format!(".forProvider.{}", arg.field).as_str())
            );
            assert_eq!(got.reason, Some("FieldValueRequired"));
        }
    }

    #[test]
    fn conflict_rule_refuses_a_set_argument_named_in_values_from() {
        let head = "!has(self.valuesFrom) || !self.valuesFrom.exists(v, ";
        let cases = [
            (
                arg("length", "length", false),
                "(has(self.forProvider.length) && v.path == 'length')",
            ),
            (
                arg("rules", "rules", true),
                "(has(self.forProvider.rules) && (v.path == 'rules' || v.path.startsWith('rules.')))",
            ),
            (
                arg("passwordSecretRef", "password", false),
                "(has(self.forProvider.passwordSecretRef) && v.path == 'password')",
            ),
            (
                arg("namespace", "namespace", false),
                "(has(self.forProvider.__namespace__) && v.path == 'namespace')",
            ),
        ];
        for (arg, term) in &cases {
            let rules = conflict_rules(std::slice::from_ref(arg));
            assert_eq!(rules.len(), 1);
            assert_eq!(rules[0].rule, format!("{head}{term})"));
            assert_eq!(rules[0].message, CONFLICT_MESSAGE);
            assert_eq!(rules[0].field_path.as_deref(), Some(".valuesFrom"));
            assert_eq!(rules[0].reason, Some("FieldValueInvalid"));
        }
        // One rule covers every argument, in order.
        let args: Vec<TopLevelArg> = cases.iter().map(|(a, _)| a.clone()).collect();
        let terms: Vec<&str> = cases.iter().map(|(_, t)| *t).collect();
        let rules = conflict_rules(&args);
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].rule, format!("{head}{})", terms.join(" || ")));
        assert!(conflict_rules(&[]).is_empty());
    }

    #[test]
    fn conflict_rules_split_only_beyond_the_per_expression_limit() {
        let args: Vec<TopLevelArg> = (0..2000)
            .map(|i| {
                arg(
                    &format!("argumentNumber{i}"),
                    &format!("argumentNumber{i}"),
                    i % 3 == 0,
                )
            })
            .collect();
        let rules = conflict_rules(&args);
        assert!(rules.len() > 1, "{}", rules.len());
        let mut covered = 0;
        for (i, rule) in rules.iter().enumerate() {
            let bound = rule_cost_bound(
                &rule.rule,
                VALUES_FROM_MAX_ITEMS,
                VALUES_FROM_PATH_MAX_LENGTH,
            );
            assert!(bound <= STATIC_ESTIMATED_COST_LIMIT, "{bound}");
            // Not split earlier than needed: only the last rule holds less than 99%.
            assert!(
                i + 1 == rules.len() || bound > STATIC_ESTIMATED_COST_LIMIT / 100 * 99,
                "{bound}"
            );
            covered += rule.rule.matches("has(self.forProvider.").count();
        }
        assert_eq!(covered, args.len());
        for (i, a) in args.iter().enumerate() {
            let term = format!("has(self.forProvider.{}) ", a.field);
            let holders = rules.iter().filter(|r| r.rule.contains(&term)).count();
            assert_eq!(holders, 1, "argument {i}");
        }
        // 300 arguments, more than any AWS resource has, still fit in one rule.
        assert_eq!(conflict_rules(&args[..300]).len(), 1);
    }

    #[test]
    fn exactly_one_rule_counts_every_source() {
        let rule = exactly_one_source_rule().rule;
        for source in VALUE_SOURCES {
            assert!(rule.contains(&format!("has(self.{source})")), "{rule}");
        }
        assert!(rule.ends_with("== 1"));
    }

    #[test]
    fn cost_bound_charges_the_comprehension_per_item() {
        let simple = required_rule(&arg("length", "length", false)).rule;
        let bound = rule_cost_bound(&simple, 64, 512);
        // 64 items × (body + bookkeeping + one 52-unit comparison) plus the rest.
        assert!(bound > 64 * 52 && bound < 10_000, "{bound}");
        let nested = required_rule(&arg("rules", "rules", true)).rule;
        assert!(rule_cost_bound(&nested, 64, 512) > bound);
        let flat = exactly_one_source_rule().rule;
        assert_eq!(rule_cost_bound(&flat, 64, 512), flat.len() as u64);
    }

    #[test]
    fn schema_bound_multiplies_by_enclosing_list_sizes() {
        let rule = json!([{"rule": "self.x == 1"}]);
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "object", "x-kubernetes-validations": rule},
            "b": {"type": "array", "maxItems": 4,
                  "items": {"type": "object", "x-kubernetes-validations": rule}},
        }});
        let bound = schema_cost_bound(&schema).expect("bounded");
        assert_eq!(bound.total, 5 * "self.x == 1".len() as u64);
        assert_eq!(bound.max_rule, 4 * "self.x == 1".len() as u64);
        let unbounded = json!({"type": "array",
            "items": {"type": "object", "x-kubernetes-validations": rule}});
        assert!(schema_cost_bound(&unbounded).is_err());
    }
}

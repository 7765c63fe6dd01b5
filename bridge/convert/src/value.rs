//! The values conversion works with: known JSON, references to other objects, templates
//! around them and what a manifest cannot express; and the operations on them that need no
//! evaluation (indexing, iteration, binary operators over known values).

use std::collections::BTreeMap;

use hcl::expr::BinaryOperator;
use serde_json::Value as Json;

use super::funcs::{EvalError, Result, num, to_f64};

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(EvalError(message.into()))
}

/// A value during conversion.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Known(Json),
    /// An attribute of another object.
    Ref(Ref),
    /// Text with references spliced in.
    Template(Vec<Part>),
    /// A list with some members not known.
    List(Vec<Val>),
    /// An object with some members not known.
    Object(BTreeMap<String, Val>),
    /// Computation over references that a manifest cannot express: the expression's text and
    /// the references it reads.
    Opaque {
        expr: String,
        refs: Vec<Ref>,
    },
}

/// A piece of a [`Val::Template`].
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    Ref(Ref),
}

/// `<mode>.<type>.<name>[<key>].<path>`: an attribute of a resource or data source instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ref {
    /// The module path of the object (`module.net`, `module.a.module.b`); empty in the root.
    pub module: String,
    /// `resource` or `data`.
    pub data: bool,
    pub type_name: String,
    pub name: String,
    /// The instance key when the reference picks one (`[0]`, `["a"]`).
    pub key: Option<Json>,
    /// The attribute path inside the instance (`["id"]`, `["tags", "Name"]`).
    pub path: Vec<Json>,
}

impl Ref {
    /// The Terraform address of the instance referred to, for messages.
    pub fn address(&self) -> String {
        in_module(
            &self.module,
            address(self.data, &self.type_name, &self.name, self.key.as_ref()),
        )
    }
}

/// `address` inside the module at `path` (`module.net.aws_vpc.main`).
pub fn in_module(path: &str, address: String) -> String {
    if path.is_empty() {
        address
    } else {
        format!("{path}.{address}")
    }
}

/// A Terraform instance address: `aws_vpc.main`, `data.aws_ami.ubuntu`, `aws_subnet.a[0]`,
/// `aws_subnet.b["x"]`.
pub fn address(data: bool, type_name: &str, name: &str, key: Option<&Json>) -> String {
    let mut a = if data {
        format!("data.{type_name}.{name}")
    } else {
        format!("{type_name}.{name}")
    };
    if let Some(k) = key {
        a.push_str(&format!("[{k}]"));
    }
    a
}

impl Val {
    pub fn null() -> Self {
        Val::Known(Json::Null)
    }

    /// The known value, when everything in it is known.
    pub fn known(&self) -> Option<&Json> {
        match self {
            Val::Known(j) => Some(j),
            _ => None,
        }
    }

    /// A list, collapsed to a known one when every member is known.
    pub fn list(items: Vec<Val>) -> Self {
        if items.iter().all(|v| v.known().is_some()) {
            Val::Known(Json::Array(
                items.into_iter().filter_map(|v| v.into_known()).collect(),
            ))
        } else {
            Val::List(items)
        }
    }

    /// An object, collapsed to a known one when every member is known.
    pub fn object(items: BTreeMap<String, Val>) -> Self {
        if items.values().all(|v| v.known().is_some()) {
            Val::Known(Json::Object(
                items
                    .into_iter()
                    .filter_map(|(k, v)| v.into_known().map(|v| (k, v)))
                    .collect(),
            ))
        } else {
            Val::Object(items)
        }
    }

    fn into_known(self) -> Option<Json> {
        match self {
            Val::Known(j) => Some(j),
            _ => None,
        }
    }

    /// Every reference inside.
    pub fn refs(&self) -> Vec<Ref> {
        let mut out = Vec::new();
        self.collect_refs(&mut out);
        out
    }

    fn collect_refs(&self, out: &mut Vec<Ref>) {
        match self {
            Val::Known(_) => {}
            Val::Ref(r) => out.push(r.clone()),
            Val::Template(parts) => out.extend(parts.iter().filter_map(|p| match p {
                Part::Ref(r) => Some(r.clone()),
                Part::Text(_) => None,
            })),
            Val::List(items) => items.iter().for_each(|v| v.collect_refs(out)),
            Val::Object(items) => items.values().for_each(|v| v.collect_refs(out)),
            Val::Opaque { refs, .. } => out.extend(refs.iter().cloned()),
        }
    }
}

/// `v[k]`.
pub fn get(v: &Val, k: &Json) -> Result<Val> {
    match (v, k) {
        (Val::Known(Json::Object(m)), Json::String(s)) => m
            .get(s)
            .cloned()
            .map(Val::Known)
            .ok_or_else(|| EvalError(format!("no attribute {s:?}"))),
        (Val::Object(m), Json::String(s)) => m
            .get(s)
            .cloned()
            .ok_or_else(|| EvalError(format!("no attribute {s:?}"))),
        (Val::Known(Json::Array(a)), _) => {
            let i = index(k, a.len())?;
            Ok(Val::Known(a[i].clone()))
        }
        (Val::List(a), _) => {
            let i = index(k, a.len())?;
            Ok(a[i].clone())
        }
        (Val::Ref(r), _) => {
            let mut r = r.clone();
            r.path.push(k.clone());
            Ok(Val::Ref(r))
        }
        (other, _) => Ok(opaque_of(other, &format!("[{k}]"))),
    }
}

fn index(k: &Json, len: usize) -> Result<usize> {
    let i = match k {
        Json::Number(n) => n.as_u64(),
        Json::String(s) => s.parse().ok(),
        _ => None,
    };
    match i {
        Some(i) if (i as usize) < len => Ok(i as usize),
        _ => err(format!("index {k} out of range for a list of {len}")),
    }
}

/// A value computed from `v` in a way a manifest cannot express.
pub fn opaque_of(v: &Val, what: &str) -> Val {
    match v {
        Val::Opaque { expr, refs } => Val::Opaque {
            expr: format!("{expr} {what}"),
            refs: refs.clone(),
        },
        other => Val::Opaque {
            expr: what.to_owned(),
            refs: other.refs(),
        },
    }
}

pub fn binary(op: BinaryOperator, l: &Json, r: &Json) -> Result<Json> {
    use BinaryOperator as B;
    let bools = || match (l, r) {
        (Json::Bool(a), Json::Bool(b)) => Ok((*a, *b)),
        _ => err(format!("{op:?} needs two bools, got {l} and {r}")),
    };
    Ok(match op {
        B::Eq => Json::Bool(loose_eq(l, r)),
        B::NotEq => Json::Bool(!loose_eq(l, r)),
        B::And => {
            let (a, b) = bools()?;
            Json::Bool(a && b)
        }
        B::Or => {
            let (a, b) = bools()?;
            Json::Bool(a || b)
        }
        B::Less => Json::Bool(to_f64(l)? < to_f64(r)?),
        B::LessEq => Json::Bool(to_f64(l)? <= to_f64(r)?),
        B::Greater => Json::Bool(to_f64(l)? > to_f64(r)?),
        B::GreaterEq => Json::Bool(to_f64(l)? >= to_f64(r)?),
        B::Plus => num(to_f64(l)? + to_f64(r)?),
        B::Minus => num(to_f64(l)? - to_f64(r)?),
        B::Mul => num(to_f64(l)? * to_f64(r)?),
        B::Div => {
            let d = to_f64(r)?;
            if d == 0.0 {
                return err("division by zero");
            }
            num(to_f64(l)? / d)
        }
        B::Mod => {
            let d = to_f64(r)?;
            if d == 0.0 {
                return err("modulo by zero");
            }
            num(to_f64(l)? % d)
        }
    })
}

/// Equality as Terraform sees it after conversion: `1 == "1"` is false, numbers compare by
/// value.
fn loose_eq(l: &Json, r: &Json) -> bool {
    match (l, r) {
        (Json::Number(a), Json::Number(b)) => a.as_f64() == b.as_f64(),
        _ => l == r,
    }
}

/// Iterates a collection: (key, value) pairs; list keys are indices.
pub fn entries(v: &Val) -> Result<Vec<(Json, Val)>> {
    Ok(match v {
        Val::Known(Json::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, x)| (Json::from(i), Val::Known(x.clone())))
            .collect(),
        Val::Known(Json::Object(m)) => m
            .iter()
            .map(|(k, x)| (Json::String(k.clone()), Val::Known(x.clone())))
            .collect(),
        Val::List(a) => a
            .iter()
            .enumerate()
            .map(|(i, x)| (Json::from(i), x.clone()))
            .collect(),
        Val::Object(m) => m
            .iter()
            .map(|(k, x)| (Json::String(k.clone()), x.clone()))
            .collect(),
        Val::Known(Json::Null) => Vec::new(),
        other => return err(format!("cannot iterate over {other:?}")),
    })
}

/// The references a value reads, for messages.
pub fn describe_refs(v: &Val) -> String {
    let refs: Vec<String> = v.refs().iter().map(Ref::address).collect();
    if refs.is_empty() {
        "values that are not known".to_owned()
    } else {
        refs.join(", ")
    }
}

/// The weight of one list member, object member or scalar, besides the bytes of its text: what
/// it costs to hold, roughly.
pub const NODE_WEIGHT: u64 = 32;

/// A value's weight (about the bytes it holds: [`NODE_WEIGHT`] per member plus its text) and
/// depth, walked without recursion so that no value is too deep to weigh.
pub fn weight(v: &Val) -> (u64, usize) {
    enum Item<'a> {
        V(&'a Val),
        J(&'a Json),
    }
    let mut stack = vec![(Item::V(v), 1usize)];
    let (mut weight, mut depth) = (0u64, 0usize);
    while let Some((item, d)) = stack.pop() {
        depth = depth.max(d);
        weight = weight.saturating_add(NODE_WEIGHT);
        match item {
            Item::J(Json::String(s)) => weight = weight.saturating_add(s.len() as u64),
            Item::J(Json::Array(a)) => stack.extend(a.iter().map(|j| (Item::J(j), d + 1))),
            Item::J(Json::Object(m)) => {
                for (k, j) in m {
                    weight = weight.saturating_add(k.len() as u64 + NODE_WEIGHT);
                    stack.push((Item::J(j), d + 1));
                }
            }
            Item::J(_) => {}
            Item::V(Val::Known(j)) => stack.push((Item::J(j), d)),
            Item::V(Val::List(items)) => stack.extend(items.iter().map(|v| (Item::V(v), d + 1))),
            Item::V(Val::Object(m)) => {
                for (k, v) in m {
                    weight = weight.saturating_add(k.len() as u64 + NODE_WEIGHT);
                    stack.push((Item::V(v), d + 1));
                }
            }
            Item::V(Val::Ref(r)) => stack.extend(r.path.iter().map(|j| (Item::J(j), d + 1))),
            Item::V(Val::Template(parts)) => {
                for p in parts {
                    match p {
                        Part::Text(s) => weight = weight.saturating_add(s.len() as u64),
                        Part::Ref(r) => {
                            stack.extend(r.path.iter().map(|j| (Item::J(j), d + 1)));
                        }
                    }
                }
            }
            Item::V(Val::Opaque { expr, refs }) => {
                weight = weight.saturating_add(expr.len() as u64);
                for r in refs {
                    weight = weight.saturating_add(NODE_WEIGHT);
                    stack.extend(r.path.iter().map(|j| (Item::J(j), d + 1)));
                }
            }
        }
    }
    (weight, depth)
}

//! A Terraform attribute path in the names of the Kubernetes fields a user wrote.

use kraken_codegen::names::SECRET_REF_SUFFIX;

use super::tree::{Level, Node};
use crate::{AttrPath, PathStep};

/// Where a path step leads.
#[derive(Clone, Copy)]
enum Pos<'a> {
    Object(&'a Level),
    Node(&'a Node),
}

impl<'a> Pos<'a> {
    fn of(node: &'a Node) -> Self {
        match node {
            Node::Object(level) => Pos::Object(level),
            other => Pos::Node(other),
        }
    }
}

/// `path` in Kubernetes names below `level`: `Ok` when the schema knows every step (or the
/// steps below a secret reference or a dynamic value, which are dropped or kept as they
/// are), `Err` with the unknown rest in Terraform names otherwise.
pub(super) fn render(
    level: &Level,
    path: &AttrPath,
    plain_sensitive: bool,
) -> Result<Vec<PathStep>, Vec<PathStep>> {
    let mut out = Vec::with_capacity(path.steps.len());
    let mut pos = Pos::Object(level);
    for (i, step) in path.steps.iter().enumerate() {
        let next = match (pos, step) {
            (Pos::Object(level), PathStep::Attr(tf_name) | PathStep::Key(tf_name)) => {
                level.by_tf(tf_name).map(|slot| match &slot.node {
                    Node::Secret { .. } if plain_sensitive => {
                        let name = slot.name.strip_suffix(SECRET_REF_SUFFIX);
                        (PathStep::Attr(name.unwrap_or(&slot.name).to_owned()), None)
                    }
                    Node::Secret { .. } => (PathStep::Attr(slot.name.clone()), None),
                    node => (PathStep::Attr(slot.name.clone()), Some(Pos::of(node))),
                })
            }
            (Pos::Node(Node::List(item)), PathStep::Index(_)) => {
                Some((step.clone(), Some(Pos::of(item))))
            }
            // A member of an object literal given to a map argument (`triggers = { a = x }`
            // in HCL) is one of its keys.
            (Pos::Node(Node::Map(item)), PathStep::Key(k) | PathStep::Attr(k)) => {
                Some((PathStep::Key(k.clone()), Some(Pos::of(item))))
            }
            (Pos::Node(Node::Any), _) => {
                out.extend(path.steps[i..].iter().cloned());
                return Ok(out);
            }
            _ => None,
        };
        match next {
            Some((step, Some(next))) => {
                out.push(step);
                pos = next;
            }
            // Below a secret reference there is nothing a user can point at.
            Some((step, None)) => {
                out.push(step);
                return Ok(out);
            }
            None => {
                out.extend(path.steps[i..].iter().cloned());
                return Err(out);
            }
        }
    }
    Ok(out)
}

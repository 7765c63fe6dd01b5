//! The compact tree a [`super::FieldMap`] walks: codegen's IR of one view, without
//! descriptions, plus what the IR leaves out and the walks need from the schema — which
//! fields are nested blocks (and what an absent one becomes), and whether a sensitive
//! argument's Secret holds text or JSON.

use std::collections::BTreeMap;

use kraken_codegen::ir::{self, Field, KindNames, ObjectIr, Shape};
use kraken_codegen::schema::{Attribute, Block, BlockNesting, NestedBlock, Schema};
use serde_json::{Map, Value as Json};

/// One object level: its fields in Kubernetes-name order.
#[derive(Debug, Clone, Default)]
pub(super) struct Level {
    pub(super) slots: Vec<Slot>,
}

#[derive(Debug, Clone)]
pub(super) struct Slot {
    /// The Kubernetes field name (`xSecretRef` for a sensitive argument).
    pub(super) name: String,
    pub(super) tf_name: String,
    pub(super) node: Node,
    /// For a nested block: the Terraform value of the block when it is absent.
    pub(super) absent: Option<Json>,
}

#[derive(Debug, Clone)]
pub(super) enum Node {
    /// A string, number or bool.
    Scalar,
    /// `dynamic` or a tuple: plain JSON keyed by Terraform names.
    Any,
    List(Box<Node>),
    Map(Box<Node>),
    Object(Level),
    /// A sensitive argument read from a Secret; `json` when its type is not primitive, so the
    /// Secret holds the value's JSON rather than its text.
    Secret {
        json: bool,
    },
}

impl Level {
    pub(super) fn by_name(&self, name: &str) -> Option<&Slot> {
        self.slots.iter().find(|s| s.name == name)
    }

    pub(super) fn by_tf(&self, tf_name: &str) -> Option<&Slot> {
        self.slots.iter().find(|s| s.tf_name == tf_name)
    }
}

/// Builds the spec and status views of a schema through codegen's IR.
pub(super) fn views(type_name: &str, schema: &Schema) -> (Level, Level) {
    let names = KindNames::new("kraken", type_name, false);
    let kind = ir::build(type_name, schema, names, false);
    let ctx = Ctx::block(&schema.block);
    (level(kind.for_provider, ctx), level(kind.at_provider, ctx))
}

/// The schema behind one IR object level: a block's attributes and nested block types, a
/// nested attribute type's attributes, or nothing (an object type).
#[derive(Debug, Clone, Copy, Default)]
struct Ctx<'a> {
    attributes: Option<&'a BTreeMap<String, Attribute>>,
    blocks: Option<&'a BTreeMap<String, NestedBlock>>,
}

impl<'a> Ctx<'a> {
    fn block(block: &'a Block) -> Self {
        Self {
            attributes: Some(&block.attributes),
            blocks: Some(&block.block_types),
        }
    }
}

fn level(object: ObjectIr, ctx: Ctx<'_>) -> Level {
    Level {
        slots: object.fields.into_iter().map(|f| slot(f, ctx)).collect(),
    }
}

fn slot(field: Field, ctx: Ctx<'_>) -> Slot {
    let block = ctx.blocks.and_then(|b| b.get(&field.tf_name));
    let attr = ctx.attributes.and_then(|a| a.get(&field.tf_name));
    let inner = match (block, attr) {
        (Some(nested), _) => Ctx::block(&nested.block),
        (None, Some(attr)) => Ctx {
            attributes: attr.nested_type.as_ref().map(|n| &n.attributes),
            blocks: None,
        },
        (None, None) => Ctx::default(),
    };
    let node = match field.node.shape {
        Shape::SecretRef => Node::Secret {
            json: attr.is_some_and(|a| !a.implied_type().is_primitive()),
        },
        shape => node(shape, inner),
    };
    let absent = block.and_then(|nested| absent_block(nested.nesting, &node));
    Slot {
        name: field.name,
        tf_name: field.tf_name,
        node,
        absent,
    }
}

fn node(shape: Shape, ctx: Ctx<'_>) -> Node {
    match shape {
        Shape::String | Shape::Number | Shape::Bool => Node::Scalar,
        Shape::Any => Node::Any,
        Shape::Array { items, .. } => Node::List(Box::new(node(items.shape, ctx))),
        Shape::Map(values) => Node::Map(Box::new(node(values.shape, ctx))),
        Shape::Object(object) => Node::Object(level(object, ctx)),
        Shape::SecretRef => Node::Secret { json: false },
    }
}

/// What Terraform configures for a nested block that is not written (configschema's
/// `Block.EmptyValue` as its decoder spec uses it): a group block is an object of null
/// attributes whose own nested blocks are absent in turn.
fn absent_block(nesting: BlockNesting, node: &Node) -> Option<Json> {
    match (nesting, node) {
        (BlockNesting::Single, _) => None,
        (BlockNesting::List | BlockNesting::Set, _) => Some(Json::Array(Vec::new())),
        (BlockNesting::Map, _) => Some(Json::Object(Map::new())),
        (BlockNesting::Group, Node::Object(level)) => Some(Json::Object(
            level
                .slots
                .iter()
                .filter_map(|s| Some((s.tf_name.clone(), s.absent.clone()?)))
                .collect(),
        )),
        (BlockNesting::Group, _) => None,
    }
}

//! The intermediate representation between a Terraform schema and a CRD.
//!
//! [`build`] decides everything that depends on Terraform semantics — which attributes are
//! arguments, which are sensitive, what is required, how a cty type or a nesting mode maps to
//! a shape, what each field is called — so that rendering ([`crate::openapi`],
//! [`crate::crd`]) is a mechanical walk that knows nothing about Terraform.
//!
//! Two views of one resource type are built from the same block:
//!
//! - the **spec** view (`spec.forProvider`): arguments (required, optional, optional +
//!   computed; never computed-only). A sensitive argument `x` becomes `xSecretRef`, a
//!   reference to a Secret key. Required arguments below the top level are required in their
//!   object; top-level ones are listed in [`KindIr::required`] for CEL (they may come from
//!   `valuesFrom`), and all top-level ones in [`KindIr::arguments`] for the CEL rule that
//!   refuses a value given both literally and through `valuesFrom`. List and set blocks keep
//!   their min/max items.
//! - the **status** view (`status.atProvider`): every attribute except sensitive and
//!   write-only ones (write-only values are never in state). Nothing is required and no item
//!   counts are enforced: status mirrors what the provider returned and must never be refused.

use std::collections::BTreeMap;

use crate::cty::Type;
use crate::names::{self, FieldNames, SECRET_REF_SUFFIX, field_names};
use crate::schema::{Attribute, Block, BlockNesting, NestedBlock, NestedObject, ObjectNesting};

/// The API names of one generated kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindNames {
    pub group: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub list_kind: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
}

/// Everything needed to render one CRD.
#[derive(Debug, Clone, PartialEq)]
pub struct KindIr {
    pub type_name: String,
    pub data_source: bool,
    pub names: KindNames,
    /// The resource's description (prefixed when deprecated).
    pub description: String,
    pub schema_version: i64,
    pub for_provider: ObjectIr,
    pub at_provider: ObjectIr,
    /// Top-level required arguments, enforced by CEL on `spec`.
    pub required: Vec<TopLevelArg>,
    /// Every top-level argument (every field of `forProvider`), for the CEL rule on `spec`
    /// that refuses a value given both literally and through `valuesFrom`.
    pub arguments: Vec<TopLevelArg>,
    /// Terraform paths of sensitive attributes (see [`sensitive_paths`]).
    pub sensitive_paths: Vec<String>,
    /// Kubernetes field path → Terraform name, for irregular names (see [`irregular_names`]).
    pub irregular_names: BTreeMap<String, String>,
}

/// An object's fields, ordered by Kubernetes name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectIr {
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The Kubernetes field name (with the `SecretRef` suffix for secret references).
    pub name: String,
    pub tf_name: String,
    pub node: Node,
    pub required: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Empty when there is nothing to say.
    pub description: String,
    pub shape: Shape,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    String,
    Number,
    Bool,
    /// Any JSON value: `dynamic` and tuple types.
    Any,
    Array {
        items: Box<Node>,
        /// Items are unique scalars (a Terraform set of primitives).
        set_of_scalars: bool,
        /// 0 means unbounded, as in Terraform.
        min_items: u64,
        max_items: u64,
    },
    Map(Box<Node>),
    Object(ObjectIr),
    /// A reference to a Secret key holding a sensitive argument.
    SecretRef,
}

/// A top-level argument: its field in `spec.forProvider` and its name in `valuesFrom`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopLevelArg {
    /// The field in `spec.forProvider` (`xSecretRef` for a sensitive argument).
    pub field: String,
    /// The argument's field name, as `valuesFrom[].path` names it.
    pub path: String,
    /// A `valuesFrom` entry for a path below this argument also counts (objects, lists, maps).
    pub accepts_subpaths: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Spec,
    Status,
}

/// Builds the IR of one resource or data source type.
pub fn build(
    type_name: &str,
    schema: &crate::schema::Schema,
    names: KindNames,
    data_source: bool,
) -> KindIr {
    let block = &schema.block;
    let for_provider = block_object(block, Side::Spec);
    let arguments: Vec<TopLevelArg> = for_provider.fields.iter().map(top_level_arg).collect();
    let required = for_provider
        .fields
        .iter()
        .zip(&arguments)
        .filter(|(f, _)| f.required)
        .map(|(_, arg)| arg.clone())
        .collect();
    KindIr {
        type_name: type_name.to_owned(),
        data_source,
        names,
        description: describe(&block.description, block.deprecated),
        schema_version: schema.version,
        at_provider: block_object(block, Side::Status),
        for_provider,
        required,
        arguments,
        sensitive_paths: sensitive_paths(block),
        irregular_names: irregular_names(block),
    }
}

/// How `valuesFrom` names a field of `forProvider`: a sensitive argument `x` by `x` rather
/// than `xSecretRef`, and anything but a scalar also by paths below it.
fn top_level_arg(f: &Field) -> TopLevelArg {
    TopLevelArg {
        field: f.name.clone(),
        path: f
            .name
            .strip_suffix(SECRET_REF_SUFFIX)
            .filter(|_| f.node.shape == Shape::SecretRef)
            .unwrap_or(&f.name)
            .to_owned(),
        accepts_subpaths: !matches!(
            f.node.shape,
            Shape::String | Shape::Number | Shape::Bool | Shape::SecretRef
        ),
    }
}

/// A provider description, prefixed with `Deprecated.` when the provider says so.
fn describe(description: &str, deprecated: bool) -> String {
    match (deprecated, description.trim()) {
        (false, d) => d.to_owned(),
        (true, "") => "Deprecated.".to_owned(),
        (true, d) => format!("Deprecated. {d}"),
    }
}

fn block_names(block: &Block) -> FieldNames {
    field_names(
        block
            .attributes
            .keys()
            .chain(block.block_types.keys())
            .map(String::as_str),
    )
}

fn block_object(block: &Block, side: Side) -> ObjectIr {
    let names = block_names(block);
    let mut fields = attribute_fields(&block.attributes, &names, side);
    for (tf_name, nested) in &block.block_types {
        let name = names.to_kube(tf_name).unwrap_or(tf_name).to_owned();
        fields.push(block_field(name, tf_name, nested, side));
    }
    fields.sort_by(|a, b| a.name.cmp(&b.name));
    ObjectIr { fields }
}

fn attribute_fields(
    attributes: &BTreeMap<String, Attribute>,
    names: &FieldNames,
    side: Side,
) -> Vec<Field> {
    let mut fields = Vec::new();
    for (tf_name, attr) in attributes {
        let name = names.to_kube(tf_name).unwrap_or(tf_name);
        let included = match side {
            Side::Spec => attr.is_argument(),
            Side::Status => !attr.sensitive && !attr.write_only,
        };
        if !included {
            continue;
        }
        let description = describe(&attr.description, attr.deprecated);
        let (name, node) = if attr.sensitive {
            let node = Node {
                description: secret_ref_description(&description, tf_name),
                shape: Shape::SecretRef,
            };
            (format!("{name}{SECRET_REF_SUFFIX}"), node)
        } else {
            let shape = attribute_shape(attr, side);
            (name.to_owned(), Node { description, shape })
        };
        fields.push(Field {
            name,
            tf_name: tf_name.clone(),
            node,
            required: side == Side::Spec && attr.required,
        });
    }
    fields
}

fn secret_ref_description(description: &str, tf_name: &str) -> String {
    let note = format!(
        "Sensitive: {tf_name} is read from this key of a Secret in the resource's namespace."
    );
    if description.is_empty() {
        note
    } else {
        format!("{description}\n\n{note}")
    }
}

fn attribute_shape(attr: &Attribute, side: Side) -> Shape {
    match (&attr.nested_type, &attr.ty) {
        (Some(nested), _) => nested_object_shape(nested, side),
        (None, Some(ty)) => type_shape(ty),
        // Malformed (neither type nor nested type): accept anything rather than fail.
        (None, None) => Shape::Any,
    }
}

fn nested_object_shape(nested: &NestedObject, side: Side) -> Shape {
    let names = field_names(nested.attributes.keys().map(String::as_str));
    let mut fields = attribute_fields(&nested.attributes, &names, side);
    fields.sort_by(|a, b| a.name.cmp(&b.name));
    let object = Node {
        description: String::new(),
        shape: Shape::Object(ObjectIr { fields }),
    };
    match nested.nesting {
        ObjectNesting::Single => object.shape,
        ObjectNesting::List | ObjectNesting::Set => array(object, false, 0, 0),
        ObjectNesting::Map => Shape::Map(Box::new(object)),
    }
}

fn array(items: Node, set_of_scalars: bool, min_items: u64, max_items: u64) -> Shape {
    Shape::Array {
        items: Box::new(items),
        set_of_scalars,
        min_items,
        max_items,
    }
}

/// The shape of a value of a cty type. Object attributes are never required: a missing one
/// is null, which every cty object attribute accepts.
pub fn type_shape(ty: &Type) -> Shape {
    let node = |t: &Type| Node {
        description: String::new(),
        shape: type_shape(t),
    };
    match ty {
        Type::String => Shape::String,
        Type::Number => Shape::Number,
        Type::Bool => Shape::Bool,
        Type::Dynamic | Type::Tuple(_) => Shape::Any,
        Type::List(e) => array(node(e), false, 0, 0),
        Type::Set(e) => array(node(e), e.is_primitive(), 0, 0),
        Type::Map(e) => Shape::Map(Box::new(node(e))),
        Type::Object(obj) => {
            let names = field_names(obj.attributes.keys().map(String::as_str));
            let mut fields: Vec<Field> = obj
                .attributes
                .iter()
                .map(|(tf_name, t)| Field {
                    name: names.to_kube(tf_name).unwrap_or(tf_name).to_owned(),
                    tf_name: tf_name.clone(),
                    node: node(t),
                    required: false,
                })
                .collect();
            fields.sort_by(|a, b| a.name.cmp(&b.name));
            Shape::Object(ObjectIr { fields })
        }
    }
}

fn block_field(name: String, tf_name: &str, nested: &NestedBlock, side: Side) -> Field {
    let object = Node {
        description: String::new(),
        shape: Shape::Object(block_object(&nested.block, side)),
    };
    let counts = |n: i64| match side {
        Side::Spec => u64::try_from(n).unwrap_or(0),
        Side::Status => 0,
    };
    let shape = match nested.nesting {
        BlockNesting::Single | BlockNesting::Group => object.shape,
        BlockNesting::List | BlockNesting::Set => array(
            object,
            false,
            counts(nested.min_items),
            counts(nested.max_items),
        ),
        BlockNesting::Map => Shape::Map(Box::new(object)),
    };
    // Terraform requires a block whose min_items is at least 1 (a single block with 1/1 is
    // how SDKs spell "required").
    let required = side == Side::Spec
        && nested.min_items >= 1
        && matches!(
            nested.nesting,
            BlockNesting::Single | BlockNesting::List | BlockNesting::Set
        );
    Field {
        name,
        tf_name: tf_name.to_owned(),
        node: Node {
            description: describe(&nested.block.description, nested.block.deprecated),
            shape,
        },
        required,
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Terraform paths of every sensitive attribute, arguments and computed alike (all of them
/// live in state, so all are published to a Secret rather than status). Path segments are
/// attribute and block names joined by `.`; list, set and map elements add no segment.
pub fn sensitive_paths(block: &Block) -> Vec<String> {
    let mut out = Vec::new();
    sensitive_in_block(block, "", &mut out);
    out.sort();
    out
}

fn sensitive_in_block(block: &Block, prefix: &str, out: &mut Vec<String>) {
    sensitive_in_attributes(&block.attributes, prefix, out);
    for (name, nested) in &block.block_types {
        sensitive_in_block(&nested.block, &join(prefix, name), out);
    }
}

fn sensitive_in_attributes(
    attributes: &BTreeMap<String, Attribute>,
    prefix: &str,
    out: &mut Vec<String>,
) {
    for (name, attr) in attributes {
        let path = join(prefix, name);
        if attr.sensitive {
            out.push(path);
        } else if let Some(nested) = &attr.nested_type {
            sensitive_in_attributes(&nested.attributes, &path, out);
        }
    }
}

/// Kubernetes field path → Terraform name for every irregular field name (see
/// [`crate::names`]) at any depth. Paths are Kubernetes field names joined by `.`, relative
/// to `forProvider` / `atProvider`; list, set and map elements add no segment, and a
/// sensitive argument is listed under its own name (not `…SecretRef`). Below `dynamic` and
/// tuple types values are plain JSON keyed by Terraform's names, so nothing is mapped there.
pub fn irregular_names(block: &Block) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    irregular_in_block(block, "", &mut out);
    out
}

fn record(names: &FieldNames, prefix: &str, out: &mut BTreeMap<String, String>) {
    for (field, tf_name) in names.irregular() {
        out.insert(join(prefix, field), tf_name.to_owned());
    }
}

fn irregular_in_block(block: &Block, prefix: &str, out: &mut BTreeMap<String, String>) {
    let names = block_names(block);
    record(&names, prefix, out);
    irregular_in_attributes(&block.attributes, &names, prefix, out);
    for (tf_name, nested) in &block.block_types {
        let path = join(prefix, names.to_kube(tf_name).unwrap_or(tf_name));
        irregular_in_block(&nested.block, &path, out);
    }
}

fn irregular_in_attributes(
    attributes: &BTreeMap<String, Attribute>,
    names: &FieldNames,
    prefix: &str,
    out: &mut BTreeMap<String, String>,
) {
    for (tf_name, attr) in attributes {
        let path = join(prefix, names.to_kube(tf_name).unwrap_or(tf_name));
        if let Some(nested) = &attr.nested_type {
            let inner = field_names(nested.attributes.keys().map(String::as_str));
            record(&inner, &path, out);
            irregular_in_attributes(&nested.attributes, &inner, &path, out);
        } else if let Some(ty) = &attr.ty {
            irregular_in_type(ty, &path, out);
        }
    }
}

fn irregular_in_type(ty: &Type, prefix: &str, out: &mut BTreeMap<String, String>) {
    match ty {
        Type::List(e) | Type::Set(e) | Type::Map(e) => irregular_in_type(e, prefix, out),
        Type::Object(obj) => {
            let names = field_names(obj.attributes.keys().map(String::as_str));
            record(&names, prefix, out);
            for (tf_name, t) in &obj.attributes {
                let path = join(prefix, names.to_kube(tf_name).unwrap_or(tf_name));
                irregular_in_type(t, &path, out);
            }
        }
        Type::Bool | Type::Number | Type::String | Type::Dynamic | Type::Tuple(_) => {}
    }
}

/// Whether a name is a DNS-1035 label, as the API server requires of plural, singular,
/// lowercased kind, short names and categories.
pub fn is_dns1035_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[bytes.len() - 1] != b'-'
}

/// What a data source kind's name starts with: `aws_ami` is served as `DataAmi` in
/// `data.aws.tf.kraken.dev`, beside the resource kind `Ami` in `aws.tf.kraken.dev`.
pub const DATA_KIND_PREFIX: &str = "Data";

impl KindNames {
    /// The names for a resource (or, with `data_source`, a data source) type.
    pub fn new(provider_type: &str, type_name: &str, data_source: bool) -> Self {
        let kind = names::kind_for(provider_type, type_name);
        let kind = if data_source {
            format!("{DATA_KIND_PREFIX}{kind}")
        } else {
            kind
        };
        Self::with_kind(provider_type, data_source, kind)
    }

    /// The names for a type served under `kind`.
    pub fn with_kind(provider_type: &str, data_source: bool, kind: String) -> Self {
        let plural = names::plural_for(&kind);
        let base_group = crate::api_group(provider_type);
        let (group, short) = if data_source {
            (
                format!("data.{base_group}"),
                format!("{provider_type}{kind}"),
            )
        } else {
            (base_group, format!("{provider_type}{kind}"))
        };
        let short = short.to_ascii_lowercase();
        let categories = ["kraken".to_owned(), format!("kraken-{provider_type}")];
        Self {
            group,
            singular: kind.to_ascii_lowercase(),
            list_kind: format!("{kind}List"),
            kind,
            plural,
            // Short names are a convenience: one the API server would refuse is left out.
            short_names: Some(short)
                .filter(|s| is_dns1035_label(s))
                .into_iter()
                .collect(),
            categories: categories
                .into_iter()
                .filter(|c| is_dns1035_label(c))
                .collect(),
        }
    }

    /// Why the API server would refuse these names, if it would.
    pub fn check(&self) -> Result<(), String> {
        for (what, name) in [
            ("plural", self.plural.as_str()),
            ("singular", self.singular.as_str()),
            ("kind", &self.kind.to_ascii_lowercase()),
            ("list kind", &self.list_kind.to_ascii_lowercase()),
        ] {
            if !is_dns1035_label(name) {
                return Err(format!(
                    "{what} {name:?} is not a valid DNS-1035 label (at most 63 lowercase letters, digits and '-', starting with a letter)"
                ));
            }
        }
        let crd_name = format!("{}.{}", self.plural, self.group);
        if crd_name.len() > 253 {
            return Err(format!(
                "crd name {crd_name:?} is longer than 253 characters"
            ));
        }
        Ok(())
    }
}

//! Provider schemas in Kraken's own domain types.
//!
//! They live in codegen because generating CRDs is their main use and codegen must not depend
//! on the bridge; the bridge re-exports them as `kraken_bridge::provider::schema`.
//!
//! The v5 and v6 adapters translate `GetProviderSchema` answers into these types so that nothing
//! above the plugin host sees prost messages. Maps are `BTreeMap`s so every rendering (the
//! `kraken schema` JSON, generated CRDs) is deterministic.

use std::collections::BTreeMap;

use crate::cty::{ObjectType, Type};

/// Everything a provider declares about itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderSchema {
    /// The schema of the `provider` configuration block.
    pub provider: Schema,
    /// The schema of the `provider_meta` block, when the provider declares one.
    pub provider_meta: Option<Schema>,
    pub resources: BTreeMap<String, Schema>,
    pub data_sources: BTreeMap<String, Schema>,
    pub ephemeral_resources: BTreeMap<String, Schema>,
    pub list_resources: BTreeMap<String, Schema>,
    pub functions: BTreeMap<String, Function>,
    pub capabilities: ServerCapabilities,
}

impl ProviderSchema {
    /// Drops every description (of blocks, attributes, functions and parameters). They are
    /// for people reading CRDs and `kubectl explain`; a process serving resources keeps the
    /// schema for its whole life and needs none of them (about half of hashicorp/aws's).
    pub fn strip_docs(&mut self) {
        let schemas = [
            &mut self.resources,
            &mut self.data_sources,
            &mut self.ephemeral_resources,
            &mut self.list_resources,
        ];
        for s in schemas.into_iter().flat_map(|m| m.values_mut()) {
            s.strip_docs();
        }
        self.provider.block.strip_docs();
        if let Some(meta) = &mut self.provider_meta {
            meta.block.strip_docs();
        }
        for f in self.functions.values_mut() {
            f.description = String::new();
            f.summary = String::new();
            for p in f
                .parameters
                .iter_mut()
                .chain(f.variadic_parameter.iter_mut())
            {
                p.description = String::new();
            }
        }
    }
}

/// Optional protocol features a provider announces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerCapabilities {
    /// The provider wants `PlanResourceChange` for destroy plans too.
    pub plan_destroy: bool,
    /// The provider may be used without calling `GetProviderSchema` first.
    pub get_provider_schema_optional: bool,
    pub move_resource_state: bool,
}

/// A versioned block schema: the unit that resources, data sources and the provider block use.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schema {
    /// The resource's state schema version (`UpgradeResourceState` moves state to it).
    pub version: i64,
    pub block: Block,
}

impl Schema {
    /// Drop every description, keeping everything a value's encoding depends on.
    pub fn strip_docs(&mut self) {
        self.block.strip_docs();
    }
}

/// How a description is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StringKind {
    #[default]
    Plain,
    Markdown,
}

impl StringKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StringKind::Plain => "plain",
            StringKind::Markdown => "markdown",
        }
    }
}

/// A configuration block: attributes and nested blocks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Block {
    pub attributes: BTreeMap<String, Attribute>,
    pub block_types: BTreeMap<String, NestedBlock>,
    pub description: String,
    pub description_kind: StringKind,
    pub deprecated: bool,
}

/// One attribute. Exactly one of `ty` and `nested_type` is set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attribute {
    pub ty: Option<Type>,
    /// Protocol 6 nested attributes (an object type with its own attribute schemas).
    pub nested_type: Option<NestedObject>,
    pub description: String,
    pub description_kind: StringKind,
    pub required: bool,
    pub optional: bool,
    pub computed: bool,
    pub sensitive: bool,
    pub deprecated: bool,
    pub write_only: bool,
}

impl Block {
    fn strip_docs(&mut self) {
        self.description = String::new();
        for a in self.attributes.values_mut() {
            a.strip_docs();
        }
        for b in self.block_types.values_mut() {
            b.block.strip_docs();
        }
    }
}

impl Attribute {
    fn strip_docs(&mut self) {
        self.description = String::new();
        if let Some(nested) = &mut self.nested_type {
            for a in nested.attributes.values_mut() {
                a.strip_docs();
            }
        }
    }

    /// An optional argument of type `ty`, everything else default: the common case in tests
    /// and hand-built schemas.
    pub fn optional_of(ty: Type) -> Self {
        Self {
            ty: Some(ty),
            optional: true,
            ..Default::default()
        }
    }

    /// Whether a user may set this attribute (required or optional).
    pub fn is_argument(&self) -> bool {
        self.required || self.optional
    }
}

/// How a nested attribute's object repeats (protocol 6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ObjectNesting {
    #[default]
    Single,
    List,
    Set,
    Map,
}

impl ObjectNesting {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectNesting::Single => "single",
            ObjectNesting::List => "list",
            ObjectNesting::Set => "set",
            ObjectNesting::Map => "map",
        }
    }
}

/// The object type of a protocol 6 nested attribute.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NestedObject {
    pub attributes: BTreeMap<String, Attribute>,
    pub nesting: ObjectNesting,
}

/// How a nested block repeats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BlockNesting {
    #[default]
    Single,
    List,
    Set,
    Map,
    /// Like `Single`, but never null: absent means "all attributes null".
    Group,
}

impl BlockNesting {
    pub fn as_str(self) -> &'static str {
        match self {
            BlockNesting::Single => "single",
            BlockNesting::List => "list",
            BlockNesting::Set => "set",
            BlockNesting::Map => "map",
            BlockNesting::Group => "group",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NestedBlock {
    pub block: Block,
    pub nesting: BlockNesting,
    pub min_items: i64,
    pub max_items: i64,
}

/// A provider-defined function's signature.
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    pub parameters: Vec<Parameter>,
    pub variadic_parameter: Option<Parameter>,
    pub return_type: Type,
    pub summary: String,
    pub description: String,
    pub description_kind: StringKind,
    pub deprecation_message: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Parameter {
    pub name: String,
    pub ty: Type,
    pub allow_null_value: bool,
    pub allow_unknown_values: bool,
    pub description: String,
    pub description_kind: StringKind,
}

impl Block {
    /// The cty type of a value conforming to this block, as Terraform derives it
    /// (`configschema.Block.ImpliedType`): optional-attribute markers are dropped, and list or
    /// map nesting that contains dynamic types becomes `dynamic` because its element types may
    /// differ.
    pub fn implied_type(&self) -> Type {
        let mut attributes = BTreeMap::new();
        for (name, attr) in &self.attributes {
            attributes.insert(name.clone(), attr.implied_type());
        }
        for (name, nested) in &self.block_types {
            let child = nested.block.implied_type();
            let ty = match nested.nesting {
                BlockNesting::Single | BlockNesting::Group => child,
                BlockNesting::List if has_dynamic_types(&child) => Type::Dynamic,
                BlockNesting::List => Type::List(Box::new(child)),
                BlockNesting::Map if has_dynamic_types(&child) => Type::Dynamic,
                BlockNesting::Map => Type::Map(Box::new(child)),
                BlockNesting::Set => Type::Set(Box::new(child)),
            };
            attributes.insert(name.clone(), ty);
        }
        Type::Object(ObjectType {
            attributes,
            optional: Default::default(),
        })
    }
}

impl Attribute {
    /// The attribute's cty type, derived from `nested_type` for protocol 6 nested attributes.
    pub fn implied_type(&self) -> Type {
        match (&self.ty, &self.nested_type) {
            (_, Some(nested)) => nested.implied_type(),
            (Some(ty), None) => ty.clone(),
            // A schema with neither is malformed; dynamic accepts whatever the provider sends.
            (None, None) => Type::Dynamic,
        }
    }
}

impl NestedObject {
    pub fn implied_type(&self) -> Type {
        let attributes = self
            .attributes
            .iter()
            .map(|(name, attr)| (name.clone(), attr.implied_type()))
            .collect();
        let object = Type::Object(ObjectType {
            attributes,
            optional: Default::default(),
        });
        match self.nesting {
            ObjectNesting::Single => object,
            ObjectNesting::List if has_dynamic_types(&object) => Type::Dynamic,
            ObjectNesting::List => Type::List(Box::new(object)),
            ObjectNesting::Map if has_dynamic_types(&object) => Type::Dynamic,
            ObjectNesting::Map => Type::Map(Box::new(object)),
            ObjectNesting::Set => Type::Set(Box::new(object)),
        }
    }
}

/// Whether a type contains `dynamic` anywhere (cty's `HasDynamicTypes`).
pub fn has_dynamic_types(ty: &Type) -> bool {
    match ty {
        Type::Dynamic => true,
        Type::Bool | Type::Number | Type::String => false,
        Type::List(elem) | Type::Set(elem) | Type::Map(elem) => has_dynamic_types(elem),
        Type::Object(obj) => obj.attributes.values().any(has_dynamic_types),
        Type::Tuple(elems) => elems.iter().any(has_dynamic_types),
    }
}

impl ProviderSchema {
    /// The schema of a managed resource type, or `None` if the provider has no such type.
    pub fn resource(&self, type_name: &str) -> Option<&Schema> {
        self.resources.get(type_name)
    }

    pub fn data_source(&self, type_name: &str) -> Option<&Schema> {
        self.data_sources.get(type_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: Type) -> Attribute {
        Attribute::optional_of(ty)
    }

    #[test]
    fn implied_type_of_blocks_and_nested_attributes() {
        let mut inner = Block::default();
        inner.attributes.insert("port".into(), attr(Type::Number));
        let mut block = Block::default();
        block.attributes.insert("name".into(), attr(Type::String));
        block.block_types.insert(
            "rule".into(),
            NestedBlock {
                block: inner.clone(),
                nesting: BlockNesting::List,
                ..Default::default()
            },
        );
        block.attributes.insert(
            "settings".into(),
            Attribute {
                nested_type: Some(NestedObject {
                    attributes: inner.attributes.clone(),
                    nesting: ObjectNesting::Set,
                }),
                optional: true,
                ..Default::default()
            },
        );
        let Type::Object(obj) = block.implied_type() else {
            panic!("block must imply an object type");
        };
        assert_eq!(obj.attributes["name"], Type::String);
        let port_object = inner.implied_type();
        assert_eq!(
            obj.attributes["rule"],
            Type::List(Box::new(port_object.clone()))
        );
        assert_eq!(obj.attributes["settings"], Type::Set(Box::new(port_object)));
    }

    #[test]
    fn dynamic_list_blocks_become_dynamic() {
        let mut inner = Block::default();
        inner.attributes.insert("any".into(), attr(Type::Dynamic));
        let mut block = Block::default();
        block.block_types.insert(
            "item".into(),
            NestedBlock {
                block: inner,
                nesting: BlockNesting::List,
                ..Default::default()
            },
        );
        let Type::Object(obj) = block.implied_type() else {
            panic!("block must imply an object type");
        };
        assert_eq!(obj.attributes["item"], Type::Dynamic);
    }
}

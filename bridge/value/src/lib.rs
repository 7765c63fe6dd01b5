//! Terraform values and types, and their wire encodings — protocol-neutral.
//!
//! * [`Type`] / [`Value`]: cty's type system and values (including unknowns with their
//!   refinements, and arbitrary-precision [`Number`]s).
//! * [`msgpack`]: the plugin protocol's `DynamicValue.msgpack` encoding.
//! * [`json`]: cty's JSON value encoding (`RawState.json`, persisted state).
//! * [`kube`]: conversion from/to the JSON of a Kubernetes custom resource.
//! * [`AttrPath`]: paths into values, used by every error and by provider diagnostics.
//!
//! # Dynamic values
//!
//! At a position typed [`Type::Dynamic`] the wire carries the value's concrete type
//! alongside the value. A [`Value`] keeps list/set/map/object/tuple distinct, so for most
//! values that type is *implied* by the value's shape ([`Value::implied_type`]): encoders
//! infer it, and decoders return the plain value. Where the shape cannot say the type —
//! a typed null (`null` of `string`), an unknown of a known type, an empty list of
//! strings, an object whose attribute is null — decoders wrap the value in
//! [`Value::Typed`], and encoders write the wrapped type back. Decoders produce `Typed`
//! exactly when the implied type differs from the wire type, so both `decode ∘ encode`
//! and `encode ∘ decode` are the identity.

pub mod fields;
pub mod json;
mod json_text;
pub mod kube;
pub mod msgpack;
mod number;
mod path;
#[cfg(test)]
mod proptests;

use std::collections::BTreeMap;

pub use kraken_codegen::cty::{ObjectType, Type, TypeError};
pub use number::{Number, NumberError};
pub use path::{AttrPath, PathStep};

/// A Terraform value. Structural equality: sets compare in element order.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A (typed-by-position) null.
    Null,
    /// A value not known until apply, possibly with cty refinements.
    Unknown(Refinements),
    Bool(bool),
    Number(Number),
    String(String),
    List(Vec<Value>),
    /// Elements in wire order; uniqueness is the provider's business.
    Set(Vec<Value>),
    Map(BTreeMap<String, Value>),
    /// Decoded objects hold every attribute of their type (absent ones as `Null`).
    Object(BTreeMap<String, Value>),
    Tuple(Vec<Value>),
    /// A value at a dynamic position whose concrete type its shape does not imply; see
    /// the module docs. Transparent at positions with a concrete type.
    Typed(Type, Box<Value>),
}

/// What is known about an unknown value (cty "refinements"). The default is a plain
/// unknown. Each field is kept as cty keeps it so re-encoding preserves the meaning;
/// refinements that do not apply to a position's type are not encoded there.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Refinements {
    /// The value will not be null.
    pub not_null: bool,
    /// A known prefix of a string value (empty: none known).
    pub string_prefix: String,
    /// Lower bound of a number value.
    pub number_lower: Option<NumberBound>,
    /// Upper bound of a number value.
    pub number_upper: Option<NumberBound>,
    /// Minimum length of a collection value (0: none known).
    pub length_lower: u64,
    /// Maximum length of a collection value.
    pub length_upper: Option<u64>,
}

/// One end of a number range refinement.
#[derive(Debug, Clone, PartialEq)]
pub struct NumberBound {
    /// The bound; may be infinite (cty writes `-Inf`/`+Inf` for "unbounded").
    pub value: Number,
    pub inclusive: bool,
}

impl Refinements {
    /// Whether this is a plain unknown.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Only the refinements cty can express for a value of type `ty`.
    pub fn for_type(&self, ty: &Type) -> Self {
        let mut out = Self {
            not_null: self.not_null,
            ..Self::default()
        };
        match ty {
            Type::String => out.string_prefix.clone_from(&self.string_prefix),
            Type::Number => {
                out.number_lower.clone_from(&self.number_lower);
                out.number_upper.clone_from(&self.number_upper);
            }
            Type::List(_) | Type::Set(_) | Type::Map(_) => {
                out.length_lower = self.length_lower;
                out.length_upper = self.length_upper;
            }
            // cty cannot refine a dynamic unknown at all, not even its nullness.
            Type::Dynamic => out.not_null = false,
            _ => {}
        }
        out
    }
}

impl Value {
    /// A plain unknown.
    pub fn unknown() -> Self {
        Self::Unknown(Refinements::default())
    }

    /// A string value.
    pub fn string(s: impl Into<String>) -> Self {
        Self::String(s.into())
    }

    /// A number value from an integer.
    pub fn int(n: i64) -> Self {
        Self::Number(Number::from_i64(n))
    }

    /// An object value from attribute pairs.
    pub fn object<K: Into<String>>(attrs: impl IntoIterator<Item = (K, Value)>) -> Self {
        Self::Object(attrs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// The value with any [`Value::Typed`] wrappers removed.
    pub fn untyped(&self) -> &Value {
        match self {
            Self::Typed(_, inner) => inner.untyped(),
            other => other,
        }
    }

    /// The name of the value's kind, for mismatch messages (`string`, `list`, …).
    pub fn kind_name(&self) -> &'static str {
        match self.untyped() {
            Self::Null => "null",
            Self::Unknown(_) => "unknown",
            Self::Bool(_) => "bool",
            Self::Number(_) => "number",
            Self::String(_) => "string",
            Self::List(_) => "list",
            Self::Set(_) => "set",
            Self::Map(_) => "map",
            Self::Object(_) => "object",
            Self::Tuple(_) => "tuple",
            // untyped() never returns Typed; named for completeness.
            Self::Typed(..) => "typed value",
        }
    }

    /// Whether the value itself is known (its parts may not be).
    pub fn is_known(&self) -> bool {
        !matches!(self.untyped(), Self::Unknown(_))
    }

    /// Whether the value and everything inside it is known.
    pub fn is_wholly_known(&self) -> bool {
        match self.untyped() {
            Self::Unknown(_) => false,
            Self::List(items) | Self::Set(items) | Self::Tuple(items) => {
                items.iter().all(Self::is_wholly_known)
            }
            Self::Map(items) | Self::Object(items) => items.values().all(Self::is_wholly_known),
            _ => true,
        }
    }

    /// Whether the value is null.
    pub fn is_null(&self) -> bool {
        matches!(self.untyped(), Self::Null)
    }

    /// An attribute of an object value (`None` if not an object or no such attribute).
    pub fn get(&self, attr: &str) -> Option<&Value> {
        match self.untyped() {
            Self::Object(attrs) => attrs.get(attr),
            _ => None,
        }
    }

    /// The type this value's shape implies — what an encoder writes for it at a dynamic
    /// position. Nulls and unknowns imply `dynamic`; collections unify their element
    /// types (an empty list is `list(dynamic)`); a [`Value::Typed`] implies its type.
    /// `None` if collection elements have irreconcilable types.
    pub fn implied_type(&self) -> Option<Type> {
        Some(match self {
            Self::Null | Self::Unknown(_) => Type::Dynamic,
            Self::Bool(_) => Type::Bool,
            Self::Number(_) => Type::Number,
            Self::String(_) => Type::String,
            Self::List(items) => Type::list(unified_type(items.iter())?),
            Self::Set(items) => Type::set(unified_type(items.iter())?),
            Self::Map(items) => Type::map(unified_type(items.values())?),
            Self::Object(attrs) => {
                let attrs = attrs
                    .iter()
                    .map(|(k, v)| Some((k.clone(), v.implied_type()?)));
                Type::Object(ObjectType::new(attrs.collect::<Option<Vec<_>>>()?))
            }
            Self::Tuple(items) => Type::Tuple(
                items
                    .iter()
                    .map(Self::implied_type)
                    .collect::<Option<_>>()?,
            ),
            Self::Typed(ty, _) => ty.clone(),
        })
    }

    /// Wraps a value decoded at a dynamic position with wire type `ty` in
    /// [`Value::Typed`] iff its shape does not imply `ty` (the canonical form decoders
    /// produce). A wire type of `dynamic` itself (never written by cty) is always kept.
    /// Use it to place a value of a known type at a dynamic position.
    pub fn with_dynamic_type(self, ty: Type) -> Value {
        let implied = match self {
            Self::Typed(..) => None,
            _ if ty == Type::Dynamic => None,
            _ => self.implied_type(),
        };
        if implied.as_ref() != Some(&ty) {
            Self::Typed(ty, Box::new(self))
        } else {
            self
        }
    }
}

fn unified_type<'a>(mut items: impl Iterator<Item = &'a Value>) -> Option<Type> {
    let mut ty = Type::Dynamic;
    items.try_for_each(|item| {
        ty = unify(ty.clone(), item.implied_type()?)?;
        Some(())
    })?;
    Some(ty)
}

/// The common type of two implied types, where `dynamic` (from nulls and unknowns) gives
/// way to anything.
fn unify(a: Type, b: Type) -> Option<Type> {
    match (a, b) {
        (Type::Dynamic, other) | (other, Type::Dynamic) => Some(other),
        (Type::List(a), Type::List(b)) => Some(Type::list(unify(*a, *b)?)),
        (Type::Set(a), Type::Set(b)) => Some(Type::set(unify(*a, *b)?)),
        (Type::Map(a), Type::Map(b)) => Some(Type::map(unify(*a, *b)?)),
        (Type::Tuple(a), Type::Tuple(b)) if a.len() == b.len() => a
            .into_iter()
            .zip(b)
            .map(|(a, b)| unify(a, b))
            .collect::<Option<_>>()
            .map(Type::Tuple),
        (Type::Object(a), Type::Object(b)) if a.attributes.keys().eq(b.attributes.keys()) => {
            let attrs = a
                .attributes
                .into_iter()
                .zip(b.attributes)
                .map(|((k, a), (_, b))| Some((k, unify(a, b)?)));
            Some(Type::Object(ObjectType::new(
                attrs.collect::<Option<Vec<_>>>()?,
            )))
        }
        (a, b) => (a == b).then_some(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knownness_helpers() {
        let v = Value::object([
            ("a", Value::List(vec![Value::unknown()])),
            ("b", Value::Null),
        ]);
        assert!(v.is_known());
        assert!(!v.is_wholly_known());
        assert!(v.get("b").is_some_and(Value::is_null));
        assert!(v.get("c").is_none());
        let typed = Value::Typed(Type::String, Box::new(Value::unknown()));
        assert!(!typed.is_known());
        assert!(Value::Typed(Type::String, Box::new(Value::Null)).is_null());
    }

    #[test]
    fn implied_types_unify_nulls_and_unknowns_away() {
        let v = Value::List(vec![
            Value::object([("a", Value::Null)]),
            Value::object([("a", Value::string("x"))]),
        ]);
        assert_eq!(
            v.implied_type(),
            Some(Type::list(Type::object([("a", Type::String)])))
        );
        assert_eq!(
            Value::Map(BTreeMap::new()).implied_type(),
            Some(Type::map(Type::Dynamic))
        );
        let mixed = Value::List(vec![Value::int(1), Value::string("x")]);
        assert_eq!(mixed.implied_type(), None);
        let tuple = Value::Tuple(vec![Value::int(1), Value::string("x")]);
        assert_eq!(
            tuple.implied_type(),
            Some(Type::Tuple(vec![Type::Number, Type::String]))
        );
    }

    #[test]
    fn dynamic_wrapping_is_canonical() {
        assert_eq!(
            Value::string("x").with_dynamic_type(Type::String),
            Value::string("x")
        );
        assert_eq!(
            Value::Null.with_dynamic_type(Type::String),
            Value::Typed(Type::String, Box::new(Value::Null))
        );
        let empty = Value::List(vec![]);
        assert_eq!(
            empty.clone().with_dynamic_type(Type::list(Type::Dynamic)),
            empty
        );
        assert!(matches!(
            empty.with_dynamic_type(Type::list(Type::String)),
            Value::Typed(..)
        ));
    }

    #[test]
    fn refinements_for_type_keep_only_applicable_ones() {
        let r = Refinements {
            not_null: true,
            string_prefix: "ab".into(),
            length_lower: 1,
            ..Refinements::default()
        };
        assert_eq!(r.for_type(&Type::String).string_prefix, "ab");
        assert_eq!(r.for_type(&Type::Number).string_prefix, "");
        assert_eq!(r.for_type(&Type::list(Type::Bool)).length_lower, 1);
        assert!(r.for_type(&Type::Dynamic).is_empty());
        assert!(r.for_type(&Type::Bool).not_null);
    }
}

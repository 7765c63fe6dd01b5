//! Value → msgpack, following cty's `msgpack.Marshal`.

use std::collections::BTreeMap;

use super::write;
use crate::path::{LocateExt, Located};
use crate::{Number, NumberBound, ObjectType, PathStep, Refinements, Type, Value};

/// Refinement map keys (cty `msgpack/unknown.go`).
pub(super) const KEY_NULLNESS: i64 = 1;
pub(super) const KEY_STRING_PREFIX: i64 = 2;
pub(super) const KEY_NUMBER_MIN: i64 = 3;
pub(super) const KEY_NUMBER_MAX: i64 = 4;
pub(super) const KEY_LENGTH_MIN: i64 = 5;
pub(super) const KEY_LENGTH_MAX: i64 = 6;

type Result<T = ()> = std::result::Result<T, Located>;

/// Encodes `value` at a position of type `ty` into `out`.
pub(super) fn encode_into(out: &mut Vec<u8>, value: &Value, ty: &Type) -> Result {
    Encoder {
        out,
        type_json: String::new(),
    }
    .value(value, ty)
}

/// A rough upper estimate of the encoded size, so the output buffer is allocated once
/// for typical values instead of doubling its way up.
pub(super) fn size_hint(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) => 1,
        Value::Unknown(_) => 3,
        Value::Number(n) => 9.max(n.as_str().len() + 3),
        Value::String(s) => s.len() + 5,
        Value::List(items) | Value::Set(items) | Value::Tuple(items) => {
            5 + items.iter().map(size_hint).sum::<usize>()
        }
        Value::Map(items) | Value::Object(items) => {
            5 + items
                .iter()
                .map(|(k, v)| k.len() + 5 + size_hint(v))
                .sum::<usize>()
        }
        Value::Typed(_, inner) => 32 + size_hint(inner),
    }
}

struct Encoder<'a> {
    out: &'a mut Vec<u8>,
    /// Reused scratch space for the type JSON of dynamic values.
    type_json: String,
}

fn len32(len: usize) -> Result<u32> {
    u32::try_from(len).map_err(|_| Located::new("value too large for msgpack"))
}

fn index_step(i: usize) -> PathStep {
    PathStep::Index(i64::try_from(i).unwrap_or(i64::MAX))
}

impl Encoder<'_> {
    fn value(&mut self, value: &Value, ty: &Type) -> Result {
        if *ty == Type::Dynamic {
            return self.dynamic(value);
        }
        match value {
            // A concrete position already says the type; the annotation adds nothing.
            Value::Typed(_, inner) => self.value(inner, ty),
            Value::Null => {
                write::nil(self.out);
                Ok(())
            }
            Value::Unknown(refinements) => self.unknown(&refinements.for_type(ty)),
            _ => self.known(value, ty),
        }
    }

    /// A dynamic position: null and wholly-unknown are written bare, anything else as
    /// `[type JSON, value]`.
    fn dynamic(&mut self, value: &Value) -> Result {
        match value {
            Value::Null => write::nil(self.out),
            // cty cannot refine a dynamic unknown, so refinements are dropped here.
            Value::Unknown(_) => self.out.extend_from_slice(&write::UNKNOWN),
            Value::Typed(ty, inner) => return self.wrapped(ty, inner),
            _ => {
                let ty = value.implied_type().ok_or_else(|| {
                    Located::new(
                        "cannot infer a type for dynamic value: elements have different types",
                    )
                })?;
                return self.wrapped(&ty, value);
            }
        }
        Ok(())
    }

    fn wrapped(&mut self, ty: &Type, value: &Value) -> Result {
        write::array_header(self.out, 2);
        self.type_json.clear();
        ty.write_json(&mut self.type_json);
        write::bin_header(self.out, len32(self.type_json.len())?);
        self.out.extend_from_slice(self.type_json.as_bytes());
        self.value(value, ty)
    }

    fn known(&mut self, value: &Value, ty: &Type) -> Result {
        match (value, ty) {
            (Value::Bool(b), Type::Bool) => write::boolean(self.out, *b),
            (Value::Number(n), Type::Number) => number(self.out, n),
            (Value::String(s), Type::String) => self.str(s)?,
            (Value::List(items), Type::List(ety)) | (Value::Set(items), Type::Set(ety)) => {
                write::array_header(self.out, len32(items.len())?);
                for (i, item) in items.iter().enumerate() {
                    self.value(item, ety).at(|| index_step(i))?;
                }
            }
            (Value::Tuple(items), Type::Tuple(etys)) => {
                if items.len() != etys.len() {
                    let msg = format!(
                        "expected tuple of {} elements, found {}",
                        etys.len(),
                        items.len()
                    );
                    return Err(Located::new(msg));
                }
                write::array_header(self.out, len32(items.len())?);
                for (i, (item, ety)) in items.iter().zip(etys).enumerate() {
                    self.value(item, ety).at(|| index_step(i))?;
                }
            }
            (Value::Map(items), Type::Map(ety)) => {
                write::map_header(self.out, len32(items.len())?);
                for (key, item) in items {
                    self.str(key)?;
                    self.value(item, ety).at(|| PathStep::Key(key.clone()))?;
                }
            }
            (Value::Object(attrs), Type::Object(oty)) => self.object(attrs, oty)?,
            _ => {
                return Err(Located::new(format!(
                    "expected {ty}, found {}",
                    value.kind_name()
                )));
            }
        }
        Ok(())
    }

    fn str(&mut self, s: &str) -> Result {
        write::str_header(self.out, len32(s.len())?);
        self.out.extend_from_slice(s.as_bytes());
        Ok(())
    }

    /// Every attribute of the type, sorted by name, absent ones as nil.
    fn object(&mut self, attrs: &BTreeMap<String, Value>, oty: &ObjectType) -> Result {
        if let Some(extra) = attrs.keys().find(|k| !oty.attributes.contains_key(*k)) {
            return Err(Located::new("unsupported attribute").at(PathStep::Attr(extra.clone())));
        }
        write::map_header(self.out, len32(oty.attributes.len())?);
        for (name, aty) in &oty.attributes {
            self.str(name)?;
            match attrs.get(name) {
                Some(item) => self.value(item, aty).at(|| PathStep::Attr(name.clone()))?,
                None => write::nil(self.out),
            }
        }
        Ok(())
    }

    /// A plain unknown is cty's 3-byte fixext; a refined one is ext 12 whose payload is a
    /// map from refinement key to value, keys in cty's order.
    fn unknown(&mut self, refinements: &Refinements) -> Result {
        if refinements.is_empty() {
            self.out.extend_from_slice(&write::UNKNOWN);
            return Ok(());
        }
        let mut payload = Vec::with_capacity(32);
        let mut entries = 0u32;
        let mut entry = |payload: &mut Vec<u8>, key: i64| {
            entries += 1;
            write::int(payload, key);
        };
        if refinements.not_null {
            entry(&mut payload, KEY_NULLNESS);
            write::boolean(&mut payload, false);
        }
        if let Some(bound) = &refinements.number_lower {
            entry(&mut payload, KEY_NUMBER_MIN);
            number_bound(&mut payload, bound);
        }
        if let Some(bound) = &refinements.number_upper {
            entry(&mut payload, KEY_NUMBER_MAX);
            number_bound(&mut payload, bound);
        }
        if !refinements.string_prefix.is_empty() {
            entry(&mut payload, KEY_STRING_PREFIX);
            let prefix = &refinements.string_prefix;
            write::str_header(&mut payload, len32(prefix.len())?);
            payload.extend_from_slice(prefix.as_bytes());
        }
        if refinements.length_lower != 0 {
            entry(&mut payload, KEY_LENGTH_MIN);
            write::uint(&mut payload, refinements.length_lower);
        }
        if let Some(upper) = refinements.length_upper {
            entry(&mut payload, KEY_LENGTH_MAX);
            write::uint(&mut payload, upper);
        }
        let mut header = Vec::with_capacity(5);
        write::map_header(&mut header, entries);
        write::ext_header(
            self.out,
            len32(header.len() + payload.len())?,
            write::REFINED_UNKNOWN_EXT,
        );
        self.out.extend_from_slice(&header);
        self.out.extend_from_slice(&payload);
        Ok(())
    }
}

/// cty's choice: an int64 if the number is one, else a float64 if one is exactly the
/// number, else the decimal text.
fn number(out: &mut Vec<u8>, n: &Number) {
    if let Some(i) = n.as_i64() {
        write::int(out, i);
    } else if let Some(f) = n.exact_f64() {
        write::float64(out, f);
    } else {
        // Canonical number text is bounded far below u32::MAX.
        write::str_header(out, u32::try_from(n.as_str().len()).unwrap_or(u32::MAX));
        out.extend_from_slice(n.as_str().as_bytes());
    }
}

/// A number bound is the msgpack of the cty tuple `[number, bool]`.
fn number_bound(out: &mut Vec<u8>, bound: &NumberBound) {
    write::array_header(out, 2);
    number(out, &bound.value);
    write::boolean(out, bound.inclusive);
}

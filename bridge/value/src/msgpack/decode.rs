//! msgpack → Value, following cty's `msgpack.Unmarshal`.

use std::collections::BTreeMap;

use rmp::Marker;

use super::encode::{
    KEY_LENGTH_MAX, KEY_LENGTH_MIN, KEY_NULLNESS, KEY_NUMBER_MAX, KEY_NUMBER_MIN, KEY_STRING_PREFIX,
};
use super::write::REFINED_UNKNOWN_EXT;
use crate::path::{LocateExt, Located};
use crate::{Number, NumberBound, PathStep, Refinements, Type, Value};

type Result<T> = std::result::Result<T, Located>;

/// Nesting allowed when skipping over values of no interest (refinement payloads).
const MAX_SKIP_DEPTH: usize = 32;

/// A cursor over the input bytes.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(super) fn is_at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn peek(&self) -> Result<Marker> {
        self.buf
            .get(self.pos)
            .map(|&b| Marker::from_u8(b))
            .ok_or_else(truncated)
    }

    fn marker(&mut self) -> Result<Marker> {
        let marker = self.peek()?;
        self.pos += 1;
        Ok(marker)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(truncated)?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let bytes = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn len8(&mut self) -> Result<usize> {
        Ok(usize::from(self.array::<1>()?[0]))
    }

    fn len16(&mut self) -> Result<usize> {
        Ok(usize::from(u16::from_be_bytes(self.array()?)))
    }

    fn len32(&mut self) -> Result<usize> {
        usize::try_from(u32::from_be_bytes(self.array()?))
            .map_err(|_| Located::new("length too large"))
    }
}

fn truncated() -> Located {
    Located::new("unexpected end of msgpack data")
}

/// A marker's kind in msgpack terms, for "found …" messages.
fn found(marker: Marker) -> &'static str {
    match marker {
        Marker::Null => "nil",
        Marker::True | Marker::False => "bool",
        Marker::FixPos(_) | Marker::FixNeg(_) => "integer",
        Marker::U8 | Marker::U16 | Marker::U32 | Marker::U64 => "integer",
        Marker::I8 | Marker::I16 | Marker::I32 | Marker::I64 => "integer",
        Marker::F32 | Marker::F64 => "float",
        Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32 => "string",
        Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => "binary",
        Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => "array",
        Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => "map",
        Marker::Reserved => "reserved byte 0xc1",
        _ => "extension",
    }
}

fn is_ext(marker: Marker) -> bool {
    matches!(
        marker,
        Marker::FixExt1
            | Marker::FixExt2
            | Marker::FixExt4
            | Marker::FixExt8
            | Marker::FixExt16
            | Marker::Ext8
            | Marker::Ext16
            | Marker::Ext32
    )
}

fn mismatch(expected: &dyn std::fmt::Display, marker: Marker) -> Located {
    Located::new(format!("expected {expected}, found {}", found(marker)))
}

fn index_step(i: usize) -> PathStep {
    PathStep::Index(i64::try_from(i).unwrap_or(i64::MAX))
}

/// Decodes one value of type `ty`.
pub(super) fn value(r: &mut Reader<'_>, ty: &Type) -> Result<Value> {
    let marker = r.peek()?;
    // Any extension at all is an unknown, as in cty (there are no other extensions).
    if is_ext(marker) {
        return unknown(r, ty);
    }
    if marker == Marker::Null {
        r.pos += 1;
        return Ok(Value::Null);
    }
    match ty {
        Type::Dynamic => dynamic(r),
        Type::Bool => match r.marker()? {
            Marker::True => Ok(Value::Bool(true)),
            Marker::False => Ok(Value::Bool(false)),
            other => Err(mismatch(ty, other)),
        },
        Type::Number => Ok(Value::Number(number(r)?)),
        Type::String => Ok(Value::String(string(r, ty)?)),
        Type::List(ety) => Ok(Value::List(elements(r, ty, ety)?)),
        Type::Set(ety) => Ok(Value::Set(elements(r, ty, ety)?)),
        Type::Tuple(etys) => tuple(r, ty, etys),
        Type::Map(ety) => map(r, ty, ety),
        Type::Object(oty) => {
            let len = map_len(r, ty)?;
            let mut attrs = BTreeMap::new();
            for _ in 0..len {
                let name = string(r, &"attribute name")?;
                let Some(aty) = oty.attributes.get(&name) else {
                    return Err(Located::new("unsupported attribute").at(PathStep::Attr(name)));
                };
                let item = value(r, aty).at(|| PathStep::Attr(name.clone()))?;
                attrs.insert(name, item);
            }
            // Like cty, an object value has every attribute of its type.
            for name in oty.attributes.keys() {
                if !attrs.contains_key(name) {
                    attrs.insert(name.clone(), Value::Null);
                }
            }
            Ok(Value::Object(attrs))
        }
    }
}

/// `[type JSON, value]`; the value is kept plain when its shape implies the type.
fn dynamic(r: &mut Reader<'_>) -> Result<Value> {
    let len = array_len(r, &"dynamic value [type, value] array")?;
    if len != 2 {
        return Err(Located::new(format!(
            "dynamic value array must have 2 elements, found {len}"
        )));
    }
    let type_json = bytes(r, &"type json (binary or string)")?;
    let ty = Type::from_json_bytes(type_json)
        .map_err(|e| Located::new(format!("dynamic value: {e}")))?;
    Ok(value(r, &ty)?.with_dynamic_type(ty))
}

fn number(r: &mut Reader<'_>) -> Result<Number> {
    let marker = r.marker()?;
    let n = match marker {
        Marker::FixPos(n) => Number::from_u64(u64::from(n)),
        Marker::FixNeg(n) => Number::from_i64(i64::from(n)),
        Marker::U8 => Number::from_u64(u64::from(r.array::<1>()?[0])),
        Marker::U16 => Number::from_u64(u64::from(u16::from_be_bytes(r.array()?))),
        Marker::U32 => Number::from_u64(u64::from(u32::from_be_bytes(r.array()?))),
        Marker::U64 => Number::from_u64(u64::from_be_bytes(r.array()?)),
        Marker::I8 => Number::from_i64(i64::from(i8::from_be_bytes(r.array()?))),
        Marker::I16 => Number::from_i64(i64::from(i16::from_be_bytes(r.array()?))),
        Marker::I32 => Number::from_i64(i64::from(i32::from_be_bytes(r.array()?))),
        Marker::I64 => Number::from_i64(i64::from_be_bytes(r.array()?)),
        Marker::F32 => float(f64::from(f32::from_be_bytes(r.array()?)))?,
        Marker::F64 => float(f64::from_be_bytes(r.array()?))?,
        Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32 => {
            r.pos -= 1;
            let text = string(r, &Type::Number)?;
            Number::parse_wire(&text).map_err(|e| Located::new(format!("expected number: {e}")))?
        }
        other => return Err(mismatch(&Type::Number, other)),
    };
    Ok(n)
}

fn float(f: f64) -> Result<Number> {
    Number::from_f64(f).ok_or_else(|| Located::new("expected number, found NaN"))
}

/// Raw bytes of a str or bin item.
fn bytes<'a>(r: &mut Reader<'a>, expected: &dyn std::fmt::Display) -> Result<&'a [u8]> {
    let len = match r.marker()? {
        Marker::FixStr(n) => usize::from(n),
        Marker::Str8 | Marker::Bin8 => r.len8()?,
        Marker::Str16 | Marker::Bin16 => r.len16()?,
        Marker::Str32 | Marker::Bin32 => r.len32()?,
        other => return Err(mismatch(expected, other)),
    };
    r.take(len)
}

fn string(r: &mut Reader<'_>, expected: &dyn std::fmt::Display) -> Result<String> {
    let raw = bytes(r, expected)?;
    String::from_utf8(raw.to_vec()).map_err(|_| Located::new("string is not valid utf-8"))
}

fn array_len(r: &mut Reader<'_>, expected: &dyn std::fmt::Display) -> Result<usize> {
    match r.marker()? {
        Marker::FixArray(n) => Ok(usize::from(n)),
        Marker::Array16 => r.len16(),
        Marker::Array32 => r.len32(),
        other => Err(mismatch(expected, other)),
    }
}

fn map_len(r: &mut Reader<'_>, expected: &dyn std::fmt::Display) -> Result<usize> {
    match r.marker()? {
        Marker::FixMap(n) => Ok(usize::from(n)),
        Marker::Map16 => r.len16(),
        Marker::Map32 => r.len32(),
        other => Err(mismatch(expected, other)),
    }
}

fn elements(r: &mut Reader<'_>, ty: &Type, ety: &Type) -> Result<Vec<Value>> {
    let len = array_len(r, ty)?;
    // Every element takes at least one byte: never trust a length beyond the input.
    let mut items = Vec::with_capacity(len.min(r.remaining()));
    for i in 0..len {
        items.push(value(r, ety).at(|| index_step(i))?);
    }
    Ok(items)
}

fn tuple(r: &mut Reader<'_>, ty: &Type, etys: &[Type]) -> Result<Value> {
    let len = array_len(r, ty)?;
    if len != etys.len() {
        return Err(Located::new(format!(
            "expected tuple of {} elements, found {len}",
            etys.len()
        )));
    }
    let mut items = Vec::with_capacity(len);
    for (i, ety) in etys.iter().enumerate() {
        items.push(value(r, ety).at(|| index_step(i))?);
    }
    Ok(Value::Tuple(items))
}

fn map(r: &mut Reader<'_>, ty: &Type, ety: &Type) -> Result<Value> {
    let len = map_len(r, ty)?;
    let mut items = BTreeMap::new();
    for _ in 0..len {
        let key = string(r, &"map key string")?;
        let item = value(r, ety).at(|| PathStep::Key(key.clone()))?;
        items.insert(key, item);
    }
    Ok(Value::Map(items))
}

/// An extension: ext 12 with a payload carries refinements; anything else is a plain
/// unknown (cty writes `d4 00 00`; older encoders used other codes).
fn unknown(r: &mut Reader<'_>, ty: &Type) -> Result<Value> {
    let len = match r.marker()? {
        Marker::FixExt1 => 1,
        Marker::FixExt2 => 2,
        Marker::FixExt4 => 4,
        Marker::FixExt8 => 8,
        Marker::FixExt16 => 16,
        Marker::Ext8 => r.len8()?,
        Marker::Ext16 => r.len16()?,
        Marker::Ext32 => r.len32()?,
        other => return Err(mismatch(&"extension", other)),
    };
    let code = i8::from_be_bytes(r.array()?);
    let payload = r.take(len)?;
    // cty ignores refinements on dynamic unknowns, and a 0/1-byte payload is plain.
    if code != REFINED_UNKNOWN_EXT || len <= 1 || *ty == Type::Dynamic {
        return Ok(Value::unknown());
    }
    refinements(payload, ty).map_err(|e| {
        let (_, message) = e.into_parts();
        Located::new(format!("invalid unknown value refinements: {message}"))
    })
}

fn refinements(payload: &[u8], ty: &Type) -> Result<Value> {
    let mut r = Reader::new(payload);
    let entries = map_len(&mut r, &"refinement map")?;
    let mut out = Refinements::default();
    for _ in 0..entries {
        let key = integer(&mut r)?;
        match key {
            KEY_NULLNESS => match r.marker()? {
                Marker::False => out.not_null = true,
                // "Definitely null" is simply a null.
                Marker::True => return Ok(Value::Null),
                other => return Err(mismatch(&"bool", other)),
            },
            KEY_STRING_PREFIX if *ty == Type::String => {
                out.string_prefix = string(&mut r, &Type::String)?
            }
            KEY_NUMBER_MIN if *ty == Type::Number => out.number_lower = Some(number_bound(&mut r)?),
            KEY_NUMBER_MAX if *ty == Type::Number => out.number_upper = Some(number_bound(&mut r)?),
            KEY_LENGTH_MIN if ty.is_collection() => out.length_lower = length(&mut r)?,
            KEY_LENGTH_MAX if ty.is_collection() => out.length_upper = Some(length(&mut r)?),
            // Keys for other types or from future cty versions: skip, as cty does.
            _ => skip(&mut r, 0)?,
        }
    }
    // Trailing bytes are reserved by cty for future use and ignored.
    Ok(Value::Unknown(out))
}

fn number_bound(r: &mut Reader<'_>) -> Result<NumberBound> {
    if array_len(r, &"[number, bool] bound")? != 2 {
        return Err(Located::new("number bound must be a [number, bool] array"));
    }
    let value = number(r)?;
    let inclusive = match r.marker()? {
        Marker::True => true,
        Marker::False => false,
        other => return Err(mismatch(&"bool", other)),
    };
    Ok(NumberBound { value, inclusive })
}

fn length(r: &mut Reader<'_>) -> Result<u64> {
    u64::try_from(integer(r)?).map_err(|_| Located::new("length bound must not be negative"))
}

/// An integer that fits an i64 (refinement keys and lengths).
fn integer(r: &mut Reader<'_>) -> Result<i64> {
    let n = number(r)?;
    n.as_i64()
        .ok_or_else(|| Located::new(format!("expected integer, found {n}")))
}

/// Skips one complete item of any kind.
fn skip(r: &mut Reader<'_>, depth: usize) -> Result<()> {
    if depth > MAX_SKIP_DEPTH {
        return Err(Located::new("msgpack nesting too deep"));
    }
    let marker = r.peek()?;
    match marker {
        Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => {
            for _ in 0..array_len(r, &"array")? {
                skip(r, depth + 1)?;
            }
        }
        Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => {
            for _ in 0..map_len(r, &"map")? {
                skip(r, depth + 1)?;
                skip(r, depth + 1)?;
            }
        }
        Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32 => {
            bytes(r, &"string")?;
        }
        Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => {
            bytes(r, &"binary")?;
        }
        _ if is_ext(marker) => {
            unknown(r, &Type::Dynamic)?;
        }
        _ => {
            let size = scalar_size(marker)
                .ok_or_else(|| Located::new(format!("unexpected {}", found(marker))))?;
            r.take(size)?;
        }
    }
    Ok(())
}

/// Encoded size, marker included, of a fixed-size item.
fn scalar_size(marker: Marker) -> Option<usize> {
    match marker {
        Marker::Null | Marker::True | Marker::False | Marker::FixPos(_) | Marker::FixNeg(_) => {
            Some(1)
        }
        Marker::U8 | Marker::I8 => Some(2),
        Marker::U16 | Marker::I16 => Some(3),
        Marker::U32 | Marker::I32 | Marker::F32 => Some(5),
        Marker::U64 | Marker::I64 | Marker::F64 => Some(9),
        _ => None,
    }
}

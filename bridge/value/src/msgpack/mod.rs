//! The plugin protocol's msgpack value encoding (`DynamicValue.msgpack`), byte-compatible
//! with cty's `msgpack` package.
//!
//! * Nil at any position is null.
//! * Bools, strings as usual; numbers as the smallest int format when an int64, else a
//!   float64 when exactly one, else the decimal text (see [`Number`](super::Number)).
//! * Lists, sets and tuples are arrays; maps are maps; objects are maps with every
//!   attribute of the type, sorted by name, absent ones nil.
//! * An unknown is an extension: `d4 00 00` (fixext1, type 0) when plain, ext type 12
//!   with a refinement map payload when refined. When decoding, *any* extension is an
//!   unknown, and refinements are read only from ext 12.
//! * A dynamic position holds `[type JSON (bin), value]`, except that null is bare nil
//!   and a wholly unknown value is the bare extension.

mod decode;
mod encode;
#[cfg(test)]
mod tests;
mod write;

use super::{AttrPath, Type, Value};

/// A value does not fit the type it is encoded as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode value at {path}: {message}")]
pub struct EncodeError {
    pub path: AttrPath,
    pub message: String,
}

/// The bytes are not a msgpack value of the expected type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at {path}: {message}")]
pub struct DecodeError {
    pub path: AttrPath,
    pub message: String,
}

/// Encodes `value` as a value of type `ty`.
pub fn encode(value: &Value, ty: &Type) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(encode::size_hint(value));
    encode_into(&mut out, value, ty)?;
    Ok(out)
}

/// Appends the encoding of `value` as type `ty` to `out`, for callers reusing a buffer.
/// On error `out` may hold a partial encoding.
pub fn encode_into(out: &mut Vec<u8>, value: &Value, ty: &Type) -> Result<(), EncodeError> {
    encode::encode_into(out, value, ty).map_err(|e| {
        let (path, message) = e.into_parts();
        EncodeError { path, message }
    })
}

/// Decodes one value of type `ty`, which must span all of `bytes`.
pub fn decode(bytes: &[u8], ty: &Type) -> Result<Value, DecodeError> {
    let mut reader = decode::Reader::new(bytes);
    let result = decode::value(&mut reader, ty).and_then(|value| {
        if reader.is_at_end() {
            Ok(value)
        } else {
            Err(super::path::Located::new(
                "unexpected trailing bytes after the value",
            ))
        }
    });
    result.map_err(|e| {
        let (path, message) = e.into_parts();
        DecodeError { path, message }
    })
}

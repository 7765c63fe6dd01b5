//! Primitive msgpack writers choosing the same (most compact) formats as the Go msgpack
//! library cty uses, so our bytes match Terraform's byte for byte.

/// Marker bytes this module writes.
pub(super) const NIL: u8 = 0xc0;
const FALSE: u8 = 0xc2;
const TRUE: u8 = 0xc3;
const BIN8: u8 = 0xc4;
const BIN16: u8 = 0xc5;
const BIN32: u8 = 0xc6;
const EXT8: u8 = 0xc7;
const EXT16: u8 = 0xc8;
const EXT32: u8 = 0xc9;
const F64: u8 = 0xcb;
const U8: u8 = 0xcc;
const U16: u8 = 0xcd;
const U32: u8 = 0xce;
const U64: u8 = 0xcf;
const I8: u8 = 0xd0;
const I16: u8 = 0xd1;
const I32: u8 = 0xd2;
const I64: u8 = 0xd3;
const FIXEXT1: u8 = 0xd4;
const FIXEXT2: u8 = 0xd5;
const FIXEXT4: u8 = 0xd6;
const FIXEXT8: u8 = 0xd7;
const FIXEXT16: u8 = 0xd8;
const STR8: u8 = 0xd9;
const STR16: u8 = 0xda;
const STR32: u8 = 0xdb;
const ARRAY16: u8 = 0xdc;
const ARRAY32: u8 = 0xdd;
const MAP16: u8 = 0xde;
const MAP32: u8 = 0xdf;

/// cty's "wholly unknown": a fixext1 of type 0 with one zero byte (the shortest ext).
pub(super) const UNKNOWN: [u8; 3] = [FIXEXT1, 0, 0];

/// Extension type code of an unknown carrying a refinement map.
pub(super) const REFINED_UNKNOWN_EXT: i8 = 0x0c;

pub(super) fn nil(out: &mut Vec<u8>) {
    out.push(NIL);
}

pub(super) fn boolean(out: &mut Vec<u8>, b: bool) {
    out.push(if b { TRUE } else { FALSE });
}

/// Non-negative integers use the unsigned formats, as Go's `EncodeInt` does.
pub(super) fn int(out: &mut Vec<u8>, n: i64) {
    if let Ok(u) = u64::try_from(n) {
        return uint(out, u);
    }
    // The casts below are range-checked by the guards.
    match n {
        -32..=-1 => out.push(n as u8),
        -128..=-33 => {
            out.push(I8);
            out.push(n as u8);
        }
        -32_768..=-129 => {
            out.push(I16);
            out.extend_from_slice(&(n as i16).to_be_bytes());
        }
        -2_147_483_648..=-32_769 => {
            out.push(I32);
            out.extend_from_slice(&(n as i32).to_be_bytes());
        }
        _ => {
            out.push(I64);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

pub(super) fn uint(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=0x7f => out.push(n as u8),
        0x80..=0xff => {
            out.push(U8);
            out.push(n as u8);
        }
        0x100..=0xffff => {
            out.push(U16);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(U32);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(U64);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// cty turns off compact floats, so a float is always a float64.
pub(super) fn float64(out: &mut Vec<u8>, f: f64) {
    out.push(F64);
    out.extend_from_slice(&f.to_be_bytes());
}

pub(super) fn str_header(out: &mut Vec<u8>, len: u32) {
    match len {
        0..=31 => out.push(0xa0 | len as u8),
        32..=0xff => {
            out.push(STR8);
            out.push(len as u8);
        }
        0x100..=0xffff => {
            out.push(STR16);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(STR32);
            out.extend_from_slice(&len.to_be_bytes());
        }
    }
}

pub(super) fn bin_header(out: &mut Vec<u8>, len: u32) {
    match len {
        0..=0xff => {
            out.push(BIN8);
            out.push(len as u8);
        }
        0x100..=0xffff => {
            out.push(BIN16);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(BIN32);
            out.extend_from_slice(&len.to_be_bytes());
        }
    }
}

pub(super) fn array_header(out: &mut Vec<u8>, len: u32) {
    container_header(out, len, 0x90, ARRAY16, ARRAY32);
}

pub(super) fn map_header(out: &mut Vec<u8>, len: u32) {
    container_header(out, len, 0x80, MAP16, MAP32);
}

fn container_header(out: &mut Vec<u8>, len: u32, fix: u8, m16: u8, m32: u8) {
    match len {
        0..=15 => out.push(fix | len as u8),
        16..=0xffff => {
            out.push(m16);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(m32);
            out.extend_from_slice(&len.to_be_bytes());
        }
    }
}

/// Extension header: fixext for the five fixed sizes, ext8/16/32 otherwise.
pub(super) fn ext_header(out: &mut Vec<u8>, len: u32, type_code: i8) {
    match len {
        1 => out.push(FIXEXT1),
        2 => out.push(FIXEXT2),
        4 => out.push(FIXEXT4),
        8 => out.push(FIXEXT8),
        16 => out.push(FIXEXT16),
        0..=0xff => {
            out.push(EXT8);
            out.push(len as u8);
        }
        0x100..=0xffff => {
            out.push(EXT16);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(EXT32);
            out.extend_from_slice(&len.to_be_bytes());
        }
    }
    out.extend_from_slice(&type_code.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        f(&mut out);
        out
    }

    #[test]
    fn integers_use_the_smallest_format_and_unsigned_for_positives() {
        assert_eq!(bytes(|o| int(o, 0)), [0x00]);
        assert_eq!(bytes(|o| int(o, 127)), [0x7f]);
        assert_eq!(bytes(|o| int(o, 128)), [0xcc, 0x80]);
        assert_eq!(bytes(|o| int(o, 256)), [0xcd, 0x01, 0x00]);
        assert_eq!(bytes(|o| int(o, 65_536)), [0xce, 0, 1, 0, 0]);
        assert_eq!(bytes(|o| int(o, 1 << 32)), [0xcf, 0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(bytes(|o| int(o, -1)), [0xff]);
        assert_eq!(bytes(|o| int(o, -32)), [0xe0]);
        assert_eq!(bytes(|o| int(o, -33)), [0xd0, 0xdf]);
        assert_eq!(bytes(|o| int(o, -129)), [0xd1, 0xff, 0x7f]);
        assert_eq!(bytes(|o| int(o, -32_769)), [0xd2, 0xff, 0xff, 0x7f, 0xff]);
        assert_eq!(
            bytes(|o| int(o, i64::MIN)),
            [0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn headers() {
        assert_eq!(bytes(|o| str_header(o, 31)), [0xbf]);
        assert_eq!(bytes(|o| str_header(o, 32)), [0xd9, 32]);
        assert_eq!(bytes(|o| str_header(o, 256)), [0xda, 1, 0]);
        assert_eq!(bytes(|o| bin_header(o, 8)), [0xc4, 8]);
        assert_eq!(bytes(|o| array_header(o, 15)), [0x9f]);
        assert_eq!(bytes(|o| array_header(o, 16)), [0xdc, 0, 16]);
        assert_eq!(bytes(|o| map_header(o, 70_000)), [0xdf, 0, 1, 0x11, 0x70]);
        assert_eq!(bytes(|o| ext_header(o, 1, 0)), [0xd4, 0]);
        assert_eq!(bytes(|o| ext_header(o, 3, 12)), [0xc7, 3, 12]);
        assert_eq!(bytes(|o| ext_header(o, 0, 12)), [0xc7, 0, 12]);
        assert_eq!(bytes(|o| ext_header(o, 16, 12)), [0xd8, 12]);
    }
}

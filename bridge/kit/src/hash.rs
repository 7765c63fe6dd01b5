//! FNV-1a: a stable hash for derived names and digests (std's hasher is not guaranteed stable
//! across releases, and these values are persisted in object names).

pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_extend(FNV_OFFSET, bytes)
}

/// FNV-1a of several byte strings, each prefixed with its length (so `["ab", "c"]` and
/// `["a", "bc"]` differ).
pub fn fnv1a_parts(parts: &[&[u8]]) -> u64 {
    parts.iter().fold(FNV_OFFSET, |h, part| {
        let len = u64::try_from(part.len()).unwrap_or(u64::MAX);
        fnv1a_extend(fnv1a_extend(h, &len.to_le_bytes()), part)
    })
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

pub fn fnv1a_extend(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_digests_keep_the_parts_apart() {
        assert_ne!(fnv1a_parts(&[b"ab", b"c"]), fnv1a_parts(&[b"a", b"bc"]));
        assert_eq!(fnv1a_parts(&[b"ab", b"c"]), fnv1a_parts(&[b"ab", b"c"]));
        // The plain hash, which names state Secrets, is FNV-1a as published.
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}

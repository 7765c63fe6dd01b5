//! The two package hash schemes Terraform records in lock files:
//!
//! - `zh:` — the hex SHA-256 of the distribution zip, as listed in the registry's `SHA256SUMS`;
//!   it can only be checked against the archive itself.
//! - `h1:` — Go's `golang.org/x/mod/sumdb/dirhash` Hash1 of the unpacked package: the SHA-256 of
//!   the text `"{sha256 hex}  {slash-separated relative path}\n"` for every file, sorted by path
//!   (byte order), base64-encoded. It can be checked against an unpacked directory, which is what
//!   makes a shared plugin cache verifiable.

use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// A hash in Terraform's `scheme:value` notation. Unknown schemes are kept, never matched.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PackageHash(String);

/// The schemes Kraken can compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashScheme {
    /// `h1:`: dirhash Hash1 of the unpacked package.
    H1,
    /// `zh:`: SHA-256 of the zip archive.
    Zip,
}

/// A string that is not `scheme:value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid package hash {0:?}: expected scheme:value, such as h1:... or zh:...")]
pub struct HashParseError(pub String);

impl PackageHash {
    pub fn zip(sha256: &[u8; 32]) -> Self {
        Self(format!("zh:{}", hex(sha256)))
    }

    pub fn scheme(&self) -> Option<HashScheme> {
        match self.0.split_once(':').map(|(s, _)| s) {
            Some("h1") => Some(HashScheme::H1),
            Some("zh") => Some(HashScheme::Zip),
            _ => None,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for PackageHash {
    type Err = HashParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            Some((scheme, value))
                if !scheme.is_empty()
                    && !value.is_empty()
                    && scheme.bytes().all(|b| b.is_ascii_alphanumeric())
                    && !value.contains(char::is_whitespace) =>
            {
                Ok(Self(s.to_string()))
            }
            _ => Err(HashParseError(s.to_string())),
        }
    }
}

impl fmt::Display for PackageHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lower-case hexadecimal.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// Parse 64 hex digits into a SHA-256 digest.
pub fn parse_sha256_hex(s: &str) -> Option<[u8; 32]> {
    let s = s.as_bytes();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in s.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

/// SHA-256 of everything `r` yields, read in fixed-size chunks so memory stays flat.
pub fn sha256_reader(mut r: impl Read) -> io::Result<[u8; 32]> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

/// SHA-256 of a file.
pub fn sha256_file(path: &Path) -> io::Result<[u8; 32]> {
    sha256_reader(std::fs::File::open(path)?)
}

/// The `zh:` hash of a zip archive on disk.
pub fn zip_hash(path: &Path) -> io::Result<PackageHash> {
    Ok(PackageHash::zip(&sha256_file(path)?))
}

/// The `h1:` hash of an unpacked package directory. Like `dirhash.HashDir`, symlinks to files
/// are followed and hashed by content; directories only contribute their files.
pub fn dir_hash(dir: &Path) -> io::Result<PackageHash> {
    let mut files = Vec::new();
    collect_files(dir, "", &mut files)?;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut summary = Sha256::new();
    for (name, path) in &files {
        if name.contains('\n') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "file names with newlines cannot be hashed",
            ));
        }
        let digest = sha256_file(path)?;
        summary.update(format!("{}  {}\n", hex(&digest), name).as_bytes());
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(summary.finalize());
    Ok(PackageHash(format!("h1:{b64}")))
}

fn collect_files(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().into_string().map_err(|n| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("non-utf-8 file name {n:?} in package"),
            )
        })?;
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        // Go's filepath.Walk does not descend into symlinked directories, so neither do we.
        if entry.file_type()?.is_dir() {
            collect_files(&entry.path(), &rel, out)?;
        } else {
            out.push((rel, entry.path()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h1_matches_go_dirhash() -> anyhow::Result<()> {
        // Golden value printed by Go's dirhash.HashDir(dir, "", dirhash.Hash1) (x/mod v0.22.0)
        // for this exact tree; the integration tests also check against the Terraform CLI.
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("b.txt"), b"world\n")?;
        std::fs::create_dir(dir.path().join("a"))?;
        std::fs::write(dir.path().join("a/x"), b"hello\n")?;
        let got = dir_hash(dir.path())?;
        assert_eq!(
            got.as_str(),
            "h1:9lcTUpR0zgoXtTFKcMr2wVp8goi9fK/usinjb7FJ+bE="
        );
        Ok(())
    }

    #[test]
    fn hash_strings() {
        let h: PackageHash = "h1:abc=".parse().expect("parse");
        assert_eq!(h.scheme(), Some(HashScheme::H1));
        let z: PackageHash = "zh:00ff".parse().expect("parse");
        assert_eq!(z.scheme(), Some(HashScheme::Zip));
        let other: PackageHash = "h9:xyz".parse().expect("parse");
        assert_eq!(other.scheme(), None);
        assert!("nocolon".parse::<PackageHash>().is_err());
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
        let digest = [7u8; 32];
        assert_eq!(parse_sha256_hex(&hex(&digest)), Some(digest));
        assert_eq!(parse_sha256_hex("zz"), None);
    }
}

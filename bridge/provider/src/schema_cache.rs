//! Schema answers kept on disk, per provider binary, so that a process serving resources does
//! not ask for its schema again.
//!
//! Building the answer is the costliest thing a large provider does: hashicorp/aws grows from
//! about 240 MiB at rest to about 360 MiB while it sends its 2,300 types. Providers on the
//! current SDKs declare `get_provider_schema_optional` (Terraform then caches schemas across
//! instances too), so once one process of a binary has answered (the installer's, which reads
//! the schema to generate CRDs), the answer is stored here and later processes of the same
//! binary take it from the file. A provider that requires the call is always asked.

use std::path::{Path, PathBuf};

use prost::Message as _;

use super::schema_store::SchemaParts;

/// The cache file of `binary` spoken to in `protocol`, in `dir`: named after the binary's
/// content (its size and its first and last 64 KiB, which hold a Go binary's build id), so the
/// same build under another path shares its answer and a replaced binary never reads another's.
pub fn file_for(dir: &Path, binary: &Path, protocol: u32) -> Option<PathBuf> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    const SAMPLE: u64 = 64 * 1024;
    let mut f = std::fs::File::open(binary).ok()?;
    let len = f.metadata().ok()?.len();
    let mut head = Vec::new();
    (&mut f).take(SAMPLE).read_to_end(&mut head).ok()?;
    let mut tail = Vec::new();
    f.seek(SeekFrom::Start(len.saturating_sub(SAMPLE))).ok()?;
    f.take(SAMPLE).read_to_end(&mut tail).ok()?;
    let mut hash = kraken_kit::hash::fnv1a(&len.to_le_bytes());
    hash = kraken_kit::hash::fnv1a_extend(hash, &head);
    hash = kraken_kit::hash::fnv1a_extend(hash, &tail);
    Some(dir.join(format!("{hash:016x}-v{protocol}.pb")))
}

/// The cache file of the build `package` names (a digest of the hashes a runner is locked
/// to), spoken to in `protocol`, in `dir`: the `pods` placement's, whose binary is not here.
pub fn file_for_package(dir: &Path, package: &str, protocol: u32) -> PathBuf {
    let hash = kraken_kit::hash::fnv1a(format!("package:{package}").as_bytes());
    dir.join(format!("{hash:016x}-v{protocol}.pb"))
}

/// The answer stored in `file`, if there is a readable one.
pub fn load(file: &Path) -> Option<SchemaParts> {
    // One buffer: the types the store keeps are slices of it.
    let bytes = bytes::Bytes::from(std::fs::read(file).ok()?);
    match SchemaParts::decode(bytes) {
        Ok(parts) => Some(parts),
        Err(e) => {
            tracing::warn!(file = %file.display(), "ignoring an unreadable cached schema: {e}");
            None
        }
    }
}

/// Stores `parts` in `file` (written aside and renamed, so a reader never sees half of it).
/// A failure is logged: the cache only saves work.
pub fn store(file: &Path, parts: &SchemaParts) {
    let write = || -> std::io::Result<()> {
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, parts.encode_to_vec())?;
        std::fs::rename(&tmp, file)
    };
    if let Err(e) = write() {
        tracing::warn!(file = %file.display(), "could not cache the schema: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reads_back_and_a_changed_binary_has_another_file() {
        let dir = tempfile::tempdir().expect("dir");
        let binary = dir.path().join("terraform-provider-x");
        std::fs::write(&binary, b"one").expect("binary");
        let file = file_for(dir.path(), &binary, 6).expect("file");
        assert!(load(&file).is_none(), "nothing cached yet");
        let parts = SchemaParts {
            provider: Some(bytes::Bytes::from_static(&[1, 2])),
            resources: vec![bytes::Bytes::from_static(&[3])],
            ..Default::default()
        };
        store(&file, &parts);
        assert_eq!(load(&file), Some(parts));
        assert_ne!(file_for(dir.path(), &binary, 5), Some(file.clone()));
        let copy = dir.path().join("elsewhere");
        std::fs::copy(&binary, &copy).expect("copy");
        assert_eq!(
            file_for(dir.path(), &copy, 6),
            Some(file.clone()),
            "same build"
        );
        std::fs::write(&binary, b"onf").expect("replace");
        assert_ne!(file_for(dir.path(), &binary, 6), Some(file.clone()));
        std::fs::write(&file, b"\xff\xff").expect("garbage");
        assert!(load(&file).is_none(), "garbage is ignored");
    }
}

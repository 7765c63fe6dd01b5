//! Safe extraction of provider packages. A package is untrusted input until its hash has been
//! checked, and even a correctly signed archive must not be able to write outside its target:
//! entry names that escape (absolute, `..`), symlinks that point outside, more data than the
//! limits allow, and duplicate names are refused. Unix permission bits are kept (the provider
//! must stay executable), set-id bits are dropped.

use std::io::{self, Read as _};
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// Bounds on what one archive may expand to.
#[derive(Debug, Clone, Copy)]
pub struct UnzipLimits {
    pub max_total_bytes: u64,
    pub max_entries: usize,
}

impl Default for UnzipLimits {
    fn default() -> Self {
        Self {
            // Uncompressed provider binaries reach ~700 MB (aws); a zip bomb stops here.
            max_total_bytes: 4 << 30,
            max_entries: 10_000,
        }
    }
}

const S_IFMT: u32 = 0o170_000;
const S_IFLNK: u32 = 0o120_000;

/// Extract `archive` into the empty directory `dest`.
pub fn extract(archive: &Path, dest: &Path, limits: UnzipLimits) -> Result<()> {
    let file = std::fs::File::open(archive)
        .map_err(Error::io(format!("failed to open {}", archive.display())))?;
    let mut zip =
        zip::ZipArchive::new(io::BufReader::new(file)).map_err(|e| invalid(archive, e))?;
    if zip.len() > limits.max_entries {
        return Err(unsafe_archive(format!(
            "{} entries exceed the limit of {}",
            zip.len(),
            limits.max_entries
        )));
    }
    let mut written = 0u64;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| invalid(archive, e))?;
        let raw_name = entry.name().map_err(|e| invalid(archive, e))?.into_owned();
        let rel = safe_relative_path(&raw_name)?;
        let target = dest.join(&rel);
        if entry.is_dir() {
            create_dir(&target)?;
            continue;
        }
        if let Some(parent) = target.parent() {
            create_dir(parent)?;
        }
        let mode = entry.unix_mode();
        if mode.is_some_and(|m| m & S_IFMT == S_IFLNK) {
            let mut link = String::new();
            entry
                .read_to_string(&mut link)
                .map_err(|e| invalid(archive, e))?;
            make_symlink(&rel, &link, &target)?;
            continue;
        }
        let remaining = limits.max_total_bytes.saturating_sub(written);
        written += write_file(&mut entry, &target, remaining, archive)?;
        set_mode(&target, mode, &rel)?;
    }
    Ok(())
}

/// Reject names that are absolute, climb out with `..`, or are not plain UTF-8 paths.
fn safe_relative_path(name: &str) -> Result<PathBuf> {
    let path = Path::new(name);
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            _ => {
                return Err(unsafe_archive(format!(
                    "entry {name:?} escapes the target directory"
                )));
            }
        }
    }
    if out.as_os_str().is_empty() || name.contains('\\') || name.contains('\0') {
        return Err(unsafe_archive(format!(
            "entry {name:?} has an invalid name"
        )));
    }
    Ok(out)
}

/// A symlink is allowed only when its target stays inside the package.
fn make_symlink(rel: &Path, link: &str, target: &Path) -> Result<()> {
    let mut depth: i64 = rel.components().count() as i64 - 1;
    for c in Path::new(link).components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => depth -= 1,
            _ => depth = -1,
        }
        if depth < 0 {
            return Err(unsafe_archive(format!(
                "symlink {} -> {link:?} points outside the package",
                rel.display()
            )));
        }
    }
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(link, target).map_err(Error::io(format!(
            "failed to create symlink {}",
            target.display()
        )))
    }
    #[cfg(not(unix))]
    {
        let _ = target;
        Err(unsafe_archive(
            "symlinks in packages are only supported on unix".into(),
        ))
    }
}

/// Copy one entry, refusing to overwrite (`create_new`: a duplicate name or an earlier symlink
/// must not redirect the write) and stopping once the size budget is exceeded.
fn write_file(
    entry: &mut zip::read::ZipFile<'_, io::BufReader<std::fs::File>>,
    target: &Path,
    budget: u64,
    archive: &Path,
) -> Result<u64> {
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(target)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => {
                unsafe_archive(format!("duplicate entry {}", target.display()))
            }
            _ => Error::Io {
                context: format!("failed to create {}", target.display()),
                source: e,
            },
        })?;
    let copied = io::copy(&mut entry.take(budget.saturating_add(1)), &mut out).map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidData || e.kind() == io::ErrorKind::UnexpectedEof {
            invalid(archive, e)
        } else {
            Error::Io {
                context: format!("failed to write {}", target.display()),
                source: e,
            }
        }
    })?;
    if copied > budget {
        return Err(unsafe_archive(
            "the archive expands beyond the size limit".into(),
        ));
    }
    Ok(copied)
}

fn set_mode(target: &Path, mode: Option<u32>, rel: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        // Archives made without unix attributes carry no exec bit; the provider binary needs one.
        let is_plugin = rel
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("terraform-provider-"));
        let perm = match mode {
            Some(m) => m & 0o777,
            None if is_plugin => 0o755,
            None => 0o644,
        };
        std::fs::set_permissions(target, std::fs::Permissions::from_mode(perm)).map_err(Error::io(
            format!("failed to set permissions of {}", target.display()),
        ))
    }
    #[cfg(not(unix))]
    {
        let _ = (target, mode, rel);
        Ok(())
    }
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(Error::io(format!("failed to create {}", dir.display())))
}

fn unsafe_archive(reason: String) -> Error {
    Error::UnsafeArchive { reason }
}

fn invalid(archive: &Path, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::InvalidArchive {
        what: archive.display().to_string(),
        source: Some(Box::new(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    /// (name, content or link target, unix mode)
    type Entry<'a> = (&'a str, &'a [u8], u32);

    fn zip_with(entries: &[Entry<'_>]) -> anyhow::Result<tempfile::NamedTempFile> {
        let file = tempfile::NamedTempFile::new()?;
        let mut w = zip::ZipWriter::new(file.reopen()?);
        for (name, data, mode) in entries {
            let opts = zip::write::SimpleFileOptions::default().unix_permissions(*mode);
            if mode & S_IFMT == S_IFLNK {
                w.add_symlink(*name, std::str::from_utf8(data)?, opts)?;
            } else {
                w.start_file(*name, opts)?;
                w.write_all(data)?;
            }
        }
        w.finish()?;
        Ok(file)
    }

    #[test]
    fn keeps_exec_bit_and_layout() -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        let z = zip_with(&[
            ("terraform-provider-x_v1.0.0", b"bin", 0o755),
            ("docs/README", b"r", 0o644),
        ])?;
        let out = tempfile::tempdir()?;
        extract(z.path(), out.path(), UnzipLimits::default())?;
        let meta = std::fs::metadata(out.path().join("terraform-provider-x_v1.0.0"))?;
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        assert_eq!(std::fs::read(out.path().join("docs/README"))?, b"r");
        Ok(())
    }

    #[test]
    fn refuses_escapes_links_out_and_bombs() -> anyhow::Result<()> {
        let cases: Vec<(&str, Vec<Entry<'_>>)> = vec![
            ("dotdot", vec![("../evil", b"x", 0o644)]),
            ("nested dotdot", vec![("a/../../evil", b"x", 0o644)]),
            ("absolute", vec![("/tmp/evil", b"x", 0o644)]),
            (
                "link out",
                vec![("l", b"../../etc/passwd", S_IFLNK | 0o777)],
            ),
            (
                "absolute link",
                vec![("l", b"/etc/passwd", S_IFLNK | 0o777)],
            ),
            ("too big", vec![("f", &[0u8; 4096], 0o644)]),
        ];
        let limits = UnzipLimits {
            max_total_bytes: 1024,
            max_entries: 10,
        };
        for (name, entries) in cases {
            let z = zip_with(&entries)?;
            let out = tempfile::tempdir()?;
            let err = extract(z.path(), out.path(), limits).expect_err(name);
            assert!(matches!(err, Error::UnsafeArchive { .. }), "{name}: {err}");
        }
        Ok(())
    }

    #[test]
    fn links_inside_the_package_are_kept() -> anyhow::Result<()> {
        let z = zip_with(&[
            ("bin/real", b"x", 0o755),
            ("bin/alias", b"real", S_IFLNK | 0o777),
        ])?;
        let out = tempfile::tempdir()?;
        extract(z.path(), out.path(), UnzipLimits::default())?;
        assert_eq!(std::fs::read(out.path().join("bin/alias"))?, b"x");
        Ok(())
    }

    #[test]
    fn truncated_archive_is_invalid() -> anyhow::Result<()> {
        let z = zip_with(&[("f", &[7u8; 10_000], 0o644)])?;
        let bytes = std::fs::read(z.path())?;
        let cut = tempfile::NamedTempFile::new()?;
        std::fs::write(cut.path(), &bytes[..bytes.len() / 2])?;
        let out = tempfile::tempdir()?;
        let err = extract(cut.path(), out.path(), UnzipLimits::default()).expect_err("truncated");
        assert!(matches!(err, Error::InvalidArchive { .. }), "{err}");
        Ok(())
    }
}

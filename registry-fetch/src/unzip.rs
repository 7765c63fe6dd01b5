//! Safe extraction of provider packages. A package is untrusted input until its hash has been
//! checked, and even a correctly signed archive must not be able to write outside its target:
//! entry names that escape (absolute, `..`), symlinks that resolve outside, writes through a
//! symlink, more data than the limits allow, and duplicate names are refused. Unix permission
//! bits are kept (the provider must stay executable), set-id bits are dropped.
//!
//! Symlinks are judged against the real filesystem as it is being built, not lexically: a link
//! may point through links extracted before it (`a/b -> ..`, then `c -> a/b/../..` climbs out),
//! so each link is resolved step by step, following what is already on disk. Relative links that
//! stay inside the package (to a file or a directory) are kept, because real packages ship them;
//! but no entry is ever created through a symlink, so a link can only be read, never written
//! through. On error the destination may hold a partial tree: extract into a private staging
//! directory and delete it on failure (the installer does).

use std::ffi::OsString;
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
/// PATH_MAX: a longer link target is no path any system would follow.
const MAX_LINK_LEN: u64 = 4096;
/// Linux gives up after 40 links in one lookup (ELOOP); a package needs nowhere near that.
const MAX_LINK_HOPS: usize = 40;

type Entry<'a> = zip::read::ZipFile<'a, io::BufReader<std::fs::File>>;

/// Extract `archive` into the empty (or not yet existing) directory `dest`.
pub fn extract(archive: &Path, dest: &Path, limits: UnzipLimits) -> Result<()> {
    std::fs::create_dir_all(dest)
        .map_err(Error::io(format!("failed to create {}", dest.display())))?;
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
    let mut links = Vec::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| invalid(archive, e))?;
        let name = entry.name().map_err(|e| invalid(archive, e))?.into_owned();
        let rel = safe_relative_path(&name)?;
        if entry.is_dir() {
            make_dirs(dest, &rel, &name)?;
            continue;
        }
        if let Some(parent) = rel.parent() {
            make_dirs(dest, parent, &name)?;
        }
        refuse_link_at(dest, &rel, &name)?;
        let target = dest.join(&rel);
        let mode = entry.unix_mode();
        if mode.is_some_and(|m| m & S_IFMT == S_IFLNK) {
            let link = read_link_target(&mut entry, &name, archive)?;
            check_link(dest, &rel, &link, &name)?;
            make_symlink(&link, &target)?;
            links.push((rel, link, name));
            continue;
        }
        let remaining = limits.max_total_bytes.saturating_sub(written);
        written += write_file(&mut entry, &target, remaining, archive)?;
        set_mode(&target, mode, &rel)?;
    }
    // A link judged harmless when it was made can change meaning once later entries exist
    // (`l -> x/..` made before `x -> .`): judge every link again against the finished tree.
    for (rel, link, name) in &links {
        check_link(dest, rel, link, name)?;
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

/// Create `dest/rel` one directory at a time, refusing to pass through (or end at) a symlink:
/// `create_dir_all` would follow an extracted link and create directories wherever it points.
fn make_dirs(dest: &Path, rel: &Path, name: &str) -> Result<()> {
    let mut at = dest.to_path_buf();
    let mut shown = PathBuf::new();
    for part in rel.components() {
        at.push(part);
        shown.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => return Err(through_link(name, &shown)),
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(unsafe_archive(format!(
                    "entry {name:?} needs {} to be a directory, but the archive made it a file",
                    shown.display()
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir(&at)
                    .map_err(Error::io(format!("failed to create {}", at.display())))?;
            }
            Err(e) => {
                return Err(Error::Io {
                    context: format!("failed to inspect {}", at.display()),
                    source: e,
                });
            }
        }
    }
    Ok(())
}

/// An entry whose own path is already a symlink would replace or write through it.
fn refuse_link_at(dest: &Path, rel: &Path, name: &str) -> Result<()> {
    match std::fs::symlink_metadata(dest.join(rel)) {
        Ok(m) if m.file_type().is_symlink() => Err(through_link(name, rel)),
        _ => Ok(()),
    }
}

fn read_link_target(entry: &mut Entry<'_>, name: &str, archive: &Path) -> Result<String> {
    let mut link = String::new();
    entry
        .take(MAX_LINK_LEN + 1)
        .read_to_string(&mut link)
        .map_err(|e| invalid(archive, e))?;
    if link.is_empty() || link.len() as u64 > MAX_LINK_LEN || link.contains('\0') {
        return Err(unsafe_archive(format!(
            "symlink {name:?} has an invalid target"
        )));
    }
    Ok(link)
}

/// One step of a path walk below the destination.
enum Step {
    Up,
    Down(OsString),
}

/// Queue `path`'s components so that popping yields them in order; `None` if it is absolute.
fn push_steps(pending: &mut Vec<Step>, path: &Path) -> Option<()> {
    let mut steps = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => steps.push(Step::Down(part.to_os_string())),
            Component::ParentDir => steps.push(Step::Up),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    pending.extend(steps.into_iter().rev());
    Some(())
}

/// The link at `rel` pointing to `link` must resolve inside `dest`, following every symlink
/// already on disk the way the kernel would. Missing components are taken lexically (the kernel
/// would fail on them, which is harmless).
fn check_link(dest: &Path, rel: &Path, link: &str, name: &str) -> Result<()> {
    let refuse = |why: &str| {
        Err(unsafe_archive(format!(
            "symlink {name:?} -> {link:?} {why}"
        )))
    };
    let mut at: Vec<OsString> = rel
        .parent()
        .into_iter()
        .flat_map(Path::components)
        .map(|c| c.as_os_str().to_os_string())
        .collect();
    let mut pending = Vec::new();
    if push_steps(&mut pending, Path::new(link)).is_none() {
        return refuse("is absolute");
    }
    let mut hops = 0;
    while let Some(step) = pending.pop() {
        let Step::Down(part) = step else {
            if at.pop().is_none() {
                return refuse("points outside the package");
            }
            continue;
        };
        at.push(part);
        let here: PathBuf = std::iter::once(dest.as_os_str())
            .chain(at.iter().map(OsString::as_os_str))
            .collect();
        let Ok(meta) = std::fs::symlink_metadata(&here) else {
            continue;
        };
        if !meta.file_type().is_symlink() {
            continue;
        }
        hops += 1;
        if hops > MAX_LINK_HOPS {
            return refuse("goes through too many symlinks");
        }
        let next = std::fs::read_link(&here)
            .map_err(Error::io(format!("failed to read {}", here.display())))?;
        at.pop();
        if push_steps(&mut pending, &next).is_none() {
            return refuse("goes through a symlink to an absolute path");
        }
    }
    Ok(())
}

fn make_symlink(link: &str, target: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(link, target).map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => {
                unsafe_archive(format!("duplicate entry {}", target.display()))
            }
            _ => Error::Io {
                context: format!("failed to create symlink {}", target.display()),
                source: e,
            },
        })
    }
    #[cfg(not(unix))]
    {
        let _ = (link, target);
        Err(unsafe_archive(
            "symlinks in packages are only supported on unix".into(),
        ))
    }
}

/// Copy one entry, refusing to overwrite (`create_new`: a duplicate name or an earlier symlink
/// must not redirect the write) and stopping once the size budget is exceeded.
fn write_file(entry: &mut Entry<'_>, target: &Path, budget: u64, archive: &Path) -> Result<u64> {
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

fn through_link(name: &str, link: &Path) -> Error {
    unsafe_archive(format!(
        "entry {name:?} would be written through the symlink {}",
        link.display()
    ))
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
#[path = "unzip_tests.rs"]
mod tests;

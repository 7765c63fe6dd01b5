//! What one conversion may read and spend. A configuration is input from whoever wrote it, and
//! `kraken convert` runs in CI on configurations no one at the terminal has read: a pull
//! request's `file("/home/ci/.aws/credentials")` must not land in a manifest, and a
//! `count = 100000000` or a chain of locals that doubles a string must be refused in
//! milliseconds rather than exhaust the machine.
//!
//! A [`Guard`] is shared by everything one conversion reads and evaluates: the root it is
//! confined to (if any), the bounds below, and what has been spent against them. Every read of
//! the configuration's files goes through [`Guard::resolve`] and [`Guard::read`]; every value
//! [`super::eval::eval`] produces is weighed by [`Guard::charge`].

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::ast::Block;

/// The largest configuration file (`*.tf`, `*.tf.json`, a module's `.tfvars`) or file a
/// `file()` call reads: 4 MiB. Larger ones are refused before they are read or parsed; real
/// modules' files are a few KiB, generated ones rarely over a few hundred.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// The most configuration one conversion reads, every module's files and `file()` reads
/// together (each file once): 64 MiB.
pub const MAX_CONFIG_BYTES: u64 = 64 << 20;

/// The most instances one `count` or `for_each` (of a resource, data source or module block)
/// makes: 10,000. Over it the block is refused before any instance is evaluated.
pub const MAX_INSTANCES_PER_BLOCK: u64 = 10_000;

/// The most instances of resources, data sources and module calls one conversion makes, every
/// module together: 100,000 (a manifest each; the largest conversions measured are 10,000).
pub const MAX_INSTANCES: u64 = 100_000;

/// How deep module calls may nest: 32 (Terraform has no bound; real configurations nest two or
/// three deep). A module that calls itself, directly or through others, is refused as a cycle.
pub const MAX_MODULE_DEPTH: usize = 32;

/// The largest value one expression may evaluate to, by [`weight`]: 16 MiB.
pub const MAX_VALUE_WEIGHT: u64 = 16 << 20;

/// How deeply a value may nest (lists and objects in lists and objects): 128, as deep as
/// `jsondecode` reads. Values are dropped, cloned and written recursively; an unbounded chain
/// of `local.a2 = [local.a1]` would overflow the stack.
pub const MAX_VALUE_DEPTH: usize = 128;

/// The most evaluation one conversion does: every value every expression evaluates to, weighed
/// and summed, and every error message: 512 Mi. About a second or two of CPU at most, and a
/// bound on memory, since everything kept was evaluated once; conversions of 10,000 objects
/// spend a few Mi.
pub const MAX_WORK: u64 = 512 << 20;

/// A module's blocks as read, or why they could not be.
pub type Loaded = Result<Arc<Vec<Block>>, String>;

/// What one conversion may read and spend; see the module doc.
#[derive(Debug, Default)]
pub struct Guard {
    /// The directory reads are confined to (canonical), when confined.
    root: Option<PathBuf>,
    work: AtomicU64,
    instances: AtomicU64,
    bytes: AtomicU64,
    /// The modules read so far by directory: a module called with `count` (or from many
    /// places) is read and parsed once.
    modules: Mutex<BTreeMap<PathBuf, Loaded>>,
}

impl Guard {
    /// A guard that lets the configuration read any path, as Terraform does; its bounds hold.
    pub fn unconfined() -> Self {
        Self::default()
    }

    /// A guard that confines reads to `root` (symlinks resolved): `file()` and module sources
    /// outside it are refused.
    pub fn confined(root: &Path) -> std::io::Result<Self> {
        Ok(Self {
            root: Some(root.canonicalize()?),
            ..Self::default()
        })
    }

    /// The directory reads are confined to, when confined.
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// The path to read for `path` as written in a file of the directory `base`: `base/path`,
    /// or `path` when it is absolute. When confined, the path with its symlinks resolved, and
    /// an error when it is outside the root: a path that leaves it by its text (absolute, or
    /// `../` past it) is refused without looking at the filesystem outside.
    pub fn resolve(&self, base: &Path, path: &str) -> Result<PathBuf, String> {
        let joined = base.join(path);
        let Some(root) = &self.root else {
            return Ok(joined);
        };
        let outside = || {
            format!(
                "{path:?} is outside the configuration's root {} (kraken convert --confine; \
                 --no-confine allows it)",
                root.display()
            )
        };
        let base = base
            .canonicalize()
            .map_err(|e| format!("{}: {e}", base.display()))?;
        if !lexically_under(&base.join(path), root) {
            return Err(outside());
        }
        let real = joined
            .canonicalize()
            .map_err(|e| format!("{path:?}: {e}"))?;
        if !real.starts_with(root) {
            return Err(format!(
                "{path:?} resolves through a symlink to outside the configuration's root {} \
                 (kraken convert --confine; --no-confine allows it)",
                root.display()
            ));
        }
        Ok(real)
    }

    /// The contents of the regular file `path` (already [resolved](Self::resolve)), within
    /// [`MAX_FILE_BYTES`] and counted against [`MAX_CONFIG_BYTES`]. A device, FIFO or socket
    /// (`/dev/zero`, `/dev/stdin`) is refused: reading it would never end.
    pub fn read(&self, path: &Path) -> Result<Vec<u8>, String> {
        let shown = path.display();
        let file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
        let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{shown} is not a regular file"));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(too_large(&shown.to_string(), meta.len()));
        }
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{shown}: {e}"))?;
        let len = bytes.len() as u64;
        if len > MAX_FILE_BYTES {
            return Err(too_large(&shown.to_string(), len));
        }
        self.count_bytes(len)?;
        Ok(bytes)
    }

    /// The blocks of the module read from `dir` before (or why it could not be), if it was.
    pub fn module(&self, dir: &Path) -> Option<Loaded> {
        let modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        modules.get(dir).cloned()
    }

    /// Keeps the blocks of the module read from `dir` (or why it could not be) for the next
    /// call of it: a module that fails to parse is not parsed again per instance.
    pub fn keep_module(&self, dir: PathBuf, blocks: Loaded) {
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        modules.insert(dir, blocks);
    }

    /// Counts `n` bytes of configuration read against [`MAX_CONFIG_BYTES`].
    pub fn count_bytes(&self, n: u64) -> Result<(), String> {
        let total = self.bytes.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        if total > MAX_CONFIG_BYTES {
            return Err(format!(
                "the configuration is over {} MiB, the most kraken convert reads",
                MAX_CONFIG_BYTES >> 20
            ));
        }
        Ok(())
    }

    /// Counts the `n` instances one block expands into, against [`MAX_INSTANCES_PER_BLOCK`]
    /// and [`MAX_INSTANCES`].
    pub fn count_instances(&self, n: u64) -> Result<(), String> {
        if n > MAX_INSTANCES_PER_BLOCK {
            return Err(format!(
                "{n} instances, over the {MAX_INSTANCES_PER_BLOCK} one block may have"
            ));
        }
        let total = self
            .instances
            .fetch_add(n, Ordering::Relaxed)
            .saturating_add(n);
        if total > MAX_INSTANCES {
            return Err(format!(
                "{total} instances in the configuration, over the {MAX_INSTANCES} one \
                 conversion makes"
            ));
        }
        Ok(())
    }

    /// Weighs a value one expression evaluated to against [`MAX_VALUE_WEIGHT`] and
    /// [`MAX_VALUE_DEPTH`], and spends its weight from [`MAX_WORK`].
    pub fn charge(&self, (weight, depth): (u64, usize)) -> Result<(), String> {
        if depth > MAX_VALUE_DEPTH {
            return Err(format!("a value nested over {MAX_VALUE_DEPTH} levels deep"));
        }
        if weight > MAX_VALUE_WEIGHT {
            return Err(format!("a value of over {} MiB", MAX_VALUE_WEIGHT >> 20));
        }
        self.spend(weight)
    }

    /// Spends `n` from [`MAX_WORK`] (at least 1: every evaluation step costs).
    pub fn spend(&self, n: u64) -> Result<(), String> {
        let n = n.max(1);
        let total = self.work.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        if total > MAX_WORK {
            return Err(format!(
                "evaluating the configuration takes more than kraken convert allows \
                 ({} Mi of values)",
                MAX_WORK >> 20
            ));
        }
        Ok(())
    }
}

fn too_large(name: &str, len: u64) -> String {
    format!(
        "{name} is {len} bytes, over the {} MiB a file may have",
        MAX_FILE_BYTES >> 20
    )
}

/// Whether `path` (absolute) stays under `root` by its text alone: `..` taken lexically.
fn lexically_under(path: &Path, root: &Path) -> bool {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out.starts_with(root)
}

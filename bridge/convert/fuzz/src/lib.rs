//! What the fuzz targets share: one file of arbitrary bytes, read and evaluated as a module
//! whose directory is an empty one of its own.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// An empty directory standing for the module's: `file()` and module sources find nothing
/// there, and it is never written to.
fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("kraken-convert-fuzz-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        dir
    })
}

/// Reads `data` as the module's file `name` and evaluates it, confined to the empty
/// directory (so that no input reads the fuzzing machine's files; the bounds are the same
/// either way).
pub fn run(name: &str, data: &[u8]) {
    let files = vec![(name.to_owned(), data.to_vec())];
    let Ok(guard) = kraken_convert::guard::Guard::confined(dir()) else {
        return;
    };
    let loaded = kraken_convert::load::load_sources(dir(), files, Arc::new(guard));
    let Ok(module) = loaded else {
        return;
    };
    let ev = kraken_convert::module::evaluate(&module, &kraken_convert::module::Inputs::default());
    std::hint::black_box(ev);
}

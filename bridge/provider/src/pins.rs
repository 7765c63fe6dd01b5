//! Which provider packages may run: the `h1:` hashes someone Kraken trusts recorded for a
//! provider version ([`Pins`]: an installed `Provider`'s status, a lock file), and the check
//! that a package about to be launched is one of them ([`PackageCheck`]).
//!
//! Every path that starts a provider goes through here: a ProviderConfig's `providerRef` (the
//! Provider's status) and `spec.source` (the plugin directories' lock files and the installed
//! Providers), `kraken plan` (the same, as the operator would) and `kraken convert` (the
//! configuration's `.terraform.lock.hcl`, as `terraform init` checks it). A version nobody
//! recorded is not a candidate at all, so an older build left in a plugin cache, or one planted
//! beside the recorded one, is never picked.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use kraken_registry_fetch::LockFile;

/// The name of a lock file in a plugin directory (Terraform's notation and name): the
/// administrator's pins for the packages of that directory.
pub const LOCK_FILE: &str = ".terraform.lock.hcl";

/// What one authority recorded for a provider version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// Hashes in Terraform's notation; only `h1:` can be checked against an unpacked package.
    pub hashes: Vec<String>,
    /// Who recorded them, for messages: `Provider random`, `lock file /plugins/.terraform.lock.hcl`.
    pub by: String,
}

impl Pin {
    fn h1(&self) -> impl Iterator<Item = &str> {
        self.hashes
            .iter()
            .map(String::as_str)
            .filter(|h| h.starts_with("h1:"))
    }
}

/// Provider versions someone trusted recorded hashes for, by (canonical address, version).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pins {
    by_version: BTreeMap<(String, String), Vec<Pin>>,
}

impl Pins {
    /// Records `hashes` for `address` at `version`, as `by` says. Two authorities may pin the
    /// same version; a package matching either is accepted.
    pub fn record(&mut self, address: &str, version: &str, hashes: Vec<String>, by: String) {
        self.by_version
            .entry((address.to_owned(), version.to_owned()))
            .or_default()
            .push(Pin { hashes, by });
    }

    /// Every entry of the lock file at `path` (a missing file pins nothing).
    pub fn from_lock_file(path: &Path) -> Result<Self, String> {
        let lock = LockFile::load(path)
            .map_err(|e| format!("{}: {}", path.display(), kraken_kit::errors::chain(&e)))?;
        let mut pins = Self::default();
        let by = format!("lock file {}", path.display());
        for (address, entry) in lock.providers() {
            let hashes = entry.hashes.iter().map(ToString::to_string).collect();
            pins.record(
                &address.to_string(),
                &entry.version.to_string(),
                hashes,
                by.clone(),
            );
        }
        Ok(pins)
    }

    /// Both sets of pins.
    pub fn extend(&mut self, other: Self) {
        for (key, pins) in other.by_version {
            self.by_version.entry(key).or_default().extend(pins);
        }
    }

    /// What was recorded for `address` at `version`.
    pub fn get(&self, address: &str, version: &str) -> &[Pin] {
        self.by_version
            .get(&(address.to_owned(), version.to_owned()))
            .map_or(&[], Vec::as_slice)
    }

    pub fn is_empty(&self) -> bool {
        self.by_version.is_empty()
    }
}

/// A package directory as it was when its hash was computed: the binary's size and mtime, and
/// the directory's mtime (a file added or removed beside the binary changes it).
type Stamp = (u64, Option<SystemTime>, Option<SystemTime>);

/// Checks packages against their pins, hashing a package directory again only when it changed.
#[derive(Debug, Default)]
pub struct PackageCheck {
    hashed: Mutex<HashMap<PathBuf, (Stamp, String)>>,
}

impl PackageCheck {
    /// Whether the package `binary` is in has one of the `h1:` hashes `pins` recorded. Blocking
    /// (it may hash a large binary): call it off the async threads.
    pub fn check(&self, binary: &Path, pins: &[Pin]) -> Result<(), String> {
        let recorded: Vec<&str> = pins.iter().flat_map(Pin::h1).collect();
        let who = pins
            .iter()
            .map(|p| p.by.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if recorded.is_empty() {
            return Err(if pins.is_empty() {
                format!(
                    "{} is recorded by no lock file or installed Provider, and only recorded \
                     packages are launched",
                    binary.display()
                )
            } else {
                format!(
                    "{who} records no h1: hash for {} (only zh: hashes, which name the archive): \
                     it cannot be checked and will not be launched",
                    binary.display()
                )
            });
        }
        let dir = binary
            .parent()
            .ok_or_else(|| format!("{} has no directory", binary.display()))?;
        let h1 = self.hash(binary, dir)?;
        if recorded.contains(&h1.as_str()) {
            Ok(())
        } else {
            Err(format!(
                "the package in {} has hash {h1}, not the {} recorded by {who}: it was changed \
                 after it was recorded and will not be launched",
                dir.display(),
                recorded.join(", "),
            ))
        }
    }

    fn hash(&self, binary: &Path, dir: &Path) -> Result<String, String> {
        let meta = std::fs::metadata(binary).map_err(|e| format!("{}: {e}", binary.display()))?;
        let dir_mtime = std::fs::metadata(dir).ok().and_then(|m| m.modified().ok());
        let stamp = (meta.len(), meta.modified().ok(), dir_mtime);
        let mut hashed = self.hashed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, h1)) = hashed.get(dir)
            && *s == stamp
        {
            return Ok(h1.clone());
        }
        let h1 = kraken_registry_fetch::hash::dir_hash(dir)
            .map_err(|e| format!("hashing {}: {e}", dir.display()))?
            .as_str()
            .to_owned();
        hashed.insert(dir.to_path_buf(), (stamp, h1.clone()));
        Ok(h1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn package(root: &Path, content: &[u8]) -> (PathBuf, String) {
        let dir = root.join("pkg");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let binary = dir.join("terraform-provider-x_v1.0.0");
        std::fs::write(&binary, content).expect("write");
        let h1 = kraken_registry_fetch::hash::dir_hash(&dir)
            .expect("hash")
            .as_str()
            .to_owned();
        (binary, h1)
    }

    fn pin(hashes: &[&str]) -> Vec<Pin> {
        vec![Pin {
            hashes: hashes.iter().map(|h| (*h).to_owned()).collect(),
            by: "Provider x".into(),
        }]
    }

    #[test]
    fn only_a_package_with_a_recorded_h1_passes() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (binary, h1) = package(tmp.path(), b"as recorded");
        let check = PackageCheck::default();
        assert_eq!(check.check(&binary, &pin(&[&h1, "zh:00"])), Ok(()));
        // Swapped after it was recorded.
        std::fs::write(&binary, b"something else entirely").expect("write");
        let err = check.check(&binary, &pin(&[&h1])).expect_err("changed");
        assert!(err.contains("will not be launched"), "{err}");
        assert!(err.contains("Provider x"), "{err}");
        // A file planted beside the binary changes the package too.
        std::fs::write(&binary, b"as recorded").expect("write");
        assert_eq!(check.check(&binary, &pin(&[&h1])), Ok(()));
        std::fs::write(binary.with_file_name("extra.so"), b"x").expect("write");
        assert!(check.check(&binary, &pin(&[&h1])).is_err());
        // Nothing recorded, or nothing checkable: refused, saying which.
        let err = check.check(&binary, &[]).expect_err("unrecorded");
        assert!(err.contains("recorded by no lock file"), "{err}");
        let err = check.check(&binary, &pin(&["zh:00"])).expect_err("zh only");
        assert!(err.contains("no h1: hash"), "{err}");
    }

    #[test]
    fn lock_files_pin_their_entries_and_a_missing_one_pins_nothing() {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join(LOCK_FILE);
        assert!(Pins::from_lock_file(&path).expect("missing").is_empty());
        std::fs::write(
            &path,
            "provider \"registry.terraform.io/hashicorp/random\" {\n  version = \"3.6.0\"\n  \
             hashes = [\"h1:abc=\"]\n}\n",
        )
        .expect("write");
        let pins = Pins::from_lock_file(&path).expect("read");
        let got = pins.get("registry.terraform.io/hashicorp/random", "3.6.0");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].hashes, ["h1:abc="]);
        assert!(got[0].by.contains(LOCK_FILE));
        assert!(
            pins.get("registry.terraform.io/hashicorp/random", "3.5.0")
                .is_empty()
        );
        std::fs::write(&path, "provider {").expect("write");
        assert!(Pins::from_lock_file(&path).is_err());
    }
}

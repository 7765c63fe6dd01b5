//! Writing a conversion's files: the manifests by file, the seed-state file readable by its
//! owner alone from the moment it exists, and README.md.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use serde_json::Value as Json;

use super::converted;
use crate::convert::emit::Emitted;
use crate::convert::module::Evaluated;

/// Writes the files: providers.yaml, one file per type, README.md.
pub(super) fn write(
    out: &Path,
    providers: &[Json],
    emitted: &Emitted,
    ev: &Evaluated,
    adoption: Option<&crate::convert::state::Adoption>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut files: BTreeMap<String, Vec<&Json>> = BTreeMap::new();
    files
        .entry("providers.yaml".into())
        .or_default()
        .extend(providers);
    for m in &emitted.manifests {
        files.entry(m.file.clone()).or_default().push(&m.doc);
    }
    for (name, docs) in &files {
        let text: Vec<String> = docs
            .iter()
            .map(|d| kraken_codegen::yaml::to_yaml(d))
            .collect();
        let path = out.join(name);
        let text = text.join("---\n");
        if name == crate::convert::state::SEED_FILE {
            write_private(&path, text.as_bytes())
        } else {
            std::fs::write(&path, text)
        }
        .with_context(|| format!("writing {}", path.display()))?;
    }
    std::fs::write(out.join("README.md"), summary(emitted, ev, adoption))?;
    Ok(())
}

fn summary(
    emitted: &Emitted,
    ev: &Evaluated,
    adoption: Option<&crate::convert::state::Adoption>,
) -> String {
    let mut s = String::from("# Converted by kraken convert\n\n");
    s.push_str(&format!(
        "{} of {} resource and data source instances became manifests.\n\n",
        converted(emitted),
        ev.instances.len()
    ));
    s.push_str("| Terraform address | object |\n|---|---|\n");
    for (address, name) in &emitted.names {
        s.push_str(&format!("| `{address}` | `{name}` |\n"));
    }
    if !emitted.secrets.is_empty() {
        s.push_str("\n## Secrets to create\n\nSensitive arguments are not written into manifests. Create:\n\n");
        for sec in &emitted.secrets {
            s.push_str(&format!(
                "- Secret `{}`, key `{}` (for `{}`)\n",
                sec.name, sec.key, sec.address
            ));
        }
    }
    if !emitted.problems.is_empty() {
        s.push_str("\n## Not converted\n\n");
        for p in &emitted.problems {
            s.push_str(&format!("- {p}\n"));
        }
    }
    if let Some(a) = adoption {
        s.push_str(&format!(
            "\n## Adoption\n\n{} objects import the object the state holds (`spec.importIdentity` \
             where the provider declares a resource identity for the type, else `spec.importId`): \
             applying them adopts it instead of creating another.\n",
            a.imported
        ));
        for p in &a.problems {
            s.push_str(&format!("- {p}\n"));
        }
        let seeded = emitted
            .manifests
            .iter()
            .filter(|m| m.file == crate::convert::state::SEED_FILE)
            .count();
        if seeded > 0 {
            s.push_str(&format!(
                "\n`{}` seeds {seeded} state Secrets from the state: apply it first, so the \
                 operator refreshes each object's state instead of importing it. It holds the \
                 state's sensitive values, as `terraform.tfstate` does: apply it, do not commit \
                 it.\n",
                crate::convert::state::SEED_FILE
            ));
        }
    }
    if !ev.outputs.is_empty() {
        use crate::convert::exports::{FILE, OUTPUTS, SENSITIVE_OUTPUTS};
        s.push_str(&format!(
            "\n## Outputs\n\nThe ConfigExports in `{FILE}` keep the outputs published: \
             ConfigMap `{OUTPUTS}`, and Secret `{SENSITIVE_OUTPUTS}` for sensitive ones, \
             one key per output.\n\n"
        ));
        for name in ev.outputs.keys() {
            let (kind, target) = if ev.sensitive_outputs.contains(name) {
                ("Secret", SENSITIVE_OUTPUTS)
            } else {
                ("ConfigMap", OUTPUTS)
            };
            s.push_str(&format!(
                "- `output.{name}` → {kind} `{target}`, key `{name}`\n"
            ));
        }
    }
    s
}

/// Writes `bytes` to `path` readable and writable by the owner alone (0600) from the moment
/// the file exists: the seed states hold the state's sensitive values, as Terraform's state
/// does. A file already there is removed first and a new one created exclusively with that
/// mode, never world-readable even for an instant: whoever had the old one open keeps only
/// the old content, and a symlink planted at `path` is replaced, not written through. If
/// something else creates the file in between, creating fails and nothing is written.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::write_private;

    fn mode(path: &std::path::Path) -> std::io::Result<u32> {
        Ok(std::fs::symlink_metadata(path)?.permissions().mode() & 0o777)
    }

    /// A new seed file is 0600; one there before, world-readable, is replaced by a 0600 one
    /// holding only the new content; a symlink there is replaced, its target left alone.
    #[test]
    fn the_seed_file_is_private_whether_new_or_there_before() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("kraken-seed-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let new = dir.join("new.yaml");
        let _ = std::fs::remove_file(&new);
        write_private(&new, b"secret: 1\n")?;
        assert_eq!(mode(&new)?, 0o600);
        assert_eq!(std::fs::read(&new)?, b"secret: 1\n");

        let old = dir.join("old.yaml");
        std::fs::write(&old, b"a much longer old content that must not survive\n")?;
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644))?;
        write_private(&old, b"secret: 2\n")?;
        assert_eq!(mode(&old)?, 0o600);
        assert_eq!(std::fs::read(&old)?, b"secret: 2\n");

        let target = dir.join("elsewhere.yaml");
        std::fs::write(&target, b"untouched\n")?;
        let link = dir.join("link.yaml");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link)?;
        write_private(&link, b"secret: 3\n")?;
        assert_eq!(mode(&link)?, 0o600, "the link was written through");
        assert_eq!(std::fs::read(&target)?, b"untouched\n");
        std::fs::remove_dir_all(&dir)
    }
}

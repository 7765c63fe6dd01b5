//! Kraken's container image under test: built by `scripts/image.sh` (buildah), opened from the
//! OCI archive it writes, unpacked into a directory the way a container runtime lays out a
//! root filesystem, and run there with `chroot` as the image's user, with the image's
//! environment and entry point, and the `/proc` and `/dev` a runtime mounts. (This sandbox
//! refuses `podman run`; this gives the same file system view, which is what the image
//! decides.)

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

use crate::repo_root;

/// What `scripts/image.sh build` produced.
pub struct Built {
    /// The OCI manifest's digest, as the script printed it.
    pub digest: String,
    /// The OCI archive (a tar of an OCI image layout).
    pub archive: PathBuf,
}

/// `scripts/image.sh build --binary BINARY` with its own buildah store and archive under
/// `dir`, tagged `tag`. Needs root (buildah with chroot isolation) and buildah.
pub fn build(binary: &Path, dir: &Path, tag: &str) -> anyhow::Result<Built> {
    ensure!(
        is_root()?,
        "building and running the image needs root (buildah --isolation chroot, chroot)"
    );
    let archive = dir.join("kraken.oci.tar");
    let out = Command::new(repo_root().join("scripts/image.sh"))
        .arg("build")
        .arg("--binary")
        .arg(binary)
        .arg("--tag")
        .arg(tag)
        .arg("--storage")
        .arg(dir.join("store"))
        .arg("--oci-archive")
        .arg(&archive)
        .output()
        .context("running scripts/image.sh")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success(),
        "scripts/image.sh build failed ({}):\n{stderr}",
        out.status
    );
    eprint!("{stderr}");
    let digest = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    ensure!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "scripts/image.sh printed {digest:?}, not a digest"
    );
    Ok(Built { digest, archive })
}

/// An image read from an OCI archive.
pub struct Image {
    /// The manifest's digest, from the layout's index.
    pub digest: String,
    /// The image configuration (`config` of the config blob: User, Env, Entrypoint, Labels…).
    pub config: Value,
    /// The layer blobs, bottom first.
    pub layers: Vec<PathBuf>,
    /// The layers' compressed size, as a registry would store them.
    pub compressed_bytes: u64,
}

impl Image {
    /// Extract `archive` into `dir` and read its one manifest.
    pub fn open(archive: &Path, dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        tar_extract(archive, dir)?;
        let index = read_json(&dir.join("index.json"))?;
        let manifests = index["manifests"]
            .as_array()
            .context("index.json: no manifests")?;
        ensure!(
            manifests.len() == 1,
            "index.json names {} manifests",
            manifests.len()
        );
        let digest = manifests[0]["digest"]
            .as_str()
            .context("no manifest digest")?;
        let manifest = read_json(&blob(dir, digest)?)?;
        let config_digest = manifest["config"]["digest"]
            .as_str()
            .context("no config digest")?;
        let config = read_json(&blob(dir, config_digest)?)?;
        let mut layers = Vec::new();
        let mut compressed_bytes = 0;
        for layer in manifest["layers"].as_array().context("no layers")? {
            layers.push(blob(
                dir,
                layer["digest"].as_str().context("layer digest")?,
            )?);
            compressed_bytes += layer["size"].as_u64().context("layer size")?;
        }
        Ok(Self {
            digest: digest.to_owned(),
            config: config["config"].clone(),
            layers,
            compressed_bytes,
        })
    }

    /// The root file system: every layer extracted in order into `root`, owners kept. (No
    /// whiteout handling: scripts/image.sh builds one layer FROM scratch.)
    pub fn unpack(&self, root: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(root)?;
        for layer in &self.layers {
            tar_extract(layer, root)?;
        }
        Ok(())
    }

    /// A label of the configuration.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.config["Labels"][key].as_str()
    }

    /// How to run this image's entry point in `root` (an [`Self::unpack`]ed copy).
    pub fn chroot(&self, root: &Path) -> anyhow::Result<Chroot> {
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let entrypoint = strings(&self.config["Entrypoint"]);
        ensure!(!entrypoint.is_empty(), "the image has no entry point");
        let env = strings(&self.config["Env"])
            .into_iter()
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
            })
            .collect();
        Ok(Chroot {
            root: root.to_path_buf(),
            user: self.config["User"].as_str().unwrap_or("0").to_owned(),
            entrypoint,
            env,
        })
    }
}

/// A process started the way a runtime starts the image: in a mount namespace of its own, the
/// kernel file systems a runtime provides (`/proc`, and a `/dev` holding `null`, `zero`,
/// `random`, `urandom`) mounted into the root, then `chroot --userspec=USER ROOT ENTRYPOINT…`
/// with exactly the image's environment. The mounts vanish with the process: removing the root
/// afterwards never reaches the host's `/dev`.
#[derive(Debug, Clone)]
pub struct Chroot {
    pub root: PathBuf,
    /// `uid:gid` (the image's `User`).
    pub user: String,
    pub entrypoint: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// Runs as root in the new mount namespace: `$1` the root, `$2` chroot, the rest its arguments.
/// PATH is the image's while chroot runs, the system's while mounting.
const RUNTIME_SETUP: &str = r#"set -e
image_path=$PATH
PATH=/usr/sbin:/usr/bin:/sbin:/bin
r=$1; chroot=$2; shift 2
mkdir -p "$r/dev" "$r/proc"
mount -t tmpfs -o mode=755,nosuid tmpfs "$r/dev"
for d in null zero random urandom; do : >"$r/dev/$d"; mount --bind "/dev/$d" "$r/dev/$d"; done
mount -t proc proc "$r/proc"
PATH=$image_path
exec "$chroot" "$@""#;

impl Chroot {
    /// The command; callers add the arguments (the image's `Cmd` is replaced, as
    /// `args:` in a pod spec replaces it). The process is the entry point itself (every
    /// step execs), so its pid is the operator's.
    pub fn command(&self) -> Command {
        // By full paths: with the environment cleared, bare names would be looked up in the
        // image's PATH.
        let mut cmd = Command::new(system_program("unshare"));
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            RUNTIME_SETUP,
            "sh",
        ])
        .arg(&self.root)
        .arg(system_program("chroot"))
        .arg(format!("--userspec={}", self.user))
        .arg(&self.root)
        .args(&self.entrypoint)
        .env_clear()
        .envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }
}

/// `name` from PATH, or from the system directories PATH may lack for a non-login shell.
fn system_program(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([
            "/usr/sbin".into(),
            "/usr/bin".into(),
            "/sbin".into(),
            "/bin".into(),
        ])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

fn blob(layout: &Path, digest: &str) -> anyhow::Result<PathBuf> {
    let Some(hex) = digest.strip_prefix("sha256:") else {
        bail!("{digest} is not a sha256 digest");
    };
    Ok(layout.join("blobs/sha256").join(hex))
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))
}

fn tar_extract(archive: &Path, into: &Path) -> anyhow::Result<()> {
    let out = Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(into)
        .output()
        .context("running tar")?;
    ensure!(
        out.status.success(),
        "tar -xf {} failed: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Whether this process runs as root.
pub fn is_root() -> anyhow::Result<bool> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .context("no effective uid in /proc/self/status")?;
    Ok(uid == "0")
}

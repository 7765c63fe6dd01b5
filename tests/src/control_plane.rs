//! A local control plane, etcd and kube-apiserver on loopback, as `scripts/testenv.sh up`
//! starts it, and kubectl against it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use crate::{TestEnv, repo_root, rss_bytes, testenv_dir};

/// The most CRDs [`ControlPlane::install_crds`] applies with `kubectl apply -k`.
const KUSTOMIZE_MAX: usize = 64;
/// How many kubectl processes [`ControlPlane::install_crds`] runs at once for a larger set.
const APPLY_CHUNKS: usize = 4;

/// A kubectl duration of whole seconds, minutes or hours (`60s`, `30m`, `1h`).
fn kubectl_duration(text: &str) -> anyhow::Result<std::time::Duration> {
    let split = text.len().saturating_sub(1);
    let (n, unit) = text.split_at(split);
    let n: u64 = n
        .parse()
        .with_context(|| format!("{text:?} is not a kubectl duration"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => bail!("{text:?} is not a kubectl duration (s, m or h)"),
    };
    Ok(std::time::Duration::from_secs(secs))
}

/// The files a codegen directory's `kustomization.yaml` lists under `resources:`.
fn kustomized_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let path = dir.join("kustomization.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let files: Vec<PathBuf> = text
        .lines()
        .skip_while(|l| l.trim() != "resources:")
        .skip(1)
        .map_while(|l| l.strip_prefix("- "))
        .map(|f| dir.join(f.trim()))
        .collect();
    anyhow::ensure!(!files.is_empty(), "{} lists no resources", path.display());
    Ok(files)
}

/// A local control plane (etcd + kube-apiserver) from `scripts/testenv.sh up`, stopped on drop.
pub struct ControlPlane {
    run_dir: PathBuf,
    pub kubeconfig: PathBuf,
}

impl ControlPlane {
    /// A control plane serving the core kinds and the fixture provider's, with namespace `ns`.
    pub fn with_fixture_kinds(name: &str, ns: &str) -> anyhow::Result<Self> {
        let cp = Self::start(name)?;
        cp.install_crds(
            &repo_root().join("generated-crds/core"),
            "kraken.dev/core=true",
        )?;
        cp.install_crds(
            &repo_root().join("generated-crds/fixture"),
            "tf.kraken.dev/provider=fixture",
        )?;
        cp.create_namespace(ns)?;
        Ok(cp)
    }

    /// Start a fresh control plane in its own run directory.
    pub fn start(name: &str) -> anyhow::Result<Self> {
        let run_dir = testenv_dir()
            .join("run")
            .join(format!("{name}-{}", std::process::id()));
        let out = Command::new(repo_root().join("scripts/testenv.sh"))
            .arg("up")
            .arg(&run_dir)
            .output()
            .context("failed to run scripts/testenv.sh up")?;
        if !out.status.success() {
            bail!(
                "scripts/testenv.sh up failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(last) = stdout.lines().last() else {
            bail!("scripts/testenv.sh up printed no kubeconfig path");
        };
        Ok(Self {
            run_dir,
            kubeconfig: PathBuf::from(last.trim()),
        })
    }

    /// The admin kubeconfig of this control plane.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Create a namespace and its `default` ServiceAccount (there is no controller-manager to
    /// create it). Namespaces never finish terminating here (no namespace controller), so each
    /// test takes a fresh one and never deletes it.
    pub fn create_namespace(&self, name: &str) -> anyhow::Result<()> {
        self.kubectl(&["create", "namespace", name])?;
        self.kubectl(&["create", "serviceaccount", "default", "-n", name])?;
        Ok(())
    }

    /// `kubectl apply -n NS -f -` of a YAML (or JSON) manifest, several documents allowed;
    /// rejection is an error. Returns kubectl's stdout.
    pub fn apply_yaml(&self, ns: &str, yaml: &str) -> anyhow::Result<String> {
        self.try_apply_yaml(ns, yaml)?.map_err(|stderr| {
            anyhow::anyhow!("kubectl apply -n {ns} failed: {stderr}\n--- manifest:\n{yaml}")
        })
    }

    /// Like [`Self::apply_yaml`], for manifests that may be refused: `Ok(Err(stderr))` when
    /// kubectl (or admission) rejected them.
    pub fn try_apply_yaml(&self, ns: &str, yaml: &str) -> anyhow::Result<Result<String, String>> {
        let out = self.kubectl_stdin(&["apply", "-n", ns, "-f", "-"], yaml.as_bytes())?;
        Ok(if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        })
    }

    /// `kubectl get RESOURCE NAME -o json`; `ns` empty for cluster-scoped resources. A missing
    /// object is an error; see [`Self::get_json_opt`].
    pub fn get_json(
        &self,
        ns: &str,
        resource: &str,
        name: &str,
    ) -> anyhow::Result<serde_json::Value> {
        self.get_json_opt(ns, resource, name)?
            .with_context(|| format!("{resource} {name} not found in namespace {ns:?}"))
    }

    /// Like [`Self::get_json`], with `None` for NotFound.
    pub fn get_json_opt(
        &self,
        ns: &str,
        resource: &str,
        name: &str,
    ) -> anyhow::Result<Option<serde_json::Value>> {
        let mut args = vec!["get", resource, name, "-o", "json"];
        if !ns.is_empty() {
            args.extend(["-n", ns]);
        }
        let out = self.kubectl_output(&args)?;
        if out.status.success() {
            return Ok(Some(serde_json::from_slice(&out.stdout)?));
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("(NotFound)") {
            return Ok(None);
        }
        bail!("kubectl {} failed: {stderr}", args.join(" "))
    }

    /// `kubectl get RESOURCE -n NS -o json`: the items.
    pub fn list_json(&self, ns: &str, resource: &str) -> anyhow::Result<Vec<serde_json::Value>> {
        let list: serde_json::Value =
            serde_json::from_str(&self.kubectl(&["get", resource, "-n", ns, "-o", "json"])?)?;
        match list["items"].as_array() {
            Some(items) => Ok(items.clone()),
            None => bail!("kubectl get {resource} -n {ns} returned no items array: {list}"),
        }
    }

    /// Kill the kube-apiserver (SIGKILL) and leave etcd running: an API server outage. Clients
    /// get "connection refused" until [`Self::start_apiserver`].
    pub fn stop_apiserver(&self) -> anyhow::Result<()> {
        self.testenv(&["stop-apiserver"])
    }

    /// Start the kube-apiserver again with the command line `up` used (same port, certificates
    /// and etcd, so every object is still there) and wait until it is ready.
    pub fn start_apiserver(&self) -> anyhow::Result<()> {
        self.testenv(&["start-apiserver"])
    }

    fn testenv(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = Command::new(repo_root().join("scripts/testenv.sh"))
            .args(args)
            .arg(&self.run_dir)
            .output()
            .context("failed to run scripts/testenv.sh")?;
        if !out.status.success() {
            bail!(
                "scripts/testenv.sh {} failed:\n{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Run kubectl against this control plane, whatever its exit status.
    pub fn kubectl_output(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        let env = TestEnv::load()?;
        self.kubectl_command(&env)?
            .args(args)
            .output()
            .context("failed to run kubectl")
    }

    /// kubectl against this control plane, with its own discovery cache: kubectl caches
    /// discovery under `~/.kube/cache` by host and port, and a port freed by a control plane
    /// that is gone is often taken by the next one, which then sees the kinds of the old one
    /// ("the server doesn't have a resource type").
    fn kubectl_command(&self, env: &TestEnv) -> anyhow::Result<Command> {
        let mut cmd = Command::new(env.path("KRAKEN_TEST_KUBECTL")?);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .env("KUBECACHEDIR", self.run_dir.join("kubectl-cache"));
        Ok(cmd)
    }

    /// The run directory (`scripts/testenv.sh up RUN_DIR`): logs, pid files, certificates.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The kube-apiserver's process id.
    pub fn apiserver_pid(&self) -> anyhow::Result<u32> {
        let text = std::fs::read_to_string(self.run_dir.join("kube-apiserver.pid"))?;
        Ok(text.trim().parse()?)
    }

    /// Resident memory of the kube-apiserver, in bytes.
    pub fn apiserver_rss(&self) -> anyhow::Result<u64> {
        rss_bytes(self.apiserver_pid()?)
    }

    /// Install the CRDs of a `kraken codegen --out` directory with server-side apply (large CRDs
    /// exceed what client-side apply can record) and wait until every CRD carrying `label`
    /// (a selector such as `tf.kraken.dev/provider=aws`) is Established. Returns how many there
    /// are.
    ///
    /// A directory of up to [`KUSTOMIZE_MAX`] CRDs is applied as users do (`kubectl apply -k`).
    /// A larger one (all of AWS: 1,616 CRDs in one API group) goes as the files its
    /// `kustomization.yaml` lists, in [`APPLY_CHUNKS`] kubectl processes at once: the API
    /// server rebuilds a group's discovery and OpenAPI documents after each CRD it adds, and
    /// coalesces those rebuilds when CRDs arrive faster than one at a time; kustomize's own
    /// build of 1,616 large files was a minute of CPU.
    pub fn install_crds(&self, dir: &Path, label: &str) -> anyhow::Result<usize> {
        let files = kustomized_files(dir)?;
        if files.len() <= KUSTOMIZE_MAX {
            self.kubectl(&[
                "apply",
                "--server-side",
                "--field-manager=kraken-test",
                "-k",
                &dir.to_string_lossy(),
            ])
            .with_context(|| format!("installing the CRDs in {}", dir.display()))?;
        } else {
            self.apply_in_chunks(&files)
                .with_context(|| format!("installing the CRDs in {}", dir.display()))?;
        }
        self.established_count(label)
    }

    /// Install the CRDs of `files` and wait until they are Established; how many CRDs
    /// labelled `label` there are then.
    pub fn install_crd_files(&self, files: &[PathBuf], label: &str) -> anyhow::Result<usize> {
        self.apply_in_chunks(files).context("installing the CRDs")?;
        self.established_count(label)
    }

    fn established_count(&self, label: &str) -> anyhow::Result<usize> {
        self.wait_established(label, "1800s")?;
        let names = self.kubectl(&["get", "crd", "-l", label, "-o", "name"])?;
        Ok(names.lines().count())
    }

    /// `kubectl apply --server-side` of `files`, split over [`APPLY_CHUNKS`] processes.
    fn apply_in_chunks(&self, files: &[PathBuf]) -> anyhow::Result<()> {
        self.server_side_apply(files, &[])
    }

    /// What the API server says of `files` (CRDs or any object) without storing them: a
    /// server-side dry-run apply, which runs its admission and validation (for a CRD: the
    /// structural schema, CEL compilation and cost) in [`APPLY_CHUNKS`] processes. An object
    /// it refuses is an error naming it.
    pub fn dry_run_apply(&self, files: &[PathBuf]) -> anyhow::Result<()> {
        self.server_side_apply(files, &["--dry-run=server"])
    }

    fn server_side_apply(&self, files: &[PathBuf], extra: &[&str]) -> anyhow::Result<()> {
        let per_chunk = files.len().div_ceil(APPLY_CHUNKS).max(1);
        std::thread::scope(|scope| {
            let handles: Vec<_> = files
                .chunks(per_chunk)
                .map(|chunk| {
                    scope.spawn(move || {
                        let mut args: Vec<String> = ["apply", "--server-side"]
                            .iter()
                            .chain(extra)
                            .map(|a| (*a).to_owned())
                            .collect();
                        args.push("--field-manager=kraken-test".to_owned());
                        for file in chunk {
                            args.push("-f".to_owned());
                            args.push(file.to_string_lossy().into_owned());
                        }
                        let args: Vec<&str> = args.iter().map(String::as_str).collect();
                        self.kubectl(&args).map(drop)
                    })
                })
                .collect();
            for handle in handles {
                handle
                    .join()
                    .map_err(|_| anyhow::anyhow!("a kubectl apply thread panicked"))??;
            }
            Ok(())
        })
    }

    /// Wait (up to `timeout`, a kubectl duration) until every CRD labelled `label` is
    /// Established.
    ///
    /// `kubectl wait` fails outright ("status.conditions accessor error") on a CRD the API
    /// server has stored but not yet given any condition, which a loaded server shows for a
    /// while after a large install; such a wait is tried again, within the same deadline.
    pub fn wait_established(&self, label: &str, timeout: &str) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + kubectl_duration(timeout)?;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let timeout = format!("--timeout={}s", left.as_secs().max(1));
            let args = [
                "wait",
                "--for=condition=Established",
                "crd",
                "-l",
                label,
                &timeout,
            ];
            let out = self.kubectl_output(&args)?;
            if out.status.success() {
                return Ok(());
            }
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !stderr.contains(".status.conditions accessor error")
                || std::time::Instant::now() >= deadline
            {
                bail!("kubectl {} failed: {stderr}", args.join(" "));
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }

    /// Run kubectl with `input` on its standard input, whatever its exit status.
    pub fn kubectl_stdin(
        &self,
        args: &[&str],
        input: &[u8],
    ) -> anyhow::Result<std::process::Output> {
        use std::io::Write as _;
        let env = TestEnv::load()?;
        let mut child = self
            .kubectl_command(&env)?
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("failed to run kubectl")?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(input)?;
        }
        Ok(child.wait_with_output()?)
    }

    /// Run kubectl against this control plane and return its stdout; non-zero exit is an error.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.kubectl_output(args)?;
        if !out.status.success() {
            bail!(
                "kubectl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/testenv.sh"))
            .arg("down")
            .arg(&self.run_dir)
            .output();
        // KRAKEN_TEST_KEEP_RUN=1 keeps the logs (operator, providers, API server) to read after.
        if std::env::var_os("KRAKEN_TEST_KEEP_RUN").is_none() {
            let _ = std::fs::remove_dir_all(&self.run_dir);
        }
    }
}

//! Nothing outlives the benchmark. Errors and panics are covered by `Drop` (the harness kills
//! the operator's process tree and takes its control plane down); this module covers the
//! other way out, a signal (Ctrl-C, SIGTERM, a CI timeout), where no destructor runs: every
//! control plane, operator and Terraform process registers itself while it lives, and a signal
//! task takes them all down before the process exits.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use kraken_tests::operator::kill_tree;
use kraken_tests::repo_root;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Live {
    /// A process tree: the operator and its providers, or `terraform` and its provider.
    Process(u32),
    /// A `scripts/testenv.sh up` run directory: etcd and kube-apiserver.
    ControlPlane(PathBuf),
    /// A scratch directory (a ledger of 10,000 objects, a Terraform state).
    Dir(PathBuf),
}

static LIVE: Mutex<Vec<(u64, Live)>> = Mutex::new(Vec::new());
static NEXT: Mutex<u64> = Mutex::new(0);

/// Unregisters on drop (the owner then cleans up itself).
pub struct Registered(u64);

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut live) = LIVE.lock() {
            live.retain(|(id, _)| *id != self.0);
        }
    }
}

fn register(what: Live) -> Registered {
    let id = {
        let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
        *next += 1;
        *next
    };
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((id, what));
    Registered(id)
}

/// Kill this process tree on a signal.
pub fn process(pid: u32) -> Registered {
    register(Live::Process(pid))
}

/// Take this control plane down on a signal.
pub fn control_plane(run_dir: PathBuf) -> Registered {
    register(Live::ControlPlane(run_dir))
}

/// Remove this scratch directory on a signal.
pub fn dir(path: PathBuf) -> Registered {
    register(Live::Dir(path))
}

/// On SIGINT or SIGTERM: kill every registered process tree (newest first), take the control
/// planes down, and exit with 130.
pub fn on_signal(rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let _guard = rt.enter();
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    rt.spawn(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        eprintln!("\nsignal: stopping the operator, Terraform and the control planes");
        let live: Vec<Live> = LIVE
            .lock()
            .map(|l| l.iter().rev().map(|(_, w)| w.clone()).collect())
            .unwrap_or_default();
        for what in live.iter() {
            if let Live::Process(pid) = what {
                let _ = kill_tree(*pid);
            }
        }
        for what in live.iter() {
            if let Live::ControlPlane(dir) = what {
                let _ = Command::new(repo_root().join("scripts/testenv.sh"))
                    .arg("down")
                    .arg(dir)
                    .output();
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        for what in live.iter() {
            if let Live::Dir(dir) = what {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        std::process::exit(130);
    });
    Ok(())
}

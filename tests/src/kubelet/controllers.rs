//! kube-controller-manager and kube-scheduler beside the test control plane.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::{ControlPlane, TestEnv};

/// kube-controller-manager and kube-scheduler, stopped on drop.
pub struct Controllers {
    children: Vec<(String, Child)>,
}

impl Drop for Controllers {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Controllers {
    /// Starts both against `cp` with its admin kubeconfig; their logs go to the run directory.
    /// The node lifecycle controller is off: the test kubelet sends no heartbeats.
    pub fn start(cp: &ControlPlane) -> anyhow::Result<Self> {
        let env = TestEnv::load()?;
        let kubeconfig = cp.kubeconfig().display().to_string();
        let pki = cp.run_dir().join("pki");
        let manager = [
            format!("--kubeconfig={kubeconfig}"),
            "--controllers=deployment-controller,replicaset-controller,serviceaccount-controller,garbage-collector-controller,namespace-controller".into(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            format!("--root-ca-file={}", pki.join("ca.crt").display()),
            "--concurrent-deployment-syncs=5".into(),
            "--concurrent-gc-syncs=5".into(),
        ];
        let scheduler = [
            format!("--kubeconfig={kubeconfig}"),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            // Its decisions (why a Pod is unschedulable) are logged from level 2.
            "-v=2".into(),
        ];
        let mut children = Vec::new();
        for (name, var, args) in [
            (
                "kube-controller-manager",
                "KRAKEN_TEST_KUBE_CONTROLLER_MANAGER",
                &manager[..],
            ),
            (
                "kube-scheduler",
                "KRAKEN_TEST_KUBE_SCHEDULER",
                &scheduler[..],
            ),
        ] {
            let log = std::fs::File::create(cp.run_dir().join(format!("{name}.log")))?;
            let child = Command::new(env.path(var)?)
                .args(args)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .with_context(|| format!("starting {name}"))?;
            children.push((name.to_owned(), child));
        }
        let mut this = Self { children };
        std::thread::sleep(Duration::from_millis(300));
        this.check()?;
        Ok(this)
    }

    /// Fails when either has exited.
    pub fn check(&mut self) -> anyhow::Result<()> {
        for (name, child) in &mut self.children {
            if let Some(status) = child.try_wait()? {
                bail!("{name} exited ({status}); see its log in the run directory");
            }
        }
        Ok(())
    }
}

//! One measurement's world: a fresh control plane with the core and provider CRDs, the
//! ProviderConfig `default` (`maxConcurrency` at the run's parallelism level), a watch on the
//! provider's kind, and (now or later, for a backlog run) `kraken operator` from one of the
//! builds under test, with `--concurrency` at the same level.

use std::time::Duration;

use anyhow::{Context as _, bail};
use kraken_tests::bench::OperatorBuild;
use kraken_tests::operator::{Operator, OperatorOptions, descendants};
use kraken_tests::{ControlPlane, TestEnv, repo_root, rss_bytes, status_kib};
use serde_json::json;

use crate::kraken::NS;
use crate::watch::Watch;
use crate::{Config, Prov, cleanup};

/// One control plane with the CRDs of one provider, the ProviderConfig `default`, maybe an
/// operator, and a watch on the provider's kind. Drop order is field order: the watch, then
/// the operator (killed with its providers), then the control plane, then the ledger.
pub struct Bed {
    pub watch: Watch,
    pub op: Option<Operator>,
    pub cp: ControlPlane,
    /// The parallelism level: the operator's `--concurrency` and the ProviderConfig's
    /// `maxConcurrency`.
    pub level: usize,
    ledger: Option<tempfile::TempDir>,
    _registered: Vec<cleanup::Registered>,
}

impl Bed {
    /// `label` names the control plane's run directory; without an `operator` build the bed
    /// is the benchmark's plumbing alone (see `plumbing` in the main file) until
    /// [`Self::start_operator`].
    pub fn start(
        rt: &tokio::runtime::Runtime,
        cfg: &Config,
        prov: Prov,
        label: &str,
        level: usize,
        operator: Option<&OperatorBuild>,
    ) -> anyhow::Result<Self> {
        let env = TestEnv::load()?;
        let cp = ControlPlane::start(label)?;
        let mut registered = vec![cleanup::control_plane(cp.run_dir().to_path_buf())];
        cp.install_crds(
            &repo_root().join("generated-crds/core"),
            "kraken.dev/core=true",
        )?;
        cp.install_crds(&repo_root().join(prov.crd_dir()), &prov.crd_label())?;
        cp.create_namespace(NS)?;
        let ledger = match prov {
            Prov::Fixture => {
                let l = kraken_tests::fixture_dir("bench-kraken-ledger-")?;
                registered.push(cleanup::dir(l.path().to_path_buf()));
                Some(l)
            }
            Prov::Random => None,
        };
        let bin = env.provider(prov.env_name())?;
        let mut spec =
            json!({"source": bin.address, "version": bin.version, "maxConcurrency": level});
        if let Some(l) = &ledger {
            spec["config"] = json!({"ledgerDir": l.path().to_string_lossy()});
        }
        let pc = json!({
            "apiVersion": "core.kraken.dev/v1alpha1",
            "kind": "ProviderConfig",
            "metadata": {"name": "default", "namespace": NS},
            "spec": spec,
        });
        cp.apply_yaml(NS, &pc.to_string())?;
        let watch = Watch::start(rt, cp.kubeconfig(), NS, prov.kind())?;
        // Timestamps come from watch events: a watch still backing off would make them late.
        watch.wait(Duration::from_secs(30), "the watch's first list", |s| {
            s.listed.then_some(())
        })?;
        if let Some(e) = &watch.summary().last_error {
            eprintln!("  (the watch recovered from: {e})");
        }
        let mut bed = Self {
            watch,
            op: None,
            cp,
            level,
            ledger,
            _registered: registered,
        };
        if let Some(build) = operator {
            bed.start_operator(cfg, build)?;
        }
        Ok(bed)
    }

    /// Start `kraken operator --no-leader-elect --concurrency <level> --provider-gogc …` of
    /// `build` and wait until it is ready (its `/readyz`).
    pub fn start_operator(&mut self, cfg: &Config, build: &OperatorBuild) -> anyhow::Result<()> {
        let mut args = vec!["--concurrency".into(), self.level.to_string()];
        args.extend(cfg.gogc.operator_args());
        args.extend(build.args.iter().cloned());
        let opts = OperatorOptions {
            label: format!("bench-{}", build.label),
            rust_log: cfg.rust_log.clone(),
            args,
            leader_elect: false,
            bin: Some(build.bin.clone()),
            ..OperatorOptions::default()
        };
        let mut op = Operator::start(&self.cp, opts)?;
        if let Some(pid) = op.pid() {
            self._registered.push(cleanup::process(pid));
        }
        op.wait_ready(Duration::from_secs(60))?;
        self.op = Some(op);
        Ok(())
    }

    pub fn op(&self) -> anyhow::Result<&Operator> {
        self.op.as_ref().context("this bed has no operator")
    }

    /// Attach the operator's log tail to a failure; fail on a panic in the log.
    pub fn finish<T>(&self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        let Some(op) = &self.op else {
            return result;
        };
        match result {
            Ok(v) => {
                let logs = op.logs()?;
                if let Some(line) = logs.lines().find(|l| l.contains("panicked at")) {
                    bail!(
                        "the operator panicked: {line}\nlog tail:\n{}",
                        op.log_tail(40)
                    );
                }
                Ok(v)
            }
            Err(e) => Err(e.context(format!(
                "operator log tail ({}):\n{}\n",
                op.log_path().display(),
                op.log_tail(60)
            ))),
        }
    }

    /// For the fixture: fail unless its ledger holds exactly `n` live objects.
    pub fn check_ledger(&self, n: usize) -> anyhow::Result<()> {
        if let Some(dir) = self.ledger_dir() {
            let live = kraken_tests::ledger::live_objects(dir);
            anyhow::ensure!(
                live == n,
                "{n} objects are Ready but the ledger holds {live}"
            );
        }
        Ok(())
    }

    /// The fixture ledger (None for random).
    pub fn ledger_dir(&self) -> Option<&std::path::Path> {
        self.ledger.as_ref().map(|l| l.path())
    }

    /// Fail at once if the operator has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.op.as_mut() {
            Some(op) => check_alive(op),
            None => Ok(()),
        }
    }
}

pub fn check_alive(op: &mut Operator) -> anyhow::Result<()> {
    if let Some(status) = op.exit_status()? {
        bail!("the operator exited ({status})");
    }
    Ok(())
}

/// Memory of the operator process (and separately its provider processes), bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub rss: u64,
    /// VmHWM: the peak resident set so far.
    pub hwm: u64,
    /// VmRSS summed over the processes below the operator (its providers).
    pub children_rss: u64,
}

impl Memory {
    pub fn sample(pid: u32) -> anyhow::Result<Self> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        let kib = |key| status_kib(&status, key).with_context(|| format!("no {key} of {pid}"));
        let mut children_rss = 0;
        for child in descendants(pid)? {
            // A provider that exited between the listing and the read holds no memory.
            children_rss += rss_bytes(child).unwrap_or(0);
        }
        Ok(Self {
            rss: kib("VmRSS:")? * 1024,
            hwm: kib("VmHWM:")? * 1024,
            children_rss,
        })
    }
}

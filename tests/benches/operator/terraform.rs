//! The baseline: `terraform apply -parallelism=P` of the same N resources with the same
//! provider binary, from the test environment's filesystem mirror (as `benches/provider.rs`
//! does for 1,000 pets). `count = N` is what Terraform does per instance anyway; instance 0
//! takes its one changeable value from `var.rev`, so "one change among N" is `-var rev=K`
//! against the state of a full create, which makes Terraform refresh all N first; the same
//! with `-refresh=false -target=<instance 0>` is the fastest a Terraform user can make it.
//! Every run is at the level's `-parallelism`, with the providers' `GOGC` of the comparison, and
//! watched: the provider processes it starts are kept for the fairness check.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kraken_tests::bench::{Gogc, Seen, Spy};
use kraken_tests::{TestEnv, ledger, scratch_dir};

use crate::Prov;
use crate::cleanup;

/// A Terraform working directory for `count = n`, initialised once (`terraform init` is not
/// timed).
pub struct Workspace {
    prov: Prov,
    n: usize,
    terraform: PathBuf,
    cli_config: PathBuf,
    gogc: Gogc,
    /// The provider processes every run started.
    seen: Mutex<BTreeSet<Seen>>,
    /// The fixture's ledger (its "cloud"), emptied before every full create.
    ledger: Option<tempfile::TempDir>,
    dir: tempfile::TempDir,
    _registered: Vec<cleanup::Registered>,
}

/// `Resources: A added, C changed, D destroyed.` of an apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub added: usize,
    pub changed: usize,
    pub destroyed: usize,
}

impl Workspace {
    pub fn new(env: &TestEnv, prov: Prov, n: usize, gogc: Gogc) -> anyhow::Result<Self> {
        let dir = scratch_dir(&format!("bench-tf-{}-{n}-", prov.name()))?;
        let ledger = match prov {
            Prov::Fixture => Some(scratch_dir("bench-tf-ledger-")?),
            Prov::Random => None,
        };
        let mut registered = vec![cleanup::dir(dir.path().to_path_buf())];
        registered.extend(
            ledger
                .as_ref()
                .map(|l| cleanup::dir(l.path().to_path_buf())),
        );
        let bin = env.provider(prov.env_name())?;
        std::fs::write(
            dir.path().join("main.tf"),
            config(prov, n, &bin.version, ledger.as_ref().map(|l| l.path())),
        )?;
        let ws = Self {
            prov,
            n,
            terraform: env.path("KRAKEN_TEST_TERRAFORM")?,
            cli_config: env.path("KRAKEN_TEST_TF_CLI_CONFIG")?,
            gogc,
            seen: Mutex::new(BTreeSet::new()),
            ledger,
            dir,
            _registered: registered,
        };
        ws.run(&["init", "-input=false", "-no-color"], "init")?;
        Ok(ws)
    }

    /// From an empty state (and an empty ledger): create all N with `-parallelism=P`; the
    /// apply's wall time.
    pub fn create_all(&self, parallelism: usize) -> anyhow::Result<Duration> {
        for f in ["terraform.tfstate", "terraform.tfstate.backup"] {
            let _ = std::fs::remove_file(self.dir.path().join(f));
        }
        if let Some(l) = &self.ledger {
            let _ = std::fs::remove_dir_all(l.path().join("objects"));
            let _ = std::fs::remove_file(l.path().join("events.log"));
        }
        let (took, summary) = self.apply(
            "0",
            &format!("apply-create-p{parallelism}"),
            &[&format!("-parallelism={parallelism}")],
        )?;
        let want = Summary {
            added: self.n,
            changed: 0,
            destroyed: 0,
        };
        ensure!(
            summary == want,
            "terraform apply did {summary:?}, not {want:?}"
        );
        ensure!(
            self.state_instances()? == self.n,
            "the state does not hold {} instances",
            self.n
        );
        if let Some(l) = &self.ledger {
            let live = ledger::live_objects(l.path());
            ensure!(
                live == self.n,
                "the ledger holds {live} objects, not {}",
                self.n
            );
        }
        Ok(took)
    }

    /// The provider processes the runs so far started.
    pub fn seen(&self) -> BTreeSet<Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// With the N of [`Self::create_all`] in the state: change instance 0 to `rev` (never 0,
    /// never one used before) at `-parallelism=P`; the apply's wall time, refresh of all N
    /// included.
    pub fn change_one(&self, rev: usize, parallelism: usize) -> anyhow::Result<Duration> {
        let p = format!("-parallelism={parallelism}");
        self.change(rev, &format!("apply-change-{rev}"), &[&p])
    }

    /// [`Self::change_one`] as a careful Terraform user would run it at this size:
    /// `-refresh=false -target=<instance 0>`, so nothing but the changed instance is read.
    pub fn change_one_targeted(&self, rev: usize, parallelism: usize) -> anyhow::Result<Duration> {
        let target = match self.prov {
            Prov::Fixture => "-target=fixture_object.o[0]",
            Prov::Random => "-target=random_pet.p[0]",
        };
        let p = format!("-parallelism={parallelism}");
        self.change(
            rev,
            &format!("apply-change-targeted-{rev}"),
            &["-refresh=false", target, &p],
        )
    }

    fn change(&self, rev: usize, log: &str, extra: &[&str]) -> anyhow::Result<Duration> {
        let ops_before = self.ledger_ops()?;
        let (took, summary) = self.apply(&rev.to_string(), log, extra)?;
        let want = match self.prov {
            Prov::Fixture => Summary {
                added: 0,
                changed: 1,
                destroyed: 0,
            },
            Prov::Random => Summary {
                added: 1,
                changed: 0,
                destroyed: 1,
            },
        };
        ensure!(
            summary == want,
            "terraform apply did {summary:?}, not {want:?}"
        );
        if self.ledger.is_some() {
            let ops = self.ledger_ops()?;
            ensure!(
                ops == ops_before + 1,
                "the ledger recorded {} mutations for one change",
                ops - ops_before
            );
        }
        Ok(took)
    }

    fn apply(&self, rev: &str, log: &str, extra: &[&str]) -> anyhow::Result<(Duration, Summary)> {
        let var = format!("rev={rev}");
        let mut args = vec![
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-var",
            &var,
        ];
        args.extend_from_slice(extra);
        let took = self.run(&args, log)?;
        let out = std::fs::read_to_string(self.log_path(log))?;
        let summary = parse_summary(&out).with_context(|| {
            format!(
                "no \"Apply complete!\" line in {}",
                self.log_path(log).display()
            )
        })?;
        Ok((took, summary))
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// Run terraform with its output in `<name>.log`; the wall time. Progress (completed
    /// resources, from the log) goes to stderr every 10 s.
    fn run(&self, args: &[&str], name: &str) -> anyhow::Result<Duration> {
        let log_path = self.log_path(name);
        let log = std::fs::File::create(&log_path)?;
        let started = Instant::now();
        let mut cmd = Command::new(&self.terraform);
        cmd.current_dir(self.dir.path())
            .env("TF_CLI_CONFIG_FILE", &self.cli_config)
            .env("TF_IN_AUTOMATION", "1")
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        self.gogc.terraform(&mut cmd);
        let mut child = cmd.spawn().context("failed to run terraform")?;
        let _registered = cleanup::process(child.id());
        let spy = Spy::start(child.id());
        let mut reported = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if reported.elapsed() >= Duration::from_secs(10) {
                reported = Instant::now();
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                eprintln!(
                    "  terraform {}: {} refreshed, {} applied, {:.0}s",
                    args[0],
                    log.matches(": Refreshing state...").count(),
                    log.matches(" complete after ").count(),
                    started.elapsed().as_secs_f64()
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let took = started.elapsed();
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(spy.finish());
        if !status.success() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect::<Vec<_>>();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "terraform {} failed ({status}); log {}:\n{}",
                args.join(" "),
                log_path.display(),
                tail.join("\n")
            );
        }
        Ok(took)
    }

    fn state_instances(&self) -> anyhow::Result<usize> {
        let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
            self.dir.path().join("terraform.tfstate"),
        )?)?;
        Ok(state["resources"][0]["instances"]
            .as_array()
            .map_or(0, Vec::len))
    }

    fn ledger_ops(&self) -> anyhow::Result<usize> {
        Ok(match &self.ledger {
            Some(l) => ledger::event_log(l.path())?.len(),
            None => 0,
        })
    }
}

/// The `.tf` of N instances. Instance 0's changeable value comes from `var.rev`; at `rev = 0`
/// every instance looks like the Kraken side's manifests (`size: 1`, `keepers: {rev: "0"}`).
pub fn config(prov: Prov, n: usize, version: &str, ledger: Option<&Path>) -> String {
    match prov {
        Prov::Fixture => format!(
            r#"terraform {{
  required_providers {{
    fixture = {{
      source  = "registry.kraken.dev/kraken/fixture"
      version = "{version}"
    }}
  }}
}}

provider "fixture" {{
  ledger_dir = "{ledger}"
}}

variable "rev" {{
  type    = number
  default = 0
}}

resource "fixture_object" "o" {{
  count = {n}
  name  = "bench-${{count.index}}"
  size  = count.index == 0 ? var.rev + 1 : 1
}}
"#,
            ledger = ledger.map(|l| l.display().to_string()).unwrap_or_default(),
        ),
        Prov::Random => format!(
            r#"terraform {{
  required_providers {{
    random = {{
      source  = "hashicorp/random"
      version = "{version}"
    }}
  }}
}}

variable "rev" {{
  type    = string
  default = "0"
}}

resource "random_pet" "p" {{
  count   = {n}
  keepers = {{ rev = count.index == 0 ? var.rev : "0" }}
}}
"#
        ),
    }
}

/// The counts of Terraform's `Apply complete! Resources: 1 added, 0 changed, 0 destroyed.`
fn parse_summary(out: &str) -> Option<Summary> {
    let line = out.lines().find(|l| l.starts_with("Apply complete!"))?;
    let rest = line.split_once("Resources:")?.1;
    let mut nums = rest
        .split(',')
        .map(|part| part.split_whitespace().next()?.parse::<usize>().ok());
    Some(Summary {
        added: nums.next()??,
        changed: nums.next()??,
        destroyed: nums.next()??,
    })
}

//! What makes a Kraken-vs-Terraform comparison fair, checked rather than assumed: the provider
//! processes of both sides run under the same `GOGC` and from the same binary, both read from
//! what each side actually started (`/proc/<pid>/exe` and `/proc/<pid>/environ`), and every
//! ratio is computed and printed by the bench, so the docs quote numbers, not arithmetic.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, ensure};

use crate::operator::{descendants, process_alive};

/// The Go garbage collector setting of every provider process, on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gogc {
    /// No `GOGC` anywhere: Go's own default (100). Kraken's operator gets `--provider-gogc 0`
    /// (its shipped default is 50), Terraform's environment loses any `GOGC`.
    GoDefault,
    /// `GOGC=N` for every provider: `--provider-gogc N` for the operator, `GOGC=N` in the
    /// environment of `terraform` (its providers inherit it; Terraform itself runs with it too).
    Percent(u32),
}

impl Gogc {
    /// `KRAKEN_BENCH_GOGC`: `default` (unset: Go's default on both sides) or a percentage.
    pub fn from_env() -> anyhow::Result<Self> {
        match std::env::var("KRAKEN_BENCH_GOGC") {
            Err(_) => Ok(Self::GoDefault),
            Ok(v) if v.trim().is_empty() || v.trim() == "default" => Ok(Self::GoDefault),
            Ok(v) => v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .map(Self::Percent)
                .with_context(|| format!("KRAKEN_BENCH_GOGC={v:?}: `default` or a percentage")),
        }
    }

    /// The value a provider process should see in its environment.
    pub fn value(self) -> Option<String> {
        match self {
            Self::GoDefault => None,
            Self::Percent(n) => Some(n.to_string()),
        }
    }

    /// `kraken operator` arguments that give its provider processes this setting.
    pub fn operator_args(self) -> Vec<String> {
        let n = match self {
            Self::GoDefault => 0,
            Self::Percent(n) => n,
        };
        vec!["--provider-gogc".into(), n.to_string()]
    }

    /// A Kraken CLI (`kraken plan`, `kraken convert`) sets no `GOGC` of its own: with a value,
    /// its provider processes inherit the CLI's, opted in through `KRAKEN_PROVIDER_ENV`.
    pub fn kraken_cli(self, cmd: &mut Command) {
        cmd.env_remove("KRAKEN_PROVIDER_ENV");
        match self {
            Self::GoDefault => cmd.env_remove("GOGC"),
            Self::Percent(n) => cmd
                .env("GOGC", n.to_string())
                .env("KRAKEN_PROVIDER_ENV", "GOGC"),
        };
    }

    /// For a plugin host in the bench process (`LaunchOptions::default_env`).
    pub fn launch_env(self) -> Vec<(String, String)> {
        self.value()
            .map(|v| vec![("GOGC".to_owned(), v)])
            .unwrap_or_default()
    }

    /// The environment of a `terraform` process.
    pub fn terraform(self, cmd: &mut Command) {
        match self {
            Self::GoDefault => cmd.env_remove("GOGC"),
            Self::Percent(n) => cmd.env("GOGC", n.to_string()),
        };
    }

    /// For the table headers.
    pub fn describe(self) -> String {
        match self {
            Self::GoDefault => {
                "GOGC unset for every provider process of both sides (Go's default, \
                100; an operator runs with `--provider-gogc 0` instead of its shipped 50)"
                    .to_owned()
            }
            Self::Percent(n) => format!(
                "GOGC={n} for every provider process of both sides (an operator's \
                 `--provider-gogc {n}`; Terraform's environment, which Terraform itself runs \
                 with too)"
            ),
        }
    }
}

/// A provider process one side started: its executable and the `GOGC` it started with.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seen {
    pub exe: PathBuf,
    pub gogc: Option<String>,
}

/// `pid` as a provider process (its executable named `terraform-provider-*`), or `None`: not
/// one (yet: a child between fork and exec still shows its parent's executable) or gone.
fn provider_of(pid: u32) -> Option<Seen> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let name = exe.file_name()?.to_string_lossy().into_owned();
    if !name.starts_with("terraform-provider-") {
        return None;
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let gogc = environ
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"GOGC="))
        .map(|v| String::from_utf8_lossy(v).into_owned());
    // A binary replaced while running reads `<path> (deleted)`: kept, so hashing it fails.
    Some(Seen { exe, gogc })
}

/// The prefix of every provider executable's name.
pub const ANY_PROVIDER: &str = "terraform-provider-";

/// The process ids of the provider processes below `root` now whose executable's name starts
/// with `name` ([`ANY_PROVIDER`], or one provider's: `terraform-provider-aws`).
pub fn provider_pids(root: u32, name: &str) -> Vec<u32> {
    descendants(root)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| provider_of(*p).is_some_and(|s| named(&s, name)))
        .collect()
}

/// The provider processes below `root` now whose executable's name starts with `name`.
pub fn providers_below(root: u32, name: &str) -> Vec<Seen> {
    descendants(root)
        .unwrap_or_default()
        .into_iter()
        .filter_map(provider_of)
        .filter(|s| named(s, name))
        .collect()
}

fn named(seen: &Seen, name: &str) -> bool {
    seen.exe
        .file_name()
        .is_some_and(|f| f.to_string_lossy().starts_with(name))
}

/// Watches the children of one process on a thread and records every provider process among
/// them. Only processes new since the last look are read (a look costs a listing of /proc),
/// so the watch costs the timed process next to nothing.
pub struct Spy {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<BTreeSet<Seen>>>,
}

impl Spy {
    pub fn start(root: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let (mut parent_of, mut pending) = (HashMap::new(), BTreeSet::new());
            let mut seen = BTreeSet::new();
            loop {
                let last = flag.load(Ordering::Relaxed);
                pending.extend(new_children(root, &mut parent_of));
                pending.retain(|pid| match provider_of(*pid) {
                    Some(s) => {
                        seen.insert(s);
                        false
                    }
                    None => process_alive(*pid),
                });
                if last {
                    return seen;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops watching: every provider process seen.
    pub fn finish(mut self) -> BTreeSet<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Spy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The children of `root` among the processes not looked at before (`parent_of` remembers
/// every process listed, and forgets those gone, whose numbers may be reused).
fn new_children(root: u32, parent_of: &mut HashMap<u32, u32>) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let listed: BTreeSet<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    parent_of.retain(|pid, _| listed.contains(pid));
    let mut children = Vec::new();
    for pid in listed {
        if parent_of.contains_key(&pid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The fields after the command name, which may hold spaces and parentheses.
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1)?.parse().ok());
        if let Some(ppid) = ppid {
            parent_of.insert(pid, ppid);
            if ppid == root {
                children.push(pid);
            }
        }
    }
    children
}

/// SHA-256 of a file, hex; remembered per path, size and mtime (hashicorp/aws is 870 MB).
pub fn sha256_file(path: &Path) -> anyhow::Result<String> {
    use sha2::{Digest as _, Sha256};
    use std::io::Read as _;
    type Key = (PathBuf, u64, SystemTime);
    static MEMO: std::sync::Mutex<BTreeMap<Key, String>> = std::sync::Mutex::new(BTreeMap::new());
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    let key = (path.to_path_buf(), meta.len(), meta.modified()?);
    if let Some(h) = MEMO.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(h.clone());
    }
    let mut file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let (mut hasher, mut buf) = (Sha256::new(), vec![0u8; 1 << 20]);
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    MEMO.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, hex.clone());
    Ok(hex)
}

/// What both sides ran, checked: one provider binary (the test mirror's) and one `GOGC`.
#[derive(Debug, Clone)]
pub struct Identity {
    pub binary: String,
    pub sha256: String,
    pub gogc: Option<String>,
    /// The sides whose processes were seen: "both sides" or "Terraform's side".
    pub sides: &'static str,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = self.sha256.get(..16).unwrap_or(&self.sha256);
        write!(
            f,
            "the same provider binary on {}: {} (sha256 {short}…), GOGC {} in each of its processes",
            self.sides,
            self.binary,
            self.gogc
                .as_deref()
                .map_or("unset (Go's default)".to_owned(), |v| format!("={v}"))
        )
    }
}

/// One side's processes: all of `want`'s bytes and all under one `GOGC`, which is returned.
fn one_side(side: &str, want: &str, seen: &BTreeSet<Seen>) -> anyhow::Result<Option<String>> {
    ensure!(!seen.is_empty(), "no provider process was seen on {side}");
    for s in seen {
        let got =
            sha256_file(&s.exe).with_context(|| format!("hashing the provider {side} ran"))?;
        ensure!(
            got == want,
            "{side} ran {} (sha256 {got}), not the test mirror's binary (sha256 {want})",
            s.exe.display()
        );
    }
    let gogc: BTreeSet<&Option<String>> = seen.iter().map(|s| &s.gogc).collect();
    ensure!(
        gogc.len() == 1,
        "the providers {side} ran had different GOGC: {gogc:?}"
    );
    Ok(seen.iter().next().and_then(|s| s.gogc.clone()))
}

/// Both sides ran exactly `binary` (hashed) under the same `GOGC`, which is `gogc`'s.
pub fn same_provider(
    binary: &Path,
    gogc: Gogc,
    kraken: &BTreeSet<Seen>,
    terraform: &BTreeSet<Seen>,
) -> anyhow::Result<Identity> {
    let want = sha256_file(binary)?;
    let k = one_side("Kraken's side", &want, kraken)?;
    let t = one_side("Terraform's side", &want, terraform)?;
    ensure!(
        k == t && k == gogc.value(),
        "GOGC differs: Kraken's providers {k:?}, Terraform's {t:?}, asked for {:?}",
        gogc.value()
    );
    Ok(identity(binary, want, k, "both sides"))
}

/// For a comparison whose Kraken side runs no provider (the native EC2 path).
pub fn terraform_provider(
    binary: &Path,
    gogc: Gogc,
    terraform: &BTreeSet<Seen>,
) -> anyhow::Result<Identity> {
    let want = sha256_file(binary)?;
    let t = one_side("Terraform's side", &want, terraform)?;
    ensure!(
        t == gogc.value(),
        "Terraform's providers ran with GOGC {t:?}, asked for {:?}",
        gogc.value()
    );
    Ok(identity(binary, want, t, "Terraform's side"))
}

fn identity(binary: &Path, sha256: String, gogc: Option<String>, sides: &'static str) -> Identity {
    let name = binary.file_name().map_or_else(
        || binary.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    Identity {
        binary: name,
        sha256,
        gogc,
        sides,
    }
}

/// `r` to two significant figures: what a ratio of two noisy medians can say (0.79, 0.016,
/// 1.2), never more digits than that.
pub fn fmt_ratio(r: f64) -> String {
    if !r.is_finite() || r <= 0.0 {
        return "—".to_owned();
    }
    let digits = usize::try_from((1 - r.log10().floor() as i64).max(0)).unwrap_or(0);
    format!("{r:.digits$}")
}

/// Seconds to three significant figures.
pub fn fmt_secs(s: f64) -> String {
    let digits = usize::try_from((2 - s.log10().floor() as i64).max(0)).unwrap_or(0);
    format!("{s:.digits$}")
}

/// One ratio: Kraken's time over Terraform's, both at one parallelism.
#[derive(Debug, Clone)]
struct Row {
    what: String,
    level: usize,
    kraken: f64,
    terraform: f64,
}

/// Every Kraken / Terraform ratio a bench measured, printed as one table at its end.
#[derive(Debug, Default)]
pub struct Ratios {
    rows: Vec<Row>,
}

impl Ratios {
    /// Kraken's and Terraform's seconds for `what` at parallelism `level`: both must be
    /// measured (positive and finite), or the bench fails rather than print a NaN.
    pub fn add(
        &mut self,
        what: &str,
        level: usize,
        kraken: f64,
        terraform: f64,
    ) -> anyhow::Result<()> {
        ensure!(
            kraken.is_finite() && kraken > 0.0 && terraform.is_finite() && terraform > 0.0,
            "{what} at parallelism {level}: Kraken {kraken} s, Terraform {terraform} s (not measured?)"
        );
        self.rows.push(Row {
            what: what.to_owned(),
            level,
            kraken,
            terraform,
        });
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table, under `fairness` (what was checked equal on both sides). A comparison that
    /// compared nothing is an error.
    pub fn print(&self, fairness: &[String]) -> anyhow::Result<()> {
        ensure!(
            !self.rows.is_empty(),
            "no Kraken / Terraform ratio was measured"
        );
        println!("\n### Kraken / Terraform, both at the same parallelism\n");
        for line in fairness {
            println!("- {line}");
        }
        println!("\n| comparison | parallelism | Kraken s | Terraform s | Kraken / Terraform |");
        println!("|---|---|---|---|---|");
        for r in &self.rows {
            println!(
                "| {} | {} | {} | {} | **{}** |",
                r.what,
                r.level,
                fmt_secs(r.kraken),
                fmt_secs(r.terraform),
                fmt_ratio(r.kraken / r.terraform)
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_keep_two_significant_figures() {
        assert_eq!(fmt_ratio(0.786), "0.79");
        assert_eq!(fmt_ratio(1.206), "1.2");
        assert_eq!(fmt_ratio(0.0160), "0.016");
        assert_eq!(fmt_ratio(0.000_5), "0.00050");
        assert_eq!(fmt_ratio(12.3), "12");
        assert_eq!(fmt_ratio(f64::NAN), "—");
        assert_eq!(fmt_secs(0.1234), "0.123");
        assert_eq!(fmt_secs(2575.56), "2576");
    }

    #[test]
    fn a_ratio_of_nothing_fails() {
        let mut r = Ratios::default();
        assert!(r.add("create", 10, f64::NAN, 1.0).is_err());
        assert!(r.add("create", 10, 1.0, 0.0).is_err());
        assert!(r.print(&[]).is_err());
        assert!(r.add("create", 10, 1.0, 2.0).is_ok());
    }
}

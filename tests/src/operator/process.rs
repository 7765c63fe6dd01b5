//! Processes under test: finding what runs below a process, and killing a process tree the way
//! a pod's operator dies with its provider plugins.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// How long the processes below a killed operator have to exit after SIGTERM.
const TERM_GRACE: Duration = Duration::from_secs(10);

/// Kill `pid` and all its descendants: an operator dying with its provider processes. The root
/// is stopped first, so that it cannot start a process between the look at /proc and the kill,
/// then SIGKILLed. The processes below it get SIGTERM, and SIGKILL if they are still there
/// after [`TERM_GRACE`]. On SIGTERM the fixture provider finishes the applies it has in flight
/// and exits, the way a cloud completes a request it has begun whatever happens to the caller,
/// so its ledger never holds half a mutation; HashiCorp's providers exit at once. Everything is
/// awaited (a process counts as gone once it is a zombie).
pub fn kill_tree(pid: u32) -> anyhow::Result<()> {
    signal("-STOP", &[pid])?;
    let below = descendants(pid)?;
    signal("-KILL", &[pid])?;
    if below.is_empty() {
        return Ok(());
    }
    signal("-TERM", &below)?;
    let gone = |deadline: Instant| {
        below.iter().all(|p| {
            while process_alive(*p) {
                if Instant::now() > deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            true
        })
    };
    if gone(Instant::now() + TERM_GRACE) {
        return Ok(());
    }
    let left: Vec<u32> = below
        .iter()
        .copied()
        .filter(|p| process_alive(*p))
        .collect();
    eprintln!("kill_tree: {left:?} below {pid} still there {TERM_GRACE:?} after SIGTERM; SIGKILL");
    signal("-KILL", &below)?;
    if !gone(Instant::now() + Duration::from_secs(5)) {
        bail!("a process below the operator {pid} survived SIGKILL: {below:?}");
    }
    Ok(())
}

/// Send a signal with kill(1) (the workspace forbids `unsafe`, so no libc). Processes that
/// are already gone are not an error.
pub(super) fn signal(sig: &str, pids: &[u32]) -> anyhow::Result<()> {
    let out = Command::new("kill")
        .arg(sig)
        .args(pids.iter().map(u32::to_string))
        .output()
        .context("running kill(1)")?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let gone = pids.iter().all(|p| !process_alive(*p));
        if !gone && !stderr.contains("No such process") {
            bail!("kill {sig} {pids:?} failed: {stderr}");
        }
    }
    Ok(())
}

/// Every process below `root`, from /proc (parents before children).
pub fn descendants(root: u32) -> anyhow::Result<Vec<u32>> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").context("listing /proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // Gone between listing and reading: not our concern.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((ppid, _)) = parse_stat(&stat) {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parent_of
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    Ok(found)
}

/// (ppid, state) from /proc/<pid>/stat; the command name may hold spaces and parentheses,
/// so the fields are taken after its last `)`.
fn parse_stat(stat: &str) -> Option<(u32, char)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state))
}

/// True while `pid` exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| parse_stat(&s))
        .is_some_and(|(_, state)| state != 'Z' && state != 'X')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_with_odd_command_names() {
        let stat = "1234 (a) b (c)) S 42 1234 1234 0 -1 4194560";
        assert_eq!(parse_stat(stat), Some((42, 'S')));
    }

    #[test]
    fn kill_tree_kills_grandchildren() -> anyhow::Result<()> {
        // A shell with a background grandchild, like the operator with a provider plugin.
        let mut child = Command::new("sh")
            .args(["-c", "sleep 300 & sleep 300 & wait"])
            .spawn()?;
        let root = child.id();
        let below = crate::wait_for(Duration::from_secs(10), "two sleeps below sh", || {
            let d = descendants(root)?;
            Ok((d.len() == 2).then_some(d))
        })?;
        kill_tree(root)?;
        child.wait()?;
        for pid in below {
            assert!(!process_alive(pid), "{pid} survived kill_tree");
        }
        Ok(())
    }
}

//! Resident memory of a provider process and what it started, from `/proc`.

/// `VmRSS` of process `pid` and of its descendants, in bytes. A descendant that exits while
/// it is read is left out.
pub(super) fn tree_resident_bytes(pid: u32) -> Option<u64> {
    let mut total = resident_bytes(pid)?;
    let mut pending = children(pid);
    // Bounded: a provider starts no process trees of thousands.
    let mut seen = 0;
    while let Some(child) = pending.pop() {
        seen += 1;
        if seen > 256 {
            break;
        }
        total += resident_bytes(child).unwrap_or(0);
        pending.extend(children(child));
    }
    Some(total)
}

/// The children of `pid`, from `/proc/<pid>/task/*/children`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// `VmRSS` of process `pid` in bytes, from `/proc/<pid>/status`.
fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_tree_counts_its_children() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30"])
            .spawn()
            .expect("sh");
        let pid = child.id();
        let mut found = Vec::new();
        for _ in 0..100 {
            found = children(pid);
            if found.len() == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let own = resident_bytes(pid).expect("sh is alive");
        let tree = tree_resident_bytes(pid).expect("sh is alive");
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found.len(), 2, "children of sh: {found:?}");
        assert!(tree > own, "tree {tree} vs own {own}");
        assert!(children(u32::MAX).is_empty());
    }
}

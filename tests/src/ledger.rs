//! Reading the fixture provider's ledger (`tests/fixtures/terraform-provider-fixture`): the
//! "cloud" that tests count objects in. `objects/<id>.json` are the live objects; `events.log`
//! records every real mutation as `<nanos> <op> <id> <name>`; `applies.log` records every
//! ApplyResourceChange call, failed ones included, as a `begin` and an `end` line.

use std::path::Path;

use anyhow::Context as _;

/// How many objects exist in the ledger at `dir`.
pub fn live_objects(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("objects"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .count()
        })
        .unwrap_or(0)
}

/// Per object name: how many (creates, updates, deletes) the ledger at `dir` recorded.
pub fn writes_by_name(
    dir: &Path,
) -> anyhow::Result<std::collections::BTreeMap<String, (usize, usize, usize)>> {
    let mut by = std::collections::BTreeMap::<String, (usize, usize, usize)>::new();
    for e in event_log(dir)? {
        let entry = by.entry(e.name.trim_matches('"').to_owned()).or_default();
        match e.op.as_str() {
            "create" => entry.0 += 1,
            "update" => entry.1 += 1,
            _ => entry.2 += 1,
        }
    }
    Ok(by)
}

/// The ledger at `dir` names exactly `n` objects, each written exactly `each` times
/// (creates, updates, deletes), and `n` are live: nothing was duplicated or lost. The error
/// tells the history of the first objects written otherwise ([`history`]), to line up with the
/// test's own timeline and the operators' logs.
pub fn expect_each(dir: &Path, n: usize, each: (usize, usize, usize)) -> anyhow::Result<()> {
    let writes = writes_by_name(dir)?;
    anyhow::ensure!(
        writes.len() == n,
        "the ledger names {} objects, not {n}",
        writes.len()
    );
    let wrong: Vec<_> = writes.iter().filter(|(_, w)| **w != each).collect();
    if !wrong.is_empty() {
        let log = event_log(dir)?;
        let told: Vec<String> = wrong
            .iter()
            .take(5)
            .map(|(name, w)| format!("{name} {w:?}: {}", history(&log, name)))
            .collect();
        anyhow::bail!(
            "(creates, updates, deletes) per object should be {each:?}, and {} objects differ:\n{}",
            wrong.len(),
            told.join("\n")
        );
    }
    let live = live_objects(dir);
    anyhow::ensure!(live == n, "{live} live objects in the ledger, not {n}");
    Ok(())
}

/// What the ledger recorded for the object `name`, oldest first: each mutation with its object
/// id and its time of day in UTC (the clock of the operators' log lines, [`crate::clock`]).
pub fn history(log: &[Event], name: &str) -> String {
    let lines: Vec<String> = log
        .iter()
        .filter(|e| e.name.trim_matches('"') == name)
        .map(|e| format!("{} {} at {}", e.op, e.id, crate::clock(e.nanos)))
        .collect();
    lines.join(", ")
}

/// Every recorded mutation, oldest first, as `(op, id)` with op in create|update|delete.
pub fn events(dir: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(dir.join("events.log")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace().skip(1);
            Some((it.next()?.to_string(), it.next()?.to_string()))
        })
        .collect()
}

/// One line of `events.log`: a real mutation of the fake cloud.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub nanos: u128,
    /// `create`, `update` or `delete`.
    pub op: String,
    pub id: String,
    /// The object's name (Go-quoted in the file when it has spaces; kept as written).
    pub name: String,
}

/// Every line of `events.log`, oldest first; no file means no events. A malformed line is
/// an error: the fixture writes each line with one `write(2)`, so a torn line is a bug.
pub fn event_log(dir: &Path) -> anyhow::Result<Vec<Event>> {
    let path = dir.join("events.log");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    text.lines()
        .map(|line| {
            let mut it = line.splitn(4, ' ');
            let parsed = (|| {
                Some(Event {
                    nanos: it.next()?.parse().ok()?,
                    op: it.next()?.to_string(),
                    id: it.next()?.to_string(),
                    name: it.next()?.to_string(),
                })
            })();
            parsed.with_context(|| format!("malformed line in {}: {line:?}", path.display()))
        })
        .collect()
}

/// One ApplyResourceChange call of the fixture, from `applies.log`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyCall {
    /// Unix nanoseconds when the provider began handling it (before any apply delay).
    pub begin: u128,
    /// When it returned; None while in flight, or when the process died during it.
    pub end: Option<u128>,
    /// `create`, `update` or `delete`.
    pub op: String,
    /// `<pid>.<n>`: the provider process and its call number.
    pub call: String,
}

/// Every ApplyResourceChange call in `applies.log`, in the order they began; no file means
/// no calls. A malformed line, an `end` without its `begin` or a call begun twice is an
/// error.
pub fn apply_calls(dir: &Path) -> anyhow::Result<Vec<ApplyCall>> {
    let path = dir.join("applies.log");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut calls: Vec<ApplyCall> = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (nanos, phase, op, call) = match fields.as_slice() {
            [nanos, phase, op, call] => (nanos.parse::<u128>().ok(), *phase, *op, *call),
            _ => (None, "", "", ""),
        };
        let nanos =
            nanos.with_context(|| format!("malformed line in {}: {line:?}", path.display()))?;
        let known = calls.iter_mut().find(|c| c.call == call);
        match (phase, known) {
            ("begin", None) => calls.push(ApplyCall {
                begin: nanos,
                end: None,
                op: op.to_string(),
                call: call.to_string(),
            }),
            ("end", Some(c)) if c.end.is_none() && c.op == op => c.end = Some(nanos),
            _ => anyhow::bail!(
                "line {line:?} of {} does not follow its call's earlier lines",
                path.display()
            ),
        }
    }
    calls.sort_by_key(|c| c.begin);
    Ok(calls)
}

/// The largest number of calls in flight at one instant. A call that ends at the very
/// nanosecond another begins does not overlap it; one without an end is in flight to the
/// end of the log.
pub fn max_in_flight(calls: &[ApplyCall]) -> usize {
    // (time, +1 begin / -1 end): ends sort before begins at the same instant.
    let mut marks: Vec<(u128, i32)> = calls
        .iter()
        .flat_map(|c| std::iter::once((c.begin, 1)).chain(c.end.map(|e| (e, -1))))
        .collect();
    marks.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, delta) in marks {
        now += delta;
        max = max.max(now);
    }
    usize::try_from(max).unwrap_or(0)
}

/// The calls of `op` (`create`, `update`, `delete`) the provider was running at `at` (unix
/// nanoseconds): begun before it and not returned by then. For a kill of the operator at `at`,
/// the calls whose answers it never read.
pub fn in_flight_at<'c>(calls: &'c [ApplyCall], op: &str, at: u128) -> Vec<&'c ApplyCall> {
    calls
        .iter()
        .filter(|c| c.op == op && c.begin < at && c.end.is_none_or(|end| end > at))
        .collect()
}

/// The live objects as their JSON files hold them (Terraform attribute names: `id`,
/// `name`, `size`, `secret_token`, ...), sorted by id.
pub fn objects(dir: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let objects = dir.join("objects");
    let entries = match std::fs::read_dir(&objects) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", objects.display())),
    };
    let mut out: Vec<serde_json::Value> = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue; // the fixture's temp files (.tmp-<id>-<n>) while it writes
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            // Deleted between listing and reading: it is not live any more.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        out.push(
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?,
        );
    }
    out.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    Ok(out)
}

/// The live objects whose `name` is `name` (more than one means a duplicate create).
pub fn objects_named(dir: &Path, name: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    Ok(objects(dir)?
        .into_iter()
        .filter(|o| o["name"] == name)
        .collect())
}

/// One live object by id, or None.
pub fn object(dir: &Path, id: &str) -> anyhow::Result<Option<serde_json::Value>> {
    let path = object_path(dir, id)?;
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Change a live object behind the operator's back (drift), atomically as the fixture
/// writes: a temp file the fixture ignores, then a rename. No event line: drift is not a
/// mutation the provider made.
pub fn edit_object(
    dir: &Path,
    id: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> anyhow::Result<()> {
    let mut obj = object(dir, id)?
        .with_context(|| format!("no object {id} in the ledger at {}", dir.display()))?;
    edit(&mut obj);
    write_object(dir, &obj)
}

/// Write an object file (creating or replacing it), atomically, without an event line:
/// an object that exists "in the cloud" without Kraken having created it.
pub fn write_object(dir: &Path, obj: &serde_json::Value) -> anyhow::Result<()> {
    let id = obj["id"]
        .as_str()
        .context("a ledger object needs a string id")?;
    let path = object_path(dir, id)?;
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects)?;
    let tmp = objects.join(format!(".tmp-test-{id}"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(obj)?)?;
    std::fs::rename(&tmp, &path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// Remove a live object behind the operator's back (the object is "gone").
pub fn remove_object(dir: &Path, id: &str) -> anyhow::Result<()> {
    let path = object_path(dir, id)?;
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))
}

fn object_path(dir: &Path, id: &str) -> anyhow::Result<std::path::PathBuf> {
    let ok = id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    anyhow::ensure!(ok, "invalid ledger object id {id:?}");
    Ok(dir.join("objects").join(format!("{id}.json")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_tells_one_objects_writes_with_their_times() {
        let event = |nanos: u128, op: &str, id: &str, name: &str| Event {
            nanos,
            op: op.into(),
            id: id.into(),
            name: name.into(),
        };
        let log = [
            event(1_795_853_190_123_456_789, "create", "o-1", "sh-0001"),
            event(1_795_853_191_000_000_000, "create", "o-2", "sh-0002"),
            event(1_795_853_200_007_000_000, "update", "o-1", "\"sh-0001\""),
        ];
        assert_eq!(
            history(&log, "sh-0001"),
            "create o-1 at 08:06:30.123, update o-1 at 08:06:40.007"
        );
        assert_eq!(history(&log, "sh-0003"), "");
    }
}

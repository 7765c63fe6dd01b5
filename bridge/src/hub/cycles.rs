//! Cycle detection over the hub's dependency graph (requests → the StateDeclarations they
//! read). Pure: the edges come from the caller.

use std::collections::BTreeSet;

/// A cycle through `start`: each object's request reads the next one's StateDeclaration
/// (request and declaration share the name `<kind>-<name>`). `edges` gives the declarations a
/// request reads. Returns the cycle as names, `start` first and last.
pub fn find_cycle(start: &str, edges: &dyn Fn(&str) -> Vec<String>) -> Option<Vec<String>> {
    fn dfs(
        node: &str,
        start: &str,
        edges: &dyn Fn(&str) -> Vec<String>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in edges(node) {
            if next == start {
                path.push(next);
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if dfs(&next, start, edges, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_owned()];
    let mut seen = BTreeSet::new();
    dfs(start, start, edges, &mut path, &mut seen).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn cycles_are_found_through_their_start_only() {
        let graph: BTreeMap<&str, Vec<&str>> = [
            ("a", vec!["b"]),
            ("b", vec!["c", "d"]),
            ("c", vec!["a"]),
            ("d", vec!["d"]),
        ]
        .into();
        let edges = |n: &str| -> Vec<String> {
            graph
                .get(n)
                .map(|v| v.iter().map(|s| (*s).to_owned()).collect())
                .unwrap_or_default()
        };
        let cases: [(&str, Option<Vec<&str>>); 4] = [
            ("a", Some(vec!["a", "b", "c", "a"])),
            ("c", Some(vec!["c", "a", "b", "c"])),
            ("d", Some(vec!["d", "d"])),
            ("e", None),
        ];
        for (start, want) in cases {
            let want = want.map(|v| v.into_iter().map(str::to_owned).collect::<Vec<_>>());
            assert_eq!(find_cycle(start, &edges), want, "from {start}");
        }
    }
}

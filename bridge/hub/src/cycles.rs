//! Cycle detection over the hub's dependency graph (requests → the StateDeclarations they
//! read). Pure: the edges come from the caller.

use std::collections::BTreeSet;

/// A cycle through `start`: each object's request reads the next one's StateDeclaration
/// (request and declaration share the name `<kind>-<name>`). `edges` gives the declarations a
/// request reads. Returns the cycle as names, `start` first and last.
pub fn find_cycle(start: &str, edges: &dyn Fn(&str) -> Vec<String>) -> Option<Vec<String>> {
    // Depth first with an explicit stack: a chain of a hundred thousand references (a tenant's
    // doing) costs memory in proportion, never the thread's stack.
    let mut path = vec![start.to_owned()];
    let mut pending: Vec<std::vec::IntoIter<String>> = vec![edges(start).into_iter()];
    let mut seen = BTreeSet::new();
    while let Some(next) = pending.last_mut().map(Iterator::next) {
        match next {
            Some(next) if next == start => {
                path.push(next);
                return Some(path);
            }
            Some(next) => {
                if seen.insert(next.clone()) {
                    pending.push(edges(&next).into_iter());
                    path.push(next);
                }
            }
            None => {
                pending.pop();
                path.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_very_long_chain_does_not_overflow_the_stack() {
        let n = 200_000;
        let edges = |node: &str| -> Vec<String> {
            let i: usize = node.parse().unwrap_or(0);
            vec![if i + 1 == n {
                "0".to_owned()
            } else {
                (i + 1).to_string()
            }]
        };
        let cycle = find_cycle("0", &edges).expect("the chain closes");
        assert_eq!(cycle.len(), n + 1);
        let open = |node: &str| -> Vec<String> {
            let i: usize = node.parse().unwrap_or(0);
            if i + 1 == n {
                vec![]
            } else {
                vec![(i + 1).to_string()]
            }
        };
        assert_eq!(find_cycle("0", &open), None);
    }

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

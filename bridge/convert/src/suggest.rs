//! "Did you mean": the closest known name to a misspelt one.

/// The candidate closest to `name` by edit distance, when it is close enough to be a typo
/// (at most a third of the name's length, and at least 1 and at most 3 edits).
pub fn closest<'c>(name: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    let limit = (name.chars().count() / 3).clamp(1, 3);
    candidates
        .into_iter()
        .map(|c| (distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

/// `, did you mean X?` for a message, or nothing.
pub fn hint<'c>(name: &str, candidates: impl IntoIterator<Item = &'c str>) -> String {
    closest(name, candidates)
        .map(|c| format!("; did you mean {c}?"))
        .unwrap_or_default()
}

/// Edit distance over characters, a swap of neighbours counting as one edit (optimal string
/// alignment).
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_the_name_and_a_stranger_finds_nothing() {
        let types = ["aws_instance", "aws_vpc", "aws_subnet", "aws_sqs_queue"];
        assert_eq!(closest("aws_instnace", types), Some("aws_instance"));
        assert_eq!(closest("aws_vcp", types), Some("aws_vpc"));
        assert_eq!(closest("aws_sqs_queues", types), Some("aws_sqs_queue"));
        assert_eq!(closest("google_compute_instance", types), None);
        assert_eq!(closest("sise", ["size", "name"]), Some("size"));
        assert_eq!(hint("nmae", ["name"]), "; did you mean name?");
        assert_eq!(hint("x", ["name"]), "");
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}

//! Versions and version constraints with Terraform's semantics (`apparentlymart/go-versions`,
//! Ruby-style syntax): `~> 1.2` is `>= 1.2.0, < 2.0.0`, `~> 1.2.3` is `>= 1.2.3, < 1.3.0`, a
//! bare version means `=`, missing parts are zero, and a prerelease is only ever selected when
//! an `=` term names it exactly. Build metadata never affects ordering.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// A malformed version or constraint string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("invalid version {0:?}: expected MAJOR[.MINOR[.PATCH]][-PRERELEASE][+METADATA]")]
    Version(String),
    #[error("invalid version constraint {0:?}")]
    Constraint(String),
}

/// A semantic version as registries publish them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    /// Empty for a release.
    pub prerelease: String,
    pub metadata: String,
}

impl Version {
    pub fn is_prerelease(&self) -> bool {
        !self.prerelease.is_empty()
    }

    /// Semantic-versioning precedence (metadata ignored).
    pub fn precedence(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| cmp_prerelease(&self.prerelease, &other.prerelease))
    }

    /// Parse, also reporting how many numeric parts were written (for `~>`).
    fn parse_counted(s: &str) -> Result<(Self, usize), VersionError> {
        let err = || VersionError::Version(s.to_string());
        let (rest, metadata) = match s.split_once('+') {
            Some((r, m)) if valid_idents(m) => (r, m),
            Some(_) => return Err(err()),
            None => (s, ""),
        };
        let (nums, prerelease) = match rest.split_once('-') {
            Some((n, p)) if valid_idents(p) => (n, p),
            Some(_) => return Err(err()),
            None => (rest, ""),
        };
        let parts: Vec<&str> = nums.split('.').collect();
        if parts.is_empty() || parts.len() > 3 {
            return Err(err());
        }
        let mut n = [0u64; 3];
        for (slot, p) in n.iter_mut().zip(&parts) {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err());
            }
            *slot = p.parse().map_err(|_| err())?;
        }
        let v = Version {
            major: n[0],
            minor: n[1],
            patch: n[2],
            prerelease: prerelease.to_string(),
            metadata: metadata.to_string(),
        };
        Ok((v, parts.len()))
    }
}

fn valid_idents(s: &str) -> bool {
    !s.is_empty()
        && s.split('.')
            .all(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

/// Prerelease precedence: a release ranks above any prerelease; dot-separated identifiers
/// compare numerically when both are numeric, numeric ranks below alphanumeric.
fn cmp_prerelease(a: &str, b: &str) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        _ => {}
    }
    let mut ia = a.split('.');
    let mut ib = b.split('.');
    loop {
        match (ia.next(), ib.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let ord = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(m), Ok(n)) => m.cmp(&n),
                    (Ok(_), Err(_)) => Ordering::Less,
                    (Err(_), Ok(_)) => Ordering::Greater,
                    (Err(_), Err(_)) => x.cmp(y),
                };
                if ord != Ordering::Equal {
                    return ord;
                }
            }
        }
    }
}

impl Ord for Version {
    /// Precedence first; metadata only breaks ties so that the order stays total.
    fn cmp(&self, other: &Self) -> Ordering {
        self.precedence(other)
            .then_with(|| self.metadata.cmp(&other.metadata))
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl FromStr for Version {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_counted(s).map(|(v, _)| v)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.prerelease.is_empty() {
            write!(f, "-{}", self.prerelease)?;
        }
        if !self.metadata.is_empty() {
            write!(f, "+{}", self.metadata)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    /// `~> X.Y` (or `~> X`): at least X.Y.0, below (X+1).0.0.
    PessimisticMinor,
    /// `~> X.Y.Z`: at least X.Y.Z, below X.(Y+1).0.
    PessimisticPatch,
}

impl Op {
    /// The order Terraform writes terms in when several share a boundary.
    fn priority(self) -> u8 {
        match self {
            Op::Gt => 1,
            Op::Ge => 2,
            Op::Eq => 3,
            Op::PessimisticPatch => 4,
            Op::PessimisticMinor => 5,
            Op::Le => 6,
            Op::Lt => 7,
            Op::Ne => 8,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Term {
    op: Op,
    version: Version,
}

impl Term {
    fn allows(&self, v: &Version) -> bool {
        let b = &self.version;
        let ord = v.precedence(b);
        match self.op {
            // Metadata only matters for exact matches, as in go-versions.
            Op::Eq => ord.is_eq() && (b.metadata.is_empty() || b.metadata == v.metadata),
            Op::Ne => !(ord.is_eq() && (b.metadata.is_empty() || b.metadata == v.metadata)),
            Op::Gt => ord.is_gt(),
            Op::Ge => ord.is_ge(),
            Op::Lt => ord.is_lt(),
            Op::Le => ord.is_le(),
            Op::PessimisticMinor => ord.is_ge() && v.major == b.major,
            Op::PessimisticPatch => ord.is_ge() && v.major == b.major && v.minor == b.minor,
        }
    }
}

/// A conjunction of version terms such as `>= 1.0, < 2.0`. The empty set allows every release.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionConstraints {
    terms: Vec<Term>,
}

impl VersionConstraints {
    /// Constraints that allow every release.
    pub fn any() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether `v` meets every term. A prerelease must also be named exactly by an `=` term.
    pub fn allows(&self, v: &Version) -> bool {
        if !self.terms.iter().all(|t| t.allows(v)) {
            return false;
        }
        !v.is_prerelease()
            || self
                .terms
                .iter()
                .any(|t| t.op == Op::Eq && t.version.precedence(v).is_eq())
    }

    /// The newest version in `available` that the constraints allow.
    pub fn newest<'a>(
        &self,
        available: impl IntoIterator<Item = &'a Version>,
    ) -> Option<&'a Version> {
        available.into_iter().filter(|v| self.allows(v)).max()
    }

    /// Terraform's canonical form, the one lock files record: deduplicated, sorted by boundary,
    /// `~>` with two parts when it pins the major version only.
    pub fn canonical(&self) -> String {
        let mut terms: Vec<&Term> = Vec::new();
        for t in &self.terms {
            if !terms.contains(&t) {
                terms.push(t);
            }
        }
        terms.sort_by(|a, b| {
            a.version
                .precedence(&b.version)
                .then(a.op.priority().cmp(&b.op.priority()))
        });
        let rendered: Vec<String> = terms.iter().map(|t| render_term(t)).collect();
        rendered.join(", ")
    }
}

fn render_term(t: &Term) -> String {
    let op = match t.op {
        Op::Eq => "",
        Op::Ne => "!= ",
        Op::Gt => "> ",
        Op::Ge => ">= ",
        Op::Lt => "< ",
        Op::Le => "<= ",
        Op::PessimisticMinor | Op::PessimisticPatch => "~> ",
    };
    let v = &t.version;
    let mut s = if t.op == Op::PessimisticMinor {
        format!("{op}{}.{}", v.major, v.minor)
    } else {
        format!("{op}{}.{}.{}", v.major, v.minor, v.patch)
    };
    if !v.prerelease.is_empty() {
        s.push('-');
        s.push_str(&v.prerelease);
    }
    if !v.metadata.is_empty() {
        s.push('+');
        s.push_str(&v.metadata);
    }
    s
}

impl FromStr for VersionConstraints {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().is_empty() {
            return Ok(Self::any());
        }
        let terms = s
            .split(',')
            .map(|raw| {
                parse_term(raw.trim()).ok_or_else(|| VersionError::Constraint(s.to_string()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { terms })
    }
}

fn parse_term(raw: &str) -> Option<Term> {
    const OPS: [&str; 7] = ["~>", ">=", "<=", "!=", ">", "<", "="];
    let op_str = OPS
        .iter()
        .find(|op| raw.starts_with(**op))
        .copied()
        .unwrap_or("");
    let rest = &raw[op_str.len()..];
    // One optional space after an operator, none before a bare version (Terraform refuses more).
    let rest = if op_str.is_empty() {
        rest
    } else {
        rest.strip_prefix(' ').unwrap_or(rest)
    };
    if rest.is_empty() || rest.starts_with(' ') || rest.starts_with('v') {
        return None;
    }
    let (version, parts) = Version::parse_counted(rest).ok()?;
    let op = match op_str {
        "" | "=" => Op::Eq,
        "!=" => Op::Ne,
        ">" => Op::Gt,
        ">=" => Op::Ge,
        "<" => Op::Lt,
        "<=" => Op::Le,
        _ if parts == 3 => Op::PessimisticPatch,
        _ => Op::PessimisticMinor,
    };
    Some(Term { op, version })
}

impl fmt::Display for VersionConstraints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn c(s: &str) -> VersionConstraints {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn constraint_table() {
        // (constraint, version, allowed)
        let cases = [
            ("~> 3.6", "3.6.0", true),
            ("~> 3.6", "3.9.1", true),
            ("~> 3.6", "4.0.0", false),
            ("~> 3.6", "3.5.9", false),
            ("~> 3.6.1", "3.6.9", true),
            ("~> 3.6.1", "3.7.0", false),
            ("~> 3", "3.99.0", true),
            ("~> 3", "4.0.0", false),
            (">= 1.0, < 2.0", "1.9.9", true),
            (">= 1.0, < 2.0", "2.0.0", false),
            ("= 1.2.3", "1.2.3", true),
            ("1.2.3", "1.2.4", false),
            ("1.2", "1.2.0", true),
            ("!= 1.4.0", "1.4.0", false),
            ("!= 1.4.0", "1.4.1", true),
            (">1.0", "1.0.1", true),
            ("", "0.0.1", true),
            // prereleases only when named exactly
            (">= 1.0", "2.0.0-beta1", false),
            ("~> 2.0", "2.1.0-rc1", false),
            ("= 2.0.0-beta1", "2.0.0-beta1", true),
            ("2.0.0-beta1", "2.0.0-beta2", false),
            ("2.0.0-beta1, < 2.0.0-alpha", "2.0.0-beta1", false),
            // metadata ignored except for exact matches that name it
            (">= 1.0", "1.0.0+linux", true),
            ("= 1.0.0+a", "1.0.0+b", false),
        ];
        for (cons, ver, want) in cases {
            assert_eq!(c(cons).allows(&v(ver)), want, "{cons:?} allows {ver}");
        }
    }

    #[test]
    fn newest_match_wins() {
        let all: Vec<Version> = ["3.5.1", "3.6.0", "3.6.2", "4.0.0", "3.7.0-beta"]
            .iter()
            .map(|s| v(s))
            .collect();
        assert_eq!(c("~> 3.6").newest(&all), Some(&v("3.6.2")));
        assert_eq!(c("< 3.6").newest(&all), Some(&v("3.5.1")));
        assert_eq!(c("").newest(&all), Some(&v("4.0.0")));
        assert_eq!(c("> 5").newest(&all), None);
    }

    #[test]
    fn ordering_follows_semver() {
        let mut vs: Vec<Version> = [
            "1.0.0",
            "1.0.0-rc.1",
            "1.0.0-beta.11",
            "1.0.0-beta.2",
            "1.0.0-alpha",
            "0.9.0",
        ]
        .iter()
        .map(|s| v(s))
        .collect();
        vs.sort();
        let got: Vec<String> = vs.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "0.9.0",
                "1.0.0-alpha",
                "1.0.0-beta.2",
                "1.0.0-beta.11",
                "1.0.0-rc.1",
                "1.0.0"
            ]
        );
    }

    #[test]
    fn canonical_form_matches_terraform() {
        let cases = [
            ("~> 3.6", "~> 3.6"),
            ("~> 3", "~> 3.0"),
            ("~>3.6.1", "~> 3.6.1"),
            ("< 2.0, >= 1.0", ">= 1.0.0, < 2.0.0"),
            ("= 1.2.3", "1.2.3"),
            ("1.2", "1.2.0"),
            (">= 2.0, >= 2.0.0", ">= 2.0.0"),
            ("!= 1.4.0, > 1.0", "> 1.0.0, != 1.4.0"),
        ];
        for (input, want) in cases {
            assert_eq!(c(input).canonical(), want, "{input}");
        }
    }

    #[test]
    fn malformed_constraints_are_refused() {
        for bad in [
            "=> 1.0", "v1.0", "~>  1.0", " 1.0 1.1", "1.2.3.4", ">= ", "1.x", "1.0,", "1..0",
        ] {
            assert!(bad.parse::<VersionConstraints>().is_err(), "{bad:?} parsed");
        }
    }
}

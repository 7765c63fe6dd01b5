//! The one naming rule for the objects Kraken derives from an object (its state Secret,
//! StateDeclaration, DependencyRequest, outputs and values Secrets), and bounded label values.
//!
//! A derived name is `<kind>-<name>.<group>` plus a suffix, lowercased, where `<group>` is the
//! API group shortened to the provider's name for bridged kinds (`random.tf.kraken.dev` →
//! `random`) and kept whole otherwise (`aws.kraken.dev`): `pet-web.random`,
//! `pet-web.random-tfstate`, `ec2instance-web.aws.kraken.dev-outputs`. The group keeps two
//! providers' kinds of the same name (`S3Bucket` from two providers) apart in one namespace.
//! Any input stays within Kubernetes' 253 characters: a name that would be longer is cut and
//! carries a hash of the whole. Names are unique per (group, kind, name) for every input that
//! is not built to collide; one that is (a name crafted to spell another object's derived
//! name) is caught by the ownership check every derived write makes (`NotOwned`).

use super::hash::fnv1a;

/// The longest Kubernetes object name (a DNS subdomain).
pub const MAX_NAME: usize = 253;
/// The longest label value.
pub const MAX_LABEL_VALUE: usize = 63;

/// The group suffix every bridged kind's API group ends with.
const BRIDGED_GROUPS: &str = ".tf.kraken.dev";

/// Who a derived object is derived from: the object's API group, kind and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
}

impl<'a> Origin<'a> {
    pub fn new(group: &'a str, kind: &'a str, name: &'a str) -> Self {
        Self { group, kind, name }
    }

    /// The StateDeclaration's and the DependencyRequest's name (no suffix).
    pub fn base(&self) -> String {
        bounded(&self.head(), "", MAX_NAME)
    }

    /// The derived name ending in `suffix` (`-tfstate`, `-outputs`, `-values`), at most
    /// [`MAX_NAME`] characters.
    pub fn with_suffix(&self, suffix: &str) -> String {
        suffixed(&self.base(), suffix)
    }

    fn head(&self) -> String {
        let group = self
            .group
            .strip_suffix(BRIDGED_GROUPS)
            .filter(|g| !g.is_empty())
            .unwrap_or(self.group);
        if group.is_empty() {
            format!("{}-{}", self.kind, self.name)
        } else {
            format!("{}-{}.{group}", self.kind, self.name)
        }
        .to_lowercase()
    }
}

/// The name of an object derived from the object named `base` (a StateDeclaration's outputs
/// Secret, a DependencyRequest's values Secret): `base` + `suffix`, within [`MAX_NAME`].
pub fn suffixed(base: &str, suffix: &str) -> String {
    bounded(base, suffix, MAX_NAME)
}

/// `value` as a label value: itself when it fits in [`MAX_LABEL_VALUE`] characters, else cut
/// and ending in a hash of the whole (label values are compared, never parsed back).
pub fn label_value(value: &str) -> String {
    bounded(value, "", MAX_LABEL_VALUE)
}

/// `head` + `suffix` when it fits in `max` characters; else `head` cut, a hash of
/// `head + suffix`, then `suffix`. The cut never ends in `-` or `.` (names must end in an
/// alphanumeric character before the suffix's own).
fn bounded(head: &str, suffix: &str, max: usize) -> String {
    let full = format!("{head}{suffix}");
    if full.len() <= max {
        return full;
    }
    let hash = format!("{:016x}", fnv1a(full.as_bytes()));
    let keep = max.saturating_sub(hash.len() + 1 + suffix.len());
    let cut: String = head.chars().take(keep).collect();
    let cut = cut.trim_end_matches(['-', '.', '_']);
    if cut.is_empty() {
        format!("{hash}{suffix}")
    } else {
        format!("{cut}-{hash}{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_group() {
        let pet = Origin::new("random.tf.kraken.dev", "Pet", "web");
        assert_eq!(pet.base(), "pet-web.random");
        assert_eq!(pet.with_suffix("-tfstate"), "pet-web.random-tfstate");
        let ec2 = Origin::new("aws.kraken.dev", "EC2Instance", "web");
        assert_eq!(
            ec2.with_suffix("-outputs"),
            "ec2instance-web.aws.kraken.dev-outputs"
        );
        // The same kind and name from two providers: two names.
        let other = Origin::new("fixture.tf.kraken.dev", "Pet", "web");
        assert_ne!(pet.base(), other.base());
        assert_ne!(pet.with_suffix("-tfstate"), other.with_suffix("-tfstate"));
    }

    #[test]
    fn names_stay_bounded_distinct_and_stable_for_any_input() {
        let long = "a".repeat(MAX_NAME);
        for suffix in ["", "-tfstate", "-outputs", "-values"] {
            let a = Origin::new("random.tf.kraken.dev", "Pet", &long).with_suffix(suffix);
            let b = Origin::new("fixture.tf.kraken.dev", "Pet", &long).with_suffix(suffix);
            let c = Origin::new("random.tf.kraken.dev", "Pet", &long[1..]).with_suffix(suffix);
            for n in [&a, &b, &c] {
                assert!(n.len() <= MAX_NAME, "{} characters", n.len());
                assert!(n.ends_with(suffix));
                assert!(!n.starts_with(['-', '.']));
            }
            assert_ne!(a, b);
            assert_ne!(a, c);
            assert_eq!(
                a,
                Origin::new("random.tf.kraken.dev", "Pet", &long).with_suffix(suffix)
            );
        }
    }

    #[test]
    fn label_values_fit() {
        assert_eq!(label_value("web"), "web");
        let long = "x".repeat(200);
        let v = label_value(&long);
        assert!(v.len() <= MAX_LABEL_VALUE, "{}", v.len());
        assert_ne!(v, label_value(&"x".repeat(199)));
    }
}

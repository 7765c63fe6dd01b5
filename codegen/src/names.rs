//! Terraform names ↔ Kubernetes names: kinds, plurals and field names.
//!
//! Everything here is a pure function of the provider schema, so the runtime (the bridge)
//! recomputes exactly the mapping codegen used by calling the same functions on the same
//! schema; the CRD additionally carries the irregular cases in an annotation for tools that
//! do not have the schema at hand.
//!
//! # Kinds
//!
//! [`kind_for`] strips the provider prefix from the resource type and converts the rest to
//! PascalCase (`random_pet` → `Pet`, `aws_s3_bucket` → `S3Bucket`). A type equal to the
//! provider name, or without the prefix, keeps its whole name (`time` → `Time`).
//! [`plural_for`] lowercases the kind and applies English pluralisation.
//!
//! # Field names
//!
//! The names of one object level (a block's attributes and nested block types, a nested
//! attribute's attributes, an object type's attributes) are mapped together by
//! [`field_names`], so that the mapping is a bijection at that level:
//!
//! 1. Every Terraform name gets a *base* name: heck's lowerCamelCase, reduced to ASCII
//!    letters and digits, with `x` prepended when it would be empty or start with a digit
//!    (`foo_bar` → `fooBar`, `foo__bar` → `fooBar`, `3d` → `x3d`).
//! 2. A base name ending in `SecretRef` is reserved: Kraken derives `<field>SecretRef` from
//!    every sensitive argument, so no real attribute may own such a name.
//! 3. Each unreserved base name goes to one owner: the Terraform name that equals the
//!    base name's snake_case (the *regular* name) if there is one, else the smallest
//!    Terraform name (byte order) that produced it.
//! 4. Every remaining Terraform name, in byte order, gets its base name followed by the
//!    smallest integer ≥ 2 not yet taken at this level (`fooBar2`, `xSecretRef2`).
//!
//! Because generated names never end in `SecretRef`, `<field>SecretRef` never collides with
//! another field, and because names are assigned to the whole level at once, the result
//! does not depend on the order of the input.
//!
//! A field name is *irregular* when its Terraform name is not the snake_case of the field
//! name (`foo__bar` ↔ `fooBar2`, `foo_1` ↔ `foo1`). Only irregular names are recorded in the
//! `tf.kraken.dev/field-names` annotation; [`FieldNames::irregular`] lists them.
//!
//! # For the runtime
//!
//! To convert between a custom resource and a Terraform value, call [`field_names`] once per
//! object level with *all* names of that level — sensitive, computed and write-only ones
//! included, so spec and status share one mapping — and walk the value:
//!
//! - a block level has its attributes and nested block types; a nested attribute
//!   (protocol 6) level its attributes; an `object(...)` type its attributes;
//! - list, set and map elements are not levels (map keys are user data, never renamed);
//! - `dynamic` and tuple values are plain JSON keyed by Terraform's own names;
//! - a sensitive argument `x` is `<to_kube(x)>SecretRef` in `spec.forProvider`
//!   ([`SECRET_REF_SUFFIX`]), and named by `to_kube(x)` in `valuesFrom[].path`.

use std::collections::{BTreeMap, BTreeSet};

use heck::{ToLowerCamelCase, ToSnakeCase, ToUpperCamelCase};

/// The suffix of the field that replaces a sensitive argument in `spec.forProvider`.
pub const SECRET_REF_SUFFIX: &str = "SecretRef";

/// The longest kind that leaves room for its list kind (`<kind>List`) within the 63
/// characters of a DNS-1035 label, which the API server requires of both once lowercased.
pub const MAX_KIND_LEN: usize = 59;

/// Long words abbreviated, in this order, when a kind would exceed [`MAX_KIND_LEN`]; the
/// abbreviations are the ones the providers' own docs and AWS's APIs use.
const ABBREVIATIONS: &[(&str, &str)] = &[
    ("Configuration", "Config"),
    ("Association", "Assoc"),
    ("Notification", "Notif"),
    ("Authorization", "Authz"),
    ("Authentication", "Authn"),
    ("Certificate", "Cert"),
    ("Application", "App"),
    ("Environment", "Env"),
    ("Organization", "Org"),
    ("Replication", "Repl"),
    ("Attachment", "Attach"),
    ("Management", "Mgmt"),
    ("Additional", "Addl"),
    ("Permission", "Perm"),
    ("Specification", "Spec"),
];

/// The Kubernetes kind for a resource (or data source) type of a provider.
///
/// A kind longer than [`MAX_KIND_LEN`] has long words abbreviated (`Association` → `Assoc`)
/// until it fits; should that not suffice, it is cut and ends in 8 hex digits of a hash of the
/// type name, so distinct types keep distinct kinds. The CRD's `tf.kraken.dev/resource-type`
/// annotation always names the type exactly.
pub fn kind_for(provider_type: &str, resource_type: &str) -> String {
    let stripped = strip_provider_prefix(provider_type, resource_type);
    let kind = pascal(stripped);
    // A kind must start with a letter (it is a DNS-1035 label once lowercased); a type like
    // `random_1x` keeps its provider prefix instead.
    let kind = if kind.starts_with(|c: char| c.is_ascii_alphabetic()) {
        kind
    } else {
        pascal(resource_type)
    };
    shorten_kind(kind, resource_type)
}

fn shorten_kind(mut kind: String, resource_type: &str) -> String {
    for (long, short) in ABBREVIATIONS {
        if kind.len() <= MAX_KIND_LEN {
            return kind;
        }
        kind = kind.replace(long, short);
    }
    if kind.len() <= MAX_KIND_LEN {
        return kind;
    }
    let hash = format!("{:08x}", fnv1a(resource_type.as_bytes()));
    kind.truncate(MAX_KIND_LEN - hash.len());
    kind + &hash
}

/// 32-bit FNV-1a: tiny, stable across releases and platforms, and plenty to tell apart the
/// few types whose kinds need cutting.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// The resource type without its `<provider>_` prefix, when it has one.
///
/// A hyphenated provider (`google-beta`) names its types after the part before the hyphen
/// (`google_compute_instance`), so that prefix is tried too.
fn strip_provider_prefix<'a>(provider_type: &str, resource_type: &'a str) -> &'a str {
    let candidates = [Some(provider_type), provider_type.split('-').next()];
    for prefix in candidates.into_iter().flatten() {
        if let Some(rest) = resource_type
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('_'))
            && !rest.is_empty()
        {
            return rest;
        }
    }
    resource_type
}

fn pascal(name: &str) -> String {
    name.to_upper_camel_case()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect()
}

/// The plural resource name for a kind: lowercase, English pluralisation (`Pet` → `pets`,
/// `Bus` → `buses`, `Policy` → `policies`, `Key` → `keys`).
///
/// One refinement over the plain suffix rules: a kind that already reads as a plural — an
/// `s` after a letter other than `s`, `u`, `i` or `a` (`Bytes`, `Settings`, `Defaults`) —
/// is left as it is, so `random_bytes` is served as `bytes`, not `byteses`. Words like
/// `Status`, `Address`, `Alias` or `Analysis` still get `es`.
pub fn plural_for(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    let mut rev = lower.chars().rev();
    let (last, before) = (rev.next(), rev.next());
    let reads_plural = last == Some('s')
        && before.is_some_and(|c| c.is_ascii_alphabetic() && !matches!(c, 's' | 'u' | 'i' | 'a'));
    let consonant_y =
        last == Some('y') && before.is_some_and(|c| !matches!(c, 'a' | 'e' | 'i' | 'o' | 'u'));
    if reads_plural {
        lower
    } else if consonant_y {
        format!("{}ies", &lower[..lower.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|s| lower.ends_with(s))
    {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// The base Kubernetes name of one Terraform name (rule 1 in the module docs).
fn base_name(tf_name: &str) -> String {
    let camel: String = tf_name
        .to_lower_camel_case()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    if camel.starts_with(|c: char| c.is_ascii_alphabetic()) {
        camel
    } else {
        format!("x{camel}")
    }
}

/// Whether `field` is reserved for secret references (rule 2).
fn is_reserved(field: &str) -> bool {
    field.ends_with(SECRET_REF_SUFFIX)
}

/// Whether the Terraform name is exactly what the field name's snake_case gives back.
pub fn is_regular(field: &str, tf_name: &str) -> bool {
    field.to_snake_case() == tf_name
}

/// The bijection between the Terraform names of one object level and their Kubernetes
/// field names. Built by [`field_names`]; see the module docs for the rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldNames {
    to_kube: BTreeMap<String, String>,
    to_tf: BTreeMap<String, String>,
}

impl FieldNames {
    /// The Kubernetes field name of a Terraform attribute of this level.
    pub fn to_kube(&self, tf_name: &str) -> Option<&str> {
        self.to_kube.get(tf_name).map(String::as_str)
    }

    /// The Terraform attribute name of a Kubernetes field of this level.
    pub fn to_tf(&self, field: &str) -> Option<&str> {
        self.to_tf.get(field).map(String::as_str)
    }

    /// (Kubernetes field, Terraform name) pairs, ordered by field name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.to_tf.iter().map(|(k, t)| (k.as_str(), t.as_str()))
    }

    /// The pairs whose Terraform name is not the snake_case of the field name.
    pub fn irregular(&self) -> impl Iterator<Item = (&str, &str)> {
        self.iter().filter(|(k, t)| !is_regular(k, t))
    }

    pub fn len(&self) -> usize {
        self.to_tf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.to_tf.is_empty()
    }

    fn assign(&mut self, tf_name: &str, field: String) {
        self.to_kube.insert(tf_name.to_owned(), field.clone());
        self.to_tf.insert(field, tf_name.to_owned());
    }
}

/// Maps the Terraform names of one object level to unique Kubernetes field names.
/// Duplicates in the input are ignored; the result does not depend on input order.
pub fn field_names<'a>(attrs: impl IntoIterator<Item = &'a str>) -> FieldNames {
    let names: BTreeSet<&str> = attrs.into_iter().collect();
    let mut by_base: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for name in &names {
        by_base.entry(base_name(name)).or_default().push(name);
    }
    let mut out = FieldNames::default();
    // Rule 3: each unreserved base name goes to its regular owner, else the smallest name.
    for (base, owners) in &by_base {
        if is_reserved(base) {
            continue;
        }
        let owner = owners
            .iter()
            .find(|n| is_regular(base, n))
            .unwrap_or(&owners[0]);
        out.assign(owner, base.clone());
    }
    // Rule 4: everyone else gets the first free numbered variant of their base name.
    for name in &names {
        if out.to_kube.contains_key(*name) {
            continue;
        }
        let base = base_name(name);
        let mut n = 2u64;
        let field = loop {
            let candidate = format!("{base}{n}");
            if !out.to_tf.contains_key(&candidate) {
                break candidate;
            }
            n += 1;
        };
        out.assign(name, field);
    }
    out
}

/// The CEL identifier for a field name: Kubernetes escapes CEL's reserved words as
/// `__word__` (field names made by [`field_names`] contain nothing else that needs escaping).
pub fn cel_field(field: &str) -> String {
    const RESERVED: &[&str] = &[
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    if RESERVED.contains(&field) {
        format!("__{field}__")
    } else {
        field.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_strip_the_provider_prefix() {
        let cases = [
            ("random", "random_pet", "Pet"),
            ("aws", "aws_s3_bucket", "S3Bucket"),
            ("time", "time", "Time"),
            ("random", "other_thing", "OtherThing"),
            ("random", "random_", "Random"),
            ("google-beta", "google_compute_instance", "ComputeInstance"),
            ("random", "random_1x", "Random1x"),
            ("null", "null_resource", "Resource"),
            (
                "aws",
                "aws_vpc_ipv4_cidr_block_association",
                "VpcIpv4CidrBlockAssociation",
            ),
        ];
        for (provider, ty, want) in cases {
            assert_eq!(kind_for(provider, ty), want, "{provider} {ty}");
        }
    }

    #[test]
    fn plurals_follow_english_rules() {
        let cases = [
            ("Pet", "pets"),
            ("S3Bucket", "s3buckets"),
            ("Bus", "buses"),
            ("Box", "boxes"),
            ("Quiz", "quizes"),
            ("Branch", "branches"),
            ("Mesh", "meshes"),
            ("Policy", "policies"),
            ("Key", "keys"),
            ("Gateway", "gateways"),
            ("Y", "ys"),
            ("Id", "ids"),
            ("Bytes", "bytes"),
            ("Settings", "settings"),
            ("Status", "statuses"),
            ("Address", "addresses"),
            ("Alias", "aliases"),
            ("Analysis", "analysises"),
            ("S3s", "s3ses"),
        ];
        for (kind, want) in cases {
            assert_eq!(plural_for(kind), want, "{kind}");
        }
    }

    fn mapping(names: &[&str]) -> Vec<(String, String)> {
        let fields = field_names(names.iter().copied());
        names
            .iter()
            .map(|n| {
                let k = fields.to_kube(n).expect("every name is mapped").to_owned();
                assert_eq!(fields.to_tf(&k), Some(*n), "inverse of {k}");
                (n.to_string(), k)
            })
            .collect()
    }

    #[test]
    fn field_names_camel_case_and_resolve_collisions() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["foo_bar"], &["fooBar"]),
            (
                &["foo_bar", "fooBar", "foo__bar"],
                &["fooBar", "fooBar2", "fooBar3"],
            ),
            // The regular owner keeps the base name whatever the byte order says.
            (&["fooBar", "foo_bar"], &["fooBar2", "fooBar"]),
            (&["foo__bar", "fooBar"], &["fooBar2", "fooBar"]),
            // A numbered variant never steals a real base name.
            (&["a_b", "a__b", "a_b2"], &["aB", "aB3", "aB2"]),
            (&["s3_bucket", "ipv6_cidr"], &["s3Bucket", "ipv6Cidr"]),
            (&["3d", "_", ""], &["x3d", "x2", "x"]),
            (&["x_secret_ref", "x"], &["xSecretRef2", "x"]),
            (&["secret_ref"], &["secretRef"]),
            (&["namespace", "in"], &["namespace", "in"]),
        ];
        for (names, want) in cases {
            let got = mapping(names);
            let got: Vec<&str> = got.iter().map(|(_, k)| k.as_str()).collect();
            assert_eq!(&got, want, "{names:?}");
        }
    }

    #[test]
    fn field_names_do_not_depend_on_input_order() {
        let a = field_names(["foo_bar", "fooBar", "foo__bar", "x_secret_ref"]);
        let b = field_names(["x_secret_ref", "foo__bar", "fooBar", "foo_bar", "fooBar"]);
        assert_eq!(a, b);
        assert_eq!(a.len(), 4);
    }

    #[test]
    fn secret_refs_never_collide_with_fields() {
        let names = [
            "password",
            "password_secret_ref",
            "passwordSecretRef",
            "p_secret_ref2",
        ];
        let fields = field_names(names);
        let all: BTreeSet<&str> = fields.iter().map(|(k, _)| k).collect();
        for (k, _) in fields.iter() {
            assert!(!is_reserved(k), "{k} is reserved");
            assert!(!all.contains(format!("{k}{SECRET_REF_SUFFIX}").as_str()));
        }
    }

    #[test]
    fn irregular_names_are_exactly_the_non_snake_ones() {
        let fields = field_names(["foo_bar", "foo__bar", "foo_1", "a_b_c", "id"]);
        let irregular: Vec<_> = fields.irregular().collect();
        assert_eq!(
            irregular,
            vec![("aBC", "a_b_c"), ("foo1", "foo_1"), ("fooBar2", "foo__bar")]
        );
    }

    #[test]
    fn cel_escapes_reserved_words_only() {
        assert_eq!(cel_field("namespace"), "__namespace__");
        assert_eq!(cel_field("length"), "length");
        assert_eq!(cel_field("inFlight"), "inFlight");
    }
}

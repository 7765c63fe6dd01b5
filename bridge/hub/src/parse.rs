//! Reading references: a [`ValueReference`] or a template becomes the sources it reads
//! ([`Parsed`]), checked to stay in the consumer's namespace. Pure.

use super::{Failure, group_of, object_key, reason};
use kraken_core_kinds::hub::ValueReference;

/// The API groups whose running controllers have a kind of a name (see
/// [`super::Index::groups_of`]): what a `resource` reference without `apiVersion` can mean.
pub type Groups<'a> = &'a dyn Fn(&str) -> Vec<String>;

/// The StateDeclaration a `resource` reference to object `name` of `kind` names: in the group
/// of `api_version` when given, else in the one group that has the kind.
fn declaration_of(
    api_version: Option<&str>,
    kind: &str,
    name: &str,
    groups: Groups<'_>,
) -> Result<String, Failure> {
    let mut found = groups(kind);
    if let Some(v) = api_version.filter(|v| !v.is_empty()) {
        let group = group_of(v);
        if found.iter().any(|g| g == group) {
            return Ok(object_key(group, kind, name));
        }
        found.sort();
        let served = if found.is_empty() {
            "no installed provider has it".to_owned()
        } else {
            format!("it is served by {}", found.join(" and "))
        };
        return Err(Failure::new(
            reason::NOT_FOUND,
            format!("{kind} {name}: no kind {kind} in API group {group:?} ({v}); {served}"),
        ));
    }
    match found.len() {
        1 => Ok(object_key(&found.remove(0), kind, name)),
        0 => Err(Failure::new(
            reason::NOT_FOUND,
            format!("{kind} {name}: no installed provider has the kind {kind}"),
        )),
        _ => {
            found.sort();
            Err(Failure::new(
                reason::AMBIGUOUS,
                format!(
                    "{kind} {name}: the kind {kind} is served by {}; say which with apiVersion \
                     (for example {}/v1alpha1)",
                    found.join(" and "),
                    found[0]
                ),
            ))
        }
    }
}

/// What a reference reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// An output of a StateDeclaration: (its name, a dotted path).
    Output {
        declaration: String,
        path: String,
    },
    ConfigMap {
        name: String,
        key: String,
    },
    Secret {
        name: String,
        key: String,
    },
}

impl Source {
    /// The object this source reads, for the index.
    pub fn object(&self) -> ObjectKey {
        match self {
            Source::Output { declaration, .. } => {
                ObjectKey(SourceKind::StateDeclaration, declaration.clone())
            }
            Source::ConfigMap { name, .. } => ObjectKey(SourceKind::ConfigMap, name.clone()),
            Source::Secret { name, .. } => ObjectKey(SourceKind::Secret, name.clone()),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Source::Output { declaration, path } => {
                format!("StateDeclaration {declaration} path {path}")
            }
            Source::ConfigMap { name, key } => format!("ConfigMap {name} key {key}"),
            Source::Secret { name, key } => format!("Secret {name} key {key}"),
        }
    }
}

/// The kinds of objects a reference can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKind {
    StateDeclaration,
    ConfigMap,
    Secret,
}

/// One object a reference reads, within a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(pub SourceKind, pub String);

/// A reference, parsed: one source, or a template of literal text and sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Single(Source),
    Template(Vec<Part>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    Ref(Source),
}

impl Parsed {
    pub fn sources(&self) -> Vec<&Source> {
        match self {
            Parsed::Single(s) => vec![s],
            Parsed::Template(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    Part::Ref(s) => Some(s),
                    Part::Text(_) => None,
                })
                .collect(),
        }
    }
}

/// Parses a reference; `namespace` is the consumer's (references must stay in it), `groups`
/// resolves a `resource` reference's kind when it names no `apiVersion`.
pub fn parse(r: &ValueReference, namespace: &str, groups: Groups<'_>) -> Result<Parsed, Failure> {
    let cross = |ns: &Option<String>, what: &str| -> Result<(), Failure> {
        match ns.as_deref() {
            Some(other) if !other.is_empty() && other != namespace => Err(Failure::new(
                reason::CROSS_NAMESPACE,
                format!(
                    "{}: {what} is in namespace {other}; references must stay in namespace {namespace}",
                    r.path
                ),
            )),
            _ => Ok(()),
        }
    };
    let mut found = Vec::new();
    if let Some(res) = &r.resource {
        cross(&res.namespace, &format!("{} {}", res.kind, res.name))?;
        let declaration = declaration_of(res.api_version.as_deref(), &res.kind, &res.name, groups)
            .map_err(|f| Failure::new(f.reason, format!("{}: {}", r.path, f.message)))?;
        found.push(Parsed::Single(Source::Output {
            declaration,
            path: res.path.clone(),
        }));
    }
    if let Some(sd) = &r.state_declaration {
        cross(&sd.namespace, &format!("StateDeclaration {}", sd.name))?;
        found.push(Parsed::Single(Source::Output {
            declaration: sd.name.clone(),
            path: sd.path.clone(),
        }));
    }
    if let Some(cm) = &r.config_map_key_ref {
        cross(&cm.namespace, &format!("ConfigMap {}", cm.name))?;
        found.push(Parsed::Single(Source::ConfigMap {
            name: cm.name.clone(),
            key: cm.key.clone(),
        }));
    }
    if let Some(s) = &r.secret_key_ref {
        cross(&s.namespace, &format!("Secret {}", s.name))?;
        found.push(Parsed::Single(Source::Secret {
            name: s.name.clone(),
            key: s.key.clone(),
        }));
    }
    if let Some(t) = &r.template {
        found.push(Parsed::Template(parse_template(t, groups).map_err(
            |f| Failure::new(f.reason, format!("{}: {}", r.path, f.message)),
        )?));
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        n => Err(Failure::new(
            reason::INVALID_REFERENCE,
            format!(
                "{}: a reference takes its value from exactly one source, found {n}",
                r.path
            ),
        )),
    }
}

/// Parses `${kind:...}` references in a template; `$${` is a literal `${`.
///
/// `${resource:KIND/NAME:PATH}` (or `KIND.GROUP/NAME`, as kubectl names a kind, when two
/// providers have the kind), `${stateDeclaration:NAME:PATH}`, `${configMap:NAME:KEY}`,
/// `${secret:NAME:KEY}`.
pub fn parse_template(t: &str, groups: Groups<'_>) -> Result<Vec<Part>, Failure> {
    let invalid = |m: String| Failure::new(reason::INVALID_REFERENCE, m);
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = t;
    while let Some(i) = rest.find("${") {
        if rest[..i].ends_with('$') {
            text.push_str(&rest[..i - 1]);
            text.push_str("${");
            rest = &rest[i + 2..];
            continue;
        }
        text.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| invalid(format!("unclosed ${{ in template {t:?}")))?;
        let inner = &after[..end];
        if !text.is_empty() {
            parts.push(Part::Text(std::mem::take(&mut text)));
        }
        parts.push(Part::Ref(template_source(inner, groups)?));
        rest = &after[end + 1..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}

fn template_source(inner: &str, groups: Groups<'_>) -> Result<Source, Failure> {
    let usage = "expected ${resource:KIND/NAME:PATH}, ${stateDeclaration:NAME:PATH}, ${configMap:NAME:KEY} or ${secret:NAME:KEY}";
    let invalid = |m: String| Failure::new(reason::INVALID_REFERENCE, m);
    let mut it = inner.splitn(3, ':');
    let (kind, a, b) = match (it.next(), it.next(), it.next()) {
        (Some(k), Some(a), Some(b)) if !a.is_empty() && !b.is_empty() => (k, a, b),
        _ => return Err(invalid(format!("${{{inner}}}: {usage}"))),
    };
    Ok(match kind {
        "resource" => {
            let (k, n) = a
                .split_once('/')
                .filter(|(k, n)| !k.is_empty() && !n.is_empty())
                .ok_or_else(|| invalid(format!("${{{inner}}}: {usage}")))?;
            let (kind, version) = match k.split_once('.') {
                Some((kind, group)) => (kind, Some(format!("{group}/"))),
                None => (k, None),
            };
            Source::Output {
                declaration: declaration_of(version.as_deref(), kind, n, groups)?,
                path: b.to_owned(),
            }
        }
        "stateDeclaration" => Source::Output {
            declaration: a.to_owned(),
            path: b.to_owned(),
        },
        "configMap" => Source::ConfigMap {
            name: a.to_owned(),
            key: b.to_owned(),
        },
        "secret" => Source::Secret {
            name: a.to_owned(),
            key: b.to_owned(),
        },
        _ => {
            return Err(invalid(format!(
                "${{{inner}}}: unknown source {kind:?}; {usage}"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kraken_core_kinds::hub::{KeySource, ResourceSource};

    /// Pet is random's; Uuid is random's and the fixture's.
    fn groups(kind: &str) -> Vec<String> {
        match kind {
            "Pet" => vec!["random.tf.kraken.dev".into()],
            "Uuid" => vec![
                "random.tf.kraken.dev".into(),
                "fixture.tf.kraken.dev".into(),
            ],
            _ => Vec::new(),
        }
    }

    #[test]
    fn templates_parse_references_and_escapes() {
        let parts = parse_template(
            "http://${resource:Pet/web:id}:${configMap:ports:http}/$${x}",
            &groups,
        )
        .expect("valid");
        assert_eq!(
            parts,
            vec![
                Part::Text("http://".into()),
                Part::Ref(Source::Output {
                    declaration: "pet-web.random".into(),
                    path: "id".into()
                }),
                Part::Text(":".into()),
                Part::Ref(Source::ConfigMap {
                    name: "ports".into(),
                    key: "http".into()
                }),
                Part::Text("/${x}".into()),
            ]
        );
        assert!(parse_template("${oops", &groups).is_err());
        assert!(parse_template("${resource:Pet:id}", &groups).is_err());
        assert!(
            parse_template("${other:a:b}", &groups)
                .expect_err("must fail")
                .message
                .contains("unknown source")
        );
    }

    #[test]
    fn a_kind_two_providers_have_needs_its_group() {
        let uuid = |api_version: Option<&str>| ValueReference {
            path: "name".into(),
            resource: Some(ResourceSource {
                api_version: api_version.map(str::to_owned),
                kind: "Uuid".into(),
                name: "u".into(),
                path: "id".into(),
                namespace: None,
            }),
            ..Default::default()
        };
        let failure = parse(&uuid(None), "team", &groups).expect_err("ambiguous");
        assert_eq!(failure.reason, reason::AMBIGUOUS);
        assert!(
            failure
                .message
                .contains("fixture.tf.kraken.dev and random.tf.kraken.dev"),
            "{}",
            failure.message
        );
        let declaration = |p: Parsed| match p {
            Parsed::Single(Source::Output { declaration, .. }) => declaration,
            other => panic!("{other:?}"),
        };
        let fixture = parse(
            &uuid(Some("fixture.tf.kraken.dev/v1alpha1")),
            "team",
            &groups,
        );
        let random = parse(
            &uuid(Some("random.tf.kraken.dev/v1alpha1")),
            "team",
            &groups,
        );
        assert_eq!(declaration(fixture.expect("fixture")), "uuid-u.fixture");
        assert_eq!(declaration(random.expect("random")), "uuid-u.random");
        // In a template, kubectl's KIND.GROUP names the group.
        let parts =
            parse_template("${resource:Uuid.fixture.tf.kraken.dev/u:id}", &groups).expect("valid");
        assert_eq!(
            parts,
            vec![Part::Ref(Source::Output {
                declaration: "uuid-u.fixture".into(),
                path: "id".into()
            })]
        );
        // An apiVersion no running kind has says which do.
        let wrong = parse(&uuid(Some("v1alpha1")), "team", &groups).expect_err("no such group");
        assert_eq!(wrong.reason, reason::NOT_FOUND);
        assert!(
            wrong
                .message
                .contains("served by fixture.tf.kraken.dev and random.tf.kraken.dev"),
            "{}",
            wrong.message
        );
        let failure = parse_template("${resource:Uuid/u:id}", &groups).expect_err("ambiguous");
        assert_eq!(failure.reason, reason::AMBIGUOUS);
        // A kind no running controller has waits for one.
        let failure = parse_template("${resource:Nope/u:id}", &groups).expect_err("unknown");
        assert_eq!(failure.reason, reason::NOT_FOUND);
    }

    #[test]
    fn references_stay_in_their_namespace() {
        let r = ValueReference {
            path: "prefix".into(),
            resource: Some(ResourceSource {
                api_version: None,
                kind: "Pet".into(),
                name: "a".into(),
                path: "id".into(),
                namespace: Some("other".into()),
            }),
            ..Default::default()
        };
        assert_eq!(
            parse(&r, "team", &groups).expect_err("must fail").reason,
            reason::CROSS_NAMESPACE
        );
        let r = ValueReference {
            path: "prefix".into(),
            config_map_key_ref: Some(KeySource {
                name: "c".into(),
                key: "k".into(),
                namespace: Some("team".into()),
            }),
            ..Default::default()
        };
        assert!(parse(&r, "team", &groups).is_ok());
        let none = ValueReference {
            path: "x".into(),
            ..Default::default()
        };
        assert_eq!(
            parse(&none, "team", &groups).expect_err("must fail").reason,
            reason::INVALID_REFERENCE
        );
    }
}

//! Evaluated instances → manifests: one managed resource (or data source kind) per instance,
//! its known arguments in `spec.forProvider`, each reference to another object as a
//! `valuesFrom` entry (a `resource:` reference, or a template around references), lifecycle
//! meta-arguments mapped or reported, and the Terraform address kept in an annotation.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value as Json, json};

use super::eval::{Part, Ref, Val};
use super::module::{Evaluated, Instance, Problem};
use kraken_value::PathStep;
use kraken_value::fields::FieldMap;

/// The annotation holding an object's full Terraform address.
pub const ADDRESS_ANNOTATION: &str = "kraken.dev/terraform-address";
/// The annotation listing `depends_on` addresses (ordering the hub does not need: references
/// already order what they read).
pub const DEPENDS_ON_ANNOTATION: &str = "kraken.dev/terraform-depends-on";

/// What a Terraform type becomes.
#[derive(Debug, Clone)]
pub struct Target {
    pub group: String,
    pub kind: String,
    pub fields: FieldMap,
    /// The type's top-level argument and block names, for "did you mean".
    pub arguments: Vec<String>,
    /// Sensitive top-level attributes (Terraform name → the key their producer publishes them
    /// under, in its outputs Secret): a reference to one reads it from there.
    pub sensitive: BTreeMap<String, String>,
}

/// A type's top-level argument and nested block names.
pub fn argument_names(schema: &kraken_codegen::schema::Schema) -> Vec<String> {
    let b = &schema.block;
    b.attributes
        .iter()
        .filter(|(_, a)| a.is_argument())
        .map(|(n, _)| n.clone())
        .chain(b.block_types.keys().cloned())
        .collect()
}

/// A type's sensitive top-level attributes: Terraform name → the key a producer publishes
/// the value under (its Kubernetes field name, as `managed::deps::publish` writes it).
pub fn sensitive_outputs(schema: &kraken_codegen::schema::Schema) -> BTreeMap<String, String> {
    let attributes = &schema.block.attributes;
    let names = kraken_codegen::names::field_names(attributes.keys().map(String::as_str));
    attributes
        .iter()
        .filter(|(_, a)| a.sensitive)
        .map(|(tf, _)| (tf.clone(), names.to_kube(tf).unwrap_or(tf).to_owned()))
        .collect()
}

/// What an opaque value's report says (it does not block the conversion).
const CANNOT_EXPRESS: &str = "a manifest cannot express it";

/// How to write the manifests.
#[derive(Debug, Clone)]
pub struct EmitOptions {
    pub namespace: String,
    /// The ProviderConfig every object uses; `None`: the provider's local name (`aws`). An
    /// aliased provider (`provider = aws.west`) uses `<that>-west`.
    pub provider_config: Option<String>,
    /// Every type of the providers used, `(data source, type)`: what an unknown type is
    /// compared with for "did you mean".
    pub known_types: BTreeSet<(bool, String)>,
}

/// One manifest, with the file it goes in.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub file: String,
    pub doc: Json,
}

/// A Secret the user must create for a sensitive argument.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SecretNeeded {
    pub name: String,
    pub key: String,
    /// The Terraform argument it stands for.
    pub address: String,
}

#[derive(Debug, Clone, Default)]
pub struct Emitted {
    pub manifests: Vec<Manifest>,
    pub secrets: Vec<SecretNeeded>,
    pub problems: Vec<Problem>,
    /// Terraform address → Kubernetes object name.
    pub names: BTreeMap<String, String>,
}

/// A Kubernetes name from Terraform's: lowercase letters, digits and `-`, at most 63.
pub fn sanitize(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed: String = out.trim_matches('-').chars().take(63).collect();
    let trimmed = trimmed.trim_end_matches('-').to_owned();
    if trimmed.is_empty() {
        "x".to_owned()
    } else {
        trimmed
    }
}

/// The name an instance's object gets: `<name>`, `<name>-<index>` or `<name>-<key>`.
fn base_name(inst: &Instance) -> String {
    // `module.a.module.b` → `a-b-`.
    let module: String = inst
        .module
        .split('.')
        .filter(|part| *part != "module" && !part.is_empty())
        .map(|m| format!("{m}-"))
        .collect();
    match &inst.key {
        None => sanitize(&format!("{module}{}", inst.name)),
        Some(Json::String(k)) => sanitize(&format!("{module}{}-{k}", inst.name)),
        Some(k) => sanitize(&format!("{module}{}-{k}", inst.name)),
    }
}

/// Assigns every instance a unique name per kind (a clash gets `-2`, `-3`, reported).
fn names(
    ev: &Evaluated,
    targets: &BTreeMap<(bool, String), Target>,
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, String> {
    let mut taken: BTreeSet<(String, String)> = BTreeSet::new();
    // The next suffix to try for each base name: with many instances of one name, each clash
    // is settled in a step, not by trying every suffix taken before.
    let mut next: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for inst in &ev.instances {
        let kind = targets
            .get(&(inst.data, inst.type_name.clone()))
            .map(|t| format!("{}.{}", t.kind, t.group))
            .unwrap_or_default();
        let base = base_name(inst);
        let mut name = base.clone();
        let n = next.entry((kind.clone(), base.clone())).or_insert(2);
        while !taken.insert((kind.clone(), name.clone())) {
            name = format!("{base}-{n}");
            *n += 1;
        }
        if name != base {
            problems.push(Problem {
                at: inst.at.clone(),
                subject: inst.address(),
                message: format!(
                    "the name {base:?} is taken by another instance of the kind; named {name:?}"
                ),
                blocking: false,
            });
        }
        out.insert(inst.address(), name);
    }
    out
}

/// Writes the manifests of every instance whose type has a target.
pub fn emit(
    ev: &Evaluated,
    targets: &BTreeMap<(bool, String), Target>,
    opts: &EmitOptions,
) -> Emitted {
    let mut out = Emitted::default();
    out.problems.extend(ev.problems.iter().cloned());
    out.names = names(ev, targets, &mut out.problems);
    for inst in &ev.instances {
        let Some(target) = targets.get(&(inst.data, inst.type_name.clone())) else {
            out.problems.push(Problem {
                at: inst.at.clone(),
                subject: inst.address(),
                message: format!(
                    "the provider has no {} type {}{}",
                    if inst.data { "data source" } else { "resource" },
                    inst.type_name,
                    super::suggest::hint(
                        &inst.type_name,
                        opts.known_types
                            .iter()
                            .filter(|(d, _)| *d == inst.data)
                            .map(|(_, t)| t.as_str())
                    )
                ),
                blocking: true,
            });
            continue;
        };
        let doc = manifest(inst, target, targets, opts, &mut out);
        let file = format!(
            "{}.yaml",
            sanitize(&format!(
                "{}-{}",
                if inst.data { "data" } else { "resource" },
                inst.type_name
            ))
        );
        out.manifests.push(Manifest { file, doc });
    }
    out.secrets.sort();
    out
}

fn manifest(
    inst: &Instance,
    target: &Target,
    targets: &BTreeMap<(bool, String), Target>,
    opts: &EmitOptions,
    out: &mut Emitted,
) -> Json {
    let address = inst.address();
    let name = out
        .names
        .get(&address)
        .cloned()
        .unwrap_or_else(|| base_name(inst));
    let mut known = Map::new();
    let mut values_from = Vec::new();
    let ctx = RefCtx {
        targets,
        names: &out.names,
    };
    for (arg, v) in &inst.args {
        let at = inst.arg_at.get(arg).unwrap_or(&inst.at).clone();
        let mut steps = vec![PathStep::Attr(arg.clone())];
        if let Some(j) = v.known() {
            known.insert(arg.clone(), j.clone());
            continue;
        }
        // An argument is given once: all of it through valuesFrom (a forProvider value and a
        // valuesFrom entry below it would be refused at admission).
        let mut entries = Vec::new();
        match spread(v, &mut steps, target, &ctx, &mut entries) {
            Ok(()) => values_from.extend(entries),
            Err(message) => out.problems.push(Problem {
                at,
                subject: format!("{address}.{arg}"),
                blocking: !message.contains(CANNOT_EXPRESS),
                message,
            }),
        }
    }
    let converted = target.fields.args_to_spec(&known);
    unknown_arguments(inst, target, &converted.unknown, out);
    let mut for_provider = converted.for_provider;
    secret_refs(
        &mut for_provider,
        &converted.sensitive,
        (&name, &address, inst),
        out,
    );
    let mut spec = json!({
        "providerConfigRef": {"name": provider_config(inst, opts)},
        "forProvider": for_provider,
    });
    if !values_from.is_empty() {
        spec["valuesFrom"] = Json::Array(values_from);
    }
    out.problems
        .extend(super::lifecycle::convert(inst, &target.fields, &mut spec));
    let mut annotations = json!({ ADDRESS_ANNOTATION: address });
    if !inst.depends_on.is_empty() {
        annotations[DEPENDS_ON_ANNOTATION] = Json::String(inst.depends_on.join(","));
    }
    json!({
        "apiVersion": format!("{}/v1alpha1", target.group),
        "kind": target.kind,
        "metadata": {"name": name, "namespace": opts.namespace, "annotations": annotations},
        "spec": spec,
    })
}

/// Reports each argument the type does not have, with the closest one it has.
fn unknown_arguments(inst: &Instance, target: &Target, unknown: &[String], out: &mut Emitted) {
    let address = inst.address();
    for u in unknown {
        let at = inst
            .arg_at
            .get(u.split('.').next().unwrap_or_default())
            .unwrap_or(&inst.at)
            .clone();
        out.problems.push(Problem {
            at,
            subject: address.clone(),
            message: format!(
                "{} has no argument {u}{}",
                inst.type_name,
                super::suggest::hint(u, target.arguments.iter().map(String::as_str))
            ),
            blocking: true,
        });
    }
}

/// Each sensitive argument as a reference to a Secret the user creates, listed in `out`.
fn secret_refs(
    for_provider: &mut Json,
    sensitive: &[(String, Json)],
    (name, address, inst): (&str, &str, &Instance),
    out: &mut Emitted,
) {
    for (path, _) in sensitive {
        let secret = sanitize(&format!("{name}-{}", inst.type_name));
        let key = path
            .trim_end_matches(kraken_codegen::names::SECRET_REF_SUFFIX)
            .replace('.', "-");
        let _ = kraken_value::fields::set_json_path(
            for_provider,
            path,
            json!({"name": secret, "key": key}),
        );
        out.secrets.push(SecretNeeded {
            name: secret,
            key,
            address: format!("{address}.{path}"),
        });
    }
}

fn provider_config(inst: &Instance, opts: &EmitOptions) -> String {
    let base = opts
        .provider_config
        .clone()
        .unwrap_or_else(|| local_provider(&inst.type_name, inst.provider.as_deref()));
    match inst.provider.as_deref().and_then(|p| p.split_once('.')) {
        Some((_, alias)) => sanitize(&format!("{base}-{alias}")),
        None => base,
    }
}

/// The local name of the provider of a resource type (`aws_vpc` → `aws`) or of a `provider`
/// meta-argument (`aws.west` → `aws`).
pub fn local_provider(type_name: &str, meta: Option<&str>) -> String {
    match meta {
        Some(m) => m.split('.').next().unwrap_or(m).to_owned(),
        None => type_name.split('_').next().unwrap_or(type_name).to_owned(),
    }
}

/// What resolving a reference to another object needs.
pub struct RefCtx<'a> {
    pub targets: &'a BTreeMap<(bool, String), Target>,
    /// Terraform address → object name.
    pub names: &'a BTreeMap<String, String>,
}

/// A value not wholly known as `valuesFrom` entries, one per leaf: a reference as a
/// `resource:` source, text around references as a template, a known scalar as a literal
/// template (the hub converts it to the argument's type). An opaque part is an error naming it.
fn spread(
    v: &Val,
    steps: &mut Vec<PathStep>,
    target: &Target,
    ctx: &RefCtx<'_>,
    entries: &mut Vec<Json>,
) -> Result<(), String> {
    let each = |steps: &mut Vec<PathStep>, step: PathStep, item: &Val, entries: &mut Vec<Json>| {
        steps.push(step);
        let r = spread(item, steps, target, ctx, entries);
        steps.pop();
        r
    };
    match v {
        Val::Known(Json::Null) => Ok(()),
        Val::Known(Json::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                each(
                    steps,
                    PathStep::Index(i as i64),
                    &Val::Known(item.clone()),
                    entries,
                )?;
            }
            Ok(())
        }
        Val::Known(Json::Object(items)) => {
            for (k, item) in items {
                each(
                    steps,
                    PathStep::Attr(k.clone()),
                    &Val::Known(item.clone()),
                    entries,
                )?;
            }
            Ok(())
        }
        Val::Known(scalar) => {
            let text = match scalar {
                Json::String(t) => t.replace("${", "$${"),
                other => other.to_string(),
            };
            entries.push(json!({"path": consumer_path(steps, target)?, "template": text}));
            Ok(())
        }
        Val::Ref(r) => {
            let path = consumer_path(steps, target)?;
            let (api_version, kind, name, out) = producer(r, ctx)?;
            entries.push(json!({"path": path, "resource": {"apiVersion": api_version, "kind": kind, "name": name, "path": out}}));
            Ok(())
        }
        Val::Template(parts) => {
            let path = consumer_path(steps, target)?;
            let text = template_text(parts, ctx)?;
            entries.push(json!({"path": path, "template": text}));
            Ok(())
        }
        Val::List(items) => {
            for (i, item) in items.iter().enumerate() {
                each(steps, PathStep::Index(i as i64), item, entries)?;
            }
            Ok(())
        }
        Val::Object(items) => {
            for (k, item) in items {
                each(steps, PathStep::Attr(k.clone()), item, entries)?;
            }
            Ok(())
        }
        Val::Opaque { expr, refs } => Err(opaque_message(expr, refs)),
    }
}

/// A `valuesFrom` template for text around references.
pub fn template_text(parts: &[Part], ctx: &RefCtx<'_>) -> Result<String, String> {
    let mut text = String::new();
    for p in parts {
        match p {
            Part::Text(t) => text.push_str(&t.replace("${", "$${")),
            Part::Ref(r) => {
                let (api_version, kind, name, out) = producer(r, ctx)?;
                let group = api_version.split('/').next().unwrap_or_default();
                text.push_str(&format!("${{resource:{kind}.{group}/{name}:{out}}}"));
            }
        }
    }
    Ok(text)
}

/// Why a value computed from references is left out.
pub fn opaque_message(expr: &str, refs: &[Ref]) -> String {
    let from = if refs.is_empty() {
        "values not known".to_owned()
    } else {
        refs.iter().map(Ref::address).collect::<Vec<_>>().join(", ")
    };
    format!("{expr} is computed from {from}; {CANNOT_EXPRESS}: set it by hand or as a template")
}

fn consumer_path(steps: &[PathStep], target: &Target) -> Result<String, String> {
    target.fields.field_path(steps, true).ok_or_else(|| {
        format!(
            "{} is not an argument of the kind {}",
            render(steps),
            target.kind
        )
    })
}

/// The output path of a sensitive attribute (not in `status.atProvider`; its producer publishes
/// it in a Secret under its field name), with what follows it inside the value as written.
fn sensitive_path(steps: &[PathStep], target: &Target) -> Option<String> {
    let (PathStep::Attr(first), rest) = steps.split_first()? else {
        return None;
    };
    let key = target.sensitive.get(first)?;
    let rest = rest.iter().map(|s| match s {
        PathStep::Attr(a) | PathStep::Key(a) => a.clone(),
        PathStep::Index(i) => i.to_string(),
    });
    Some(
        std::iter::once(key.clone())
            .chain(rest)
            .collect::<Vec<_>>()
            .join("."),
    )
}

fn render(steps: &[PathStep]) -> String {
    kraken_value::AttrPath {
        steps: steps.to_vec(),
    }
    .to_string()
}

/// (apiVersion, kind, object name, output path) of what a reference reads.
pub fn producer(r: &Ref, ctx: &RefCtx<'_>) -> Result<(String, String, String, String), String> {
    let address = r.address();
    let target = ctx
        .targets
        .get(&(r.data, r.type_name.clone()))
        .ok_or_else(|| format!("{address} is of a type the provider does not have"))?;
    let name = ctx
        .names
        .get(&address)
        .ok_or_else(|| format!("{address} is not converted (no such instance)"))?;
    let steps: Vec<PathStep> = r
        .path
        .iter()
        .map(|p| match p {
            Json::String(s) => PathStep::Attr(s.clone()),
            Json::Number(n) => PathStep::Index(n.as_i64().unwrap_or_default()),
            other => PathStep::Attr(other.to_string()),
        })
        .collect();
    let out = target
        .fields
        .field_path(&steps, false)
        .or_else(|| sensitive_path(&steps, target))
        .ok_or_else(|| format!("{address} has no attribute {}", render(&steps)))?;
    Ok((
        format!("{}/v1alpha1", target.group),
        target.kind.clone(),
        name.clone(),
        out,
    ))
}

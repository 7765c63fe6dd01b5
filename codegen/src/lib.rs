//! Provider schema → CRDs.
//!
//! Pure by design: no network and no Kubernetes client. The pipeline is
//! schema ([`schema`], parsed by [`tfjson`]) → IR ([`ir`], names from [`names`]) → render
//! ([`openapi`] nodes, [`crd`] objects with [`cel`] rules, [`trim`]med to size) → files
//! ([`output`], [`yaml`]). [`generate`] runs it for one provider, [`write_dir`] writes the result.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

pub mod cel;
pub mod crd;
pub mod cty;
pub mod ir;
pub mod names;
pub mod openapi;
pub mod output;
mod sample;
pub mod schema;
pub mod tfjson;
pub mod trim;
pub mod yaml;

pub use output::{DirWriter, write_dir};
pub use sample::sample_object;
pub use trim::{TrimKind, TrimStep};

use ir::KindNames;
use schema::{ProviderSchema, Schema};

/// The API group suffix every generated kind lives under: `<provider>.tf.kraken.dev`.
pub const GROUP_SUFFIX: &str = "tf.kraken.dev";

/// The default for [`Options::max_crd_bytes`]: room below etcd's 1.5 MiB request limit for
/// what the API server adds (status, managed fields).
pub const DEFAULT_MAX_CRD_BYTES: usize = 1_200_000;

/// The API group for a provider's generated kinds.
pub fn api_group(provider_type: &str) -> String {
    format!("{provider_type}.{GROUP_SUFFIX}")
}

/// The provider type of a source address: its last segment
/// (`registry.terraform.io/hashicorp/random` → `random`).
pub fn provider_type(address: &str) -> &str {
    address.rsplit('/').next().unwrap_or(address)
}

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Glob patterns (`*`, `?`, `[...]`) over Terraform type names (resources and, when
    /// selected, data sources); empty means all. A pattern matching nothing is reported.
    pub resources: Vec<String>,
    /// Also generate kinds for data sources, in group `data.<provider>.tf.kraken.dev`, each
    /// kind named `Data` + the resource-style name (`aws_ami` → `DataAmi`), so a data source
    /// kind never shares its name with a resource kind of the same provider.
    pub data_sources: bool,
    /// Glob patterns over data source type names when they differ from [`Options::resources`]
    /// (a `Provider`'s `spec.dataSources`); `None` applies `resources` to both.
    pub data_source_types: Option<Vec<String>>,
    /// Generate no resource kinds, only data sources (a `Provider` that lists data sources and
    /// no resources: there, no pattern means none rather than all).
    pub data_sources_only: bool,
    /// A CRD whose JSON is larger is trimmed (descriptions first, see [`trim`]); one that is
    /// still larger is reported as an error.
    pub max_crd_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            resources: Vec::new(),
            data_sources: false,
            data_source_types: None,
            data_sources_only: false,
            max_crd_bytes: DEFAULT_MAX_CRD_BYTES,
        }
    }
}

/// The CRDs generated for one provider, and what happened on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// Resources first, then data sources, each ordered by type name.
    pub crds: Vec<GeneratedCrd>,
    pub report: Report,
}

/// One generated CRD.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratedCrd {
    pub type_name: String,
    pub kind: String,
    pub group: String,
    pub plural: String,
    pub data_source: bool,
    /// `<group>_<plural>.yaml`.
    pub file_name: String,
    pub crd: serde_json::Value,
    pub yaml: String,
    /// Size of the compact JSON, as the API server receives it.
    pub json_bytes: usize,
}

/// What was removed from one CRD to fit [`Options::max_crd_bytes`] (see [`trim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trimmed {
    pub type_name: String,
    pub bytes_before: usize,
    pub bytes_after: usize,
    pub steps: Vec<TrimStep>,
}

/// What `generate` trimmed, and the types (or patterns) it could not generate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub trimmed: Vec<Trimmed>,
    /// Types whose kind had to be renamed to stay unique: (type name, kind used, kind wanted).
    pub renamed: Vec<(String, String, String)>,
    /// (type name or pattern, why).
    pub errors: Vec<(String, String)>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.trimmed.is_empty() && self.errors.is_empty() && self.renamed.is_empty() {
            return f.write_str("nothing trimmed, no errors");
        }
        for (type_name, kind, wanted) in &self.renamed {
            writeln!(
                f,
                "renamed {type_name}: kind {kind} (the names of {wanted} are taken in its group)"
            )?;
        }
        for t in &self.trimmed {
            let steps: Vec<String> = t.steps.iter().map(TrimStep::to_string).collect();
            writeln!(
                f,
                "trimmed {}: {} -> {} bytes ({})",
                t.type_name,
                t.bytes_before,
                t.bytes_after,
                steps.join(", ")
            )?;
        }
        for (name, message) in &self.errors {
            writeln!(f, "error: {name}: {message}")?;
        }
        Ok(())
    }
}

/// Why codegen failed as a whole (per-type problems go to [`Report::errors`] instead).
#[derive(Debug, thiserror::Error)]
pub enum CodegenError {
    #[error("invalid resource pattern {pattern:?}")]
    Pattern {
        pattern: String,
        #[source]
        source: glob::PatternError,
    },
    #[error("failed to write {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl CodegenError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// Generates one CRD per selected resource type (and data source type, if asked) of the
/// provider at `address`, all held in memory. For a large provider prefer [`generate_each`].
pub fn generate(
    address: &str,
    schema: &ProviderSchema,
    opts: &Options,
) -> Result<Generated, CodegenError> {
    let mut crds = Vec::new();
    let report = generate_each(address, schema, opts, |crd| {
        crds.push(crd);
        Ok(())
    })?;
    Ok(Generated { crds, report })
}

/// Like [`generate`], but hands each CRD to `sink` as soon as it is rendered, so memory holds
/// one CRD at a time however many the provider has (the CLI writes them straight to disk).
pub fn generate_each(
    address: &str,
    schema: &ProviderSchema,
    opts: &Options,
    mut sink: impl FnMut(GeneratedCrd) -> Result<(), CodegenError>,
) -> Result<Report, CodegenError> {
    let provider = provider_type(address);
    let selected = select(schema, opts)?;
    let mut report = Report::default();
    for pattern in &selected.unmatched {
        report.errors.push((
            pattern.clone(),
            "the pattern matches no resource type".to_owned(),
        ));
    }
    for (type_name, type_schema, data_source, names) in
        claim_names(provider, selected.types, &mut report)
    {
        let ir = ir::build(type_name, type_schema, names, data_source);
        match render(&ir, address, provider, opts.max_crd_bytes) {
            Rendered::Crd(crd, trimmed) => {
                report.trimmed.extend(trimmed);
                sink(*crd)?;
            }
            Rendered::TooLarge(message) => report.errors.push((type_name.to_owned(), message)),
        }
    }
    Ok(report)
}

struct Selection<'a> {
    types: Vec<Selected<'a>>,
    unmatched: Vec<String>,
}

fn select<'a>(schema: &'a ProviderSchema, opts: &Options) -> Result<Selection<'a>, CodegenError> {
    let mut types = Vec::new();
    let mut resources = Matcher::new(&opts.resources)?;
    for (name, s) in &schema.resources {
        if !opts.data_sources_only && resources.wanted(name) {
            types.push((name.as_str(), s, false));
        }
    }
    let mut unmatched = Vec::new();
    if opts.data_sources {
        match &opts.data_source_types {
            Some(patterns) => {
                let mut data = Matcher::new(patterns)?;
                for (name, s) in &schema.data_sources {
                    if data.wanted(name) {
                        types.push((name.as_str(), s, true));
                    }
                }
                unmatched.extend(data.unmatched().map(|p| format!("data source {p}")));
            }
            None => {
                for (name, s) in &schema.data_sources {
                    if resources.wanted(name) {
                        types.push((name.as_str(), s, true));
                    }
                }
            }
        }
    }
    let mut all: Vec<String> = resources.unmatched().map(str::to_owned).collect();
    all.extend(unmatched);
    Ok(Selection {
        types,
        unmatched: all,
    })
}

/// Glob patterns over type names, remembering which matched something; empty matches all.
struct Matcher<'o> {
    patterns: Vec<(glob::Pattern, &'o str)>,
    matched: Vec<bool>,
}

impl<'o> Matcher<'o> {
    fn new(patterns: &'o [String]) -> Result<Self, CodegenError> {
        let patterns = patterns
            .iter()
            .map(|p| {
                glob::Pattern::new(p)
                    .map(|g| (g, p.as_str()))
                    .map_err(|source| CodegenError::Pattern {
                        pattern: p.clone(),
                        source,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let matched = vec![false; patterns.len()];
        Ok(Self { patterns, matched })
    }

    fn wanted(&mut self, name: &str) -> bool {
        if self.patterns.is_empty() {
            return true;
        }
        let mut any = false;
        for (i, (p, _)) in self.patterns.iter().enumerate() {
            if p.matches(name) {
                self.matched[i] = true;
                any = true;
            }
        }
        any
    }

    fn unmatched(&self) -> impl Iterator<Item = &'o str> + '_ {
        self.patterns
            .iter()
            .zip(&self.matched)
            .filter(|(_, m)| !**m)
            .map(|((_, p), _)| *p)
    }
}

type Selected<'a> = (&'a str, &'a Schema, bool);

/// Names every selected type, dropping (and reporting) the types whose names the API server
/// would refuse or that clash with an earlier type of the same group.
///
/// Within a group, kinds and list kinds share one namespace, and plurals, singulars and
/// short names another (the API server's naming controller refuses a CRD that reuses any of
/// them). Plurals and singulars are claimed first, in type order; short names, being a mere
/// convenience, are then kept only where they are still free.
fn claim_names<'a>(
    provider: &str,
    types: Vec<Selected<'a>>,
    report: &mut Report,
) -> Vec<(&'a str, &'a Schema, bool, KindNames)> {
    // group → resource name → owner type
    let mut taken: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    // Kinds and list kinds, across the provider's groups: a data source kind never shares its
    // name with a resource kind, so a reference by kind alone names one of them.
    let mut kinds: BTreeSet<String> = BTreeSet::new();
    let mut named = Vec::new();
    for (type_name, type_schema, data_source) in types {
        let wanted = KindNames::new(provider, type_name, data_source);
        // A provider with types `x_foo` and `x_foos` cannot have both kinds as derived: the
        // singular of `Foos` is the plural of `Foo`. The later type (in name order) then takes
        // the first free numbered kind (`Foos2`), which the report says.
        let mut claimed = None;
        let mut last_error = String::new();
        for attempt in 1..=9 {
            let names = if attempt == 1 {
                wanted.clone()
            } else {
                KindNames::with_kind(provider, data_source, format!("{}{attempt}", wanted.kind))
            };
            let resources = taken.entry(names.group.clone()).or_default();
            if let Err(message) = names.check() {
                last_error = message;
                break;
            }
            match clash(&names, &kinds, resources) {
                Some(message) => last_error = message,
                None => {
                    claimed = Some(names);
                    break;
                }
            }
        }
        let Some(names) = claimed else {
            report.errors.push((type_name.to_owned(), last_error));
            continue;
        };
        if names.kind != wanted.kind {
            report.renamed.push((
                type_name.to_owned(),
                names.kind.clone(),
                wanted.kind.clone(),
            ));
        }
        let resources = taken.entry(names.group.clone()).or_default();
        kinds.extend([names.kind.clone(), names.list_kind.clone()]);
        for name in [&names.plural, &names.singular] {
            resources.insert(name.clone(), type_name.to_owned());
        }
        named.push((type_name, type_schema, data_source, names));
    }
    for (type_name, _, _, names) in &mut named {
        let Some(resources) = taken.get_mut(&names.group) else {
            continue;
        };
        names.short_names.retain(|s| !resources.contains_key(s));
        for short in &names.short_names {
            resources.insert(short.clone(), (*type_name).to_owned());
        }
    }
    named
}

/// Why `names` cannot be used next to the kinds and resource names already claimed in its
/// group, if they cannot.
fn clash(
    names: &KindNames,
    kinds: &BTreeSet<String>,
    resources: &BTreeMap<String, String>,
) -> Option<String> {
    if let Some(kind) = [&names.kind, &names.list_kind]
        .into_iter()
        .find(|k| kinds.contains(*k))
    {
        return Some(format!("kind {kind} is already used by this provider"));
    }
    [&names.plural, &names.singular]
        .into_iter()
        .find_map(|n| resources.get(n).map(|o| (n, o)))
        .map(|(name, owner)| format!("resource name {name} is already used by {owner}"))
}

enum Rendered {
    Crd(Box<GeneratedCrd>, Option<Trimmed>),
    /// Too large even after trimming; the message is for the report.
    TooLarge(String),
}

/// Renders, trims and serializes one kind.
fn render(ir: &ir::KindIr, address: &str, provider: &str, max_bytes: usize) -> Rendered {
    let mut crd = crd::render(ir, address, provider);
    let fitted = match trim::fit(&mut crd, max_bytes) {
        Ok(fitted) => fitted,
        Err(too_large) => {
            return Rendered::TooLarge(format!(
                "the crd is {} bytes of json even after trimming, more than the limit of {}",
                too_large.bytes, too_large.limit
            ));
        }
    };
    let json_bytes = fitted.bytes;
    let trimmed = (!fitted.steps.is_empty()).then(|| Trimmed {
        type_name: ir.type_name.clone(),
        bytes_before: fitted.bytes_before,
        bytes_after: fitted.bytes,
        steps: fitted.steps,
    });
    let yaml = output::to_yaml(&crd);
    let names = &ir.names;
    let generated = GeneratedCrd {
        type_name: ir.type_name.clone(),
        kind: names.kind.clone(),
        group: names.group.clone(),
        plural: names.plural.clone(),
        data_source: ir.data_source,
        file_name: output::file_name(&names.group, &names.plural),
        crd,
        yaml,
        json_bytes,
    };
    Rendered::Crd(Box::new(generated), trimmed)
}

#[cfg(test)]
mod tests;

//! `kraken convert`: a Terraform root module → Kubernetes manifests (see [`crate::convert`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::{Value as Json, json};

use crate::convert::emit::{EmitOptions, Emitted, Target, emit, local_provider, sanitize};
use crate::convert::guard::Guard;
use crate::convert::load::{Block, load_in};
use crate::convert::module::{Evaluated, Given, Inputs, Problem, evaluate};
use crate::provider::pins::{LOCK_FILE, PackageCheck, Pins};
use crate::provider::resolve::Resolver;
use crate::value::fields::FieldMap;

mod write;
use write::write;

pub const CONVERT_ABOUT: &str = "Convert a Terraform configuration into Kubernetes manifests.

DIR is a Terraform root module: every *.tf and *.tf.json file in it. Variables take their values
as Terraform gives them (defaults, TF_VAR_*, terraform.tfvars, *.auto.tfvars, then --var-file and
--var); validation blocks are checked; locals, functions, count and for_each are evaluated, each
instance becoming one object named <name>, <name>-<index> or <name>-<key>. An argument that reads
another object's attribute becomes a valuesFrom reference (text around references, a template),
so values keep flowing after migration. Sensitive arguments are never written: they become Secret
references, and the Secrets to create are listed.

The configuration is read as input from whoever wrote it. Confined (--confine), file() and
local module sources (./x, ../x) must stay inside DIR, symlinks resolved; a read outside is an
error naming file:line and the path. Confinement is on by default when standard input is not a
terminal (CI, scripts: no one is there to have read the configuration) and off on a terminal,
where Terraform's own rules hold (absolute paths and ../ modules anywhere); --confine or
--no-confine decides either way. Always, whatever the confinement: a file is at most 4 MiB and
the configuration at most 64 MiB; one count or for_each makes at most 10,000 instances and the
configuration at most 100,000; module calls nest at most 32 deep, and a module that calls
itself is an error naming the cycle; a value is at most 16 MiB, and evaluation as a whole is
bounded. Each refusal names file:line.

Provider binaries are found in DIR/.terraform/providers (after terraform init) and --plugin-dir
mirrors; their schemas name the kinds and check every argument.

--out receives providers.yaml (a Provider and a ProviderConfig per provider block), one file per
resource or data source type, and README.md: what was converted, what was not and why, with
file:line. Same input, same bytes. Nothing is written when something blocks conversion (a syntax
error, an unknown type or argument, a variable without a value) unless --partial.

--state joins terraform.tfstate to the instances by full address: each one found gets
spec.importIdentity (the resource identity, where the provider declares one for the type) or
spec.importId (the state's id), so applying the manifests adopts what Terraform manages instead
of creating it again. Instances on one side only are listed; a state of another configuration
or another format version is refused.

    kraken convert ./infra --var-file prod.tfvars --state ./infra/terraform.tfstate \
        --namespace team-a --out ./manifests
    kubectl apply -f ./manifests";

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The Terraform root module.
    pub dir: PathBuf,
    /// A variables file (.tfvars or .tfvars.json). Repeatable; applied before --var.
    #[arg(long = "var-file", value_name = "FILE")]
    pub var_files: Vec<PathBuf>,
    /// A variable value, NAME=VALUE (an HCL expression unless the variable is a string).
    /// Repeatable.
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// The namespace of the managed resources and ProviderConfigs.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Where to write the manifests (created if missing).
    #[arg(long, default_value = "kraken-manifests", value_name = "DIR")]
    pub out: PathBuf,
    /// Terraform filesystem mirrors to find provider binaries in. Repeatable.
    #[arg(
        long = "plugin-dir",
        value_name = "DIR",
        env = "KRAKEN_PLUGIN_DIR",
        value_delimiter = ':'
    )]
    pub plugin_dirs: Vec<PathBuf>,
    /// Write what could be converted even when something blocks the rest.
    #[arg(long)]
    pub partial: bool,
    /// The configuration's terraform.tfstate (format version 4). Each instance found in it by
    /// its full address gets spec.importIdentity (the provider's resource identity for the
    /// type, where it declares one) or spec.importId (the state's id), so applying the
    /// manifests adopts what Terraform manages instead of creating it again.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// With --state: also write terraform-state.yaml, one state Secret per adopted object
    /// holding its state as Terraform stored it. Applied before the manifests, the operator
    /// (and kraken plan) refresh that state instead of importing each object: nothing depends
    /// on the provider's import, and the provider's private data is kept. The file holds the
    /// state's sensitive values, as terraform.tfstate does: apply it, do not commit it.
    #[arg(long, requires = "state")]
    pub seed_state: bool,
    /// Every resource and data source uses the existing ProviderConfig NAME (NAME-<alias> for a
    /// provider alias) instead of one generated from the provider block; providers.yaml then
    /// holds only the Provider. For a configuration that uses one provider.
    #[arg(long, value_name = "NAME")]
    pub provider_config: Option<String>,
    /// Keep file() and local module sources inside DIR (symlinks resolved): a read outside
    /// is an error naming file:line. The default when standard input is not a terminal.
    #[arg(long, overrides_with = "no_confine")]
    pub confine: bool,
    /// Let file() and module sources read any path, as Terraform does. The default on a
    /// terminal.
    #[arg(long = "no-confine", overrides_with = "confine")]
    pub no_confine: bool,
}

impl ConvertArgs {
    /// Whether reads are confined to DIR: as asked, else when no one is at a terminal to have
    /// read the configuration (CI, a script), where it is most likely someone else's.
    fn confined(&self) -> bool {
        use std::io::IsTerminal as _;
        match (self.confine, self.no_confine) {
            (true, _) => true,
            (_, true) => false,
            _ => !std::io::stdin().is_terminal(),
        }
    }

    /// What the conversion may read and spend.
    fn guard(&self) -> anyhow::Result<Guard> {
        if !self.confined() {
            return Ok(Guard::unconfined());
        }
        Guard::confined(&self.dir).with_context(|| format!("reading {}", self.dir.display()))
    }
}

/// One provider the module uses: its local name, source address and what resolved it.
struct ProviderUse {
    local: String,
    source: String,
    version: String,
    binary: PathBuf,
}

pub(super) async fn run(args: ConvertArgs) -> anyhow::Result<()> {
    let module = load_in(&args.dir, std::sync::Arc::new(args.guard()?))?;
    let mut given: Vec<Given> = args.var_files.iter().cloned().map(Given::File).collect();
    for v in &args.vars {
        let Some((k, val)) = v.split_once('=') else {
            bail!("--var {v:?}: expected NAME=VALUE");
        };
        given.push(Given::Var(k.trim().to_owned(), val.to_owned()));
    }
    let inputs = Inputs {
        env: std::env::vars()
            .filter(|(k, _)| k.starts_with("TF_VAR_"))
            .collect(),
        given,
        ..Inputs::default()
    };
    let ev = evaluate(&module, &inputs);
    let providers = resolve_providers(&module, &ev, &args)?;
    if let Some(name) = &args.provider_config
        && providers.len() > 1
    {
        let locals: Vec<&str> = providers.iter().map(|p| p.local.as_str()).collect();
        bail!(
            "--provider-config {name}: the configuration uses {} providers ({}), and one \
             ProviderConfig serves one provider; convert without it, or one provider's \
             configuration at a time",
            providers.len(),
            locals.join(", ")
        );
    }
    let mut targets = BTreeMap::new();
    let mut docs = Vec::new();
    let mut known_types = BTreeSet::new();
    let mut identities = crate::convert::state::Identities::new();
    for p in &providers {
        let kinds = provider_kinds(p, &module, &ev, &args).await?;
        targets.extend(kinds.targets);
        docs.extend(kinds.docs);
        known_types.extend(kinds.known_types);
        identities.extend(kinds.identities);
    }
    let opts = EmitOptions {
        namespace: args.namespace.clone(),
        provider_config: args.provider_config.clone(),
        known_types,
    };
    let mut emitted = emit(&ev, &targets, &opts);
    let ctx = crate::convert::emit::RefCtx {
        targets: &targets,
        names: &emitted.names,
    };
    let (exports, problems) = crate::convert::exports::exports(&ev, &ctx, &args.namespace);
    emitted.manifests.extend(exports);
    emitted.problems.extend(problems);
    let adoption = match &args.state {
        Some(file) => Some(adopt(&mut emitted, file, args.seed_state, &identities)?),
        None => None,
    };
    let blocking: Vec<&Problem> = emitted.problems.iter().filter(|p| blocks(p)).collect();
    if !blocking.is_empty() && !args.partial {
        for p in &blocking {
            eprintln!("error: {p}");
        }
        bail!(
            "{} problem(s) block the conversion; nothing was written (--partial writes the rest)",
            blocking.len()
        );
    }
    write(&args.out, &docs, &emitted, &ev, adoption.as_ref())?;
    tell(&args, &emitted, &ev, adoption.as_ref());
    Ok(())
}

/// What the conversion did, on the terminal: what was not converted, the adoption, and where
/// the manifests went.
fn tell(
    args: &ConvertArgs,
    emitted: &Emitted,
    ev: &Evaluated,
    adoption: Option<&crate::convert::state::Adoption>,
) {
    for p in &emitted.problems {
        eprintln!("{}: {p}", if blocks(p) { "error" } else { "not converted" });
    }
    if let Some(a) = adoption {
        for p in &a.problems {
            eprintln!("note: {p}");
        }
        println!(
            "{} objects import what the state holds (spec.importIdentity or spec.importId)",
            a.imported
        );
        if args.seed_state {
            println!(
                "their states are seeded in {}: apply it first (it holds sensitive values; do not commit it)",
                args.out.join(crate::convert::state::SEED_FILE).display()
            );
        }
    }
    let peak = super::peak_memory_mib()
        .map(|m| format!(", peak memory {m} MiB"))
        .unwrap_or_default();
    println!(
        "converted {} of {} instances into {} (see {}/README.md{peak})",
        converted(emitted),
        ev.instances.len(),
        args.out.display(),
        args.out.display()
    );
}

/// `--state`: reads the state and seeds the manifests; blocking findings join the
/// conversion's problems, the rest are returned.
fn adopt(
    emitted: &mut Emitted,
    file: &Path,
    seed_state: bool,
    identities: &crate::convert::state::Identities,
) -> anyhow::Result<crate::convert::state::Adoption> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("--state: cannot read {}", file.display()))?;
    let name = file.display().to_string();
    let state = crate::convert::state::parse(&text, &name).map_err(anyhow::Error::msg)?;
    let mut adoption =
        crate::convert::state::seed(&mut emitted.manifests, &state, &name, identities);
    if seed_state {
        let secrets = crate::convert::state::state_secrets(&emitted.manifests, &state);
        emitted.manifests.extend(secrets);
    }
    let (blocking, rest) = adoption.problems.into_iter().partition(|p| p.blocking);
    emitted.problems.extend::<Vec<Problem>>(blocking);
    adoption.problems = rest;
    Ok(adoption)
}

/// How many instances became manifests (the outputs' ConfigExports are not instances).
fn converted(emitted: &Emitted) -> usize {
    emitted
        .manifests
        .iter()
        .filter(|m| {
            m.file != crate::convert::exports::FILE && m.file != crate::convert::state::SEED_FILE
        })
        .count()
}

/// Whether a problem stops conversion.
fn blocks(p: &Problem) -> bool {
    p.blocking
}

/// `terraform { required_providers { x = { source, version } } }`, by local name.
fn required_providers(
    module: &crate::convert::load::Module,
) -> BTreeMap<String, (String, Option<String>)> {
    let mut out = BTreeMap::new();
    let scope = crate::convert::eval::Scope {
        guard: module.guard.clone(),
        ..Default::default()
    };
    for t in module.of_kind("terraform") {
        for rp in t.body.blocks_of("required_providers") {
            for (name, e, _) in &rp.body.attributes {
                let v = crate::convert::eval::eval(e, &scope).ok();
                let j = v.as_ref().and_then(|v| v.known());
                let source = j
                    .and_then(|j| j["source"].as_str())
                    .map_or_else(|| format!("hashicorp/{name}"), str::to_owned);
                let version = j.and_then(|j| j["version"].as_str()).map(str::to_owned);
                out.insert(name.clone(), (source, version));
            }
        }
    }
    out
}

fn resolve_providers(
    module: &crate::convert::load::Module,
    ev: &Evaluated,
    args: &ConvertArgs,
) -> anyhow::Result<Vec<ProviderUse>> {
    let required = required_providers(module);
    let used: BTreeSet<String> = ev
        .instances
        .iter()
        .map(|i| local_provider(&i.type_name, i.provider.as_deref()))
        .collect();
    let mut dirs = vec![args.dir.join(".terraform").join("providers")];
    dirs.extend(args.plugin_dirs.iter().cloned());
    let resolver = Resolver::new(dirs);
    // As `terraform init` does: a provider runs only if the configuration's lock file (or a
    // plugin directory's) records its version, and only while its package has a hash recorded
    // there. A binary planted under .terraform/providers is never run.
    let lock = args.dir.join(LOCK_FILE);
    let pins = Pins::from_lock_file(&lock).map_err(anyhow::Error::msg)?;
    let check = PackageCheck::default();
    let mut out = Vec::new();
    for local in used {
        let (source, version) = required
            .get(&local)
            .cloned()
            .unwrap_or_else(|| (format!("hashicorp/{local}"), None));
        let hint = || {
            format!(
                "provider {local:?} ({source}): run terraform init in the module (it records the \
                 providers' hashes in {LOCK_FILE}), or give --plugin-dir a mirror with a lock file"
            )
        };
        let pinned = resolver
            .resolve_pinned(&source, version.as_deref(), &pins)
            .with_context(hint)?;
        check
            .check(&pinned.resolved.binary, &pinned.pins)
            .map_err(anyhow::Error::msg)
            .with_context(hint)?;
        let resolved = pinned.resolved;
        out.push(ProviderUse {
            local,
            source: resolved.address,
            version: resolved.version,
            binary: resolved.binary,
        });
    }
    Ok(out)
}

/// The kinds of the types `p` serves in this module (from its schema), and its Provider and
/// ProviderConfig manifests.
/// What one provider's schema gives the conversion.
struct ProviderKinds {
    /// The kind of each type used.
    targets: BTreeMap<(bool, String), Target>,
    /// Its Provider and ProviderConfig manifests.
    docs: Vec<Json>,
    /// Every type it has, `(data source, type)`.
    known_types: BTreeSet<(bool, String)>,
    /// The identity schemas of its kinds that have one.
    identities: crate::convert::state::Identities,
}

async fn provider_kinds(
    p: &ProviderUse,
    module: &crate::convert::load::Module,
    ev: &Evaluated,
    args: &ConvertArgs,
) -> anyhow::Result<ProviderKinds> {
    let (schema, identity_schemas) =
        super::schema::read_binary(&p.binary, &p.source, true, args.state.is_some()).await?;
    let mine = |data: bool| -> Vec<String> {
        let set: BTreeSet<String> = ev
            .instances
            .iter()
            .filter(|i| {
                i.data == data && local_provider(&i.type_name, i.provider.as_deref()) == p.local
            })
            .map(|i| i.type_name.clone())
            .collect();
        set.into_iter().collect()
    };
    let (resources, data_sources) = (mine(false), mine(true));
    let known = |t: &String, data: bool| {
        if data {
            schema.data_sources.contains_key(t)
        } else {
            schema.resources.contains_key(t)
        }
    };
    let opts = kraken_codegen::Options {
        resources: resources
            .iter()
            .filter(|t| known(t, false))
            .cloned()
            .collect(),
        data_sources: true,
        data_source_types: Some(
            data_sources
                .iter()
                .filter(|t| known(t, true))
                .cloned()
                .collect(),
        ),
        data_sources_only: resources.is_empty(),
        ..Default::default()
    };
    let generated = kraken_codegen::generate(&p.source, &schema, &opts)?;
    let mut targets = BTreeMap::new();
    let mut identities = crate::convert::state::Identities::new();
    for crd in &generated.crds {
        if let Some(id) = identity_schemas
            .get(&crd.type_name)
            .filter(|_| !crd.data_source)
        {
            identities.insert((crd.group.clone(), crd.kind.clone()), id.clone());
        }
        let type_schema = if crd.data_source {
            schema.data_sources.get(&crd.type_name)
        } else {
            schema.resources.get(&crd.type_name)
        };
        let Some(s) = type_schema else { continue };
        let target = Target {
            group: crd.group.clone(),
            kind: crd.kind.clone(),
            fields: FieldMap::for_resource(&crd.type_name, s),
            arguments: crate::convert::emit::argument_names(s),
            sensitive: crate::convert::emit::sensitive_outputs(s),
        };
        targets.insert((crd.data_source, crd.type_name.clone()), target);
    }
    let docs = provider_docs(p, &schema, module, args, (&resources, &data_sources));
    let known_types = (schema.resources.keys().map(|t| (false, t.clone())))
        .chain(schema.data_sources.keys().map(|t| (true, t.clone())))
        .collect();
    Ok(ProviderKinds {
        targets,
        docs,
        known_types,
        identities,
    })
}

/// The Provider and a ProviderConfig per provider block (aliases apart).
fn provider_docs(
    p: &ProviderUse,
    schema: &kraken_codegen::schema::ProviderSchema,
    module: &crate::convert::load::Module,
    args: &ConvertArgs,
    (resources, data_sources): (&[String], &[String]),
) -> Vec<Json> {
    let mut docs = vec![json!({
        "apiVersion": "core.kraken.dev/v1alpha1", "kind": "Provider",
        "metadata": {"name": p.local},
        "spec": {"source": p.source, "version": format!("= {}", p.version),
                 "resources": resources, "dataSources": data_sources},
    })];
    let blocks: Vec<&Block> = module
        .of_kind("provider")
        .filter(|b| b.labels.first() == Some(&p.local))
        .collect();
    let fields = FieldMap::for_provider_config(&schema.provider);
    let scope = crate::convert::eval::Scope {
        module_dir: args.dir.display().to_string(),
        guard: module.guard.clone(),
        ..Default::default()
    };
    let mut configs: Vec<(String, Json, Vec<Json>)> = Vec::new();
    for b in &blocks {
        let alias = b
            .body
            .attribute("alias")
            .and_then(|(e, _)| crate::convert::eval::eval(e, &scope).ok())
            .and_then(|v| v.known().and_then(Json::as_str).map(str::to_owned));
        let name = match &alias {
            Some(a) => sanitize(&format!("{}-{a}", p.local)),
            None => p.local.clone(),
        };
        let mut args_json = serde_json::Map::new();
        for (k, e, _) in &b.body.attributes {
            if k == "alias" {
                continue;
            }
            if let Ok(v) = crate::convert::eval::eval(e, &scope)
                && let Some(j) = v.known()
            {
                args_json.insert(k.clone(), j.clone());
            }
        }
        let converted = fields.args_to_spec(&args_json);
        let secret = format!("{name}-provider");
        let config_from: Vec<Json> = converted
            .sensitive
            .iter()
            .map(|(path, _)| {
                let plain = path.trim_end_matches(kraken_codegen::names::SECRET_REF_SUFFIX);
                json!({"path": plain, "secretKeyRef": {"name": secret, "key": plain}})
            })
            .collect();
        configs.push((name, converted.for_provider, config_from));
    }
    if configs.is_empty() {
        configs.push((p.local.clone(), json!({}), Vec::new()));
    }
    if args.provider_config.is_some() {
        // The resources use the ProviderConfig that exists already.
        return docs;
    }
    for (name, config, config_from) in configs {
        let mut spec = json!({"providerRef": {"name": p.local}, "config": config});
        if !config_from.is_empty() {
            spec["configFrom"] = Json::Array(config_from);
        }
        docs.push(json!({
            "apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
            "metadata": {"name": name, "namespace": args.namespace}, "spec": spec,
        }));
    }
    docs
}

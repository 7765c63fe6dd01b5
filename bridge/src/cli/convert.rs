//! `kraken convert`: a Terraform root module → Kubernetes manifests (see [`crate::convert`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::{Value as Json, json};

use crate::convert::emit::{EmitOptions, Emitted, Target, emit, local_provider, sanitize};
use crate::convert::load::{Block, load};
use crate::convert::module::{Evaluated, Given, Inputs, Problem, evaluate};
use crate::provider::resolve::Resolver;
use crate::value::fields::FieldMap;

pub const CONVERT_ABOUT: &str = "Convert a Terraform configuration into Kubernetes manifests.

DIR is a Terraform root module: every *.tf and *.tf.json file in it. Variables take their values
as Terraform gives them (defaults, TF_VAR_*, terraform.tfvars, *.auto.tfvars, then --var-file and
--var); validation blocks are checked; locals, functions, count and for_each are evaluated, each
instance becoming one object named <name>, <name>-<index> or <name>-<key>. An argument that reads
another object's attribute becomes a valuesFrom reference (text around references, a template),
so values keep flowing after migration. Sensitive arguments are never written: they become Secret
references, and the Secrets to create are listed.

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
}

/// One provider the module uses: its local name, source address and what resolved it.
struct ProviderUse {
    local: String,
    source: String,
    version: String,
    binary: PathBuf,
}

pub(super) async fn run(args: ConvertArgs) -> anyhow::Result<()> {
    let module = load(&args.dir)?;
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
    let scope = crate::convert::eval::Scope::default();
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
    let mut out = Vec::new();
    for local in used {
        let (source, version) = required
            .get(&local)
            .cloned()
            .unwrap_or_else(|| (format!("hashicorp/{local}"), None));
        let resolved = resolver.resolve(&source, version.as_deref()).with_context(|| {
            format!("provider {local:?} ({source}): run terraform init in the module, or give --plugin-dir")
        })?;
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

/// Writes the files: providers.yaml, one file per type, README.md.
fn write(
    out: &Path,
    providers: &[Json],
    emitted: &Emitted,
    ev: &Evaluated,
    adoption: Option<&crate::convert::state::Adoption>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut files: BTreeMap<String, Vec<&Json>> = BTreeMap::new();
    files
        .entry("providers.yaml".into())
        .or_default()
        .extend(providers);
    for m in &emitted.manifests {
        files.entry(m.file.clone()).or_default().push(&m.doc);
    }
    for (name, docs) in &files {
        let text: Vec<String> = docs
            .iter()
            .map(|d| kraken_codegen::yaml::to_yaml(d))
            .collect();
        let path = out.join(name);
        std::fs::write(&path, text.join("---\n"))
            .with_context(|| format!("writing {}", path.display()))?;
        if name == crate::convert::state::SEED_FILE {
            // The state's sensitive values: readable by the user alone, as Terraform's state.
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("restricting {}", path.display()))?;
        }
    }
    std::fs::write(out.join("README.md"), summary(emitted, ev, adoption))?;
    Ok(())
}

fn summary(
    emitted: &Emitted,
    ev: &Evaluated,
    adoption: Option<&crate::convert::state::Adoption>,
) -> String {
    let mut s = String::from("# Converted by kraken convert\n\n");
    s.push_str(&format!(
        "{} of {} resource and data source instances became manifests.\n\n",
        converted(emitted),
        ev.instances.len()
    ));
    s.push_str("| Terraform address | object |\n|---|---|\n");
    for (address, name) in &emitted.names {
        s.push_str(&format!("| `{address}` | `{name}` |\n"));
    }
    if !emitted.secrets.is_empty() {
        s.push_str("\n## Secrets to create\n\nSensitive arguments are not written into manifests. Create:\n\n");
        for sec in &emitted.secrets {
            s.push_str(&format!(
                "- Secret `{}`, key `{}` (for `{}`)\n",
                sec.name, sec.key, sec.address
            ));
        }
    }
    if !emitted.problems.is_empty() {
        s.push_str("\n## Not converted\n\n");
        for p in &emitted.problems {
            s.push_str(&format!("- {p}\n"));
        }
    }
    if let Some(a) = adoption {
        s.push_str(&format!(
            "\n## Adoption\n\n{} objects import the object the state holds (`spec.importIdentity` \
             where the provider declares a resource identity for the type, else `spec.importId`): \
             applying them adopts it instead of creating another.\n",
            a.imported
        ));
        for p in &a.problems {
            s.push_str(&format!("- {p}\n"));
        }
        let seeded = emitted
            .manifests
            .iter()
            .filter(|m| m.file == crate::convert::state::SEED_FILE)
            .count();
        if seeded > 0 {
            s.push_str(&format!(
                "\n`{}` seeds {seeded} state Secrets from the state: apply it first, so the \
                 operator refreshes each object's state instead of importing it. It holds the \
                 state's sensitive values, as `terraform.tfstate` does: apply it, do not commit \
                 it.\n",
                crate::convert::state::SEED_FILE
            ));
        }
    }
    if !ev.outputs.is_empty() {
        use crate::convert::exports::{FILE, OUTPUTS, SENSITIVE_OUTPUTS};
        s.push_str(&format!(
            "\n## Outputs\n\nThe ConfigExports in `{FILE}` keep the outputs published: \
             ConfigMap `{OUTPUTS}`, and Secret `{SENSITIVE_OUTPUTS}` for sensitive ones, \
             one key per output.\n\n"
        ));
        for name in ev.outputs.keys() {
            let (kind, target) = if ev.sensitive_outputs.contains(name) {
                ("Secret", SENSITIVE_OUTPUTS)
            } else {
                ("ConfigMap", OUTPUTS)
            };
            s.push_str(&format!(
                "- `output.{name}` → {kind} `{target}`, key `{name}`\n"
            ));
        }
    }
    s
}

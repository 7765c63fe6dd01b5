//! Steps 2–5 of installing a Provider: read the binary's schema, generate the CRDs of the
//! selected resource types, server-side apply them, and see which are Established.

use super::*;

/// What to generate: the binary and the selection of a Provider.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Request {
    pub binary: PathBuf,
    pub address: String,
    pub version: String,
    pub resources: Vec<String>,
    pub data_sources: Vec<String>,
    /// Where to store the schema answer for the processes that serve resources later.
    #[serde(default)]
    pub schema_cache: Option<PathBuf>,
}

/// One generated CRD, with what installing it needs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Crd {
    pub type_name: String,
    pub kind: String,
    pub group: String,
    pub plural: String,
    pub crd: serde_json::Value,
}

/// Step 2: the binary's schema, descriptions included (they become the CRDs').
pub(super) async fn schema(req: &Request) -> Result<(Arc<ProviderSchema>, u32), Failure> {
    let (address, version) = (&req.address, &req.version);
    let mut opts = LaunchOptions::new(req.binary.clone());
    opts.name = format!("{address} {version}");
    opts.docs = true;
    opts.schema_cache = req.schema_cache.clone();
    let host = ProviderHost::new(opts, 1);
    let result = host.schema().await;
    let protocol = host.protocol_version();
    host.shutdown().await;
    let schema = result.map_err(|e| {
        Failure::new(
            reason::SCHEMA_UNAVAILABLE,
            format!(
                "failed to read the schema of {address} {version}: {}",
                chain(&e)
            ),
            true,
        )
    })?;
    Ok((schema, protocol))
}

/// Step 3: the CRDs of the selected resource types and data sources (none when
/// `spec.resources` and `spec.dataSources` are empty).
pub(super) fn generate(
    resources: &[String],
    data_sources: &[String],
    address: &str,
    schema: &ProviderSchema,
) -> Result<Vec<kraken_codegen::GeneratedCrd>, Failure> {
    if resources.is_empty() && data_sources.is_empty() {
        return Ok(Vec::new());
    }
    let opts = kraken_codegen::Options {
        resources: resources.to_vec(),
        data_sources: !data_sources.is_empty(),
        data_source_types: Some(data_sources.to_vec()),
        data_sources_only: resources.is_empty(),
        ..Default::default()
    };
    let generated = kraken_codegen::generate(address, schema, &opts)
        .map_err(|e| Failure::new(reason::UNKNOWN_RESOURCE_TYPES, chain(&e), false))?;
    if !generated.report.errors.is_empty() {
        let list: Vec<String> = generated
            .report
            .errors
            .iter()
            .map(|(n, m)| format!("{n}: {m}"))
            .collect();
        return Err(Failure::new(
            reason::UNKNOWN_RESOURCE_TYPES,
            format!("spec.resources/dataSources: {}", list.join("; ")),
            false,
        ));
    }
    Ok(generated.crds)
}

/// Step 4: server-side apply of each CRD, labelled with the Provider's name and not suspended.
pub(super) async fn apply_crds(
    p: &Provider,
    inst: &Installer,
    crds: &[Crd],
) -> Result<Vec<InstalledKind>, Failure> {
    let api: Api<CustomResourceDefinition> = Api::all(inst.client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut kinds = Vec::with_capacity(crds.len());
    for c in crds {
        let mut crd = c.crd.clone();
        let labels = &mut crd["metadata"]["labels"];
        if !labels.is_object() {
            *labels = json!({});
        }
        labels[PROVIDER_NAME_LABEL] = Json::String(p.name_any());
        labels[SUSPENDED_LABEL] = Json::String("false".into());
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        inst.metrics.api_write("customresourcedefinitions", "apply");
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map_err(|e| {
                let transient =
                    !matches!(&e, kube::Error::Api(s) if s.code == 422 || s.code == 400);
                Failure::new(
                    reason::CRD_APPLY_FAILED,
                    format!("failed to apply CRD {name}: {e}"),
                    transient,
                )
            })?;
        kinds.push(InstalledKind {
            resource_type: c.type_name.clone(),
            kind: c.kind.clone(),
            api_version: format!("{}/{}", c.group, kraken_codegen::crd::VERSION),
            crd: name,
        });
    }
    Ok(kinds)
}

/// Step 5: the names of the CRDs not Established yet, and whether any of them is missing.
pub(super) async fn not_established(
    inst: &Installer,
    crds: &[Crd],
) -> Result<(Vec<String>, bool), Failure> {
    let api: Api<CustomResourceDefinition> = Api::all(inst.client.clone());
    let mut pending = Vec::new();
    let mut missing = false;
    for c in crds {
        let name = format!("{}.{}", c.plural, c.group);
        let crd = api.get_opt(&name).await.map_err(|e| {
            Failure::new(
                reason::CRD_APPLY_FAILED,
                format!("failed to read CRD {name}: {e}"),
                true,
            )
        })?;
        missing |= crd.is_none();
        if !crd.as_ref().is_some_and(established) {
            pending.push(name);
        }
    }
    Ok((pending, missing))
}

pub(super) fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

//! `kraken activate`: add resource types to a `Provider`'s `spec.resources`, so the operator
//! installs their kinds, and wait until they are served.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kube::Api;
use kube::api::Patch;

use crate::core_kinds::Provider;

pub(super) const ACTIVATE_ABOUT: &str = "Install the kinds of some resource types of a Provider.

A Provider (core.kraken.dev/v1alpha1) installs no kind until asked, because every CRD costs the
API server memory and discovery time. This adds the given resource types (Terraform names or glob
patterns: random_pet, aws_s3_*) to the Provider's spec.resources; the operator then generates,
applies and starts reconciling their kinds. It waits until the Provider reports them installed,
and prints each kind.

    kraken activate random random_pet random_id
    kubectl get pets.random.tf.kraken.dev

With --data-sources the names are data source types instead, added to spec.dataSources; their
read-only kinds are named Data<Name> in group data.<provider>.tf.kraken.dev:

    kraken activate aws --data-sources aws_ami aws_availability_zones
    kubectl get dataamis.data.aws.tf.kraken.dev";

#[derive(Debug, clap::Args)]
pub struct ActivateArgs {
    /// The Provider's name (kubectl get providers.core.kraken.dev).
    pub provider: String,
    /// Terraform resource types or glob patterns to activate.
    #[arg(required = true, value_name = "RESOURCE_TYPE")]
    pub resource_types: Vec<String>,
    /// The names are data source types: add them to spec.dataSources.
    #[arg(long)]
    pub data_sources: bool,
    /// Kubeconfig to use; defaults to KUBECONFIG, then ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Seconds to wait for the kinds to be installed; 0 returns at once.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,
}

pub(super) async fn run(args: ActivateArgs) -> anyhow::Result<()> {
    for t in &args.resource_types {
        glob::Pattern::new(t).with_context(|| format!("invalid resource type pattern {t:?}"))?;
    }
    let client = crate::operator::client(args.kubeconfig.as_deref(), 0).await?;
    let api: Api<Provider> = Api::all(client);
    let provider = api
        .get_opt(&args.provider)
        .await
        .with_context(|| format!("failed to read Provider {}", args.provider))?
        .with_context(|| {
            format!(
                "Provider {} not found (kubectl get providers.core.kraken.dev)",
                args.provider
            )
        })?;
    let (field, mut resources) = if args.data_sources {
        ("dataSources", provider.spec.data_sources.clone())
    } else {
        ("resources", provider.spec.resources.clone())
    };
    let added: Vec<&String> = args
        .resource_types
        .iter()
        .filter(|t| !resources.contains(t))
        .collect();
    resources.extend(added.iter().map(|t| (*t).clone()));
    if !added.is_empty() {
        let patch = serde_json::json!({"spec": {field: resources}});
        api.patch(
            &args.provider,
            &crate::kit::status::patch_params(),
            &Patch::Merge(&patch),
        )
        .await
        .with_context(|| format!("failed to update Provider {}", args.provider))?;
    }
    if args.timeout == 0 {
        println!(
            "activating {} on Provider {}",
            args.resource_types.join(", "),
            args.provider
        );
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    loop {
        let p = api.get(&args.provider).await?;
        let status = p.status.clone().unwrap_or_default();
        let current = status.observed_generation >= p.metadata.generation;
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
        if current && let Some(c) = ready {
            if c.status == crate::kit::conditions::ConditionStatus::True {
                for k in &status.kinds {
                    println!("{}\t{}\t{}", k.resource_type, k.kind, k.api_version);
                }
                return Ok(());
            }
            if c.reason != crate::installer::reason::INSTALLING {
                bail!(
                    "Provider {} is not ready: {} ({})",
                    args.provider,
                    c.message,
                    c.reason
                );
            }
        }
        if Instant::now() > deadline {
            bail!(
                "Provider {} did not install the kinds within {} s (kubectl describe provider {})",
                args.provider,
                args.timeout,
                args.provider
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

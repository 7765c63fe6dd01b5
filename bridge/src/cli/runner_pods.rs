//! `kraken operator --runner-image` and the other settings of the `pods` placement.

use std::collections::BTreeMap;
use std::sync::Arc;

use clap::Args;

use crate::source::pods::{METADATA_ENDPOINTS, PodSettings};

#[derive(Debug, Args)]
pub struct RunnerPodArgs {
    /// The image `pods` runners run (its `kraken runner`); the chart passes the operator's own.
    /// Unset: the pods placement is not offered, and a ProviderConfig asking for it is told so.
    #[arg(long, value_name = "IMAGE", env = "KRAKEN_RUNNER_IMAGE")]
    pub runner_image: Option<String>,
    /// Whether a `pods` runner also confines itself with Landlock inside its Pod (defence in
    /// depth; `none` for nodes whose kernel lacks Landlock).
    #[arg(long, value_enum, default_value = "landlock", value_name = "SANDBOX")]
    pub runner_pod_sandbox: super::runner::Sandbox,
    /// The runner container's resources, as JSON ({"requests": {...}, "limits": {...}}).
    #[arg(
        long,
        value_name = "JSON",
        default_value = r#"{"requests":{"cpu":"100m","memory":"256Mi"},"limits":{"memory":"1Gi"}}"#,
        value_parser = parse_resources
    )]
    pub runner_resources: serde_json::Value,
    /// A CIDR runners may not reach, besides the clouds' metadata endpoints, e.g. the API
    /// server's endpoint addresses (`kubectl get endpointslices -n default -l
    /// kubernetes.io/service-name=kubernetes`). Repeatable.
    #[arg(long, value_name = "CIDR")]
    pub runner_deny_egress: Vec<String>,
    /// A label of the operator's Pods (KEY=VALUE): a runner's NetworkPolicy admits only Pods
    /// with these labels in the operator's namespace. Repeatable.
    #[arg(
        long,
        value_name = "KEY=VALUE",
        default_value = "app.kubernetes.io/name=kraken"
    )]
    pub runner_operator_label: Vec<String>,
    /// The Secret, in the operator's namespace, that keeps the client certificate every
    /// replica presents to runners (made by the first replica that finds none).
    #[arg(long, default_value = "kraken-runner-client", value_name = "NAME")]
    pub runner_client_secret: String,
    /// Scale a runner to zero once no replica has held a connection to it for this long (Go
    /// duration; `0` never). A replica lets go of a provider after --provider-idle-timeout
    /// without requests, so a runner stops that long plus this after its last request; the
    /// next request starts it again (and waits for its Pod).
    #[arg(long, default_value = "30m", value_parser = super::operator::parse_duration, value_name = "DURATION")]
    pub runner_idle_after: std::time::Duration,
}

fn parse_resources(s: &str) -> Result<serde_json::Value, String> {
    let v: serde_json::Value =
        serde_json::from_str(s).map_err(|e| format!("--runner-resources is not JSON: {e}"))?;
    if !v.is_object() {
        return Err("--runner-resources must be an object with requests and limits".into());
    }
    Ok(v)
}

impl RunnerPodArgs {
    /// The pods placement's settings, when offered; `operator_namespace` is where the operator
    /// (and its client Secret) lives.
    pub fn settings(
        &self,
        operator_namespace: &str,
        mirror: Option<&str>,
        api_server: Option<String>,
        (allow_read, allow_write): (&[std::path::PathBuf], &[std::path::PathBuf]),
    ) -> anyhow::Result<Option<Arc<PodSettings>>> {
        let Some(image) = &self.runner_image else {
            return Ok(None);
        };
        let mut operator_labels = BTreeMap::new();
        for label in &self.runner_operator_label {
            let (k, v) = label.split_once('=').ok_or_else(|| {
                anyhow::anyhow!("--runner-operator-label {label:?} is not KEY=VALUE")
            })?;
            operator_labels.insert(k.to_owned(), v.to_owned());
        }
        let mut deny: Vec<String> = METADATA_ENDPOINTS.iter().map(|s| (*s).to_owned()).collect();
        deny.extend(api_server);
        for cidr in &self.runner_deny_egress {
            anyhow::ensure!(
                cidr.split_once('/')
                    .is_some_and(|(ip, bits)| ip.parse::<std::net::IpAddr>().is_ok()
                        && bits.parse::<u8>().is_ok()),
                "--runner-deny-egress {cidr:?} is not a CIDR (e.g. 10.0.0.1/32)"
            );
            deny.push(cidr.clone());
        }
        Ok(Some(Arc::new(PodSettings {
            image: image.clone(),
            sandbox: self.runner_pod_sandbox == super::runner::Sandbox::Landlock,
            resources: self.runner_resources.clone(),
            deny_egress: deny,
            operator_namespace: operator_namespace.to_owned(),
            operator_labels,
            mirror: mirror.map(str::to_owned),
            allow_read: allow_read.to_vec(),
            allow_write: allow_write.to_vec(),
            identity: None,
            idle_after: Some(self.runner_idle_after).filter(|d| !d.is_zero()),
            watching: Default::default(),
        })))
    }
}

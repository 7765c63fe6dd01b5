//! Which cluster, as whom, in which namespace: the flags every kubectl plugin takes
//! (`--kubeconfig`, `--context`, `-n`), read the way kubectl reads them, and the caller's own
//! name as the API server knows it.

use std::path::PathBuf;

use anyhow::Context as _;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The flags kubectl's own commands take, honoured by every subcommand. kubectl hands a
/// plugin its arguments untouched (and refuses flags before the plugin's name), so the plugin
/// reads them itself.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Global {
    /// The kubeconfig file (default: KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace (default: the context's namespace, else `default`).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// A client and the namespace commands act in.
pub(super) struct Session {
    pub client: kube::Client,
    pub namespace: String,
}

/// Connects as the kubeconfig (and context) the flags name; KUBECONFIG (several files merged,
/// as kubectl merges them) and then ~/.kube/config when `--kubeconfig` is not given; inside a
/// pod without any kubeconfig, its service account.
pub(super) async fn connect(global: &Global) -> anyhow::Result<Session> {
    let options = KubeConfigOptions {
        context: global.context.clone(),
        ..KubeConfigOptions::default()
    };
    let context = global.context.as_ref().map_or_else(
        || "the current context".to_owned(),
        |c| format!("context {c}"),
    );
    let config = match (&global.kubeconfig, &global.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("failed to read the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .with_context(|| format!("cannot use {context} of {}", path.display()))?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .with_context(|| format!("cannot use {context} of KUBECONFIG or ~/.kube/config"))?,
        (None, None) => kube::Config::infer().await.context(
            "no kubeconfig found: pass --kubeconfig, set KUBECONFIG, or create ~/.kube/config",
        )?,
    };
    let namespace = global
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).context("failed to create a Kubernetes client")?;
    Ok(Session { client, namespace })
}

/// The caller's user name as the API server authenticated it (what `kubectl auth whoami`
/// prints): the name an approval is recorded under, and the one an admission policy compares
/// with the requesting user.
pub(super) async fn whoami(client: &kube::Client) -> anyhow::Result<String> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = SelfSubjectReview {
        metadata: Default::default(),
        status: None,
    };
    let answer = api.create(&PostParams::default(), &review).await.context(
        "failed to ask the API server who you are (a SelfSubjectReview, authentication.k8s.io/v1, \
         served since Kubernetes 1.28)",
    )?;
    answer
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .filter(|u| !u.is_empty())
        .context("the API server's SelfSubjectReview names no user: it cannot record who approved")
}

//! The `pods` placement: a ProviderConfig's provider runs in a runner Deployment of its own
//! namespace, under a ServiceAccount of that namespace, and every operator replica connects
//! to the same runner over mutual TLS.
//!
//! [`objects`] decides what the runner is made of; this module writes it (the ServiceAccount
//! Kraken makes, the certificates Secret, the Deployment, the NetworkPolicy) and finds the
//! runner's Pod for the provider host's dial ([`kraken_provider::dial`]). The operator's
//! client certificate is one per installation, kept in a Secret of the operator's namespace
//! ([`operator_identity`]), so a runner one replica started accepts every replica. The Secret
//! of a runner lives in the tenant's namespace and holds only the runner's own key and the
//! operator's certificate (never the operator's key).

pub mod idle;
pub mod objects;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::Value as Json;

use kraken_core_kinds::provider_config::RUNNER_SERVICE_ACCOUNTS_ANNOTATION;
use kraken_core_kinds::{MANAGED_BY_LABEL, Provider, ProviderConfig};
use kraken_provider::remote::{Dial, Locate, Located, files};
use kraken_provider::tls::ClientIdentity;
use objects::{DEFAULT_ACCOUNT, PORT, ROLE_ANNOTATION, Runner};

/// The field manager of what Kraken writes for a runner.
const MANAGER: &str = "kraken-runner";
/// How often a runner's objects are written again while it is dialed (a deleted Deployment
/// comes back).
const ENSURE_EVERY: Duration = Duration::from_secs(30);
/// How soon a runner with no Pod at all (scaled to zero while idle) is written again.
const ENSURE_AGAIN_AFTER: Duration = Duration::from_secs(2);

/// How the operator makes runners (`kraken operator --runner-image` and friends).
#[derive(Clone)]
pub struct PodSettings {
    /// The image whose `kraken` runs the runner (the operator's own, in the chart).
    pub image: String,
    /// Run `kraken runner --sandbox landlock` in the Pod too (defence in depth).
    pub sandbox: bool,
    /// The runner container's `resources` (requests and limits).
    pub resources: Json,
    /// CIDRs the runner may not reach: the cloud's metadata endpoints and the API server.
    pub deny_egress: Vec<String>,
    /// Where the operator's Pods are, and their labels: the only peers a runner admits.
    pub operator_namespace: String,
    pub operator_labels: BTreeMap<String, String>,
    /// Where a runner fetches a package whose Provider names no mirror (the operator's
    /// `--provider-mirror`); else its registry.
    pub mirror: Option<String>,
    /// Paths the provider may also read / write beneath in its Pod (`kraken operator
    /// --runner-allow-read/--runner-allow-write`: paths of the runner's image or volumes).
    pub allow_read: Vec<std::path::PathBuf>,
    pub allow_write: Vec<std::path::PathBuf>,
    /// The operator's client certificate ([`operator_identity`]), set once it is loaded.
    pub identity: Option<Arc<ClientIdentity>>,
    /// Scale a runner no replica held for this long to zero ([`idle`]); None: never.
    pub idle_after: Option<Duration>,
    /// The runners this replica watches for idleness.
    pub watching: idle::Watching,
}

impl std::fmt::Debug for PodSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodSettings")
            .field("image", &self.image)
            .field("sandbox", &self.sandbox)
            .field("deny_egress", &self.deny_egress)
            .field("operator_namespace", &self.operator_namespace)
            .field("idle_after", &self.idle_after)
            .finish_non_exhaustive()
    }
}

impl PartialEq for PodSettings {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.image,
            self.sandbox,
            &self.resources,
            &self.deny_egress,
        ) == (
            &other.image,
            other.sandbox,
            &other.resources,
            &other.deny_egress,
        ) && (
            &self.operator_namespace,
            &self.operator_labels,
            &self.mirror,
        ) == (
            &other.operator_namespace,
            &other.operator_labels,
            &other.mirror,
        ) && (&self.allow_read, &self.allow_write, self.idle_after)
            == (&other.allow_read, &other.allow_write, other.idle_after)
    }
}

impl Eq for PodSettings {}

/// The metadata endpoints of the clouds a runner must not reach (AWS, GCP and Azure share
/// 169.254.169.254; AWS's IPv6 one and its ECS credentials endpoint).
pub const METADATA_ENDPOINTS: &[&str] = &[
    "169.254.169.254/32",
    "169.254.170.2/32",
    "fd00:ec2::254/128",
];

impl PodSettings {
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        let mut deny: Vec<String> = METADATA_ENDPOINTS.iter().map(|s| (*s).to_owned()).collect();
        deny.push("10.96.0.1/32".into());
        Self {
            image: "kraken:test".into(),
            sandbox: true,
            resources: serde_json::json!({"requests": {"cpu": "50m", "memory": "128Mi"}}),
            deny_egress: deny,
            operator_namespace: "kraken-system".into(),
            operator_labels: BTreeMap::from([("app.kubernetes.io/name".into(), "kraken".into())]),
            mirror: None,
            allow_read: Vec::new(),
            allow_write: Vec::new(),
            identity: None,
            idle_after: None,
            watching: idle::Watching::default(),
        }
    }
}

/// The operator's client certificate for runners, from Secret `namespace/name`, made by the
/// first replica that finds none (a second that races it reads the winner's).
pub async fn operator_identity(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<ClientIdentity, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let what = format!("the runner client Secret {namespace}/{name}");
    if let Some(existing) = api
        .get_opt(name)
        .await
        .map_err(|e| format!("reading {what}: {e}"))?
    {
        return identity_from(&existing, &what);
    }
    let identity = ClientIdentity::generate().map_err(|e| e.to_string())?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY_LABEL.to_owned(),
                "kraken".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        immutable: Some(true),
        data: Some(BTreeMap::from([
            (
                "tls.crt".to_owned(),
                ByteString(identity.cert_der().to_vec()),
            ),
            (
                "tls.key".to_owned(),
                ByteString(identity.key_der().to_vec()),
            ),
        ])),
        ..Secret::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            tracing::info!(
                namespace,
                secret = name,
                "created the runner client certificate"
            );
            Ok(identity)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = api
                .get(name)
                .await
                .map_err(|e| format!("reading {what}: {e}"))?;
            identity_from(&existing, &what)
        }
        Err(e) => Err(format!("creating {what}: {e}")),
    }
}

fn identity_from(secret: &Secret, what: &str) -> Result<ClientIdentity, String> {
    let key = |k: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| b.0.clone())
            .ok_or_else(|| format!("{what} has no {k}"))
    };
    ClientIdentity::from_der(key("tls.crt")?, key("tls.key")?)
        .map_err(|e| format!("{what} does not hold a usable certificate: {e}"))
}

/// One ProviderConfig's runner, as the provider host dials it.
pub(crate) struct RunnerPods {
    client: Client,
    settings: Arc<PodSettings>,
    pc: ProviderConfig,
    provider: Arc<Provider>,
    runner: Runner,
    /// When the runner's objects were last written, and the Pod template's digest then.
    ensured: Mutex<Option<(Instant, String, Vec<u8>)>>,
}

impl RunnerPods {
    /// The dial of ProviderConfig `pc` in `namespace`, whose package `provider` recorded. An
    /// error is the ProviderConfig's to show (a ServiceAccount not allowed, or missing).
    pub(crate) async fn dial(
        client: &Client,
        settings: &Arc<PodSettings>,
        namespace: &str,
        pc: &ProviderConfig,
        provider: Arc<Provider>,
    ) -> Result<Dial, String> {
        let identity = settings
            .identity
            .clone()
            .ok_or("the operator's runner client certificate is not loaded")?;
        let pc_name = pc.metadata.name.clone().unwrap_or_default();
        let named = pc
            .spec
            .runner
            .as_ref()
            .and_then(|r| r.service_account_name.clone());
        let (account, role_arn) = match &named {
            None => (DEFAULT_ACCOUNT.to_owned(), None),
            Some(name) => (name.clone(), named_account(client, namespace, name).await?),
        };
        let runner = Runner {
            namespace: namespace.to_owned(),
            name: objects::runner_name(&pc_name),
            uid: pc.metadata.uid.clone().unwrap_or_default(),
            pc_name,
            account,
            named_account: named.is_some(),
            role_arn,
        };
        let package = package_id(&provider);
        let locate = Arc::new(Self {
            client: client.clone(),
            settings: settings.clone(),
            pc: pc.clone(),
            provider,
            runner,
            ensured: Mutex::new(None),
        });
        Ok(Dial {
            locate,
            identity,
            package,
        })
    }

    /// Write the runner's objects (at most every [`ENSURE_EVERY`]): the template's digest
    /// and the runner's certificate.
    async fn ensure(&self) -> Result<(String, Vec<u8>), String> {
        if let Some((at, digest, cert)) = self
            .ensured
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            && at.elapsed() < ENSURE_EVERY
        {
            return Ok((digest, cert));
        }
        let r = &self.runner;
        let ns = r.namespace.as_str();
        if !r.named_account {
            let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
            create_if_absent(&api, &objects::default_account(ns), DEFAULT_ACCOUNT).await?;
        }
        let cert = self.tls_secret().await?;
        let mut deployment = objects::deployment(r, &self.pc, &self.settings, &self.provider);
        let digest = objects::spec_digest(&deployment)
            .unwrap_or_default()
            .to_owned();
        // Written means wanted: in use now, so not scaled away before it is dialed.
        deployment["metadata"]["annotations"][idle::LAST_USED_ANNOTATION] =
            Json::String(idle::now_mark());
        let params = PatchParams::apply(MANAGER).force();
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), ns);
        api.patch(&r.name, &params, &Patch::Apply(&deployment))
            .await
            .map_err(|e| format!("writing the runner Deployment {ns}/{}: {e}", r.name))?;
        if let Some(idle_after) = self.settings.idle_after {
            idle::watch(&self.settings.watching, api, (ns, &r.name), idle_after);
        }
        let policy = objects::network_policy(r, &self.pc, &self.settings);
        let api: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), ns);
        api.patch(&r.name, &params, &Patch::Apply(&policy))
            .await
            .map_err(|e| format!("writing the runner NetworkPolicy {ns}/{}: {e}", r.name))?;
        *self.ensured.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), digest.clone(), cert.clone()));
        Ok((digest, cert))
    }

    /// Let the next locate write the runner's objects again, if they were written more than
    /// `after` ago.
    fn forget_ensured(&self, after: Duration) {
        let mut ensured = self.ensured.lock().unwrap_or_else(|e| e.into_inner());
        if ensured
            .as_ref()
            .is_some_and(|(at, _, _)| at.elapsed() >= after)
        {
            *ensured = None;
        }
    }

    /// The runner's certificate: from its Secret, made with a fresh pair when there is none;
    /// the operator's certificate in it is brought up to date.
    async fn tls_secret(&self) -> Result<Vec<u8>, String> {
        let r = &self.runner;
        let name = r.secret_name();
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &r.namespace);
        let what = format!("the runner Secret {}/{name}", r.namespace);
        let operator = self
            .settings
            .identity
            .as_ref()
            .map(|i| i.cert_der().to_vec())
            .unwrap_or_default();
        let existing = match api
            .get_opt(&name)
            .await
            .map_err(|e| format!("reading {what}: {e}"))?
        {
            Some(s) => s,
            None => {
                let pair = ClientIdentity::generate().map_err(|e| e.to_string())?;
                let doc =
                    objects::tls_secret(r, &self.pc, (pair.cert_der(), pair.key_der(), &operator));
                create_if_absent(&api, &doc, &name).await?;
                api.get(&name)
                    .await
                    .map_err(|e| format!("reading {what}: {e}"))?
            }
        };
        let data = existing.data.unwrap_or_default();
        if data.get(files::OPERATOR_CERT).map(|b| b.0.as_slice()) != Some(operator.as_slice()) {
            use base64::Engine as _;
            let patch = serde_json::json!({"data": {
                files::OPERATOR_CERT: base64::engine::general_purpose::STANDARD.encode(&operator)}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| format!("updating {what}: {e}"))?;
        }
        data.get(files::RUNNER_CERT)
            .map(|b| b.0.clone())
            .ok_or_else(|| format!("{what} has no {}", files::RUNNER_CERT))
    }
}

#[async_trait]
impl Locate for RunnerPods {
    fn hold(&self, _located: &Located) -> Option<kraken_provider::remote::Held> {
        let idle_after = self.settings.idle_after?;
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.runner.namespace);
        Some(Box::new(idle::mark(
            api,
            self.runner.name.clone(),
            idle_after,
        )))
    }

    async fn locate(&self) -> Result<Located, String> {
        let (digest, server_cert) = self.ensure().await?;
        let r = &self.runner;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &r.namespace);
        let selector = format!("{},{}={digest}", r.selector(), objects::SPEC_LABEL);
        let pods = api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| format!("listing the runner's Pods in {}: {e}", r.namespace))?;
        let protocol = self
            .provider
            .status
            .as_ref()
            .and_then(|s| s.protocol)
            .and_then(|p| u32::try_from(p).ok())
            .unwrap_or(5);
        let mut seen = Vec::new();
        for pod in &pods.items {
            match ready_address(pod) {
                Ok(ip) => {
                    let address = if ip.contains(':') {
                        format!("[{ip}]:{PORT}")
                    } else {
                        format!("{ip}:{PORT}")
                    };
                    return Ok(Located {
                        address,
                        server_cert,
                        protocol,
                        instance: pod.metadata.uid.clone().unwrap_or_default(),
                    });
                }
                Err(why) => seen.push(format!(
                    "Pod {}: {why}",
                    pod.metadata.name.as_deref().unwrap_or_default()
                )),
            }
        }
        if seen.is_empty() {
            // Scaled to zero while idle, or its Deployment deleted: write it again soon.
            self.forget_ensured(ENSURE_AGAIN_AFTER);
            Err(format!(
                "no runner Pod of Deployment {}/{} yet",
                r.namespace, r.name
            ))
        } else {
            Err(seen.join("; "))
        }
    }
}

/// What names the build a runner of `provider` serves: its address, version and the hashes
/// the runner is locked to (it refuses to start without them). None without hashes.
fn package_id(provider: &Provider) -> Option<String> {
    let status = provider.status.as_ref()?;
    if status.hashes.is_empty() {
        return None;
    }
    let mut hashes = status.hashes.clone();
    hashes.sort();
    Some(format!(
        "{}@{}:{}",
        status.address.as_deref().unwrap_or_default(),
        status.version.as_deref().unwrap_or_default(),
        hashes.join(",")
    ))
}

/// A Pod's IP when it is Ready and not going away; else what it is doing.
fn ready_address(pod: &Pod) -> Result<String, String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Err("being deleted".into());
    }
    let status = pod.status.as_ref().ok_or("no status yet")?;
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready");
    match (ready, &status.pod_ip) {
        (Some(c), Some(ip)) if c.status == "True" && !ip.is_empty() => Ok(ip.clone()),
        (Some(c), _) if c.status != "True" => Err(format!(
            "not ready ({}{})",
            c.reason
                .as_deref()
                .unwrap_or(status.phase.as_deref().unwrap_or("Pending")),
            c.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        )),
        _ => Err(format!(
            "{} without an IP",
            status.phase.as_deref().unwrap_or("Pending")
        )),
    }
}

/// A ServiceAccount a ProviderConfig named: allowed by the Namespace's annotation and there;
/// the cloud role its annotation gives it.
async fn named_account(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, String> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = namespaces
        .get(namespace)
        .await
        .map_err(|e| format!("reading Namespace {namespace}: {e}"))?;
    let allowed = ns
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RUNNER_SERVICE_ACCOUNTS_ANNOTATION))
        .is_some_and(|list| list.split(',').any(|n| n.trim() == name));
    if !allowed {
        return Err(format!(
            "spec.runner.serviceAccountName {name} is not allowed in namespace {namespace}: an \
             administrator lists the ServiceAccounts runners may use there in the Namespace's \
             annotation {RUNNER_SERVICE_ACCOUNTS_ANNOTATION}"
        ));
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let account = accounts
        .get_opt(name)
        .await
        .map_err(|e| format!("reading ServiceAccount {namespace}/{name}: {e}"))?
        .ok_or_else(|| {
            format!("spec.runner.serviceAccountName {name}: no such ServiceAccount in {namespace}")
        })?;
    Ok(account
        .metadata
        .annotations
        .and_then(|a| a.get(ROLE_ANNOTATION).cloned()))
}

/// Stop and remove the runner of ProviderConfig `pc_name` (being deleted): scale its
/// Deployment to zero, and once no Pod of it is left, delete it, its NetworkPolicy and its
/// Secret. `Ok(false)` while Pods are still stopping. The runner does not wait for the garbage
/// collector: its Pods are gone before the ProviderConfig is.
pub async fn stop_runner(client: &Client, namespace: &str, pc_name: &str) -> Result<bool, String> {
    let name = objects::runner_name(pc_name);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let what = format!("the runner Deployment {namespace}/{name}");
    if let Some(d) = deployments
        .get_opt(&name)
        .await
        .map_err(|e| format!("reading {what}: {e}"))?
    {
        let wanted = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let running = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        if wanted != 0 {
            let zero = serde_json::json!({"spec": {"replicas": 0}});
            deployments
                .patch(&name, &PatchParams::default(), &Patch::Merge(&zero))
                .await
                .map_err(|e| format!("scaling {what} to zero: {e}"))?;
            return Ok(false);
        }
        if running > 0 {
            return Ok(false);
        }
        delete_if_present(&deployments, &name).await?;
    }
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), namespace);
    delete_if_present(&policies, &name).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    delete_if_present(&secrets, &format!("{name}-tls")).await?;
    tracing::info!(namespace, runner = %name, "removed the runner of a deleted ProviderConfig");
    Ok(true)
}

async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api
        .delete(name, &kube::api::DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(format!("deleting {name}: {e}")),
    }
}

async fn create_if_absent<K>(api: &Api<K>, doc: &Json, name: &str) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(doc.clone()).map_err(|e| format!("{name}: {e}"))?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(format!("creating {name}: {e}")),
    }
}

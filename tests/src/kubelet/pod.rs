//! What a Pod asks the test kubelet for: the process, its environment and its volumes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Container, Pod, Secret, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::json;

use super::{Launch, NODE, NodeLoop};

impl NodeLoop {
    /// The process a Pod asks for: binary, arguments, environment, volumes.
    pub(super) async fn prepare(
        &self,
        client: &kube::Client,
        pod: &Pod,
        dir: &Path,
    ) -> anyhow::Result<Launch> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.as_ref().context("a Pod without spec")?;
        let container: &Container = spec
            .containers
            .first()
            .context("a Pod without containers")?;
        let image = container.image.clone().unwrap_or_default();
        let binary = self
            .images
            .binary(&image)
            .with_context(|| format!("the test kubelet has no binary for image {image:?}"))?
            .clone();
        let mut args: Vec<String> = container
            .command
            .iter()
            .flatten()
            .skip(1)
            .cloned()
            .collect();
        args.extend(container.args.iter().flatten().cloned());
        let account = spec
            .service_account_name
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        let ip = self.next_ip();
        let volumes = self.volumes_dir.join(&ip);
        std::fs::create_dir_all(&volumes)?;
        // The Pod's directory shows its volumes where they are.
        let link = dir.join("volumes");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&volumes, &link)?;
        let mounts = self.volumes(client, pod, &account, &volumes).await?;
        let mut env = vec![
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".to_owned(), dir.display().to_string()),
            ("TMPDIR".to_owned(), dir.display().to_string()),
        ];
        if let Some(port) = self.api_server.rsplit(':').next() {
            env.push(("KUBERNETES_SERVICE_HOST".into(), "127.0.0.1".into()));
            env.push(("KUBERNETES_SERVICE_PORT".into(), port.to_owned()));
        }
        let automount = spec
            .automount_service_account_token
            .or(self.account_automount(client, &ns, &account).await?)
            .unwrap_or(true);
        if automount {
            let token = mint(client, &ns, &account, pod, None, 3600).await?;
            let kubeconfig = dir.join("kubeconfig");
            std::fs::write(&kubeconfig, self.kubeconfig_for(&token)?)?;
            env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
        }
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        for var in container.env.iter().flatten() {
            let value = env_value(var, &secrets, (&ns, &name, &account), &ip).await?;
            env.push((var.name.clone(), rewrite(&value, &mounts)));
        }
        let args = args
            .iter()
            .map(|a| rewrite(&expand(a, &env), &mounts))
            .collect();
        Ok(Launch {
            binary,
            args,
            env,
            ip,
        })
    }

    async fn account_automount(
        &self,
        client: &kube::Client,
        ns: &str,
        account: &str,
    ) -> anyhow::Result<Option<bool>> {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        Ok(api
            .get_opt(account)
            .await?
            .and_then(|sa| sa.automount_service_account_token))
    }

    /// The container's volume mounts as (mountPath, local directory), the volumes written.
    async fn volumes(
        &self,
        client: &kube::Client,
        pod: &Pod,
        account: &str,
        dir: &Path,
    ) -> anyhow::Result<Vec<(String, PathBuf)>> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let spec = pod.spec.as_ref().context("a Pod without spec")?;
        let mut local: HashMap<String, PathBuf> = HashMap::new();
        for volume in spec.volumes.iter().flatten() {
            let vdir = dir.join(&volume.name);
            std::fs::create_dir_all(&vdir)?;
            let as_json = serde_json::to_value(volume)?;
            if let Some(sources) = as_json["projected"]["sources"].as_array() {
                for source in sources {
                    let sat = &source["serviceAccountToken"];
                    if sat.is_null() {
                        bail!(
                            "the test kubelet projects only serviceAccountToken sources (volume {})",
                            volume.name
                        );
                    }
                    let audience = sat["audience"].as_str().map(str::to_owned);
                    let seconds = sat["expirationSeconds"].as_i64().unwrap_or(3600);
                    let token = mint(client, &ns, account, pod, audience, seconds).await?;
                    let path = sat["path"].as_str().unwrap_or("token");
                    std::fs::write(vdir.join(path), token)?;
                }
            } else if let Some(secret) = as_json["secret"]["secretName"].as_str() {
                let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
                let s = api.get(secret).await?;
                for (key, value) in s.data.iter().flatten() {
                    std::fs::write(vdir.join(key), &value.0)?;
                }
            } else if !as_json["emptyDir"].is_null() {
                // The directory is the volume.
            } else {
                bail!(
                    "the test kubelet supports projected tokens, Secrets and emptyDir only (volume {})",
                    volume.name
                );
            }
            local.insert(volume.name.clone(), vdir);
        }
        let container = spec
            .containers
            .first()
            .context("a Pod without containers")?;
        let mut mounts = Vec::new();
        for mount in container.volume_mounts.iter().flatten() {
            let vdir = local
                .get(&mount.name)
                .with_context(|| format!("mount of an unknown volume {}", mount.name))?;
            mounts.push((mount.mount_path.clone(), vdir.clone()));
        }
        Ok(mounts)
    }

    fn kubeconfig_for(&self, token: &str) -> anyhow::Result<String> {
        let ca = std::fs::read(&self.ca)?;
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(ca);
        Ok(json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.api_server, "certificate-authority-data": ca}}],
            "users": [{"name": "pod", "user": {"token": token}}],
            "contexts": [{"name": "pod", "context": {"cluster": "test", "user": "pod"}}],
            "current-context": "pod",
        })
        .to_string())
    }
}

/// A token for `account`, bound to `pod`, from the TokenRequest API.
async fn mint(
    client: &kube::Client,
    ns: &str,
    account: &str,
    pod: &Pod,
    audience: Option<String>,
    seconds: i64,
) -> anyhow::Result<String> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audience.into_iter().collect(),
            expiration_seconds: Some(seconds.max(600)),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..TokenRequest::default()
    };
    let answer = api
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .with_context(|| format!("a token for ServiceAccount {ns}/{account}"))?;
    Ok(answer.status.context("no token in the answer")?.token)
}

/// `value` with a volume's mountPath prefix replaced by its local directory.
fn rewrite(value: &str, mounts: &[(String, PathBuf)]) -> String {
    for (path, local) in mounts {
        if let Some(rest) = value.strip_prefix(path.as_str())
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return format!("{}{rest}", local.display());
        }
    }
    value.to_owned()
}

/// `$(NAME)` in `arg` replaced by the variable's value where the container defines it (the
/// last definition wins), as a kubelet expands `command` and `args`; `$$` is a `$`.
fn expand(arg: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some((name, after)) = tail
            .strip_prefix("$(")
            .and_then(|t| t.split_once(')'))
            .filter(|(name, _)| env.iter().any(|(k, _)| k == name))
        {
            let value = env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v);
            out.push_str(value.map_or("", String::as_str));
            rest = after;
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// One environment variable's value: `value`, a `fieldRef` the test kubelet knows, or a key of a
/// Secret of the Pod's namespace. `pod` is (namespace, name, ServiceAccount); `ip` its address.
async fn env_value(
    var: &k8s_openapi::api::core::v1::EnvVar,
    secrets: &Api<Secret>,
    pod: (&str, &str, &str),
    ip: &str,
) -> anyhow::Result<String> {
    let (ns, name, account) = pod;
    Ok(match (&var.value, &var.value_from) {
        (Some(v), _) => v.clone(),
        (None, Some(from)) => {
            if let Some(field) = &from.field_ref {
                match field.field_path.as_str() {
                    "metadata.name" => name.to_owned(),
                    "metadata.namespace" => ns.to_owned(),
                    "spec.nodeName" => NODE.into(),
                    "spec.serviceAccountName" => account.to_owned(),
                    "status.podIP" => ip.to_owned(),
                    "status.hostIP" => "127.0.0.1".into(),
                    other => bail!("the test kubelet cannot fill fieldRef {other}"),
                }
            } else if let Some(key) = &from.secret_key_ref {
                let secret = secrets.get(&key.name).await?;
                let bytes = secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(&key.key))
                    .with_context(|| format!("Secret {} has no key {}", key.name, key.key))?;
                String::from_utf8(bytes.0.clone())?
            } else {
                bail!(
                    "the test kubelet cannot fill env {} (only value, fieldRef, secretKeyRef)",
                    var.name
                )
            }
        }
        (None, None) => String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn expands_defined_variables_as_a_kubelet_does() {
        let env = vec![("POD_IP".to_owned(), "127.1.0.2".to_owned())];
        assert_eq!(expand("[$(POD_IP)]:7443", &env), "[127.1.0.2]:7443");
        assert_eq!(
            expand("$(UNSET) $$(POD_IP) $", &env),
            "$(UNSET) $(POD_IP) $"
        );
    }
}

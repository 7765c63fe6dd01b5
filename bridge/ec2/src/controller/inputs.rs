//! What a pass starts from: the spec with `valuesFrom` resolved through the hub, and the EC2
//! client of the object's AwsConfig (its region, endpoint and the credentials in its Secrets).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::{Value as Json, json};

use super::super::client::{Ec2, Target};
use super::{Error, Pass, Result};
use kraken_core_kinds::ec2::{ARGUMENTS, AwsConfig, AwsCredentials, EC2InstanceSpec, GROUP};
use kraken_core_kinds::hub::ValueReference;
use kraken_core_kinds::provider_config::SecretKeyRef;
use kraken_hub::consumer::{Values, request_values};
use kraken_kit::conditions::SYNCED;
use kraken_value::fields::set_json_path;

impl Pass<'_> {
    /// The EC2 client of the object's AwsConfig (or of the operator's environment).
    pub(super) async fn ec2(&self, spec: &EC2InstanceSpec) -> Result<Arc<dyn Ec2>> {
        let factory = &self.ctrl.factory;
        let policy = &self.ctrl.ctx.policy;
        let Some(r) = &spec.aws_config_ref else {
            let target = Target::default();
            policy
                .check(&target, "no spec.awsConfigRef")
                .map_err(Error::Refused)?;
            return Ok(factory.client(&target).await);
        };
        let cfg = Api::<AwsConfig>::namespaced(self.ctrl.ctx.client.clone(), &self.ns)
            .get_opt(&r.name)
            .await?
            .ok_or_else(|| {
                Error::AwsConfigMissing(format!(
                    "AwsConfig {} (spec.awsConfigRef) not found in namespace {}",
                    r.name, self.ns
                ))
            })?;
        let mut target = Target {
            region: cfg.spec.region.clone(),
            endpoint: cfg.spec.endpoint.clone(),
            credentials: None,
        };
        if let Some(c) = &cfg.spec.credentials {
            target.credentials = Some(self.credentials(&r.name, c).await?);
        }
        policy
            .check(&target, &format!("AwsConfig {}", r.name))
            .map_err(Error::Refused)?;
        Ok(factory.client(&target).await)
    }

    /// The static credentials an AwsConfig names: access key id, secret key, session token.
    async fn credentials(
        &self,
        cfg_name: &str,
        c: &AwsCredentials,
    ) -> Result<(String, String, Option<String>)> {
        let id = self
            .secret_value(
                cfg_name,
                &c.access_key_id_secret_ref,
                "accessKeyIdSecretRef",
            )
            .await?;
        let secret = self
            .secret_value(
                cfg_name,
                &c.secret_access_key_secret_ref,
                "secretAccessKeySecretRef",
            )
            .await?;
        let token = match &c.session_token_secret_ref {
            Some(t) => Some(
                self.secret_value(cfg_name, t, "sessionTokenSecretRef")
                    .await?,
            ),
            None => None,
        };
        Ok((id, secret, token))
    }

    /// One key of a Secret, trimmed; `what` names the AwsConfig field in messages.
    async fn secret_value(&self, cfg_name: &str, key: &SecretKeyRef, what: &str) -> Result<String> {
        let secrets: Api<Secret> = Api::namespaced(self.ctrl.ctx.client.clone(), &self.ns);
        let name = &key.name;
        let secret = secrets.get_opt(name).await?.ok_or_else(|| {
            Error::SecretMissing(format!(
                "AwsConfig {cfg_name}: Secret {name} (credentials.{what}) not found"
            ))
        })?;
        if let Some(why) = kraken_core_kinds::secret_off_limits(&secret) {
            return Err(Error::Forbidden(format!(
                "AwsConfig {cfg_name}: Secret {name} (credentials.{what}) cannot be used: {why}"
            )));
        }
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(&key.key))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                Error::SecretMissing(format!(
                    "AwsConfig {cfg_name}: Secret {name} has no key {} (credentials.{what})",
                    key.key
                ))
            })
    }

    /// The spec with `valuesFrom` merged in, or `None` while the hub has not resolved it
    /// (the status then says why; the request's change retriggers).
    pub(super) async fn resolve(&mut self) -> Result<Option<EC2InstanceSpec>> {
        let spec = self.obj.spec.clone();
        let had_request = self.status.dependency_request.is_some();
        if spec.values_from.is_empty() && !had_request {
            return Ok(Some(spec));
        }
        let mut references = Vec::with_capacity(spec.values_from.len());
        for (i, entry) in spec.values_from.iter().enumerate() {
            let mut r: ValueReference = serde_json::from_value(entry.clone())
                .map_err(|e| Error::InvalidSpec(format!("spec.valuesFrom[{i}]: {e}")))?;
            r.r#type = Some(argument_type(&r.path).ok_or_else(|| {
                Error::InvalidSpec(format!(
                    "spec.valuesFrom[{i}].path: EC2Instance has no argument {}",
                    r.path
                ))
            })?);
            // User data often carries secrets: never in a request's status.
            r.sensitive = r.path == "userData";
            references.push(r);
        }
        let ctx = &self.ctrl.ctx;
        let values = request_values(
            &ctx.client,
            &ctx.metrics,
            &ctx.hub_index,
            &self.ns,
            &self.reference(),
            GROUP,
            references,
        )
        .await?;
        let request = kraken_hub::object_key(GROUP, "EC2Instance", &self.name);
        match values {
            Values::None => {
                self.status.dependency_request = None;
                Ok(Some(spec))
            }
            Values::Waiting { reason, message } => {
                self.status.dependency_request = Some(request);
                let previous = self.condition(SYNCED).map(|(_, _, m)| m);
                let (conditions, event) =
                    kraken_hub::consumer::waiting(&reason, message, previous.as_deref());
                self.set(&conditions);
                self.flush().await?;
                if let Some(message) = event {
                    self.event(true, kraken_hub::consumer::WAITING, message)
                        .await;
                }
                Ok(None)
            }
            Values::Ready { values, .. } => {
                self.status.dependency_request = Some(request);
                let mut merged = serde_json::to_value(&spec)
                    .map_err(|e| Error::InvalidSpec(format!("spec: {e}")))?;
                for (path, value) in values {
                    set_json_path(&mut merged, &path, value)
                        .map_err(|e| Error::InvalidSpec(format!("spec.valuesFrom: {e}")))?;
                }
                serde_json::from_value(merged)
                    .map(Some)
                    .map_err(|e| Error::InvalidSpec(format!("spec.valuesFrom: {e}")))
            }
        }
    }
}

/// The Terraform type (as JSON) a valuesFrom value for `path` is converted to.
pub(super) fn argument_type(path: &str) -> Option<Json> {
    let parse = |t: &str| serde_json::from_str::<Json>(t).ok();
    for (name, ty, subpaths) in ARGUMENTS {
        if path == *name {
            return if *name == "rootVolume" {
                Some(json!("dynamic"))
            } else {
                parse(ty)
            };
        }
        if let Some(rest) = path.strip_prefix(name).and_then(|r| r.strip_prefix('.'))
            && *subpaths
            && !rest.is_empty()
        {
            return match *name {
                "tags" => Some(json!("string")),
                "securityGroupIds" => rest.parse::<usize>().ok().map(|_| json!("string")),
                "rootVolume" => match rest {
                    "size" => Some(json!("number")),
                    "type" => Some(json!("string")),
                    _ => None,
                },
                _ => None,
            };
        }
    }
    None
}

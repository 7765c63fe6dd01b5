//! The EC2 calls the controller makes, behind a narrow trait ([`Ec2`]) in domain types, and
//! its real implementation on aws-sdk-ec2 ([`SdkEc2`]), made per AwsConfig target by an
//! [`Ec2Factory`] ([`Clients`] caches the SDK clients). SDK types never leave this module.
//!
//! Errors keep what a user needs to act: the EC2 error code and message for a refused request
//! (`InvalidAMIID.NotFound: The image id '[ami-…]' does not exist`), or the kind of failure
//! when no answer came (endpoint unreachable, no credentials, timeout).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_ec2::config::{Credentials, Region};
use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types::{
    AttributeValue, BlockDeviceMapping, EbsBlockDevice, Filter, InstanceType, ResourceType, Tag,
    TagSpecification, VolumeType,
};

/// The tag naming the EC2Instance (uid) an instance belongs to.
pub const OWNER_TAG: &str = "kraken.dev/owner-uid";
/// The tag naming the instance's index in its EC2Instance.
pub const INDEX_TAG: &str = "kraken.dev/index";
/// The tag numbering launches for one index (see `InstanceStatus::launch`).
pub const LAUNCH_TAG: &str = "kraken.dev/launch";
/// The tag naming the EC2Instance as namespace/name, for people.
pub const NAME_TAG: &str = "kraken.dev/name";
/// The tag holding a digest of what cannot be read back from EC2 (user data, root volume), to
/// tell when a change replaces the instance.
pub const CONFIG_TAG: &str = "kraken.dev/launch-config";

/// An EC2 instance as the controller sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Instance {
    pub id: String,
    /// pending, running, stopping, stopped, shutting-down or terminated.
    pub state: String,
    pub instance_type: String,
    pub image_id: String,
    pub subnet_id: String,
    pub key_name: String,
    pub security_group_ids: Vec<String>,
    pub private_ip: String,
    pub public_ip: String,
    pub private_dns: String,
    pub public_dns: String,
    pub tags: BTreeMap<String, String>,
}

impl Instance {
    /// Not terminated or on its way there.
    pub fn is_live(&self) -> bool {
        !matches!(self.state.as_str(), "shutting-down" | "terminated")
    }

    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags.get(key).map(String::as_str)
    }
}

/// What to launch: one instance. Its `Debug` shows the user data's length, never its text.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Launch {
    /// The idempotency token: the same token never launches a second instance.
    pub client_token: String,
    pub image_id: String,
    pub instance_type: String,
    pub subnet_id: Option<String>,
    pub security_group_ids: Vec<String>,
    pub key_name: Option<String>,
    /// Plain text; encoded here.
    pub user_data: Option<String>,
    pub root_volume_size: Option<i64>,
    pub root_volume_type: Option<String>,
    pub tags: BTreeMap<String, String>,
}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch")
            .field("client_token", &self.client_token)
            .field("image_id", &self.image_id)
            .field("instance_type", &self.instance_type)
            .field("subnet_id", &self.subnet_id)
            .field("security_group_ids", &self.security_group_ids)
            .field("key_name", &self.key_name)
            .field("user_data_bytes", &self.user_data.as_ref().map(String::len))
            .field("root_volume_size", &self.root_volume_size)
            .field("root_volume_type", &self.root_volume_type)
            .field("tags", &self.tags)
            .finish()
    }
}

/// How a call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// EC2 answered with an error code (a bad AMI, subnet, parameter; throttling).
    Api,
    /// EC2 refused the credentials (AuthFailure and the like), or there were none.
    Credentials,
    /// No answer: the endpoint could not be reached.
    Unreachable,
    /// No answer in time.
    Timeout,
    /// Anything else (a malformed answer, a request that could not be built).
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{operation}: {message}")]
pub struct Ec2Error {
    pub operation: &'static str,
    pub kind: ErrorKind,
    /// The EC2 error code, when EC2 answered.
    pub code: Option<String>,
    pub message: String,
}

impl Ec2Error {
    /// Whether EC2 said the thing named does not exist (a missing instance id, AMI, subnet).
    pub fn is_not_found(&self) -> bool {
        self.code
            .as_deref()
            .is_some_and(|c| c.ends_with("NotFound"))
    }
}

pub type Result<T, E = Ec2Error> = std::result::Result<T, E>;

/// The EC2 calls the controller makes.
#[async_trait]
pub trait Ec2: Send + Sync {
    /// Every instance tagged as owned by `owner_uid`, terminated ones included while EC2
    /// still lists them.
    async fn owned(&self, owner_uid: &str) -> Result<Vec<Instance>>;
    /// The instances with these ids; a missing id is an error with a NotFound code.
    async fn describe(&self, ids: &[String]) -> Result<Vec<Instance>>;
    /// The root device name of an AMI (for the root volume's block device mapping).
    async fn root_device(&self, image_id: &str) -> Result<Option<String>>;
    /// Launches one instance; a repeated token returns the instance it launched before.
    async fn run(&self, launch: &Launch) -> Result<Instance>;
    async fn terminate(&self, ids: &[String]) -> Result<()>;
    async fn stop(&self, ids: &[String]) -> Result<()>;
    async fn start(&self, ids: &[String]) -> Result<()>;
    async fn set_instance_type(&self, id: &str, instance_type: &str) -> Result<()>;
    async fn set_security_groups(&self, id: &str, groups: &[String]) -> Result<()>;
    async fn create_tags(&self, id: &str, tags: &BTreeMap<String, String>) -> Result<()>;
    async fn delete_tags(&self, id: &str, keys: &[String]) -> Result<()>;
}

/// Where and as whom to reach EC2. Its `Debug` never shows the credentials.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Target {
    pub region: Option<String>,
    pub endpoint: Option<String>,
    /// Static credentials: access key id, secret access key, session token. `None` uses the
    /// SDK's standard chain.
    pub credentials: Option<(String, String, Option<String>)>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field(
                "credentials",
                &self
                    .credentials
                    .as_ref()
                    .map(|(id, _, _)| format!("{id}/<redacted>")),
            )
            .finish()
    }
}

/// The region used when neither the AwsConfig nor the environment names one.
pub const DEFAULT_REGION: &str = "us-east-1";

/// Where the controller gets an [`Ec2`] for a [`Target`]: the seam that lets unit tests put a
/// stateful fake in place of aws-sdk-ec2.
#[async_trait]
pub trait Ec2Factory: Send + Sync {
    async fn client(&self, target: &Target) -> Arc<dyn Ec2>;
}

/// Makes and keeps one SDK client per [`Target`] (connections and credentials are reused).
#[derive(Default)]
pub struct Clients {
    clients: Mutex<Vec<(Target, aws_sdk_ec2::Client)>>,
}

impl Clients {
    /// Most targets kept; the oldest is dropped beyond it (rotated keys leave old ones behind).
    const MAX: usize = 64;

    pub async fn get(&self, target: &Target) -> SdkEc2 {
        if let Some(c) = self
            .clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(t, _)| t == target)
            .map(|(_, c)| c.clone())
        {
            return SdkEc2 { client: c };
        }
        let client = build_client(target).await;
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if clients.len() >= Self::MAX {
            clients.remove(0);
        }
        clients.push((target.clone(), client.clone()));
        SdkEc2 { client }
    }
}

#[async_trait]
impl Ec2Factory for Clients {
    async fn client(&self, target: &Target) -> Arc<dyn Ec2> {
        Arc::new(self.get(target).await)
    }
}

async fn build_client(target: &Target) -> aws_sdk_ec2::Client {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(3))
                .operation_attempt_timeout(Duration::from_secs(20))
                .operation_timeout(Duration::from_secs(60))
                .build(),
        )
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(3));
    if let Some(region) = &target.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(endpoint) = &target.endpoint {
        loader = loader.endpoint_url(endpoint.clone());
    }
    if let Some((id, secret, token)) = &target.credentials {
        loader = loader.credentials_provider(Credentials::new(
            id.clone(),
            secret.clone(),
            token.clone(),
            None,
            "kraken-awsconfig",
        ));
    }
    let sdk = loader.load().await;
    let mut config = aws_sdk_ec2::config::Builder::from(&sdk);
    if sdk.region().is_none() {
        config = config.region(Region::new(DEFAULT_REGION));
    }
    aws_sdk_ec2::Client::from_conf(config.build())
}

/// [`Ec2`] on aws-sdk-ec2.
#[derive(Clone)]
pub struct SdkEc2 {
    client: aws_sdk_ec2::Client,
}

fn error<E>(operation: &'static str, err: SdkError<E>) -> Ec2Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let full = DisplayErrorContext(&err).to_string();
    let credentials = || {
        let lower = full.to_lowercase();
        lower.contains("credential") || lower.contains("no identity")
    };
    let (kind, code, message) = match &err {
        SdkError::ServiceError(e) => {
            let e = e.err();
            let code = e.code().map(str::to_owned);
            let message = e.message().unwrap_or("no message").to_owned();
            let kind = match code.as_deref() {
                Some(
                    "AuthFailure"
                    | "UnauthorizedOperation"
                    | "InvalidClientTokenId"
                    | "SignatureDoesNotMatch"
                    | "MissingAuthenticationToken"
                    | "ExpiredToken"
                    | "OptInRequired",
                ) => ErrorKind::Credentials,
                _ => ErrorKind::Api,
            };
            let text = match &code {
                Some(c) => format!("{c}: {message}"),
                None => message,
            };
            (kind, code, text)
        }
        SdkError::TimeoutError(_) => (
            ErrorKind::Timeout,
            None,
            "no answer from the EC2 endpoint in time".to_owned(),
        ),
        SdkError::DispatchFailure(d) if d.is_timeout() => (
            ErrorKind::Timeout,
            None,
            format!("the EC2 endpoint did not answer in time ({full})"),
        ),
        _ if credentials() => (
            ErrorKind::Credentials,
            None,
            format!("no AWS credentials could be loaded ({full})"),
        ),
        SdkError::DispatchFailure(d) if d.is_io() => (
            ErrorKind::Unreachable,
            None,
            format!("the EC2 endpoint cannot be reached ({full})"),
        ),
        SdkError::DispatchFailure(_) => (ErrorKind::Unreachable, None, full.clone()),
        _ => (ErrorKind::Other, None, full.clone()),
    };
    Ec2Error {
        operation,
        kind,
        code,
        message,
    }
}

fn instance(i: &aws_sdk_ec2::types::Instance) -> Instance {
    let s = |v: Option<&str>| v.unwrap_or_default().to_owned();
    Instance {
        id: s(i.instance_id()),
        state: i
            .state()
            .and_then(|st| st.name())
            .map(|n| n.as_str().to_owned())
            .unwrap_or_default(),
        instance_type: i
            .instance_type()
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default(),
        image_id: s(i.image_id()),
        subnet_id: s(i.subnet_id()),
        key_name: s(i.key_name()),
        security_group_ids: i
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_owned))
            .collect(),
        private_ip: s(i.private_ip_address()),
        public_ip: s(i.public_ip_address()),
        private_dns: s(i.private_dns_name()),
        public_dns: s(i.public_dns_name()),
        tags: i
            .tags()
            .iter()
            .filter_map(|t| {
                Some((
                    t.key()?.to_owned(),
                    t.value().unwrap_or_default().to_owned(),
                ))
            })
            .collect(),
    }
}

fn tags(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

impl SdkEc2 {
    async fn describe_with(
        &self,
        ids: Option<Vec<String>>,
        filters: Option<Vec<Filter>>,
    ) -> Result<Vec<Instance>> {
        let mut pages = self
            .client
            .describe_instances()
            .set_instance_ids(ids)
            .set_filters(filters)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| error("DescribeInstances", e))?;
            for r in page.reservations() {
                out.extend(r.instances().iter().map(instance));
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl Ec2 for SdkEc2 {
    async fn owned(&self, owner_uid: &str) -> Result<Vec<Instance>> {
        let filter = Filter::builder()
            .name(format!("tag:{OWNER_TAG}"))
            .values(owner_uid)
            .build();
        self.describe_with(None, Some(vec![filter])).await
    }

    async fn describe(&self, ids: &[String]) -> Result<Vec<Instance>> {
        self.describe_with(Some(ids.to_vec()), None).await
    }

    async fn root_device(&self, image_id: &str) -> Result<Option<String>> {
        let out = self
            .client
            .describe_images()
            .image_ids(image_id)
            .send()
            .await
            .map_err(|e| error("DescribeImages", e))?;
        Ok(out
            .images()
            .first()
            .and_then(|i| i.root_device_name())
            .map(str::to_owned))
    }

    async fn run(&self, launch: &Launch) -> Result<Instance> {
        use base64::Engine as _;
        let mut req = self
            .client
            .run_instances()
            .client_token(&launch.client_token)
            .image_id(&launch.image_id)
            .instance_type(InstanceType::from(launch.instance_type.as_str()))
            .min_count(1)
            .max_count(1)
            .set_subnet_id(launch.subnet_id.clone())
            .set_key_name(launch.key_name.clone())
            .set_user_data(
                launch
                    .user_data
                    .as_ref()
                    .map(|d| base64::engine::general_purpose::STANDARD.encode(d)),
            )
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Instance)
                    .set_tags(Some(tags(&launch.tags)))
                    .build(),
            );
        if !launch.security_group_ids.is_empty() {
            req = req.set_security_group_ids(Some(launch.security_group_ids.clone()));
        }
        if launch.root_volume_size.is_some() || launch.root_volume_type.is_some() {
            let device = self
                .root_device(&launch.image_id)
                .await?
                .unwrap_or_else(|| "/dev/xvda".to_owned());
            let ebs = EbsBlockDevice::builder()
                .set_volume_size(launch.root_volume_size.and_then(|s| i32::try_from(s).ok()))
                .set_volume_type(launch.root_volume_type.as_deref().map(VolumeType::from))
                .delete_on_termination(true)
                .build();
            req = req.block_device_mappings(
                BlockDeviceMapping::builder()
                    .device_name(device)
                    .ebs(ebs)
                    .build(),
            );
        }
        let out = req.send().await.map_err(|e| error("RunInstances", e))?;
        out.instances()
            .first()
            .map(instance)
            .ok_or_else(|| Ec2Error {
                operation: "RunInstances",
                kind: ErrorKind::Other,
                code: None,
                message: "EC2 answered without an instance".into(),
            })
    }

    async fn terminate(&self, ids: &[String]) -> Result<()> {
        self.client
            .terminate_instances()
            .set_instance_ids(Some(ids.to_vec()))
            .send()
            .await
            .map_err(|e| error("TerminateInstances", e))?;
        Ok(())
    }

    async fn stop(&self, ids: &[String]) -> Result<()> {
        self.client
            .stop_instances()
            .set_instance_ids(Some(ids.to_vec()))
            .send()
            .await
            .map_err(|e| error("StopInstances", e))?;
        Ok(())
    }

    async fn start(&self, ids: &[String]) -> Result<()> {
        self.client
            .start_instances()
            .set_instance_ids(Some(ids.to_vec()))
            .send()
            .await
            .map_err(|e| error("StartInstances", e))?;
        Ok(())
    }

    async fn set_instance_type(&self, id: &str, instance_type: &str) -> Result<()> {
        self.client
            .modify_instance_attribute()
            .instance_id(id)
            .instance_type(AttributeValue::builder().value(instance_type).build())
            .send()
            .await
            .map_err(|e| error("ModifyInstanceAttribute", e))?;
        Ok(())
    }

    async fn set_security_groups(&self, id: &str, groups: &[String]) -> Result<()> {
        self.client
            .modify_instance_attribute()
            .instance_id(id)
            .set_groups(Some(groups.to_vec()))
            .send()
            .await
            .map_err(|e| error("ModifyInstanceAttribute", e))?;
        Ok(())
    }

    async fn create_tags(&self, id: &str, t: &BTreeMap<String, String>) -> Result<()> {
        self.client
            .create_tags()
            .resources(id)
            .set_tags(Some(tags(t)))
            .send()
            .await
            .map_err(|e| error("CreateTags", e))?;
        Ok(())
    }

    async fn delete_tags(&self, id: &str, keys: &[String]) -> Result<()> {
        self.client
            .delete_tags()
            .resources(id)
            .set_tags(Some(
                keys.iter().map(|k| Tag::builder().key(k).build()).collect(),
            ))
            .send()
            .await
            .map_err(|e| error("DeleteTags", e))?;
        Ok(())
    }
}

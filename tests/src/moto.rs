//! moto's EC2 server on loopback — the EC2 emulator the native path is tested against — and
//! an independent EC2 client for tests ([`Ec2Probe`]): it reads and changes what the
//! emulator holds through aws-sdk-ec2 directly, not through Kraken's wrapper, so a test sees
//! the "cloud" the way a user with the AWS CLI would.
//!
//! moto is started with AMI and instance-type validation on, so a launch with an AMI that does
//! not exist fails as it does on AWS (`InvalidAMIID.NotFound`). It does not honour
//! RunInstances client tokens and changes instance states at once; its ids are random per
//! start.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use aws_sdk_ec2::types::{Filter, InstanceType, ResourceType, Tag, TagSpecification};

use crate::TestEnv;
use crate::operator::free_port;

mod recording;
pub use recording::{Cursor, reads_only, recorded_action};

/// The region every test uses (moto keys its state by the request's signing region).
pub const REGION: &str = "us-east-1";
/// An AMI moto knows in us-east-1 (Amazon Linux 2023, x86_64).
pub const AMI: &str = "ami-03c3da4cfa8e8943a";
/// A second AMI moto knows in every region (Ubuntu), for replacements.
pub const AMI_2: &str = "ami-1e749f67";

/// A running `moto_server`, killed on drop.
pub struct Moto {
    child: Child,
    pub port: u16,
    /// Where moto's recorder writes the requests it records ([`Moto::record`]).
    pub(crate) recording: std::path::PathBuf,
}

impl Moto {
    /// Starts moto on a free loopback port, logging to `<log_dir>/moto.log`, and waits until
    /// it answers.
    pub fn start(log_dir: &Path) -> anyhow::Result<Self> {
        let env = TestEnv::load()?;
        let bin = env.path("KRAKEN_TEST_MOTO")?;
        let port = free_port()?;
        std::fs::create_dir_all(log_dir)?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_dir.join("moto.log"))?;
        let recording = log_dir.join("moto-recording.jsonl");
        let child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env("MOTO_RECORDER_FILEPATH", &recording)
            .env("MOTO_ENABLE_AMI_VALIDATION", "true")
            .env("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let moto = Self {
            child,
            port,
            recording,
        };
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        crate::wait_for(Duration::from_secs(60), "moto_server to answer", || {
            match crate::operator::http_get(addr, "/moto-api/data.json") {
                Ok((200, _)) => Ok(Some(())),
                Ok((code, _)) => bail!("HTTP {code}"),
                Err(e) => Err(e),
            }
        })?;
        Ok(moto)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Forgets every instance, VPC and tag (`POST /moto-api/reset`): a fresh cloud.
    pub fn reset(&self) -> anyhow::Result<()> {
        self.post("/moto-api/reset")
    }

    pub(crate) fn post(&self, path: &str) -> anyhow::Result<()> {
        use std::io::{Read as _, Write as _};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)?;
        if !answer.starts_with("HTTP/1.1 200") && !answer.starts_with("HTTP/1.0 200") {
            bail!(
                "moto {path} answered {}",
                answer.lines().next().unwrap_or_default()
            );
        }
        Ok(())
    }
}

/// CPU seconds (user + system) a process has used so far.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> f64 { fields.get(i).and_then(|v| v.parse().ok()).unwrap_or(0.0) };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    Ok((ticks(11) + ticks(12)) / 100.0)
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An instance as the probe reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub id: String,
    pub state: String,
    pub instance_type: String,
    pub image_id: String,
    pub subnet_id: String,
    pub private_ip: String,
    pub security_groups: Vec<String>,
    pub tags: BTreeMap<String, String>,
}

/// aws-sdk-ec2 against an endpoint, driven synchronously for tests.
pub struct Ec2Probe {
    rt: tokio::runtime::Runtime,
    client: aws_sdk_ec2::Client,
}

impl Ec2Probe {
    pub fn new(endpoint: &str) -> anyhow::Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let config = aws_sdk_ec2::Config::builder()
            .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
            .region(aws_sdk_ec2::config::Region::new(REGION))
            .endpoint_url(endpoint)
            .credentials_provider(aws_sdk_ec2::config::Credentials::new(
                "testing", "testing", None, None, "tests",
            ))
            .build();
        Ok(Self {
            rt,
            client: aws_sdk_ec2::Client::from_conf(config),
        })
    }

    fn seen(i: &aws_sdk_ec2::types::Instance) -> Seen {
        let s = |v: Option<&str>| v.unwrap_or_default().to_string();
        Seen {
            id: s(i.instance_id()),
            state: i
                .state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_string())
                .unwrap_or_default(),
            instance_type: i
                .instance_type()
                .map(|t| t.as_str().to_string())
                .unwrap_or_default(),
            image_id: s(i.image_id()),
            subnet_id: s(i.subnet_id()),
            private_ip: s(i.private_ip_address()),
            security_groups: i
                .security_groups()
                .iter()
                .map(|g| s(g.group_id()))
                .collect(),
            tags: i
                .tags()
                .iter()
                .map(|t| (s(t.key()), s(t.value())))
                .collect(),
        }
    }

    /// Every instance, with these filters (name, value).
    pub fn instances(&self, filters: &[(&str, &str)]) -> anyhow::Result<Vec<Seen>> {
        let filters: Vec<Filter> = filters
            .iter()
            .map(|(n, v)| Filter::builder().name(*n).values(*v).build())
            .collect();
        self.rt.block_on(async {
            let mut pages = self
                .client
                .describe_instances()
                .set_filters(Some(filters).filter(|f| !f.is_empty()))
                .into_paginator()
                .send();
            let mut out = Vec::new();
            while let Some(page) = pages.next().await {
                for r in page?.reservations() {
                    out.extend(r.instances().iter().map(Self::seen));
                }
            }
            Ok(out)
        })
    }

    /// The live (not terminated) instances tagged with this EC2Instance uid.
    pub fn owned_live(&self, uid: &str) -> anyhow::Result<Vec<Seen>> {
        let mut all = self.instances(&[("tag:kraken.dev/owner-uid", uid)])?;
        all.retain(|i| i.state != "terminated" && i.state != "shutting-down");
        all.sort_by(|a, b| {
            a.tags
                .get("kraken.dev/index")
                .cmp(&b.tags.get("kraken.dev/index"))
        });
        Ok(all)
    }

    pub fn instance(&self, id: &str) -> anyhow::Result<Seen> {
        let id = id.to_string();
        self.rt.block_on(async {
            let out = self
                .client
                .describe_instances()
                .instance_ids(&id)
                .send()
                .await?;
            out.reservations()
                .iter()
                .flat_map(|r| r.instances())
                .map(Self::seen)
                .next()
                .with_context(|| format!("no instance {id}"))
        })
    }

    /// Launches a plain instance outside Kraken (to adopt).
    pub fn run(&self, image: &str, tags: &[(&str, &str)]) -> anyhow::Result<String> {
        let tags: Vec<Tag> = tags
            .iter()
            .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
            .collect();
        self.rt.block_on(async {
            let out = self
                .client
                .run_instances()
                .image_id(image)
                .instance_type(InstanceType::T3Micro)
                .min_count(1)
                .max_count(1)
                .tag_specifications(
                    TagSpecification::builder()
                        .resource_type(ResourceType::Instance)
                        .set_tags(Some(tags))
                        .build(),
                )
                .send()
                .await?;
            out.instances()
                .first()
                .and_then(|i| i.instance_id())
                .map(str::to_string)
                .context("RunInstances returned no instance")
        })
    }

    /// The user data EC2 holds for an instance, decoded.
    pub fn user_data(&self, id: &str) -> anyhow::Result<Option<String>> {
        use base64::Engine as _;
        self.rt.block_on(async {
            let out = self
                .client
                .describe_instance_attribute()
                .instance_id(id)
                .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
                .send()
                .await?;
            let Some(b64) = out.user_data().and_then(|u| u.value()) else {
                return Ok(None);
            };
            let bytes = base64::engine::general_purpose::STANDARD.decode(b64)?;
            Ok(Some(String::from_utf8(bytes)?))
        })
    }

    pub fn terminate(&self, id: &str) -> anyhow::Result<()> {
        self.rt.block_on(async {
            self.client
                .terminate_instances()
                .instance_ids(id)
                .send()
                .await?;
            Ok(())
        })
    }

    pub fn stop(&self, id: &str) -> anyhow::Result<()> {
        self.rt.block_on(async {
            self.client.stop_instances().instance_ids(id).send().await?;
            Ok(())
        })
    }

    pub fn set_tag(&self, id: &str, key: &str, value: &str) -> anyhow::Result<()> {
        self.rt.block_on(async {
            self.client
                .create_tags()
                .resources(id)
                .tags(Tag::builder().key(key).value(value).build())
                .send()
                .await?;
            Ok(())
        })
    }

    /// A security group in the default VPC; returns its id.
    pub fn create_security_group(&self, name: &str) -> anyhow::Result<String> {
        let name = name.to_string();
        self.rt.block_on(async {
            self.client
                .create_security_group()
                .group_name(&name)
                .description("kraken test")
                .send()
                .await?
                .group_id()
                .map(str::to_string)
                .context("CreateSecurityGroup returned no id")
        })
    }

    /// A new VPC with one subnet; returns the subnet id.
    pub fn create_subnet(&self, cidr: &str) -> anyhow::Result<String> {
        let cidr = cidr.to_string();
        self.rt.block_on(async {
            let vpc = self
                .client
                .create_vpc()
                .cidr_block(&cidr)
                .send()
                .await?
                .vpc()
                .and_then(|v| v.vpc_id())
                .map(str::to_string)
                .context("CreateVpc returned no VPC")?;
            self.client
                .create_subnet()
                .vpc_id(vpc)
                .cidr_block(&cidr)
                .send()
                .await?
                .subnet()
                .and_then(|s| s.subnet_id())
                .map(str::to_string)
                .context("CreateSubnet returned no subnet")
        })
    }
}

/// The operator's AWS environment: no credentials of its own, no instance metadata lookups,
/// and any default endpoint pointed at a closed loopback port, so nothing leaves the machine.
pub fn operator_env() -> anyhow::Result<Vec<(String, String)>> {
    let closed = crate::operator::free_port()?;
    Ok(vec![
        ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
        ("AWS_CONFIG_FILE".into(), "/nonexistent/kraken-test".into()),
        (
            "AWS_SHARED_CREDENTIALS_FILE".into(),
            "/nonexistent/kraken-test".into(),
        ),
        ("AWS_REGION".into(), REGION.into()),
        (
            "AWS_ENDPOINT_URL".into(),
            format!("http://127.0.0.1:{closed}"),
        ),
    ])
}

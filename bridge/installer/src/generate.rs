//! Steps 2 and 3 in a child process. Reading a provider's whole schema with its descriptions
//! takes memory the size of the provider (hashicorp/aws: about 170 MiB), and an allocator
//! keeps most of it after it is freed. So the operator runs `kraken generate-crds`, a child
//! that reads the schema, generates the selected CRDs and prints them, and keeps only those.
//! The child speaks JSON: a [`Request`] on stdin, an [`Answer`] on stdout.
//!
//! The Provider controller holds the seam [`Generator`]: [`FromBinary`] is the real one (a
//! child, or this process), and a unit test's answers from a schema it holds, through the
//! same codegen ([`output`]).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt as _;

use kube::ResourceExt as _;

pub use super::crds::{Crd, Request};
use super::{Failure, Generated, Installer, Provider, reason};

/// The CRDs generated, with what the status reports about the schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Output {
    pub crds: Vec<Crd>,
    /// The protocol major version the binary speaks.
    pub protocol: u32,
    /// How many resource types the schema has.
    pub resource_types: usize,
}

/// The child's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Answer {
    Generated(Output),
    Failed {
        reason: String,
        message: String,
        transient: bool,
    },
}

/// Steps 2 and 3 for a [`Request`]: the binary's schema → the CRDs of its selection.
#[async_trait::async_trait]
pub trait Generator: Send + Sync {
    async fn generate(&self, req: &Request) -> Result<Output, Failure>;
}

/// The schema read from the binary itself (the process is stopped afterwards): by `exe
/// generate-crds` in a child process, or in this process when there is no `exe`.
pub struct FromBinary {
    pub exe: Option<PathBuf>,
}

#[async_trait::async_trait]
impl Generator for FromBinary {
    async fn generate(&self, req: &Request) -> Result<Output, Failure> {
        match &self.exe {
            Some(exe) => in_child(exe, req).await,
            None => here(req).await,
        }
    }
}

/// Steps 2 and 3: the CRDs of the Provider's selection, from the installer's [`Generator`].
/// Kept per Provider until its version or selection changes; the schema is not kept.
pub(super) async fn generated(
    inst: &Installer,
    p: &Provider,
    (address, version): (&str, &str),
    binary: PathBuf,
) -> Result<Arc<Generated>, Failure> {
    let key = (
        address.to_owned(),
        version.to_owned(),
        p.spec.resources.clone(),
        p.spec.data_sources.clone(),
    );
    let name = p.name_any();
    let cache = || inst.generated.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(hit) = cache().get(&name).filter(|g| g.key == key) {
        return Ok(hit.clone());
    }
    let req = Request {
        binary,
        address: address.to_owned(),
        version: version.to_owned(),
        resources: p.spec.resources.clone(),
        data_sources: p.spec.data_sources.clone(),
        schema_cache: Some(super::schema_cache_dir(&inst.settings)),
    };
    let out = inst.generator.generate(&req).await?;
    let hit = Arc::new(Generated {
        key,
        crds: out.crds,
        protocol: out.protocol,
        resource_types: out.resource_types,
    });
    cache().insert(name, hit.clone());
    Ok(hit)
}

/// Generate in this process.
pub async fn here(req: &Request) -> Result<Output, Failure> {
    let (schema, protocol) = super::crds::schema(req).await?;
    output(req, &schema, protocol)
}

/// Step 3 over the `schema` of a binary speaking `protocol`: the CRDs of `req`'s selection.
pub fn output(
    req: &Request,
    schema: &kraken_provider::ProviderSchema,
    protocol: u32,
) -> Result<Output, Failure> {
    let crds = super::crds::generate(&req.resources, &req.data_sources, &req.address, schema)?
        .into_iter()
        .map(|c| Crd {
            type_name: c.type_name,
            kind: c.kind,
            group: c.group,
            plural: c.plural,
            crd: c.crd,
        })
        .collect();
    Ok(Output {
        crds,
        protocol,
        resource_types: schema.resources.len(),
    })
}

/// Generate in a child: `exe generate-crds`.
pub async fn in_child(exe: &std::path::Path, req: &Request) -> Result<Output, Failure> {
    let unavailable = |message: String| Failure::new(reason::SCHEMA_UNAVAILABLE, message, true);
    let mut child = tokio::process::Command::new(exe)
        .arg("generate-crds")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            unavailable(format!(
                "failed to start {} generate-crds: {e}",
                exe.display()
            ))
        })?;
    let input = serde_json::to_vec(req).map_err(|e| unavailable(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        match stdin.write_all(&input).await {
            // It exited before reading: its status and stderr below say why.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            Err(e) => {
                return Err(unavailable(format!(
                    "failed to write to generate-crds: {e}"
                )));
            }
            Ok(()) => {}
        }
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| unavailable(format!("generate-crds failed: {e}")))?;
    match serde_json::from_slice::<Answer>(&out.stdout) {
        Ok(Answer::Generated(output)) => Ok(output),
        Ok(Answer::Failed {
            reason,
            message,
            transient,
        }) => Err(Failure::new(known_reason(&reason), message, transient)),
        Err(e) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            Err(unavailable(format!(
                "generate-crds exited {} without an answer ({e}): {}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )))
        }
    }
}

/// The `reason` constant a child's answer names (reasons cross the pipe as text).
fn known_reason(text: &str) -> &'static str {
    [reason::UNKNOWN_RESOURCE_TYPES, reason::SCHEMA_UNAVAILABLE]
        .into_iter()
        .find(|r| *r == text)
        .unwrap_or(reason::SCHEMA_UNAVAILABLE)
}

/// `kraken generate-crds`: read a [`Request`] from stdin, print the [`Answer`].
pub async fn serve(input: &[u8]) -> anyhow::Result<String> {
    let req: Request = serde_json::from_slice(input)
        .map_err(|e| anyhow::anyhow!("generate-crds reads a JSON request on stdin: {e}"))?;
    let answer = match here(&req).await {
        Ok(output) => Answer::Generated(output),
        Err(f) => Answer::Failed {
            reason: f.reason.to_owned(),
            message: f.message,
            transient: f.transient,
        },
    };
    Ok(serde_json::to_string(&answer)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_cross_the_pipe_by_name() {
        assert_eq!(
            known_reason(reason::UNKNOWN_RESOURCE_TYPES),
            reason::UNKNOWN_RESOURCE_TYPES
        );
        assert_eq!(known_reason("SomethingElse"), reason::SCHEMA_UNAVAILABLE);
    }

    #[tokio::test]
    async fn a_child_that_answers_nothing_is_a_clear_failure() {
        let f = in_child(
            std::path::Path::new("/bin/cat"),
            &Request {
                binary: "/nonexistent".into(),
                address: "a".into(),
                version: "1".into(),
                resources: vec![],
                data_sources: vec![],
                schema_cache: None,
            },
        )
        .await
        .expect_err("no answer");
        assert_eq!(f.reason, reason::SCHEMA_UNAVAILABLE);
        assert!(f.message.contains("without an answer"), "{}", f.message);
    }
}

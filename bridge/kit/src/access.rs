//! What this process's identity may do, asked of the API server (a SelfSubjectAccessReview),
//! and the wait for a grant that follows an install: under the chart, the RBAC manager grants the
//! operator a Provider's API groups moments after its CRDs exist, and a controller started
//! before that would only collect "forbidden" from its list and watch.

use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// One thing to ask: `verb` on `resource` of `group`, in every namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub verb: &'a str,
}

impl std::fmt::Display for Access<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}.{}", self.verb, self.resource, self.group)
    }
}

/// Whether this identity may do `access` cluster-wide.
pub async fn allowed(client: &kube::Client, access: Access<'_>) -> Result<bool, kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(access.group.to_owned()),
                resource: Some(access.resource.to_owned()),
                verb: Some(access.verb.to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The first of `wanted` this identity may not do, or `None` when it may do them all.
pub async fn first_denied<'a>(
    client: &kube::Client,
    wanted: &[Access<'a>],
) -> Result<Option<Access<'a>>, kube::Error> {
    for access in wanted {
        if !allowed(client, *access).await? {
            return Ok(Some(*access));
        }
    }
    Ok(None)
}

/// How long between two asks while a grant is missing, and after how long the wait is worth a
/// warning (a missing RBAC manager, or RBAC written by hand without these rules).
const ASK_EVERY: Duration = Duration::from_secs(1);
const WARN_AFTER: Duration = Duration::from_secs(60);

/// Returns once this identity may do everything in `wanted`; asks again every second, logs once
/// what it waits for (and warns each minute the grant is still missing). `what` names the
/// waiter in those lines.
pub async fn wait_allowed(client: &kube::Client, what: &str, wanted: &[Access<'_>]) {
    let started = Instant::now();
    let mut said = false;
    let mut warned = Instant::now();
    loop {
        match first_denied(client, wanted).await {
            Ok(None) => {
                if said {
                    tracing::info!(%what, waited_ms = started.elapsed().as_millis() as u64, "access granted");
                }
                return;
            }
            Ok(Some(missing)) if !said => {
                tracing::info!(%what, %missing, "waiting for RBAC to grant access (the RBAC manager grants each installed Provider's groups)");
                said = true;
            }
            Ok(Some(missing)) if warned.elapsed() >= WARN_AFTER => {
                tracing::warn!(%what, %missing, waited_s = started.elapsed().as_secs(), "still no access: is the RBAC manager running (kubectl -n <release namespace> get deploy <release>-rbac-manager)?");
                warned = Instant::now();
            }
            Ok(Some(_)) => {}
            Err(err) => {
                tracing::debug!(%what, "asking the API server what this identity may do: {err}")
            }
        }
        tokio::time::sleep(ASK_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_fake_allows_and_the_wait_returns() -> anyhow::Result<()> {
        let fake = crate::fake_api::FakeApi::new();
        let client = fake.client();
        let wanted = [Access {
            group: "fixture.tf.kraken.dev",
            resource: "objects",
            verb: "watch",
        }];
        assert_eq!(first_denied(&client, &wanted).await?, None);
        tokio::time::timeout(
            Duration::from_secs(5),
            wait_allowed(&client, "test", &wanted),
        )
        .await?;
        assert_eq!(wanted[0].to_string(), "watch objects.fixture.tf.kraken.dev");
        Ok(())
    }
}

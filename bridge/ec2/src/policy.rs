//! What a namespace user may make the EC2 path do with the operator's standing: the
//! administrator's [`AwsPolicy`], from `kraken operator` flags, checked purely on every pass.
//!
//! - **Credentials.** An EC2Instance without an AwsConfig, or an AwsConfig without
//!   `credentials`, would sign its requests with the operator's own credentials (the SDK's
//!   default chain: environment, web identity, instance metadata). That happens only when the
//!   administrator says so (`--aws-ambient-credentials`); otherwise the pass stops with
//!   `CredentialsRequired`.
//! - **Endpoints.** `AwsConfig.endpoint` is where requests, and with ambient credentials their
//!   signatures, go. It must match the administrator's allow-list (`--aws-endpoint`);
//!   otherwise `EndpointNotAllowed`. Without an endpoint the SDK's own AWS endpoints are used.
//! - **Adoption.** `importIds` takes over an instance and deleting the object terminates it.
//!   An instance is adopted only if it carries the tag [`ADOPT_TAG`] with the value
//!   `<namespace>/<name>` of the EC2Instance: whoever can tag it in EC2 controls it already,
//!   and Kraken never writes that tag (keys under `kraken.dev/` are refused in specs). The
//!   administrator can lift this (`--aws-adopt-untagged`).

use super::client::{Instance, Target};

/// The tag an instance must carry to be adopted by `importIds`: `<namespace>/<name>`.
pub use kraken_core_kinds::ADOPT_TAG;

/// The administrator's limits on the EC2 path. The default refuses everything it can.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsPolicy {
    /// Requests without credentials of their own use the operator's.
    pub ambient_credentials: bool,
    /// Endpoints an AwsConfig may name: a URL (`https://ec2.example.internal`), or one with
    /// `:*` for any port (`http://127.0.0.1:*`).
    pub endpoints: Vec<String>,
    /// `importIds` adopts instances without [`ADOPT_TAG`].
    pub adopt_untagged: bool,
}

/// Why a target or an adoption is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    CredentialsRequired(String),
    EndpointNotAllowed(String),
    NotAdoptable(String),
}

impl AwsPolicy {
    /// May a pass reach EC2 as `target` describes? `source` names where the target came from
    /// in messages ("AwsConfig moto", "no spec.awsConfigRef").
    pub fn check(&self, target: &Target, source: &str) -> Result<(), Refusal> {
        if target.credentials.is_none() && !self.ambient_credentials {
            return Err(Refusal::CredentialsRequired(format!(
                "{source}: no credentials, and this operator does not lend its own \
                 (kraken operator --aws-ambient-credentials); give the AwsConfig \
                 credentials from a Secret"
            )));
        }
        if let Some(endpoint) = &target.endpoint
            && !self.endpoints.iter().any(|p| endpoint_matches(p, endpoint))
        {
            let allowed = if self.endpoints.is_empty() {
                "none".to_string()
            } else {
                self.endpoints.join(", ")
            };
            return Err(Refusal::EndpointNotAllowed(format!(
                "{source}: endpoint {endpoint} is not one this operator allows \
                 (kraken operator --aws-endpoint; allowed: {allowed})"
            )));
        }
        Ok(())
    }

    /// May the EC2Instance `namespace/name` adopt `instance`?
    pub fn may_adopt(
        &self,
        instance: &Instance,
        namespace: &str,
        name: &str,
    ) -> Result<(), Refusal> {
        let want = format!("{namespace}/{name}");
        if self.adopt_untagged || instance.tag(ADOPT_TAG) == Some(want.as_str()) {
            return Ok(());
        }
        Err(Refusal::NotAdoptable(format!(
            "instance {} does not carry the tag {ADOPT_TAG}={want}: tag it in EC2 to show it \
             is yours to hand over (or the operator runs with --aws-adopt-untagged)",
            instance.id
        )))
    }
}

/// `pattern` is a URL, or a URL ending in `:*` (any port); trailing slashes do not count.
fn endpoint_matches(pattern: &str, endpoint: &str) -> bool {
    let (pattern, endpoint) = (
        pattern.trim_end_matches('/'),
        endpoint.trim_end_matches('/'),
    );
    match pattern.strip_suffix(":*") {
        Some(base) => {
            endpoint == base
                || endpoint
                    .strip_prefix(base)
                    .and_then(|r| r.strip_prefix(':'))
                    .is_some_and(|port| {
                        !port.is_empty() && port.chars().all(|c| c.is_ascii_digit())
                    })
        }
        None => endpoint == pattern,
    }
}

/// A `--aws-endpoint` value: an http(s) URL with a host, optionally ending in `:*`.
pub fn parse_endpoint(s: &str) -> Result<String, String> {
    let base = s.trim_end_matches('/');
    let base = base.strip_suffix(":*").unwrap_or(base);
    let rest = base
        .strip_prefix("https://")
        .or_else(|| base.strip_prefix("http://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains(['/', '*', '@', '?', '#']) => {
            Ok(s.to_string())
        }
        _ => Err(format!(
            "{s:?} is not an endpoint: http(s)://host[:port], or :* for any port"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(endpoint: Option<&str>, credentials: bool) -> Target {
        Target {
            region: Some("us-east-1".into()),
            endpoint: endpoint.map(str::to_string),
            credentials: credentials.then(|| ("AKIA".into(), "secret".into(), None)),
        }
    }

    #[test]
    fn the_default_lends_nothing_and_allows_no_endpoint() {
        let p = AwsPolicy::default();
        assert!(matches!(
            p.check(&target(None, false), "no spec.awsConfigRef"),
            Err(Refusal::CredentialsRequired(m)) if m.contains("--aws-ambient-credentials")
        ));
        assert_eq!(p.check(&target(None, true), "AwsConfig a"), Ok(()));
        // The metadata endpoint, or any host a tenant picks.
        assert!(matches!(
            p.check(&target(Some("http://169.254.169.254"), true), "AwsConfig a"),
            Err(Refusal::EndpointNotAllowed(m)) if m.contains("169.254.169.254") && m.contains("allowed: none")
        ));
    }

    #[test]
    fn endpoints_match_exactly_or_by_any_port() {
        let p = AwsPolicy {
            endpoints: vec!["http://127.0.0.1:*".into(), "https://ec2.internal/".into()],
            ..AwsPolicy::default()
        };
        for ok in [
            "http://127.0.0.1:5000",
            "http://127.0.0.1:5000/",
            "http://127.0.0.1",
            "https://ec2.internal",
        ] {
            assert_eq!(p.check(&target(Some(ok), true), "x"), Ok(()), "{ok}");
        }
        for bad in [
            "http://127.0.0.1.evil.example:5000",
            "http://127.0.0.1:5000@evil.example",
            "http://127.0.0.1:",
            "https://127.0.0.1:5000",
            "https://ec2.internal:8443",
            "https://ec2.internal.evil",
        ] {
            assert!(
                p.check(&target(Some(bad), true), "x").is_err(),
                "{bad} was allowed"
            );
        }
    }

    #[test]
    fn adoption_needs_the_tag_naming_the_object() {
        let mut i = Instance {
            id: "i-1".into(),
            ..Instance::default()
        };
        let p = AwsPolicy::default();
        assert!(
            matches!(p.may_adopt(&i, "team-a", "web"), Err(Refusal::NotAdoptable(m)) if m.contains("kraken.dev/adoptable-by=team-a/web"))
        );
        i.tags.insert(ADOPT_TAG.into(), "team-b/web".into());
        assert!(
            p.may_adopt(&i, "team-a", "web").is_err(),
            "another namespace's tag"
        );
        i.tags.insert(ADOPT_TAG.into(), "team-a/web".into());
        assert_eq!(p.may_adopt(&i, "team-a", "web"), Ok(()));
        i.tags.clear();
        let lax = AwsPolicy {
            adopt_untagged: true,
            ..AwsPolicy::default()
        };
        assert_eq!(lax.may_adopt(&i, "team-a", "web"), Ok(()));
    }

    #[test]
    fn endpoint_flags_are_urls() {
        for ok in [
            "http://127.0.0.1:*",
            "https://ec2.us-east-1.amazonaws.com",
            "http://localhost:5000/",
        ] {
            assert!(parse_endpoint(ok).is_ok(), "{ok}");
        }
        for bad in [
            "127.0.0.1:5000",
            "ftp://x",
            "http://",
            "http://*",
            "https://a/b",
        ] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }
}

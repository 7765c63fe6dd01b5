//! Provider source addresses (`hostname/namespace/type`) and target platforms (`linux_amd64`),
//! parsed and normalised the way Terraform does, so that a lock file entry, a cache directory
//! and a registry request all name the same provider.

use std::fmt;
use std::str::FromStr;

use crate::DEFAULT_REGISTRY_HOST;

/// A malformed provider address or platform string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("invalid provider address {0:?}: expected [hostname/]namespace/type")]
    Shape(String),
    #[error("invalid hostname {0:?} in provider address")]
    Hostname(String),
    #[error("invalid {part} {value:?} in provider address: use letters, digits and dashes")]
    Part { part: &'static str, value: String },
    #[error("invalid platform {0:?}: expected os_arch, such as linux_amd64")]
    Platform(String),
}

/// A provider's fully qualified source address, normalised to lower case.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderAddress {
    /// Registry host, possibly with a port (`registry.terraform.io`, `localhost:8443`).
    pub hostname: String,
    pub namespace: String,
    /// The provider type (`random`, `aws`).
    pub type_name: String,
}

impl ProviderAddress {
    /// Build an address from already-validated parts.
    pub fn new(hostname: &str, namespace: &str, type_name: &str) -> Result<Self, AddressError> {
        Ok(Self {
            hostname: normalize_hostname(hostname)?,
            namespace: normalize_part("namespace", namespace)?,
            type_name: normalize_part("type", type_name)?,
        })
    }

    /// The address as Terraform writes it in lock files: `hostname/namespace/type`.
    pub fn for_display(&self) -> String {
        self.to_string()
    }

    /// The base name of every file in this provider's packages (`terraform-provider-random`).
    pub fn binary_prefix(&self) -> String {
        format!("terraform-provider-{}", self.type_name)
    }
}

impl fmt::Display for ProviderAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.hostname, self.namespace, self.type_name)
    }
}

impl FromStr for ProviderAddress {
    type Err = AddressError;

    /// `type` and `namespace/type` default to the public Terraform registry (and a bare type to
    /// the `hashicorp` namespace), as in Terraform's `required_providers`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.trim().split('/').collect();
        match parts.as_slice() {
            [t] => Self::new(DEFAULT_REGISTRY_HOST, "hashicorp", t),
            [ns, t] => Self::new(DEFAULT_REGISTRY_HOST, ns, t),
            [h, ns, t] => Self::new(h, ns, t),
            _ => Err(AddressError::Shape(s.to_string())),
        }
    }
}

/// Namespaces and types: ASCII letters, digits and dashes, not starting or ending with a dash.
fn normalize_part(part: &'static str, value: &str) -> Result<String, AddressError> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if !ok || (part == "type" && value.starts_with("terraform-provider-")) {
        return Err(AddressError::Part {
            part,
            value: value.to_string(),
        });
    }
    Ok(value.to_ascii_lowercase())
}

/// Hostnames are compared case-insensitively; a port is allowed (`localhost:8443`). Non-ASCII
/// (IDNA) hostnames are refused rather than half-normalised.
fn normalize_hostname(host: &str) -> Result<String, AddressError> {
    let bad = || AddressError::Hostname(host.to_string());
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (host, None),
    };
    if let Some(p) = port
        && (p.is_empty() || p.parse::<u16>().is_err())
    {
        return Err(bad());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(bad());
    }
    Ok(host.to_ascii_lowercase())
}

/// A target platform in Go's naming (`linux_amd64`, `darwin_arm64`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Platform {
    pub os: String,
    pub arch: String,
}

impl Platform {
    /// The machine Kraken runs on.
    pub fn current() -> Self {
        let s = crate::current_platform();
        match s.split_once('_') {
            Some((os, arch)) => Self {
                os: os.to_string(),
                arch: arch.to_string(),
            },
            None => Self {
                os: s,
                arch: String::new(),
            },
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.os, self.arch)
    }
}

impl FromStr for Platform {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let valid = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric());
        match s.split_once('_') {
            Some((os, arch)) if valid(os) && valid(arch) => Ok(Self {
                os: os.to_ascii_lowercase(),
                arch: arch.to_ascii_lowercase(),
            }),
            _ => Err(AddressError::Platform(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_like_terraform() {
        let cases = [
            ("random", "registry.terraform.io/hashicorp/random"),
            ("hashicorp/aws", "registry.terraform.io/hashicorp/aws"),
            ("HashiCorp/AWS", "registry.terraform.io/hashicorp/aws"),
            (
                "registry.opentofu.org/hashicorp/random",
                "registry.opentofu.org/hashicorp/random",
            ),
            ("localhost:8443/acme/thing", "localhost:8443/acme/thing"),
        ];
        for (input, want) in cases {
            let p: ProviderAddress = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(p.to_string(), want, "{input}");
        }
    }

    #[test]
    fn bad_addresses_are_refused() {
        for bad in [
            "",
            "a/b/c/d",
            "host:port/a/b",
            "-x/y",
            "ns/terraform-provider-x",
            "ns/a_b",
            "h..x/a/b",
        ] {
            assert!(bad.parse::<ProviderAddress>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn platforms() {
        let p: Platform = "linux_amd64".parse().expect("parse");
        assert_eq!((p.os.as_str(), p.arch.as_str()), ("linux", "amd64"));
        assert!("linux".parse::<Platform>().is_err());
        assert!("linux_".parse::<Platform>().is_err());
        assert_eq!(Platform::current().to_string(), crate::current_platform());
    }
}

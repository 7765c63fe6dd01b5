//! The one error type of provider installation. Each variant is a distinct, user-visible cause
//! that callers (the CLI, the `Provider` controller) match on; `is_transient()` separates what is
//! worth retrying later from what needs a change of input.

use crate::address::{AddressError, Platform, ProviderAddress};
use crate::lockfile::LockFileError;
use crate::version::{Version, VersionError};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("provider {provider} is not known to {source_name}")]
    UnknownProvider {
        provider: ProviderAddress,
        source_name: String,
    },
    #[error("no version of {provider} matches {constraints:?} (available: {available})")]
    NoMatchingVersion {
        provider: ProviderAddress,
        constraints: String,
        available: String,
    },
    #[error("{provider} {version} is not available for {platform}")]
    PlatformNotSupported {
        provider: ProviderAddress,
        version: Version,
        platform: Platform,
    },
    #[error(
        "{provider} {version} speaks plugin protocol {protocols}, but Kraken speaks only 5 and 6{}",
        suggestion.as_ref().map(|v| format!("; the newest compatible version is {v}")).unwrap_or_default()
    )]
    ProtocolNotSupported {
        provider: ProviderAddress,
        version: Version,
        protocols: String,
        suggestion: Option<Version>,
    },
    #[error("checksum mismatch for {what}: expected {expected}, got {actual}")]
    ChecksumMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("the checksum list (SHA256SUMS) has no entry for {filename}")]
    ChecksumMissing { filename: String },
    #[error("invalid signature on the checksum list: {reason}")]
    SignatureInvalid { reason: String },
    #[error(
        "the checksum list is signed by key {key_id}, which is not among the registry's published keys"
    )]
    SignatureUnknownKey { key_id: String },
    #[error(
        "the registry publishes no signing keys for {provider} {version}; refusing an unsigned package"
    )]
    Unsigned {
        provider: ProviderAddress,
        version: Version,
    },
    #[error(
        "{provider} {version} does not match any hash in the lock file (locked: {locked}; package: {actual})"
    )]
    LockMismatch {
        provider: ProviderAddress,
        version: Version,
        locked: String,
        actual: String,
    },
    #[error("the lock file selects {provider} {locked}, which does not match {constraints:?}")]
    LockedVersionNotAllowed {
        provider: ProviderAddress,
        locked: Version,
        constraints: String,
    },
    #[error("{url} answered {status}")]
    HttpStatus { url: String, status: u16 },
    #[error("request to {url} failed")]
    Network {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("tls connection to {url} failed (is its certificate trusted? see --ca-cert)")]
    Tls {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("request to {url} timed out")]
    Timeout { url: String },
    #[error("response from {url} exceeds the limit of {limit} bytes")]
    TooLarge { url: String, limit: u64 },
    #[error("too many redirects (or an unsafe redirect) starting at {url}")]
    Redirect { url: String },
    #[error("invalid response from {url}: {reason}")]
    InvalidResponse { url: String, reason: String },
    #[error("host {host} does not offer the provider registry protocol (providers.v1)")]
    NoRegistryService { host: String },
    #[error("unsafe package archive: {reason}")]
    UnsafeArchive { reason: String },
    #[error("invalid package archive {what}")]
    InvalidArchive {
        what: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    #[error("invalid http client configuration: {0}")]
    Config(String),
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    LockFile(#[from] LockFileError),
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error(transparent)]
    Version(#[from] VersionError),
}

impl Error {
    /// Whether trying again later may succeed without any change of input: network trouble,
    /// timeouts, server errors and rate limiting.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Network { .. } | Error::Timeout { .. } => true,
            Error::HttpStatus { status, .. } => *status >= 500 || *status == 429 || *status == 408,
            _ => false,
        }
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

//! Why a provider could not be sourced: each variant knows the condition reason it is reported
//! under.

use kraken_kit::conditions::reason;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The resource's spec cannot be turned into a configuration for its provider.
    #[error("{0}")]
    InvalidSpec(String),
    #[error("ProviderConfig {0} not found in this namespace")]
    ProviderConfigMissing(String),
    #[error("{0}")]
    SecretMissing(String),
    /// A reference to a Secret Kraken does not read for users.
    #[error("{0}")]
    Forbidden(String),
    /// The ProviderConfig is wrong: unresolvable provider, a configuration the provider
    /// rejected.
    #[error("ProviderConfig {name}: {message}")]
    ProviderConfigInvalid { name: String, message: String },
    /// The provider process could not be reached: launch failure, crash, transport.
    #[error("{0}")]
    ProviderUnavailable(String),
    /// The condition shows the API server's answer after this (`kit::errors::chain`).
    #[error("kubernetes API request failed")]
    Api(#[from] kube::Error),
}

impl Error {
    /// The condition reason (and Event reason, metric label).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => reason::INVALID_SPEC,
            Error::ProviderConfigMissing(_) => reason::PROVIDER_CONFIG_MISSING,
            Error::SecretMissing(_) => reason::SECRET_MISSING,
            Error::Forbidden(_) => reason::FORBIDDEN,
            Error::ProviderConfigInvalid { .. } => reason::PROVIDER_CONFIG_INVALID,
            Error::ProviderUnavailable(_) => reason::PROVIDER_UNAVAILABLE,
            Error::Api(_) => reason::API_ERROR,
        }
    }

    /// Whether it may clear without a change of the object it is reported on: everything but
    /// a spec that cannot be a configuration. A missing ProviderConfig or Secret, a provider
    /// that rejects its configuration or cannot be reached are fixed elsewhere, and nothing
    /// watches those on the object's behalf.
    pub fn is_transient(&self) -> bool {
        !matches!(self, Error::InvalidSpec(_))
    }
}

/// The ProviderConfig controller's view of the same (`kraken_kit::reconciler`).
impl kraken_kit::reconciler::ReconcileError for Error {
    fn reason(&self) -> &str {
        Error::reason(self)
    }

    fn is_transient(&self) -> bool {
        Error::is_transient(self)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

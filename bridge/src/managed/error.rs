//! The reconcile's error type: one variant per way a reconcile can stop, each knowing the
//! `Synced` reason it is reported under and whether retrying can help on its own.

use crate::kit::conditions::reason;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec cannot be turned into a configuration (wrong field, wrong type, missing
    /// importId for ObserveOnly). Only the user can fix it.
    #[error("{0}")]
    InvalidSpec(String),
    #[error("ProviderConfig {0} not found in this namespace")]
    ProviderConfigMissing(String),
    #[error("{0}")]
    SecretMissing(String),
    /// The ProviderConfig is wrong: unresolvable provider, a configuration the provider
    /// rejected. Fixed by changing the ProviderConfig, which the operator does not watch per
    /// resource, so it is retried with backoff.
    #[error("ProviderConfig {name}: {message}")]
    ProviderConfigInvalid { name: String, message: String },
    /// The provider's verdict on the resource (validation, plan, apply diagnostics).
    #[error("{0}")]
    Provider(String),
    /// The provider process could not be reached: launch failure, crash, transport.
    #[error("{0}")]
    ProviderUnavailable(String),
    #[error("{0}")]
    ReplaceRefused(String),
    #[error("{0}")]
    CreateInterrupted(String),
    #[error("{0}")]
    ExternalObjectMissing(String),
    #[error("kubernetes API request failed: {0}")]
    Api(#[from] kube::Error),
    #[error("{0}")]
    State(#[from] super::state::StateError),
}

impl Error {
    /// The `Synced` condition reason (and Event reason, metric label).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => reason::INVALID_SPEC,
            Error::ProviderConfigMissing(_) => reason::PROVIDER_CONFIG_MISSING,
            Error::SecretMissing(_) => reason::SECRET_MISSING,
            Error::ProviderConfigInvalid { .. } => reason::PROVIDER_CONFIG_INVALID,
            Error::Provider(_) => reason::PROVIDER_ERROR,
            Error::ProviderUnavailable(_) => reason::PROVIDER_UNAVAILABLE,
            Error::ReplaceRefused(_) => reason::REPLACE_REFUSED,
            Error::CreateInterrupted(_) => reason::CREATE_INTERRUPTED,
            Error::ExternalObjectMissing(_) => reason::EXTERNAL_OBJECT_MISSING,
            Error::Api(_) => reason::API_ERROR,
            Error::State(_) => reason::INVALID_SPEC,
        }
    }

    /// Whether the reconcile should be retried with backoff (`true`) or wait for the object
    /// to change (`false`). Errors caused by other objects (ProviderConfig, Secrets) are
    /// retried: the fix happens elsewhere, and nothing watches it on this object's behalf.
    /// So is an interrupted create: the object may become findable, and removing the fence
    /// annotation does not retrigger a reconcile.
    pub fn is_transient(&self) -> bool {
        !matches!(
            self,
            Error::InvalidSpec(_) | Error::ReplaceRefused(_) | Error::State(_)
        )
    }
}

impl From<crate::source::Error> for Error {
    fn from(e: crate::source::Error) -> Self {
        use crate::source::Error as S;
        match e {
            S::InvalidSpec(m) => Error::InvalidSpec(m),
            S::ProviderConfigMissing(m) => Error::ProviderConfigMissing(m),
            S::SecretMissing(m) => Error::SecretMissing(m),
            S::ProviderConfigInvalid { name, message } => {
                Error::ProviderConfigInvalid { name, message }
            }
            S::ProviderUnavailable(m) => Error::ProviderUnavailable(m),
            S::Api(e) => Error::Api(e),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

//! The reconcile's error type: one variant per way a reconcile can stop, each knowing the
//! `Synced` reason it is reported under and whether retrying can help on its own.

use kraken_kit::conditions::reason;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec cannot be turned into a configuration (wrong field, wrong type, missing
    /// importId for ObserveOnly). Only the user can fix it.
    #[error("{0}")]
    InvalidSpec(String),
    /// The provider could not be sourced: its ProviderConfig, a Secret, the process.
    #[error(transparent)]
    Source(#[from] kraken_source::Error),
    /// The provider's verdict on the resource (validation, plan, apply diagnostics).
    #[error("{0}")]
    Provider(String),
    /// The provider process could not be reached: launch failure, crash, transport.
    #[error("{0}")]
    ProviderUnavailable(String),
    /// The provider did not answer by the RPC's deadline and was replaced.
    #[error("{0}")]
    ProviderTimeout(String),
    #[error("{0}")]
    ReplaceRefused(String),
    /// An object this one derives (its state Secret) exists and belongs to someone else.
    #[error("{0}")]
    NotOwned(String),
    #[error("{0}")]
    CreateInterrupted(String),
    #[error("{0}")]
    ExternalObjectMissing(String),
    /// `importId`/`importIdentity` named an object nothing shows the namespace may take
    /// ([`super::consent`]); nothing was stored. Retried: the consent (a tag on the object, the
    /// Namespace's annotation) is given elsewhere, and nothing watches it for this object.
    #[error("{0}")]
    AdoptionRefused(String),
    /// The message names the request; the condition shows the API server's answer after it
    /// (`kit::errors::chain`).
    #[error("kubernetes API request failed")]
    Api(#[source] kube::Error),
    #[error("{0}")]
    State(#[from] super::state::StateError),
    /// This replica may not write now: its leadership is not current, or a newer leader has
    /// written this object's state since this pass read it (`kit::fence`). Nothing is
    /// reported on the object (the leader does that); the pass is retried.
    #[error(transparent)]
    Fenced(#[from] kraken_kit::fence::Fenced),
    /// An error whose message quoted a sensitive value, with the value replaced
    /// ([`Error::redacted`]); it keeps the original's reason and transience.
    #[error("{message}")]
    Redacted {
        reason: &'static str,
        transient: bool,
        message: String,
    },
}

impl From<kube::Error> for Error {
    /// A write the API server (or Kraken's own check) refused because the object written is
    /// someone else's is `NotOwned`, with the message saying whose; the rest are API errors.
    fn from(e: kube::Error) -> Self {
        if kraken_kit::ownership::is_refusal(&e) {
            let message = kraken_kit::ownership::refusal_message(&e, "an object it derives");
            return Error::NotOwned(message);
        }
        Error::Api(e)
    }
}

impl Error {
    /// The `Synced` condition reason (and Event reason, metric label).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => reason::INVALID_SPEC,
            Error::Source(e) => e.reason(),
            Error::Provider(_) => reason::PROVIDER_ERROR,
            Error::ProviderUnavailable(_) => reason::PROVIDER_UNAVAILABLE,
            Error::ProviderTimeout(_) => reason::PROVIDER_TIMEOUT,
            Error::ReplaceRefused(_) => reason::REPLACE_REFUSED,
            Error::NotOwned(_) => reason::NOT_OWNED,
            Error::CreateInterrupted(_) => reason::CREATE_INTERRUPTED,
            Error::ExternalObjectMissing(_) => reason::EXTERNAL_OBJECT_MISSING,
            Error::AdoptionRefused(_) => reason::ADOPTION_REFUSED,
            Error::Api(_) => reason::API_ERROR,
            Error::State(super::state::StateError::Tampered { .. }) => reason::STATE_TAMPERED,
            Error::State(super::state::StateError::SeedNotAuthorized { .. }) => {
                reason::SEED_NOT_AUTHORIZED
            }
            Error::State(_) => reason::INVALID_SPEC,
            Error::Fenced(_) => reason::FENCED,
            Error::Redacted { reason, .. } => reason,
        }
    }

    /// Whether the reconcile should be retried with backoff (`true`) or wait for the object
    /// to change (`false`). Errors caused by other objects (ProviderConfig, Secrets) are
    /// retried: the fix happens elsewhere, and nothing watches it on this object's behalf.
    /// So is an interrupted create: the object may become findable, and removing the fence
    /// annotation does not retrigger a reconcile.
    pub fn is_transient(&self) -> bool {
        if let Error::Redacted { transient, .. } = self {
            return *transient;
        }
        !matches!(
            self,
            Error::InvalidSpec(_)
                | Error::Source(kraken_source::Error::InvalidSpec(_))
                | Error::ReplaceRefused(_)
                | Error::State(
                    super::state::StateError::WrongType { .. }
                        | super::state::StateError::Invalid { .. }
                )
        )
    }

    /// What a user reads in the condition and the Event: the error and its causes.
    pub fn message(&self) -> String {
        kraken_kit::errors::chain(self)
    }

    /// This error, unless its message (a provider's diagnostic, say) quotes one of `secrets`:
    /// then the same error with those values replaced, for the condition, the Event and the
    /// log.
    pub fn redacted(self, secrets: &super::echo::Secrets) -> Self {
        if secrets.is_empty() {
            return self;
        }
        let message = self.message();
        if !secrets.found_in(&message) {
            return self;
        }
        Error::Redacted {
            reason: self.reason(),
            transient: self.is_transient(),
            message: secrets.redact(&message),
        }
    }
}

/// The runner's view of the same: the reason it is counted under, and backoff or wait.
impl kraken_kit::reconciler::ReconcileError for Error {
    fn reason(&self) -> &str {
        Error::reason(self)
    }

    fn is_transient(&self) -> bool {
        Error::is_transient(self)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, "ServiceUnavailable")
                .with_code(503)
                .boxed(),
        )
    }

    #[test]
    fn the_message_keeps_every_cause() {
        let direct = Error::Api(api_error("etcdserver: request timed out"));
        let message = direct.message();
        assert!(
            message.starts_with("kubernetes API request failed: "),
            "{message}"
        );
        assert!(
            message.contains("etcdserver: request timed out"),
            "{message}"
        );
        // Through the provider source: same chain, same reason.
        let sourced = Error::from(kraken_source::Error::Api(api_error("etcd is down")));
        assert_eq!(sourced.reason(), reason::API_ERROR);
        assert!(
            sourced.message().contains("etcd is down"),
            "{}",
            sourced.message()
        );
    }

    #[test]
    fn a_diagnostic_quoting_a_secret_is_redacted_and_keeps_its_reason() {
        let secrets = crate::echo::Secrets::from_values([&serde_json::json!("hunter22")]);
        let err = Error::Provider("invalid tag value \"hunter22\"".into()).redacted(&secrets);
        assert_eq!(err.reason(), reason::PROVIDER_ERROR);
        assert!(err.is_transient());
        assert_eq!(err.message(), "invalid tag value \"(sensitive)\"");
        let spec = Error::InvalidSpec("bad hunter22".into()).redacted(&secrets);
        assert!(!spec.is_transient());
        let plain = Error::InvalidSpec("bad".into()).redacted(&secrets);
        assert!(matches!(plain, Error::InvalidSpec(_)), "left as it was");
    }

    #[test]
    fn source_errors_keep_their_reason_and_transience() {
        let missing = Error::from(kraken_source::Error::ProviderConfigMissing("aws".into()));
        assert_eq!(missing.reason(), reason::PROVIDER_CONFIG_MISSING);
        assert!(missing.is_transient());
        assert_eq!(
            missing.message(),
            "ProviderConfig aws not found in this namespace"
        );
        let invalid = Error::from(kraken_source::Error::InvalidSpec("spec.x: bad".into()));
        assert_eq!(invalid.reason(), reason::INVALID_SPEC);
        assert!(!invalid.is_transient());
    }
}

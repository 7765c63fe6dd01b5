//! How long a provider may take to answer, per kind of RPC. Read by the client each call
//! ([`super::rpc`]); set by the launcher from the operator's flags.

use std::time::Duration;

/// How long each kind of RPC may take (`kraken operator --provider-apply-timeout` and
/// `--provider-rpc-timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// `ApplyResourceChange`: creating a database can take most of an hour.
    pub apply: Duration,
    /// `GetProviderSchema`, `GetMetadata` (and v5's `GetSchema`): answered from memory.
    pub schema: Duration,
    /// Everything else (plan, read, import, validate, configure, upgrade).
    pub other: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            apply: Duration::from_secs(60 * 60),
            schema: Duration::from_secs(2 * 60),
            other: Duration::from_secs(10 * 60),
        }
    }
}

impl Deadlines {
    /// The deadline of gRPC method `method` (`ApplyResourceChange`).
    pub fn of(&self, method: &str) -> Duration {
        match method {
            "ApplyResourceChange" => self.apply,
            "GetProviderSchema" | "GetSchema" | "GetMetadata" => self.schema,
            _ => self.other,
        }
    }
}

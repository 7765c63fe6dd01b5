//! What the host reports about each provider RPC: an [`RpcObserver`] set by whoever owns the
//! metrics (the operator) and handed down to every process the pool launches.
//!
//! A trait rather than [`Metrics`] itself so that the host stays usable without a registry
//! (the CLI, tests) and so that a test can watch RPCs without parsing Prometheus text.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kraken_kit::metrics::Metrics;

/// Told about every provider RPC once it has finished, successfully or not.
pub trait RpcObserver: Send + Sync + fmt::Debug {
    /// `provider` is the process's label (`LaunchOptions::name`), `rpc` the gRPC method
    /// (`PlanResourceChange`).
    fn rpc_finished(&self, provider: &str, rpc: &str, elapsed: Duration);
}

/// The observer a launch carries; `None` records nothing.
pub type Observer = Option<Arc<dyn RpcObserver>>;

impl RpcObserver for Metrics {
    fn rpc_finished(&self, provider: &str, rpc: &str, elapsed: Duration) {
        self.provider_rpc(provider, rpc, elapsed.as_secs_f64());
    }
}

/// The gRPC method name for an adapter's client method (`read_resource` → `ReadResource`):
/// the spelling the protocol, and so anyone reading a dashboard next to the provider's own
/// logs, uses.
pub fn grpc_method(client_method: &str) -> String {
    client_method
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_names_are_the_protocols() {
        assert_eq!(grpc_method("read_resource"), "ReadResource");
        assert_eq!(grpc_method("get_provider_schema"), "GetProviderSchema");
        assert_eq!(grpc_method("stop"), "Stop");
    }
}

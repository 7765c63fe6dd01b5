//! Provider schema → CRDs (DESIGN §3).
//!
//! Pure by design: no network and no Kubernetes client. The pipeline (schema → IR → render)
//! arrives with the codegen work; the API group convention is fixed here already because the
//! plugin host and tests refer to it.

pub mod cty;
pub mod schema;
pub mod tfjson;

/// The API group suffix every generated kind lives under: `<provider>.tf.kraken.dev`.
pub const GROUP_SUFFIX: &str = "tf.kraken.dev";

/// The API group for a provider's generated kinds.
pub fn api_group(provider_type: &str) -> String {
    format!("{provider_type}.{GROUP_SUFFIX}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn group_for_provider() {
        assert_eq!(super::api_group("random"), "random.tf.kraken.dev");
    }
}

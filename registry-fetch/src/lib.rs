//! Provider installation from Terraform-style registries and mirrors.
//!
//! This crate is filled in by the registry-fetch work (DESIGN §1); today it only
//! holds the address conventions the plugin host and the test environment share.

/// The registry host a bare `namespace/type` source address resolves to, as in Terraform.
pub const DEFAULT_REGISTRY_HOST: &str = "registry.terraform.io";

/// The platform directory name Terraform uses for the machine Kraken runs on (`linux_amd64`, …).
pub fn current_platform() -> String {
    let os = std::env::consts::OS;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        other => other,
    };
    format!("{os}_{arch}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_uses_go_names() {
        let p = current_platform();
        assert!(!p.contains("x86_64") && p.contains('_'), "{p}");
    }
}

//! The `local` placement's sandbox: Landlock, applied by the runner to itself before it starts
//! anything, and so inherited by the provider it launches.
//!
//! Landlock is unprivileged (no root, no user namespace, allowed by container runtimes'
//! default seccomp profiles) and stacks under whatever confines the operator's pod already.
//! The provider may read and execute its own package directory and the system files a Go
//! program needs (certificates, name resolution, time zones, shared libraries), read and write
//! only its private directory (its home and temporary files), and nothing else: not the
//! operator's ServiceAccount token, kubeconfig, working directory or `/proc` (so neither
//! `/proc/1/environ` nor another process's memory). Landlock also keeps it from ptrace-ing or,
//! on ABI 6 and later, signalling processes outside its domain, and sets `no_new_privs`.
//!
//! What the kernel needs: Linux 5.13 or later with Landlock enabled (`CONFIG_SECURITY_LANDLOCK`
//! and `landlock` in the `lsm=` list). When the kernel refuses, the runner exits with an error
//! that says so before the provider starts; nothing runs unconfined by accident.
//!
//! What it does not do: the network. A provider in `local` placement reaches what the
//! operator's machine reaches (the `pods` placement's NetworkPolicy is for that).

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};

/// The newest Landlock ABI this sandbox asks for; older kernels enforce what they know.
const ABI_WANTED: ABI = ABI::V6;

/// System paths a provider may read (and execute beneath): what Go's runtime and its `net`,
/// `crypto/x509`, `os/user` and `time` packages open, and shared libraries. Missing ones are
/// skipped. Nothing here holds a credential on a standard image.
pub const SYSTEM_READ: &[&str] = &[
    "/usr/lib",
    "/usr/lib64",
    "/lib",
    "/lib64",
    "/usr/share/zoneinfo",
    "/usr/share/ca-certificates",
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/mime.types",
];

/// Devices a provider may read and write.
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"];

/// What the sandbox lets through.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    /// Read and execute beneath: the provider's package directory.
    pub package: Vec<PathBuf>,
    /// Read beneath: [`SYSTEM_READ`] and the administrator's `--runner-allow-read`.
    pub read: Vec<PathBuf>,
    /// Read and write beneath: the runner's private directory and the administrator's
    /// `--runner-allow-write`.
    pub private: Vec<PathBuf>,
}

/// How far the kernel enforced the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforced {
    /// Everything asked for.
    Fully,
    /// The filesystem rules, without some of the newer rights (an older kernel).
    Partially,
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "this kernel does not enforce Landlock, so the provider cannot be confined (the local \
         placement needs Linux 5.13+ with CONFIG_SECURITY_LANDLOCK and landlock in the lsm= \
         boot list); nothing was started. Run the operator on a node that has it, or choose the \
         inProcess placement knowing that it gives the provider the operator's files"
    )]
    Unsupported,
    #[error("the sandbox could not be set up")]
    Landlock(#[from] landlock::RulesetError),
    #[error("the sandbox could not open {path}")]
    Open {
        path: String,
        #[source]
        source: landlock::PathFdError,
    },
}

impl Confinement {
    /// The provider's package, the system paths and the private directory.
    pub fn for_provider(
        binary: &Path,
        private: &Path,
        extra_read: &[PathBuf],
        extra_write: &[PathBuf],
    ) -> Self {
        let package = binary.parent().map(Path::to_path_buf).into_iter().collect();
        let read = SYSTEM_READ
            .iter()
            .map(PathBuf::from)
            .chain(extra_read.iter().cloned())
            .collect();
        Self {
            package,
            read,
            private: std::iter::once(private.to_path_buf())
                .chain(extra_write.iter().cloned())
                .collect(),
        }
    }

    /// Confine this thread and everything it starts from now on. Call it before any other
    /// thread exists (a runtime's workers included): Landlock restricts the calling thread.
    pub fn enforce(&self) -> Result<Enforced, SandboxError> {
        let all = AccessFs::from_all(ABI_WANTED);
        let read = AccessFs::from_read(ABI_WANTED);
        let device = AccessFs::ReadFile | AccessFs::WriteFile;
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(all)?
            .scope(Scope::from_all(ABI_WANTED))?
            .create()?;
        for (paths, access) in [
            (self.package.clone(), read),
            (self.read.clone(), read),
            (self.private.clone(), all),
            (DEVICES.iter().map(PathBuf::from).collect(), device),
        ] {
            for path in paths.iter().filter(|p| p.exists()) {
                let fd = PathFd::new(path).map_err(|source| SandboxError::Open {
                    path: path.display().to_string(),
                    source,
                })?;
                ruleset = ruleset.add_rule(PathBeneath::new(fd, access))?;
            }
        }
        let status = ruleset.restrict_self()?;
        match status.ruleset {
            RulesetStatus::FullyEnforced => Ok(Enforced::Fully),
            RulesetStatus::PartiallyEnforced => Ok(Enforced::Partially),
            RulesetStatus::NotEnforced => Err(SandboxError::Unsupported),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_gets_its_package_the_system_and_its_private_directory() {
        let c = Confinement::for_provider(
            Path::new("/plugins/random/terraform-provider-random"),
            Path::new("/tmp/kraken-plugin-x"),
            &[PathBuf::from("/opt/extra")],
            &[],
        );
        assert_eq!(c.package, vec![PathBuf::from("/plugins/random")]);
        assert_eq!(c.private, vec![PathBuf::from("/tmp/kraken-plugin-x")]);
        assert!(c.read.contains(&PathBuf::from("/etc/ssl")));
        assert!(c.read.contains(&PathBuf::from("/opt/extra")));
        assert!(
            !c.read.iter().any(|p| p.starts_with("/proc")
                || p.starts_with("/var/run")
                || p.starts_with("/run")
                || p.starts_with("/root")
                || p.starts_with("/home")),
            "{:?}",
            c.read
        );
    }
}

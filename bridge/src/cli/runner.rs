//! `kraken runner`: the process a provider runs in, away from the operator.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use kraken_runner::{Enforced, RunnerOptions};

pub const RUNNER_ABOUT: &str =
    "Host one provider process away from the operator and relay its plugin protocol.

The operator starts this itself, in place of a provider binary, when a ProviderConfig's placement
is local (the default of `kraken operator --runner-placement`); it is not meant to be run by hand.
The runner confines itself with Landlock before it starts anything (the provider may read its
own package directory and the system files a Go program needs, write only its private
directory, and read nothing of the operator's: not its ServiceAccount token, kubeconfig,
working directory or /proc), starts the provider with go-plugin's handshake, and serves the same
protocol on a socket of its own with mutual TLS: it presents a fresh certificate the operator
pins, and accepts only the certificate the operator sent. It exits when its provider exits, and
stops its provider when the operator is gone.

A kernel without Landlock (Linux 5.13+, CONFIG_SECURITY_LANDLOCK, landlock in lsm=) makes the
runner refuse to start, with an error on the ProviderConfig: nothing runs unconfined by accident.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Sandbox {
    /// Confine the runner and its provider with Landlock.
    Landlock,
    /// No sandbox: the relay only (for tests of the wire, and kernels without Landlock when
    /// an administrator accepts it).
    None,
}

#[derive(Debug, Args)]
pub struct RunnerArgs {
    /// How the runner confines itself and its provider.
    #[arg(long, value_enum, default_value = "landlock")]
    pub sandbox: Sandbox,
    /// A path the provider may also read (and execute beneath), e.g. a CA bundle mounted
    /// elsewhere. Repeatable.
    #[arg(long, value_name = "PATH")]
    pub allow_read: Vec<PathBuf>,
    /// A path the provider may also write beneath. Repeatable.
    #[arg(long, value_name = "PATH")]
    pub allow_write: Vec<PathBuf>,
    /// The provider binary, after `--`.
    #[arg(last = true, required = true, value_name = "BINARY")]
    pub binary: PathBuf,
    /// What [`confine`] achieved, before the runtime started.
    #[arg(skip)]
    pub enforced: Option<Enforced>,
}

impl RunnerArgs {
    pub fn options(&self) -> RunnerOptions {
        RunnerOptions {
            binary: self.binary.clone(),
            sandbox: self.sandbox == Sandbox::Landlock,
            allow_read: self.allow_read.clone(),
            allow_write: self.allow_write.clone(),
        }
    }
}

/// Confine this process: from `main`, before the async runtime exists.
pub fn confine(args: &RunnerArgs) -> anyhow::Result<Option<Enforced>> {
    Ok(kraken_runner::confine(&args.options())?)
}

pub async fn run(args: RunnerArgs) -> anyhow::Result<ExitCode> {
    Ok(kraken_runner::run(&args.options(), args.enforced).await?)
}

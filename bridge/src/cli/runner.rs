//! `kraken runner`: the process a provider runs in, away from the operator.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use kraken_runner::serve::{ServeOptions, ServeTls};
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
runner refuse to start, with an error on the ProviderConfig: nothing runs unconfined by accident.

With --listen it is the `pods` placement's runner instead, the command of the Deployment the
operator writes for a ProviderConfig: it fetches the package the Provider recorded (--package,
--version, --hash, --mirror; locked to those hashes, as a lock file pins them), reads its
certificates from --tls-dir (runner.crt, runner.key and operator.crt, DER, from the Secret the
operator wrote), confines itself, starts the provider and serves it on the address to every
operator replica presenting operator.crt.";

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
    /// Serve on this address (IP:PORT) from a Pod of its own, to every operator replica.
    /// IPv4 may be bracketed as IPv6 is ([$(POD_IP)]:7443 serves either).
    #[arg(long, value_name = "ADDRESS", requires = "tls_dir", value_parser = parse_listen)]
    pub listen: Option<SocketAddr>,
    /// With --listen: the directory holding runner.crt, runner.key and operator.crt (DER).
    #[arg(long, value_name = "DIR", requires = "listen")]
    pub tls_dir: Option<PathBuf>,
    /// With --listen: the runner's own directory (the package, the provider's home and
    /// temporary files). Set TMPDIR beneath it.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/run/kraken-runner/work"
    )]
    pub work_dir: PathBuf,
    /// With --listen: fetch this provider (its source address) instead of naming a binary.
    #[arg(long, value_name = "ADDRESS", requires_all = ["listen", "version"], conflicts_with = "binary")]
    pub package: Option<String>,
    /// The version --package fetches.
    #[arg(long, requires = "package")]
    pub version: Option<String>,
    /// A hash the package must match (h1: or zh:, as the Provider recorded). Repeatable.
    #[arg(long = "hash", value_name = "HASH", requires = "package")]
    pub hashes: Vec<String>,
    /// Where --package is fetched from first: a mirror URL or directory (else its registry).
    #[arg(long, value_name = "MIRROR", requires = "package")]
    pub mirror: Option<String>,
    /// The provider binary, after `--`.
    #[arg(
        last = true,
        required_unless_present = "package",
        value_name = "BINARY"
    )]
    pub binary: Option<PathBuf>,
    /// What [`confine`] achieved, before the runtime started.
    #[arg(skip)]
    pub enforced: Option<Enforced>,
    /// A served runner's certificates, read before the sandbox (which leaves them out).
    #[arg(skip)]
    pub serve_tls: Option<ServeTls>,
}

/// `IP:PORT`, `[IPv6]:PORT`, or `[IPv4]:PORT` (what `[$(POD_IP)]:PORT` becomes on either).
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let bad = || format!("--listen {s:?} is not IP:PORT (e.g. [$(POD_IP)]:7443)");
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip: std::net::IpAddr = host.parse().map_err(|_| bad())?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    Ok(SocketAddr::new(ip, port))
}

impl RunnerArgs {
    fn options(&self, binary: PathBuf) -> RunnerOptions {
        RunnerOptions {
            binary,
            sandbox: self.sandbox == Sandbox::Landlock,
            allow_read: self.allow_read.clone(),
            allow_write: self.allow_write.clone(),
            serve: match (self.listen, &self.serve_tls) {
                (Some(listen), Some(tls)) => Some(ServeOptions {
                    listen,
                    work_dir: self.work_dir.clone(),
                    tls: tls.clone(),
                }),
                _ => None,
            },
        }
    }
}

/// Confine this process: from `main`, before the async runtime exists. A runner that fetches
/// its package first is confined by the process it becomes ([`run`]).
pub fn confine(args: &mut RunnerArgs) -> anyhow::Result<Option<Enforced>> {
    let Some(binary) = args.binary.clone() else {
        return Ok(None);
    };
    if let Some(dir) = &args.tls_dir {
        args.serve_tls = Some(ServeTls::read(dir)?);
    }
    Ok(kraken_runner::confine(&args.options(binary))?)
}

pub async fn run(args: RunnerArgs) -> anyhow::Result<ExitCode> {
    let Some(binary) = args.binary.clone() else {
        return fetch_and_become(&args).await;
    };
    Ok(kraken_runner::run(&args.options(binary), args.enforced).await?)
}

/// `--package`: fetch the recorded package into the work directory, then become the runner of
/// its binary (the same program, exec'd with `-- BINARY`), which confines itself before it
/// starts anything. The fetch runs unconfined: it writes only beneath the work directory.
async fn fetch_and_become(args: &RunnerArgs) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt as _;
    let (Some(package), Some(version)) = (&args.package, &args.version) else {
        anyhow::bail!("kraken runner needs a provider binary after -- or --package and --version");
    };
    anyhow::ensure!(
        !args.hashes.is_empty(),
        "kraken runner --package needs the hashes the Provider recorded (--hash): nothing \
         unpinned is fetched"
    );
    // The hashes are what the operator verified, signature included, when it installed the
    // Provider: the package is locked to them, so no signature is needed again.
    let spec =
        serde_json::from_value(serde_json::json!({"source": package, "allowUnsigned": true}))
            .context("the provider address")?;
    let mut provider = crate::core_kinds::Provider::new("runner", spec);
    provider.status = Some(crate::core_kinds::provider::ProviderStatus {
        address: Some(package.clone()),
        version: Some(version.clone()),
        hashes: args.hashes.clone(),
        mirror: args.mirror.clone(),
        ..Default::default()
    });
    let cache = args.work_dir.join("packages");
    let binary = crate::installer::package::fetch_recorded(&provider, &cache, None, &[])
        .await
        .map_err(anyhow::Error::msg)?;
    let program = std::env::current_exe().context("cannot find this program to run again")?;
    let mut cmd = std::process::Command::new(program);
    cmd.arg("runner")
        .arg("--sandbox")
        .arg(match args.sandbox {
            Sandbox::Landlock => "landlock",
            Sandbox::None => "none",
        })
        .arg("--work-dir")
        .arg(&args.work_dir);
    if let (Some(listen), Some(dir)) = (args.listen, &args.tls_dir) {
        cmd.arg("--listen")
            .arg(listen.to_string())
            .arg("--tls-dir")
            .arg(dir);
    }
    for path in &args.allow_read {
        cmd.arg("--allow-read").arg(path);
    }
    for path in &args.allow_write {
        cmd.arg("--allow-write").arg(path);
    }
    let err = cmd.arg("--").arg(&binary).exec();
    Err(anyhow::Error::new(err).context("cannot become the runner of the fetched provider"))
}

#[cfg(test)]
mod tests {
    use super::parse_listen;

    #[test]
    fn listen_takes_bracketed_addresses_of_both_families() {
        assert_eq!(
            parse_listen("[10.1.2.3]:7443").map(|a| a.to_string()),
            Ok("10.1.2.3:7443".to_owned())
        );
        assert_eq!(
            parse_listen("[fd00::5]:7443").map(|a| a.to_string()),
            Ok("[fd00::5]:7443".to_owned())
        );
        assert!(parse_listen("[]:7443").is_err());
        assert!(parse_listen("10.1.2.3").is_err());
    }
}

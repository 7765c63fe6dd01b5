//! The `pods` placement's wire without a cluster: `kraken runner --listen` started here, its
//! certificates written as its Secret would hold them, and the host dialing it over TCP with
//! mutual TLS, as the operator dials a runner Pod.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use kraken_bridge::provider::remote::{Dial, Locate, Located, files};
use kraken_bridge::provider::tls::ClientIdentity;

/// A runner serving one provider on loopback; killed on drop.
pub struct Served {
    child: Child,
    pub dial: Dial,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Fixed(Located);

#[async_trait::async_trait]
impl Locate for Fixed {
    async fn locate(&self) -> Result<Located, String> {
        Ok(self.0.clone())
    }
}

/// `kraken runner --listen 127.0.0.1:<free> --sandbox landlock -- binary`, serving `protocol`.
pub fn serve(binary: &Path, protocol: u32, writable: &Path) -> anyhow::Result<Served> {
    let dir = tempfile::Builder::new().prefix("kr-").tempdir_in("/tmp")?;
    let tls = dir.path().join("tls");
    std::fs::create_dir_all(&tls)?;
    let runner = ClientIdentity::generate()?;
    let operator = ClientIdentity::generate()?;
    std::fs::write(tls.join(files::RUNNER_CERT), runner.cert_der())?;
    std::fs::write(tls.join(files::RUNNER_KEY), runner.key_der())?;
    std::fs::write(tls.join(files::OPERATOR_CERT), operator.cert_der())?;
    let work = dir.path().join("w");
    let port = kraken_tests::operator::free_port()?;
    let address = format!("127.0.0.1:{port}");
    let child = Command::new(kraken_tests::kraken_bin()?)
        .args([
            "runner",
            "--sandbox",
            "landlock",
            "--listen",
            &address,
            "--tls-dir",
        ])
        .arg(&tls)
        .arg("--work-dir")
        .arg(&work)
        .arg("--allow-write")
        .arg(writable)
        .arg("--")
        .arg(binary)
        .env("TMPDIR", &work)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let located = Located {
        address,
        server_cert: runner.cert_der().to_vec(),
        protocol,
        instance: format!("pid {}", child.id()),
    };
    Ok(Served {
        child,
        dial: Dial {
            package: None,
            locate: Arc::new(Fixed(located)),
            identity: Arc::new(operator),
        },
        _dir: dir,
    })
}

/// The served runner's pid.
pub fn pid(served: &Served) -> u32 {
    served.child.id()
}

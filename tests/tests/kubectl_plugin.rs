//! The kubectl plugin (`kubectl kraken`, docs/operator.md "Plans and approvals"), end to end:
//! the real kubectl finds the `kraken` binary under the name `kubectl-kraken` on PATH and runs
//! it against a real kube-apiserver + etcd, with the operator and the fixture provider behind.
//! A `planPolicy: Manual` create is listed with its plan (`get`), shown (`show-plan`) and
//! approved (`approve --yes`) by the test user, whose name the approval records as the API
//! server reports it; the fixture's ledger proves the create happened only then. `--context`,
//! `-n` and KUBECONFIG pick the cluster and namespace; mistakes exit non-zero and say why.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use kraken_tests::operator::bed::{OBJECT_API_VERSION, OBJECT_KIND, OBJECTS, describe};
use kraken_tests::operator::{FixtureBed, OperatorOptions, condition};
use kraken_tests::{TestEnv, kraken_bin, ledger, scratch_dir, wait_for};
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(60);

/// The real kubectl, with a directory holding `kubectl-kraken` (a symlink to this checkout's
/// kraken) first on PATH.
struct Kubectl {
    bin: PathBuf,
    plugin_dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn new(kubeconfig: &Path) -> anyhow::Result<Self> {
        let plugin_dir = scratch_dir("kraken-plugin-")?;
        std::os::unix::fs::symlink(kraken_bin()?, plugin_dir.path().join("kubectl-kraken"))?;
        Ok(Self {
            bin: TestEnv::load()?.path("KRAKEN_TEST_KUBECTL")?,
            plugin_dir,
            kubeconfig: kubeconfig.to_path_buf(),
        })
    }

    /// kubectl `args` with PATH leading to the plugin, KUBECONFIG as given (else unset).
    fn run_env(&self, args: &[&str], kubeconfig_env: Option<&Path>) -> anyhow::Result<Output> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![self.plugin_dir.path().to_path_buf()];
        dirs.extend(std::env::split_paths(&path));
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("PATH", std::env::join_paths(dirs)?)
            .env_remove("KUBECONFIG")
            .env("KUBECACHEDIR", self.plugin_dir.path().join("cache"))
            .stdin(std::process::Stdio::null());
        if let Some(k) = kubeconfig_env {
            cmd.env("KUBECONFIG", k);
        }
        cmd.output().context("failed to run kubectl")
    }

    /// `kubectl kraken ARGS --kubeconfig K`, whatever its exit status.
    fn kraken(&self, args: &[&str]) -> anyhow::Result<Output> {
        let kubeconfig = self.kubeconfig.to_string_lossy();
        let mut all = vec!["kraken"];
        all.extend(args);
        all.extend(["--kubeconfig", &kubeconfig]);
        self.run_env(&all, None)
    }

    /// `kubectl kraken ARGS`, which must succeed: its stdout.
    fn ok(&self, args: &[&str]) -> anyhow::Result<String> {
        succeeded(args, &self.kraken(args)?)
    }

    /// `kubectl kraken ARGS`, which must fail: its stderr.
    fn fails(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.kraken(args)?;
        ensure!(
            !out.status.success(),
            "kubectl kraken {} succeeded: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
        Ok(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The cells of the row of `web` (the Object under test), AGE left out: it moves on between
/// two calls, as may other objects' rows (the ProviderConfig's status).
fn web_row(table: &str) -> Option<Vec<&str>> {
    let row = table
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some("web"))?;
    let mut cells: Vec<&str> = row.split_whitespace().collect();
    cells.pop();
    Some(cells)
}

fn succeeded(args: &[&str], out: &Output) -> anyhow::Result<String> {
    ensure!(
        out.status.success(),
        "kubectl {} failed ({}):\n{}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn kubectl_kraken_lists_shows_and_approves_plans() -> anyhow::Result<()> {
    let mut bed = FixtureBed::start("kplugin", OperatorOptions::default())?;
    let result = scenario(&mut bed);
    bed.finish(result)
}

fn scenario(bed: &mut FixtureBed) -> anyhow::Result<()> {
    let k = Kubectl::new(bed.cp.kubeconfig())?;
    let list = k.run_env(&["plugin", "list"], None)?;
    let listed = String::from_utf8_lossy(&list.stdout);
    let ours = k.plugin_dir.path().join("kubectl-kraken");
    ensure!(
        listed.contains(&*ours.to_string_lossy()),
        "kubectl plugin list does not show {}: {listed}{}",
        ours.display(),
        String::from_utf8_lossy(&list.stderr)
    );
    let help = k.ok(&["approve", "--help"])?;
    ensure!(
        help.contains("Usage: kubectl kraken approve") && help.contains("Examples:"),
        "{help}"
    );

    let manifest = json!({
        "apiVersion": OBJECT_API_VERSION, "kind": OBJECT_KIND,
        "metadata": {"name": "web", "namespace": bed.ns},
        "spec": {"planPolicy": "Manual", "forProvider": {"name": "web", "size": 1}},
    });
    plans_before_applying(bed, &k, &manifest)?;
    bed.apply(&manifest.to_string())?;
    let id = pending_create(bed)?;
    lists_and_shows(bed, &k, &id)?;
    refuses_mistakes(bed, &k, &id)?;
    approves(bed, &k, &id)?;
    contexts_and_namespaces(bed, &k)
}

/// `kubectl kraken plan -f` of the manifest not applied yet: exit 2 (changes), `web` to be
/// created; nothing written.
fn plans_before_applying(bed: &FixtureBed, k: &Kubectl, manifest: &Value) -> anyhow::Result<()> {
    let dir = scratch_dir("kraken-plugin-plan-")?;
    let file = dir.path().join("web.yaml");
    std::fs::write(&file, manifest.to_string())?;
    let file = file.to_string_lossy().into_owned();
    let plugins = TestEnv::load()?.path("KRAKEN_TEST_PLUGIN_DIR")?;
    let plugins = plugins.to_string_lossy().into_owned();
    let args = [
        "plan",
        "-f",
        &file,
        "-n",
        &bed.ns,
        "--plugin-dir",
        &plugins,
        "--no-color",
    ];
    let out = k.kraken(&args)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.code() == Some(2),
        "kubectl kraken plan exited {} (want 2: changes):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        stdout.contains("+ create") && stdout.contains("web"),
        "{stdout}"
    );
    ensure!(
        bed.object_opt("web")?.is_none(),
        "kubectl kraken plan created web"
    );
    Ok(())
}

/// Waits until the Object `web` holds a Create plan; returns its id.
fn pending_create(bed: &FixtureBed) -> anyhow::Result<String> {
    wait_for(CONVERGE, "a pending Create plan", || {
        let obj = bed.object("web")?;
        let pending = condition(&obj, "Synced").is_some_and(|(_, r, _)| r == "PlanPending");
        match obj["status"]["plan"]["id"].as_str() {
            Some(id) if pending && obj["status"]["plan"]["action"] == "Create" => {
                Ok(Some(id.to_owned()))
            }
            _ => anyhow::bail!("{}; plan {}", describe(&obj), obj["status"]["plan"]),
        }
    })
}

fn lists_and_shows(bed: &FixtureBed, k: &Kubectl, id: &str) -> anyhow::Result<()> {
    let table = k.ok(&["get", "-n", &bed.ns])?;
    let header = table.lines().next().unwrap_or_default();
    let columns: Vec<&str> = header.split_whitespace().collect();
    ensure!(
        columns
            == [
                "NAMESPACE",
                "KIND",
                "NAME",
                "READY",
                "SYNCED",
                "PLAN",
                "AGE"
            ],
        "{table}"
    );
    let short = &id[..8];
    let want = [
        bed.ns.as_str(),
        "Object",
        "web",
        "False",
        "False",
        "Create",
        short,
    ];
    ensure!(web_row(&table) == Some(want.to_vec()), "{table}");
    ensure!(
        table.contains("ProviderConfig") && table.contains("default"),
        "the ProviderConfig is a Kraken object too:\n{table}"
    );

    let all = k.ok(&["get", "-A"])?;
    ensure!(
        all.lines()
            .any(|l| l.starts_with(&format!("{} ", bed.ns)) && l.contains(" web ")),
        "get -A:\n{all}"
    );
    // The same commands under the binary's own name: `kraken kubectl ...`.
    let kubeconfig = bed.cp.kubeconfig().to_string_lossy();
    let args = ["kubectl", "get", "-n", &bed.ns, "--kubeconfig", &kubeconfig];
    let direct = Command::new(kraken_bin()?).args(args).output()?;
    let direct = succeeded(&args, &direct)?;
    ensure!(
        web_row(&direct).is_some() && web_row(&direct) == web_row(&table),
        "kraken kubectl get differs from kubectl kraken get:\n{direct}\n{table}"
    );

    let shown = k.ok(&["show-plan", &format!("{OBJECTS}/web"), "-n", &bed.ns])?;
    for want in [
        format!("plan {id} (Create)"),
        "+ spec.forProvider.size: 1".to_owned(),
        "+ spec.forProvider.name: \"web\"".to_owned(),
        "Synced: False (PlanPending)".to_owned(),
        format!(
            "kubectl kraken approve {OBJECTS}/web -n {} --id {id}",
            bed.ns
        ),
    ] {
        ensure!(shown.contains(&want), "show-plan lacks {want:?}:\n{shown}");
    }
    let json: Value = serde_json::from_str(&k.ok(&[
        "show-plan",
        "object",
        "web",
        "-n",
        &bed.ns,
        "-o",
        "json",
    ])?)?;
    ensure!(json["id"] == id && json["action"] == "Create", "{json}");
    Ok(())
}

fn refuses_mistakes(bed: &FixtureBed, k: &Kubectl, id: &str) -> anyhow::Result<()> {
    let err = k.fails(&["show-plan", "widgets/web", "-n", &bed.ns])?;
    ensure!(
        err.contains("no Kraken kind is called \"widgets\""),
        "{err}"
    );
    let err = k.fails(&["show-plan", "object/nope", "-n", &bed.ns])?;
    ensure!(
        err.contains("Object nope") && err.contains("not found"),
        "{err}"
    );
    // Without a terminal, approving what is pending needs --yes: nothing is written.
    let err = k.fails(&["approve", "object/web", "-n", &bed.ns])?;
    ensure!(err.contains("standard input is not a terminal"), "{err}");
    let obj = bed.object("web")?;
    ensure!(
        obj["metadata"]["annotations"]["kraken.dev/approve-plan"].is_null(),
        "approved without confirmation: {}",
        obj["metadata"]
    );
    // A wrong id is written (the operator decides), found stale, and the command says so.
    let wrong = "0123456789abcdef0123456789abcdef";
    let err = k.fails(&[
        "approve",
        "object/web",
        "-n",
        &bed.ns,
        "--id",
        wrong,
        "--timeout",
        "60s",
    ])?;
    ensure!(
        err.contains(&format!("the approval of plan {wrong} is stale"))
            && err.contains(&format!("plan {id} (Create) waits for approval")),
        "{err}"
    );
    ensure!(
        ledger::event_log(bed.ledger_dir())?.is_empty(),
        "a stale approval created something"
    );
    Ok(())
}

fn approves(bed: &FixtureBed, k: &Kubectl, id: &str) -> anyhow::Result<()> {
    let out = k.ok(&[
        "approve",
        &format!("{OBJECTS}/web"),
        "-n",
        &bed.ns,
        "--yes",
        "--timeout",
        "60s",
    ])?;
    let whoami = bed.cp.kubectl(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ])?;
    let user = whoami.trim();
    ensure!(!user.is_empty(), "kubectl auth whoami names no user");
    ensure!(
        out.contains(&format!("plan {id} (Create)"))
            && out.contains(&format!("approved plan {id} of Object web"))
            && out.contains(&format!("as {user}"))
            && out.contains(&format!("plan {id} applied")),
        "{out}"
    );
    let obj = bed.wait_reconciled("web", CONVERGE)?;
    let annotations = &obj["metadata"]["annotations"];
    ensure!(
        annotations["kraken.dev/approve-plan"] == id,
        "{annotations}"
    );
    ensure!(
        annotations["kraken.dev/approved-by"] == user,
        "{annotations}"
    );
    ensure!(
        obj["status"]["lastAppliedPlan"]["id"] == id,
        "{}",
        obj["status"]
    );
    let ops: Vec<String> = ledger::event_log(bed.ledger_dir())?
        .into_iter()
        .map(|e| format!("{} {}", e.op, e.name))
        .collect();
    ensure!(ops == ["create web"], "{ops:?}");

    // Nothing pending any more: both commands say so and fail.
    let err = k.fails(&["show-plan", "object/web", "-n", &bed.ns])?;
    ensure!(
        err.contains("no plan is pending for Object web")
            && err.contains(&format!("the last plan applied was {id} (Create)")),
        "{err}"
    );
    let err = k.fails(&["approve", "object/web", "-n", &bed.ns, "--yes"])?;
    ensure!(err.contains("nothing to approve"), "{err}");
    let again = k.ok(&["approve", "object/web", "-n", &bed.ns, "--id", id])?;
    ensure!(again.contains("already applied"), "{again}");
    Ok(())
}

/// A copy of the kubeconfig with a second context whose default namespace is the test's.
fn contexts_and_namespaces(bed: &FixtureBed, k: &Kubectl) -> anyhow::Result<()> {
    let dir = scratch_dir("kraken-kubeconfig-")?;
    let copy = dir.path().join("config");
    std::fs::copy(bed.cp.kubeconfig(), &copy)?;
    let copy_s = copy.to_string_lossy().into_owned();
    let set = [
        "config",
        "set-context",
        "team",
        "--cluster",
        "kraken-testenv",
        "--user",
        "kraken-admin",
        "--namespace",
        &bed.ns,
        "--kubeconfig",
        &copy_s,
    ];
    succeeded(&set, &k.run_env(&set, None)?)?;
    namespaces_follow_the_context(bed, k, &copy)?;
    let shown = k.run_env(
        &["kraken", "show-plan", "object/web", "--context", "team"],
        Some(&copy),
    )?;
    let err = String::from_utf8_lossy(&shown.stderr);
    ensure!(
        !shown.status.success()
            && err.contains(&format!(
                "Object web (objects.fixture.tf.kraken.dev) in namespace {}",
                bed.ns
            )),
        "show-plan in the context's namespace: {err}"
    );
    let err = k.fails(&["get", "--context", "nosuch"])?;
    ensure!(err.contains("nosuch"), "{err}");
    Ok(())
}

/// `kubectl kraken get` under the kubeconfig `copy` (with the context `team`): the namespace
/// the context names, unless `-n` says otherwise, and `KUBECONFIG` as kubectl honours it.
fn namespaces_follow_the_context(bed: &FixtureBed, k: &Kubectl, copy: &Path) -> anyhow::Result<()> {
    let copy_s = copy.to_string_lossy().into_owned();
    let rows = |args: &[&str], env: Option<&Path>| -> anyhow::Result<(String, String)> {
        let out = k.run_env(args, env)?;
        Ok((
            succeeded(args, &out)?,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    };
    let has_web = |t: &str| {
        t.lines()
            .any(|l| l.split_whitespace().nth(2) == Some("web"))
    };

    // The context's namespace is the default; -n overrides it.
    let (t, _) = rows(
        &[
            "kraken",
            "get",
            "--kubeconfig",
            &copy_s,
            "--context",
            "team",
        ],
        None,
    )?;
    ensure!(has_web(&t), "--context team (namespace {}):\n{t}", bed.ns);
    let (t, e) = rows(
        &[
            "kraken",
            "get",
            "--context",
            "team",
            "-n",
            "default",
            "--kubeconfig",
            &copy_s,
        ],
        None,
    )?;
    ensure!(
        !has_web(&t) && e.contains("No Kraken objects found in namespace default"),
        "{t}{e}"
    );
    // The current context has no namespace: `default`.
    let (t, e) = rows(&["kraken", "get", "--kubeconfig", &copy_s], None)?;
    ensure!(
        !has_web(&t),
        "the current context's namespace is default:\n{t}{e}"
    );
    // KUBECONFIG is honoured as kubectl honours it.
    let (t, _) = rows(&["kraken", "get", "--context", "team"], Some(copy))?;
    ensure!(has_web(&t), "KUBECONFIG with --context team:\n{t}");
    Ok(())
}

//! The Helm chart (`charts/kraken`), rendered by the real `helm` and admitted by the real
//! kube-apiserver (server-side dry run), with default values and with persistence and a mirror.
//! Every flag the chart passes to `kraken operator` must be one the binary knows.

use anyhow::ensure;
use kraken_tests::{ControlPlane, kraken_bin, repo_root};

/// The real API server admits `yaml` in kraken-system (server-side dry run).
fn admitted(cp: &ControlPlane, yaml: &str, what: &str) -> anyhow::Result<()> {
    let args = [
        "apply",
        "--dry-run=server",
        "-n",
        "kraken-system",
        "-f",
        "-",
    ];
    let out = cp.kubectl_stdin(&args, yaml.as_bytes())?;
    ensure!(
        out.status.success(),
        "the API server refused the chart ({what}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn helm_template(sets: &[&str]) -> anyhow::Result<String> {
    let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", *s]).collect();
    kraken_tests::helm_template(&args)
}

#[test]
fn chart_renders_and_the_api_server_admits_it() -> anyhow::Result<()> {
    let cp = ControlPlane::start("helm")?;
    // Helm installs crds/ first; the Provider and ProviderConfig kinds must be those of
    // generated-crds/core (scripts/generate.sh copies them and CI checks the copy).
    let crds = repo_root().join("charts/kraken/crds");
    cp.kubectl(&["apply", "--server-side", "-f", &crds.to_string_lossy()])?;
    cp.wait_established("kraken.dev/core=true", "60s")?;
    let n = cp.kubectl(&["get", "crd", "-l", "kraken.dev/core=true", "-o", "name"])?;
    let want = std::fs::read_dir(kraken_tests::repo_root().join("generated-crds/core"))?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".kraken.dev_"))
        .count();
    ensure!(
        n.lines().count() == want,
        "the chart's crds/ holds {} core CRDs, expected {want} (as generated-crds/core)",
        n.lines().count()
    );
    cp.create_namespace("kraken-system")?;
    // Every flag the chart passes must be one of its subcommands' (operator, rbac-manager).
    let mut help = String::new();
    for command in ["operator", "rbac-manager"] {
        let out = std::process::Command::new(kraken_bin()?)
            .args([command, "--help"])
            .output()?;
        help.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    for sets in [
        vec![],
        vec![
            "pluginCache.persistence.enabled=true",
            "operator.providerMirror=https://mirror.example/",
            "replicas=2",
            "metrics.expose=true",
            "networkPolicy.enabled=true",
            "networkPolicy.apiServerCIDRs={10.0.0.1/32}",
            "aws.endpoints={http://127.0.0.1:*}",
            "operator.providerEnv={HTTPS_PROXY}",
            "rbacManager.tenantNamespaces=kraken.dev/tenant=true",
            "rbacManager.excludeNamespaces={kube-system,platform}",
            "runner.pods.enabled=true",
            "runner.pods.denyEgress={10.0.0.1/32}",
        ],
    ] {
        let rendered = helm_template(&sets)?;
        expect_rendered(&rendered, &sets, &help)?;
        admitted(&cp, &rendered, &format!("{sets:?}"))?;
    }
    Ok(())
}

/// What the chart rendered with `sets` holds: locked down whatever the values, the objects
/// and flags the values ask for, and only flags `kraken operator` knows (its `help`).
fn expect_rendered(rendered: &str, sets: &[&str], help: &str) -> anyhow::Result<()> {
    // Locked down whatever the values: no privileges, the runtime's seccomp profile,
    // capped scratch space, probes on their own port.
    for line in [
        "seccompProfile: {type: RuntimeDefault}",
        "readOnlyRootFilesystem: true",
        "capabilities: {drop: [\"ALL\"]}",
        "runAsNonRoot: true",
        "emptyDir: {sizeLimit: 1Gi}",
        "--health-addr=0.0.0.0:8081",
        "httpGet: {path: /readyz, port: health}",
    ] {
        ensure!(
            rendered.contains(line),
            "the chart ({sets:?}) lacks {line:?}"
        );
    }
    for kind in ["Deployment", "ServiceAccount", "ClusterRole", "RoleBinding"] {
        ensure!(
            rendered.contains(&format!("kind: {kind}\n")),
            "no {kind} rendered"
        );
    }
    if sets.is_empty() {
        expect_defaults(rendered)?;
    } else {
        expect_asked(rendered)?;
    }
    // The operator's own ClusterRole grants no group wholesale: what it needs beyond Kraken's
    // fixed groups follows installs (the RBAC manager).
    let wholesale = rendered
        .split("\n---")
        .filter(|doc| doc.contains("\nkind: ClusterRole\n"))
        .any(|doc| doc.contains("apiGroups: [\"*\"]"));
    ensure!(
        !wholesale,
        "a ClusterRole of the chart grants every API group"
    );
    for flag in rendered
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- --"))
    {
        let name = flag.split('=').next().unwrap_or(flag);
        ensure!(
            help.contains(&format!("--{name}")),
            "the chart passes --{name}, which neither `kraken operator` nor `kraken rbac-manager` knows"
        );
    }
    Ok(())
}

/// The optional objects and pod settings render only when asked, and the API server admits
/// them (the ServiceMonitor's CRD is not installed here, so it is checked as rendered text).
#[test]
fn optional_values_render_what_they_say() -> anyhow::Result<()> {
    let plain = helm_template(&[])?;
    for absent in [
        "kind: ServiceMonitor",
        "kind: PodDisruptionBudget",
        "priorityClassName",
        "role-arn",
        r#""list", "create", "update", "patch", "delete""#,
    ] {
        ensure!(!plain.contains(absent), "{absent} rendered by default");
    }
    ensure!(
        plain.contains("- --shards=off"),
        "sharding is not off by default"
    );
    let rendered = helm_template(&[
        "metrics.expose=true",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prom",
        "podDisruptionBudget.enabled=true",
        "replicas=2",
        "priorityClassName=system-cluster-critical",
        "extraEnv[0].name=HTTPS_PROXY",
        "extraEnv[0].value=http://proxy:3128",
        "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::123456789012:role/kraken",
        "podAnnotations.example\\.com/team=platform",
        "nodeSelector.kubernetes\\.io/os=linux",
        "tolerations[0].key=dedicated",
        "tolerations[0].operator=Exists",
        "operator.shards=auto",
    ])?;
    for line in [
        "kind: ServiceMonitor",
        "release: prom",
        "kind: PodDisruptionBudget",
        "minAvailable: 1",
        "priorityClassName: system-cluster-critical",
        "- name: HTTPS_PROXY",
        "value: http://proxy:3128",
        "eks.amazonaws.com/role-arn: arn:aws:iam::123456789012:role/kraken",
        "example.com/team: platform",
        "kubernetes.io/os: linux",
        "key: dedicated",
        "- --shards=auto",
        r#"verbs: ["get", "list", "create", "update", "patch", "delete"]"#,
    ] {
        ensure!(
            rendered.contains(line),
            "the chart lacks {line:?}:\n{rendered}"
        );
    }
    // Everything but the ServiceMonitor goes to the real API server.
    let docs: Vec<&str> = rendered
        .split("\n---")
        .filter(|d| !d.contains("kind: ServiceMonitor"))
        .collect();
    let cp = ControlPlane::start("helm-values")?;
    cp.create_namespace("kraken-system")?;
    admitted(&cp, &docs.join("\n---"), "optional values")?;
    Ok(())
}

/// `helm lint` is clean, and values.schema.json refuses mistakes with a message naming the
/// value.
#[test]
fn lint_is_clean_and_the_schema_refuses_bad_values() -> anyhow::Result<()> {
    let env = kraken_tests::TestEnv::load()?;
    let helm = env.path("KRAKEN_TEST_HELM")?;
    let lint = std::process::Command::new(&helm)
        .args(["lint", "--strict"])
        .arg(repo_root().join("charts/kraken"))
        .output()?;
    ensure!(
        lint.status.success(),
        "helm lint --strict: {}",
        String::from_utf8_lossy(&lint.stdout)
    );
    for (set, says) in [
        ("replicas=two", "/replicas"),
        ("operator.concurency=3", "'concurency' not allowed"),
        (
            "operator.providerIdleTimeout=2d",
            "/operator/providerIdleTimeout",
        ),
        ("metrics.port=80800", "/metrics/port"),
        ("operator.shards=on", "/operator/shards"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("resources.limits.memory=lots", "/resources/limits/memory"),
        ("operator.providerEnv={AWS-*}", "/operator/providerEnv/0"),
        (
            "networkPolicy.egressExcept={169.254.0.0}",
            "/networkPolicy/egressExcept/0",
        ),
    ] {
        let err = match helm_template(&[set]) {
            Ok(_) => anyhow::bail!("helm accepted {set}"),
            Err(e) => format!("{e:#}"),
        };
        ensure!(
            err.contains("don't meet the specifications of the schema") && err.contains(says),
            "helm's refusal of {set} does not say {says:?}: {err}"
        );
    }
    Ok(())
}

/// The Grafana dashboard renders, when asked, as a ConfigMap holding the chart's JSON.
#[test]
fn the_dashboard_renders_only_when_asked() -> anyhow::Result<()> {
    ensure!(
        !helm_template(&[])?.contains("kraken.json"),
        "a dashboard by default"
    );
    let rendered = helm_template(&["grafanaDashboard.enabled=true"])?;
    ensure!(
        rendered.contains("grafana_dashboard: \"1\""),
        "no sidecar label"
    );
    let file = std::fs::read_to_string(repo_root().join("charts/kraken/dashboards/kraken.json"))?;
    let parsed: serde_json::Value = serde_json::from_str(&file)?;
    ensure!(
        parsed["panels"].as_array().is_some_and(|p| p.len() >= 10),
        "panels"
    );
    for line in file.lines().filter(|l| l.contains("\"expr\"")) {
        ensure!(rendered.contains(line.trim()), "the ConfigMap lacks {line}");
    }
    Ok(())
}

/// With no values set: nothing exposed or persisted, and no pods placement.
fn expect_defaults(rendered: &str) -> anyhow::Result<()> {
    ensure!(
        !rendered.contains("PersistentVolumeClaim"),
        "a PVC by default"
    );
    // /metrics names every resource: private unless asked.
    ensure!(rendered.contains("--metrics-addr=127.0.0.1:8080"));
    ensure!(
        !rendered.contains("kind: Service\n"),
        "a metrics Service by default"
    );
    ensure!(!rendered.contains("kind: NetworkPolicy"));
    ensure!(
        !rendered.contains("--runner-image") && !rendered.contains("resources: [\"deployments\"]"),
        "the pods placement (and its RBAC in tenant namespaces) offered by default"
    );
    Ok(())
}

/// With the second set of values: what each asks for is rendered.
fn expect_asked(rendered: &str) -> anyhow::Result<()> {
    // The pods placement: its flags, and Deployments of the tenant namespaces.
    ensure!(
        rendered.contains("--runner-image=kraken:"),
        "no runner image"
    );
    ensure!(rendered.contains("--runner-deny-egress=10.0.0.1/32"));
    ensure!(
        rendered.contains("--runner-idle-after=30m"),
        "the runners' idle time"
    );
    ensure!(
        rendered.contains("\"--runner-resources={"),
        "no runner resources"
    );
    ensure!(
        rendered.contains("resources: [\"deployments\"]"),
        "the tenant ClusterRole lacks the runners' Deployments"
    );
    ensure!(rendered.contains("--metrics-addr=0.0.0.0:8080"));
    ensure!(rendered.contains("kind: Service\n"), "no metrics Service");
    ensure!(rendered.contains("kind: NetworkPolicy"), "no NetworkPolicy");
    ensure!(
        rendered.contains("- 169.254.0.0/16"),
        "the NetworkPolicy lets providers reach the metadata endpoint"
    );
    ensure!(rendered.contains("--aws-endpoint=http://127.0.0.1:*"));
    ensure!(
        rendered.contains("kind: PersistentVolumeClaim"),
        "no PVC with persistence"
    );
    ensure!(rendered.contains("--provider-mirror=https://mirror.example/"));
    ensure!(rendered.contains("--tenant-namespaces=kraken.dev/tenant=true"));
    ensure!(
        rendered.contains("--exclude-namespace=platform"),
        "rbacManager.excludeNamespaces not passed on"
    );
    Ok(())
}

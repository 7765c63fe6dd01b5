//! What a `pods` runner is made of, decided purely from the ProviderConfig, the Provider that
//! recorded its package and the operator's settings: its ServiceAccount (when Kraken makes
//! it), its Deployment and its NetworkPolicy. [`super`] writes them.

use serde_json::{Value as Json, json};

use kraken_core_kinds::{MANAGED_BY_LABEL, Provider, ProviderConfig};
use kraken_provider::remote::files;

use super::PodSettings;

/// The label every object of one runner carries: its ProviderConfig's uid.
pub const RUNNER_LABEL: &str = "kraken.dev/runner";
/// The label of a runner Pod made from the current template: a digest of the template, so a
/// Pod of an older one (a previous version, being replaced) is never dialed.
pub const SPEC_LABEL: &str = "kraken.dev/runner-spec";
/// The ServiceAccount a runner gets when its ProviderConfig names none: no RBAC, no token.
pub const DEFAULT_ACCOUNT: &str = "kraken-runner";
/// The port a runner serves on.
pub const PORT: u16 = 7443;
/// Where the Pod mounts the runner's certificates and its work directory.
const TLS_DIR: &str = "/var/run/kraken-runner/tls";
const WORK_DIR: &str = "/var/run/kraken-runner/work";
/// What EKS's pod identity webhook mounts for a ServiceAccount annotated with a role; Kraken
/// mounts the same itself, so IRSA needs no webhook for runners.
pub const ROLE_ANNOTATION: &str = "eks.amazonaws.com/role-arn";
const AWS_TOKEN_DIR: &str = "/var/run/secrets/eks.amazonaws.com/serviceaccount";

/// One runner's names and the account it runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runner {
    pub namespace: String,
    /// The Deployment, NetworkPolicy and (with `-tls`) Secret.
    pub name: String,
    pub uid: String,
    pub pc_name: String,
    /// The ServiceAccount, and whether the ProviderConfig named it (it then gets a token).
    pub account: String,
    pub named_account: bool,
    /// The cloud role the named ServiceAccount's annotation gives it.
    pub role_arn: Option<String>,
}

impl Runner {
    pub fn secret_name(&self) -> String {
        format!("{}-tls", self.name)
    }

    pub fn selector(&self) -> String {
        format!("{RUNNER_LABEL}={}", self.uid)
    }
}

/// The runner's name for ProviderConfig `pc_name`: `kraken-runner-<name>`, shortened with a
/// digest where it would pass 52 characters (room for the ReplicaSet's and Pod's suffixes).
pub fn runner_name(pc_name: &str) -> String {
    let full = format!("kraken-runner-{pc_name}");
    if full.len() <= 52 {
        return full;
    }
    let digest = kraken_kit::hash::fnv1a(pc_name.as_bytes());
    format!("{}-{:08x}", full[..43].trim_end_matches('-'), digest as u32)
}

fn labels(runner: &Runner) -> Json {
    json!({
        "app.kubernetes.io/name": "kraken-runner",
        "app.kubernetes.io/instance": runner.pc_name,
        MANAGED_BY_LABEL: "kraken",
        RUNNER_LABEL: runner.uid,
    })
}

fn owner(pc: &ProviderConfig) -> Json {
    json!([{
        "apiVersion": "core.kraken.dev/v1alpha1",
        "kind": "ProviderConfig",
        "name": pc.metadata.name,
        "uid": pc.metadata.uid,
        "controller": true,
        "blockOwnerDeletion": false,
    }])
}

/// The ServiceAccount Kraken makes when the ProviderConfig names none: no token mounted.
pub fn default_account(namespace: &str) -> Json {
    json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": DEFAULT_ACCOUNT, "namespace": namespace,
                     "labels": {MANAGED_BY_LABEL: "kraken", "app.kubernetes.io/name": "kraken-runner"}},
        "automountServiceAccountToken": false,
    })
}

/// The runner's command line: fetch exactly the recorded package, serve it.
fn args(runner: &Runner, settings: &PodSettings, provider: &Provider) -> Vec<String> {
    let status = provider.status.clone().unwrap_or_default();
    let mut args: Vec<String> = [
        "runner",
        "--listen",
        &format!("[$(POD_IP)]:{PORT}"),
        "--tls-dir",
        TLS_DIR,
        "--work-dir",
        WORK_DIR,
        "--sandbox",
        if settings.sandbox { "landlock" } else { "none" },
        "--package",
        status.address.as_deref().unwrap_or_default(),
        "--version",
        status.version.as_deref().unwrap_or_default(),
    ]
    .map(str::to_owned)
    .to_vec();
    for (flag, paths) in [
        ("--allow-read", &settings.allow_read),
        ("--allow-write", &settings.allow_write),
    ] {
        for path in paths {
            args.extend([flag.to_owned(), path.display().to_string()]);
        }
    }
    if runner.role_arn.is_some() {
        // The web-identity token is the tenant's own cloud identity: the provider reads it.
        args.extend(["--allow-read".to_owned(), AWS_TOKEN_DIR.to_owned()]);
    }
    for hash in &status.hashes {
        args.extend(["--hash".to_owned(), hash.clone()]);
    }
    if let Some(mirror) = status.mirror.as_ref().or(settings.mirror.as_ref()) {
        args.extend(["--mirror".to_owned(), mirror.clone()]);
    }
    args
}

/// The Pod template's container, volumes and security settings.
fn pod_spec(runner: &Runner, settings: &PodSettings, provider: &Provider) -> Json {
    let mut env = vec![
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        json!({"name": "HOME", "value": WORK_DIR}),
        json!({"name": "TMPDIR", "value": WORK_DIR}),
    ];
    let mut mounts = vec![
        json!({"name": "tls", "mountPath": TLS_DIR, "readOnly": true}),
        json!({"name": "work", "mountPath": WORK_DIR}),
    ];
    let mut volumes = vec![
        json!({"name": "tls", "secret": {"secretName": runner.secret_name(), "defaultMode": 0o400}}),
        json!({"name": "work", "emptyDir": {"sizeLimit": "2Gi"}}),
    ];
    if let Some(role) = &runner.role_arn {
        env.push(json!({"name": "AWS_ROLE_ARN", "value": role}));
        env.push(json!({"name": "AWS_WEB_IDENTITY_TOKEN_FILE", "value": format!("{AWS_TOKEN_DIR}/token")}));
        mounts.push(json!({"name": "aws-iam-token", "mountPath": AWS_TOKEN_DIR, "readOnly": true}));
        volumes.push(json!({"name": "aws-iam-token", "projected": {"sources": [
            {"serviceAccountToken": {"audience": "sts.amazonaws.com", "expirationSeconds": 86400, "path": "token"}}]}}));
    }
    json!({
        "serviceAccountName": runner.account,
        // A token only for an account the ProviderConfig named (its cloud identity); the
        // default account has none to mount.
        "automountServiceAccountToken": runner.named_account,
        "enableServiceLinks": false,
        "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                            "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "runner",
            "image": settings.image,
            "command": ["kraken"],
            "args": args(runner, settings, provider),
            "env": env,
            "ports": [{"name": "plugin", "containerPort": PORT, "protocol": "TCP"}],
            "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 2},
            "resources": settings.resources,
            "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    })
}

/// The runner's Deployment: one replica (`Recreate`: one provider at a time), its Pods
/// labelled with a digest of their template.
pub fn deployment(
    runner: &Runner,
    pc: &ProviderConfig,
    settings: &PodSettings,
    provider: &Provider,
) -> Json {
    let spec = pod_spec(runner, settings, provider);
    let digest = format!(
        "{:016x}",
        kraken_kit::hash::fnv1a(spec.to_string().as_bytes())
    );
    let mut pod_labels = labels(runner);
    pod_labels[SPEC_LABEL] = json!(digest);
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": runner.name, "namespace": runner.namespace,
                     "labels": labels(runner), "ownerReferences": owner(pc)},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {RUNNER_LABEL: runner.uid}},
            "template": {"metadata": {"labels": pod_labels}, "spec": spec},
        },
    })
}

/// The digest label [`deployment`] gives its Pods.
pub fn spec_digest(deployment: &Json) -> Option<&str> {
    deployment["spec"]["template"]["metadata"]["labels"][SPEC_LABEL].as_str()
}

/// Only the operator reaches the runner (on its port), and the runner reaches everything but
/// the addresses the operator denies: the cloud's metadata endpoints and the API server.
pub fn network_policy(runner: &Runner, pc: &ProviderConfig, settings: &PodSettings) -> Json {
    let (v4, v6): (Vec<&String>, Vec<&String>) =
        settings.deny_egress.iter().partition(|c| !c.contains(':'));
    let mut to = vec![json!({"ipBlock": {"cidr": "0.0.0.0/0", "except": v4}})];
    to.push(json!({"ipBlock": {"cidr": "::/0", "except": v6}}));
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": runner.name, "namespace": runner.namespace,
                     "labels": labels(runner), "ownerReferences": owner(pc)},
        "spec": {
            "podSelector": {"matchLabels": {RUNNER_LABEL: runner.uid}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{
                "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": settings.operator_namespace}},
                          "podSelector": {"matchLabels": settings.operator_labels}}],
                "ports": [{"protocol": "TCP", "port": PORT}],
            }],
            "egress": [{"to": to}],
        },
    })
}

/// The runner's certificates Secret: the runner's own pair and the operator's certificate.
pub fn tls_secret(
    runner: &Runner,
    pc: &ProviderConfig,
    (runner_cert, runner_key, operator_cert): (&[u8], &[u8], &[u8]),
) -> Json {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut metadata = json!({"name": runner.secret_name(), "namespace": runner.namespace,
                              "labels": labels(runner), "ownerReferences": owner(pc)});
    metadata["labels"][MANAGED_BY_LABEL] = json!("kraken");
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata,
        "data": {
            files::RUNNER_CERT: b64(runner_cert),
            files::RUNNER_KEY: b64(runner_key),
            files::OPERATOR_CERT: b64(operator_cert),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> (Runner, ProviderConfig, PodSettings, Provider) {
        let pc: ProviderConfig = serde_json::from_value(json!({
            "apiVersion": "core.kraken.dev/v1alpha1", "kind": "ProviderConfig",
            "metadata": {"name": "aws", "namespace": "team-a", "uid": "u-1"},
            "spec": {"providerRef": {"name": "aws"}}}))
        .expect("pc");
        let provider: Provider = serde_json::from_value(json!({
            "apiVersion": "core.kraken.dev/v1alpha1", "kind": "Provider",
            "metadata": {"name": "aws"}, "spec": {"source": "hashicorp/aws"},
            "status": {"address": "registry.terraform.io/hashicorp/aws", "version": "6.0.0",
                       "hashes": ["h1:abc=", "zh:def"], "protocol": 5}}))
        .expect("provider");
        let runner = Runner {
            namespace: "team-a".into(),
            name: runner_name("aws"),
            uid: "u-1".into(),
            pc_name: "aws".into(),
            account: DEFAULT_ACCOUNT.into(),
            named_account: false,
            role_arn: None,
        };
        (runner, pc, PodSettings::for_tests(), provider)
    }

    #[test]
    fn the_default_runner_has_no_token_and_fetches_exactly_the_recorded_package() {
        let (runner, pc, settings, provider) = fixture();
        let d = deployment(&runner, &pc, &settings, &provider);
        let spec = &d["spec"]["template"]["spec"];
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["serviceAccountName"], DEFAULT_ACCOUNT);
        let args: Vec<&str> = spec["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(Json::as_str)
            .collect();
        let joined = args.join(" ");
        assert!(
            joined.contains("--package registry.terraform.io/hashicorp/aws --version 6.0.0 --hash h1:abc= --hash zh:def"),
            "{joined}"
        );
        assert!(joined.contains("--sandbox landlock"), "{joined}");
        assert_eq!(d["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert!(spec_digest(&d).is_some_and(|s| s.len() == 16));
        let c = &spec["containers"][0];
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
        assert!(!d.to_string().contains("eks.amazonaws.com"));
    }

    #[test]
    fn a_named_account_with_a_role_gets_its_token_and_the_web_identity_mount() {
        let (mut runner, pc, settings, provider) = fixture();
        runner.account = "team-a-aws".into();
        runner.named_account = true;
        runner.role_arn = Some("arn:aws:iam::123456789012:role/team-a".into());
        let d = deployment(&runner, &pc, &settings, &provider);
        let spec = &d["spec"]["template"]["spec"];
        assert_eq!(spec["automountServiceAccountToken"], true);
        let env = spec["containers"][0]["env"].to_string();
        assert!(
            env.contains("AWS_ROLE_ARN") && env.contains("role/team-a"),
            "{env}"
        );
        let volumes = spec["volumes"].to_string();
        assert!(volumes.contains("sts.amazonaws.com"), "{volumes}");
        let args = spec["containers"][0]["args"].to_string();
        assert!(
            args.contains(&format!("\"--allow-read\",\"{AWS_TOKEN_DIR}\"")),
            "the sandbox lets the provider read its web-identity token: {args}"
        );
        let (plain, _, _, _) = fixture();
        assert_ne!(
            spec_digest(&d),
            spec_digest(&deployment(&plain, &pc, &settings, &provider)),
            "a changed template must change the Pods' digest"
        );
    }

    #[test]
    fn the_network_policy_admits_only_the_operator_and_denies_metadata_and_the_api_server() {
        let (runner, pc, settings, _) = fixture();
        let np = network_policy(&runner, &pc, &settings);
        let text = np.to_string();
        assert!(text.contains("169.254.169.254/32"), "{text}");
        assert!(text.contains("10.96.0.1/32"), "{text}");
        assert!(text.contains("fd00:ec2::254/128"), "{text}");
        assert_eq!(
            np["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "kraken-system"
        );
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    }

    #[test]
    fn long_names_are_shortened_with_a_digest() {
        let long = "x".repeat(80);
        let name = runner_name(&long);
        assert!(name.len() <= 52, "{name}");
        assert_ne!(name, runner_name(&"x".repeat(81)));
        assert_eq!(runner_name("aws"), "kraken-runner-aws");
    }
}

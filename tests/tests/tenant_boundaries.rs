//! Trust boundaries against the namespace user: each test plays a tenant who may do anything
//! in their own namespace (a Role with every verb on every resource there, used through
//! impersonation) but holds no approver binding and is not the operator, against the real API
//! server, the chart's admission policies and the operator; each attempt must fail.

#[path = "tenant_boundaries/hub.rs"]
mod hub;

use std::time::Duration;

use kraken_tests::operator::FixtureBed;
use kraken_tests::operator::bed::yaml_documents;
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(60);

/// The tenant of these tests.
const TENANT: &str = "mallory";

/// Gives [`TENANT`] every verb on every resource in the bed's namespace: the most a namespace
/// user gets.
fn bind_tenant(bed: &FixtureBed) -> anyhow::Result<()> {
    let docs = [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "tenant", "namespace": bed.ns},
               "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "tenant", "namespace": bed.ns},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": "tenant"},
               "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io",
                             "name": TENANT}]}),
    ];
    bed.apply(&yaml_documents(&docs))?;
    Ok(())
}

/// Installs one of the chart's templates as `helm template` renders it.
fn install_chart_template(bed: &FixtureBed, template: &str) -> anyhow::Result<()> {
    let rendered = kraken_tests::helm_template(&["--show-only", template])?;
    bed.apply(&rendered)?;
    Ok(())
}

/// `kubectl --as=TENANT apply` of `doc`: `Ok` when admitted, else the API server's message.
fn apply_as_tenant(bed: &FixtureBed, doc: &Value) -> anyhow::Result<Result<(), String>> {
    let as_tenant = format!("--as={TENANT}");
    let out = bed.cp.kubectl_stdin(
        &[
            &as_tenant,
            "apply",
            "--server-side",
            "--field-manager=tenant",
            "-f",
            "-",
        ],
        doc.to_string().as_bytes(),
    )?;
    Ok(if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

//! Trust boundaries against the namespace user: each test plays a tenant who may edit all of
//! Kraken's kinds, Secrets and ConfigMaps in their own namespace (a Role, used through
//! impersonation) but holds none of the verbs Kraken's admission policies ask about (`approve`
//! plans, `seed` states), cannot edit the Namespace and is not the operator, against the real
//! API server, the chart's admission policies and the operator; each attempt must fail.

#[path = "tenant_boundaries/adoption.rs"]
mod adoption;
#[path = "tenant_boundaries/approvals.rs"]
mod approvals;
#[path = "tenant_boundaries/hub.rs"]
mod hub;
#[path = "tenant_boundaries/packages.rs"]
mod packages;
#[path = "tenant_boundaries/runner.rs"]
mod runner;
#[path = "tenant_boundaries/state.rs"]
mod state;

use std::time::Duration;

use kraken_tests::operator::FixtureBed;
use kraken_tests::operator::bed::yaml_documents;
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(60);

/// The tenant of these tests.
const TENANT: &str = "mallory";

/// The API groups whose every resource (status included) the tenant may edit: Kraken's kinds.
const TENANT_GROUPS: [&str; 6] = [
    "core.kraken.dev",
    "aws.kraken.dev",
    "fixture.tf.kraken.dev",
    "data.fixture.tf.kraken.dev",
    "random.tf.kraken.dev",
    "null.tf.kraken.dev",
];

/// Gives [`TENANT`] what a namespace editor gets (Kubernetes' `edit` role, and more): the
/// editing verbs on every resource of Kraken's groups, status included, and on the Secrets,
/// ConfigMaps and Events of the bed's namespace. Not `*` verbs (they include `approve` and
/// `seed`, the reviewers' and migrators' verbs), and not every resource of the core group (a
/// Role's rule on `namespaces` reaches the namespace object itself).
fn bind_tenant(bed: &FixtureBed) -> anyhow::Result<()> {
    let verbs = json!([
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection"
    ]);
    let docs = [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "tenant", "namespace": bed.ns},
               "rules": [{"apiGroups": TENANT_GROUPS, "resources": ["*"], "verbs": verbs},
                         {"apiGroups": [""], "resources": ["secrets", "configmaps", "events"],
                          "verbs": verbs}]}),
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

/// The tenant's write of `doc`, tried until refused (a new admission policy takes a moment to
/// reach the API server; an admitted write is deleted again): the refusal's message.
fn refused_to_tenant(bed: &FixtureBed, doc: &Value, what: &str) -> anyhow::Result<String> {
    kraken_tests::wait_for(CONVERGE, &format!("{what} refused to the tenant"), || {
        match apply_as_tenant(bed, doc)? {
            Ok(()) => {
                let out = bed
                    .cp
                    .kubectl_stdin(&["delete", "-f", "-"], doc.to_string().as_bytes())?;
                anyhow::ensure!(out.status.success(), "deleting the admitted {what}");
                anyhow::bail!("{what} was admitted")
            }
            Err(message) => Ok(Some(message)),
        }
    })
}

//! A state seeded from Terraform's (`kraken convert --state --seed-state`): the pass refreshes
//! it instead of importing, and owns the Secret from then on; a look-alike Secret without the
//! seeded label stays someone else's.

use base64::Engine as _;

use super::*;
use kraken_core_kinds::state_secret as ss;

/// The state Secret `kraken convert --seed-state` writes for `a`, with `attributes`.
fn seeded(env: &Env, attributes: &Json, label: bool) {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let labels = if label {
        json!({ss::SEEDED_LABEL: "terraform"})
    } else {
        json!({})
    };
    env.api.insert(
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "thing-a.fake-tfstate", "namespace": NS, "labels": labels},
               "type": kraken_core_kinds::STATE_SECRET_TYPE,
               "data": {ss::KEY_STATE: b64(attributes.to_string().as_bytes()),
                        ss::KEY_PRIVATE: "", ss::KEY_SCHEMA_VERSION: b64(b"0"),
                        ss::KEY_CREATE_ATTEMPT: ""}}),
    );
}

/// The admission policy that authorizes seeding, bound (as the chart installs it).
fn authorize_seeding(env: &Env) {
    env.api.insert(
        "validatingadmissionpolicybindings",
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": crate::seal::SEEDING_POLICY},
               "spec": {"policyName": crate::seal::SEEDING_POLICY,
                        "validationActions": ["Deny"]}}),
    );
}

fn terraform_state() -> Json {
    json!({"id": "ext", "name": "ext", "description": "theirs", "zone": null,
           "tags": null, "password": null, "token": "t"})
}

#[tokio::test]
async fn a_seeded_state_is_refreshed_not_imported() -> anyhow::Result<()> {
    let env = Env::new();
    existing(&env, "ext");
    seeded(&env, &terraform_state(), true);
    authorize_seeding(&env);
    let spec = json!({"importId": "ext", "forProvider": {"name": "ext", "description": "theirs"}});
    env.create("a", spec);
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    assert_eq!(
        env.plugin.calls("ImportResourceState"),
        0,
        "refreshed, not imported"
    );
    assert_eq!(
        env.plugin.calls("ApplyResourceChange"),
        0,
        "nothing changes"
    );
    let secret = env
        .api
        .get("secrets", NS, "thing-a.fake-tfstate")
        .unwrap_or_default();
    let owner = &secret["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Thing", "owned from then on: {secret}");
    assert!(
        secret["data"][crate::seal::KEY_SEAL].is_string(),
        "sealed as it is adopted: {secret}"
    );
    let obj = env.object("a").unwrap_or_default();
    assert_eq!(obj["status"]["atProvider"]["id"], "ext");
    Ok(())
}

#[tokio::test]
async fn a_seeded_state_is_not_taken_where_seeding_is_not_authorized() -> anyhow::Result<()> {
    let env = Env::new();
    existing(&env, "ext");
    seeded(&env, &terraform_state(), true);
    env.create(
        "a",
        json!({"importId": "ext", "forProvider": {"name": "ext"}}),
    );
    env.pass("a").await?;
    let (status, reason) = env.condition("a", "Synced");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "SeedNotAuthorized")
    );
    assert_eq!(env.plugin.calls("ImportResourceState"), 0);
    assert_eq!(env.plugin.calls("ApplyResourceChange"), 0);
    let secret = env
        .api
        .get("secrets", NS, "thing-a.fake-tfstate")
        .unwrap_or_default();
    assert!(
        secret["metadata"]["ownerReferences"].is_null(),
        "not taken: {secret}"
    );
    Ok(())
}

#[tokio::test]
async fn a_state_secret_without_the_seeded_label_stays_refused() -> anyhow::Result<()> {
    let env = Env::new();
    existing(&env, "ext");
    seeded(&env, &terraform_state(), false);
    env.create(
        "a",
        json!({"importId": "ext", "forProvider": {"name": "ext"}}),
    );
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("NotOwned"));
    assert_eq!(env.plugin.calls("ImportResourceState"), 0);
    Ok(())
}

//! Adoption by resource identity (`spec.importIdentity`): the import names the identity, not
//! an id; an identity that does not fit the provider's identity schema is refused with the
//! reason, and nothing is created.

use super::*;

#[tokio::test]
async fn imports_by_import_identity() -> anyhow::Result<()> {
    let env = Env::new();
    existing(&env, "ext");
    let spec = json!({"importIdentity": {"id": "ext"},
                      "forProvider": {"name": "ext", "description": "theirs"}});
    env.create("a", spec);
    env.pass("a").await?;
    assert_eq!(env.plugin.creates(), 0);
    assert_eq!(env.plugin.calls("ImportResourceState"), 1);
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    let obj = env.object("a").unwrap_or_default();
    assert_eq!(obj["status"]["externalId"], "ext");
    assert_eq!(obj["metadata"]["finalizers"], json!([FINALIZER]));
    assert_eq!(env.events().await, ["Imported"]);
    Ok(())
}

#[tokio::test]
async fn an_identity_that_does_not_fit_is_refused_with_the_reason() -> anyhow::Result<()> {
    let env = Env::new();
    existing(&env, "ext");
    let spec = json!({"importIdentity": {"ident": "ext"},
                      "forProvider": {"name": "ext", "description": "theirs"}});
    env.create("a", spec);
    let _ = env.pass("a").await;
    assert_eq!(env.plugin.creates(), 0, "nothing created in its place");
    let obj = env.object("a").unwrap_or_default();
    let synced = obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Synced")
        .cloned()
        .unwrap_or_default();
    assert_eq!(synced["status"], "False");
    let message = synced["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("no attribute \"ident\"") && message.contains("it has id"),
        "{message}"
    );
    Ok(())
}

#[tokio::test]
async fn the_identity_wins_over_the_import_id() -> anyhow::Result<()> {
    let env = Env::new();
    existing(&env, "ext");
    existing(&env, "other");
    let spec = json!({"importId": "other", "importIdentity": {"id": "ext"},
                      "forProvider": {"name": "ext", "description": "theirs"}});
    env.create("a", spec);
    env.pass("a").await?;
    let obj = env.object("a").unwrap_or_default();
    assert_eq!(obj["status"]["externalId"], "ext");
    Ok(())
}

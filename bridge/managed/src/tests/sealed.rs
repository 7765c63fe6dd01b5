//! Sealed state (`seal`): a state Secret changed by anyone but Kraken is refused as
//! `StateTampered`, and nothing is applied or destroyed on its word.

use base64::Engine as _;

use super::*;
use crate::seal::KEY_SEAL;

const STATE: &str = "thing-a.fake-tfstate";

fn state_secret(env: &Env) -> Json {
    env.api.get("secrets", NS, STATE).unwrap_or_default()
}

/// Writes `data` (base64 values) into the state Secret, as a tenant with write access to the
/// namespace's Secrets can.
async fn tamper(env: &Env, data: Json) -> anyhow::Result<()> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(env.api.client(), NS);
    secrets
        .patch(
            STATE,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": data})),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_planted_deposed_object_is_refused_and_nothing_is_destroyed() -> anyhow::Result<()> {
    let env = Env::new();
    created(&env, "a", thing("a")).await?;
    assert!(
        state_secret(&env)["data"][KEY_SEAL].is_string(),
        "sealed when written"
    );
    existing(&env, "victim");
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let planted = json!({"id": "victim", "name": "victim", "description": "theirs",
                         "zone": null, "tags": null, "password": null, "token": "t"});
    let original = state_secret(&env)["data"].clone();
    tamper(&env, json!({"deposedState": b64(&planted.to_string())})).await?;

    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("StateTampered"));
    assert_eq!(
        env.plugin.deletes(),
        0,
        "nothing destroyed on a planted state"
    );
    // Deleting the object destroys nothing either while its state is not Kraken's.
    env.delete("a").await?;
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("StateTampered"));
    assert_eq!(env.plugin.deletes(), 0);
    assert!(env.object("a").is_some(), "the finalizer stays");

    // Restored as it was, the state is Kraken's again and the delete goes ahead.
    let mut restored = original;
    restored["deposedState"] = json!("");
    tamper(&env, restored).await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.deletes(), 1, "only a itself");
    assert!(env.object("a").is_none());
    Ok(())
}

#[tokio::test]
async fn an_edited_or_unsealed_state_is_refused() -> anyhow::Result<()> {
    let env = Env::new();
    created(&env, "a", thing("a")).await?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let other = json!({"id": "victim", "name": "victim", "description": "theirs",
                       "zone": "z1", "tags": null, "password": null, "token": "t"});
    tamper(&env, json!({"state": b64(&other.to_string())})).await?;
    env.edit("a", json!({"forProvider": {"name": "a", "zone": "z2"}}))
        .await?;
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("StateTampered"));
    assert_eq!(
        env.plugin.calls("ApplyResourceChange"),
        1,
        "only the create"
    );
    tamper(&env, json!({KEY_SEAL: null})).await?;
    let err = env.attempt("a").await?.err().map(|e| e.to_string());
    assert!(
        err.as_deref().is_some_and(|e| e.contains("it has no seal")
            && e.contains("was changed by someone other than Kraken")),
        "{err:?}"
    );
    Ok(())
}

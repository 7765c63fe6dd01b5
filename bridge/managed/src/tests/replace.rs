//! `replacePolicy: CreateBeforeDestroy`: the new object first, the old one (deposed) destroyed
//! once the new one exists, and neither a crash nor a failed destroy in between loses or
//! duplicates one.

use super::*;
use crate::state::Stored;

/// `name` with a change (zone) that forces a replacement, replaced create-first.
fn moved() -> Json {
    json!({"forProvider": {"zone": "z2"}, "replacePolicy": "CreateBeforeDestroy"})
}

/// The id of the deposed object the state Secret of `name` keeps, if any.
fn deposed(env: &Env, name: &str) -> anyhow::Result<Option<String>> {
    let secret = env
        .api
        .get("secrets", NS, &format!("thing-{name}.fake-tfstate"))
        .unwrap_or_default();
    let stored = Stored::from_secret(&serde_json::from_value(secret)?)?;
    Ok(stored.deposed.map(|d| d.id().unwrap_or_default()))
}

fn ids(env: &Env) -> Vec<String> {
    env.plugin.objects().keys().cloned().collect()
}

/// An environment whose objects get ids of their own, with `a` created as `a-1`.
async fn with_a() -> anyhow::Result<Env> {
    let env = Env::new();
    env.plugin.fresh_ids();
    created(&env, "a", thing("a")).await?;
    assert_eq!(ids(&env), ["a-1"]);
    Ok(env)
}

#[tokio::test]
async fn creates_the_replacement_then_destroys_the_old_object() -> anyhow::Result<()> {
    let env = with_a().await?;
    env.edit("a", moved()).await?;
    env.pass("a").await?;
    assert_eq!(ids(&env), ["a-2"]);
    assert_eq!((env.plugin.creates(), env.plugin.deletes()), (2, 1));
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    let obj = env.object("a").unwrap_or_default();
    assert_eq!(obj["status"]["atProvider"]["id"], "a-2");
    assert_eq!(obj["status"]["atProvider"]["zone"], "z2");
    assert_eq!(
        deposed(&env, "a")?,
        None,
        "the old object's entry is dropped"
    );
    let events = env.events().await;
    assert_eq!(events, ["Created", "Replaced", "DeposedDestroyed"]);
    // Settled: nothing more to do.
    env.pass("a").await?;
    assert_eq!(env.plugin.calls("ApplyResourceChange"), 3);
    Ok(())
}

/// The provider crashes right after making the new object: both exist (the old one was not
/// destroyed first), the old one is kept as deposed, and the next pass finds the new one —
/// never the old one, which has the same name and owner tag — then destroys the old one.
#[tokio::test]
async fn a_crash_creating_the_replacement_neither_loses_nor_duplicates() -> anyhow::Result<()> {
    let env = with_a().await?;
    env.plugin.crash_next_create();
    env.edit("a", moved()).await?;
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("ProviderUnavailable"));
    assert_eq!(ids(&env), ["a-1", "a-2"], "created before destroying");
    assert_eq!(deposed(&env, "a")?.as_deref(), Some("a-1"));

    env.pass("a").await?;
    assert_eq!(ids(&env), ["a-2"]);
    assert_eq!((env.plugin.creates(), env.plugin.deletes()), (2, 1));
    let obj = env.object("a").unwrap_or_default();
    assert_eq!(obj["status"]["atProvider"]["id"], "a-2");
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    assert_eq!(deposed(&env, "a")?, None);
    let events = env.events().await;
    assert!(events.contains(&"Recovered".to_owned()), "{events:?}");
    assert_eq!(events.last().map(String::as_str), Some("DeposedDestroyed"));
    Ok(())
}

#[tokio::test]
async fn a_failed_destroy_of_the_old_object_is_retried() -> anyhow::Result<()> {
    let env = with_a().await?;
    env.plugin.delete_diagnostics(true);
    env.edit("a", moved()).await?;
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Synced"), no("ProviderError"));
    assert_eq!(ids(&env), ["a-1", "a-2"]);
    assert_eq!(deposed(&env, "a")?.as_deref(), Some("a-1"));
    let obj = env.object("a").unwrap_or_default();
    assert_eq!(obj["status"]["atProvider"]["id"], "a-2");

    env.plugin.delete_diagnostics(false);
    env.pass("a").await?;
    assert_eq!(ids(&env), ["a-2"]);
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    assert_eq!(deposed(&env, "a")?, None);
    assert_eq!(env.plugin.creates(), 2, "the retry creates nothing");
    Ok(())
}

#[tokio::test]
async fn deleting_destroys_a_deposed_object_too() -> anyhow::Result<()> {
    let env = with_a().await?;
    env.plugin.delete_diagnostics(true);
    env.edit("a", moved()).await?;
    env.pass("a").await?;
    assert_eq!(ids(&env), ["a-1", "a-2"]);

    env.plugin.delete_diagnostics(false);
    env.delete("a").await?;
    env.pass("a").await?;
    assert!(ids(&env).is_empty(), "{:?}", ids(&env));
    assert!(env.object("a").is_none(), "the finalizer is released");
    assert!(env.api.get("secrets", NS, "thing-a.fake-tfstate").is_none());
    Ok(())
}

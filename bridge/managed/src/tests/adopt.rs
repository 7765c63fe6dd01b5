//! Adoption needs consent ([`crate::consent`]): the owner's tag on the object, or the
//! administrators' allow-list on the Namespace; a refused adoption stores nothing, so deleting
//! the resource destroys nothing.

use super::*;

/// An existing object `id` whose `tags` are `tags`.
fn tagged(env: &Env, id: &str, tags: &[(&str, &str)]) {
    let tags = tags
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::string(*v)))
        .collect();
    let object = Value::Object(
        [
            ("name", Value::string(id)),
            ("description", Value::string("theirs")),
            ("zone", Value::Null),
            ("tags", Value::Map(tags)),
            ("password", Value::Null),
            ("id", Value::string(id)),
            ("token", Value::string("t")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
    );
    env.plugin.put(id, Some(object));
}

/// The message of `name`'s Synced condition.
fn synced_message(env: &Env, name: &str) -> String {
    let obj = env.object(name).unwrap_or_default();
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Synced")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// An environment whose namespace allows no untagged adoption.
fn strict() -> Env {
    let env = Env::new();
    env.k.ctx.floors.set_adoptable(NS, "");
    env
}

#[tokio::test]
async fn an_untagged_object_is_not_adopted_and_deleting_destroys_nothing() -> anyhow::Result<()> {
    let env = strict();
    tagged(&env, "theirs", &[("team", "other")]);
    env.create(
        "a",
        json!({"importId": "theirs", "forProvider": {"name": "theirs"}}),
    );
    assert!(env.attempt("a").await?.is_err(), "the pass stops");
    assert_eq!(env.condition("a", "Synced"), no("AdoptionRefused"));
    let message = synced_message(&env, "a");
    assert!(
        message.contains("kraken.dev/adoptable-by=ns/a"),
        "{message}"
    );
    assert!(
        env.api.get("secrets", NS, "thing-a.fake-tfstate").is_none(),
        "no state"
    );
    // No finalizer was put on: the delete completes at once.
    env.delete("a").await?;
    assert!(env.object("a").is_none(), "released");
    assert_eq!(env.plugin.deletes(), 0, "nothing destroyed");
    assert!(env.plugin.objects().contains_key("theirs"));
    Ok(())
}

#[tokio::test]
async fn the_owners_tag_or_the_namespaces_allow_list_lets_it_adopt() -> anyhow::Result<()> {
    let env = strict();
    tagged(&env, "given", &[(kraken_core_kinds::ADOPT_TAG, "ns/a")]);
    tagged(
        &env,
        "other",
        &[(kraken_core_kinds::ADOPT_TAG, "ns/someone-else")],
    );
    env.create(
        "a",
        json!({"importId": "given", "forProvider": {"name": "given"}}),
    );
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    env.create(
        "b",
        json!({"importId": "other", "forProvider": {"name": "other"}}),
    );
    assert!(env.attempt("b").await?.is_err());
    assert_eq!(env.condition("b", "Synced").1, "AdoptionRefused");
    // The administrators allow the type in the namespace.
    env.k.ctx.floors.set_adoptable(NS, "fake_*");
    env.pass("b").await?;
    assert_eq!(env.condition("b", "Ready"), yes("Available"));
    assert_eq!(env.plugin.creates(), 0);
    Ok(())
}

#[tokio::test]
async fn a_planted_create_fence_does_not_take_an_object_by_its_name() -> anyhow::Result<()> {
    let env = strict();
    // Ids apart from names, as a cloud's: a second object of a name is a second object.
    env.plugin.fresh_ids();
    tagged(&env, "victim", &[]);
    // The tenant writes a fence by hand, as if a create had been interrupted.
    let r = &env.k.kind.resource;
    env.api.insert(
        &r.plural,
        json!({"apiVersion": r.api_version, "kind": r.kind,
               "metadata": {"name": "a", "namespace": NS,
                            "annotations": {CREATE_ATTEMPT_ANNOTATION: "2026-01-01T00:00:00Z"}},
               "spec": {"forProvider": {"name": "victim"}}}),
    );
    // Only the owner tag may show what the "interrupted" create made: it finds nothing
    // carrying this object's uid, so the object of that name is not taken.
    env.pass("a").await?;
    let obj = env.object("a").unwrap_or_default();
    assert_ne!(obj["status"]["externalId"], "victim", "{obj}");
    env.delete("a").await?;
    env.pass("a").await?;
    assert_eq!(env.plugin.deletes(), 1, "its own object");
    assert!(env.plugin.objects().contains_key("victim"), "not destroyed");
    Ok(())
}

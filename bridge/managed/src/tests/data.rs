//! Data source kinds over the fakes: read, shown and published, read again on their interval,
//! never written outside; deleting one only releases what the hub holds.

use super::*;

fn data_kind() -> KindInfo {
    let gvk = GroupVersionKind::gvk("data.fake.tf.kraken.dev", "v1alpha1", "DataThing");
    KindInfo {
        resource: ApiResource::from_gvk_with_plural(&gvk, "datathings"),
        provider: "kraken.dev/fake".into(),
        type_name: TYPE.into(),
        data_source: true,
    }
}

/// Calls that would change something outside.
fn writes_outside(env: &Env) -> usize {
    [
        "PlanResourceChange",
        "ApplyResourceChange",
        "ImportResourceState",
    ]
    .iter()
    .map(|rpc| env.plugin.calls(rpc))
    .sum()
}

#[tokio::test]
async fn a_data_source_reads_shows_and_reads_again_on_its_interval() -> anyhow::Result<()> {
    let env = Env::of(data_kind());
    existing(&env, "ext");
    env.create(
        "d",
        json!({"forProvider": {"name": "ext"}, "refreshInterval": "1m"}),
    );
    let action = format!("{:?}", env.pass("d").await?);
    let secs: f64 = action
        .split("Some(")
        .nth(1)
        .and_then(|r| r.split('s').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_default();
    assert!(
        (45.0..=75.0).contains(&secs),
        "read again in about a minute: {action}"
    );
    let obj = env.object("d").unwrap_or_default();
    assert_eq!(obj["status"]["atProvider"]["description"], "theirs");
    assert_eq!(obj["status"]["externalId"], "ext");
    assert!(
        obj["status"]["atProvider"].get("token").is_none(),
        "a sensitive attribute stays out of status"
    );
    assert!(obj["metadata"].get("finalizers").is_none(), "no finalizer");
    assert!(env.api.list("secrets").is_empty(), "no state Secret");
    assert_eq!(env.condition("d", "Ready"), yes("Available"));
    assert_eq!(env.plugin.calls("ReadDataSource"), 1);

    // Changed outside: the next read shows it; a read that changes nothing writes nothing.
    let mut changed = env.plugin.objects()["ext"].clone();
    if let Value::Object(m) = &mut changed {
        m.insert("description".into(), Value::string("moved"));
    }
    env.plugin.put("ext", Some(changed));
    env.pass("d").await?;
    let obj = env.object("d").unwrap_or_default();
    assert_eq!(obj["status"]["atProvider"]["description"], "moved");
    let before = env.writes();
    env.pass("d").await?;
    assert_eq!(env.writes(), before, "an unchanged read costs no write");
    assert_eq!(writes_outside(&env), 0);
    assert_eq!(env.plugin.objects().len(), 1);
    assert!(env.events().await.is_empty(), "{:?}", env.events().await);
    Ok(())
}

#[tokio::test]
async fn a_failed_read_says_why_and_retries() -> anyhow::Result<()> {
    let env = Env::of(data_kind());
    env.create("d", json!({"forProvider": {"name": "missing"}}));
    let action = env.pass("d").await?;
    assert_eq!(env.condition("d", "Synced"), no("ProviderError"));
    let message = super::plans::synced_message(&env, "d");
    assert!(message.contains("no object has this name"), "{message}");
    assert!(message.contains("spec.forProvider.name"), "{message}");
    assert_ne!(
        action,
        Action::await_change(),
        "retried: the object may appear"
    );
    existing(&env, "missing");
    env.pass("d").await?;
    assert_eq!(env.condition("d", "Ready"), yes("Available"));
    assert_eq!(writes_outside(&env), 0);
    Ok(())
}

/// Published like a resource, and deleted without destroying anything (with a finalizer only
/// while it reads other objects through `valuesFrom`).
#[tokio::test]
async fn a_data_source_publishes_and_is_deleted_without_writing_outside() -> anyhow::Result<()> {
    let env = Env::of(data_kind());
    existing(&env, "ext");
    env.create("d", json!({"forProvider": {"name": "ext"}}));
    env.things()
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                kraken_hub::producer::PUBLISH_ANNOTATION: "true"}}})),
        )
        .await?;
    env.pass("d").await?;
    let declarations = env.api.list("statedeclarations");
    assert_eq!(declarations.len(), 1, "{declarations:?}");
    assert_eq!(declarations[0]["spec"]["outputs"]["description"], "theirs");
    let obj = env.object("d").unwrap_or_default();
    assert_eq!(obj["metadata"]["finalizers"], json!([FINALIZER]));
    env.delete("d").await?;
    env.pass("d").await?;
    assert!(env.object("d").is_none(), "the finalizer is released");
    assert!(env.api.list("statedeclarations").is_empty(), "retired");
    assert_eq!(
        env.plugin.objects().len(),
        1,
        "the object read is untouched"
    );
    assert_eq!(writes_outside(&env), 0);
    Ok(())
}

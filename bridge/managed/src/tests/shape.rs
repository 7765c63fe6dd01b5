//! The managed-resource controller in the shape every controller has: its passes go through
//! the kit's runner (`kraken_kit::reconciler`), so each is counted under its kind, a failure
//! under its reason, and the requeue is the one error policy's.

use super::*;

/// The sample of `metric` for this kind (and `reason`, when given), from the metrics text.
fn metric(env: &Env, metric: &str, reason: Option<&str>) -> Option<f64> {
    let labels = match reason {
        Some(r) => format!("{{kind=\"{}\",reason=\"{r}\"}}", env.k.label),
        None => format!("{{kind=\"{}\"}}", env.k.label),
    };
    let series = format!("{metric}{labels} ");
    env.k
        .ctx
        .metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
}

fn uid(env: &Env, name: &str) -> String {
    env.object(name).unwrap_or_default()["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_provider_error_backs_off_and_the_next_success_resets_it() -> anyhow::Result<()> {
    let env = Env::new();
    env.plugin.plan_diagnostics(true);
    env.create("a", thing("a"));
    let action = env.pass("a").await?;
    assert_ne!(
        action,
        Action::await_change(),
        "a provider error is retried"
    );
    let a = uid(&env, "a");
    assert_eq!(env.k.ctx.backoff.failures(&a), 1);
    env.pass("a").await?;
    assert_eq!(env.k.ctx.backoff.failures(&a), 2, "backing off further");
    assert_eq!(
        metric(
            &env,
            "kraken_reconcile_failures_total",
            Some("ProviderError")
        ),
        Some(2.0)
    );
    assert_eq!(env.condition("a", "Synced"), no("ProviderError"));

    env.plugin.plan_diagnostics(false);
    env.pass("a").await?;
    assert_eq!(env.condition("a", "Ready"), yes("Available"));
    assert_eq!(
        env.k.ctx.backoff.failures(&a),
        0,
        "success resets the backoff"
    );
    assert_eq!(metric(&env, "kraken_reconcile_runs_total", None), Some(3.0));
    assert_eq!(
        metric(&env, "kraken_reconcile_duration_seconds_count", None),
        Some(3.0)
    );
    Ok(())
}

#[tokio::test]
async fn an_invalid_spec_waits_for_a_change() -> anyhow::Result<()> {
    let env = Env::new();
    env.create(
        "b",
        json!({"forProvider": {"name": ["not", "a", "string"]}}),
    );
    let action = env.pass("b").await?;
    assert_eq!(action, Action::await_change(), "only its author can fix it");
    assert_eq!(env.condition("b", "Synced"), no("InvalidSpec"));
    assert_eq!(env.k.ctx.backoff.failures(&uid(&env, "b")), 0);
    assert_eq!(
        metric(&env, "kraken_reconcile_failures_total", Some("InvalidSpec")),
        Some(1.0)
    );
    assert_eq!(env.plugin.calls("PlanResourceChange"), 0);
    Ok(())
}

/// The API server failing the read of the object: nothing to report on it, retried.
#[tokio::test]
async fn an_api_failure_is_not_reported_on_the_object_and_is_retried() -> anyhow::Result<()> {
    let env = Env::new();
    env.create("c", thing("c"));
    env.api.fail_next("GET", "/things/c", 503);
    let writes = env.writes();
    let action = env.pass("c").await?;
    assert_ne!(action, Action::await_change());
    assert_eq!(env.writes(), writes, "nothing written");
    assert_eq!(env.k.ctx.backoff.failures(&uid(&env, "c")), 1);
    assert_eq!(
        metric(&env, "kraken_reconcile_failures_total", Some("ApiError")),
        Some(1.0)
    );
    Ok(())
}

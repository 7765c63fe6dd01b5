//! `kubectl kraken approve KIND/NAME`: approve a plan as yourself, then wait for the outcome.
//!
//! The approval is one merge patch of two annotations: the plan id
//! ([`APPROVE_PLAN_ANNOTATION`]) and the approver's name ([`APPROVED_BY_ANNOTATION`]) as the API
//! server authenticates the caller (a SelfSubjectReview), so an admission policy can require
//! that the two came together from that very user. The operator decides: it applies the change
//! only when its fresh plan has the approved id, and otherwise reports the approval stale.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::time::Duration;

use anyhow::Context as _;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value as Json, json};

use super::connect::{self, Global};
use super::render::condition;
use super::show_plan::{no_plan, plans_of, status_of, text};
use super::target::{Target, TargetArg};
use crate::kit::conditions::{READY, SYNCED};
use crate::managed::plan_status::{self, PendingPlan};
use crate::managed::{APPROVE_PLAN_ANNOTATION, APPROVED_BY_ANNOTATION};

pub(super) const ABOUT: &str = "Approve an object's pending plan, as yourself, and wait.

Without --id it approves the plan pending now (status.plan.id): it prints the plan first and, on a
terminal, asks before approving (--yes does not ask; without a terminal --yes or --id is
required). With --id it approves exactly that id, whatever is pending: the id `show-plan -o json`
printed earlier, so that nothing else is approved if the plan moved in the meantime.

The approval writes, in one patch, the annotations kraken.dev/approve-plan=<id> and
kraken.dev/approved-by=<you> (your user name as the API server knows you: `kubectl auth whoami`).
Then it waits (unless --wait=false) until the operator has applied the plan
(status.lastAppliedPlan.id is the id), or exits non-zero when the operator finds the approval
stale: something moved since the plan was made (the spec, the inputs, the external object, the
provider, the ProviderConfig) and a new plan waits.

Examples:

    kubectl kraken approve objects.fixture.tf.kraken.dev/web -n team-a
    kubectl kraken approve pets/my-pet --yes --timeout 10m
    id=$(kubectl kraken show-plan pets/my-pet -o json | jq -r .id)
    kubectl kraken approve pets/my-pet --id \"$id\" --wait=false";

#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    #[command(flatten)]
    pub target: TargetArg,
    /// Approve exactly this plan id, without asking (default: the plan pending now).
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// Approve the plan pending now without asking for confirmation.
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Wait until the plan is applied or the approval is found stale.
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub wait: bool,
    /// How long to wait (Go duration: 30s, 5m, 1h).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_timeout)]
    pub timeout: Duration,
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    crate::kit::time::parse_duration(s)
        .ok_or_else(|| format!("{s:?} is not a duration (write 30s, 5m or 1h)"))
}

pub(super) async fn run(global: &Global, args: ApproveArgs) -> anyhow::Result<()> {
    let session = connect::connect(global).await?;
    let target = Target::locate(&session, &args.target).await?;
    let obj = target.fetch().await?;
    let status = status_of(&obj);
    let plans = plans_of(&target, &status)?;
    let id = match &args.id {
        Some(id) => {
            if plans.last_applied.as_ref().is_some_and(|a| &a.id == id) {
                println!("plan {id} of {} is already applied", target.describe());
                return Ok(());
            }
            let policy = obj.data.pointer("/spec/planPolicy").and_then(Json::as_str);
            if plans.pending.is_none() && policy.is_none_or(|p| p == "Auto") {
                anyhow::bail!(
                    "{} holds no plans (spec.planPolicy is Auto or unset): every change is \
                     applied without approval, so there is nothing to approve",
                    target.describe()
                );
            }
            if let Some(p) = plans.pending.as_ref().filter(|p| &p.id != id) {
                eprintln!(
                    "warning: plan {id} is not the plan pending ({}, {}); the operator applies it \
                     only if its next plan has this id",
                    p.id, p.action
                );
            }
            id.clone()
        }
        None => {
            let Some(plan) = &plans.pending else {
                anyhow::bail!("{}: nothing to approve", no_plan(&target, &status, &plans));
            };
            print!("{}", text(&target, &status, &plans, false));
            confirm(&target, plan, args.yes)?;
            plan.id.clone()
        }
    };
    let user = connect::whoami(&session.client).await?;
    let patch = json!({"metadata": {"annotations": {
        APPROVE_PLAN_ANNOTATION: id,
        APPROVED_BY_ANNOTATION: user,
    }}});
    let params = PatchParams {
        field_manager: Some(super::PLUGIN_NAME.to_owned()),
        ..PatchParams::default()
    };
    target
        .api
        .patch(&target.name, &params, &Patch::Merge(&patch))
        .await
        .with_context(|| format!("failed to approve plan {id} of {}", target.describe()))?;
    println!("approved plan {id} of {} as {user}", target.describe());
    if args.wait {
        wait(&target, &id, args.timeout).await?;
    }
    Ok(())
}

/// Asks on the terminal unless `yes`; refuses to guess without one.
fn confirm(target: &Target, plan: &PendingPlan, yes: bool) -> anyhow::Result<()> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "not approving without confirmation: standard input is not a terminal; pass --yes to \
             approve plan {} as shown, or --id {}",
            plan.id,
            plan.id
        );
    }
    print!(
        "Approve plan {} ({}) of {}? [y/N] ",
        plan.id,
        plan.action,
        target.describe()
    );
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES") {
        Ok(())
    } else {
        anyhow::bail!("not approved: nothing was written")
    }
}

/// What the operator made of an approval.
enum Outcome {
    Applied,
    Stale(String),
    Gone,
}

fn outcome(obj: Option<&DynamicObject>, id: &str) -> Option<Outcome> {
    let Some(obj) = obj else {
        return Some(Outcome::Gone);
    };
    let plans = plan_status::read(&status_of(obj)).ok()?;
    if plans.last_applied.as_ref().is_some_and(|a| a.id == id) {
        return Some(Outcome::Applied);
    }
    let pending = plans.pending?;
    let stale = pending.stale_approval.filter(|s| s.id == id)?;
    Some(Outcome::Stale(format!(
        "the approval of plan {id} is stale: {}; plan {} ({}) waits for approval now",
        stale.why, pending.id, pending.action
    )))
}

/// Watches the object until the operator applied plan `id` or found its approval stale.
async fn wait(target: &Target, id: &str, timeout: Duration) -> anyhow::Result<()> {
    let decided = kube::runtime::wait::await_condition(
        target.api.clone(),
        &target.name,
        |obj: Option<&DynamicObject>| outcome(obj, id).is_some(),
    );
    let obj = match tokio::time::timeout(timeout, decided).await {
        Ok(result) => result.with_context(|| format!("failed to watch {}", target.describe()))?,
        Err(_) => {
            let synced = target
                .fetch()
                .await
                .ok()
                .and_then(|o| condition(&status_of(&o), SYNCED))
                .map(|c| format!("; Synced: {c}"))
                .unwrap_or_default();
            anyhow::bail!(
                "plan {id} of {} was not applied within {timeout:?}{synced} (is the operator \
                 running? `kubectl kraken show-plan {}` shows what waits)",
                target.describe(),
                target.command_args()
            );
        }
    };
    match outcome(obj.as_ref(), id) {
        Some(Outcome::Applied) => {
            let ready = obj
                .as_ref()
                .and_then(|o| condition(&status_of(o), READY))
                .map(|c| format!("; Ready: {c}"))
                .unwrap_or_default();
            println!("plan {id} applied{ready}");
            Ok(())
        }
        Some(Outcome::Stale(why)) => anyhow::bail!(
            "{why} (`kubectl kraken show-plan {}` shows it)",
            target.command_args()
        ),
        Some(Outcome::Gone) | None => {
            anyhow::bail!(
                "{} was deleted before plan {id} was applied",
                target.describe()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(status: Json) -> Result<DynamicObject, serde_json::Error> {
        serde_json::from_value(json!({
            "apiVersion": "fixture.tf.kraken.dev/v1alpha1", "kind": "Object",
            "metadata": {"name": "web"}, "status": status,
        }))
    }

    /// The wait ends when the approved id is applied or found stale, not on other news.
    #[test]
    fn the_wait_ends_on_this_ids_outcome_only() -> Result<(), serde_json::Error> {
        let applied = object(json!({"lastAppliedPlan": {"id": "a1", "action": "Create"}}))?;
        assert!(matches!(
            outcome(Some(&applied), "a1"),
            Some(Outcome::Applied)
        ));
        assert!(outcome(Some(&applied), "b2").is_none());
        let stale = object(json!({"plan": {"id": "c3", "action": "Update",
            "staleApproval": {"id": "b2", "why": "the spec changed"}}}))?;
        let Some(Outcome::Stale(why)) = outcome(Some(&stale), "b2") else {
            panic!("b2 is stale");
        };
        assert_eq!(
            why,
            "the approval of plan b2 is stale: the spec changed; plan c3 (Update) waits for \
             approval now"
        );
        assert!(
            outcome(Some(&stale), "c3").is_none(),
            "c3 waits for the operator"
        );
        assert!(outcome(Some(&object(Json::Null)?), "c3").is_none());
        assert!(matches!(outcome(None, "c3"), Some(Outcome::Gone)));
        Ok(())
    }
}

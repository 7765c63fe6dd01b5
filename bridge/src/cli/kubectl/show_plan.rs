//! `kubectl kraken show-plan KIND/NAME`: the plan an object holds for approval.

use kube::api::DynamicObject;
use serde_json::Value as Json;

use super::connect::{self, Global};
use super::render::{self, condition};
use super::target::{Target, TargetArg};
use crate::kit::conditions::SYNCED;
use crate::managed::plan_status::{self, PlanStatus};

pub(super) const ABOUT: &str = "Print the plan an object holds for approval (status.plan).

Under spec.planPolicy Manual (or ManualForDestructive), the operator plans a change and holds it
until someone approves the plan's id. This prints that plan: its id and action (Create, Update,
Replace), each attribute that changes with its value before → after (`+` set, `~` changed,
`-/+` forces a replacement; `(known after apply)` and `(sensitive)` as the operator shows them),
an approval that went stale and why, and the Synced condition. Values are shown whole in
status.plan (up to 64 KiB each; at most 256 changes and 512 KiB of values, the rest counted);
the text view cuts those over 200 characters, saying so, unless --full.

With no plan pending it says so on stderr and exits non-zero (the object's Synced condition and
the last plan applied say what happened instead).

Examples:

    kubectl kraken show-plan objects.fixture.tf.kraken.dev/web -n team-a
    kubectl kraken show-plan pet my-pet
    kubectl kraken show-plan pets/my-pet -o json | jq -r .id";

#[derive(Debug, clap::Args)]
pub struct ShowPlanArgs {
    #[command(flatten)]
    pub target: TargetArg,
    /// Output format: text for people, json for machines (status.plan as it is).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Show every value whole (the text view cuts values over 200 characters for the terminal).
    #[arg(long)]
    pub full: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

pub(super) async fn run(global: &Global, args: ShowPlanArgs) -> anyhow::Result<()> {
    let session = connect::connect(global).await?;
    let target = Target::locate(&session, &args.target).await?;
    let obj = target.fetch().await?;
    let status = status_of(&obj);
    let plans = plans_of(&target, &status)?;
    if plans.pending.is_none() {
        anyhow::bail!("{}", no_plan(&target, &status, &plans));
    }
    match args.output {
        Output::Json => println!("{:#}", status.get("plan").unwrap_or(&Json::Null)),
        Output::Text => {
            print!("{}", text(&target, &status, &plans, args.full));
            if let Some(plan) = &plans.pending {
                let args = target.command_args();
                println!("approve it: kubectl kraken approve {args} --id {}", plan.id);
            }
        }
    }
    Ok(())
}

/// The object's status, `Null` when it has none yet.
pub(super) fn status_of(obj: &DynamicObject) -> Json {
    obj.data.get("status").cloned().unwrap_or(Json::Null)
}

/// The plan fields of the status, or an error naming the object.
pub(super) fn plans_of(target: &Target, status: &Json) -> anyhow::Result<PlanStatus> {
    plan_status::read(status).map_err(|e| {
        anyhow::Error::new(e).context(format!("cannot read the plan of {}", target.describe()))
    })
}

/// The object, its plan and its Synced condition, for a person.
pub(super) fn text(target: &Target, status: &Json, plans: &PlanStatus, full: bool) -> String {
    let mut out = format!("{}\n", target.describe());
    if let Some(plan) = &plans.pending {
        out.push_str(&render::plan_text(plan, full));
    }
    if let Some(synced) = condition(status, SYNCED) {
        out.push_str(&format!("Synced: {synced}\n"));
    }
    out
}

/// Why there is nothing to show: the object's Synced condition and the plan applied last.
pub(super) fn no_plan(target: &Target, status: &Json, plans: &PlanStatus) -> String {
    let mut msg = format!("no plan is pending for {}", target.describe());
    if let Some(synced) = condition(status, SYNCED) {
        msg.push_str(&format!("; Synced: {synced}"));
    }
    if let Some(applied) = &plans.last_applied {
        msg.push_str(&format!(
            "; the last plan applied was {} ({})",
            applied.id, applied.action
        ));
    }
    msg
}

//! `kubectl kraken`: the kubectl plugin for people who review and approve plans.
//!
//! One binary, two names: invoked as `kubectl-kraken` (a symlink or copy of `kraken` on PATH,
//! which is how kubectl finds plugins) the process parses [`PluginCli`]; as `kraken` the same
//! commands are `kraken kubectl <subcommand>`. Both hold [`KubectlArgs`], so a subcommand is
//! written once. `plan` is `kraken plan` with the plugin's connection flags.
//!
//! Each subcommand is a file: [`show_plan`], [`approve`], [`get`]. Below them: [`connect`]
//! (kubeconfig, context, namespace, who the caller is), [`discover`] (which kinds are Kraken's,
//! and what `KIND` in `KIND/NAME` names) and [`target`] (the object a command acts on).

mod approve;
mod connect;
mod discover;
mod get;
mod render;
mod show_plan;
mod target;

use clap::{Args, Parser, Subcommand};

/// The file name kubectl looks for on PATH for `kubectl kraken`.
pub const PLUGIN_NAME: &str = "kubectl-kraken";

pub(super) const KUBECTL_ABOUT: &str =
    "Plan, show, approve and list Kraken's plans, as kubectl does.

The same commands kubectl runs as a plugin (`kubectl kraken ...`) when `kraken` is on PATH
under the name kubectl-kraken:

    ln -s \"$(command -v kraken)\" ~/.local/bin/kubectl-kraken
    kubectl plugin list    # lists ~/.local/bin/kubectl-kraken

Examples:

    kubectl kraken plan -f manifests/ -n team-a
    kubectl kraken get -n team-a
    kubectl kraken show-plan objects.fixture.tf.kraken.dev/web -n team-a
    kubectl kraken approve objects.fixture.tf.kraken.dev/web -n team-a";

/// The plugin's commands and the flags every one of them honours.
#[derive(Debug, Args)]
pub struct KubectlArgs {
    #[command(flatten)]
    pub global: connect::Global,
    #[command(subcommand)]
    pub command: KubectlCommand,
}

#[derive(Debug, Subcommand)]
pub enum KubectlCommand {
    /// Print the plan an object holds for approval (status.plan).
    #[command(long_about = show_plan::ABOUT)]
    ShowPlan(show_plan::ShowPlanArgs),
    /// Approve an object's pending plan, as yourself, and wait until it is applied.
    #[command(long_about = approve::ABOUT)]
    Approve(approve::ApproveArgs),
    /// List every Kraken object with its readiness and pending plan.
    #[command(long_about = get::ABOUT)]
    Get(get::GetArgs),
    /// Show what applying manifests would do (like terraform plan), applying nothing.
    #[command(long_about = super::plan::PLAN_ABOUT)]
    Plan(super::plan::PlanOptions),
}

/// The command line of `kubectl-kraken`, as kubectl runs it: `kubectl kraken <subcommand>`.
#[derive(Debug, Parser)]
#[command(
    name = PLUGIN_NAME,
    bin_name = "kubectl kraken",
    version,
    about = "Show, approve and list Kraken's plans (a kubectl plugin)",
    long_about = KUBECTL_ABOUT
)]
pub struct PluginCli {
    /// More log output on stderr (-v: info, -vv: debug, -vvv: trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(flatten)]
    pub args: KubectlArgs,
}

/// Whether this process was started under the plugin's name (argv[0], a path or a bare name;
/// `.exe` allowed).
pub fn invoked_as_plugin(argv0: Option<&std::ffi::OsStr>) -> bool {
    argv0
        .map(std::path::Path::new)
        .and_then(std::path::Path::file_stem)
        .is_some_and(|name| name == PLUGIN_NAME)
}

pub(super) async fn run(args: KubectlArgs) -> anyhow::Result<std::process::ExitCode> {
    let global = args.global;
    let done = match args.command {
        KubectlCommand::ShowPlan(a) => show_plan::run(&global, a).await,
        KubectlCommand::Approve(a) => approve::run(&global, a).await,
        KubectlCommand::Get(a) => get::run(&global, a).await,
        KubectlCommand::Plan(a) => {
            let session = connect::connect(&global).await?;
            // The plugin's -n is the session's namespace already (flag, else the context's).
            let conn = (session.client, session.namespace);
            return super::plan::plan(conn, None, a).await;
        }
    };
    done.map(|()| std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn plugin_cli_definition_is_consistent() {
        PluginCli::command().debug_assert();
    }

    #[test]
    fn the_plugin_name_is_recognised_in_argv0() {
        let is = |s: &str| invoked_as_plugin(Some(std::ffi::OsStr::new(s)));
        assert!(is("kubectl-kraken"));
        assert!(is("/home/me/.local/bin/kubectl-kraken"));
        assert!(is("kubectl-kraken.exe"));
        assert!(!is("/usr/bin/kraken"));
        assert!(!is("kubectl-kraken-dev"));
        assert!(!invoked_as_plugin(None));
    }

    #[test]
    fn global_flags_go_before_or_after_the_subcommand() -> Result<(), clap::Error> {
        let cli = PluginCli::try_parse_from([
            "kubectl-kraken",
            "--context",
            "c2",
            "approve",
            "pets/a",
            "-n",
            "ns",
            "--wait=false",
            "--id",
            "abc",
        ])?;
        assert_eq!(cli.args.global.context.as_deref(), Some("c2"));
        assert_eq!(cli.args.global.namespace.as_deref(), Some("ns"));
        let KubectlCommand::Approve(a) = cli.args.command else {
            panic!("not approve");
        };
        assert!(!a.wait);
        assert_eq!(a.id.as_deref(), Some("abc"));
        let cli = PluginCli::try_parse_from(["kubectl-kraken", "approve", "pets/a", "--wait"])?;
        let KubectlCommand::Approve(a) = cli.args.command else {
            panic!("not approve");
        };
        assert!(a.wait && a.target.name.is_none());
        Ok(())
    }
}

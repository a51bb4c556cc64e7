//! One module per subcommand; `run` dispatches.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::{Cli, Command, ProfileCommand, UpArgs};
use crate::run_options::RunOptions;

pub mod attach;
pub mod clean;
pub mod completions;
pub mod db;
pub mod events;
pub mod gc;
pub mod init;
pub mod install;
pub mod link_watch;
pub mod logs;
pub mod ls;
pub mod mcp;
pub mod profile;
pub mod reload_profile;
pub mod restart;
pub mod run;
pub mod start;
pub mod status;
pub mod stop;
pub mod up;
pub mod wait;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> miette::Result<ExitCode> {
    match cli.command {
        Some(Command::Up(args)) => up_or_detach(&args),
        None => up_or_detach(&cli.up),
        Some(Command::Detached) => Ok(up::run(&crate::detach::background_options()?)?),
        Some(Command::Run(args)) => Ok(run::run(&args)?),
        Some(Command::Db(args)) => Ok(db::run(&args)?),
        Some(Command::Omnigent(args)) => Ok(run::run_omnigent(&args.pod, &args.args)?),
        Some(Command::Init(args)) => Ok(init::run(&args)?),
        Some(Command::Profile(ProfileCommand::Show(args))) => Ok(profile::show(&args)?),
        Some(Command::Profile(ProfileCommand::Check(args))) => Ok(profile::check(&args)?),
        Some(Command::Install(args)) => install::install(&args),
        Some(Command::Update(args)) => install::update(&args),
        Some(Command::Check(args)) => install::check(&args),
        Some(Command::Refresh) => install::refresh(),
        Some(Command::LinkWatch(args)) => link_watch::run(&args),
        Some(Command::ShellHook(args)) => install::shell_hook(&args),
        Some(Command::Attach(args)) => Ok(attach::run(&args)?),
        Some(Command::Status(args)) => status::run(&args),
        Some(Command::Ls(args)) => ls::run(&args),
        Some(Command::Stop(args)) => stop::run(&args),
        Some(Command::Start(args)) => start::run(&args),
        Some(Command::Restart(args)) => restart::run(&args),
        Some(Command::ReloadProfile(args)) => reload_profile::run(&args),
        Some(Command::Logs(args)) => logs::run(&args),
        Some(Command::Events(args)) => events::run(&args),
        Some(Command::Wait(args)) => wait::run(&args),
        Some(Command::Clean(args)) => clean::run(&args),
        Some(Command::Gc(args)) => gc::run(&args),
        Some(Command::Mcp(args)) => mcp::run(&args),
        Some(Command::Dashboard(args)) => crate::dashboard::run(&args),
        Some(Command::Completions(args)) => completions::run(&args),
        Some(Command::Man(args)) => completions::man(&args),
    }
}

/// `omnidev up`, in the foreground or (`--detach`) in the background.
fn up_or_detach(args: &UpArgs) -> miette::Result<ExitCode> {
    let options = RunOptions::from_args(args)?;
    let host =
        args.ssh_host().map_err(|message| miette::miette!(code = "omnidev::usage", "{message}"))?;
    if let Some(host) = host {
        let checkout = crate::session::resolve_checkout(&options.pod)?;
        let wait = Duration::from_secs(args.ready_timeout);
        return Ok(crate::remote::up(host, &checkout.repo, &checkout.pod_dir, wait)?);
    }
    if options.with_links {
        let wait = Duration::from_secs(args.ready_timeout);
        crate::detach::start_links(&options, wait)?;
    }
    match options.detach {
        Some(ready_timeout) => crate::detach::run(&options, ready_timeout),
        None => Ok(up::run(&options)?),
    }
}

/// Says on stderr which services a request's answer names as failed,
/// each with its state (`omnidev: web failed: stopped (…)`); the exit
/// code for it: 0 when none did, else 1.
fn report_failures(response: &crate::control::protocol::Completed) -> ExitCode {
    for (failure, name) in response.failures().iter().zip(&response.failed) {
        note!("omnidev: {failure} (`omnidev logs {name}` shows why)");
    }
    if response.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

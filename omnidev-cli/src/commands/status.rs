//! `omnidev status [--json]`: the current checkout's pod — directory,
//! ports, whether it runs, each service's state and pid.

use std::process::ExitCode;

use crate::cli::StatusArgs;
use crate::control;
use crate::output::{json, pod_status, write_stdout};

/// Runs `omnidev status`: the report, then exit 0 when the pod runs and
/// 3 when it does not (as `systemctl status`), so a script can branch on
/// it.
pub fn run(args: &StatusArgs) -> miette::Result<ExitCode> {
    let status = control::inspect(&crate::session::pod_dir(&args.pod)?)?;
    let text = if args.json { json(&status)? } else { pod_status(&status) };
    write_stdout(&text)?;
    Ok(if status.running { ExitCode::SUCCESS } else { crate::error::exit::NOT_RUNNING.into() })
}

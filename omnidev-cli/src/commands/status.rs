//! `omnidev status [--json]`: the current checkout's pod — directory,
//! ports, whether it runs, each service's state and pid.

use std::process::ExitCode;

use crate::cli::StatusArgs;
use crate::control;
use crate::output::{json, pod_status, write_stdout};

/// Runs `omnidev status`. Exits 0 whether or not the pod runs; the output
/// says which.
pub fn run(args: &StatusArgs) -> miette::Result<ExitCode> {
    let status = control::inspect(&crate::session::pod_dir(&args.pod)?)?;
    let text = if args.json {
        json(&status)?
    } else {
        pod_status(&status)
    };
    write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

//! `omnidev start SERVICE…`: start services of the running pod again
//! (stopped with `omnidev stop SERVICE`, or ended), from any terminal.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::StartArgs;
use crate::control::Ask;

/// Runs `omnidev start`: returns once each service is ready (exit 0) or
/// one failed (exit 1, naming it); services waiting on them start after
/// them on their own.
pub fn run(args: &StartArgs) -> miette::Result<ExitCode> {
    let pod_dir = &crate::session::running_pod_dir(&args.pod)?;
    let response =
        Ask::start(args.services.clone(), Duration::from_secs(args.timeout)).send(pod_dir)?;
    if response.failed.is_empty() {
        note!("omnidev: started {}", args.services.join(", "));
    }
    Ok(super::report_failures(&response))
}

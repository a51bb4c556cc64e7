//! `omnidev restart [SERVICE]`: restart a service (or the watched services) of the
//! running pod from another terminal.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::RestartArgs;
use crate::control::Ask;
use crate::output::{json, pod_status, write_stdout};

/// Runs `omnidev restart`: returns once the restarted services are ready
/// again (their dependents follow on their own); exits 1 when one failed.
pub fn run(args: &RestartArgs) -> miette::Result<ExitCode> {
    let pod_dir = &crate::session::running_pod_dir(&args.pod)?;
    let what = crate::control::RestartScope {
        service: args.service.clone(),
        all: args.all,
        no_deps: args.no_deps,
    };
    let response = Ask::restart(what, Duration::from_secs(args.timeout)).send(pod_dir)?;
    let status = &response.status;
    write_stdout(&if args.json { json(status)? } else { pod_status(status) })?;
    Ok(super::report_failures(&response))
}

//! `omnidev restart [SERVICE]`: restart a service (or the watched services) of the
//! running pod from another terminal.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::RestartArgs;
use crate::control::{self, Request};
use crate::output::{json, pod_status, write_stdout};

/// Runs `omnidev restart`: returns once the restarted services are ready
/// again (their dependents follow on their own); exits 1 when one failed.
pub fn run(args: &RestartArgs) -> miette::Result<ExitCode> {
    let pod_dir = &crate::session::running_pod_dir(&args.pod)?;
    let request = Request::Restart {
        service: args.service.clone(),
        all: args.all,
        no_deps: args.no_deps,
        timeout_secs: Some(args.timeout),
    };
    // The pod answers with an error once `timeout` has passed; the socket
    // read waits a little longer so that answer arrives.
    let read_timeout = Duration::from_secs(args.timeout.saturating_add(5));
    let response = control::request(pod_dir, &request, read_timeout)?;
    if let Some(status) = &response.status {
        write_stdout(&if args.json {
            json(status)?
        } else {
            pod_status(status)
        })?;
    }
    Ok(super::report_failures(&response))
}

//! `omnidev start SERVICE…`: start services of the running pod again
//! (stopped with `omnidev stop SERVICE`, or ended), from any terminal.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::StartArgs;
use crate::control::{self, Request};

/// Runs `omnidev start`: returns once each service is ready (exit 0) or
/// one failed (exit 1, naming it); services waiting on them start after
/// them on their own.
pub fn run(args: &StartArgs) -> miette::Result<ExitCode> {
    let pod_dir = &crate::session::running_pod_dir(&args.pod)?;
    let request = Request::StartService {
        services: args.services.clone(),
        timeout_secs: Some(args.timeout),
    };
    // The pod answers with an error once `timeout` has passed; the socket
    // read waits a little longer so that answer arrives.
    let read_timeout = Duration::from_secs(args.timeout.saturating_add(5));
    let response = control::request(pod_dir, &request, read_timeout)?;
    if response.failed.is_empty() {
        note!("omnidev: started {}", args.services.join(", "));
    }
    Ok(super::report_failures(&response))
}

//! `omnidev wait`: block until the running pod's services are ready, have
//! exited, or are healthy after a reload; for scripts and agents.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::WaitArgs;
use crate::control::protocol::WaitFor;
use crate::control::{self, Request};

/// Runs `omnidev wait`: exit 0 when the condition holds; 1 when a service
/// failed (each is named with its state); 2 on usage errors (an unknown
/// service too); 3 when the pod does not run; 4 when the time ran out.
pub fn run(args: &WaitArgs) -> miette::Result<ExitCode> {
    let pod_dir = &crate::session::running_pod_dir(&args.pod)?;
    let until = if args.ready {
        WaitFor::Ready
    } else if args.exited {
        WaitFor::Exited
    } else {
        WaitFor::HealthyAfterReload
    };
    let request = Request::Wait {
        until,
        services: args.services.clone(),
        timeout_secs: Some(args.timeout_secs()),
    };
    // The pod answers with an error once `timeout` has passed; the socket
    // read waits a little longer so that answer arrives.
    let read_timeout = Duration::from_secs(args.timeout_secs().saturating_add(5));
    let response = control::request(pod_dir, &request, read_timeout)?;
    Ok(super::report_failures(&response))
}

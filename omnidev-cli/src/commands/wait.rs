//! `omnidev wait`: block until the running pod's services are ready, have
//! exited, or are healthy after a reload; for scripts and agents.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::WaitArgs;
use crate::control::Ask;
use crate::control::protocol::WaitFor;

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
    let timeout = Duration::from_secs(args.timeout_secs());
    let response = Ask::wait(until, args.services.clone(), timeout).send(pod_dir)?;
    Ok(super::report_failures(&response))
}

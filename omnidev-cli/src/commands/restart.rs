//! `omnidev restart [SERVICE]`: restart a service (or the backend) of the
//! running pod from another terminal.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use omnidev_pod::LockState;

use crate::cli::PodArgs;
use crate::commands::status::{json, render, write_stdout};
use crate::control::{self, Error, Request};

/// Arguments of `omnidev restart`.
#[derive(Debug, Args, Clone)]
pub struct RestartArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// The service; the backend (e.g. server, then host) when omitted.
    #[arg(value_name = "SERVICE")]
    pub service: Option<String>,
    /// Print the pod's status afterwards as JSON.
    #[arg(long)]
    pub json: bool,
    /// Seconds to wait for the restarted services to be ready.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub timeout: u64,
}

/// Runs `omnidev restart`: returns once the restarted services are ready
/// again (their dependents follow on their own); exits 1 when one failed.
pub fn run(args: &RestartArgs) -> miette::Result<ExitCode> {
    let checkout = crate::commands::up::resolve_checkout(&args.pod)?;
    let pod_dir = &checkout.pod_dir;
    if control::lock_state(pod_dir)? == LockState::Free {
        return Err(Error::NotRunning {
            pod_dir: pod_dir.clone(),
        }
        .into());
    }
    let request = Request::Restart {
        service: args.service.clone(),
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
            render(status)
        })?;
    }
    if response.failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("omnidev: failed: {}", response.failed.join(", "));
        Ok(ExitCode::FAILURE)
    }
}

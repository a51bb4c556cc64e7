//! `omnidev reload-profile`: apply the changed profile file to the running
//! pod, restarting only the services whose rendered spec changed.

use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use crate::cli::ReloadProfileArgs;
use crate::control::protocol::PodStatus;
use crate::control::{self, Ask};
use crate::output::{json, pod_status, write_stdout};

/// `reload-profile --json`: what was done, and the pod's status after.
#[derive(Serialize)]
struct Report<'a> {
    schema: u32,
    #[serde(flatten)]
    applied: &'a omnidev_core::ProfileApplied,
    failed: &'a [String],
    status: &'a PodStatus,
}

/// Runs `omnidev reload-profile`: returns once the restarted and started
/// services are ready; exits 1 when one failed, 2 when the profile file
/// cannot be loaded (the pod runs on), 3 when no pod runs, 4 on timeout.
pub fn run(args: &ReloadProfileArgs) -> miette::Result<ExitCode> {
    let pod_dir = &crate::session::running_pod_dir(&args.pod)?;
    let response = Ask::reload_profile(Duration::from_secs(args.timeout)).send(pod_dir)?;
    let applied = response.applied.clone().unwrap_or_default();
    if args.json {
        write_stdout(&json(&Report {
            schema: control::protocol::SCHEMA,
            applied: &applied,
            failed: &response.failed,
            status: &response.status,
        })?)?;
    } else {
        let mut text = format!("{}\n", omnidev_core::text::message(&applied.message));
        text.push_str(&pod_status(&response.status));
        write_stdout(&text)?;
    }
    Ok(super::report_failures(&response))
}

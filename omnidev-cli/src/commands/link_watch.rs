//! `omnidev link-watch` (internal): the service `LINK.SERVICE` a pod runs
//! for each linked pod's service one of its services depends on. It asks
//! the linked pod (read only, every [`EVERY`]); once the service is ready
//! there it says [`READY_LINE`] (the readiness probe of the watch matches
//! it) and goes on looking. Whenever the service is not ready there (at
//! the first look, or later) it says why (`down: …`) and exits with
//! [`LINK_DOWN`]: the pod shows the watch and its dependents blocked on
//! that reason, stops the dependents that ran, and runs the watch again
//! a moment later with the reason in [`LINK_DOWN_ENV`], so it waits
//! quietly while that holds (core's
//! [`omnidev_core::spec::ServiceSpec::link`]).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use omnidev_core::spec::{LINK_DOWN, LINK_DOWN_ENV};
use omnidev_pod::link::LINK_READY as READY_LINE;

use crate::cli::LinkWatchArgs;
use crate::control;

/// How often the linked pod is asked.
const EVERY: Duration = Duration::from_millis(500);

/// Runs `omnidev link-watch --pod-dir DIR --service NAME` until the
/// service is not ready in its pod.
pub fn run(args: &LinkWatchArgs) -> miette::Result<ExitCode> {
    let known = std::env::var(LINK_DOWN_ENV).ok();
    let mut ready = false;
    loop {
        match look(&args.pod_dir, &args.service) {
            Err(why) if ready || known.as_ref() != Some(&why) => {
                crate::output::write_stdout(&format!("down: {why}\n"))?;
                return Ok(ExitCode::from(LINK_DOWN as u8));
            }
            // Still down for the reason the pod shows: nothing new.
            Err(_) => {
                std::thread::sleep(EVERY);
                continue;
            }
            Ok(()) => {}
        }
        if !ready {
            crate::output::write_stdout(&format!("{READY_LINE}\n"))?;
            ready = true;
        }
        std::thread::sleep(EVERY);
    }
}

/// Whether `service` runs ready in the pod in `pod_dir`; why not, as
/// plain text (the pod keeps the reason as such: the same words compare
/// equal on the next run).
fn look(pod_dir: &Path, service: &str) -> Result<(), String> {
    why_not(pod_dir, service).map_err(|why| omnidev_core::text::plain(&why))
}

fn why_not(pod_dir: &Path, service: &str) -> Result<(), String> {
    let status = control::inspect(pod_dir).map_err(|e| e.to_string())?;
    let shown = pod_dir.display();
    if !status.running {
        return Err(format!("the pod {shown} is not running"));
    }
    let Some(report) = status.services.iter().find(|s| s.status.name == service) else {
        return Err(format!("the pod {shown} runs no service `{service}`"));
    };
    if report.status.ready { Ok(()) } else { Err(format!("{service} is {}", report.detail)) }
}

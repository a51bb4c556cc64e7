//! `omnidev link-watch` (internal): the service `LINK.SERVICE` a pod runs
//! for each linked pod's service one of its services depends on. It asks
//! the linked pod (read only, every [`EVERY`]) and says what it sees, one
//! line a change: why it waits, then [`READY_LINE`] once the service is
//! ready there (the readiness probe of the watch matches it). When the
//! service goes down after that, it says why and exits 1: the pod restarts
//! it like any crash, and the dependents follow their `depends-on` (they
//! restart once it is ready again).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use omnidev_pod::link::LINK_READY as READY_LINE;

use crate::cli::LinkWatchArgs;
use crate::control;

/// How often the linked pod is asked.
const EVERY: Duration = Duration::from_millis(500);

/// Runs `omnidev link-watch --pod-dir DIR --service NAME` until the
/// service goes down after it was ready.
pub fn run(args: &LinkWatchArgs) -> miette::Result<ExitCode> {
    let mut said = String::new();
    let mut ready = false;
    loop {
        let now = look(&args.pod_dir, &args.service);
        let line = match &now {
            Ok(()) => READY_LINE.to_owned(),
            Err(why) if ready => format!("down: {why}"),
            Err(why) => format!("waiting: {why}"),
        };
        if line != said {
            crate::output::write_stdout(&format!("{line}\n"))?;
            said = line;
        }
        match now {
            Ok(()) => ready = true,
            Err(_) if ready => return Ok(ExitCode::FAILURE),
            Err(_) => {}
        }
        std::thread::sleep(EVERY);
    }
}

/// Whether `service` runs ready in the pod in `pod_dir`; why not.
fn look(pod_dir: &Path, service: &str) -> Result<(), String> {
    let status = control::inspect(pod_dir).map_err(|e| e.to_string())?;
    let shown = pod_dir.display();
    if !status.running {
        return Err(format!("the pod {shown} is not running"));
    }
    let Some(report) = status.services.iter().find(|s| s.status.name == service) else {
        return Err(format!("the pod {shown} runs no service `{service}`"));
    };
    if report.status.ready {
        Ok(())
    } else {
        Err(format!("{service} is {}", report.detail))
    }
}

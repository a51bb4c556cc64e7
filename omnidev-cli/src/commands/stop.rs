//! `omnidev stop`: stop the running pod of this checkout from another
//! terminal, and return once every one of its processes is gone.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use omnidev_pod::LockState;

use crate::cli::StopArgs;
use crate::control::{Ask, lock_state};
use crate::error::Error;

/// Runs `omnidev stop`. Stopping a pod that does not run is not an error;
/// stopping services of one is (exit 3).
pub fn run(args: &StopArgs) -> miette::Result<ExitCode> {
    if !args.services.is_empty() {
        return stop_services(args);
    }
    if args.all {
        return stop_all(args);
    }
    if let Some(host) = &args.host {
        let checkout = crate::session::resolve_checkout(&args.pod)?;
        return Ok(crate::remote::stop(host, &checkout.repo, Duration::from_secs(args.timeout))?);
    }
    let pod_dir = &crate::session::pod_dir(&args.pod)?;
    let LockState::Held { pid } = lock_state(pod_dir)? else {
        note!("omnidev: the pod {} is not running", omnidev_core::text::quote_path(pod_dir));
        return Ok(ExitCode::SUCCESS);
    };
    stop_pod(pod_dir, pid, args.timeout)?;
    Ok(ExitCode::SUCCESS)
}

/// `omnidev stop --all`: every running pod of this user (under the cache
/// root, or in the user's port registry), after asking on a terminal
/// unless `--yes`.
fn stop_all(args: &StopArgs) -> miette::Result<ExitCode> {
    use std::io::{BufRead as _, IsTerminal as _, Write as _};
    let cache_root = omnidev_pod::pod::cache_root().map_err(Error::Pod)?;
    let runtime_dir = omnidev_pod::runtime::runtime_dir();
    let mut dirs: std::collections::BTreeSet<std::path::PathBuf> =
        omnidev_pod::pod::cache_dirs(&cache_root)
            .map_err(Error::io("list", &cache_root))?
            .into_iter()
            .filter_map(|dir| dir.canonicalize().ok())
            .collect();
    dirs.extend(omnidev_pod::ports::registered_pods(&runtime_dir).map_err(Error::Pod)?);
    let mut running = Vec::new();
    for dir in dirs {
        if let Ok(LockState::Held { pid }) = lock_state(&dir) {
            running.push((dir, pid));
        }
    }
    if running.is_empty() {
        note!("omnidev: no pod of yours is running");
        return Ok(ExitCode::SUCCESS);
    }
    if !args.yes && std::io::stdin().is_terminal() {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "omnidev: {} pods run:", running.len());
        for (dir, _) in &running {
            let _ = writeln!(err, "  {}", omnidev_core::text::quote_path(dir));
        }
        let _ = write!(err, "Stop them all? [y/N] ");
        let _ = err.flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            note!("omnidev: nothing stopped");
            return Ok(ExitCode::SUCCESS);
        }
    }
    for (dir, pid) in &running {
        stop_pod(dir, *pid, args.timeout)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Stops the running pod in `pod_dir` (its supervisor `pid`, when known)
/// and waits up to `timeout` seconds for every one of its processes.
fn stop_pod(pod_dir: &Path, pid: Option<u32>, timeout: u64) -> miette::Result<()> {
    match Ask::stop_pod().tell(pod_dir) {
        Ok(()) => {}
        // No answer (e.g. still starting, or stuck): a SIGTERM to the
        // process holding the lock takes the same shutdown path.
        Err(Error::Unreachable { .. } | Error::Protocol { .. }) => {
            if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::SIGTERM,
                );
            }
        }
        Err(e) => return Err(e.into()),
    }
    wait_stopped(pod_dir, pid, Duration::from_secs(timeout))?;
    note!("omnidev: stopped the pod {}", omnidev_core::text::quote_path(pod_dir));
    Ok(())
}

/// `omnidev stop SERVICE…`: those services stop (once their processes
/// are gone); the pod and their dependents run on.
fn stop_services(args: &StopArgs) -> miette::Result<ExitCode> {
    let pod_dir = &crate::session::running_pod_dir(&args.pod)?;
    Ask::stop(args.services.clone(), Duration::from_secs(args.timeout)).tell(pod_dir)?;
    note!("omnidev: stopped {} (`omnidev start` starts them again)", args.services.join(", "));
    Ok(ExitCode::SUCCESS)
}

/// Waits until the pod lock is free (`omnidev up` releases it only after
/// every process of the pod is gone) and the process `pid` has exited.
pub fn wait_stopped(pod_dir: &Path, pid: Option<u32>, timeout: Duration) -> Result<(), Error> {
    let start = Instant::now();
    // The lock is released just before `omnidev up` exits; the process
    // itself is waited for too, so that "stopped" means gone.
    let running = || -> Result<bool, Error> {
        Ok(matches!(lock_state(pod_dir)?, LockState::Held { .. })
            || pid.is_some_and(omnidev_core::process::pid_alive))
    };
    while running()? {
        if start.elapsed() > timeout {
            return Err(Error::StopTimeout {
                pod_dir: pod_dir.to_path_buf(),
                pid,
                seconds: timeout.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

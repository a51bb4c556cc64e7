//! `omnidev up --detach`: run the pod in the background (a new session,
//! output to `<pod>/logs/omnidev.log`), return once every service is ready
//! or one has failed, and print the pod directory and URLs.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use omnidev_pod::{LockState, Pod};

use crate::cli::UpArgs;
use crate::control::protocol::Response;
use crate::control::{self, Request};
use crate::error::Error;
use crate::output::write_stdout;

/// Lines of a failed service's log shown when detaching fails.
const FAILURE_TAIL: usize = 15;

/// How long a pod that dropped its control connection may take to exit.
const EXIT_GRACE: Duration = Duration::from_secs(10);

/// Runs `omnidev up --detach`.
pub fn run(args: &UpArgs) -> miette::Result<ExitCode> {
    // Resolving here reports profile and checkout mistakes in the terminal
    // instead of in a log file.
    let checkout = crate::session::resolve_checkout(&args.pod)?;
    let pod_dir = checkout.pod_dir.clone();
    if let LockState::Held { pid } = control::lock_state(&pod_dir)? {
        if args.clean {
            return Err(Error::Pod(omnidev_pod::Error::AlreadyRunning { pod_dir, pid }).into());
        }
        return already_running(&pod_dir, pid);
    }
    if args.clean {
        // Done here, not in the background process, whose output file lives
        // in the pod directory.
        if let Some(said) = crate::session::clean_before_up(&pod_dir)? {
            note!("{said}");
        }
    }
    let pod = Pod::create(&pod_dir, &checkout.profile.pod.dirs).map_err(Error::from)?;
    let log = pod.detached_log();
    let output = open_detached_log(&pod, true).map_err(Error::io("create", &log))?;
    let stderr = output.try_clone().map_err(Error::io("open", &log))?;

    let mut child = spawn_background(pod.dir(), output, stderr)?;
    let response = wait_ready(&mut child, &pod_dir, &log, args.ready_timeout)?;
    report(&response, &pod, child.id())
}

/// Set for the background process: its stdout and stderr are the pod's
/// `logs/omnidev.log`, which it rotates ([`rotate_own_output`]).
const DETACHED_LOG_ENV: &str = "OMNIDEV_DETACHED_LOG";

/// How often the background process looks at the size of its output file.
const ROTATE_EVERY: Duration = Duration::from_secs(1);

/// Opens `<pod>/logs/omnidev.log` for appending through the pod's
/// directory handles (a link planted there is refused, never written
/// through); with `rotate_first`, the previous run's file is kept as
/// `omnidev.log.1` (and older ones shifted, as the service logs are) first.
fn open_detached_log(pod: &Pod, rotate_first: bool) -> std::io::Result<std::fs::File> {
    let logs = omnidev_core::fs::Dir::open(pod.dir())?
        .create_dir_all(Path::new(omnidev_pod::layout::LOGS_DIR), 0o700)?;
    let name = Path::new(omnidev_pod::layout::DETACHED_LOG);
    let keep = omnidev_core::LogConfig::default().keep_files;
    let existing = logs.stat(name)?;
    if existing.is_some_and(|e| e.kind != omnidev_core::fs::Kind::File) {
        // Refused, never rotated away or written through.
        return logs.open_file(name, omnidev_core::fs::OpenOptions::AppendCreate);
    }
    if rotate_first && existing.is_some_and(|e| e.size > 0) {
        for n in (1..keep).rev() {
            let from = omnidev_core::logs::rotated_path(name, n);
            if logs.stat(&from)?.is_some() {
                logs.rename(&from, &omnidev_core::logs::rotated_path(name, n + 1))?;
            }
        }
        logs.rename(name, &omnidev_core::logs::rotated_path(name, 1))?;
    }
    logs.open_file(name, omnidev_core::fs::OpenOptions::AppendCreate)
}

/// In the background process of `up --detach` (its stdout and stderr are
/// `logs/omnidev.log`), rotates that file like the service logs: once it
/// reaches the service logs' size limit, it becomes `omnidev.log.1` (older
/// ones shifted, as many kept) and a new file takes its place as stdout and
/// stderr (`dup2`, so no write is lost: each goes to the old file or the
/// new one). Does nothing in any other process (the variable is set by
/// `--detach`, and stdout must still be that very file).
pub fn rotate_own_output() {
    use std::os::unix::fs::MetadataExt as _;
    let Some(pod_dir) = std::env::var_os(DETACHED_LOG_ENV) else {
        return;
    };
    let pod = Pod::at(std::path::PathBuf::from(pod_dir));
    let stdout = || -> Option<(u64, u64)> {
        let meta = nix::sys::stat::fstat(std::io::stdout()).ok()?;
        Some((meta.st_ino, meta.st_size as u64))
    };
    let current = |pod: &Pod| -> Option<u64> {
        let logs = omnidev_core::fs::Dir::open(pod.dir())
            .and_then(|d| d.sub(Path::new(omnidev_pod::layout::LOGS_DIR)))
            .ok()?;
        Some(
            logs.stat(Path::new(omnidev_pod::layout::DETACHED_LOG))
                .ok()??
                .ino,
        )
    };
    // Only the very process `--detach` started, whose stdout is that file
    // (a service inheriting the variable writes to a pipe).
    let Some((mut ino, _)) = stdout().filter(|(ino, _)| current(&pod) == Some(*ino)) else {
        return;
    };
    let max = omnidev_core::LogConfig::default().max_file_bytes;
    let _ = std::thread::Builder::new()
        .name("omnidev-log-rotate".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(ROTATE_EVERY);
                let Some((now, size)) = stdout() else {
                    return;
                };
                if now != ino || current(&pod) != Some(ino) {
                    // Redirected or replaced by someone else: not ours.
                    return;
                }
                if size < max {
                    continue;
                }
                let Ok(file) = open_detached_log(&pod, true) else {
                    continue;
                };
                if nix::unistd::dup2_stdout(&file).is_err() {
                    return;
                }
                let _ = nix::unistd::dup2_stderr(&file);
                ino = file.metadata().map_or(0, |m| m.ino());
            }
        });
}

/// `up --detach` on a pod that already runs: what it would have printed
/// (the pod directory and URLs), and exit 0: the pod asked for runs
/// (with `--clean`, whose directory cannot be removed now, it is an error).
fn already_running(pod_dir: &Path, pid: Option<u32>) -> miette::Result<ExitCode> {
    let status = control::inspect(pod_dir)?;
    let mut out = format!("pod {}\n", pod_dir.display());
    for url in &status.urls {
        let _ = writeln!(out, "{} {}", url.name, url.url);
    }
    let pid = status
        .pid
        .or(pid)
        .map_or_else(|| "unknown".to_owned(), |p| p.to_string());
    let _ = writeln!(
        out,
        "already running (pid {pid}); `omnidev status`, `omnidev logs -f`, `omnidev stop`"
    );
    write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// Re-executes this binary as `omnidev … --headless` in a new session, with
/// `output` as stdout and `stderr` as stderr.
fn spawn_background(
    pod_dir: &Path,
    output: std::fs::File,
    stderr: std::fs::File,
) -> miette::Result<Child> {
    let program = std::env::current_exe().map_err(Error::io("locate", "the omnidev binary"))?;
    let mut command = Command::new(&program);
    command
        .args(background_args(std::env::args_os().skip(1)))
        .env(DETACHED_LOG_ENV, pod_dir)
        .stdin(Stdio::null())
        .stdout(output)
        .stderr(stderr);
    // SAFETY: setsid is async-signal-safe and touches no memory of the
    // parent; it makes the child a session leader without a terminal, so
    // closing this terminal (SIGHUP) does not reach the pod.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    Ok(command.spawn().map_err(|source| Error::DetachSpawn {
        program: program.clone(),
        source,
    })?)
}

/// Asks the background pod's control socket `wait-ready` (retrying while it
/// is not listening yet), failing when the process exits first or the
/// deadline passes.
fn wait_ready(
    child: &mut Child,
    pod_dir: &Path,
    log: &Path,
    timeout_secs: u64,
) -> miette::Result<Response> {
    let timeout = Duration::from_secs(timeout_secs);
    let start = Instant::now();
    let exited = |status: std::process::ExitStatus| Error::DetachExited {
        status: status.to_string(),
        tail: tail(log, FAILURE_TAIL),
        log: log.to_path_buf(),
    };
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(exited(status).into());
        }
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(Error::DetachTimeout {
                seconds: timeout.as_secs(),
            }
            .into());
        }
        match control::request(pod_dir, &Request::WaitReady, left) {
            Ok(response) => return Ok(response),
            // Not listening yet: the pod is still preparing.
            Err(Error::Unreachable { source, .. })
                if source.kind() != std::io::ErrorKind::WouldBlock
                    && source.kind() != std::io::ErrorKind::TimedOut =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(Error::Unreachable { .. }) => {
                return Err(Error::DetachTimeout {
                    seconds: timeout.as_secs(),
                }
                .into());
            }
            // The pod closed the connection without answering: it ended
            // (e.g. its only service failed) while the request waited.
            Err(e @ Error::Protocol { .. }) => {
                return Err(match wait_exit(child, EXIT_GRACE) {
                    Some(status) => exited(status).into(),
                    None => e.into(),
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The child's exit status, if it ends within `grace`.
fn wait_exit(child: &mut Child, grace: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if start.elapsed() < grace => std::thread::sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

/// Prints the pod directory and URLs; on failure, each failed service's
/// last log lines (to stderr) and exit code 1.
fn report(response: &Response, pod: &Pod, child: u32) -> miette::Result<ExitCode> {
    let mut out = format!("pod {}\n", crate::terminal_text::quote_path(pod.dir()));
    if let Some(status) = &response.status {
        for url in &status.urls {
            let _ = writeln!(out, "{} {}", url.name, url.url);
        }
        let _ = writeln!(
            out,
            "running in the background (pid {}); `omnidev status`, `omnidev logs -f`, `omnidev stop`",
            status.pid.unwrap_or(child)
        );
    }
    write_stdout(&out)?;
    if response.failed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let mut report = String::new();
    for name in &response.failed {
        let detail = response
            .status
            .as_ref()
            .and_then(|s| s.services.iter().find(|r| &r.name == name))
            .map_or_else(String::new, |r| format!(" ({})", r.detail));
        let _ = writeln!(report, "omnidev: {name} failed{detail}; its last lines:");
        let service_log = pod.logs_dir().join(format!("{name}.log"));
        for line in tail(&service_log, FAILURE_TAIL).lines() {
            let _ = writeln!(report, "  {name} | {line}");
        }
    }
    report.push_str("omnidev: the pod keeps running; `omnidev stop` ends it\n");
    note!("{}", report.trim_end());
    Ok(ExitCode::FAILURE)
}

/// The background process's arguments: this command line without the
/// flags that only concern the foreground (`--detach`, `--clean`,
/// `--ready-timeout`), plus `--headless`.
fn background_args(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for arg in args {
        if skip_value {
            skip_value = false;
            continue;
        }
        match arg.to_str() {
            Some("--detach" | "--clean") => {}
            Some("--ready-timeout") => skip_value = true,
            Some(a) if a.starts_with("--ready-timeout=") => {}
            _ => out.push(arg),
        }
    }
    out.push("--headless".into());
    out
}

/// The last `n` lines of a file (empty when unreadable), safe for a
/// terminal (see `terminal_text`).
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let lines: Vec<String> = text.lines().map(crate::terminal_text::plain).collect();
    let mut out = lines[lines.len().saturating_sub(n)..].join("\n");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_args_drop_foreground_flags() {
        let args = [
            "up",
            "--detach",
            "--clean",
            "--ready-timeout",
            "30",
            "--skip",
            "vite",
            "--ready-timeout=5",
        ]
        .map(OsString::from);
        assert_eq!(
            background_args(args.into_iter()),
            ["up", "--skip", "vite", "--headless"].map(OsString::from)
        );
    }
}

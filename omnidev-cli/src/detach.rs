//! `omnidev up --detach`: run the pod in the background (a new session,
//! output to `<pod>/logs/omnidev.log`), return once every service is ready
//! or one has failed, and print the pod directory and URLs. The MCP and
//! dashboard `up` start a pod the same way ([`start`]), in their own
//! process.
//!
//! The background process is `omnidev detached`, which reads what to run
//! from its standard input: the options of this `up`, as data
//! ([`RunOptions::in_background`]), never a command line pieced together
//! from this one.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use omnidev_pod::layout::LOG_SUFFIX;
use omnidev_pod::{LockState, Pod};
use serde::{Deserialize, Serialize};

use crate::control::protocol::Completed;
use crate::control::{self, Ask, CallConnection};
use crate::error::Error;
use crate::log_files::{Tail, last_lines};
use crate::output::write_stdout;
use crate::run_options::RunOptions;

/// Lines of a failed service's log shown when detaching fails.
const FAILURE_TAIL: usize = 15;

/// How long a pod that dropped its control connection may take to exit.
const EXIT_GRACE: Duration = Duration::from_secs(10);

/// What `up --detach` hands its background process on its standard input.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Handover {
    /// The pod directory, whose `logs/omnidev.log` is the process's
    /// stdout and stderr (it rotates that file).
    pub pod_dir: PathBuf,
    /// What to run.
    pub options: RunOptions,
}

/// The most a handover may take: the options of any command line.
const MAX_HANDOVER_BYTES: u64 = 4 << 20;

/// In the background process (`omnidev detached`): the options `up
/// --detach` wrote to its standard input, read to its end; the rotation
/// of its output file started.
pub fn background_options() -> Result<RunOptions, Error> {
    let mut bytes = Vec::new();
    let read = std::io::stdin().lock().take(MAX_HANDOVER_BYTES + 1).read_to_end(&mut bytes);
    let bad = |message: String| Error::BackgroundOptions { message };
    read.map_err(|e| bad(format!("reading standard input: {e}")))?;
    if bytes.len() as u64 > MAX_HANDOVER_BYTES {
        return Err(bad(format!("more than {MAX_HANDOVER_BYTES} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|_| bad("it is not UTF-8 text".to_owned()))?;
    let handover: Handover = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    crate::detached_log::follow(handover.pod_dir);
    Ok(handover.options)
}

/// Runs `omnidev up --detach`, waiting `ready_timeout` for readiness.
pub fn run(options: &RunOptions, ready_timeout: Duration) -> miette::Result<ExitCode> {
    let started = start(options, ready_timeout, &CallConnection::default())?;
    report(&started)
}

/// `up --with-links`: each pod of the profile's links that does not run
/// is started first, in the background in its own checkout (its own
/// links too), as `omnidev up --detach --with-links --repo CHECKOUT`
/// would, each waited for at most `ready_timeout`. Loops of links are
/// refused before anything starts.
pub fn start_links(options: &RunOptions, ready_timeout: Duration) -> miette::Result<()> {
    let checkout = crate::session::resolve_checkout(&options.pod)?;
    let links = omnidev_pod::link::checkouts(&checkout.profile, &checkout.repo, &options.links)
        .map_err(Error::from)?;
    for (name, linked, _) in links {
        let pod_dir = omnidev_pod::pod::default_pod_dir(&checkout.cache_root, &linked);
        if let LockState::Held { .. } = control::lock_state(&pod_dir)? {
            continue;
        }
        note!(
            "omnidev: starting the pod of link `{name}` ({})",
            omnidev_core::text::quote_path(&linked)
        );
        let theirs = RunOptions {
            pod: crate::cli::PodArgs { repo: Some(linked), profile: None, pod_dir: None },
            selection: omnidev_pod::Selection::default(),
            ports: Vec::new(),
            hosts: std::collections::BTreeMap::new(),
            trust_lan_origins: false,
            clean: false,
            scale: std::collections::BTreeMap::new(),
            db: None,
            clone_from: None,
            links: std::collections::BTreeMap::new(),
            detach: Some(ready_timeout),
            ..options.clone()
        };
        start_links(&theirs, ready_timeout)?;
        report(&start(&theirs, ready_timeout, &CallConnection::default())?)?;
    }
    Ok(())
}

/// A pod running in the background, with the answer to the wait for its
/// services' readiness.
#[derive(Debug)]
pub struct Started {
    /// The answer of the wait: the pod's status, the services that failed.
    pub response: Completed,
    /// The pod.
    pub pod: Pod,
    /// The background process, when known.
    pub pid: Option<u32>,
    /// Whether this call started it or found it running.
    pub how: &'static str,
}

/// `omnidev up --detach` of the checkout `pod` names, with no other flag,
/// waited for at most `ready_timeout`: what MCP's `up` and the dashboard's
/// `up` button run.
pub fn up(
    pod: &crate::cli::PodArgs,
    ready_timeout: Duration,
    connection: &CallConnection,
) -> miette::Result<Started> {
    let args =
        crate::cli::UpArgs { pod: pod.clone(), detach: true, ..crate::cli::UpArgs::default() };
    let options = RunOptions::from_args(&args)?;
    start(&options, ready_timeout, connection)
}

/// Starts the pod in the background (or finds it running) and waits until
/// every service is ready or one failed, at most `ready_timeout`; a
/// cancelled `connection` stops the wait at once (the pod runs on). The
/// background process is reaped when it ends, by a thread of this process
/// (a server that starts pods lives on after them).
pub fn start(
    options: &RunOptions,
    ready_timeout: Duration,
    connection: &CallConnection,
) -> miette::Result<Started> {
    // Resolving here reports profile and checkout mistakes in the terminal
    // instead of in a log file.
    let mut checkout = crate::session::resolve_checkout(&options.pod)?;
    crate::session::check_run(&mut checkout, options)?;
    omnidev_pod::link::resolve(
        &checkout.profile,
        &checkout.repo,
        &checkout.cache_root,
        &options.links,
    )
    .map_err(Error::from)?;
    let pod_dir = checkout.pod_dir.clone();
    if let LockState::Held { pid } = control::lock_state(&pod_dir)? {
        if options.clean {
            return Err(Error::Pod(omnidev_pod::Error::AlreadyRunning { pod_dir, pid }).into());
        }
        return already_running(&pod_dir, pid, ready_timeout, connection);
    }
    if options.clean {
        // Completed here, not in the background process, whose output file lives
        // in the pod directory.
        if let Some(said) = crate::session::clean_before_up(&pod_dir)? {
            note!("{said}");
        }
    }
    let pod = Pod::create(&pod_dir, &checkout.profile.pod_dirs()).map_err(Error::from)?;
    // One `up --detach` starts the pod at a time (a lock on its directory,
    // held until its background process holds the pod's lock); one that
    // waited here finds it running.
    let starting = std::fs::File::open(pod.dir())
        .and_then(|dir| dir.lock().map(|()| dir))
        .map_err(Error::io("lock", pod.dir()))?;
    if let LockState::Held { pid } = control::lock_state(&pod_dir)? {
        drop(starting);
        return already_running(&pod_dir, pid, ready_timeout, connection);
    }
    let log = pod.detached_log();
    let output = crate::detached_log::open(&pod, true).map_err(Error::io("create", &log))?;
    let stderr = output.try_clone().map_err(Error::io("open", &log))?;

    let handover = Handover { pod_dir: pod.dir().to_owned(), options: options.in_background() };
    let mut child = spawn_background(&handover, output, stderr)?;
    while matches!(child.try_wait(), Ok(None)) && control::lock_state(&pod_dir)? == LockState::Free
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(starting);
    let waited = wait_ready(Some(&mut child), &pod_dir, &log, ready_timeout, connection);
    let pid = child.id();
    let ended =
        |status: &control::PodStatus| status.services.iter().all(|s| s.status.state.is_terminal());
    let exit = match &waited {
        // Nothing is left to run: the background pod is ending (headless
        // ends when every service has), so it is reported as a pod that
        // could not start, not as one that keeps running.
        Ok(response) if !response.failed.is_empty() && ended(&response.status) => {
            wait_exit(&mut child, EXIT_GRACE)
        }
        _ => None,
    };
    if let Some(status) = exit {
        return Err(exited(status, &log).into());
    }
    std::thread::spawn(move || child.wait());
    Ok(Started { response: waited?, pod, pid: Some(pid), how: "running in the background" })
}

/// A background process that exited before its pod was ready.
fn exited(status: impl std::fmt::Display, log: &Path) -> Error {
    Error::DetachExited {
        status: status.to_string(),
        tail: tail(log, FAILURE_TAIL),
        log: log.to_path_buf(),
    }
}

/// `up --detach` on a pod that already runs (another `up` may have just
/// started it): once it is ready, what its starter prints (the pod
/// directory and URLs, exit 0, or the failed services, exit 1); with
/// `--clean`, whose directory cannot be removed now, it is an error.
fn already_running(
    pod_dir: &Path,
    pid: Option<u32>,
    timeout: Duration,
    connection: &CallConnection,
) -> miette::Result<Started> {
    let pod = Pod::at(pod_dir);
    let response = wait_ready(None, pod_dir, &pod.detached_log(), timeout, connection)?;
    Ok(Started { response, pod, pid, how: "already running" })
}

/// Starts this binary as `omnidev detached` in a new session, with
/// `output` as stdout and `stderr` as stderr, and writes `handover` to its
/// standard input.
fn spawn_background(
    handover: &Handover,
    output: std::fs::File,
    stderr: std::fs::File,
) -> miette::Result<Child> {
    let program = std::env::current_exe().map_err(Error::io("locate", "the omnidev binary"))?;
    let mut command = Command::new(&program);
    command.arg("detached").stdin(Stdio::piped()).stdout(output).stderr(stderr);
    // SAFETY: setsid is async-signal-safe and touches no memory of the
    // parent; it makes the child a session leader without a terminal, so
    // closing this terminal (SIGHUP) does not reach the pod.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|source| Error::DetachSpawn { program: program.clone(), source })?;
    let text = serde_json::to_string(handover).expect("the handover is plain data");
    if let Some(mut input) = child.stdin.take() {
        // A process that died before reading it is reported by the wait
        // for readiness, with its last lines; the end of file (the pipe
        // closed here) tells it the handover is whole.
        let _ = input.write_all(text.as_bytes());
    }
    Ok(child)
}

/// Asks the background pod's control socket `wait-ready` (retrying while it
/// is not listening yet), failing when the process exits first or the
/// deadline passes.
fn wait_ready(
    mut child: Option<&mut Child>,
    pod_dir: &Path,
    log: &Path,
    timeout: Duration,
    connection: &CallConnection,
) -> miette::Result<Completed> {
    let start = Instant::now();
    let timed_out = || Error::DetachTimeout { seconds: timeout.as_secs() };
    loop {
        if let Some(Ok(Some(status))) = child.as_mut().map(|c| c.try_wait()) {
            return Err(exited(status, log).into());
        }
        if child.is_none() && control::lock_state(pod_dir)? == LockState::Free {
            // Started by another `up --detach`, and ended before it was ready.
            return Err(exited("started by another `omnidev up --detach`", log).into());
        }
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(timed_out().into());
        }
        let answer = Ask::wait_ready(left).send_on(pod_dir, |stream| connection.keep(stream));
        if connection.cancelled() {
            return Err(miette::miette!("the call was cancelled"));
        }
        match answer {
            Ok(response) => return Ok(response),
            // Not listening yet: the pod is still preparing.
            Err(Error::Unreachable { source, .. })
                if source.kind() != std::io::ErrorKind::WouldBlock
                    && source.kind() != std::io::ErrorKind::TimedOut =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(Error::Unreachable { .. }) => return Err(timed_out().into()),
            // The pod closed the connection without answering: it ended
            // (e.g. its only service failed) while the request waited.
            Err(e @ Error::Protocol { .. }) => {
                return Err(match child.and_then(|c| wait_exit(c, EXIT_GRACE)) {
                    Some(status) => exited(status, log).into(),
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
fn report(started: &Started) -> miette::Result<ExitCode> {
    let Started { response, pod, pid, how } = started;
    let mut out = format!("pod {}\n", omnidev_core::text::quote_path(pod.dir()));
    let status = &response.status;
    for url in &status.urls {
        let _ = writeln!(out, "{} {}", url.name, url.url);
    }
    let pid = status.pid.or(*pid).map_or_else(|| "unknown".to_owned(), |p| p.to_string());
    let _ = writeln!(
        out,
        "{how} (pid {pid}); `omnidev attach`, `omnidev status`, `omnidev logs -f`, `omnidev stop`"
    );
    write_stdout(&out)?;
    if response.failed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let mut report = String::new();
    for (failure, name) in response.failures().iter().zip(&response.failed) {
        let _ = writeln!(report, "omnidev: {failure}; its last lines:");
        for line in tail(&pod.log_file(name), FAILURE_TAIL).lines() {
            let _ = writeln!(report, "  {name} | {line}");
        }
    }
    let links = &status.links;
    let waits_for_a_link = (response.failed.iter())
        .any(|name| name.split_once('.').is_some_and(|(link, _)| links.contains_key(link)));
    if waits_for_a_link {
        report.push_str(
            "omnidev: what waits for a linked pod starts once it is ready there \
             (`omnidev up --with-links` starts the linked pods that do not run)\n",
        );
    }
    report.push_str("omnidev: the pod keeps running; `omnidev stop` ends it\n");
    note!("{}", report.trim_end());
    Ok(ExitCode::FAILURE)
}

/// The last `n` lines of a log file (none when unreadable), each ending
/// in a line break, safe for a terminal (see `omnidev_core::text`).
fn tail(path: &Path, n: usize) -> String {
    let name = path.file_name().and_then(|f| f.to_str()?.strip_suffix(LOG_SUFFIX));
    let lines = match (path.parent(), name) {
        (Some(dir), Some(name)) => last_lines(dir, name, None, Tail::lines(n)).unwrap_or_default(),
        _ => Vec::new(),
    };
    lines.iter().map(|line| omnidev_core::text::plain(line) + "\n").collect()
}

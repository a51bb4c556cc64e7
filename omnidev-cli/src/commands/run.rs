//! `omnidev run [--port NAME] -- CMD…` (alias `exec`) and `omnidev omnigent
//! ARGS…`: run a one-off command with the pod's environment and ports —
//! those in `pod.toml`, or, in a checkout whose pod never ran, ports
//! allocated once and written there.

use std::process::ExitCode;

use omnidev_pod::python::PythonPin;

use crate::cli::{PodArgs, RunArgs};
use crate::error::{Error, Result};

/// Runs the command in the foreground with the pod's environment (and,
/// with `--port NAME`, `PORT` set to that port); returns its exit code
/// (128 + N when killed by signal N). Signals sent to omnidev are passed
/// on to it (see [`run_forwarding`]).
pub fn run(args: &RunArgs) -> Result<ExitCode> {
    let checkout = crate::session::resolve_checkout(&args.pod)?;
    run_in(&checkout, &args.command, &[], args.port.as_deref())
}

/// Runs `command` with the pod's environment, plus `extra` variables the
/// user's environment does not set already, and `PORT` from the port named
/// `port`.
fn run_in(
    checkout: &crate::session::Checkout,
    command: &[String],
    extra: &[(&str, &str)],
    port: Option<&str>,
) -> Result<ExitCode> {
    // Checked before the pod is made: a mistake leaves nothing behind.
    if let Some(name) = port {
        let bases = checkout.profile.port_bases(&std::collections::BTreeMap::new());
        if !bases.iter().any(|(base, _)| base == name) {
            return Err(omnidev_pod::Error::UnknownPort {
                name: name.to_owned(),
                known: bases.into_iter().map(|(base, _)| base).collect(),
            }
            .into());
        }
    }
    let beside = crate::session::prepare_beside(checkout)?;
    // Every port of the profile (its replicas' too) is in `pod.toml` now.
    let port = port.and_then(|name| beside.ports.get(name).copied());
    for notice in beside.notices {
        note!("omnidev: {notice}");
    }
    let Some((program, args)) = command.split_first() else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut child = tokio::process::Command::new(program);
    child
        .args(args)
        .envs(extra.iter().filter(|(name, _)| std::env::var_os(name).is_none()).copied())
        .envs(beside.rendered.env.iter());
    if let Some(port) = port {
        child.env("PORT", port.to_string());
    }
    let status = crate::session::runtime(false)?
        .block_on(run_forwarding(child))
        .map_err(Error::spawn(&program))?;
    Ok(exit_code(status))
}

/// Runs `command` to its end, forwarding the signals that would end
/// omnidev to it (omnidev ends when it does, with its status; it never
/// leaves the command behind).
///
/// SIGTERM and SIGHUP are always passed on. SIGINT and SIGQUIT too, unless
/// omnidev runs in the terminal's foreground: then Ctrl-C and Ctrl-\
/// reached the command already (it is in the same process group), as
/// under system(3), and it decides.
async fn run_forwarding(
    mut command: tokio::process::Command,
) -> std::io::Result<std::process::ExitStatus> {
    use nix::sys::signal::Signal;
    use tokio::signal::unix::{SignalKind, signal};
    // Listening before the command starts: no moment where a signal
    // would end omnidev alone.
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut quit = signal(SignalKind::quit())?;
    let mut child = command.spawn()?;
    let pid = child.id().and_then(|pid| i32::try_from(pid).ok());
    let forward = |sig: Signal| {
        // Not reaped before `wait` returns: the pid is still the child's.
        if let Some(pid) = pid {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    };
    loop {
        tokio::select! {
            status = child.wait() => return status,
            _ = term.recv() => forward(Signal::SIGTERM),
            _ = hup.recv() => forward(Signal::SIGHUP),
            _ = int.recv() => if !terminal_signals_it() { forward(Signal::SIGINT) },
            _ = quit.recv() => if !terminal_signals_it() { forward(Signal::SIGQUIT) },
        }
    }
}

/// Whether omnidev (and so its command) is in the foreground process
/// group of the terminal on its stdin: the terminal's Ctrl-C reaches both.
fn terminal_signals_it() -> bool {
    nix::unistd::tcgetpgrp(std::io::stdin()).is_ok_and(|group| group == nix::unistd::getpgrp())
}

/// `omnidev omnigent ARGS…` = `omnidev run -- uv run --python PIN
/// omnigent ARGS…`, PIN being the checkout's `.python-version` (else 3.12),
/// as the embedded profile's services run.
pub fn run_omnigent(pod: &PodArgs, args: &[String]) -> Result<ExitCode> {
    let checkout = crate::session::resolve_checkout(pod)?;
    let python = PythonPin::of_checkout(&checkout.repo).0.map_err(Error::Python)?;
    let mut command =
        ["uv", "run", "--python", python.as_str(), "omnigent"].map(str::to_owned).to_vec();
    command.extend(args.iter().cloned());
    // Like the pod's backend: a fresh worktree's first `uv run` builds the
    // package, whose hook would build the web bundle (Node 22 + pnpm).
    run_in(&checkout, &command, &[("OMNIGENT_SKIP_WEB_UI", "true")], None)
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    };
    ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1))
}

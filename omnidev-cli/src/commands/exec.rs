//! `omnidev exec -- CMD…` and `omnidev omnigent ARGS…`: run a command with
//! the pod's environment and persisted ports. Never allocates ports and
//! never writes `pod.toml`.

use std::process::ExitCode;

use omnidev_pod::{RenderContext, Selection};

use crate::cli::PodArgs;
use crate::error::{Error, Result};

/// Runs `command` in the foreground with the pod's environment; returns its
/// exit code (128 + N when killed by signal N).
pub fn run(pod: &PodArgs, command: &[String]) -> Result<ExitCode> {
    let checkout = crate::session::resolve_checkout(pod)?;
    let record = omnidev_pod::read_ports(&checkout.pod_dir)?;
    let mut ctx = RenderContext::from_process_env(
        checkout.repo.clone(),
        checkout.pod_dir.clone(),
        record.ports,
    );
    // Only the environment is needed: leave every service out, so no
    // package manager is looked up.
    ctx.selection = Selection {
        only: Vec::new(),
        skip: checkout.profile.services.keys().cloned().collect(),
    };
    let rendered = checkout.profile.render(&ctx)?;
    let Some((program, args)) = command.split_first() else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut child = std::process::Command::new(program)
        .args(args)
        .envs(&rendered.env)
        .spawn()
        .map_err(|source| Error::Spawn {
            program: program.clone(),
            source,
        })?;
    // Like system(3): Ctrl-C and Ctrl-\ are for the child (it is in the
    // same foreground process group); omnidev waits for it and passes its
    // exit code on.
    ignore_interactive_signals();
    let status = child.wait().map_err(|source| Error::Spawn {
        program: program.clone(),
        source,
    })?;
    Ok(exit_code(status))
}

/// `omnidev omnigent ARGS…` = `omnidev exec -- uv run omnigent ARGS…`.
pub fn run_omnigent(pod: &PodArgs, args: &[String]) -> Result<ExitCode> {
    let mut command = vec!["uv".to_owned(), "run".to_owned(), "omnigent".to_owned()];
    command.extend(args.iter().cloned());
    run(pod, &command)
}

fn ignore_interactive_signals() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    for sig in [Signal::SIGINT, Signal::SIGQUIT] {
        // SAFETY: installing SIG_IGN runs no handler code; no other thread
        // is manipulating signal dispositions at this point.
        let _ = unsafe { signal(sig, SigHandler::SigIgn) };
    }
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

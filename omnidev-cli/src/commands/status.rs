//! `omnidev status [--json]`: the current checkout's pod — directory,
//! ports, whether it runs, each service's state and pid.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use crate::cli::PodArgs;
use crate::control::{self, PodStatus};

/// Arguments of `omnidev status`.
#[derive(Debug, Args, Clone)]
pub struct StatusArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// Print JSON (schema 1, see docs/control.md).
    #[arg(long)]
    pub json: bool,
}

/// Runs `omnidev status`. Exits 0 whether or not the pod runs; the output
/// says which.
pub fn run(args: &StatusArgs) -> miette::Result<ExitCode> {
    let checkout = crate::commands::up::resolve_checkout(&args.pod)?;
    let status = control::inspect(&checkout.pod_dir)?;
    let text = if args.json {
        json(&status)?
    } else {
        render(&status)
    };
    write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Pretty JSON with a trailing newline.
pub fn json(value: &impl serde::Serialize) -> miette::Result<String> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| miette::miette!("could not encode JSON: {e}"))?;
    text.push('\n');
    Ok(text)
}

/// Writes to stdout; a closed pipe is not an error worth a backtrace.
pub fn write_stdout(text: &str) -> miette::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(crate::error::Error::Stdout(e).into()),
    }
}

/// The human form of a status.
pub fn render(status: &PodStatus) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "pod     {}", status.pod_dir.display());
    if let Some(repo) = &status.repo {
        let _ = writeln!(out, "repo    {}", repo.display());
    }
    let state = match (status.running, status.pid, status.control) {
        (false, _, _) => "not running".to_owned(),
        (true, Some(pid), true) => format!("running (pid {pid})"),
        (true, Some(pid), false) => format!("running (pid {pid}; control socket not answering)"),
        (true, None, _) => "running".to_owned(),
    };
    let _ = writeln!(out, "status  {state}");
    if !status.ports.is_empty() {
        let ports: Vec<String> = status
            .ports
            .iter()
            .map(|(name, port)| format!("{name}={port}"))
            .collect();
        let _ = writeln!(out, "ports   {}", ports.join(" "));
    }
    for url in &status.urls {
        let _ = writeln!(out, "{:<7} {}", url.name, url.url);
    }
    if !status.services.is_empty() {
        let width = status
            .services
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(0);
        out.push_str("services\n");
        for s in &status.services {
            let restarts = if s.restarts > 0 {
                format!(" ({} restarts)", s.restarts)
            } else {
                String::new()
            };
            let _ = writeln!(out, "  {:<width$}  {}{restarts}", s.name, s.detail);
        }
    }
    out
}

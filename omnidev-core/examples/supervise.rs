//! Runs a supervisor from the command line until SIGINT/SIGTERM/SIGHUP/SIGQUIT
//! or until every service has ended.
//!
//! ```text
//! supervise [--state FILE] [--log-dir DIR] [--grace-ms N] [--probe-cmd CMD] [--prepare CMD] [--] name=shell-command...
//! ```
//!
//! Each `name=command` runs `sh -c command` in the current directory; with
//! `--probe-cmd`, every service's readiness is `sh -c CMD` exiting 0; with
//! `--prepare`, every service first runs the prepare step `sh -c CMD`. Events
//! are printed one per line as `name | text`. Used by the orphan tests.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::time::Duration;

use omnidev_core::signals::ShutdownSignals;
use omnidev_core::{
    CommandSpec, EventKind, LogConfig, PrepareStep, PrepareWhen, ProbeSpec, Readiness, ServiceSpec,
    StopSpec, Supervisor, SupervisorConfig,
};

/// `sh -c command` in the current directory.
fn sh(command: &str) -> CommandSpec {
    CommandSpec {
        program: "sh".into(),
        args: vec!["-c".into(), command.to_owned()],
        cwd: ".".into(),
        env: omnidev_core::Env::default(),
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: supervise [--state FILE] [--log-dir DIR] [--grace-ms N] [--probe-cmd CMD] \
         [--prepare CMD] [--] name=cmd..."
    );
    std::process::exit(2)
}

#[tokio::main]
async fn main() -> miette::Result<()> {
    let mut state_file = None;
    let mut log_dir = None;
    let mut grace = Duration::from_secs(5);
    let mut probe = None;
    let mut prepare = None;
    let mut services = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--state" => state_file = Some(PathBuf::from(args.next().unwrap_or_else(|| usage()))),
            "--log-dir" => log_dir = Some(PathBuf::from(args.next().unwrap_or_else(|| usage()))),
            "--grace-ms" => {
                let ms = args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| usage());
                grace = Duration::from_millis(ms);
            }
            "--probe-cmd" => probe = Some(args.next().unwrap_or_else(|| usage())),
            "--prepare" => prepare = Some(args.next().unwrap_or_else(|| usage())),
            "--" => {}
            spec => {
                let Some((name, command)) = spec.split_once('=') else { usage() };
                let mut service = ServiceSpec::new(name, "sh", ["-c", command], ".");
                service.stop = StopSpec { grace, ..StopSpec::default() };
                service.readiness = probe.as_ref().map(|cmd: &String| Readiness {
                    probe: ProbeSpec::Command(sh(cmd)),
                    interval: Duration::from_millis(100),
                    listener: None,
                    timeout: Duration::from_secs(60),
                });
                service.prepare = prepare
                    .iter()
                    .map(|cmd| PrepareStep {
                        name: "prepare".into(),
                        command: sh(cmd),
                        when: PrepareWhen::Always,
                        heartbeat: Duration::from_secs(5),
                    })
                    .collect();
                services.push(service);
            }
        }
    }
    if services.is_empty() {
        usage();
    }
    let mut signals = ShutdownSignals::new().map_err(|e| miette::miette!("signals: {e}"))?;
    let supervisor = Supervisor::builder(SupervisorConfig {
        services,
        log: LogConfig { dir: log_dir, ..LogConfig::default() },
        state_file,
        containment: omnidev_core::ContainmentChoice::from_env()?,
        ..SupervisorConfig::default()
    })?
    .run()
    .await?;
    let mut events = supervisor.subscribe();
    let printer = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let who = event.service.unwrap_or_else(|| "omnidev".into());
            match event.kind {
                EventKind::Log { line } => println!("{who} | {}", line.text),
                other => println!("{who} | {other:?}"),
            }
        }
    });
    let settled = tokio::select! {
        signal = signals.recv() => {
            println!("omnidev | {signal:?}: shutting down");
            supervisor.shutdown().await?;
            None
        }
        settled = supervisor.wait_settled() => Some(settled),
    };
    supervisor.shutdown().await?;
    drop(supervisor);
    printer.abort();
    let ok = settled.is_none_or(|s| s.success);
    std::process::exit(i32::from(!ok))
}

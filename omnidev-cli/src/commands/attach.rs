//! `omnidev attach`: the TUI of a pod that runs without one (`up
//! --detach`, or an `up` in another terminal), over its control socket
//! (see `tui::attached`). `q` and Ctrl-C leave; the pod keeps running.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use tokio::signal::unix::{SignalKind, signal};

use crate::cli::AttachArgs;
use crate::error::{Error, Result};
use crate::tui::source::control::{self as attached, Connection, ControlSource};
use crate::tui::{self, Outcome};

/// Runs `omnidev attach`.
pub fn run(args: &AttachArgs) -> Result<ExitCode> {
    let pod_dir = crate::session::running_pod_dir(&args.pod)?;
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Error::NeedsTerminal { same_pod: args.pod.same_pod() });
    }
    let runtime = crate::session::runtime(false)?;
    let outcome = runtime.block_on(attach(&pod_dir, args.timestamps));
    // Not waiting for requests still out (a restart waits until the
    // service is ready, up to 300 s): the pod ends each one as its
    // connection closes with this process.
    runtime.shutdown_background();
    let outcome = outcome?;
    match outcome {
        Outcome::Ended(said) => note!("omnidev: {said}"),
        Outcome::Quit | Outcome::Signal | Outcome::Closed => note!(
            "omnidev: detached; the pod keeps running (`omnidev attach{same}` comes back, \
             `omnidev stop{same}` stops it)",
            same = args.pod.same_pod()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

async fn attach(pod_dir: &Path, timestamps: bool) -> Result<Outcome> {
    // Installed first: a signal while connecting leaves the same way.
    let mut interrupt = signal(SignalKind::interrupt()).map_err(Error::Runtime)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(Error::Runtime)?;
    let mut hangup = signal(SignalKind::hangup()).map_err(Error::Runtime)?;
    let connection = Connection::open(pod_dir)?;
    let mut app = attached::app(pod_dir, &connection);
    app.timestamps = timestamps;
    let source = ControlSource::new(pod_dir, connection);
    let quit = async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
            _ = hangup.recv() => {}
        }
    };
    tui::run(app, source, quit).await
}

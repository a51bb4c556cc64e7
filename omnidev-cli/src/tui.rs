//! The terminal UI: a loop that redraws on supervisor events, key presses
//! and resizes only — never on a timer — so an idle pod costs no CPU.
//!
//! The terminal is set up by `ratatui::try_init`, which also installs a
//! panic hook that restores the terminal before the panic message prints.
//!
//! Job control: Ctrl-Z (a key in raw mode) and a SIGTSTP from outside
//! both give the terminal back (cooked mode, main screen, cursor shown)
//! and stop omnidev; the pod's services run on (they are in sessions of
//! their own). On SIGCONT (`fg`) the UI takes the terminal again and
//! redraws everything.

pub mod app;
pub mod pane;
pub mod source;
pub mod view;

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossterm::event::{Event as TermEvent, KeyEvent};
use omnidev_core::Supervisor;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;

pub use app::{Action, App, PodInfo};
pub use source::{Feed, PodSource, Update};

use crate::control::protocol::UrlReport;
use crate::error::{Error, Result};
use crate::session::PreparedPod;

/// The shortest time between two redraws: a flood of log lines is drawn at
/// most this often, the lines in between coalesced into one frame.
const FRAME: Duration = Duration::from_millis(16);

/// What the input thread forwards.
enum Input {
    Key(KeyEvent),
    Resize,
}

/// Reads terminal input on a thread (crossterm's reader blocks). It wakes
/// once a second to see whether the UI has gone.
fn spawn_input_thread(stop: Arc<AtomicBool>) -> mpsc::UnboundedReceiver<Input> {
    let (tx, rx) = mpsc::unbounded_channel();
    let _ = std::thread::Builder::new().name("omnidev-input".to_owned()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match crossterm::event::poll(Duration::from_secs(1)) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => return,
            }
            let input = match crossterm::event::read() {
                Ok(TermEvent::Key(key)) => Input::Key(key),
                Ok(TermEvent::Resize(..)) => Input::Resize,
                Ok(_) => continue,
                Err(_) => return,
            };
            if tx.send(input).is_err() {
                return;
            }
        }
    });
    rx
}

/// How the UI ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `q` or Ctrl-C (or the terminal went away).
    Quit,
    /// A signal (`quit` resolved).
    Signal,
    /// The pod stopped: what the UI said about it.
    Ended(String),
    /// The source went away.
    Closed,
}

/// Runs the TUI on `source` until `q`/Ctrl-C, the pod's end, or `quit`
/// resolves (a signal), handing every other [`Action`] to the source. The
/// terminal is restored before this returns.
pub async fn run<S: Feed>(app: App, source: S, quit: impl Future<Output = ()>) -> Result<Outcome> {
    // Before the terminal changes, so a SIGTSTP can never find it raw.
    let job_control = JobControl::new().map_err(Error::Terminal)?;
    let mut terminal = ratatui::try_init().map_err(Error::Terminal)?;
    let stop = Arc::new(AtomicBool::new(false));
    let keys = spawn_input_thread(stop.clone());
    let result = event_loop(&mut terminal, app, source, keys, job_control, quit).await;
    stop.store(true, Ordering::Relaxed);
    ratatui::restore();
    result
}

async fn event_loop<S: Feed>(
    terminal: &mut ratatui::DefaultTerminal,
    mut app: App,
    mut source: S,
    mut keys: mpsc::UnboundedReceiver<Input>,
    mut job_control: JobControl,
    quit: impl Future<Output = ()>,
) -> Result<Outcome> {
    tokio::pin!(quit);
    let mut last_draw: Option<Instant> = None;
    // Every wake-up below changed something, so each turn draws once.
    loop {
        if let Some(rest) = last_draw.and_then(|at| FRAME.checked_sub(at.elapsed())) {
            tokio::time::sleep(rest).await;
            if let Some(end) = drain(&mut app, &mut source) {
                return finish(terminal, &mut app, end);
            }
        }
        terminal.draw(|frame| view::render(&mut app, frame)).map_err(Error::Terminal)?;
        last_draw = Some(Instant::now());
        tokio::select! {
            biased;
            () = &mut quit => return Ok(Outcome::Signal),
            input = keys.recv() => match input {
                Some(Input::Key(key)) => {
                    match app.handle_key(key) {
                        Some(Action::Quit) => return Ok(Outcome::Quit),
                        Some(Action::Suspend) => suspend(terminal),
                        Some(action) => source.act(action),
                        None => {}
                    }
                }
                Some(Input::Resize) => {}
                // The input thread is gone (no terminal any more).
                None => return Ok(Outcome::Quit),
            },
            _ = job_control.stop.recv() => suspend(terminal),
            // Also after a stop omnidev did not see (SIGSTOP), or a `bg`
            // that left the terminal to the shell: take it again.
            _ = job_control.cont.recv() => resume(terminal),
            update = source.next() => {
                let end = apply(&mut app, update)
                    .or_else(|| drain(&mut app, &mut source));
                if let Some(end) = end {
                    return finish(terminal, &mut app, end);
                }
            }
        }
    }
}

/// Takes in one update; `Some` when the UI is to leave.
pub(crate) fn apply(app: &mut App, update: Update) -> Option<Outcome> {
    match update {
        Update::Event(event) => app.apply(&event),
        Update::Refill { why } => app.refill(why),
        Update::Status { statuses, urls } => {
            app.apply_snapshot(&statuses);
            app.info.urls = urls;
        }
        Update::Usage(usage) => app.info.usage = Some(usage),
        Update::Message(message) => app.message = Some(message),
        Update::Ended(said) => return Some(Outcome::Ended(said)),
        Update::Closed => return Some(Outcome::Closed),
    }
    None
}

/// Draws the pod's end once (the last lines and what ended it) before the
/// UI leaves.
fn finish(terminal: &mut ratatui::DefaultTerminal, app: &mut App, end: Outcome) -> Result<Outcome> {
    if let Outcome::Ended(said) = &end {
        app.message = Some(said.clone());
        terminal.draw(|frame| view::render(app, frame)).map_err(Error::Terminal)?;
    }
    Ok(end)
}

/// SIGTSTP and SIGCONT, handled while the UI owns the terminal.
struct JobControl {
    stop: Signal,
    cont: Signal,
}

impl JobControl {
    /// Replaces SIGTSTP's default action (stopping at once, the terminal
    /// left raw) for the rest of the process.
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            stop: signal(SignalKind::from_raw(libc::SIGTSTP))?,
            cont: signal(SignalKind::from_raw(libc::SIGCONT))?,
        })
    }
}

/// Gives the terminal back and stops this process until SIGCONT; then
/// takes the terminal again.
fn suspend(terminal: &mut ratatui::DefaultTerminal) {
    let _ = terminal.show_cursor();
    ratatui::restore();
    // SIGSTOP, not SIGTSTP: SIGTSTP is handled (it brought us here). To
    // the shell both are a stopped job. The process stops inside kill(2)
    // and carries on from here when continued.
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    resume(terminal);
}

/// Raw mode, the alternate screen and a full redraw at the next frame.
/// Failing (continued in the background: the terminal is the shell's) is
/// left to the next SIGCONT.
fn resume(terminal: &mut ratatui::DefaultTerminal) {
    if crossterm::terminal::enable_raw_mode().is_err() {
        return;
    }
    let _ = crossterm::execute!(std::io::stdout(), crossterm::terminal::EnterAlternateScreen);
    let _ = terminal.clear();
}

/// Applies every update already waiting, so a burst becomes one redraw;
/// `Some` when the UI is to leave.
fn drain<S: Feed>(app: &mut App, source: &mut S) -> Option<Outcome> {
    while let Some(update) = source.try_next() {
        if let Some(end) = apply(app, update) {
            return Some(end);
        }
    }
    None
}

/// Runs the TUI on a started pod until the user quits or a signal comes.
pub async fn run_pod(
    prepared: &PreparedPod,
    supervisor: &Supervisor,
    signals: &mut omnidev_core::signals::ShutdownSignals,
    addresses: &crate::session::SharedAddresses,
    live: &Arc<crate::live_profile::LiveProfile>,
) -> Result<ExitCode> {
    // Panes in start order, as `status` and `omnidev attach` list them.
    let specs = &prepared.rendered.services;
    let services = omnidev_core::start_order(specs)
        .unwrap_or_else(|_| (0..specs.len()).collect())
        .into_iter()
        .map(|i| specs[i].name.clone())
        .collect();
    let watched = prepared.rendered.watched();
    let mut app = App::new(
        PodInfo {
            pod_dir: prepared.pod.dir().to_owned(),
            urls: UrlReport::shown(&prepared.rendered.urls, &supervisor.snapshot()),
            usage: None,
        },
        services,
        watched,
    )
    .showing(supervisor.history().clone());
    app.timestamps = prepared.timestamps;
    app.apply_snapshot(&supervisor.snapshot());
    for notice in &prepared.notices {
        supervisor.notice(notice.clone());
    }
    let source = PodSource::new(supervisor.clone(), addresses.clone(), Some(live.clone()));
    run(app, source, async {
        signals.recv().await;
    })
    .await?;
    note!("omnidev: stopping the pod…");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(name: &str, port: u16) -> omnidev_core::NamedUrl {
        omnidev_core::NamedUrl { name: name.into(), url: format!("http://localhost:{port}") }
    }

    fn shown(urls: &[UrlReport]) -> Vec<(&str, &str)> {
        urls.iter().map(|u| (u.name.as_str(), u.url.as_str())).collect()
    }

    /// The header shows the pod's URLs from the start and a service's once
    /// core shows it (ready), and follows a moved port of either.
    #[tokio::test]
    async fn the_header_shows_what_core_shows_and_follows_a_moved_port() {
        let dir = tempfile::tempdir().expect("tempdir");
        let addresses: crate::session::SharedAddresses = Arc::default();
        addresses.lock().expect("lock").urls = vec![url("docs", 8000)];
        let mut app = App::new(
            PodInfo { pod_dir: "/pod".into(), urls: Vec::new(), usage: None },
            vec!["server".into()],
            Vec::new(),
        );
        // Ready (its line printed) only once the test lets it.
        let mut server = omnidev_core::ServiceSpec::new(
            "server",
            "sh",
            ["-c", "while [ ! -e go ]; do sleep 0.05; done; echo up; exec sleep 1000"],
            dir.path(),
        );
        server.readiness = Some(omnidev_core::Readiness {
            probe: omnidev_core::ProbeSpec::Log { pattern: "^up$".into() },
            interval: std::time::Duration::from_millis(50),
            timeout: std::time::Duration::from_mins(1),
            listener: None,
        });
        server.urls = vec![url("server", 6767)];
        let builder = Supervisor::builder(omnidev_core::SupervisorConfig {
            services: vec![server.clone()],
            ..omnidev_core::SupervisorConfig::default()
        })
        .expect("a valid graph");
        let supervisor = builder.run().await.expect("supervisor");
        let mut source = PodSource::new(supervisor.clone(), addresses.clone(), None);
        let deadline = std::time::Duration::from_secs(20);
        // Running, its probe waiting: the pod's URL alone.
        omnidev_test_support::poll_until_async("the server started", deadline, || {
            supervisor.snapshot().iter().any(|s| s.pid().is_some())
        })
        .await;
        assert_eq!(drain(&mut app, &mut source), None);
        assert_eq!(shown(&app.info.urls), [("docs", "http://localhost:8000")]);
        std::fs::write(dir.path().join("go"), "").expect("go");
        let deadline = std::time::Duration::from_secs(20);
        omnidev_test_support::poll_until_async("the server's URL shown", deadline, || {
            drain(&mut app, &mut source);
            app.info.urls.len() == 2
        })
        .await;
        assert_eq!(
            shown(&app.info.urls),
            [("docs", "http://localhost:8000"), ("server", "http://localhost:6767")]
        );

        addresses.lock().expect("lock").urls = vec![url("docs", 8001)];
        server.urls = vec![url("server", 6790)];
        supervisor.apply(vec![server]).await.expect("apply");
        assert_eq!(drain(&mut app, &mut source), None);
        assert_eq!(
            shown(&app.info.urls),
            [("docs", "http://localhost:8001"), ("server", "http://localhost:6790")]
        );
        supervisor.shutdown().await.expect("shutdown");
    }

    /// `up`'s UI reads the supervisor's history through a cursor of its
    /// own: one that fell behind what is kept (10,000 lines) is told, right
    /// where they are missing, exactly how many lines it missed, and goes
    /// on with the oldest line kept; its header is core's status, handed
    /// on apart from the history, so a gap loses nothing of it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ui_behind_the_history_is_told_exactly_what_it_missed() {
        use omnidev_core::{Event, EventKind};
        let dir = tempfile::tempdir().expect("tempdir");
        let printer = omnidev_core::ServiceSpec::new(
            "printer",
            "sh",
            ["-c", "seq 1 12000; exec sleep 100"],
            dir.path(),
        );
        let supervisor = Supervisor::builder(omnidev_core::SupervisorConfig {
            services: vec![printer],
            ..omnidev_core::SupervisorConfig::default()
        })
        .expect("a valid graph")
        .run()
        .await
        .expect("supervisor");
        let mut source =
            PodSource::new(supervisor.clone(), crate::session::SharedAddresses::default(), None);
        // Not reading while all of it is printed.
        let history = supervisor.history();
        omnidev_test_support::poll_until_async(
            "the last line kept",
            std::time::Duration::from_secs(60),
            || {
                let mut all = history.cursor(false, false);
                let last = |k: &omnidev_core::history::Kept| {
                    matches!(k, omnidev_core::history::Kept::Line(l) if l.text == "12000")
                };
                !history.read(&mut all, usize::MAX, false, last).kept.is_empty()
            },
        )
        .await;
        let mut updates = Vec::new();
        while let Some(update) = source.try_next() {
            let last_line = matches!(&update, Update::Event(Event { kind: EventKind::Log { line }, .. }) if line.text == "12000");
            updates.push(update);
            if last_line {
                break;
            }
        }
        let lost = updates
            .iter()
            .position(|u| matches!(u, Update::Event(Event { kind: EventKind::Lost { .. }, .. })))
            .expect("a gap said");
        let Update::Event(said) = &updates[lost] else { unreachable!() };
        assert!(said.to_string().contains("2000 lines and 0 other records"), "{said}");
        assert!(
            matches!(&updates[0], Update::Status { statuses, .. } if statuses.len() == 1),
            "core's status first"
        );
        let lines: Vec<&str> = updates
            .iter()
            .filter_map(|u| match u {
                Update::Event(Event { kind: EventKind::Log { line }, .. }) => {
                    Some(line.text.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(lines.first(), Some(&"2001"), "the oldest kept next");
        assert_eq!(lines.len(), 10_000);
        supervisor.shutdown().await.expect("shutdown");
    }
}

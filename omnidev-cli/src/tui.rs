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
pub mod view;

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossterm::event::{Event as TermEvent, KeyEvent};
use omnidev_core::{Event, LogConfig, LogLine, ServiceStatus, Supervisor};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{broadcast, mpsc};

pub use app::{Action, App, PodInfo};

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
    let _ = std::thread::Builder::new()
        .name("omnidev-input".to_owned())
        .spawn(move || {
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

/// Where the TUI's state comes from: the supervisor's events, and a way to
/// catch up with its current state when events were lost.
pub struct Feed<S> {
    /// Every event, subscribed before the services started.
    pub events: broadcast::Receiver<Event>,
    /// The supervisor's statuses and combined log buffer now.
    pub catch_up: S,
    /// The pod's current ports and URLs (a port lost before its service
    /// bound it moves): the header follows them.
    pub addresses: Option<crate::session::SharedAddresses>,
}

/// What the TUI re-reads from the supervisor after falling behind.
#[derive(Debug, Default)]
pub struct CatchUp {
    /// Every service's status.
    pub statuses: Vec<ServiceStatus>,
    /// The combined ring buffer, oldest first.
    pub logs: Vec<LogLine>,
}

/// Runs the TUI until `q`/Ctrl-C or `quit` resolves (a signal), carrying
/// out every other [`Action`] through `on_action`. The terminal is
/// restored before this returns.
pub async fn run<F, S>(
    app: App,
    feed: Feed<S>,
    on_action: F,
    quit: impl Future<Output = ()>,
) -> Result<()>
where
    F: FnMut(Action),
    S: Fn() -> CatchUp,
{
    // Before the terminal changes, so a SIGTSTP can never find it raw.
    let job_control = JobControl::new().map_err(Error::Terminal)?;
    let mut terminal = ratatui::try_init().map_err(Error::Terminal)?;
    let stop = Arc::new(AtomicBool::new(false));
    let keys = spawn_input_thread(stop.clone());
    let result = event_loop(&mut terminal, app, feed, keys, job_control, on_action, quit).await;
    stop.store(true, Ordering::Relaxed);
    ratatui::restore();
    result
}

async fn event_loop<F, S>(
    terminal: &mut ratatui::DefaultTerminal,
    mut app: App,
    mut feed: Feed<S>,
    mut keys: mpsc::UnboundedReceiver<Input>,
    mut job_control: JobControl,
    mut on_action: F,
    quit: impl Future<Output = ()>,
) -> Result<()>
where
    F: FnMut(Action),
    S: Fn() -> CatchUp,
{
    tokio::pin!(quit);
    let mut last_draw: Option<Instant> = None;
    // Every wake-up below changed something, so each turn draws once.
    loop {
        if let Some(rest) = last_draw.and_then(|at| FRAME.checked_sub(at.elapsed())) {
            tokio::time::sleep(rest).await;
            drain(&mut app, &mut feed);
        }
        terminal
            .draw(|frame| view::render(&mut app, frame))
            .map_err(Error::Terminal)?;
        last_draw = Some(Instant::now());
        tokio::select! {
            biased;
            () = &mut quit => return Ok(()),
            input = keys.recv() => match input {
                Some(Input::Key(key)) => {
                    match app.handle_key(key) {
                        Some(Action::Quit) => return Ok(()),
                        Some(Action::Suspend) => suspend(terminal),
                        Some(action) => on_action(action),
                        None => {}
                    }
                }
                Some(Input::Resize) => {}
                // The input thread is gone (no terminal any more).
                None => return Ok(()),
            },
            // Only while a wrapper (uv run) has not started its child yet:
            // an idle UI reads nothing.
            () = tokio::time::sleep(app::MAIN_PID_LOOK_EVERY), if app.looking_for_main_pids() => {
                app.look_for_main_pids();
            }
            _ = job_control.stop.recv() => suspend(terminal),
            // Also after a stop omnidev did not see (SIGSTOP), or a `bg`
            // that left the terminal to the shell: take it again.
            _ = job_control.cont.recv() => resume(terminal),
            event = feed.events.recv() => {
                match event {
                    Ok(event) => app.apply(&event),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        app.lagged(n, &(feed.catch_up)());
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                }
                drain(&mut app, &mut feed);
            }
        }
    }
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

/// Applies every event already queued, so a burst becomes one redraw.
fn drain<S: Fn() -> CatchUp>(app: &mut App, feed: &mut Feed<S>) {
    loop {
        match feed.events.try_recv() {
            Ok(event) => app.apply(&event),
            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                app.lagged(n, &(feed.catch_up)());
            }
            Err(_) => break,
        }
    }
    if let Some(addresses) = &feed.addresses {
        let addresses = addresses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if addresses.urls != app.info.urls {
            app.info.urls.clone_from(&addresses.urls);
        }
    }
}

/// Runs the TUI on a started pod until the user quits or a signal comes.
pub async fn run_pod(
    prepared: &PreparedPod,
    supervisor: &Supervisor,
    events: tokio::sync::broadcast::Receiver<omnidev_core::Event>,
    signals: &mut omnidev_core::signals::ShutdownSignals,
    addresses: &crate::session::SharedAddresses,
) -> Result<ExitCode> {
    let services = prepared
        .rendered
        .services
        .iter()
        .map(|s| s.name.clone())
        .collect();
    let backend = prepared
        .rendered
        .watch
        .iter()
        .map(|w| w.service.clone())
        .collect();
    let mut app = App::new(
        PodInfo {
            pod_dir: prepared.pod.dir().to_owned(),
            urls: prepared.rendered.urls.clone(),
        },
        services,
        backend,
        LogConfig::default().ring_lines,
    );
    app.apply_snapshot(&supervisor.snapshot());
    for notice in &prepared.notices {
        app.panes[0].push(pane::PaneLine::new("omnidev", notice, true));
    }
    let handle = supervisor.clone();
    let on_action = move |action: Action| {
        let supervisor = handle.clone();
        tokio::spawn(async move {
            // Errors here only mean the supervisor is shutting down.
            let _ = match action {
                Action::Restart(name) => supervisor.restart(&name).await,
                Action::Reload(names) => {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    supervisor.reload(&names).await
                }
                Action::Stop(name) => supervisor.stop_service(&name).await,
                Action::Start(name) => supervisor.start_service(&name).await,
                Action::ClearLogs(name) => supervisor.clear_logs(name.as_deref()),
                Action::Quit | Action::Suspend => Ok(()),
            };
        });
    };
    let catch_up = {
        let supervisor = supervisor.clone();
        move || CatchUp {
            statuses: supervisor.snapshot(),
            logs: supervisor.logs(None).unwrap_or_default(),
        }
    };
    let feed = Feed {
        events,
        catch_up,
        addresses: Some(addresses.clone()),
    };
    run(app, feed, on_action, async {
        signals.recv().await;
    })
    .await?;
    note!("omnidev: stopping the pod…");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(port: u16) -> omnidev_pod::RenderedUrl {
        omnidev_pod::RenderedUrl {
            name: "server".into(),
            url: format!("http://localhost:{port}"),
            service: Some("server".into()),
        }
    }

    #[test]
    fn the_header_follows_a_moved_port() {
        let addresses: crate::session::SharedAddresses = Arc::default();
        addresses.lock().expect("lock").urls = vec![url(6767)];
        let mut app = App::new(
            PodInfo {
                pod_dir: "/pod".into(),
                urls: vec![url(6767)],
            },
            vec!["server".into()],
            Vec::new(),
            100,
        );
        let (_sender, events) = broadcast::channel(4);
        let mut feed = Feed {
            events,
            catch_up: CatchUp::default,
            addresses: Some(addresses.clone()),
        };
        addresses.lock().expect("lock").urls = vec![url(6790)];
        drain(&mut app, &mut feed);
        assert_eq!(app.info.urls, [url(6790)]);
    }
}

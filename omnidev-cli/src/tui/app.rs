//! The TUI's state: panes over the pod's history, the services' states
//! as core's status gives them, focus, search, wrap, and the key table.
//! Pure: side effects are returned as [`Action`]s.

use std::path::PathBuf;
use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use omnidev_core::{Event, EventKind, History, ServiceState, ServiceStatus};

use super::pane::{Direction, Pane, Pattern};

/// What the header shows about the pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInfo {
    /// The pod directory.
    pub pod_dir: PathBuf,
    /// The URLs the pod shows now (core's: a service's while it runs
    /// ready).
    pub urls: Vec<crate::control::protocol::UrlReport>,
    /// What the pod's services hold now, measured every
    /// [`crate::output::LIVE_USAGE_EVERY`] while the UI is open.
    pub usage: Option<omnidev_core::platform::Usage>,
}

/// A side effect the front-end loop must carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Shut the pod down and leave.
    Quit,
    /// Restart one service (its dependents follow).
    Restart(String),
    /// Reload these services (the watched ones, dependents following).
    Reload(Vec<String>),
    /// Stop one service (the pod and its dependents run on).
    Stop(String),
    /// Start one stopped or ended service again.
    Start(String),
    /// Apply the changed profile file (`omnidev reload-profile`).
    ReloadProfile,
    /// Give the terminal back and stop, as Ctrl-Z does in a cooked
    /// terminal; the pod keeps running.
    Suspend,
}

/// Keyboard mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// The key table applies.
    Normal,
    /// Typing a search pattern.
    Search {
        /// Which way it will search.
        direction: Direction,
        /// What has been typed.
        input: String,
    },
}

/// The whole TUI state.
#[derive(Debug, Clone)]
pub struct App {
    /// Header data.
    pub info: PodInfo,
    /// Services in display order (pane `i + 1` is `services[i]`), each
    /// as core's status last gave it.
    pub services: Vec<ServiceStatus>,
    /// Pane 0 is the combined one; then one per service.
    pub panes: Vec<Pane>,
    /// Focused pane index.
    pub focus: usize,
    /// Whether long lines wrap.
    pub wrap: bool,
    /// Whether lines start with their time (`t`; `--timestamps`).
    pub timestamps: bool,
    /// Keyboard mode.
    pub mode: Mode,
    /// The last search.
    pub pattern: Option<Pattern>,
    /// The last search's direction.
    pub direction: Direction,
    /// A one-line message in the footer (search results, errors).
    pub message: Option<String>,
    /// Services `R` reloads: those with watch rules, every one when none has.
    pub watched: Vec<String>,
    /// The UI of a pod that runs on without it (`omnidev attach`): `q`
    /// leaves, the pod keeps running.
    pub attached: bool,
    /// What applying the changed profile file (`P`) would change, while
    /// a change is waiting to be applied.
    pub profile_pending: Option<String>,
    /// The history the panes show.
    pub output: Scrollback,
}

/// The history a UI's panes show.
#[derive(Debug, Clone)]
pub enum Scrollback {
    /// One the UI keeps of the events it takes in (`omnidev attach`).
    Own(Arc<History>),
    /// The supervisor's (`omnidev up`): the events the UI takes in only
    /// tell it the states.
    Supervisor(Arc<History>),
}

impl Scrollback {
    /// The history.
    pub fn history(&self) -> &Arc<History> {
        match self {
            Scrollback::Own(history) | Scrollback::Supervisor(history) => history,
        }
    }
}

impl App {
    /// A fresh state for these services, keeping a history of its own of
    /// the lines and events it takes in ([`App::showing`] shows the
    /// supervisor's instead).
    pub fn new(info: PodInfo, services: Vec<String>, watched: Vec<String>) -> Self {
        let mut app = Self {
            info,
            services: Vec::new(),
            panes: vec![Pane::new(None)],
            focus: 0,
            wrap: false,
            timestamps: false,
            mode: Mode::Normal,
            pattern: None,
            direction: Direction::Forward,
            message: None,
            watched,
            attached: false,
            profile_pending: None,
            output: Scrollback::Own(Arc::default()),
        };
        for name in services {
            app.add_service(&name);
        }
        app
    }

    /// Shows `history`, which the supervisor keeps (`omnidev up`): the
    /// events taken in only tell the states.
    #[must_use]
    pub fn showing(mut self, history: Arc<History>) -> Self {
        self.output = Scrollback::Supervisor(history);
        self
    }

    /// Gives a service added by an applied profile its view and pane
    /// (last; it keeps its number while the UI runs).
    fn add_service(&mut self, name: &str) -> usize {
        self.services.push(ServiceStatus::new(name, ServiceState::Waiting));
        self.panes.push(Pane::new(Some(name)));
        self.services.len() - 1
    }

    fn service_index(&self, name: &str) -> Option<usize> {
        self.services.iter().position(|s| s.name == name)
    }

    /// `s`: stops the focused service when it runs (or waits), starts it
    /// when it is down.
    fn stop_or_start(&mut self) -> Option<Action> {
        let Some(view) = self.focus.checked_sub(1).and_then(|i| self.services.get(i)) else {
            self.message =
                Some("s stops or starts the focused service: pick one with 1-9".to_owned());
            return None;
        };
        let name = view.name.clone();
        Some(if view.state.is_terminal() {
            self.message = Some(format!("starting {name}"));
            Action::Start(name)
        } else {
            self.message = Some(format!("stopping {name} (s starts it again)"));
            Action::Stop(name)
        })
    }

    /// `P`: applies the profile file (what it did comes as an event).
    fn reload_profile(&mut self) -> Action {
        self.message = Some(if self.profile_pending.is_some() {
            "applying the changed profile…".to_owned()
        } else {
            "applying the profile file (no change noticed)…".to_owned()
        });
        Action::ReloadProfile
    }

    /// The service of the focused pane (`None` for the combined pane).
    pub fn focused_service(&self) -> Option<&str> {
        self.focus.checked_sub(1).and_then(|i| self.services.get(i)).map(|s| s.name.as_str())
    }

    /// Title of pane `index`.
    pub fn pane_title(&self, index: usize) -> &str {
        index.checked_sub(1).and_then(|i| self.services.get(i)).map_or("all", |s| s.name.as_str())
    }

    /// Takes in statuses from a supervisor snapshot (a service it does
    /// not know yet gets its pane).
    pub fn apply_snapshot(&mut self, statuses: &[ServiceStatus]) {
        for status in statuses {
            let i =
                self.service_index(&status.name).unwrap_or_else(|| self.add_service(&status.name));
            self.services[i].clone_from(status);
        }
    }

    /// Takes in one supervisor event: its line is shown, and a changed
    /// profile waiting to be applied is noted. The services' states and
    /// restarts are core's, from its status ([`App::apply_snapshot`]):
    /// nothing of them is derived from events here.
    pub fn apply(&mut self, event: &Event) {
        match &event.kind {
            // Whether there is something to apply is the pod's to say.
            EventKind::ProfileChanged(omnidev_core::ProfileChange { apply, .. }) => {
                self.profile_pending.clone_from(apply);
            }
            EventKind::ProfileApplied(_) => self.profile_pending = None,
            _ => {}
        }
        self.keep(event);
    }

    /// Keeps `event` in the UI's own history, when it keeps one.
    fn keep(&self, event: &Event) {
        let Scrollback::Own(history) = &self.output else {
            return;
        };
        match &event.kind {
            EventKind::Log { line } => history.push_lines(&[Arc::new(line.clone())]),
            EventKind::PartialLine { line } => history.push_partial(Arc::new(line.clone())),
            _ => history.push_event(event),
        }
    }

    /// Starts the UI's own history over for a refill (what the pod kept
    /// follows), saying `why`.
    pub fn refill(&mut self, why: String) {
        if let Scrollback::Own(history) = &mut self.output {
            *history = Arc::default();
            for pane in &mut self.panes {
                pane.clear(history);
            }
        }
        self.message = Some(why);
    }

    /// Handles a key press; returns the side effect to carry out, if any.
    pub fn handle_key(&mut self, key: KeyEvent) -> Option<Action> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) {
            // Raw mode turns these into keys instead of signals.
            match key.code {
                KeyCode::Char('c') => return Some(Action::Quit),
                KeyCode::Char('z') => return Some(Action::Suspend),
                _ => {}
            }
        }
        if let Mode::Search { direction, input } = &mut self.mode {
            match key.code {
                KeyCode::Esc => self.mode = Mode::Normal,
                KeyCode::Enter => {
                    let direction = *direction;
                    let typed = std::mem::take(input);
                    self.mode = Mode::Normal;
                    // An empty pattern repeats the last search, as in less.
                    if let Some(p) = Pattern::new(&typed) {
                        self.pattern = Some(p);
                        self.panes[self.focus].current_match = None;
                    }
                    self.direction = direction;
                    self.run_search(direction);
                }
                KeyCode::Backspace if input.pop().is_none() => self.mode = Mode::Normal,
                KeyCode::Char(c) => input.push(c),
                _ => {}
            }
            return None;
        }
        self.message = None;
        let page = self.panes[self.focus].view_height.max(1);
        match key.code {
            KeyCode::Char('q') => return Some(Action::Quit),
            KeyCode::Char(c @ '0'..='9') => {
                let index = c as usize - '0' as usize;
                if index <= self.services.len() {
                    self.focus = index;
                }
            }
            KeyCode::Tab => self.focus = (self.focus + 1) % self.panes.len(),
            KeyCode::BackTab => {
                self.focus = (self.focus + self.panes.len() - 1) % self.panes.len();
            }
            KeyCode::Up | KeyCode::Char('k') => self.scroll(false, 1),
            KeyCode::Down | KeyCode::Char('j') => self.scroll(true, 1),
            KeyCode::PageUp => self.scroll(false, page),
            KeyCode::PageDown | KeyCode::Char(' ') => self.scroll(true, page),
            KeyCode::Char('u') => self.scroll(false, page.div_ceil(2)),
            KeyCode::Char('d') => self.scroll(true, page.div_ceil(2)),
            KeyCode::Char('g') | KeyCode::Home => self.panes[self.focus].scroll_to_top(),
            KeyCode::Char('G') | KeyCode::End => self.panes[self.focus].scroll_to_bottom(),
            KeyCode::Char('f' | 'F') => self.panes[self.focus].toggle_follow(),
            KeyCode::Char('w') => self.wrap = !self.wrap,
            KeyCode::Char('t') => self.timestamps = !self.timestamps,
            KeyCode::Char(c @ ('/' | '?')) => {
                self.mode = Mode::Search {
                    direction: if c == '/' { Direction::Forward } else { Direction::Backward },
                    input: String::new(),
                };
            }
            KeyCode::Char('n') => self.run_search(self.direction),
            KeyCode::Char('N') => self.run_search(self.direction.reversed()),
            KeyCode::Esc => {
                self.pattern = None;
                self.panes[self.focus].current_match = None;
            }
            KeyCode::Char('c') => self.panes[self.focus].clear(self.output.history()),
            KeyCode::Char('r') => {
                if let Some(name) = self.focused_service().map(str::to_owned) {
                    self.message = Some(format!("restarting {name}"));
                    return Some(Action::Restart(name));
                }
                self.message = Some("r restarts the focused service: pick one with 1-9".to_owned());
                return None;
            }
            KeyCode::Char('s') => return self.stop_or_start(),
            KeyCode::Char('P') => return Some(self.reload_profile()),
            KeyCode::Char('R') => {
                if self.watched.is_empty() {
                    self.message = Some("no service to reload".to_owned());
                    return None;
                }
                self.message = Some(format!("reloading {}", self.watched.join(", ")));
                return Some(Action::Reload(self.watched.clone()));
            }
            _ => {}
        }
        None
    }

    /// Scrolls the focused pane `lines` down (or up).
    fn scroll(&mut self, down: bool, lines: usize) {
        let pane = &mut self.panes[self.focus];
        if down {
            pane.scroll_down(self.output.history(), lines);
        } else {
            pane.scroll_up(self.output.history(), lines);
        }
    }

    fn run_search(&mut self, direction: Direction) {
        let Some(pattern) = self.pattern.clone() else {
            self.message = Some("no search yet: / or ? to search".to_owned());
            return;
        };
        let history = self.output.history();
        self.message = match self.panes[self.focus].search(history, &pattern, direction) {
            None => Some(format!("pattern not found: {}", pattern.as_str())),
            Some(true) => Some("search wrapped around".to_owned()),
            Some(false) => None,
        };
    }
}

#[cfg(test)]
impl App {
    /// The text of every line pane `pane` shows.
    pub fn shown(&self, pane: usize) -> Vec<String> {
        self.panes[pane].all(self.output.history()).into_iter().map(|line| line.raw).collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::SystemTime;

    use omnidev_core::{LogLine, Stream};

    use super::*;

    pub(crate) fn key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    fn app() -> App {
        App::new(PodInfo::default(), vec!["server".into(), "host".into()], vec!["server".into()])
    }

    /// A line of `service`'s stdout, as the supervisor publishes it (shared
    /// by the TUI and headless tests).
    pub(crate) fn log(service: &str, text: &str, seq: u64) -> Event {
        Event::log(LogLine::new(service, Stream::Stdout, text, seq))
    }

    #[test]
    fn a_changed_profile_waits_for_p_and_a_new_service_gets_a_pane() {
        use omnidev_pod::profile::changes::ProfileChanges;
        let mut app = app();
        let pod = |kind| Event { at: SystemTime::UNIX_EPOCH, service: None, kind };
        // The events as the pod words them.
        let file = std::path::Path::new("/repo/omnidev.toml");
        let server_and_worker = ProfileChanges {
            changed: vec![("server".into(), vec!["command"])],
            added: vec!["worker".into()],
            ..ProfileChanges::default()
        };
        let invalid =
            omnidev_pod::Profile::parse("[services.x]\ncomand = []\n", "/repo/omnidev.toml")
                .expect_err("an unknown key");
        let changed = |error: Option<&str>| {
            let next = match error {
                None => Ok(&server_and_worker),
                Some(_) => Err(&invalid),
            };
            crate::live_profile::profile_changed(file, "omnidev.toml", next, true)
        };
        app.apply(&pod(changed(None)));
        assert_eq!(app.profile_pending.as_deref(), Some("server +worker"));
        assert_eq!(app.handle_key(key('P')), Some(Action::ReloadProfile));
        // The notice is shown like any other.
        assert_eq!(app.shown(0).len(), 1);
        app.apply_snapshot(&[status("worker", ServiceState::Running { pid: 9 }, 0)]);
        assert_eq!(app.services.len(), 3);
        assert_eq!(app.panes.len(), 4);
        assert_eq!(app.pane_title(3), "worker");
        app.apply(&log("worker", "up", 5));
        assert_eq!(app.shown(3), ["up"]);
        app.apply(&pod(EventKind::ProfileApplied(omnidev_core::ProfileApplied {
            applied: omnidev_core::Applied {
                restarted: vec!["server".into()],
                started: vec!["worker".into()],
                ..Default::default()
            },
            message: "applied omnidev.toml: restarted server; started worker".into(),
        })));
        assert_eq!(app.profile_pending, None);
        // A file that cannot be applied leaves nothing to apply.
        app.apply(&pod(changed(None)));
        app.apply(&pod(changed(Some("omnidev.toml:3:1: unknown field"))));
        assert_eq!(app.profile_pending, None);
        // Only the URLs changed: there is something to apply all the same,
        // as the notice says.
        let urls = ProfileChanges { urls: true, ..ProfileChanges::default() };
        let event = crate::live_profile::profile_changed(file, "omnidev.toml", Ok(&urls), true);
        assert!(event.to_string().contains("press P"), "{event}");
        app.apply(&pod(event));
        assert_eq!(app.profile_pending.as_deref(), Some("URLs"));
        assert_eq!(app.handle_key(key('P')), Some(Action::ReloadProfile));
    }

    #[test]
    fn logs_go_to_their_pane_and_the_combined_one() {
        let mut app = app();
        app.apply(&log("server", "a", 1));
        app.apply(&log("host", "b", 2));
        assert_eq!(app.shown(0), ["a", "b"]);
        assert_eq!(app.shown(1), ["a"]);
        assert_eq!(app.shown(2), ["b"]);
    }

    /// A real service leaves a prompt unfinished on stdout, then prints a
    /// line on stderr: a reader that comes later gets the finished line
    /// first and the older unfinished one after it; both show (a pane that
    /// took only lines numbered after the last it took hid the prompt).
    #[tokio::test]
    async fn a_prompt_older_than_the_next_line_of_another_stream_shows() {
        use omnidev_core::{ServiceSpec, Supervisor, SupervisorConfig};
        let dir = tempfile::tempdir().expect("tempdir");
        let go = dir.path().join("go");
        let script = format!(
            "printf 'Password: '; while [ ! -e '{}' ]; do sleep 0.02; done; \
             echo 'warning: no tty' >&2; exec sleep 300",
            go.display()
        );
        let builder = Supervisor::builder(SupervisorConfig {
            services: vec![ServiceSpec::new("server", "sh", ["-c", &script], dir.path())],
            ..SupervisorConfig::default()
        })
        .expect("a valid graph");
        let mut reader = builder.subscribe();
        let mut watcher = builder.subscribe();
        let supervisor = builder.run().await.expect("start");
        let deadline = std::time::Duration::from_secs(20);
        // The prompt is published unfinished before the warning is printed.
        tokio::time::timeout(deadline, async {
            while let Some(event) = watcher.recv().await {
                if matches!(event.kind, EventKind::PartialLine { .. }) {
                    break;
                }
            }
        })
        .await
        .expect("the prompt in time");
        std::fs::write(&go, "").expect("go");
        omnidev_test_support::poll_until_async("the warning", deadline, || {
            supervisor
                .logs(Some("server"))
                .is_ok_and(|lines| lines.iter().any(|line| line.text == "warning: no tty"))
        })
        .await;
        let mut app = app();
        while let Some(event) = reader.try_recv() {
            app.apply(&event);
        }
        let texts: Vec<String> = app.panes[1]
            .all(app.output.history())
            .into_iter()
            .filter(|l| !l.supervisor)
            .map(|l| l.raw)
            .collect();
        assert_eq!(texts, ["warning: no tty", "Password: "]);
        supervisor.shutdown().await.expect("shutdown");
    }

    #[test]
    fn key_table() {
        let mut app = app();
        assert_eq!(app.handle_key(key('2')), None);
        assert_eq!(app.focus, 2);
        assert_eq!(app.handle_key(key('0')), None);
        assert_eq!(app.focus, 0);
        app.handle_key(KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE));
        assert_eq!(app.focus, 1);
        assert_eq!(app.handle_key(key('r')), Some(Action::Restart("server".into())));
        assert_eq!(app.handle_key(key('R')), Some(Action::Reload(vec!["server".into()])));
        app.apply(&log("server", "one", 1));
        assert_eq!(app.handle_key(key('c')), None);
        assert!(app.shown(1).is_empty(), "cleared");
        // `s` stops a service that runs (or waits), starts one that is down.
        assert_eq!(app.handle_key(key('s')), Some(Action::Stop("server".into())));
        app.services[0].state = ServiceState::Stopped;
        assert_eq!(app.handle_key(key('s')), Some(Action::Start("server".into())));
        app.handle_key(key('w'));
        assert!(app.wrap);
        assert_eq!(app.handle_key(key('q')), Some(Action::Quit));
        assert_eq!(
            app.handle_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(Action::Quit)
        );
        assert_eq!(
            app.handle_key(KeyEvent::new(KeyCode::Char('z'), KeyModifiers::CONTROL)),
            Some(Action::Suspend)
        );
    }

    #[test]
    fn typing_a_search_then_n_and_shift_n() {
        let mut app = app();
        for (i, t) in ["x", "boom 1", "y", "boom 2"].iter().enumerate() {
            app.apply(&log("server", t, i as u64 + 1));
        }
        app.panes[0].view_height = 10;
        app.handle_key(key('/'));
        for c in "boom".chars() {
            app.handle_key(key(c));
        }
        // `n` typed inside the prompt is text, not "next".
        assert!(matches!(app.mode, Mode::Search { .. }));
        app.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        assert_eq!(app.panes[0].current_match, Some(1));
        app.handle_key(key('n'));
        assert_eq!(app.panes[0].current_match, Some(3));
        app.handle_key(key('N'));
        assert_eq!(app.panes[0].current_match, Some(1));
        app.handle_key(key('/'));
        for c in "nothing".chars() {
            app.handle_key(key(c));
        }
        app.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        assert_eq!(app.message.as_deref(), Some("pattern not found: nothing"));
    }

    /// A service's status as core publishes it.
    pub(crate) fn status(name: &str, state: ServiceState, restarts: u32) -> ServiceStatus {
        ServiceStatus { name: name.into(), state, restarts, ..ServiceStatus::default() }
    }

    /// A crash is a supervisor line in the service's pane; the restarts
    /// shown are core's count, not one kept by counting crash events.
    #[test]
    fn a_crash_is_a_supervisor_line_and_restarts_are_cores() {
        let mut app = app();
        app.apply(&Event {
            at: SystemTime::UNIX_EPOCH,
            service: Some("server".into()),
            kind: EventKind::Crashed {
                status: omnidev_core::ExitStatus::Code(1),
                attempt: 1,
                backoff: std::time::Duration::from_secs(1),
            },
        });
        assert_eq!(app.services[0].restarts, 0, "not counted from events");
        let shown = app.panes[1].all(app.output.history());
        assert!(shown.len() == 1 && shown[0].supervisor, "{shown:?}");
        app.apply_snapshot(&[status("server", ServiceState::Stopped, 3)]);
        assert_eq!(app.services[0].restarts, 3);
    }
}

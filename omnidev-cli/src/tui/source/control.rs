//! The TUI's source for `omnidev attach`: a pod running in another process
//! (`up --detach`, another terminal), read over its control socket.
//!
//! One `events --follow --logs` stream carries everything: the records the
//! pod kept (its last lines and events: the panes are filled from them),
//! then every new one, and core's status of every service at the start
//! and at each change. The panes show the events' lines
//! ([`Update::Event`]); the header's states, restarts and URLs come
//! from the status records alone ([`Update::Status`]), as core decides
//! them: nothing is rebuilt from events, and nothing is polled. Actions
//! are control requests, each on a connection of its own, answered into
//! the footer. Bounded from outside: a record line longer than
//! [`MAX_LINE_BYTES`] is skipped (said in the footer), not buffered;
//! lines and events go into the UI's own history, bounded as the pod's;
//! the pod drops a reader that falls more than its follow budget behind
//! (Ctrl-Z for long), and then the history starts over from a new stream.

use std::path::{Path, PathBuf};
use std::time::Duration;

use omnidev_core::{EventKind, ServiceStatus};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Feed, Update};
use crate::control::client::{Line, Lines, MAX_LINE_BYTES, READ_CHUNK, Records};
use crate::control::events::Record;
use crate::control::protocol::{PodStatus, UrlReport};
use crate::control::{Ask, EventsQuery, RestartScope};
use crate::error::{Error, Result};
use crate::tui::app::{Action, App, PodInfo};
use omnidev_core::text;

/// How long a restart or start from a key waits for the services to be
/// ready (the pod's own default).
const ACTION_TIMEOUT: Duration = Duration::from_secs(300);

/// Action answers waiting for the UI; more are dropped (each key press
/// sets its own footer line at once anyway).
const ANSWERS: usize = 16;

/// A running pod's `status` and the stream of its records, begun after it.
pub struct Connection {
    /// The status, asked first (the services, the pod's own URLs).
    pub status: PodStatus,
    reader: RecordReader,
}

impl Connection {
    /// Asks the pod in `pod_dir` for its status, then opens the stream of
    /// its kept and new records.
    pub fn open(pod_dir: &Path) -> Result<Self> {
        let status = Ask::status().send(pod_dir)?.status;
        // A prompt or a progress bar shows before its newline, as in
        // `up`'s own UI.
        // Unfinished lines too, as the local UI shows them.
        let query = EventsQuery { partial: true, ..EventsQuery::everything() };
        let reader = Ask::events(query).stream(pod_dir)?;
        Ok(Self { status, reader: RecordReader::new(reader).map_err(Error::io("read", pod_dir))? })
    }

    /// The services' states as the status has them, for the header.
    pub fn statuses(&self) -> Vec<ServiceStatus> {
        self.status.services.iter().map(|report| report.status.clone()).collect()
    }
}

/// The UI of the pod in `pod_dir` as `connection` finds it: its services
/// in profile order, their states, `q` detaching.
pub fn app(pod_dir: &Path, connection: &Connection) -> App {
    let status = &connection.status;
    let mut app = App::new(
        PodInfo { pod_dir: pod_dir.to_owned(), urls: status.urls.clone(), usage: None },
        status.services.iter().map(|s| s.status.name.clone()).collect(),
        status.watched.clone(),
    );
    app.attached = true;
    app.apply_snapshot(&connection.statuses());
    app
}

/// Reads record lines off the stream, each at most [`MAX_LINE_BYTES`]
/// (cut by the one [`Lines`] every reader of a pod's socket uses).
/// Cancel-safe: what was read stays in `lines` for the next call.
struct RecordReader {
    stream: tokio::net::UnixStream,
    lines: Lines,
    chunk: Box<[u8]>,
}

impl RecordReader {
    /// Takes over the stream `Ask::stream` opened, with what it had
    /// read ahead.
    fn new(records: Records) -> std::io::Result<Self> {
        let (stream, lines) = records.into_parts();
        stream.set_nonblocking(true)?;
        Ok(Self::from_stream(tokio::net::UnixStream::from_std(stream)?, lines))
    }

    fn from_stream(stream: tokio::net::UnixStream, lines: Lines) -> Self {
        Self { stream, lines, chunk: vec![0; READ_CHUNK].into_boxed_slice() }
    }

    /// The next line; `None` at the end of the stream (an unfinished last
    /// line is dropped: the pod went away in the middle of it).
    async fn next(&mut self) -> Option<Line> {
        loop {
            if let Some(line) = self.lines.take() {
                return Some(line);
            }
            // Cancel-safe: nothing is read when the call is dropped.
            match self.stream.read(&mut self.chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.lines.add(&self.chunk[..n]),
            }
        }
    }
}

/// A running pod, read over its control socket.
pub struct ControlSource {
    pod_dir: PathBuf,
    reader: RecordReader,
    /// The pod's own URLs (not a service's), shown before the services'.
    pod_urls: Vec<UrlReport>,
    /// A new stream being opened after the pod dropped this reader.
    reconnecting: Option<(String, JoinHandle<Result<Connection>>)>,
    answers: mpsc::Receiver<Update>,
    answer: mpsc::Sender<Update>,
}

impl ControlSource {
    /// Reads `connection`, the pod's in `pod_dir`. Must be called inside
    /// a tokio runtime.
    pub fn new(pod_dir: &Path, connection: Connection) -> Self {
        let (answer, answers) = mpsc::channel(ANSWERS);
        tokio::spawn(measure_every(pod_dir.to_owned(), answer.clone()));
        Self {
            pod_dir: pod_dir.to_owned(),
            pod_urls: own_urls(&connection.status),
            reader: connection.reader,
            reconnecting: None,
            answers,
            answer,
        }
    }

    /// What one line of the stream means to the UI; `None` for nothing.
    fn update(&mut self, line: Line) -> Option<Update> {
        let Line::Text(text) = line else {
            return Some(Update::Message(format!(
                "a record longer than {} KiB was skipped (`omnidev logs` has every line)",
                MAX_LINE_BYTES / 1024
            )));
        };
        let event = serde_json::from_slice::<Record>(&text).ok()?.event;
        match &event.kind {
            EventKind::Lagged { message } => {
                let why = format!(
                    "the UI fell behind and the pod dropped it ({}): refilled from what it kept",
                    text::quote(message)
                );
                let pod_dir = self.pod_dir.clone();
                let opening = tokio::task::spawn_blocking(move || Connection::open(&pod_dir));
                self.reconnecting = Some((why, opening));
                return None;
            }
            EventKind::Ended { services } => {
                let endings: Vec<String> =
                    services.iter().map(|s| text::quote(&s.detail).into_owned()).collect();
                return Some(Update::Ended(format!("the pod stopped: {}", endings.join("; "))));
            }
            EventKind::Status { services } => {
                return Some(Update::Status {
                    urls: UrlReport::with_services(self.pod_urls.iter().cloned(), services),
                    statuses: services.clone(),
                });
            }
            _ => {}
        }
        Some(Update::Event(event))
    }

    /// Takes in the new stream once it is open.
    fn reconnected(&mut self, why: String, opened: Result<Connection>) -> Update {
        match opened {
            Ok(connection) => {
                self.pod_urls = own_urls(&connection.status);
                self.reader = connection.reader;
                Update::Refill { why }
            }
            Err(_) => Update::Ended("the pod stopped".to_owned()),
        }
    }

    /// The stream's end: the pod stopped without an `ended` record (killed,
    /// or its control socket closed).
    fn closed() -> Update {
        Update::Ended("the pod stopped (its control connection closed)".to_owned())
    }
}

impl Feed for ControlSource {
    async fn next(&mut self) -> Update {
        loop {
            if let Some((_, opening)) = &mut self.reconnecting {
                let opened = tokio::select! {
                    opened = opening => opened,
                    Some(answer) = self.answers.recv() => return answer,
                };
                let (why, _) = self.reconnecting.take().expect("reconnecting");
                let opened = opened
                    .unwrap_or_else(|e| Err(Error::Runtime(std::io::Error::other(e.to_string()))));
                return self.reconnected(why, opened);
            }
            let line = tokio::select! {
                line = self.reader.next() => line,
                Some(answer) = self.answers.recv() => return answer,
            };
            let Some(line) = line else {
                return Self::closed();
            };
            if let Some(update) = self.update(line) {
                return update;
            }
        }
    }

    fn try_next(&mut self) -> Option<Update> {
        use std::future::Future as _;
        let future = std::pin::pin!(self.next());
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match future.poll(&mut context) {
            std::task::Poll::Ready(update) => Some(update),
            std::task::Poll::Pending => None,
        }
    }

    fn act(&mut self, action: Action) {
        let (ask, what) = match action {
            Action::Restart(name) => (
                Ask::restart(RestartScope::service(name.clone()), ACTION_TIMEOUT),
                format!("restarted {name}"),
            ),
            // The pod's own watched services (what `omnidev restart` restarts).
            Action::Reload(names) => (
                Ask::restart(RestartScope::default(), ACTION_TIMEOUT),
                format!("reloaded {}", names.join(", ")),
            ),
            Action::Stop(name) => (
                Ask::stop(vec![name.clone()], ACTION_TIMEOUT),
                format!("stopped {name} (s starts it again)"),
            ),
            Action::Start(name) => {
                (Ask::start(vec![name.clone()], ACTION_TIMEOUT), format!("started {name}"))
            }
            Action::ReloadProfile => {
                (Ask::reload_profile(ACTION_TIMEOUT), "applied the profile".to_owned())
            }
            // `c` clears this UI's pane only: the pod's buffers are other
            // readers' too. `q` and Ctrl-Z are the loop's.
            Action::Quit | Action::Suspend => return,
        };
        let pod_dir = self.pod_dir.clone();
        let answer = self.answer.clone();
        tokio::task::spawn_blocking(move || {
            let said = match ask.send(&pod_dir) {
                Ok(response) if response.failed.is_empty() => {
                    response.applied.map_or(what, |applied| applied.message)
                }
                Ok(response) => format!("{} failed", response.failed.join(", ")),
                Err(error) => error.to_string(),
            };
            let _ = answer.try_send(Update::Message(text::quote(&said).into_owned()));
        });
    }
}

/// Asks the pod in `pod_dir` what its services hold, every
/// [`crate::output::LIVE_USAGE_EVERY`], until the UI is gone.
async fn measure_every(pod_dir: PathBuf, answer: mpsc::Sender<Update>) {
    let mut every = tokio::time::interval(crate::output::LIVE_USAGE_EVERY);
    while !answer.is_closed() {
        every.tick().await;
        let pod_dir = pod_dir.clone();
        let asked = tokio::task::spawn_blocking(move || Ask::status().send(&pod_dir)).await;
        if let Ok(Ok(response)) = asked
            && let Some(usage) = response.status.usage
        {
            // A full queue of answers skips this one: the next comes soon.
            let _ = answer.try_send(Update::Usage(usage));
        }
    }
}

/// The URLs of `status` that are the pod's own, not a service's.
fn own_urls(status: &PodStatus) -> Vec<UrlReport> {
    (status.urls.iter()).filter(|u| u.service.is_none()).cloned().collect()
}

#[cfg(test)]
mod tests {
    use omnidev_core::ServiceState;

    use super::*;

    fn reader(pending: &[u8]) -> (RecordReader, tokio::net::UnixStream) {
        let (ours, theirs) = tokio::net::UnixStream::pair().expect("pair");
        let mut lines = Lines::default();
        lines.add(pending);
        (RecordReader::from_stream(ours, lines), theirs)
    }

    #[tokio::test]
    async fn record_lines_are_bounded_and_a_too_long_one_is_skipped_whole() {
        use tokio::io::AsyncWriteExt;
        let (mut reader, mut pod) = reader(b"{\"a\":1}\n{\"b\"");
        assert_eq!(reader.next().await, Some(Line::Text(b"{\"a\":1}".to_vec())));
        let writer = tokio::spawn(async move {
            pod.write_all(b":2}\n").await.expect("write");
            let long = vec![b'x'; MAX_LINE_BYTES * 3];
            pod.write_all(&long).await.expect("write");
            pod.write_all(b"\nafter\nunfinished").await.expect("write");
        });
        assert_eq!(reader.next().await, Some(Line::Text(b"{\"b\":2}".to_vec())));
        assert_eq!(reader.next().await, Some(Line::TooLong));
        assert!(
            reader.lines.held() <= MAX_LINE_BYTES + READ_CHUNK,
            "never more than one line and a chunk held: {}",
            reader.lines.held()
        );
        assert_eq!(reader.next().await, Some(Line::Text(b"after".to_vec())));
        writer.await.expect("writer");
        assert_eq!(reader.next().await, None, "an unfinished last line is dropped");
    }

    /// The server's URL, shown while it is ready.
    fn server_url() -> omnidev_core::NamedUrl {
        omnidev_core::NamedUrl { name: "server".into(), url: "http://localhost:1".into() }
    }

    /// A real pod (supervisor and control server) in `dir`, its one
    /// `server` service running `script` under `sh`.
    async fn pod(
        dir: &Path,
        script: &str,
    ) -> (omnidev_core::Supervisor, crate::control::ControlServer) {
        let config = omnidev_core::SupervisorConfig::default();
        pod_with(dir, script, config, Duration::from_secs(10)).await
    }

    /// [`pod`] with `config`'s settings (its services replaced), whose
    /// control server drops a reader that takes nothing for `deadline`.
    async fn pod_with(
        dir: &Path,
        script: &str,
        config: omnidev_core::SupervisorConfig,
        deadline: Duration,
    ) -> (omnidev_core::Supervisor, crate::control::ControlServer) {
        let mut server = omnidev_core::ServiceSpec::new("server", "sh", ["-c", script], dir);
        server.urls = vec![server_url()];
        let builder = omnidev_core::Supervisor::builder(omnidev_core::SupervisorConfig {
            services: vec![server],
            ..config
        })
        .expect("a valid graph");
        let supervisor = builder.run().await.expect("supervisor");
        let info = crate::control::ServerInfo {
            pod_dir: dir.to_path_buf(),
            socket: dir.join("run/control.sock"),
            repo: dir.to_path_buf(),
            addresses: std::sync::Arc::new(std::sync::Mutex::new(crate::session::Addresses {
                ports: std::collections::BTreeMap::new(),
                urls: Vec::new(),
                links: std::collections::BTreeMap::new(),
            })),
            watched: vec!["server".into()],
            live: None,
        };
        let server =
            crate::control::ControlServer::start_with_deadline(info, supervisor.clone(), deadline)
                .expect("control server");
        (supervisor, server)
    }

    /// Takes in updates until `done` holds, failing after a generous
    /// deadline; the updates the UI would have left on.
    async fn pump(
        app: &mut App,
        source: &mut impl Feed,
        what: &str,
        done: impl Fn(&App) -> bool,
    ) -> Option<crate::tui::Outcome> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !done(app) {
            let update = tokio::time::timeout_at(deadline, source.next())
                .await
                .unwrap_or_else(|_| panic!("{what}: not within 60 s"));
            if let Some(end) = crate::tui::apply(app, update) {
                return Some(end);
            }
        }
        None
    }

    fn texts(app: &App, pane: usize) -> Vec<String> {
        app.shown(pane)
    }

    fn screen(app: &mut App) -> String {
        use crate::tui::view::tests::{draw, screen_rows};
        screen_rows(&draw(app, 100, 12)).join("\n")
    }

    /// The connection `omnidev attach` makes to the pod in `dir`.
    async fn connect(dir: &Path) -> Connection {
        let pod_dir = dir.to_owned();
        tokio::task::spawn_blocking(move || Connection::open(&pod_dir))
            .await
            .expect("task")
            .expect("connected")
    }

    /// `s` on the server pane stops the server over the socket (its URL
    /// leaves the header), `s` again starts a new run (the URL is back).
    async fn stop_then_start(
        app: &mut App,
        source: &mut ControlSource,
        pid: &impl Fn() -> Option<u32>,
        after: u32,
    ) {
        let shown = |app: &App| app.info.urls.iter().any(|u| u.url == server_url().url);
        // Shown once core says the new run is ready.
        pump(app, source, "the server's URL", shown).await;
        let action = app.handle_key(crate::tui::app::tests::key('s'));
        assert_eq!(action, Some(Action::Stop("server".into())));
        source.act(action.expect("action"));
        pump(app, source, "the stop", |app| {
            app.message.as_deref() == Some("stopped server (s starts it again)")
                && app.services[0].state == ServiceState::Stopped
                && !shown(app)
        })
        .await;
        assert_eq!(pid(), None, "the pod's server is stopped");
        let action = app.handle_key(crate::tui::app::tests::key('s'));
        assert_eq!(action, Some(Action::Start("server".into())));
        source.act(action.expect("action"));
        pump(app, source, "the start", |app| {
            app.message.as_deref() == Some("started server") && shown(app)
        })
        .await;
        assert!(pid().is_some_and(|p| p != after), "a new run");
    }

    /// Attached to a live pod: the lines it kept from before fill the
    /// panes (a hostile one shown, never obeyed), the header has the
    /// state, `r` restarts the server over the socket (a new pid), new
    /// lines follow, `s` stops and starts it (the header's URL follows),
    /// and the pod's end is the UI's end, saying so.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retained_lines_fill_the_panes_then_keys_act_and_the_end_is_said() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = "echo before; printf 'hostile \\033]0;TITLE\\007 \\033[2J \\033[6n end\\n'; \
                      echo \"pid $$\"; exec sleep 1000";
        let (supervisor, server) = pod(dir.path(), script).await;
        let pid = || supervisor.snapshot()[0].pid();
        let kept = || {
            supervisor
                .logs(Some("server"))
                .unwrap_or_default()
                .iter()
                .any(|l| l.text.starts_with("pid "))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        // Its line can be kept before its state (with the pid) is published.
        while !kept() || pid().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the server printed nothing, or has no pid"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let before = pid().expect("a pid");

        let connection = connect(dir.path()).await;
        let mut app = app(dir.path(), &connection);
        assert!(app.attached);
        assert_eq!(app.services[0].name, "server");
        assert!(
            app.services[0].state.pid() == Some(before),
            "the header has the state: {:?}",
            app.services[0].state
        );
        assert_eq!(app.watched, ["server"]);
        let mut source = ControlSource::new(dir.path(), connection);
        let started = format!("server started (pid {before})");
        let ends = pump(&mut app, &mut source, "the kept lines", |app| {
            let texts = texts(app, 1);
            texts.contains(&format!("pid {before}")) && texts.contains(&started)
        })
        .await;
        assert_eq!(ends, None);
        // The kept output, each line once, and the kept event's line.
        let output: Vec<String> = texts(&app, 1).into_iter().filter(|t| *t != started).collect();
        assert_eq!(
            output,
            [
                "before".to_owned(),
                "hostile ^[]0;TITLE^G ^[[2J ^[[6n end".to_owned(),
                format!("pid {before}"),
            ]
        );
        app.focus = 1;
        let shown = screen(&mut app);
        assert!(shown.contains("hostile ^[]0;TITLE^G ^[[2J ^[[6n end"), "{shown}");
        assert!(!shown.contains('\x1b') && !shown.contains('\x07'), "{shown}");
        assert!(shown.contains("q detach"), "{shown}");

        // `r` on the server pane: a request over the socket.
        let action = app.handle_key(crate::tui::app::tests::key('r'));
        assert_eq!(action, Some(Action::Restart("server".into())));
        source.act(action.expect("action"));
        let restarted = |app: &App| {
            app.message.as_deref() == Some("restarted server")
                && app.services[0].state.pid().is_some_and(|p| p != before)
        };
        assert_eq!(pump(&mut app, &mut source, "the restart", restarted).await, None);
        let after = pid().expect("a pid");
        assert_ne!(after, before, "the pod's server has a new pid");
        pump(&mut app, &mut source, "the new run's lines", |app| {
            texts(app, 1).contains(&format!("pid {after}"))
        })
        .await;

        stop_then_start(&mut app, &mut source, &pid, after).await;

        // The pod stops: the UI says so and leaves.
        supervisor.shutdown().await.expect("shutdown");
        supervisor.announce_end();
        server.finish().await;
        let end = pump(&mut app, &mut source, "the pod's end", |_| false).await;
        match end {
            Some(crate::tui::Outcome::Ended(said)) => {
                assert!(said.starts_with("the pod stopped: server stopped"), "{said}");
            }
            other => panic!("the UI must leave saying the pod stopped: {other:?}"),
        }
    }

    /// Attached: a prompt the server prints without its newline shows in
    /// its pane while the server waits for an answer the test has not
    /// written, then the answer finishes it in place: one line.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unfinished_line_shows_then_is_finished_in_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (go, answer) = (dir.path().join("go"), dir.path().join("answer"));
        // The prompt waits for the UI to follow: an unfinished line is sent
        // to followers, never replayed.
        let script = format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done; printf 'Password: '; \
             while [ ! -e '{}' ]; do sleep 0.05; done; echo secret; exec sleep 1000",
            go.display(),
            answer.display()
        );
        let (supervisor, server) = pod(dir.path(), &script).await;
        let connection = connect(dir.path()).await;
        let mut app = app(dir.path(), &connection);
        let mut source = ControlSource::new(dir.path(), connection);
        std::fs::write(&go, "").expect("go");
        let output = |app: &App| -> Vec<String> {
            texts(app, 1).into_iter().filter(|t| !t.starts_with("server ")).collect()
        };
        pump(&mut app, &mut source, "the prompt", |app| output(app) == ["Password: "]).await;
        std::fs::write(&answer, "").expect("answer");
        pump(&mut app, &mut source, "the finished line", |app| output(app) == ["Password: secret"])
            .await;
        assert_eq!(
            texts(&app, 0).iter().filter(|t| t.contains("Password")).collect::<Vec<_>>(),
            ["Password: secret"],
            "one line in the combined pane too"
        );
        drop(source);
        drop(server);
        supervisor.shutdown().await.expect("shutdown");
    }

    /// A pod printing about 1 MB a second (numbered lines of 2000 bytes)
    /// to an attached UI whose control server drops a reader that takes
    /// nothing for `deadline`; the UI has shown its first lines.
    async fn flooding(
        dir: &Path,
        deadline: Duration,
    ) -> (omnidev_core::Supervisor, crate::control::ControlServer, App, ControlSource) {
        let line = "x".repeat(2000);
        let script = format!("i=0; while :; do i=$((i+1)); echo \"$i {line}\"; sleep 0.002; done");
        let config = omnidev_core::SupervisorConfig::default();
        let (supervisor, server) = pod_with(dir, &script, config, deadline).await;
        let connection = connect(dir).await;
        let mut app = app(dir, &connection);
        let mut source = ControlSource::new(dir, connection);
        pump(&mut app, &mut source, "the first lines", |app| {
            app.output.history().next_number() > 10
        })
        .await;
        (supervisor, server, app, source)
    }

    /// Waits (not reading) until the pod's server printed `lines` more.
    async fn pause(supervisor: &omnidev_core::Supervisor, lines: u64) {
        let written = || {
            supervisor
                .logs(Some("server"))
                .unwrap_or_default()
                .last()
                .and_then(|l| l.text.split(' ').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let paused_at = written();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while written() < paused_at + lines {
            assert!(std::time::Instant::now() < deadline, "the server stopped writing");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The number a flooding line starts with.
    fn number(text: &str) -> Option<u64> {
        text.split(' ').next()?.parse().ok()
    }

    /// A UI that stops reading while the pod prints more than it keeps
    /// (4 MiB of lines) is told exactly how many lines it missed, right
    /// where they are missing, and follows on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ui_that_fell_behind_is_told_exactly_what_it_missed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (supervisor, server, mut app, mut source) =
            flooding(dir.path(), Duration::from_secs(600)).await;
        // 3000 lines, 6 MB: more than the pod keeps and the socket holds.
        pause(&supervisor, 3000).await;
        let gap = |app: &App| {
            let texts = texts(app, 0);
            let at = texts.iter().position(|t| t.contains("records lost"))?;
            let after = texts[at + 1..].iter().find_map(|t| number(t))?;
            Some((texts, at, after))
        };
        let ends = pump(&mut app, &mut source, "the gap", |app| gap(app).is_some()).await;
        assert_eq!(ends, None, "the UI goes on");
        let (texts, at, after) = gap(&app).expect("a gap");
        let before =
            texts[..at].iter().rev().find_map(|t| number(t)).expect("a line before the gap");
        let said: u64 = texts[at]
            .split("keeps: ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("how many lines: {}", texts[at]));
        assert!(said > 0, "{}", texts[at]);
        assert_eq!(after - before - 1, said, "{}", texts[at]);
        let resumed = app.output.history().next_number();
        pump(&mut app, &mut source, "lines after the gap", |app| {
            app.output.history().next_number() > resumed + 100
        })
        .await;
        drop(source);
        drop(server);
        supervisor.shutdown().await.expect("shutdown");
    }

    /// A UI that stops reading for longer than the pod waits (suspended,
    /// say) is dropped; reading again, it opens a new stream and the panes
    /// start over from what the pod kept, then follow again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ui_the_pod_dropped_for_stalling_refills_and_follows_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (supervisor, server, mut app, mut source) =
            flooding(dir.path(), Duration::from_secs(2)).await;
        // Not reading for 5 s: the socket fills within the first one, the
        // pod gives up on the reader 2 s later and keeps its `lagged`
        // record for it for 6 s more.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let ends = pump(&mut app, &mut source, "the refill", |app| {
            app.message
                .as_deref()
                .is_some_and(|m| m.starts_with("the UI fell behind and the pod dropped it"))
        })
        .await;
        assert_eq!(ends, None, "the UI goes on");
        assert!(app.shown(1).is_empty(), "the panes start over");
        let refilled = app.output.history().next_number();
        pump(&mut app, &mut source, "lines after the refill", |app| {
            app.output.history().next_number() > refilled + 100
        })
        .await;
        let newest = texts(&app, 1).last().cloned().unwrap_or_default();
        assert!(newest.ends_with(&"x".repeat(2000)), "a whole line: {newest:.40}");
        drop(source);
        drop(server);
        supervisor.shutdown().await.expect("shutdown");
    }

    /// `omnidev attach` shows the header `up`'s own UI shows for the same
    /// pod, as core has it: a crashed service waiting out its backoff says
    /// how long, with its restart count (attach used to rebuild states
    /// from records and reports that carried no backoff: `restarting in
    /// 0ms`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn attach_shows_the_service_lines_the_local_ui_shows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = omnidev_core::SupervisorConfig {
            backoff: omnidev_core::backoff::BackoffPolicy {
                steps: vec![Duration::from_secs(600)],
                reset_after: Duration::from_secs(600),
            },
            ..omnidev_core::SupervisorConfig::default()
        };
        let (supervisor, server) =
            pod_with(dir.path(), "echo up; exit 3", config, Duration::from_secs(10)).await;
        // The local UI, as `up` makes it.
        let mut own = crate::tui::source::PodSource::new(
            supervisor.clone(),
            crate::session::SharedAddresses::default(),
            None,
        );
        let mut local = App::new(
            PodInfo { pod_dir: dir.path().to_owned(), urls: Vec::new(), usage: None },
            vec!["server".into()],
            vec!["server".into()],
        );
        local.apply_snapshot(&supervisor.snapshot());
        let connection = connect(dir.path()).await;
        let mut attached = app(dir.path(), &connection);
        let mut source = ControlSource::new(dir.path(), connection);
        let waiting = |app: &App| {
            app.services[0].restarts == 1
                && matches!(app.services[0].state, ServiceState::Restarting { .. })
        };
        pump(&mut local, &mut own, "the crash, locally", waiting).await;
        pump(&mut attached, &mut source, "the crash", waiting).await;
        assert_eq!(
            attached.services[0].state,
            ServiceState::Restarting { after: Duration::from_secs(600), attempt: 1 }
        );
        assert_eq!(attached.services, local.services);
        // The header rows, drawn: the same (the panes' lines may differ in
        // what each UI saw first).
        let header = |app: &mut App| -> Vec<String> {
            use crate::tui::view::tests::{draw, screen_rows};
            screen_rows(&draw(app, 100, 12))[..2].to_vec()
        };
        // What each measured of the pod's usage, each at its own moment,
        // is left out.
        (attached.info.usage, local.info.usage) = (None, None);
        let shown = header(&mut attached);
        assert!(shown[1].contains("restarting in 600s"), "{shown:?}");
        assert_eq!(shown, header(&mut local));
        drop(source);
        drop(server);
        supervisor.shutdown().await.expect("shutdown");
    }
}

//! The headless front-end: every line a service prints and every
//! supervisor event, as `<service> | <line>` and `omnidev | …` (names padded
//! and coloured only on a terminal without `NO_COLOR`; see `output`).
//!
//! Output is lossless: it reads the supervisor's history through a
//! [`Lossless`] reader, which spools to disk while stdout is slower than
//! the services, so no line is dropped and no service waits for stdout. A dedicated thread writes stdout (a
//! blocked write never holds up the runtime); everything queued is written
//! before omnidev exits.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use anstyle::Style;
use omnidev_core::signals::ShutdownSignals;
use omnidev_core::{Event, EventKind, Kept, Lossless, NamedUrl, Recv, Supervisor};

use crate::control::events::Encoder;
use crate::error::Result;
use crate::output::{self, SERVICE_STYLES, SUPERVISOR_STYLE};
use crate::run_options::{Front, RunOptions};
use crate::session::{PreparedPod, banner};
use omnidev_core::text;

/// Turns events into output lines.
#[derive(Debug, Clone, Default)]
pub struct Printer {
    width: usize,
    colour: bool,
    colours: HashMap<String, Style>,
    /// Rendered prefixes, by tag (a list: a pod has a few services, and
    /// each line finds its own by name faster than by hash).
    prefixes: Vec<(String, String)>,
    /// Services' URLs printed so far: each follows the first readiness
    /// that shows it (again only when it changed, as a moved port does).
    printed: HashSet<(String, NamedUrl)>,
    /// `--json`: one event record a line instead of text.
    json: Option<Encoder>,
    /// `--timestamps`: each line starts with the time it was read.
    stamps: bool,
}

impl Printer {
    /// A printer for these services (their order picks their colours).
    pub fn new(services: &[String], colour: bool) -> Self {
        let width = services
            .iter()
            .map(String::len)
            .chain(std::iter::once("omnidev".len()))
            .max()
            .unwrap_or(0);
        let colours = services
            .iter()
            .enumerate()
            .map(|(i, name)| (name.clone(), SERVICE_STYLES[i % SERVICE_STYLES.len()]))
            .collect();
        Self { width, colour, colours, ..Self::default() }
    }

    /// Starts each text line with the time its output was read
    /// (`HH:MM:SS`, local; omnidev's own lines: the time they are made).
    #[must_use]
    pub fn timestamps(mut self, on: bool) -> Self {
        self.stamps = on;
        self
    }

    /// The stamp of a line read at `at`: `HH:MM:SS ` (dimmed in colour),
    /// or nothing without `--timestamps`.
    fn stamp(&self, at: SystemTime) -> String {
        match (self.stamps, self.colour) {
            (false, _) => String::new(),
            (true, false) => format!("{} ", output::clock(at)),
            (true, true) => {
                let dim = output::SEPARATOR_STYLE;
                format!("{dim}{}{dim:#} ", output::clock(at))
            }
        }
    }

    /// Prints event records (one JSON object a line) instead of text.
    #[must_use]
    pub fn json(mut self, encoder: Encoder) -> Self {
        self.json = Some(encoder);
        self
    }

    /// The URLs that `event` (a service becoming ready, with the URLs core
    /// shows for it) brings out; each is returned once.
    fn urls_of(&mut self, event: &Event) -> Vec<NamedUrl> {
        let (Some(service), EventKind::Ready { urls }) = (&event.service, &event.kind) else {
            return Vec::new();
        };
        urls.iter()
            .filter(|url| self.printed.insert((service.clone(), (*url).clone())))
            .cloned()
            .collect()
    }

    fn prefix(&self, tag: &str) -> String {
        let style = self.colour.then(|| self.colours.get(tag).copied().unwrap_or(SUPERVISOR_STYLE));
        output::prefix(tag, self.width, style)
    }

    /// The prefix of `tag`'s lines, rendered once.
    fn prefix_of(&mut self, tag: &str) -> &str {
        let at = self.prefixes.iter().position(|(name, _)| name == tag).unwrap_or_else(|| {
            self.prefixes.push((tag.to_owned(), self.prefix(tag)));
            self.prefixes.len() - 1
        });
        &self.prefixes[at].1
    }

    /// A line of omnidev's own text attributed to `tag` (with `--json`, a
    /// pod-wide `notice` record of it).
    pub fn line(&self, tag: &str, text: &str) -> String {
        if let Some(encoder) = &self.json {
            return text::json_line(&encoder.notice(text));
        }
        format!("{}{}{}", self.stamp(SystemTime::now()), self.prefix(tag), text::message(text))
    }

    /// Writes the output line of a line or event, if it deserves one.
    pub fn write_kept(&mut self, out: &mut impl Write, kept: &Kept) -> std::io::Result<()> {
        if self.json.is_some() {
            return self.write_record(out, kept);
        }
        // A service's line keeps its harmless colours; omnidev's own text
        // (which quotes names, commands, paths) obeys no escape at all.
        // The pod's end: a line per service, `ended: server stopped (…)`.
        if let Kept::Event(event) = kept
            && let EventKind::Ended { services } = &event.kind
        {
            for end in services {
                let line = self.line("omnidev", &format!("ended: {}", end.detail));
                out.write_all(line.as_bytes())?;
                out.write_all(b"\n")?;
            }
            return Ok(());
        }
        let (at, tag, text): (SystemTime, &str, Cow<'_, str>) = match kept {
            Kept::Line(line) => (line.at, &line.service, text::sanitise(&line.text, self.colour)),
            Kept::Event(event) if event.is_shown() => {
                (event.at, "omnidev", Cow::Owned(text::message(&event.to_string()).into_owned()))
            }
            Kept::Event(_) | Kept::Partial(_) => return Ok(()),
        };
        let stamp = self.stamp(at);
        out.write_all(stamp.as_bytes())?;
        out.write_all(self.prefix_of(tag).as_bytes())?;
        out.write_all(text.as_bytes())?;
        out.write_all(b"\n")?;
        if let Kept::Event(event) = kept {
            for url in self.urls_of(event) {
                let url = format!("{} {}", url.name, url.url);
                out.write_all(stamp.as_bytes())?;
                out.write_all(self.prefix_of("omnidev").as_bytes())?;
                out.write_all(text::message(&url).as_bytes())?;
                out.write_all(b"\n")?;
            }
        }
        Ok(())
    }

    /// `--json`: the record, then a `url` record for each URL its
    /// service's readiness brings out.
    fn write_record(&mut self, out: &mut impl Write, kept: &Kept) -> std::io::Result<()> {
        let urls = match kept {
            Kept::Event(event) => self.urls_of(event),
            _ => Vec::new(),
        };
        let encoder = self.json.as_ref().expect("only called with --json");
        let now = SystemTime::now();
        out.write_all(text::json_line(&encoder.kept(kept)).as_bytes())?;
        let service = match kept {
            Kept::Event(event) => event.service.clone(),
            _ => None,
        };
        for url in urls {
            let kind = EventKind::Url { name: url.name, url: url.url };
            out.write_all(text::json_line(&encoder.record(now, service.clone(), kind)).as_bytes())?;
        }
        Ok(())
    }
}

/// Runs the headless front-end until every service has ended by itself, with
/// no service stopped on request (exit 0 when all exited 0 and stdout took every line, else 1) or a shutdown signal arrives (exit 0). Either way
/// the pod is stopped and everything its services printed, to the end, is
/// written before this returns; a second signal gives up on the rest.
pub async fn run_pod(
    prepared: &PreparedPod,
    supervisor: &Supervisor,
    reader: Lossless,
    signals: &mut ShutdownSignals,
    options: &RunOptions,
) -> Result<ExitCode> {
    let json = options.front == Front::Json;
    let names: Vec<String> = prepared.rendered.services.iter().map(|s| s.name.clone()).collect();
    let mut printer =
        Printer::new(&names, output::colour_stdout() && !json).timestamps(prepared.timestamps);
    let mut first: Vec<String> = Vec::new();
    if json {
        let encoder = Encoder::new(prepared.pod.dir());
        printer = printer.json(encoder.clone());
        first = first_records(prepared, &encoder);
    }
    first.extend(
        banner(prepared).iter().chain(&prepared.notices).map(|line| printer.line("omnidev", line)),
    );
    let last = printer.clone();
    let abandon = Arc::new(AtomicBool::new(false));
    let logs_dir = prepared.pod.logs_dir();
    let (done_tx, mut done) = tokio::sync::oneshot::channel();
    {
        let abandon = abandon.clone();
        let logs_dir = logs_dir.clone();
        std::thread::Builder::new()
            .name("omnidev-stdout".into())
            .spawn(move || {
                // The detached pod's own log is rotated as it is written.
                let alive = if let Some(log) = crate::detached_log::own() {
                    write_all(StdoutSink::new(log, logs_dir), &first, reader, printer, &abandon)
                } else {
                    let stdout = std::io::stdout();
                    let out = StdoutSink::new(stdout.lock(), logs_dir);
                    write_all(out, &first, reader, printer, &abandon)
                };
                let _ = done_tx.send(alive);
            })
            .map_err(crate::error::Error::Runtime)?;
    }

    let settled = tokio::select! {
        settled = supervisor.wait_settled() => Some(settled),
        signal = signals.recv() => {
            supervisor.notice(format!("stopping the pod ({signal})"));
            None
        }
    };
    // What the services print while stopping is output too; then how
    // each ended.
    let _ = crate::session::stop_pod(supervisor, signals).await;
    supervisor.announce_end();
    let alive = tokio::select! {
        alive = &mut done => alive.unwrap_or(false),
        signal = signals.recv() => {
            abandon.store(true, Ordering::Relaxed);
            note!(
                "omnidev: {signal} again: not writing the rest of the output; every line is in {}",
                logs_dir.display()
            );
            (&mut done).await.unwrap_or(false)
        }
    };
    let Some(settled) = settled else {
        return Ok(ExitCode::SUCCESS);
    };
    // With --json the `ended` record is the last line: it says how each
    // service ended (and the exit code whether that was a success).
    if alive && !json {
        let text = if settled.success { "every service exited 0" } else { "a service failed" };
        let mut stdout = std::io::stdout();
        let line = last.line("omnidev", text);
        let _ = writeln!(stdout, "{}", line.trim_end_matches('\n'));
        let _ = stdout.flush();
    }
    // Output that never reached its reader (`| head`) is not a success
    // for whoever ran this, even when every service exited 0.
    Ok(if settled.success && alive { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Writes the `first` lines, then everything `reader` reads, to `out`;
/// whether `out` took every line.
fn write_all<W: Write>(
    mut out: StdoutSink<W>,
    first: &[String],
    reader: Lossless,
    printer: Printer,
    abandon: &AtomicBool,
) -> bool {
    for line in first {
        out.write(|w| writeln!(w, "{}", line.trim_end_matches('\n')));
    }
    pump(reader, printer, &mut out, abandon);
    out.alive()
}

/// `--json`: the pod's ports, and its own URLs (not a service's), as
/// records.
fn first_records(prepared: &PreparedPod, encoder: &Encoder) -> Vec<String> {
    let now = SystemTime::now();
    let ports = omnidev_pod::read_ports(prepared.pod.dir())
        .map(|record| record.ports.0)
        .unwrap_or_default();
    let ports = ports
        .into_iter()
        .map(|(name, port)| encoder.record(now, None, EventKind::Port { name, port }));
    let urls = prepared.rendered.urls.iter().map(|url| {
        let kind = EventKind::Url { name: url.name.clone(), url: url.url.clone() };
        encoder.record(now, None, kind)
    });
    ports.chain(urls).map(|record| text::json_line(&record)).collect()
}

/// Stdout, buffered, and what happens when it goes away: one message on
/// stderr, then output is discarded (the pod keeps running; the log files
/// have every line).
struct StdoutSink<W: Write> {
    out: std::io::BufWriter<W>,
    closed: bool,
    logs_dir: std::path::PathBuf,
}

impl<W: Write> StdoutSink<W> {
    fn new(out: W, logs_dir: std::path::PathBuf) -> Self {
        Self { out: std::io::BufWriter::with_capacity(64 * 1024, out), closed: false, logs_dir }
    }

    fn alive(&self) -> bool {
        !self.closed
    }

    fn write(&mut self, f: impl FnOnce(&mut std::io::BufWriter<W>) -> std::io::Result<()>) {
        if self.closed {
            return;
        }
        if let Err(e) = f(&mut self.out) {
            self.gone(&e);
        }
    }

    fn flush(&mut self) {
        if !self.closed
            && let Err(e) = self.out.flush()
        {
            self.gone(&e);
        }
    }

    fn gone(&mut self, error: &std::io::Error) {
        self.closed = true;
        note!(
            "omnidev: stdout is gone ({error}); the pod keeps running and its output goes on in {}",
            self.logs_dir.display()
        );
    }
}

/// How long the writer lets entries gather before writing them, once it
/// has caught up: during a burst it wakes about this often and writes large
/// blocks, instead of being woken (and writing) for every small read of a
/// service's pipe.
const GATHER: Duration = Duration::from_millis(1);

/// The longest output is held back while a service trickles lines.
const MAX_HOLD: Duration = Duration::from_millis(10);

/// Copies what `reader` reads to `out` until the pod's end is read (or
/// `abandon` is set). Output is flushed once nothing more arrived within
/// [`GATHER`], and at least every [`MAX_HOLD`] while something is pending.
fn pump<W: Write>(
    mut reader: Lossless,
    mut printer: Printer,
    out: &mut StdoutSink<W>,
    abandon: &AtomicBool,
) {
    let mut batch = Vec::new();
    let mut wait = Duration::ZERO;
    let mut pending_since: Option<std::time::Instant> = None;
    let mut gathered = false;
    loop {
        batch.clear();
        match reader.recv(&mut batch, wait) {
            Recv::Entries => {
                for kept in &batch {
                    out.write(|w| printer.write_kept(w, kept));
                }
                let since = *pending_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= MAX_HOLD {
                    out.flush();
                    pending_since = None;
                }
                wait = Duration::ZERO;
                gathered = false;
            }
            Recv::Empty if pending_since.is_some() && !gathered => {
                // Caught up: let more gather without asking to be woken.
                std::thread::sleep(GATHER);
                gathered = true;
            }
            Recv::Empty => {
                out.flush();
                pending_since = None;
                wait = Duration::from_secs(3600);
            }
            Recv::Closed => break,
        }
        if abandon.load(Ordering::Relaxed) {
            break;
        }
    }
    out.flush();
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use omnidev_core::{Event, EventKind, LogLine, ServiceState, Stream};

    use super::*;

    fn line(service: &str, text: &str) -> Kept {
        Kept::Line(Arc::new(LogLine::new(service, Stream::Stdout, text, 1)))
    }

    fn render(printer: &mut Printer, kept: &Kept) -> String {
        let mut out = Vec::new();
        printer.write_kept(&mut out, kept).expect("write");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn plain_output_is_padded_and_stripped() {
        let mut printer = Printer::new(&["server".into(), "db".into()], false);
        assert_eq!(render(&mut printer, &line("db", "\x1b[31mready\x1b[0m")), "db      | ready\n");
        let ready = Kept::Event(Arc::new(Event {
            at: SystemTime::UNIX_EPOCH,
            service: Some("server".into()),
            kind: EventKind::Ready { urls: Vec::new() },
        }));
        assert_eq!(render(&mut printer, &ready), "omnidev | server ready\n");
        let lost = Kept::Event(Arc::new(Event::pod(EventKind::Lost {
            count: 3,
            reason: "disk full".into(),
        })));
        assert_eq!(render(&mut printer, &lost), "omnidev | 3 records lost (disk full)\n");
    }

    #[test]
    fn a_services_url_follows_the_readiness_that_shows_it() {
        let url = |name: &str, port: u16| NamedUrl {
            name: name.into(),
            url: format!("http://localhost:{port}"),
        };
        let mut printer = Printer::new(&["server".into(), "vite".into()], false);
        let event = |service: &str, kind| {
            Kept::Event(Arc::new(Event {
                at: SystemTime::UNIX_EPOCH,
                service: Some(service.into()),
                kind,
            }))
        };
        let ready = |urls: &[NamedUrl]| EventKind::Ready { urls: urls.to_vec() };
        let starting = |pid| EventKind::State { state: ServiceState::Starting { pid } };
        assert_eq!(
            render(&mut printer, &event("server", starting(7))),
            "omnidev | server started (pid 7)\n"
        );
        assert_eq!(
            render(&mut printer, &event("server", ready(&[url("api", 6767)]))),
            "omnidev | server ready\nomnidev | api http://localhost:6767\n"
        );
        assert_eq!(
            render(&mut printer, &event("vite", ready(&[url("ui", 5173)]))),
            "omnidev | vite ready\nomnidev | ui http://localhost:5173\n"
        );
        // Once only; again when it changed (its port moved).
        assert_eq!(
            render(&mut printer, &event("server", ready(&[url("api", 6767)]))),
            "omnidev | server ready\n"
        );
        assert_eq!(
            render(&mut printer, &event("server", ready(&[url("api", 6790)]))),
            "omnidev | server ready\nomnidev | api http://localhost:6790\n"
        );
    }

    #[test]
    fn coloured_output_keeps_child_colours() {
        let mut printer = Printer::new(&["server".into()], true);
        let out = render(&mut printer, &line("server", "\x1b[31mx\x1b[0m"));
        assert!(out.starts_with("\x1b[36mserver "), "{out:?}");
        assert!(out.ends_with("\x1b[31mx\x1b[0m\n"), "{out:?}");
    }

    /// A writer that fails like a closed pipe.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
    }

    #[test]
    fn a_closed_stdout_stops_output_once() {
        let mut out = StdoutSink::new(Closed, "/pod/logs".into());
        out.write(|w| w.write_all(&vec![b'x'; 100_000]));
        assert!(!out.alive());
        // Later writes are discarded without trying again.
        out.write(|_| panic!("not called once stdout is gone"));
        out.flush();
    }
}

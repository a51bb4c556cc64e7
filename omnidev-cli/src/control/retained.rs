//! The recent events a running pod keeps for `omnidev events` and `wait`,
//! bounded, read by every reader through a cursor of its own.
//!
//! A thread reads the supervisor's lossless feed (attached before any
//! service started), turns each entry into a [`Record`] and keeps it.
//! Everything here is bounded in bytes:
//!
//! - the kept log lines: [`KEPT_LINE_BYTES`] of text (the supervisor's own
//!   lines, shared, not copies), at most [`KEPT_LINES`] of them;
//! - the other kept records: [`KEPT_EVENT_BYTES`] of their JSON, at most
//!   [`KEPT_EVENTS`];
//! - a reader (a replay, a follower) holds a [`Cursor`], a few numbers:
//!   it reads [`REPLAY_CHUNK`] bytes at a time, encoded as it takes them,
//!   and costs nothing while it waits or stalls. A follower that falls
//!   behind what is kept is told exactly how many lines and records were
//!   dropped before it read them, and goes on from the oldest kept.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime};

use omnidev_core::{Entry, EventKind, Feed, FeedCloser, LogLine, Recv};

use super::events::{Encoder, Record};
use crate::terminal_text::json_line;

/// Records other than log lines kept (the oldest go first).
pub const KEPT_EVENTS: usize = 4096;
/// Bytes of JSON of the records other than log lines kept.
pub const KEPT_EVENT_BYTES: usize = 2 * 1024 * 1024;
/// Log lines kept.
pub const KEPT_LINES: usize = 10_000;
/// Bytes of log line text kept.
pub const KEPT_LINE_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of kept text a replay takes from the store at a time, and of JSON
/// it writes at a time.
pub const REPLAY_CHUNK: usize = 64 * 1024;

/// One kept record.
#[derive(Debug)]
pub struct Item {
    /// Order among every kept record.
    pub seq: u64,
    /// When it happened.
    pub at: SystemTime,
    what: What,
    /// Its line of JSON, made when first sent (most lines never are).
    line: OnceLock<String>,
}

/// What an [`Item`] holds. A log line stays the supervisor's shared line
/// until someone asks for its record: a burst of output costs the pod a
/// reference count per line here, not a record.
#[derive(Debug)]
enum What {
    Record(Record),
    Line {
        line: Arc<LogLine>,
        encoder: Arc<Encoder>,
        record: OnceLock<Record>,
    },
}

impl Item {
    /// The record.
    pub fn record(&self) -> &Record {
        match &self.what {
            What::Record(record) => record,
            What::Line {
                line,
                encoder,
                record,
            } => record.get_or_init(|| encoder.line(line)),
        }
    }

    /// The record as a line of JSON, newline included. A log line's
    /// record is made for it and dropped: only the JSON is kept (a record
    /// would be one more copy of the text).
    pub fn line(&self) -> &str {
        self.line.get_or_init(|| match &self.what {
            What::Line {
                line,
                encoder,
                record,
            } => record
                .get()
                .map_or_else(|| json_line(&encoder.line(line)), json_line),
            What::Record(record) => json_line(record),
        })
    }

    /// The service it is about (`None` for the pod as a whole).
    pub fn service(&self) -> Option<&str> {
        match &self.what {
            What::Record(record) => record.event.service.as_deref(),
            What::Line { line, .. } => Some(&line.service),
        }
    }

    fn is_partial(&self) -> bool {
        matches!(&self.what, What::Record(record) if matches!(record.event.kind, EventKind::PartialLine { .. }))
    }

    fn is_log(&self) -> bool {
        match &self.what {
            What::Line { .. } => true,
            What::Record(record) => matches!(
                record.event.kind,
                EventKind::Log { .. } | EventKind::PartialLine { .. }
            ),
        }
    }
}

/// Which records a reader wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only these services' records (and the pod's own); all when empty.
    pub services: Vec<String>,
    /// Log lines too.
    pub logs: bool,
    /// Only records at or after this time.
    pub since: Option<SystemTime>,
    /// Only records from the last reload on (all when none happened).
    pub since_reload: bool,
    /// With `logs`, unfinished lines too, as they stand (`partial: true`,
    /// each replaced by the next `log` record of its service and stream),
    /// while following; never replayed.
    pub partial: bool,
}

impl Filter {
    /// Whether `item` passes (the replay's starting point aside).
    pub fn matches(&self, item: &Item) -> bool {
        (self.logs || !item.is_log())
            && (self.partial || !item.is_partial())
            && self.since.is_none_or(|since| item.at >= since)
            && (self.services.is_empty()
                || item
                    .service()
                    .is_none_or(|s| self.services.iter().any(|want| want == s)))
    }
}

/// A kept line: the supervisor's own, numbered among the records. It
/// becomes an [`Item`] only when a reader asks for it.
#[derive(Debug)]
struct KeptLine {
    seq: u64,
    line: Arc<LogLine>,
}

impl KeptLine {
    /// Bytes counted against [`KEPT_LINE_BYTES`].
    fn cost(&self) -> usize {
        self.line.text.len() + 128
    }
}

/// Where a reader is in the kept records. Every reader (a replay, a
/// follower) holds one; it costs the pod nothing while the reader waits.
#[derive(Debug, Clone)]
pub struct Cursor {
    /// How many lines, and other records, were kept before `next` in all
    /// (dropped ones included): what it has passed.
    lines_passed: u64,
    events_passed: u64,
    /// A replay ends here; `None` for a follower.
    until: Option<u64>,
    /// The version of the last unfinished line it got.
    partial: u64,
}

/// What [`Retained::read`] brought a reader.
#[derive(Debug, Default)]
pub struct Read {
    /// The records it wants, oldest first.
    pub items: Vec<Arc<Item>>,
    /// Lines it wanted that were dropped (no longer kept) before it read
    /// them: a gap just before `items`.
    pub missed_lines: u64,
    /// The same for the other records.
    pub missed_events: u64,
    /// It has read everything it will get: a replay to its end, or
    /// everything of a pod that stopped.
    pub done: bool,
}

/// An unfinished line as it stands, until its line is finished.
#[derive(Debug)]
struct Partial {
    item: Arc<Item>,
    version: u64,
}

/// The kept records.
#[derive(Debug)]
pub struct Retained {
    /// Makes the records of kept lines.
    encoder: Arc<Encoder>,
    events: VecDeque<Arc<Item>>,
    /// Bytes of the JSON of `events`.
    event_bytes: usize,
    /// Records other than lines dropped so far.
    events_dropped: u64,
    lines: VecDeque<KeptLine>,
    line_bytes: usize,
    lines_dropped: u64,
    next: u64,
    /// The last `reload` record.
    last_reload: Option<Arc<Item>>,
    /// Each service's and stream's unfinished line, while it waits.
    partials: Vec<Partial>,
    partial_version: u64,
    /// The pod stopped: nothing more comes.
    closed: bool,
    /// Changed at each record, unfinished line and at the end: wakes the
    /// followers.
    wake: tokio::sync::watch::Sender<()>,
}

impl Retained {
    /// Nothing kept yet; `encoder` makes the records of lines.
    pub fn new(encoder: Arc<Encoder>) -> Self {
        Self {
            encoder,
            events: VecDeque::new(),
            event_bytes: 0,
            events_dropped: 0,
            lines: VecDeque::new(),
            line_bytes: 0,
            lines_dropped: 0,
            next: 0,
            last_reload: None,
            partials: Vec::new(),
            partial_version: 0,
            closed: false,
            wake: tokio::sync::watch::Sender::new(()),
        }
    }

    /// Keeps `record` (dropping the oldest beyond the bounds).
    pub fn push(&mut self, at: SystemTime, record: Record) {
        let item = Arc::new(Item {
            seq: self.next,
            at,
            what: What::Record(record),
            line: OnceLock::new(),
        });
        self.next += 1;
        if matches!(item.record().event.kind, EventKind::Reloading { .. }) {
            self.last_reload = Some(item.clone());
        }
        self.event_bytes += item.line().len();
        self.events.push_back(item);
        while self.events.len() > KEPT_EVENTS
            || (self.event_bytes > KEPT_EVENT_BYTES && self.events.len() > 1)
        {
            let Some(old) = self.events.pop_front() else {
                break;
            };
            self.event_bytes -= old.line().len();
            self.events_dropped += 1;
        }
        self.wake.send_replace(());
    }

    /// Keeps a service's line (dropping the oldest beyond the bounds): its
    /// record is made only when a reader asks for it. It finishes its
    /// stream's unfinished line.
    pub fn push_line(&mut self, line: Arc<LogLine>) {
        self.partials
            .retain(|p| !same_source(p.item.record(), &line));
        let kept = KeptLine {
            seq: self.next,
            line,
        };
        self.next += 1;
        self.line_bytes += kept.cost();
        self.lines.push_back(kept);
        while self.lines.len() > KEPT_LINES || self.line_bytes > KEPT_LINE_BYTES {
            let Some(old) = self.lines.pop_front() else {
                break;
            };
            self.line_bytes -= old.cost();
            self.lines_dropped += 1;
        }
        self.wake.send_replace(());
    }

    /// Holds an unfinished line as it stands (replacing its stream's
    /// previous one) for the followers that asked for them, until its line
    /// is finished; it is never kept or replayed.
    pub fn push_partial(&mut self, line: &LogLine) {
        self.partial_version += 1;
        let item = Arc::new(Item {
            seq: self.next,
            at: line.at,
            what: What::Record(self.encoder.partial_line(line)),
            line: OnceLock::new(),
        });
        self.partials
            .retain(|p| !same_source(p.item.record(), line));
        self.partials.push(Partial {
            item,
            version: self.partial_version,
        });
        self.wake.send_replace(());
    }

    fn line_item(&self, kept: &KeptLine) -> Arc<Item> {
        Arc::new(Item {
            seq: kept.seq,
            at: kept.line.at,
            what: What::Line {
                line: kept.line.clone(),
                encoder: self.encoder.clone(),
                record: OnceLock::new(),
            },
            line: OnceLock::new(),
        })
    }

    /// A cursor at the first kept record `filter` wants (the last reload,
    /// with `since_reload`): a replay of what is kept now, or, with
    /// `follow`, of every record from there on.
    pub fn cursor(&self, filter: &Filter, follow: bool) -> Cursor {
        let from = match (&self.last_reload, filter.since_reload) {
            (Some(reload), true) => reload.seq,
            _ => 0,
        };
        let lines = self.lines.partition_point(|l| l.seq < from) as u64;
        let events = self.events.partition_point(|e| e.seq < from) as u64;
        Cursor {
            lines_passed: self.lines_dropped + lines,
            events_passed: self.events_dropped + events,
            until: (!follow).then_some(self.next),
            partial: 0,
        }
    }

    /// The next records `filter` wants from `cursor` on, about
    /// [`REPLAY_CHUNK`] bytes of them (none when it has read everything so
    /// far), with what was dropped before it got there; once caught up, a
    /// follower that asked for them gets the unfinished lines as they
    /// stand.
    pub fn read(&self, filter: &Filter, cursor: &mut Cursor) -> Read {
        let mut read = Read::default();
        if cursor.lines_passed < self.lines_dropped {
            if filter.logs {
                read.missed_lines = self.lines_dropped - cursor.lines_passed;
            }
            cursor.lines_passed = self.lines_dropped;
        }
        if cursor.events_passed < self.events_dropped {
            read.missed_events = self.events_dropped - cursor.events_passed;
            cursor.events_passed = self.events_dropped;
        }
        let end = cursor.until.unwrap_or(self.next);
        let index =
            |passed: u64, dropped: u64| usize::try_from(passed - dropped).unwrap_or(usize::MAX);
        let mut lines = self
            .lines
            .range(index(cursor.lines_passed, self.lines_dropped).min(self.lines.len())..)
            .peekable();
        let mut events = self
            .events
            .range(index(cursor.events_passed, self.events_dropped).min(self.events.len())..)
            .peekable();
        let mut bytes = 0;
        while bytes < REPLAY_CHUNK {
            let take_line = match (events.peek(), lines.peek()) {
                (Some(e), Some(l)) => l.seq < e.seq,
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (None, None) => break,
            };
            let item = if take_line {
                let kept = lines.peek().expect("a line");
                if kept.seq >= end {
                    break;
                }
                let item = self.line_item(kept);
                lines.next();
                cursor.lines_passed += 1;
                item
            } else {
                let item = events.peek().map(|e| Arc::clone(e)).expect("a record");
                if item.seq >= end {
                    break;
                }
                events.next();
                cursor.events_passed += 1;
                item
            };
            if filter.matches(&item) {
                bytes += match &item.what {
                    What::Line { line, .. } => line.text.len() + 128,
                    What::Record(_) => item.line().len(),
                };
                read.items.push(item);
            }
        }
        let caught_up = bytes < REPLAY_CHUNK;
        if caught_up && cursor.until.is_none() && filter.partial {
            let seen = cursor.partial;
            for partial in self.partials.iter().filter(|p| p.version > seen) {
                cursor.partial = cursor.partial.max(partial.version);
                if filter.matches(&partial.item) {
                    read.items.push(partial.item.clone());
                }
            }
        }
        read.done = caught_up && (cursor.until.is_some() || self.closed);
        read
    }

    /// Changes at each new record: what a follower waits on.
    pub fn wake(&self) -> tokio::sync::watch::Receiver<()> {
        self.wake.subscribe()
    }

    /// The feed ended: followers get the end of the stream.
    fn close(&mut self) {
        self.closed = true;
        self.wake.send_replace(());
    }

    /// The last reload, when one began at or after `after`.
    pub fn reload_since(&self, after: SystemTime) -> Option<Arc<Item>> {
        self.last_reload.clone().filter(|item| item.at >= after)
    }
}

/// Whether `record` is an unfinished line of `line`'s service and stream.
fn same_source(record: &Record, line: &LogLine) -> bool {
    matches!(&record.event.kind, EventKind::PartialLine { line: p } if p.service == line.service && p.stream == line.stream)
}

/// The kept records, shared between the reading thread and the server.
pub type Store = Arc<Mutex<Retained>>;

/// Locks the store (a panic elsewhere leaves the records usable).
pub fn lock(store: &Store) -> MutexGuard<'_, Retained> {
    store
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Hands memory freed by a stream that ended back to the system: the
/// allocator keeps freed blocks in per-thread arenas otherwise, and a pod
/// whose followers left would stay as big as it was while they stalled.
pub fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Reads `feed` into `store` on a thread of its own until the returned
/// closer closes the feed.
pub fn spawn_reader(
    mut feed: Feed,
    encoder: Encoder,
    store: Store,
) -> std::io::Result<(FeedCloser, std::thread::JoinHandle<()>)> {
    let closer = feed.closer();
    let thread = std::thread::Builder::new()
        .name("omnidev-events".into())
        .spawn(move || {
            let mut batch = Vec::new();
            loop {
                batch.clear();
                match feed.recv_batch(&mut batch, Duration::from_secs(3600)) {
                    Recv::Entries => {
                        let now = SystemTime::now();
                        let mut store = lock(&store);
                        for entry in batch.drain(..) {
                            match entry {
                                Entry::Line(line) => store.push_line(line),
                                Entry::Partial(line) => store.push_partial(&line),
                                Entry::Event(event) => store.push(event.at, encoder.event(event)),
                                lost @ Entry::Lost { .. } => {
                                    store.push(now, encoder.entry(&lost, now));
                                }
                            }
                        }
                    }
                    Recv::Empty => {}
                    Recv::Closed => break,
                }
            }
            lock(&store).close();
        })?;
    Ok((closer, thread))
}

#[cfg(test)]
mod tests {
    use omnidev_core::Stream;

    use super::*;

    fn store() -> Retained {
        Retained::new(Arc::new(Encoder::new(std::path::Path::new("/pod"))))
    }

    fn line(service: &str, text: &str) -> Arc<LogLine> {
        Arc::new(LogLine::new(service, Stream::Stdout, text, 0))
    }

    /// Every kept record `filter` wants, chunk by chunk.
    fn replay(store: &mut Retained, filter: &Filter) -> Vec<Arc<Item>> {
        let mut cursor = store.cursor(filter, false);
        let mut items = Vec::new();
        loop {
            let read = store.read(filter, &mut cursor);
            items.extend(read.items);
            if read.done {
                return items;
            }
        }
    }

    /// What a follower at `cursor` gets now, as JSON lines.
    fn follow(store: &Retained, filter: &Filter, cursor: &mut Cursor) -> String {
        let read = store.read(filter, cursor);
        read.items.iter().map(|item| item.line()).collect()
    }

    fn kinds(items: &[Arc<Item>]) -> Vec<String> {
        items
            .iter()
            .map(|item| match &item.record().event.kind {
                EventKind::Log { line } => format!("log {}", line.text),
                _ => serde_json::to_value(item.record()).expect("encode")["kind"]
                    .as_str()
                    .expect("a kind")
                    .to_owned(),
            })
            .collect()
    }

    #[test]
    fn lines_replay_in_order_with_events_only_when_asked() {
        let mut store = store();
        let encoder = store.encoder.clone();
        let at = SystemTime::UNIX_EPOCH;
        store.push_line(line("server", "one"));
        store.push(at, encoder.notice("between"));
        store.push_line(line("host", "two"));
        let logs = Filter {
            logs: true,
            ..Filter::default()
        };
        assert_eq!(
            kinds(&replay(&mut store, &logs)),
            ["log one", "notice", "log two"]
        );
        assert_eq!(kinds(&replay(&mut store, &Filter::default())), ["notice"]);
        let server = Filter {
            logs: true,
            services: vec!["server".into()],
            ..Filter::default()
        };
        let items = replay(&mut store, &server);
        assert_eq!(kinds(&items), ["log one", "notice"]);
        // A line's record is the schema's `log` record.
        let json: serde_json::Value = serde_json::from_str(items[0].line()).expect("json");
        assert_eq!(json["kind"], "log");
        assert_eq!(json["service"], "server");
        assert_eq!(json["line"], "one");
        assert_eq!(json["pod"], "/pod");
    }

    #[test]
    fn a_replay_goes_out_in_chunks_and_stops_where_following_begins() {
        let mut store = store();
        let big = "x".repeat(60 * 1024);
        for _ in 0..40 {
            store.push_line(line("server", &big));
        }
        let logs = Filter {
            logs: true,
            ..Filter::default()
        };
        let mut replay = store.cursor(&logs, false);
        let mut following = store.cursor(&logs, true);
        store.push_line(line("server", "live"));
        let mut total = 0;
        loop {
            let read = store.read(&logs, &mut replay);
            let text: usize = read.items.iter().map(|item| item.line().len()).sum();
            assert!(text <= REPLAY_CHUNK + 64 * 1024, "a chunk of {text} bytes");
            assert!(read.items.iter().all(|item| !item.line().contains("live")));
            total += read.items.len();
            if read.done {
                break;
            }
        }
        assert_eq!(total, 40);
        let mut got = String::new();
        loop {
            let chunk = follow(&store, &logs, &mut following);
            if chunk.is_empty() {
                break;
            }
            got.push_str(&chunk);
        }
        assert_eq!(got.lines().count(), 41, "the kept lines, then the live one");
        assert!(
            got.ends_with("\"line\":\"live\",\"seq\":0}\n"),
            "{got:.200}"
        );
    }

    /// A follower costs the pod nothing while it does not read; once it
    /// falls behind what is kept it is told exactly how many lines and
    /// records were dropped before it read them, and goes on from the
    /// oldest kept.
    #[test]
    fn a_follower_behind_what_is_kept_is_told_exactly_what_it_missed() {
        let mut store = store();
        let encoder = store.encoder.clone();
        let logs = Filter {
            logs: true,
            ..Filter::default()
        };
        store.push_line(line("server", "before"));
        let mut cursor = store.cursor(&logs, true);
        let mut quiet = store.cursor(&Filter::default(), true);
        let first = store.read(&logs, &mut cursor);
        assert_eq!(first.items.len(), 1);
        for n in 0..KEPT_LINES + 25 {
            store.push_line(line("server", &n.to_string()));
        }
        for _ in 0..KEPT_EVENTS + 3 {
            store.push(SystemTime::UNIX_EPOCH, encoder.notice("n"));
        }
        let read = store.read(&logs, &mut cursor);
        assert_eq!((read.missed_lines, read.missed_events), (25, 3));
        assert_eq!(kinds(&read.items[..1]), ["log 25"], "the oldest kept next");
        let mut seen = read.items.len();
        loop {
            let read = store.read(&logs, &mut cursor);
            assert_eq!((read.missed_lines, read.missed_events), (0, 0));
            if read.items.is_empty() {
                break;
            }
            seen += read.items.len();
        }
        assert_eq!(seen, KEPT_LINES + KEPT_EVENTS);
        // A follower without lines missed none of them.
        let read = store.read(&Filter::default(), &mut quiet);
        assert_eq!((read.missed_lines, read.missed_events), (0, 3));
    }

    #[test]
    fn followers_get_lines_and_the_kept_records_are_bounded() {
        let mut store = store();
        let mut cursor = store.cursor(&Filter::default(), true);
        store.push_line(line("server", "live"));
        let encoder = store.encoder.clone();
        store.push(SystemTime::UNIX_EPOCH, encoder.notice("hello"));
        // Without --logs, the notice only.
        let text = follow(&store, &Filter::default(), &mut cursor);
        assert!(text.contains("hello") && !text.contains("live"), "{text}");
        for n in 0..KEPT_LINES + 10 {
            store.push_line(line("server", &n.to_string()));
        }
        assert_eq!(store.lines.len(), KEPT_LINES);
        let big = "x".repeat(64 * 1024);
        for _ in 0..100 {
            store.push_line(line("server", &big));
            store.push(SystemTime::UNIX_EPOCH, encoder.notice(big.clone()));
        }
        assert!(store.line_bytes <= KEPT_LINE_BYTES, "{}", store.line_bytes);
        assert!(
            store.event_bytes <= KEPT_EVENT_BYTES,
            "{}",
            store.event_bytes
        );
        let logs = Filter {
            logs: true,
            ..Filter::default()
        };
        let items = replay(&mut store, &logs);
        assert!(items.windows(2).all(|w| w[0].seq < w[1].seq));
    }

    /// An unfinished line goes, as it stands, to the followers that asked
    /// for them and have read everything before it, until its line is
    /// finished; it is never kept: a replay, and every other follower, has
    /// the finished line alone.
    #[test]
    fn unfinished_lines_go_only_to_followers_that_asked_and_are_not_kept() {
        let mut store = store();
        let logs = Filter {
            logs: true,
            ..Filter::default()
        };
        let partial = Filter {
            partial: true,
            ..logs.clone()
        };
        let mut asked = store.cursor(&partial, true);
        let mut plain = store.cursor(&logs, true);
        store.push_partial(&line("svc", "Password: "));
        let got = follow(&store, &partial, &mut asked);
        assert!(
            got.contains(r#""kind":"partial-line""#) && got.contains(r#""line":"Password: ""#),
            "{got}"
        );
        assert_eq!(follow(&store, &partial, &mut asked), "", "sent once");
        store.push_partial(&line("svc", "Password: s"));
        store.push_line(line("svc", "Password: secret"));
        let got = follow(&store, &partial, &mut asked);
        assert_eq!(
            got.lines().count(),
            1,
            "the finished line replaces it: {got}"
        );
        assert!(
            got.contains(r#""kind":"log""#) && got.contains(r#""line":"Password: secret""#),
            "{got}"
        );
        let plain = follow(&store, &logs, &mut plain);
        assert_eq!(plain.lines().count(), 1, "{plain}");
        assert!(plain.contains(r#""line":"Password: secret""#), "{plain}");
        assert_eq!(
            kinds(&replay(&mut store, &partial)),
            ["log Password: secret"]
        );
    }
}

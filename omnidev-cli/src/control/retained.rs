//! The recent events a running pod keeps for `omnidev events` and `wait`,
//! bounded, and the live tail that followers subscribe to.
//!
//! A thread reads the supervisor's lossless feed (attached before any
//! service started), turns each entry into a [`Record`], keeps it, and
//! hands it to followers through a broadcast channel: a follower more than
//! [`FOLLOW_BACKLOG`] records behind is told it lagged and is dropped,
//! never slowing the pod.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime};

use omnidev_core::{Entry, Feed, FeedCloser, LogLine, Recv};
use tokio::sync::broadcast;

use super::events::{Body, Encoder, Record};
use crate::headless::encode;

/// Records other than log lines kept (the oldest go first).
pub const KEPT_EVENTS: usize = 4096;
/// Log lines kept.
pub const KEPT_LINES: usize = 10_000;
/// Bytes of encoded log lines kept.
pub const KEPT_LINE_BYTES: usize = 4 * 1024 * 1024;
/// How far a follower may fall behind the live tail before it is dropped.
pub const FOLLOW_BACKLOG: usize = 1024;

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
            } => record.get_or_init(|| encoder.line(line, self.at)),
        }
    }

    /// The record as a line of JSON, newline included.
    pub fn line(&self) -> &str {
        self.line.get_or_init(|| encode(self.record()))
    }

    /// The service it is about (`None` for the pod as a whole).
    pub fn service(&self) -> Option<&str> {
        match &self.what {
            What::Record(record) => record.service.as_deref(),
            What::Line { line, .. } => Some(&line.service),
        }
    }

    fn is_log(&self) -> bool {
        match &self.what {
            What::Line { .. } => true,
            What::Record(record) => record.body.kind() == "log",
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
}

impl Filter {
    /// Whether `item` passes (the replay's starting point aside).
    pub fn matches(&self, item: &Item) -> bool {
        (self.logs || !item.is_log())
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
    at: SystemTime,
    line: Arc<LogLine>,
}

impl KeptLine {
    /// Bytes counted against [`KEPT_LINE_BYTES`].
    fn cost(&self) -> usize {
        self.line.text.len() + 128
    }
}

/// The kept records.
#[derive(Debug)]
pub struct Retained {
    /// Makes the records of kept lines.
    encoder: Arc<Encoder>,
    events: VecDeque<Arc<Item>>,
    lines: VecDeque<KeptLine>,
    line_bytes: usize,
    next: u64,
    /// The last `reload` record.
    last_reload: Option<Arc<Item>>,
    /// Per service, the seq of its last start or end (a `state` other
    /// than stopping, waiting, preparing or stopped; `ready`, `exited`,
    /// `crashed`).
    changed: HashMap<String, u64>,
    tail: broadcast::Sender<Arc<Item>>,
}

impl Retained {
    /// Nothing kept yet; `encoder` makes the records of lines.
    pub fn new(encoder: Arc<Encoder>) -> Self {
        Self {
            encoder,
            events: VecDeque::new(),
            lines: VecDeque::new(),
            line_bytes: 0,
            next: 0,
            last_reload: None,
            changed: HashMap::new(),
            tail: broadcast::channel(FOLLOW_BACKLOG).0,
        }
    }

    /// Keeps `record` (dropping the oldest beyond the bounds) and sends it
    /// to the followers.
    pub fn push(&mut self, at: SystemTime, record: Record) {
        let item = self.item(at, What::Record(record));
        let body = &item.record().body;
        if matches!(body, Body::Reload { .. }) {
            self.last_reload = Some(item.clone());
        }
        // A service was started again (or ended for good) after a reload
        // once it says so; being stopped is not it.
        let settled = match body {
            Body::State { state, .. } => !matches!(
                state.as_str(),
                "stopping" | "waiting" | "preparing" | "stopped"
            ),
            Body::Ready | Body::Exited { .. } | Body::Crashed { .. } => true,
            _ => false,
        };
        if settled && let Some(service) = item.service() {
            self.changed.insert(service.to_owned(), item.seq);
        }
        self.events.push_back(item.clone());
        if self.events.len() > KEPT_EVENTS {
            self.events.pop_front();
        }
        self.send(item);
    }

    /// Keeps a service's line (dropping the oldest beyond the bounds) and
    /// sends it to the followers, if any: its record is made only then.
    pub fn push_line(&mut self, at: SystemTime, line: Arc<LogLine>) {
        let kept = KeptLine {
            seq: self.next,
            at,
            line,
        };
        self.next += 1;
        if self.tail.receiver_count() > 0 {
            let _ = self.tail.send(self.line_item(&kept));
        }
        self.line_bytes += kept.cost();
        self.lines.push_back(kept);
        while self.lines.len() > KEPT_LINES || self.line_bytes > KEPT_LINE_BYTES {
            let Some(old) = self.lines.pop_front() else {
                break;
            };
            self.line_bytes -= old.cost();
        }
    }

    fn line_item(&self, kept: &KeptLine) -> Arc<Item> {
        Arc::new(Item {
            seq: kept.seq,
            at: kept.at,
            what: What::Line {
                line: kept.line.clone(),
                encoder: self.encoder.clone(),
                record: OnceLock::new(),
            },
            line: OnceLock::new(),
        })
    }

    fn item(&mut self, at: SystemTime, what: What) -> Arc<Item> {
        let seq = self.next;
        self.next += 1;
        Arc::new(Item {
            seq,
            at,
            what,
            line: OnceLock::new(),
        })
    }

    fn send(&self, item: Arc<Item>) {
        // Most of the time nobody follows: skip the channel's lock.
        if self.tail.receiver_count() > 0 {
            let _ = self.tail.send(item);
        }
    }

    /// The kept records `filter` wants, oldest first, and a subscription to
    /// every later one (none missed in between: both are taken under the
    /// same lock as [`Retained::push`]).
    pub fn replay(&self, filter: &Filter) -> (Vec<Arc<Item>>, broadcast::Receiver<Arc<Item>>) {
        let from = match (&self.last_reload, filter.since_reload) {
            (Some(reload), true) => reload.seq,
            _ => 0,
        };
        let lines = self
            .lines
            .iter()
            .filter(|kept| filter.logs && kept.seq >= from)
            .map(|kept| self.line_item(kept));
        let mut items: Vec<Arc<Item>> = self
            .events
            .iter()
            .filter(|item| item.seq >= from)
            .cloned()
            .chain(lines)
            .filter(|item| filter.matches(item))
            .collect();
        items.sort_by_key(|item| item.seq);
        (items, self.tail.subscribe())
    }

    /// The last reload, when one began at or after `after`.
    pub fn reload_since(&self, after: SystemTime) -> Option<Arc<Item>> {
        self.last_reload.clone().filter(|item| item.at >= after)
    }

    /// Whether `service` started again (or ended) after the record numbered
    /// `seq`.
    pub fn changed_after(&self, service: &str, seq: u64) -> bool {
        self.changed.get(service).is_some_and(|&at| at > seq)
    }
}

/// The kept records, shared between the reading thread and the server.
pub type Store = Arc<Mutex<Retained>>;

/// Locks the store (a panic elsewhere leaves the records usable).
pub fn lock(store: &Store) -> MutexGuard<'_, Retained> {
    store
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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
                                Entry::Line(line) => store.push_line(now, line),
                                Entry::Event(event) => store.push(event.at, encoder.event(&event)),
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
        })?;
    Ok((closer, thread))
}

#[cfg(test)]
mod tests {
    use omnidev_core::Stream;

    use super::*;

    fn store() -> Retained {
        Retained::new(Arc::new(Encoder::new(
            std::path::Path::new("/pod"),
            std::collections::HashSet::new(),
        )))
    }

    fn line(service: &str, text: &str) -> Arc<LogLine> {
        Arc::new(LogLine::new(service, Stream::Stdout, text, 0))
    }

    fn kinds(items: &[Arc<Item>]) -> Vec<String> {
        items
            .iter()
            .map(|item| match &item.record().body {
                Body::Log { line, .. } => format!("log {line}"),
                body => body.kind().to_owned(),
            })
            .collect()
    }

    #[test]
    fn lines_replay_in_order_with_events_only_when_asked() {
        let mut store = store();
        let encoder = store.encoder.clone();
        let at = SystemTime::UNIX_EPOCH;
        store.push_line(at, line("server", "one"));
        store.push(at, encoder.notice("between"));
        store.push_line(at, line("host", "two"));
        let logs = Filter {
            logs: true,
            ..Filter::default()
        };
        let (items, _) = store.replay(&logs);
        assert_eq!(kinds(&items), ["log one", "notice", "log two"]);
        let (items, _) = store.replay(&Filter::default());
        assert_eq!(kinds(&items), ["notice"]);
        let server = Filter {
            logs: true,
            services: vec!["server".into()],
            ..Filter::default()
        };
        let (items, _) = store.replay(&server);
        assert_eq!(kinds(&items), ["log one", "notice"]);
        // A line's record is the schema's `log` record.
        let json: serde_json::Value = serde_json::from_str(items[0].line()).expect("json");
        assert_eq!(json["kind"], "log");
        assert_eq!(json["service"], "server");
        assert_eq!(json["line"], "one");
        assert_eq!(json["pod"], "/pod");
    }

    #[test]
    fn followers_get_lines_and_the_kept_lines_are_bounded() {
        let mut store = store();
        let (_, mut tail) = store.replay(&Filter::default());
        store.push_line(SystemTime::UNIX_EPOCH, line("server", "live"));
        let item = tail.try_recv().expect("the line reached the follower");
        assert_eq!(kinds(&[item]), ["log live"]);
        for n in 0..KEPT_LINES + 10 {
            store.push_line(SystemTime::UNIX_EPOCH, line("server", &n.to_string()));
        }
        assert_eq!(store.lines.len(), KEPT_LINES);
        let big = "x".repeat(64 * 1024);
        for _ in 0..100 {
            store.push_line(SystemTime::UNIX_EPOCH, line("server", &big));
        }
        assert!(store.line_bytes <= KEPT_LINE_BYTES, "{}", store.line_bytes);
        let logs = Filter {
            logs: true,
            ..Filter::default()
        };
        let (items, _) = store.replay(&logs);
        assert!(items.windows(2).all(|w| w[0].seq < w[1].seq));
    }
}

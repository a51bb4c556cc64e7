//! The recent events a running pod keeps for `omnidev events` and `wait`,
//! bounded, and the live tail that followers subscribe to.
//!
//! A thread reads the supervisor's lossless feed (attached before any
//! service started), turns each entry into a [`Record`], keeps it, and
//! queues it for each follower. Everything here is bounded in bytes:
//!
//! - the kept log lines: [`KEPT_LINE_BYTES`] of text (the supervisor's own
//!   lines, shared, not copies), at most [`KEPT_LINES`] of them;
//! - the other kept records: [`KEPT_EVENT_BYTES`] of their JSON, at most
//!   [`KEPT_EVENTS`];
//! - each follower: [`FOLLOW_BUDGET`] bytes of *encoded* records queued or
//!   taken and not yet written to its socket (a line of control bytes
//!   grows six-fold as JSON, so the text is not the measure). A follower
//!   over it is dropped with `lagged` and its queue freed at once;
//! - a replay goes out [`REPLAY_CHUNK`] bytes at a time: records are
//!   encoded one by one as the reader takes them, never all at once.

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
/// Bytes of encoded records a follower may have waiting (queued, or taken
/// and not yet written to its socket) before it is dropped with `lagged`.
pub const FOLLOW_BUDGET: usize = 2 * 1024 * 1024;
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

/// What a follower has waiting.
#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<Arc<Item>>,
    /// Bytes of the JSON of `items`.
    queued: usize,
    /// Bytes taken by the follower and not yet written.
    in_flight: usize,
    /// Records dropped when it went over [`FOLLOW_BUDGET`]; the follower is
    /// done then.
    missed: Option<u64>,
    /// The pod stopped keeping records.
    closed: bool,
}

/// One follower's queue, shared by the store and the follower.
#[derive(Debug)]
struct Tail {
    filter: Filter,
    queue: Mutex<Queue>,
    ready: tokio::sync::Notify,
}

impl Tail {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `item` if the follower wants it and it fits its budget;
    /// whether the follower is still following.
    fn offer(&self, item: &Arc<Item>) -> bool {
        if !self.filter.matches(item) {
            return self.lock().missed.is_none();
        }
        let cost = item.line().len();
        let mut queue = self.lock();
        if let Some(missed) = &mut queue.missed {
            *missed += 1;
            return false;
        }
        if queue.queued + queue.in_flight + cost > FOLLOW_BUDGET {
            // Its queue is freed now, not when it reads again.
            queue.missed = Some(queue.items.len() as u64 + 1);
            queue.items = VecDeque::new();
            queue.queued = 0;
            drop(queue);
            self.ready.notify_one();
            return false;
        }
        queue.queued += cost;
        queue.items.push_back(item.clone());
        drop(queue);
        self.ready.notify_one();
        true
    }
}

/// What a follower gets next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// This many bytes of JSON lines were added to the buffer; call
    /// [`Follower::written`] with it once they are out.
    Records(usize),
    /// It went over [`FOLLOW_BUDGET`]; this many records were dropped.
    Lagged(u64),
    /// The pod stopped.
    Closed,
}

/// A follower's end of its queue; the store forgets it when it is dropped.
#[derive(Debug)]
pub struct Follower {
    tail: Arc<Tail>,
}

impl Follower {
    /// Waits for records and appends them to `buf` as JSON lines.
    pub async fn next(&self, buf: &mut Vec<u8>) -> Next {
        loop {
            {
                let mut queue = self.tail.lock();
                if let Some(missed) = queue.missed {
                    return Next::Lagged(missed);
                }
                if !queue.items.is_empty() {
                    let bytes = std::mem::take(&mut queue.queued);
                    queue.in_flight += bytes;
                    for item in queue.items.drain(..) {
                        buf.extend_from_slice(item.line().as_bytes());
                    }
                    return Next::Records(bytes);
                }
                if queue.closed {
                    return Next::Closed;
                }
            }
            // A permit is stored when nobody waits: no wake-up is lost.
            self.tail.ready.notified().await;
        }
    }

    /// `bytes` handed out by [`Follower::next`] were written: they no
    /// longer count against the budget.
    pub fn written(&self, bytes: usize) {
        let mut queue = self.tail.lock();
        queue.in_flight = queue.in_flight.saturating_sub(bytes);
    }
}

/// Where a replay has got to: the kept records numbered `next..until`
/// are still to go.
#[derive(Debug)]
pub struct Replay {
    next: u64,
    until: u64,
}

/// The kept records.
#[derive(Debug)]
pub struct Retained {
    /// Makes the records of kept lines.
    encoder: Arc<Encoder>,
    events: VecDeque<Arc<Item>>,
    /// Bytes of the JSON of `events`.
    event_bytes: usize,
    lines: VecDeque<KeptLine>,
    line_bytes: usize,
    next: u64,
    /// The last `reload` record.
    last_reload: Option<Arc<Item>>,
    followers: Vec<Arc<Tail>>,
}

impl Retained {
    /// Nothing kept yet; `encoder` makes the records of lines.
    pub fn new(encoder: Arc<Encoder>) -> Self {
        Self {
            encoder,
            events: VecDeque::new(),
            event_bytes: 0,
            lines: VecDeque::new(),
            line_bytes: 0,
            next: 0,
            last_reload: None,
            followers: Vec::new(),
        }
    }

    /// Keeps `record` (dropping the oldest beyond the bounds) and sends it
    /// to the followers.
    pub fn push(&mut self, at: SystemTime, record: Record) {
        let item = self.item(at, What::Record(record));
        if matches!(item.record().event.kind, EventKind::Reloading { .. }) {
            self.last_reload = Some(item.clone());
        }
        self.event_bytes += item.line().len();
        self.events.push_back(item.clone());
        while self.events.len() > KEPT_EVENTS
            || (self.event_bytes > KEPT_EVENT_BYTES && self.events.len() > 1)
        {
            let Some(old) = self.events.pop_front() else {
                break;
            };
            self.event_bytes -= old.line().len();
        }
        self.send(&item);
    }

    /// Keeps a service's line (dropping the oldest beyond the bounds) and
    /// sends it to the followers, if any: its record is made only then.
    pub fn push_line(&mut self, line: Arc<LogLine>) {
        let kept = KeptLine {
            seq: self.next,
            line,
        };
        self.next += 1;
        if !self.followers.is_empty() {
            self.send(&self.line_item(&kept));
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

    /// Sends an unfinished line's record (`partial: true`) to the
    /// followers that asked for them; it is not kept (a replay has the
    /// finished line).
    pub fn push_partial(&mut self, line: &LogLine) {
        if !self.followers.iter().any(|tail| tail.filter.partial) {
            return;
        }
        let item = Arc::new(Item {
            seq: self.next,
            at: line.at,
            what: What::Record(self.encoder.partial_line(line)),
            line: OnceLock::new(),
        });
        self.send(&item);
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

    /// Queues `item` for every follower, forgetting those gone or over
    /// their budget.
    fn send(&mut self, item: &Arc<Item>) {
        self.followers
            .retain(|tail| Arc::strong_count(tail) > 1 && tail.offer(item));
    }

    /// Where the replay of the kept records `filter` wants begins, and,
    /// with `follow`, a follower queue for every later record (none missed
    /// in between: both are made under the same lock as
    /// [`Retained::push`]).
    pub fn follow(&mut self, filter: &Filter, follow: bool) -> (Replay, Option<Follower>) {
        let from = match (&self.last_reload, filter.since_reload) {
            (Some(reload), true) => reload.seq,
            _ => 0,
        };
        let replay = Replay {
            next: from,
            until: self.next,
        };
        let follower = follow.then(|| {
            let tail = Arc::new(Tail {
                filter: filter.clone(),
                queue: Mutex::new(Queue::default()),
                ready: tokio::sync::Notify::new(),
            });
            self.followers.push(tail.clone());
            Follower { tail }
        });
        (replay, follower)
    }

    /// The next kept records of `replay` that `filter` wants, oldest
    /// first, about [`REPLAY_CHUNK`] bytes of text of them; none once the
    /// replay is over. Records dropped meanwhile are skipped.
    pub fn replay_chunk(&self, filter: &Filter, replay: &mut Replay) -> Vec<Arc<Item>> {
        let mut events = self
            .events
            .range(self.events.partition_point(|e| e.seq < replay.next)..);
        let mut lines = self
            .lines
            .range(self.lines.partition_point(|l| l.seq < replay.next)..)
            .filter(|_| filter.logs);
        let (mut event, mut line) = (events.next(), lines.next());
        let mut items = Vec::new();
        let mut bytes = 0;
        while bytes < REPLAY_CHUNK {
            let take_line = match (event, line) {
                (Some(e), Some(l)) => l.seq < e.seq,
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (None, None) => break,
            };
            let item = if take_line {
                let kept = line.take().filter(|kept| kept.seq < replay.until);
                line = lines.next();
                kept.map(|kept| self.line_item(kept))
            } else {
                let kept = event.take().filter(|item| item.seq < replay.until);
                event = events.next();
                kept.cloned()
            };
            let Some(item) = item else {
                // Past the replay's end: the follower has it.
                replay.next = replay.until;
                break;
            };
            replay.next = item.seq + 1;
            if filter.matches(&item) {
                bytes += match &item.what {
                    What::Line { line, .. } => line.text.len() + 128,
                    What::Record(_) => item.line().len(),
                };
                items.push(item);
            }
        }
        if items.is_empty() {
            replay.next = replay.until;
        }
        items
    }

    /// The feed ended: followers get the end of the stream.
    fn close(&mut self) {
        for tail in self.followers.drain(..) {
            tail.lock().closed = true;
            tail.ready.notify_one();
        }
    }

    /// The last reload, when one began at or after `after`.
    pub fn reload_since(&self, after: SystemTime) -> Option<Arc<Item>> {
        self.last_reload.clone().filter(|item| item.at >= after)
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
        let (mut replay, _) = store.follow(filter, false);
        let mut items = Vec::new();
        loop {
            let chunk = store.replay_chunk(filter, &mut replay);
            if chunk.is_empty() {
                return items;
            }
            items.extend(chunk);
        }
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
        let (mut replay, follower) = store.follow(&logs, true);
        store.push_line(line("server", "live"));
        let mut total = 0;
        loop {
            let chunk = store.replay_chunk(&logs, &mut replay);
            if chunk.is_empty() {
                break;
            }
            let text: usize = chunk.iter().map(|item| item.line().len()).sum();
            assert!(text <= REPLAY_CHUNK + 64 * 1024, "a chunk of {text} bytes");
            assert!(chunk.iter().all(|item| !item.line().contains("live")));
            total += chunk.len();
        }
        assert_eq!(total, 40);
        let mut buf = Vec::new();
        let next = block_on(follower.expect("following").next(&mut buf));
        assert!(matches!(next, Next::Records(_)), "{next:?}");
        assert!(String::from_utf8_lossy(&buf).contains("\"line\":\"live\""));
    }

    /// Runs a future that is ready at once.
    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(future)
    }

    #[test]
    fn a_follower_that_does_not_read_costs_its_budget_then_is_dropped() {
        let mut store = store();
        let logs = Filter {
            logs: true,
            ..Filter::default()
        };
        let (_, follower) = store.follow(&logs, true);
        let follower = follower.expect("following");
        // Control bytes: six bytes of JSON each (`\u0001`).
        let control = "\u{1}".repeat(60 * 1024);
        let mut sent = 0;
        while store.followers.len() == 1 {
            store.push_line(line("server", &control));
            sent += 1;
            let queued = store.followers.first().map_or(0, |tail| tail.lock().queued);
            assert!(queued <= FOLLOW_BUDGET, "{queued} bytes queued");
        }
        assert!(
            sent > 1 && sent * control.len() * 6 < 2 * FOLLOW_BUDGET,
            "{sent} lines"
        );
        // Its queue is freed at once; it hears how many it missed.
        assert!(follower.tail.lock().items.is_empty());
        let mut buf = Vec::new();
        assert_eq!(block_on(follower.next(&mut buf)), Next::Lagged(sent as u64));
        assert!(buf.is_empty());
        // Bytes taken and not yet written count too.
        let (_, follower) = store.follow(&logs, true);
        let follower = follower.expect("following");
        let one = "y".repeat(FOLLOW_BUDGET / 3);
        store.push_line(line("server", &one));
        store.push_line(line("server", &one));
        let Next::Records(taken) = block_on(follower.next(&mut buf)) else {
            panic!("records")
        };
        store.push_line(line("server", &one));
        assert_eq!(
            store.followers.len(),
            0,
            "over its budget with what it took"
        );
        follower.written(taken);
        // A follower dropped is forgotten at the next record.
        let (_, gone) = store.follow(&logs, true);
        drop(gone);
        store.push_line(line("server", "x"));
        assert!(store.followers.is_empty());
    }

    #[test]
    fn followers_get_lines_and_the_kept_records_are_bounded() {
        let mut store = store();
        let (_, follower) = store.follow(&Filter::default(), true);
        let follower = follower.expect("following");
        store.push_line(line("server", "live"));
        let encoder = store.encoder.clone();
        store.push(SystemTime::UNIX_EPOCH, encoder.notice("hello"));
        let mut buf = Vec::new();
        block_on(follower.next(&mut buf));
        // Without --logs, the notice only.
        let text = String::from_utf8_lossy(&buf);
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

    /// An unfinished line goes to the followers that asked for them, as a
    /// `log` record with `partial: true`, and is never kept: a replay, and
    /// every other follower, has the finished line alone.
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
        let (_, asked) = store.follow(&partial, true);
        let (_, plain) = store.follow(&logs, true);
        let (asked, plain) = (asked.expect("follower"), plain.expect("follower"));
        store.push_partial(&line("svc", "Password: "));
        store.push_line(line("svc", "Password: secret"));
        let got = |follower: &Follower| {
            let mut buf = Vec::new();
            let next = block_on(follower.next(&mut buf));
            assert!(matches!(next, Next::Records(_)), "{next:?}");
            String::from_utf8(buf).expect("utf-8")
        };
        let asked = got(&asked);
        let lines: Vec<&str> = asked.lines().collect();
        assert_eq!(lines.len(), 2, "{asked}");
        assert!(
            lines[0].contains(r#""kind":"partial-line""#)
                && lines[0].contains(r#""line":"Password: ""#),
            "{asked}"
        );
        assert!(
            lines[1].contains(r#""kind":"log""#)
                && lines[1].contains(r#""line":"Password: secret""#),
            "{asked}"
        );
        let plain = got(&plain);
        assert_eq!(plain.lines().count(), 1, "{plain}");
        assert!(plain.contains(r#""line":"Password: secret""#), "{plain}");
        assert_eq!(
            kinds(&replay(&mut store, &partial)),
            ["log Password: secret"]
        );
    }
}

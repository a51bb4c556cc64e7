//! A lossless, ordered subscription ([`Feed`]) to a supervisor's output
//! and events: a bounded queue in memory that overflows to a spool on disk
//! and is read back in order, so a slow reader loses nothing and never
//! slows a service down.
//!
//! The broadcast channel of [`Supervisor::subscribe`](crate::Supervisor::subscribe)
//! stays lossy, and [`crate::history`] keeps the recent lines and events
//! for readers with a cursor (told exactly what they missed); a feed is for
//! readers that must see every line exactly once, such as headless output.
//!
//! Order: one feed receives entries in the order the supervisor recorded
//! them — a service's lines in exactly the order it printed them per
//! stream (stdout and stderr are separate pipes, so their relative order is
//! the order the supervisor read them), and across services the order the
//! supervisor saw them arrive.
//!
//! Memory: at most [`FeedConfig::memory_bytes`] of entries are queued in
//! memory. Once that is full, every later entry goes to the spool until the
//! reader has caught up with all of it, then memory is used again. The
//! spool is a chain of unlinked temporary files of
//! [`FeedConfig::segment_bytes`] each in [`FeedConfig::spool_dir`]: nothing
//! is visible in the directory, a segment's disk space is returned as soon
//! as it has been read, and nothing is left behind even after a `SIGKILL`.
//! The reader decodes at most [`READ_CHUNK`] bytes of spool at a time.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::broadcast;

use crate::event::{Event, LogLine, Stream};

/// Bytes of spool the reader decodes at a time.
pub const READ_CHUNK: usize = 256 * 1024;

/// Rough per-entry overhead counted against the memory budget.
const ENTRY_OVERHEAD: usize = 96;

/// Bytes counted for a queued event that is not a line.
const EVENT_COST: usize = 512;

/// Where a feed spools and how much it keeps in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedConfig {
    /// Directory holding the spool's (unlinked) files.
    pub spool_dir: PathBuf,
    /// Bytes of queued entries held in memory before spooling (default
    /// 4 MiB).
    pub memory_bytes: usize,
    /// Size of one spool file (default 64 MiB); a file is released as soon
    /// as it has been read, so the disk holds the backlog plus at most one
    /// segment.
    pub segment_bytes: u64,
}

impl FeedConfig {
    /// The defaults, spooling into `spool_dir`.
    pub fn new(spool_dir: impl Into<PathBuf>) -> Self {
        Self {
            spool_dir: spool_dir.into(),
            memory_bytes: 4 * 1024 * 1024,
            segment_bytes: 64 * 1024 * 1024,
        }
    }
}

/// One entry of a feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A line of a service's output (or of its prepare steps).
    Line(Arc<LogLine>),
    /// Any other event (state changes, readiness, crashes, notices).
    Event(Event),
    /// Entries that could not be kept (the spool could not be written, for
    /// example on a full disk). They are still in the log files.
    Lost {
        /// How many entries were lost here.
        count: u64,
        /// Why.
        reason: String,
    },
}

impl Entry {
    fn cost(&self) -> usize {
        match self {
            Entry::Line(line) => line.text.len() + line.service.len() + ENTRY_OVERHEAD,
            Entry::Event(_) | Entry::Lost { .. } => EVENT_COST,
        }
    }
}

/// What [`Feed::recv_batch`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recv {
    /// At least one entry was appended.
    Entries,
    /// Nothing arrived within the wait.
    Empty,
    /// The feed was closed and everything in it has been read.
    Closed,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One spool file.
#[derive(Debug)]
struct Segment {
    file: Arc<File>,
    /// Bytes written (and readable) so far.
    written: u64,
}

#[derive(Debug, Default)]
struct State {
    memory: VecDeque<Entry>,
    memory_bytes: usize,
    /// Spooled entries, oldest segment first. While this is non-empty,
    /// every new entry is spooled, which keeps the order.
    segments: VecDeque<Segment>,
    /// Entries that could not be spooled since the reader last heard.
    lost: u64,
    lost_reason: String,
    closed: bool,
    /// The reader waits on the condvar.
    waiting: bool,
    encode: Vec<u8>,
}

#[derive(Debug)]
struct Shared {
    config: FeedConfig,
    state: Mutex<State>,
    ready: Condvar,
    /// The reader was dropped: stop queueing for it.
    gone: AtomicBool,
}

impl Shared {
    /// Queues entries (called with the publisher's order already fixed).
    fn push(&self, entries: impl IntoIterator<Item = Entry>) {
        let mut state = lock(&self.state);
        let mut spooled = false;
        for entry in entries {
            let cost = entry.cost();
            if state.segments.is_empty()
                && state.lost == 0
                && state.memory_bytes + cost <= self.config.memory_bytes
            {
                state.memory_bytes += cost;
                state.memory.push_back(entry);
            } else {
                encode(&entry, &mut state.encode);
                spooled = true;
            }
        }
        if spooled {
            self.spool(&mut state);
        }
        if state.waiting {
            state.waiting = false;
            self.ready.notify_one();
        }
    }

    /// Appends the encoded entries to the spool's last segment (starting a
    /// new one when it is full).
    fn spool(&self, state: &mut State) {
        let bytes = std::mem::take(&mut state.encode);
        let result = (|| -> std::io::Result<()> {
            let need_new = state
                .segments
                .back()
                .is_none_or(|s| s.written >= self.config.segment_bytes);
            if need_new {
                let file = tempfile::tempfile_in(&self.config.spool_dir)?;
                state.segments.push_back(Segment {
                    file: Arc::new(file),
                    written: 0,
                });
            }
            let segment = state
                .segments
                .back_mut()
                .expect("a segment was just ensured");
            segment.file.write_all_at(&bytes, segment.written)?;
            segment.written += bytes.len() as u64;
            Ok(())
        })();
        if let Err(e) = result {
            state.lost += count_records(&bytes);
            state.lost_reason = format!(
                "could not write the output spool in {}: {e}",
                self.config.spool_dir.display()
            );
        }
        let mut bytes = bytes;
        bytes.clear();
        state.encode = bytes;
    }
}

/// The reading end of a lossless subscription; see the module docs.
#[derive(Debug)]
pub struct Feed {
    shared: Arc<Shared>,
    /// Read position in the front segment.
    position: u64,
    /// Bytes read from the spool but not yet decoded (a record cut by the
    /// end of a chunk).
    pending: Vec<u8>,
    /// The service name of the last line decoded, shared with the next
    /// line of the same service.
    last_service: Option<Arc<str>>,
}

/// Closes a [`Feed`] from another thread or task: its reader then gets
/// everything queued so far and [`Recv::Closed`] after it.
#[derive(Debug, Clone)]
pub struct FeedCloser {
    shared: Arc<Shared>,
}

impl FeedCloser {
    /// No more waiting: once what is queued has been read, the reader gets
    /// [`Recv::Closed`]. Entries published later are still queued.
    pub fn close(&self) {
        let mut state = lock(&self.shared.state);
        state.closed = true;
        state.waiting = false;
        self.shared.ready.notify_all();
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.shared.gone.store(true, Ordering::Relaxed);
    }
}

impl Feed {
    /// A handle that closes this feed.
    pub fn closer(&self) -> FeedCloser {
        FeedCloser {
            shared: self.shared.clone(),
        }
    }

    /// Bytes currently spooled on disk and not yet read.
    pub fn spooled_bytes(&self) -> u64 {
        let state = lock(&self.shared.state);
        let total: u64 = state.segments.iter().map(|s| s.written).sum();
        total.saturating_sub(self.position)
    }

    /// Appends the next entries, in order, to `out`: whatever is queued,
    /// waiting up to `wait` for something to arrive. At most about
    /// [`READ_CHUNK`] bytes of spool are decoded per call.
    pub fn recv_batch(&mut self, out: &mut Vec<Entry>, wait: Duration) -> Recv {
        let deadline = Instant::now().checked_add(wait);
        let mut state = lock(&self.shared.state);
        loop {
            if !state.memory.is_empty() {
                // Memory holds the oldest entries: spooling starts only once
                // it is full, and ends only when the spool is read.
                state.memory_bytes = 0;
                out.extend(state.memory.drain(..));
                return Recv::Entries;
            }
            if let Some(front) = state.segments.front() {
                let file = front.file.clone();
                let end = front.written;
                let last = state.segments.len() == 1;
                if self.position < end {
                    drop(state);
                    self.read_spool(&file, end, out);
                    return Recv::Entries;
                }
                if !last {
                    state.segments.pop_front();
                    self.position = 0;
                    continue;
                }
                // Caught up with all of the spool: back to memory.
                state.segments.clear();
                self.position = 0;
            }
            if state.lost > 0 {
                out.push(Entry::Lost {
                    count: std::mem::take(&mut state.lost),
                    reason: std::mem::take(&mut state.lost_reason),
                });
                return Recv::Entries;
            }
            if state.closed {
                return Recv::Closed;
            }
            let now = Instant::now();
            let remaining = match deadline {
                Some(deadline) if deadline <= now => return Recv::Empty,
                Some(deadline) => deadline - now,
                None => Duration::from_secs(3600),
            };
            state.waiting = true;
            state = self
                .shared
                .ready
                .wait_timeout(state, remaining)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Decodes up to [`READ_CHUNK`] bytes of the front segment (more when a
    /// single record is larger).
    fn read_spool(&mut self, file: &File, end: u64, out: &mut Vec<Entry>) {
        let available = usize::try_from(end - self.position).unwrap_or(usize::MAX);
        let want = available.min(READ_CHUNK.max(self.record_len_wanted()));
        let start = self.pending.len();
        self.pending.resize(start + want, 0);
        if let Err(e) = file.read_exact_at(&mut self.pending[start..], self.position) {
            // Only the reader shrinks the spool, so this is an I/O error of
            // the disk: say so and skip the segment.
            self.pending.clear();
            let mut state = lock(&self.shared.state);
            let skipped = state.segments.pop_front().map_or(0, |s| s.written);
            self.position = 0;
            out.push(Entry::Lost {
                count: 0,
                reason: format!("could not read {skipped} bytes of output spool: {e}"),
            });
            return;
        }
        self.position += want as u64;
        let mut used = 0;
        while let Some((entry, len)) = decode(&self.pending[used..], &mut self.last_service) {
            out.push(entry);
            used += len;
        }
        self.pending.drain(..used);
    }

    /// The full length of a record cut short in `pending`, if any.
    fn record_len_wanted(&self) -> usize {
        if self.pending.len() >= 4 {
            record_len(&self.pending) + 4
        } else {
            0
        }
    }
}

// ----- the spool's record format ---------------------------------------
//
// Each record: a little-endian u32 length, then the payload. A line is
// tag 0, stream (u8), seq (u64 LE), when it was read (nanoseconds since
// the epoch, u64 LE), service length (u16 LE), service, text;
// an unfinished line the same with tag 2. Any other event is tag 1
// followed by its JSON.

const TAG_LINE: u8 = 0;
const TAG_EVENT: u8 = 1;

fn stream_byte(stream: Stream) -> u8 {
    match stream {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
        Stream::Supervisor => 2,
        Stream::Merged => 3,
    }
}

fn byte_stream(byte: u8) -> Stream {
    match byte {
        0 => Stream::Stdout,
        1 => Stream::Stderr,
        3 => Stream::Merged,
        _ => Stream::Supervisor,
    }
}

fn encode(entry: &Entry, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    match entry {
        Entry::Line(line) => {
            let service = &line.service.as_bytes()[..line.service.len().min(usize::from(u16::MAX))];
            out.push(TAG_LINE);
            out.push(stream_byte(line.stream));
            out.extend_from_slice(&line.seq.to_le_bytes());
            out.extend_from_slice(&nanos_since_epoch(line.at).to_le_bytes());
            out.extend_from_slice(
                &u16::try_from(service.len())
                    .expect("cut to u16::MAX")
                    .to_le_bytes(),
            );
            out.extend_from_slice(service);
            out.extend_from_slice(line.text.as_bytes());
        }
        Entry::Event(event) => {
            out.push(TAG_EVENT);
            // An event always serialises: plain data, string keys.
            let _ = serde_json::to_writer(&mut *out, event);
        }
        Entry::Lost { .. } => {
            // Never queued by a publisher.
            out.truncate(start);
            return;
        }
    }
    let len = u32::try_from(out.len() - start - 4).unwrap_or(u32::MAX);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// `at` in nanoseconds since the epoch (0 before it; enough until 2554).
fn nanos_since_epoch(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn record_len(bytes: &[u8]) -> usize {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize
}

fn count_records(mut bytes: &[u8]) -> u64 {
    let mut n = 0;
    while bytes.len() >= 4 {
        let len = record_len(bytes) + 4;
        bytes = &bytes[len.min(bytes.len())..];
        n += 1;
    }
    n
}

/// The first complete record of `bytes` and its length, if there is one.
fn decode(bytes: &[u8], last_service: &mut Option<Arc<str>>) -> Option<(Entry, usize)> {
    if bytes.len() < 4 {
        return None;
    }
    let len = record_len(bytes);
    let payload = bytes.get(4..4 + len)?;
    let entry = match payload.split_first() {
        Some((&TAG_LINE, rest)) if rest.len() >= 19 => {
            let stream = byte_stream(rest[0]);
            let seq = u64::from_le_bytes(rest[1..9].try_into().expect("8 bytes"));
            let nanos = u64::from_le_bytes(rest[9..17].try_into().expect("8 bytes"));
            let service_len = usize::from(u16::from_le_bytes([rest[17], rest[18]]));
            let rest = &rest[19..];
            let (service, text) = rest.split_at(service_len.min(rest.len()));
            let service = match last_service {
                Some(last) if last.as_bytes() == service => last.clone(),
                _ => {
                    let name: Arc<str> = Arc::from(String::from_utf8_lossy(service));
                    *last_service = Some(name.clone());
                    name
                }
            };
            let line = Arc::new(LogLine {
                service,
                stream,
                text: String::from_utf8_lossy(text).into_owned(),
                seq,
                at: SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos),
            });
            Entry::Line(line)
        }
        Some((&TAG_EVENT, json)) => match serde_json::from_slice(json) {
            Ok(event) => Entry::Event(event),
            Err(e) => Entry::Lost {
                count: 1,
                reason: format!("an event in the output spool did not decode: {e}"),
            },
        },
        _ => Entry::Lost {
            count: 1,
            reason: "a damaged record in the output spool".to_owned(),
        },
    };
    Some((entry, 4 + len))
}

// ----- publishing ------------------------------------------------------

/// Where a supervisor publishes: the lossy broadcast channel and every
/// feed, from one place so they see the same order.
#[derive(Debug)]
pub(crate) struct Bus {
    /// Every event, lines included.
    events: broadcast::Sender<Event>,
    /// Every event but lines: for watchers of states, which would otherwise
    /// wake (and cost the capture a clone) for every line of a burst.
    changes: broadcast::Sender<Event>,
    feeds: Mutex<Vec<Arc<Shared>>>,
    /// What is kept for readers with a cursor.
    pub(crate) history: crate::history::History,
}

impl Bus {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            events: broadcast::channel(capacity).0,
            changes: broadcast::channel(capacity).0,
            feeds: Mutex::new(Vec::new()),
            history: crate::history::History::default(),
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    pub(crate) fn subscribe_changes(&self) -> broadcast::Receiver<Event> {
        self.changes.subscribe()
    }

    /// A new feed receiving everything published from now on.
    pub(crate) fn feed(&self, config: FeedConfig) -> Feed {
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            gone: AtomicBool::new(false),
        });
        lock(&self.feeds).push(shared.clone());
        Feed {
            shared,
            position: 0,
            pending: Vec::new(),
            last_service: None,
        }
    }

    fn each_feed(&self, mut f: impl FnMut(&Shared)) {
        let mut feeds = lock(&self.feeds);
        feeds.retain(|feed| !feed.gone.load(Ordering::Relaxed));
        for feed in feeds.iter() {
            f(feed);
        }
    }

    /// Publishes an event to every subscriber and feed.
    pub(crate) fn send(&self, event: Event) {
        self.history.push_event(&event);
        self.each_feed(|feed| feed.push([Entry::Event(event.clone())]));
        if self.changes.receiver_count() > 0 {
            let _ = self.changes.send(event.clone());
        }
        let _ = self.events.send(event);
    }

    /// Publishes an unfinished line to the broadcast subscribers and the
    /// history (the feeds get the line once it is finished).
    pub(crate) fn send_partial(&self, line: LogLine) {
        let line = Arc::new(line);
        self.history.push_partial(line.clone());
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(Event::partial(LogLine::clone(&line)));
        }
    }

    /// Publishes lines already numbered in order.
    pub(crate) fn send_lines(&self, lines: &[Arc<LogLine>]) {
        self.history.push_lines(lines);
        self.each_feed(|feed| feed.push(lines.iter().cloned().map(Entry::Line)));
        if self.events.receiver_count() > 0 {
            for line in lines {
                let _ = self.events.send(Event::log(LogLine::clone(line)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Line `n`, read at a time of its own (to the nanosecond).
    fn line(n: u64) -> Arc<LogLine> {
        let mut line = LogLine::new("svc", Stream::Stdout, format!("line {n:06}"), n);
        line.at = SystemTime::UNIX_EPOCH + Duration::new(1_765_000_000 + n, 123_456_789);
        Arc::new(line)
    }

    fn texts(entries: &[Entry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| match e {
                Entry::Line(l) => l.text.clone(),
                Entry::Event(e) => format!("event {:?}", e.kind),
                Entry::Lost { count, reason } => format!("lost {count}: {reason}"),
            })
            .collect()
    }

    fn drain(feed: &mut Feed) -> Vec<Entry> {
        let mut out = Vec::new();
        while feed.recv_batch(&mut out, Duration::ZERO) == Recv::Entries {}
        out
    }

    fn small(dir: &std::path::Path) -> FeedConfig {
        FeedConfig {
            spool_dir: dir.to_owned(),
            memory_bytes: 1000,
            segment_bytes: 4096,
        }
    }

    #[test]
    fn overflow_goes_to_disk_and_comes_back_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bus = Bus::new(16);
        let mut feed = bus.feed(small(dir.path()));
        let lines: Vec<_> = (0..5000).map(line).collect();
        for chunk in lines.chunks(7) {
            bus.send_lines(chunk);
        }
        assert!(
            feed.spooled_bytes() > 4096,
            "several segments: {}",
            feed.spooled_bytes()
        );
        bus.send(Event {
            at: std::time::SystemTime::UNIX_EPOCH,
            service: Some("svc".into()),
            kind: crate::EventKind::Ready { urls: Vec::new() },
        });
        let entries = drain(&mut feed);
        let mut want: Vec<String> = (0..5000).map(|n| format!("line {n:06}")).collect();
        want.push("event Ready { urls: [] }".into());
        assert_eq!(texts(&entries), want);
        assert_eq!(feed.spooled_bytes(), 0);
        // Each line whole, its time of reading included.
        for (entry, sent) in entries.iter().zip(&lines) {
            let Entry::Line(got) = entry else {
                panic!("{entry:?}")
            };
            assert_eq!(got, sent);
        }

        // Caught up: memory again, and still in order.
        bus.send_lines(&[line(5000)]);
        assert_eq!(feed.spooled_bytes(), 0);
        assert_eq!(texts(&drain(&mut feed)), ["line 005000"]);
    }

    #[test]
    fn memory_stays_under_its_budget_while_spooling() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bus = Bus::new(16);
        let feed = bus.feed(small(dir.path()));
        for n in 0..2000 {
            bus.send_lines(&[line(n)]);
        }
        let state = lock(&feed.shared.state);
        assert!(state.memory_bytes <= 1000, "{}", state.memory_bytes);
        assert!(state.memory.len() < 20, "{}", state.memory.len());
    }

    #[test]
    fn interleaved_reading_and_writing_keeps_every_line_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bus = Arc::new(Bus::new(16));
        let mut feed = bus.feed(small(dir.path()));
        let closer = feed.closer();
        let writer = {
            let bus = bus.clone();
            std::thread::spawn(move || {
                for n in 0..20_000 {
                    bus.send_lines(&[line(n)]);
                    if n % 1000 == 0 {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                closer.close();
            })
        };
        let mut got = Vec::new();
        let mut batch = Vec::new();
        loop {
            match feed.recv_batch(&mut batch, Duration::from_secs(60)) {
                Recv::Entries => {
                    got.extend(texts(&batch));
                    batch.clear();
                    // A slow reader: the spool takes the backlog.
                    std::thread::sleep(Duration::from_micros(50));
                }
                Recv::Empty => {}
                Recv::Closed => break,
            }
        }
        writer.join().expect("writer");
        let want: Vec<String> = (0..20_000).map(|n| format!("line {n:06}")).collect();
        assert_eq!(got.len(), want.len());
        assert_eq!(got, want);
    }

    #[test]
    fn an_unwritable_spool_is_reported_as_lost_lines() {
        let bus = Bus::new(16);
        let mut feed = bus.feed(FeedConfig {
            spool_dir: PathBuf::from("/nonexistent/omnidev-spool"),
            memory_bytes: 300,
            segment_bytes: 4096,
        });
        for n in 0..10 {
            bus.send_lines(&[line(n)]);
        }
        let got = texts(&drain(&mut feed));
        assert_eq!(got[0], "line 000000");
        let lost = got.last().expect("entries");
        assert!(
            lost.starts_with("lost 8: could not write the output spool in /nonexistent"),
            "{got:?}"
        );
        // Once reported, memory takes lines again.
        bus.send_lines(&[line(10)]);
        assert_eq!(texts(&drain(&mut feed)), ["line 000010"]);
    }

    #[test]
    fn a_dropped_feed_is_forgotten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bus = Bus::new(16);
        let feed = bus.feed(small(dir.path()));
        drop(feed);
        bus.send_lines(&[line(0)]);
        assert!(lock(&bus.feeds).is_empty());
    }
}

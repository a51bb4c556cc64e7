//! The pod's recent output and events in one numbered sequence
//! ([`History`]), bounded in bytes, read by any number of readers through
//! a [`Cursor`] each.
//!
//! The supervisor publishes every finished line and every event here, in
//! the order it recorded them. What is kept:
//! the last [`KEPT_LINES`] lines (at most [`KEPT_LINE_BYTES`] of their
//! text, the supervisor's own lines, shared) and the last [`KEPT_EVENTS`]
//! other events (at most [`KEPT_EVENT_BYTES`] of their JSON). A reader
//! holds a few counters; it reads at its own pace and costs nothing while
//! it waits or stalls. One that falls behind what is kept is told exactly
//! how many lines and events were dropped before it read them, and goes on
//! from the oldest kept. An unfinished line ([`crate::EventKind::PartialLine`])
//! is held, as it stands, until its line is finished, for the readers that
//! follow and ask for them. A [`Lossless`] reader never falls behind: what
//! it has not read is spooled to disk before it would be dropped.
//!
//! A view of one service's output (a TUI pane) reads the same history
//! ([`History::view`]): what is kept of that service, and before it the
//! service's reserve, the last [`RESERVE_ENTRIES`] lines and events of
//! it that the pod's others pushed out (at most [`RESERVE_BYTES`] a
//! service), so a quiet service keeps its last lines beside a noisy one.

mod lossless;

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

pub use lossless::{Lossless, READ_CHUNK, Recv, SEGMENT_BYTES};

use crate::event::{Event, EventKind, LogLine};
use crate::sync::Locked;

/// Lines kept (the oldest go first).
pub const KEPT_LINES: usize = 10_000;
/// Bytes of line text kept.
pub const KEPT_LINE_BYTES: usize = 4 * 1024 * 1024;
/// Events other than lines kept.
pub const KEPT_EVENTS: usize = 4096;
/// Bytes of the JSON of the events kept.
pub const KEPT_EVENT_BYTES: usize = 2 * 1024 * 1024;

/// Lines and events of one service kept, once dropped from the pod's
/// window, for views of that service.
pub const RESERVE_ENTRIES: usize = 1_000;
/// Bytes of one service's reserve (a line's text or an event's JSON, and
/// the overhead).
pub const RESERVE_BYTES: usize = 512 * 1024;

/// Bytes a line counts for besides its text.
const LINE_OVERHEAD: usize = 128;

/// A kept line or event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// A finished line of a service's output.
    Line(Arc<LogLine>),
    /// A line still waiting for its newline, as it stands.
    Partial(Arc<LogLine>),
    /// Any other event.
    Event(Arc<Event>),
}

impl Kept {
    /// The service it concerns (`None` for the pod's own events).
    pub fn service(&self) -> Option<&str> {
        match self {
            Kept::Line(line) | Kept::Partial(line) => Some(&line.service),
            Kept::Event(event) => event.service.as_deref(),
        }
    }

    /// When it happened (a line: when it was read).
    pub fn at(&self) -> std::time::SystemTime {
        match self {
            Kept::Line(line) | Kept::Partial(line) => line.at,
            Kept::Event(event) => event.at,
        }
    }

    /// The event it is, for a reader that wants events.
    pub fn event(&self) -> Event {
        match self {
            Kept::Line(line) => Event::log(LogLine::clone(line)),
            Kept::Partial(line) => Event::partial(LogLine::clone(line)),
            Kept::Event(event) => Event::clone(event),
        }
    }
}

/// Where a reader is. Made by [`History::cursor`].
#[derive(Debug, Clone)]
pub struct Cursor {
    /// How many lines, and events, it has passed (dropped ones included).
    lines_passed: u64,
    events_passed: u64,
    /// A replay ends at this number; `None` for a follower.
    until: Option<u64>,
    /// The version of the last unfinished line it got.
    partial: u64,
}

/// What [`History::read`] brought a reader.
#[derive(Debug, Default)]
pub struct Read {
    /// What it wants, oldest first.
    pub kept: Vec<Kept>,
    /// Lines dropped before it read them, just before `kept`.
    pub missed_lines: u64,
    /// Events dropped before it read them, just before `kept`.
    pub missed_events: u64,
    /// It has everything it will get: a replay read to its end, or all of
    /// a pod that stopped.
    pub done: bool,
}

impl Read {
    /// What a reader that wants lines (`lines`) or not missed, said as a
    /// [`EventKind::Lost`] to show where it is missing; `None` when it
    /// missed nothing.
    pub fn lost(&self, lines: bool) -> Option<EventKind> {
        let lines = if lines { self.missed_lines } else { 0 };
        let events = self.missed_events;
        (lines + events > 0).then(|| EventKind::Lost {
            count: lines + events,
            reason: format!(
                "this reader fell behind what the pod keeps: {lines} lines and {events} other records were dropped before it read them (`omnidev logs` has every line)"
            ),
        })
    }
}

/// A service's reserve: entries with their numbers and costs, oldest
/// first, and their bytes.
type Reserve = (VecDeque<(u64, Kept, usize)>, usize);

#[derive(Debug, Default)]
struct Entries {
    lines: VecDeque<(u64, Arc<LogLine>)>,
    line_bytes: usize,
    lines_dropped: u64,
    /// Each with its number and its cost (the length of its JSON).
    events: VecDeque<(u64, Arc<Event>, usize)>,
    event_bytes: usize,
    events_dropped: u64,
    /// The number of the next line or event.
    next: u64,
    /// The last reload's number.
    last_reload: Option<u64>,
    /// Each service's and stream's unfinished line, with its version.
    partials: Vec<(u64, Arc<LogLine>)>,
    /// Per service, the newest of its lines and events dropped from the
    /// window, each with its number and cost, and their bytes.
    /// (A list: a pod has a few services, and a line dropped from the
    /// window finds its own by name faster than by hash.)
    reserves: Vec<(Box<str>, Reserve)>,
    partial_version: u64,
    /// When the newest line, unfinished line or event came.
    last_at: Option<std::time::SystemTime>,
    closed: bool,
    /// The lossless readers' places.
    spills: Vec<lossless::Spill>,
    next_spill: u64,
    /// Lines dropped from every view that nobody else holds, for
    /// [`History::push_each`] to fill again.
    spare_lines: Vec<Arc<LogLine>>,
}

/// Lines kept for reuse, and the longest text one may hold.
const SPARE_LINES: usize = 64;
const SPARE_TEXT_BYTES: usize = 1024;

/// The kept lines and events; see the module docs.
#[derive(Debug)]
pub struct History {
    inner: Mutex<Entries>,
    /// Changed at everything kept, and at the end: wakes the readers.
    wake: tokio::sync::watch::Sender<()>,
    /// Notified at the same moments: wakes lossless readers' threads.
    arrived: Condvar,
}

impl Default for History {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            wake: tokio::sync::watch::Sender::new(()),
            arrived: Condvar::new(),
        }
    }
}

impl History {
    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.inner.locked()
    }

    /// Keeps `event` (dropping the oldest beyond the bounds).
    pub fn push_event(&self, event: &Event) {
        let cost = serde_json::to_vec(event).map_or(0, |json| json.len());
        let mut inner = self.lock();
        inner.last_at = inner.last_at.max(Some(event.at));
        let seq = inner.next;
        inner.next += 1;
        if matches!(event.kind, EventKind::Reloading { .. }) {
            inner.last_reload = Some(seq);
        }
        inner.event_bytes += cost;
        let event = Arc::new(event.clone());
        inner.events.push_back((seq, event.clone(), cost));
        inner.spool(&[Kept::Event(event)]);
        while inner.events.len() > KEPT_EVENTS
            || (inner.event_bytes > KEPT_EVENT_BYTES && inner.events.len() > 1)
        {
            inner.spill_unread(false);
            let Some((seq, event, cost)) = inner.events.pop_front() else {
                break;
            };
            inner.event_bytes -= cost;
            inner.events_dropped += 1;
            inner.reserve(seq, Kept::Event(event), cost);
        }
        self.kept(inner);
    }

    /// Keeps finished lines, in order (dropping the oldest beyond the
    /// bounds); each finishes its stream's unfinished line.
    pub fn push_lines(&self, lines: &[Arc<LogLine>]) {
        self.push_each(lines.iter().cloned(), |line, _| line);
    }

    /// [`History::push_lines`] of lines made as they are kept: `make` turns
    /// each item into its line, given a line the history no longer holds
    /// and nobody else does (to fill in place, when there is one); each
    /// goes in and the oldest beyond the bounds go out before the next is
    /// made. A burst then makes its lines in the memory of those it drops.
    pub fn push_each<T>(
        &self,
        items: impl IntoIterator<Item = T>,
        mut make: impl FnMut(T, Option<Arc<LogLine>>) -> Arc<LogLine>,
    ) {
        let mut inner = self.lock();
        // Lines for the spooling readers, written to their spools in one
        // write: at the end, or before a reader may start spooling (it
        // then spools what it has not read, these lines among them).
        let mut unspooled = Vec::new();
        for item in items {
            let spare = inner.spare_lines.pop();
            let line = make(item, spare);
            inner.last_at = inner.last_at.max(Some(line.at));
            if !inner.partials.is_empty() {
                inner.partials.retain(|(_, p)| !same_source(p, &line));
            }
            let seq = inner.next;
            inner.next += 1;
            inner.line_bytes += line.text.len() + LINE_OVERHEAD;
            if inner.spills.iter().any(|s| s.spooling) {
                unspooled.push(Kept::Line(line.clone()));
            }
            inner.lines.push_back((seq, line));
            while inner.lines.len() > KEPT_LINES || inner.line_bytes > KEPT_LINE_BYTES {
                if !unspooled.is_empty() && inner.spills.iter().any(|s| !s.spooling) {
                    inner.spool(&unspooled);
                    unspooled.clear();
                }
                inner.spill_unread(true);
                let Some((seq, old)) = inner.lines.pop_front() else {
                    break;
                };
                let cost = old.text.len() + LINE_OVERHEAD;
                inner.line_bytes -= cost;
                inner.lines_dropped += 1;
                inner.reserve(seq, Kept::Line(old), cost);
            }
        }
        if !unspooled.is_empty() {
            inner.spool(&unspooled);
        }
        self.kept(inner);
    }

    /// When something last happened in the pod: the time of the newest
    /// line of output (finished or not) or event kept.
    pub fn last_activity(&self) -> Option<std::time::SystemTime> {
        self.lock().last_at
    }

    /// Wakes the readers once something was kept.
    fn kept(&self, inner: MutexGuard<'_, Entries>) {
        let lossless = !inner.spills.is_empty();
        drop(inner);
        if lossless {
            self.arrived.notify_all();
        }
        self.wake.send_replace(());
    }

    /// Holds `line`, unfinished, in place of its stream's previous one,
    /// until its line is finished.
    pub fn push_partial(&self, line: Arc<LogLine>) {
        let mut inner = self.lock();
        inner.last_at = inner.last_at.max(Some(line.at));
        inner.partial_version += 1;
        let version = inner.partial_version;
        inner.partials.retain(|(_, p)| !same_source(p, &line));
        inner.partials.push((version, line));
        drop(inner);
        self.wake.send_replace(());
    }

    /// Nothing more comes: readers that caught up are done.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.arrived.notify_all();
        self.wake.send_replace(());
    }

    /// A cursor at the oldest kept line or event (at the last reload with
    /// `since_reload`, when there was one): a replay of what is kept now,
    /// or, with `follow`, of everything from there on.
    pub fn cursor(&self, since_reload: bool, follow: bool) -> Cursor {
        let inner = self.lock();
        let from = inner.last_reload.filter(|_| since_reload).unwrap_or(0);
        let lines = inner.lines.partition_point(|(seq, _)| *seq < from) as u64;
        let events = inner.events.partition_point(|(seq, ..)| *seq < from) as u64;
        Cursor {
            lines_passed: inner.lines_dropped + lines,
            events_passed: inner.events_dropped + events,
            until: (!follow).then_some(inner.next),
            partial: 0,
        }
    }

    /// A follower's cursor at the end: it reads what is kept from now on.
    pub fn tail(&self) -> Cursor {
        self.lock().tail_cursor()
    }

    /// A follower of every event from now on, lines and unfinished lines
    /// included, one at a time (see [`Follower`]).
    pub fn follow(self: &Arc<Self>) -> Follower {
        self.follow_from(self.tail())
    }

    /// A follower from `cursor` on (a [`History::cursor`] with `follow`:
    /// from the oldest kept).
    pub fn follow_from(self: &Arc<Self>, cursor: Cursor) -> Follower {
        Follower { history: self.clone(), cursor, wake: self.wake(), queue: VecDeque::new() }
    }

    /// The next lines and events from `cursor` on that `want` takes, about
    /// `max_bytes` of them (none when it has read everything so far), with
    /// what was dropped before it got there. Once caught up, a follower
    /// that asks for `partials` gets the unfinished lines as they stand.
    pub fn read(
        &self,
        cursor: &mut Cursor,
        max_bytes: usize,
        partials: bool,
        want: impl FnMut(&Kept) -> bool,
    ) -> Read {
        self.lock().read(cursor, max_bytes, partials, want)
    }

    /// Changes at everything kept, and at the end: what a follower waits
    /// on.
    pub fn wake(&self) -> tokio::sync::watch::Receiver<()> {
        self.wake.subscribe()
    }

    /// The last reload, when one was kept.
    pub fn last_reload(&self) -> Option<Arc<Event>> {
        let inner = self.lock();
        let seq = inner.last_reload?;
        let at = inner.events.partition_point(|(s, ..)| *s < seq);
        inner.events.get(at).filter(|(s, ..)| *s == seq).map(|(_, event, _)| event.clone())
    }
}

impl History {
    /// Visits, oldest first, what a view of `service`'s output shows
    /// (`None`: the whole pod's): its reserve, then what is kept of it,
    /// lines and events, each with its number, which orders them and never
    /// changes; last its unfinished lines as they stand, the one changed
    /// last at the end, numbered from [`History::next_number`] on (a finished line is
    /// where its newline came, as in the log file). `visit` returns `false`
    /// to stop. The history is locked meanwhile: a view looks at what a
    /// screen shows, and copies nothing else.
    pub fn view(&self, service: Option<&str>, mut visit: impl FnMut(u64, &Kept) -> bool) {
        let inner = self.lock();
        // Looked at before anything is cloned: a view runs at each redraw.
        let ours = |of: Option<&str>| service.is_none_or(|name| of == Some(name));
        let reserve = service
            .and_then(|name| inner.reserve_of(name))
            .into_iter()
            .flat_map(|(kept, _)| kept.iter().map(|(seq, kept, _)| (*seq, kept.clone())));
        let lines = (inner.lines.iter())
            .filter(|(_, line)| ours(Some(&line.service)))
            .map(|(seq, line)| (*seq, Kept::Line(line.clone())));
        let events = (inner.events.iter())
            .filter(|(_, event, _)| ours(event.service.as_deref()))
            .map(|(seq, event, _)| (*seq, Kept::Event(event.clone())));
        let partials = (inner.next..)
            .zip(&inner.partials)
            .filter(|(_, (_, line))| ours(Some(&line.service)))
            .map(|(seq, (_, line))| (seq, Kept::Partial(line.clone())));
        let mut all: Vec<Box<dyn Iterator<Item = (u64, Kept)> + '_>> =
            vec![Box::new(reserve), Box::new(lines), Box::new(events), Box::new(partials)];
        let mut heads: Vec<Option<(u64, Kept)>> = all.iter_mut().map(Iterator::next).collect();
        loop {
            let next = heads
                .iter()
                .enumerate()
                .filter_map(|(i, head)| head.as_ref().map(|(seq, _)| (*seq, i)))
                .min();
            let Some((_, i)) = next else {
                return;
            };
            let Some((seq, kept)) = std::mem::replace(&mut heads[i], all[i].next()) else {
                return;
            };
            if !visit(seq, &kept) {
                return;
            }
        }
    }

    /// The newest finished line of `service` kept (in the window, else in
    /// its reserve), found from the newest back: what a run said last.
    pub fn last_line(&self, service: &str) -> Option<Arc<LogLine>> {
        let inner = self.lock();
        let in_window = inner.lines.iter().rev().find(|(_, line)| &*line.service == service);
        in_window.map(|(_, line)| line.clone()).or_else(|| {
            let (kept, _) = inner.reserve_of(service)?;
            kept.iter().rev().find_map(|(_, kept, _)| match kept {
                Kept::Line(line) => Some(line.clone()),
                _ => None,
            })
        })
    }

    /// The number the next line or event kept will have.
    pub fn next_number(&self) -> u64 {
        self.lock().next
    }
}

impl Entries {
    /// The reserve of `service`, if it has one.
    fn reserve_of(&self, service: &str) -> Option<&Reserve> {
        self.reserves.iter().find(|(name, _)| **name == *service).map(|(_, reserve)| reserve)
    }

    /// Keeps `kept`, just dropped from the window as number `seq`, in its
    /// service's reserve (the pod's own events have none).
    fn reserve(&mut self, seq: u64, kept: Kept, cost: usize) {
        let Some(service) = kept.service() else {
            return;
        };
        let found = self.reserves.iter().position(|(name, _)| **name == *service);
        let at = found.unwrap_or_else(|| {
            self.reserves.push((service.into(), Reserve::default()));
            self.reserves.len() - 1
        });
        let (entries, bytes) = &mut self.reserves[at].1;
        *bytes += cost;
        // Lines and events leave the window each at their own time: one
        // can come after a later one, but mostly it is the newest.
        if entries.back().is_none_or(|(last, ..)| *last < seq) {
            entries.push_back((seq, kept, cost));
        } else {
            let at = entries.partition_point(|(s, ..)| *s < seq);
            entries.insert(at, (seq, kept, cost));
        }
        while entries.len() > RESERVE_ENTRIES || (*bytes > RESERVE_BYTES && entries.len() > 1) {
            let Some((_, gone, cost)) = entries.pop_front() else {
                break;
            };
            *bytes -= cost;
            if let Kept::Line(mut line) = gone
                && self.spare_lines.len() < SPARE_LINES
                && Arc::get_mut(&mut line).is_some_and(|l| l.text.capacity() <= SPARE_TEXT_BYTES)
            {
                self.spare_lines.push(line);
            }
        }
    }

    fn tail_cursor(&self) -> Cursor {
        Cursor {
            lines_passed: self.lines_dropped + self.lines.len() as u64,
            events_passed: self.events_dropped + self.events.len() as u64,
            until: None,
            partial: self.partial_version,
        }
    }

    /// Appends `kept`, just kept, to the spool of every lossless reader
    /// that is spooling.
    fn spool(&mut self, kept: &[Kept]) {
        for spill in self.spills.iter_mut().filter(|s| s.spooling) {
            spill.spool(kept);
        }
    }

    /// Before the oldest kept line (`line`) or event is dropped: every
    /// lossless reader that has not read it spools all it has not read.
    fn spill_unread(&mut self, line: bool) {
        if self.spills.iter().all(|s| s.spooling) {
            return;
        }
        let mut spills = std::mem::take(&mut self.spills);
        for spill in spills.iter_mut().filter(|s| !s.spooling) {
            let behind = if line {
                spill.cursor.lines_passed <= self.lines_dropped
            } else {
                spill.cursor.events_passed <= self.events_dropped
            };
            if behind {
                let read = self.read(&mut spill.cursor, usize::MAX, false, |_| true);
                spill.spool(&read.kept);
            }
        }
        self.spills = spills;
    }

    fn read(
        &self,
        cursor: &mut Cursor,
        max_bytes: usize,
        partials: bool,
        mut want: impl FnMut(&Kept) -> bool,
    ) -> Read {
        let mut read = Read::default();
        if cursor.lines_passed < self.lines_dropped {
            read.missed_lines = self.lines_dropped - cursor.lines_passed;
            cursor.lines_passed = self.lines_dropped;
        }
        if cursor.events_passed < self.events_dropped {
            read.missed_events = self.events_dropped - cursor.events_passed;
            cursor.events_passed = self.events_dropped;
        }
        let end = cursor.until.unwrap_or(self.next);
        let from = |passed: u64, dropped: u64, len: usize| {
            usize::try_from(passed - dropped).map_or(len, |i| i.min(len))
        };
        let mut lines = self
            .lines
            .range(from(cursor.lines_passed, self.lines_dropped, self.lines.len())..)
            .peekable();
        let mut events = self
            .events
            .range(from(cursor.events_passed, self.events_dropped, self.events.len())..)
            .peekable();
        let mut bytes = 0;
        while bytes < max_bytes {
            let line_first = match (lines.peek(), events.peek()) {
                (Some((l, _)), Some((e, ..))) => l < e,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let (kept, cost) = if line_first {
                let Some(&&(seq, ref line)) = lines.peek() else {
                    break;
                };
                if seq >= end {
                    break;
                }
                lines.next();
                cursor.lines_passed += 1;
                (Kept::Line(line.clone()), line.text.len() + LINE_OVERHEAD)
            } else {
                let Some(&&(seq, ref event, cost)) = events.peek() else {
                    break;
                };
                if seq >= end {
                    break;
                }
                events.next();
                cursor.events_passed += 1;
                (Kept::Event(event.clone()), cost)
            };
            if want(&kept) {
                bytes += cost;
                read.kept.push(kept);
            }
        }
        let caught_up = bytes < max_bytes;
        if caught_up && partials && cursor.until.is_none() {
            let seen = cursor.partial;
            for (version, line) in self.partials.iter().filter(|(v, _)| *v > seen) {
                cursor.partial = cursor.partial.max(*version);
                let kept = Kept::Partial(line.clone());
                if want(&kept) {
                    read.kept.push(kept);
                }
            }
        }
        read.done = caught_up && (cursor.until.is_some() || self.closed);
        read
    }
}

/// A reader of every event, one at a time, for code that follows a pod
/// event by event (the TUI, a library user, a test). It costs what it has taken
/// and not yet returned; one that falls behind what is kept gets a
/// [`EventKind::Lost`] event with the exact count, then goes on.
#[derive(Debug)]
pub struct Follower {
    history: Arc<History>,
    cursor: Cursor,
    wake: tokio::sync::watch::Receiver<()>,
    queue: VecDeque<Kept>,
}

impl Follower {
    /// The next event, waiting for one; `None` once the pod's end
    /// ([`crate::Supervisor::announce_end`]) has been returned.
    pub async fn recv(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.try_recv() {
                return Some(event);
            }
            if self.history.lock().closed || self.wake.changed().await.is_err() {
                return self.try_recv();
            }
        }
    }

    /// The next event if one is there.
    pub fn try_recv(&mut self) -> Option<Event> {
        if self.queue.is_empty() {
            self.wake.borrow_and_update();
            let read = self.history.read(&mut self.cursor, 64 * 1024, true, |_| true);
            if let Some(lost) = read.lost(true) {
                self.queue.push_back(Kept::Event(Arc::new(Event::pod(lost))));
            }
            self.queue.extend(read.kept);
        }
        self.queue.pop_front().map(|kept| kept.event())
    }
}

/// Whether `a` and `b` are lines of one service's stream.
fn same_source(a: &LogLine, b: &LogLine) -> bool {
    a.service == b.service && a.stream == b.stream
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::event::Stream;

    fn line(service: &str, text: &str) -> Arc<LogLine> {
        Arc::new(LogLine::new(service, Stream::Stdout, text, 0))
    }

    fn notice(message: &str) -> Event {
        Event {
            at: SystemTime::UNIX_EPOCH,
            service: None,
            kind: EventKind::Notice { message: message.into() },
        }
    }

    fn texts(read: &Read) -> Vec<String> {
        read.kept
            .iter()
            .map(|kept| match kept {
                Kept::Line(line) => line.text.clone(),
                Kept::Partial(line) => format!("partial {}", line.text),
                Kept::Event(event) => event.to_string(),
            })
            .collect()
    }

    /// Lines and events come back in the order they were kept; a replay
    /// stops where it began, a follower goes on.
    #[test]
    fn readers_get_lines_and_events_in_order() {
        let history = History::default();
        history.push_lines(&[line("server", "one")]);
        history.push_event(&notice("between"));
        let mut replay = history.cursor(false, false);
        let mut follower = history.cursor(false, true);
        history.push_lines(&[line("host", "two")]);
        let read = history.read(&mut replay, 1 << 20, false, |_| true);
        assert_eq!(texts(&read), ["one", "between"]);
        assert!(read.done);
        let read = history.read(&mut follower, 1 << 20, false, |_| true);
        assert_eq!(texts(&read), ["one", "between", "two"]);
        assert!(!read.done);
        let lines_only = history.read(&mut history.cursor(false, false), 1 << 20, false, |k| {
            matches!(k, Kept::Line(_))
        });
        assert_eq!(texts(&lines_only), ["one", "two"]);
        history.close();
        assert!(history.read(&mut follower, 1 << 20, false, |_| true).done);
    }

    /// A reader behind what is kept is told exactly how many lines and
    /// events were dropped before it read them, and goes on from the
    /// oldest kept; what is kept stays within its bounds.
    #[test]
    fn a_reader_behind_what_is_kept_is_told_exactly_what_it_missed() {
        let history = History::default();
        let mut cursor = history.cursor(false, true);
        let lines: Vec<_> = (0..KEPT_LINES + 25).map(|n| line("server", &n.to_string())).collect();
        history.push_lines(&lines);
        for _ in 0..KEPT_EVENTS + 3 {
            history.push_event(&notice("n"));
        }
        let read = history.read(&mut cursor, 1 << 30, false, |_| true);
        assert_eq!((read.missed_lines, read.missed_events), (25, 3));
        assert_eq!(texts(&read)[0], "25", "the oldest kept next");
        assert_eq!(read.kept.len(), KEPT_LINES + KEPT_EVENTS);
        let again = history.read(&mut cursor, 1 << 30, false, |_| true);
        assert_eq!((again.missed_lines, again.missed_events, again.kept.len()), (0, 0, 0));
        let big = "x".repeat(64 * 1024);
        history.push_lines(&vec![line("server", &big); 100]);
        let inner = history.lock();
        assert!(inner.line_bytes <= KEPT_LINE_BYTES, "{}", inner.line_bytes);
    }

    /// A service's last line is found whether it is still in the window
    /// or only in the service's reserve, and never another's.
    #[test]
    fn the_last_line_of_a_service_is_found_in_the_window_or_its_reserve() {
        let history = History::default();
        assert!(history.last_line("watch").is_none());
        history.push_lines(&[line("watch", "down: first"), line("watch", "down: second")]);
        history.push_lines(&[line("server", "other")]);
        assert_eq!(
            history.last_line("watch").map(|l| l.text.clone()).as_deref(),
            Some("down: second")
        );
        let flood: Vec<_> = (0..KEPT_LINES + 5).map(|n| line("server", &n.to_string())).collect();
        history.push_lines(&flood);
        assert!(!history.lock().lines.iter().any(|(_, l)| &*l.service == "watch"));
        assert_eq!(
            history.last_line("watch").map(|l| l.text.clone()).as_deref(),
            Some("down: second")
        );
        assert!(history.last_line("nobody").is_none());
    }

    /// A flood makes its lines in the memory of those it drops, but never
    /// in one a reader still holds: those keep their text.
    #[test]
    fn a_flood_reuses_dropped_lines_but_never_a_held_one() {
        let history = History::default();
        let held: Vec<Arc<LogLine>> =
            (0..100).map(|n| line("server", &format!("held {n}"))).collect();
        history.push_lines(&held);
        let (mut offered, total) = (0, 3 * (KEPT_LINES + RESERVE_ENTRIES));
        history.push_each(0..total, |n, spare| {
            let Some(mut dropped) = spare else {
                return line("server", &n.to_string());
            };
            offered += 1;
            let reused = Arc::get_mut(&mut dropped).expect("a spare nobody else holds");
            reused.text = n.to_string();
            dropped
        });
        assert!(offered > total / 2, "{offered} of {total} lines made in dropped ones");
        for (n, line) in held.iter().enumerate() {
            assert_eq!(line.text, format!("held {n}"), "a held line was reused");
        }
        let last = history.last_line("server").expect("a line");
        assert_eq!(last.text, (total - 1).to_string());
        assert!(history.lock().spare_lines.len() <= SPARE_LINES);
    }

    /// A read takes about its byte budget; the next read goes on.
    #[test]
    fn reads_go_in_chunks() {
        let history = History::default();
        let big = "x".repeat(60 * 1024);
        history.push_lines(&vec![line("server", &big); 40]);
        let mut cursor = history.cursor(false, false);
        let mut total = 0;
        loop {
            let read = history.read(&mut cursor, 64 * 1024, false, |_| true);
            assert!(read.kept.len() <= 2, "{}", read.kept.len());
            total += read.kept.len();
            if read.done {
                break;
            }
        }
        assert_eq!(total, 40);
    }

    /// An unfinished line goes, as it stands, to a caught-up follower that
    /// asks for them, once, until its line is finished; never to a replay.
    #[test]
    fn unfinished_lines_are_held_until_finished() {
        let history = History::default();
        let mut follower = history.cursor(false, true);
        history.push_partial(line("svc", "Password: "));
        let read = history.read(&mut follower, 1 << 20, true, |_| true);
        assert_eq!(texts(&read), ["partial Password: "]);
        assert!(history.read(&mut follower, 1 << 20, true, |_| true).kept.is_empty());
        history.push_partial(line("svc", "Password: s"));
        history.push_lines(&[line("svc", "Password: secret")]);
        let read = history.read(&mut follower, 1 << 20, true, |_| true);
        assert_eq!(texts(&read), ["Password: secret"]);
        history.push_partial(line("svc", "next? "));
        let read = history.read(&mut history.cursor(false, false), 1 << 20, true, |_| true);
        assert_eq!(texts(&read), ["Password: secret"]);
    }

    /// A follower reads every event from when it began, one at a time;
    /// one behind what is kept gets the exact count first; it ends with
    /// the pod.
    #[tokio::test]
    async fn a_follower_reads_from_its_start_and_is_told_what_it_missed() {
        let history = Arc::new(History::default());
        history.push_lines(&[line("svc", "before")]);
        let mut follower = history.follow();
        assert!(follower.try_recv().is_none(), "nothing from before it began");
        history.push_event(&notice("one"));
        let got = follower.recv().await.expect("an event");
        assert_eq!(got.to_string(), "one");
        let lines: Vec<_> = (0..KEPT_LINES + 5).map(|n| line("svc", &n.to_string())).collect();
        history.push_lines(&lines);
        let lost = follower.recv().await.expect("the gap");
        assert!(matches!(lost.kind, EventKind::Lost { count: 5, .. }), "{lost:?}");
        let next = follower.recv().await.expect("a line");
        assert!(matches!(&next.kind, EventKind::Log { line } if line.text == "5"), "{next:?}");
        history.close();
        let mut rest = 0;
        while follower.recv().await.is_some() {
            rest += 1;
        }
        assert_eq!(rest, KEPT_LINES - 1);
    }

    /// A cursor at the tail reads only what is kept after it was taken.
    #[test]
    fn a_tail_reads_from_now_on() {
        let history = History::default();
        history.push_lines(&[line("svc", "before")]);
        history.push_event(&notice("earlier"));
        let mut tail = history.tail();
        assert!(history.read(&mut tail, 1 << 20, false, |_| true).kept.is_empty());
        history.push_lines(&[line("svc", "after")]);
        let read = history.read(&mut tail, 1 << 20, false, |_| true);
        assert_eq!(texts(&read), ["after"]);
    }

    /// A cursor can start at the last reload.
    #[test]
    fn since_the_last_reload() {
        let history = History::default();
        history.push_lines(&[line("server", "old")]);
        assert_eq!(history.last_reload(), None);
        let reload = Event {
            at: SystemTime::UNIX_EPOCH,
            service: None,
            kind: EventKind::Reloading {
                services: vec!["server".into()],
                changes: crate::Changes::default(),
            },
        };
        history.push_event(&reload);
        history.push_lines(&[line("server", "new")]);
        let read = history.read(&mut history.cursor(true, false), 1 << 20, false, |_| true);
        assert_eq!(texts(&read), ["reloading server", "new"]);
        assert_eq!(history.last_reload().as_deref(), Some(&reload));
    }

    /// What a view of `service` shows, as text.
    fn view(history: &History, service: Option<&str>) -> Vec<String> {
        let mut shown = Vec::new();
        history.view(service, |_, kept| {
            shown.push(texts(&Read { kept: vec![kept.clone()], ..Read::default() })[0].clone());
            true
        });
        shown
    }

    /// A noisy service pushes a quiet one's lines out of the pod's window;
    /// a view of the quiet one still shows its last lines and its events,
    /// in order, from its reserve, which is bounded in entries and bytes.
    #[test]
    fn a_view_of_a_quiet_service_keeps_its_last_lines_beside_a_noisy_one() {
        let history = History::default();
        let started = Event {
            at: SystemTime::UNIX_EPOCH,
            service: Some("vite".into()),
            kind: EventKind::Notice { message: "vite began".into() },
        };
        history.push_event(&started);
        history.push_lines(&[line("vite", "ready on :5173"), line("vite", "hmr on")]);
        for n in 0..KEPT_LINES + RESERVE_ENTRIES + 10 {
            history.push_lines(&[line("server", &format!("GET /{n}"))]);
        }
        for _ in 0..=KEPT_EVENTS {
            history.push_event(&notice("tick"));
        }
        let read = history.read(&mut history.cursor(false, false), usize::MAX, false, |k| {
            k.service() == Some("vite")
        });
        assert!(read.kept.is_empty(), "pushed out of the window");
        assert_eq!(view(&history, Some("vite")), ["vite: vite began", "ready on :5173", "hmr on"]);
        let server = view(&history, Some("server"));
        assert_eq!(server.len(), RESERVE_ENTRIES + KEPT_LINES);
        assert_eq!(server[0], "GET /10");
        let last = KEPT_LINES + RESERVE_ENTRIES + 9;
        assert_eq!(server.last(), Some(&format!("GET /{last}")));
        // The whole pod's view is the window alone.
        let first = format!("GET /{}", RESERVE_ENTRIES + 10);
        assert_eq!(view(&history, None).first(), Some(&first));

        let big = "x".repeat(100 * 1024);
        let history = History::default();
        for _ in 0..20 {
            history.push_lines(&[line("quiet", &big)]);
        }
        for _ in 0..KEPT_LINES {
            history.push_lines(&[line("noisy", "n")]);
        }
        let kept = view(&history, Some("quiet"));
        assert!(!kept.is_empty() && kept.len() * big.len() <= RESERVE_BYTES, "{}", kept.len());
    }

    /// An unfinished line shows last, as it stands; its finished line is
    /// where its newline came.
    #[test]
    fn a_view_shows_an_unfinished_line_last() {
        let history = History::default();
        history.push_partial(line("app", "Password: "));
        history.push_lines(&[Arc::new(LogLine::new("app", Stream::Stderr, "warning", 0))]);
        history.push_partial(line("app", "Password: **"));
        assert_eq!(view(&history, Some("app")), ["warning", "partial Password: **"]);
        history.push_lines(&[line("app", "Password: ***")]);
        assert_eq!(view(&history, Some("app")), ["warning", "Password: ***"]);
        assert_eq!(view(&history, Some("other")), Vec::<String>::new());
        let mut numbers = Vec::new();
        history.view(None, |n, _| {
            numbers.push(n);
            false
        });
        assert_eq!(numbers.len(), 1, "a visit that says stop stops");
        assert!(history.next_number() > numbers[0]);
    }
}

//! A reader of the history that loses nothing ([`Lossless`]), for output
//! that must show every line once, in order (headless `up`).
//!
//! While it keeps up, it reads the kept lines and events through a cursor
//! like any reader: no copy. When something it has not read is about to
//! be dropped, the history writes everything it has not read to a spool on
//! disk, then every later line and event too, until the reader has read
//! all of the spool; then it goes back to its cursor. A slow reader never
//! slows a service down and costs no memory beyond what the history keeps.
//!
//! The spool is a chain of unlinked temporary files of [`SEGMENT_BYTES`]
//! each in the directory the reader names: nothing is visible there, a
//! segment's disk space is returned once it has been read, and nothing is
//! left behind even after a `SIGKILL`. The reader decodes at most
//! [`READ_CHUNK`] bytes of spool at a time. What cannot be spooled (a full
//! disk) is counted, and the reader is told how much, and why, where it is
//! missing.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::{Cursor, History, Kept};
use crate::event::{Event, EventKind, LogLine, Stream};

/// Bytes of spool a reader decodes at a time.
pub const READ_CHUNK: usize = 256 * 1024;

/// Size of one spool file: the disk holds the unread backlog plus at most
/// one segment.
pub const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

/// One lossless reader's place, kept by the history under its lock, so
/// that what is published and where the reader reads from never race.
#[derive(Debug)]
pub(super) struct Spill {
    pub(super) id: u64,
    /// Where it reads the history, while it is not spooling.
    pub(super) cursor: Cursor,
    /// Everything it has not read is in the spool (or counted as lost).
    pub(super) spooling: bool,
    dir: PathBuf,
    segment_bytes: u64,
    segments: VecDeque<SpoolSegment>,
    lost: u64,
    lost_reason: String,
    encode: Vec<u8>,
}

/// One spool file.
#[derive(Debug)]
struct SpoolSegment {
    file: Arc<File>,
    /// Bytes written (and readable) so far.
    written: u64,
}

impl Spill {
    pub(super) fn new(id: u64, cursor: Cursor, dir: PathBuf, segment_bytes: u64) -> Self {
        Self {
            id,
            cursor,
            spooling: false,
            dir,
            segment_bytes,
            segments: VecDeque::new(),
            lost: 0,
            lost_reason: String::new(),
            encode: Vec::new(),
        }
    }

    /// Appends `kept` (lines and events, in order) to the spool; it
    /// spools from now on.
    pub(super) fn spool<'a>(&mut self, kept: impl IntoIterator<Item = &'a Kept>) {
        self.spooling = true;
        let mut bytes = std::mem::take(&mut self.encode);
        bytes.clear();
        for kept in kept {
            encode(kept, &mut bytes);
        }
        if let Err(e) = self.write(&bytes) {
            self.lost += count_records(&bytes);
            self.lost_reason = format!(
                "could not write the output spool in {}: {e}; the log files have every line",
                self.dir.display()
            );
        }
        self.encode = bytes;
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        if self.segments.back().is_none_or(|s| s.written >= self.segment_bytes) {
            let file = tempfile::tempfile_in(&self.dir)?;
            self.segments.push_back(SpoolSegment { file: Arc::new(file), written: 0 });
        }
        let segment = self.segments.back_mut().expect("a segment was just ensured");
        segment.file.write_all_at(bytes, segment.written)?;
        segment.written += bytes.len() as u64;
        Ok(())
    }

    /// Bytes spooled and not yet read by a reader at `position` of the
    /// front segment.
    fn unread(&self, position: u64) -> u64 {
        let total: u64 = self.segments.iter().map(|s| s.written).sum();
        total.saturating_sub(position)
    }
}

/// What [`Lossless::recv`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recv {
    /// At least one line or event was appended.
    Entries,
    /// Nothing arrived within the wait.
    Empty,
    /// The pod ended and everything has been read.
    Closed,
}

/// A reader of every line and event, in order, from the oldest kept on;
/// see the module docs. Made by [`History::lossless`]; dropping it lets
/// go of its spool.
#[derive(Debug)]
pub struct Lossless {
    history: Arc<History>,
    id: u64,
    /// Read position in the front segment.
    position: u64,
    /// Bytes read from the spool but not yet decoded (a record cut by the
    /// end of a chunk).
    pending: Vec<u8>,
    /// The service name of the last line decoded, shared with the next
    /// line of the same service.
    last_service: Option<Arc<str>>,
}

impl History {
    /// A lossless reader from the oldest line or event kept, spooling
    /// into `spool_dir` while it is behind.
    pub fn lossless(self: &Arc<Self>, spool_dir: impl Into<PathBuf>) -> Lossless {
        self.lossless_in_segments(spool_dir.into(), SEGMENT_BYTES)
    }

    pub(super) fn lossless_in_segments(
        self: &Arc<Self>,
        dir: PathBuf,
        segment_bytes: u64,
    ) -> Lossless {
        let cursor = self.cursor(false, true);
        let mut inner = self.lock();
        inner.next_spill += 1;
        let id = inner.next_spill;
        inner.spills.push(Spill::new(id, cursor, dir, segment_bytes));
        Lossless { history: self.clone(), id, position: 0, pending: Vec::new(), last_service: None }
    }
}

impl Drop for Lossless {
    fn drop(&mut self) {
        self.history.lock().spills.retain(|s| s.id != self.id);
    }
}

impl Lossless {
    /// Bytes spooled on disk and not yet read.
    pub fn spooled_bytes(&self) -> u64 {
        let inner = self.history.lock();
        inner.spills.iter().find(|s| s.id == self.id).map_or(0, |s| s.unread(self.position))
    }

    /// Appends the next lines and events, in order, to `out`, waiting up
    /// to `wait` for something to arrive; about [`READ_CHUNK`] bytes at a
    /// time.
    pub fn recv(&mut self, out: &mut Vec<Kept>, wait: Duration) -> Recv {
        let deadline = Instant::now().checked_add(wait);
        let had = out.len();
        let mut inner = self.history.lock();
        loop {
            let Some(at) = inner.spills.iter().position(|s| s.id == self.id) else {
                return Recv::Closed;
            };
            let spill = &mut inner.spills[at];
            if spill.spooling {
                if let Some(front) = spill.segments.front() {
                    let (file, end) = (front.file.clone(), front.written);
                    if self.position < end {
                        drop(inner);
                        self.read_spool(&file, end, out);
                        return Recv::Entries;
                    }
                    spill.segments.pop_front();
                    self.position = 0;
                    continue;
                }
                if spill.lost > 0 {
                    let kind = EventKind::Lost {
                        count: std::mem::take(&mut spill.lost),
                        reason: std::mem::take(&mut spill.lost_reason),
                    };
                    out.push(Kept::Event(Arc::new(Event::pod(kind))));
                    return Recv::Entries;
                }
                // All of the spool is read: back to the history, from now.
                spill.spooling = false;
                let tail = inner.tail_cursor();
                inner.spills[at].cursor = tail;
            }
            let mut cursor = inner.spills[at].cursor.clone();
            let read = inner.read(&mut cursor, READ_CHUNK, false, |_| true);
            inner.spills[at].cursor = cursor;
            if let Some(lost) = read.lost(true) {
                out.push(Kept::Event(Arc::new(Event::pod(lost))));
            }
            let done = read.done;
            out.extend(read.kept);
            if out.len() > had {
                return Recv::Entries;
            }
            if done {
                return Recv::Closed;
            }
            let now = Instant::now();
            let remaining = match deadline {
                Some(deadline) if deadline <= now => return Recv::Empty,
                Some(deadline) => deadline - now,
                None => Duration::from_secs(3600),
            };
            inner = self
                .history
                .arrived
                .wait_timeout(inner, remaining)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Decodes up to [`READ_CHUNK`] bytes of the front segment (more when a
    /// single record is larger).
    fn read_spool(&mut self, file: &File, end: u64, out: &mut Vec<Kept>) {
        let available = usize::try_from(end - self.position).unwrap_or(usize::MAX);
        let wanted = if self.pending.len() >= 4 { record_len(&self.pending) + 4 } else { 0 };
        let want = available.min(READ_CHUNK.max(wanted));
        let start = self.pending.len();
        self.pending.resize(start + want, 0);
        if let Err(e) = file.read_exact_at(&mut self.pending[start..], self.position) {
            // Only the reader shrinks the spool, so this is an I/O error of
            // the disk: say so and skip the segment.
            self.pending.clear();
            let mut inner = self.history.lock();
            let skipped = inner
                .spills
                .iter_mut()
                .find(|s| s.id == self.id)
                .and_then(|s| s.segments.pop_front())
                .map_or(0, |s| s.written);
            self.position = 0;
            let kind = EventKind::Lost {
                count: 0,
                reason: format!("could not read {skipped} bytes of the output spool: {e}"),
            };
            out.push(Kept::Event(Arc::new(Event::pod(kind))));
            return;
        }
        self.position += want as u64;
        let mut used = 0;
        while let Some((kept, len)) = decode(&self.pending[used..], &mut self.last_service) {
            out.push(kept);
            used += len;
        }
        self.pending.drain(..used);
    }
}

// ----- the spool's record format ---------------------------------------
//
// Each record: a little-endian u32 length, then the payload. A line is
// tag 0, stream (u8), seq (u64 LE), when it was read (nanoseconds since
// the epoch, u64 LE), service length (u16 LE), service, text. Any other
// event is tag 1 followed by its JSON. Unfinished lines are never
// spooled: their lines are.

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

fn encode(kept: &Kept, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    match kept {
        Kept::Line(line) => {
            let service = &line.service.as_bytes()[..line.service.len().min(usize::from(u16::MAX))];
            out.push(TAG_LINE);
            out.push(stream_byte(line.stream));
            out.extend_from_slice(&line.seq.to_le_bytes());
            out.extend_from_slice(&nanos_since_epoch(line.at).to_le_bytes());
            out.extend_from_slice(
                &u16::try_from(service.len()).expect("cut to u16::MAX").to_le_bytes(),
            );
            out.extend_from_slice(service);
            out.extend_from_slice(line.text.as_bytes());
        }
        Kept::Event(event) => {
            out.push(TAG_EVENT);
            // An event always serialises: plain data, string keys.
            let _ = serde_json::to_writer(&mut *out, &**event);
        }
        Kept::Partial(_) => {
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
fn decode(bytes: &[u8], last_service: &mut Option<Arc<str>>) -> Option<(Kept, usize)> {
    if bytes.len() < 4 {
        return None;
    }
    let len = record_len(bytes);
    let payload = bytes.get(4..4 + len)?;
    let damaged =
        |reason: String| Kept::Event(Arc::new(Event::pod(EventKind::Lost { count: 1, reason })));
    let kept = match payload.split_first() {
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
            Kept::Line(Arc::new(LogLine {
                service,
                stream,
                text: crate::text::lossy(text),
                seq,
                at: SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos),
            }))
        }
        Some((&TAG_EVENT, json)) => match serde_json::from_slice(json) {
            Ok(event) => Kept::Event(Arc::new(event)),
            Err(e) => damaged(format!("an event in the output spool did not decode: {e}")),
        },
        _ => damaged("a damaged record in the output spool".to_owned()),
    };
    Some((kept, 4 + len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::KEPT_LINES;

    /// Line `n`, read at a time of its own (to the nanosecond).
    fn line(n: u64) -> Arc<LogLine> {
        let mut line = LogLine::new("svc", Stream::Stdout, format!("line {n:06}"), n);
        line.at = SystemTime::UNIX_EPOCH + Duration::new(1_765_000_000 + n, 123_456_789);
        Arc::new(line)
    }

    fn notice(n: u64) -> Event {
        let mut event = Event::pod(EventKind::Notice { message: format!("notice {n}") });
        event.at = SystemTime::UNIX_EPOCH;
        event
    }

    fn texts(kept: &[Kept]) -> Vec<String> {
        kept.iter()
            .map(|kept| match kept {
                Kept::Line(line) => line.text.clone(),
                Kept::Partial(line) => format!("partial {}", line.text),
                Kept::Event(event) => event.to_string(),
            })
            .collect()
    }

    fn drain(reader: &mut Lossless) -> Vec<Kept> {
        let mut out = Vec::new();
        while reader.recv(&mut out, Duration::ZERO) == Recv::Entries {}
        out
    }

    fn small(history: &Arc<History>, dir: &std::path::Path) -> Lossless {
        history.lossless_in_segments(dir.to_owned(), 4096)
    }

    /// A reader that keeps up reads the history itself; one that falls
    /// behind gets everything back from the spool, in order, lines and
    /// events interleaved as they were published, each line whole; once
    /// caught up it reads the history again.
    #[test]
    fn a_reader_behind_gets_everything_back_from_the_spool_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let history = Arc::new(History::default());
        let mut reader = small(&history, dir.path());
        history.push_lines(&[line(0)]);
        assert_eq!(texts(&drain(&mut reader)), ["line 000000"]);
        assert_eq!(reader.spooled_bytes(), 0, "kept up: no spool");

        let total = 3 * KEPT_LINES as u64;
        let mut want = Vec::new();
        let mut sent = Vec::new();
        for n in 1..total {
            let l = line(n);
            history.push_lines(std::slice::from_ref(&l));
            want.push(l.text.clone());
            sent.push(l);
            if n % 1000 == 0 {
                history.push_event(&notice(n));
                want.push(format!("notice {n}"));
            }
        }
        assert!(reader.spooled_bytes() > 4096, "several segments");
        let got = drain(&mut reader);
        assert_eq!(texts(&got), want);
        let lines = got.iter().filter_map(|k| match k {
            Kept::Line(line) => Some(line),
            _ => None,
        });
        for (got, sent) in lines.zip(&sent) {
            assert_eq!(got, sent, "the line whole, its time of reading included");
        }
        assert_eq!(reader.spooled_bytes(), 0);

        // Caught up: the history again, and still in order.
        history.push_lines(&[line(total)]);
        assert_eq!(reader.spooled_bytes(), 0);
        assert_eq!(texts(&drain(&mut reader)), [format!("line {total:06}")]);
        history.close();
        assert_eq!(reader.recv(&mut Vec::new(), Duration::ZERO), Recv::Closed);
    }

    /// Lines pushed in batches larger than the history (a reader starting
    /// to spool in the middle of one, then spooling the rest of it) reach
    /// a reader behind each exactly once, in order; and so do those of a
    /// second reader that kept up until the last batch.
    #[test]
    fn batches_larger_than_the_history_reach_a_reader_behind_once_each() {
        let dir = tempfile::tempdir().expect("tempdir");
        let history = Arc::new(History::default());
        let mut behind = small(&history, dir.path());
        let mut late = small(&history, dir.path());
        let batch = |from: u64| -> Vec<Arc<LogLine>> {
            (from..from + 2 * KEPT_LINES as u64 + 7).map(line).collect()
        };
        let (first, second) = (batch(0), batch(2 * KEPT_LINES as u64 + 7));
        history.push_lines(&first);
        let read_late = drain(&mut late);
        history.push_lines(&second);
        let want = |lines: &[&Vec<Arc<LogLine>>]| -> Vec<String> {
            lines.iter().flat_map(|b| b.iter().map(|l| l.text.clone())).collect()
        };
        assert_eq!(texts(&drain(&mut behind)), want(&[&first, &second]));
        assert_eq!(texts(&read_late), want(&[&first]));
        assert_eq!(texts(&drain(&mut late)), want(&[&second]));
    }

    /// A flood of events alone spools too.
    #[test]
    fn events_dropped_from_the_history_are_spooled() {
        let dir = tempfile::tempdir().expect("tempdir");
        let history = Arc::new(History::default());
        let mut reader = small(&history, dir.path());
        let total = 3 * crate::history::KEPT_EVENTS as u64;
        for n in 0..total {
            history.push_event(&notice(n));
        }
        let want: Vec<String> = (0..total).map(|n| format!("notice {n}")).collect();
        assert_eq!(texts(&drain(&mut reader)), want);
    }

    #[test]
    fn interleaved_reading_and_writing_keeps_every_line_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let history = Arc::new(History::default());
        let mut reader = small(&history, dir.path());
        let writer = {
            let history = history.clone();
            std::thread::spawn(move || {
                for n in 0..50_000 {
                    history.push_lines(&[line(n)]);
                    if n % 1000 == 0 {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                history.close();
            })
        };
        let mut got = Vec::new();
        let mut batch = Vec::new();
        loop {
            match reader.recv(&mut batch, Duration::from_secs(60)) {
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
        let want: Vec<String> = (0..50_000).map(|n| format!("line {n:06}")).collect();
        assert_eq!(got.len(), want.len());
        assert_eq!(got, want);
    }

    #[test]
    fn an_unwritable_spool_is_reported_as_lost_lines() {
        let history = Arc::new(History::default());
        let mut reader = small(&history, std::path::Path::new("/nonexistent/omnidev-spool"));
        let total = KEPT_LINES as u64 + 10;
        for n in 0..total {
            history.push_lines(&[line(n)]);
        }
        let got = texts(&drain(&mut reader));
        assert_eq!(got.len(), 1, "{:?}", &got[..got.len().min(3)]);
        assert!(
            got[0].starts_with(&format!(
                "{total} records lost (could not write the output spool in /nonexistent"
            )),
            "{got:?}"
        );
        // Once reported, the reader reads the history again.
        history.push_lines(&[line(total)]);
        assert_eq!(texts(&drain(&mut reader)), [format!("line {total:06}")]);
    }

    #[test]
    fn a_dropped_reader_is_forgotten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let history = Arc::new(History::default());
        let reader = small(&history, dir.path());
        assert_eq!(history.lock().spills.len(), 1);
        drop(reader);
        assert!(history.lock().spills.is_empty());
    }
}

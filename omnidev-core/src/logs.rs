//! Log capture: splitting a child's output into lines, bounded ring buffers
//! (per service and combined), size-rotated log files, and publishing lines
//! as events without ever waiting for a subscriber.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::event::{Changes, Event, LogLine, Stream};
use crate::feed::Bus;
use crate::spec::LogConfig;

/// The name lines written by the supervisor itself are tagged with in the
/// combined buffer.
pub const SUPERVISOR_TAG: &str = "omnidev";

/// Rough per-line overhead counted against a ring's byte budget.
const LINE_OVERHEAD: usize = 64;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A bounded buffer of the most recent lines.
#[derive(Debug)]
pub(crate) struct Ring {
    /// Shared with the combined ring, so a line is stored once.
    lines: VecDeque<Arc<LogLine>>,
    bytes: usize,
    max_lines: usize,
    max_bytes: usize,
}

impl Ring {
    pub(crate) fn new(max_lines: usize, max_bytes: usize) -> Self {
        Self {
            lines: VecDeque::with_capacity(max_lines.min(1024)),
            bytes: 0,
            max_lines,
            max_bytes,
        }
    }

    pub(crate) fn push(&mut self, line: Arc<LogLine>) {
        if self.max_lines == 0 {
            return;
        }
        self.bytes += line.text.len() + LINE_OVERHEAD;
        self.lines.push_back(line);
        while self.lines.len() > self.max_lines
            || (self.bytes > self.max_bytes && self.lines.len() > 1)
        {
            if let Some(old) = self.lines.pop_front() {
                self.bytes -= old.text.len() + LINE_OVERHEAD;
            }
        }
    }

    pub(crate) fn to_vec(&self) -> Vec<LogLine> {
        self.lines.iter().map(|l| LogLine::clone(l)).collect()
    }

    pub(crate) fn clear(&mut self) {
        self.lines.clear();
        self.bytes = 0;
    }
}

/// Where a log file's bytes go: the file, or (in tests) a writer that
/// fails like a full disk.
pub(crate) trait Sink: Write + Send + std::fmt::Debug {}
impl<T: Write + Send + std::fmt::Debug> Sink for T {}

/// A log file rotated by size: `<name>.log`, then `.1` … `.keep`. Opened,
/// rotated and re-created through a handle on its directory
/// ([`crate::fs::Dir`]): a link planted as the log, or a log directory
/// swapped for a link while the pod runs, never sends a service's output
/// outside the pod.
#[derive(Debug)]
pub(crate) struct LogFile {
    path: PathBuf,
    dir: crate::fs::Dir,
    name: PathBuf,
    out: BufWriter<Box<dyn Sink>>,
    /// The inode of the file written to, which a rotation keeps.
    inode: u64,
    size: u64,
    max_bytes: u64,
    keep: usize,
}

impl LogFile {
    /// Opens (appending to) `path`.
    pub(crate) fn open(path: PathBuf, max_bytes: u64, keep: usize) -> io::Result<Self> {
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent)?;
        let dir = crate::fs::Dir::open(parent)?;
        let name = PathBuf::from(path.file_name().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "a log file path names no file")
        })?);
        let file = dir.open_file(&name, crate::fs::OpenOptions::AppendCreate)?;
        let meta = file.metadata()?;
        Ok(Self {
            path,
            dir,
            name,
            out: BufWriter::with_capacity(64 * 1024, Box::new(file)),
            inode: meta.ino(),
            size: meta.len(),
            max_bytes,
            keep,
        })
    }

    /// Appends one line and its newline, rotating first if it would not fit.
    pub(crate) fn write_line(&mut self, text: &[u8]) -> io::Result<()> {
        let len = text.len() as u64 + 1;
        if self.size > 0 && self.size + len > self.max_bytes {
            self.rotate()?;
        }
        self.out.write_all(text)?;
        self.out.write_all(b"\n")?;
        self.size += len;
        Ok(())
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.out.flush()?;
        if self.keep == 0 {
            self.dir.remove_file(&self.name)?;
        } else {
            for n in (1..self.keep).rev() {
                let from = rotated_path(&self.name, n);
                if self.dir.stat(&from)?.is_some() {
                    self.dir.rename(&from, &rotated_path(&self.name, n + 1))?;
                }
            }
            self.dir.rename(&self.name, &rotated_path(&self.name, 1))?;
        }
        let file = self
            .dir
            .open_file(&self.name, crate::fs::OpenOptions::AppendCreate)?;
        self.inode = file.metadata()?.ino();
        self.out = BufWriter::with_capacity(64 * 1024, Box::new(file));
        self.size = 0;
        Ok(())
    }
}

impl FileState {
    /// Marks an open file as failed by `error`, with `lost` lines of the
    /// failing batch counted as missing (some may have reached the file);
    /// returns the message for people.
    fn fail(&mut self, error: &io::Error, lost: usize, reopen_every: Duration) -> String {
        let FileState::Open(file) = std::mem::replace(self, FileState::None) else {
            return String::new();
        };
        let path = file.path.clone();
        // Dropping the writer may try to flush again; its error is the same.
        drop(file);
        let cause = error.to_string();
        let message = format!(
            "could not write {}: {cause}; its lines are kept in memory and shown, and the file \
             is reopened every {} ms until writing works again",
            path.display(),
            reopen_every.as_millis()
        );
        *self = FileState::Failed {
            path,
            cause,
            missing: lost as u64,
            retry_at: Instant::now() + reopen_every,
        };
        message
    }
}

fn write_all(file: &mut FileState, texts: &[String]) -> io::Result<()> {
    let FileState::Open(f) = file else {
        return Ok(());
    };
    for text in texts {
        f.write_line(text.as_bytes())?;
    }
    f.flush()
}

/// How long an unfinished line (a prompt such as `Password: `, a progress
/// bar redrawn with `\r`) waits for its newline before it is published as
/// it stands ([`crate::EventKind::PartialLine`]); later changes to it are
/// published at most this often.
pub const PARTIAL_LINE_AFTER: Duration = Duration::from_millis(200);

/// Splits a byte stream into lines: at `\n`, and at `max` bytes for longer
/// lines (at a character boundary when possible). A carriage return ends
/// nothing but starts its line over, as on a terminal: the text after a
/// line's last `\r` is the line (`10%\r20%\r100%\n` is `100%`, `a\r\n` is
/// `a`), so a progress bar redrawn in place is one line and the unfinished
/// line never holds more than one redraw. Invalid UTF-8 is replaced with
/// U+FFFD. Which pieces it cut from a longer line is told apart
/// ([`LineSplitter::take_cuts`]), so a log probe can match the line whole.
///
/// The unfinished line is offered for display once it has waited
/// [`PARTIAL_LINE_AFTER`] ([`LineSplitter::partial_due`],
/// [`LineSplitter::take_partial`]); the caller passes the time, so the
/// timing is tested without waiting.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    partial: Vec<u8>,
    /// A `\r` came after `partial`: the next text replaces it.
    returned: bool,
    max: usize,
    /// Indexes into `out` (as passed to `feed`) of the pieces that do not
    /// end their line.
    cuts: Vec<usize>,
    /// When the unfinished line, changed since it was last offered, is to
    /// be offered.
    due: Option<Instant>,
    /// `partial` changed since it was last offered (or since it began).
    changed: bool,
}

impl LineSplitter {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            partial: Vec::new(),
            returned: false,
            max: max.max(4),
            cuts: Vec::new(),
            due: None,
            changed: false,
        }
    }

    /// The indexes, into the batch filled since the last call, of the
    /// pieces a longer line was cut into (all but its last).
    pub(crate) fn take_cuts(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.cuts)
    }

    fn text(bytes: &[u8]) -> String {
        match std::str::from_utf8(bytes) {
            Ok(text) => text.to_owned(),
            Err(_) => String::from_utf8_lossy(bytes).into_owned(),
        }
    }

    /// Adds text to the unfinished line (starting it over after a `\r`).
    fn append(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if std::mem::take(&mut self.returned) {
            self.partial.clear();
        }
        self.partial.extend_from_slice(bytes);
        self.changed = true;
    }

    /// Ends the unfinished line with `rest`, its last text before `\n`.
    fn end_line(&mut self, rest: &[u8], out: &mut Vec<String>) {
        if self.returned && !rest.is_empty() {
            self.partial.clear();
        }
        self.returned = false;
        if self.partial.is_empty() {
            out.push(Self::text(rest));
        } else {
            self.partial.extend_from_slice(rest);
            out.push(Self::text(&self.partial));
            self.partial.clear();
        }
        self.changed = false;
        self.due = None;
    }

    /// Splits `data`, read at `now`, into `out`.
    pub(crate) fn feed(&mut self, mut data: &[u8], now: Instant, out: &mut Vec<String>) {
        while !data.is_empty() {
            // After a `\r` the next text replaces the unfinished line.
            let room = if self.returned {
                self.max
            } else {
                self.max - self.partial.len()
            };
            let window = &data[..data.len().min(room)];
            if let Some(pos) = memchr::memchr2(b'\n', b'\r', window) {
                if window[pos] == b'\n' {
                    self.end_line(&window[..pos], out);
                } else {
                    self.append(&window[..pos]);
                    self.returned = true;
                }
                data = &data[pos + 1..];
            } else {
                self.append(window);
                data = &data[window.len()..];
                if self.partial.len() >= self.max {
                    self.split_full(out);
                }
            }
        }
        if self.partial.is_empty() {
            self.changed = false;
            self.due = None;
        } else if self.changed && self.due.is_none() {
            self.due = Some(now + PARTIAL_LINE_AFTER);
        }
    }

    /// Emits a full buffer, keeping an incomplete trailing character.
    fn split_full(&mut self, out: &mut Vec<String>) {
        let cut = match std::str::from_utf8(&self.partial) {
            Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => e.valid_up_to(),
            _ => self.partial.len(),
        };
        self.cuts.push(out.len());
        out.push(String::from_utf8_lossy(&self.partial[..cut]).into_owned());
        self.partial.drain(..cut);
        // What is left is a line of its own.
        self.due = None;
    }

    /// When the unfinished line is to be offered ([`LineSplitter::take_partial`]);
    /// `None` while there is none, or it has not changed since it was.
    pub(crate) fn partial_due(&self) -> Option<Instant> {
        self.due
    }

    /// The unfinished line as it stands, once it is due at `now` (a
    /// character still incomplete at its end left out); it is not offered
    /// again until it changes, and then not before [`PARTIAL_LINE_AFTER`]
    /// has passed.
    pub(crate) fn take_partial(&mut self, now: Instant) -> Option<String> {
        if self.due.is_none_or(|due| due > now) {
            return None;
        }
        self.due = None;
        self.changed = false;
        let whole = match std::str::from_utf8(&self.partial) {
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            _ => self.partial.len(),
        };
        (whole > 0).then(|| String::from_utf8_lossy(&self.partial[..whole]).into_owned())
    }

    pub(crate) fn finish(&mut self, out: &mut Vec<String>) {
        if !self.partial.is_empty() {
            out.push(Self::text(&self.partial));
            self.partial.clear();
        }
        self.returned = false;
        self.changed = false;
        self.due = None;
    }
}

/// Where every line goes: rings, files and subscribers.
#[derive(Debug)]
pub(crate) struct LogStore {
    config: LogConfig,
    /// Each service's log, by name (a service added to a running pod
    /// gets one then: [`LogStore::add_service`]).
    services: std::sync::RwLock<HashMap<String, Arc<ServiceLog>>>,
    combined: Mutex<Ring>,
    seq: AtomicU64,
    bus: Arc<Bus>,
    /// How often a failed log file is reopened.
    reopen_every: Duration,
}

#[derive(Debug)]
struct ServiceLog {
    /// The service's name, shared by its lines.
    name: Arc<str>,
    ring: Mutex<Ring>,
    file: Mutex<FileState>,
    lines: AtomicU64,
    /// The log-line readiness probe of the current run, if any.
    watch: Mutex<Option<Arc<crate::probe::LineWatch>>>,
}

impl ServiceLog {
    fn new(name: &str, config: &LogConfig) -> Self {
        Self {
            name: Arc::from(name),
            ring: Mutex::new(Ring::new(config.ring_lines, config.ring_bytes)),
            file: Mutex::new(FileState::None),
            lines: AtomicU64::new(0),
            watch: Mutex::new(None),
        }
    }
}

/// A service's log file: none (logs go to memory only), open, or failed
/// and waiting to be reopened.
#[derive(Debug)]
enum FileState {
    None,
    Open(LogFile),
    Failed {
        path: PathBuf,
        /// The first error, as shown to people.
        cause: String,
        /// Lines that did not reach the file since it failed.
        missing: u64,
        /// When to try reopening it.
        retry_at: Instant,
    },
}

/// How often a failed log file is reopened (while lines arrive).
const REOPEN_EVERY: Duration = Duration::from_secs(1);

impl LogStore {
    pub(crate) fn new<'a>(
        config: LogConfig,
        names: impl IntoIterator<Item = &'a str>,
        bus: Arc<Bus>,
    ) -> Self {
        let services = names
            .into_iter()
            .map(|name| (name.to_owned(), Arc::new(ServiceLog::new(name, &config))))
            .collect();
        Self {
            combined: Mutex::new(Ring::new(config.combined_ring_lines, config.ring_bytes)),
            services: std::sync::RwLock::new(services),
            seq: AtomicU64::new(0),
            bus,
            config,
            reopen_every: REOPEN_EVERY,
        }
    }

    /// The log of `service`, if it has one.
    fn service(&self, service: &str) -> Option<Arc<ServiceLog>> {
        self.services
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(service)
            .cloned()
    }

    /// Every service's log.
    fn all(&self) -> Vec<(String, Arc<ServiceLog>)> {
        self.services
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(name, log)| (name.clone(), log.clone()))
            .collect()
    }

    /// Gives a service added to a running pod its log, and opens its file
    /// when logs go to files (a file that cannot be opened is the error;
    /// the service's lines are then kept in memory only). A service that
    /// has a log keeps it.
    pub(crate) fn add_service(&self, name: &str) -> Result<(), (PathBuf, io::Error)> {
        if self.service(name).is_some() {
            return Ok(());
        }
        let log = ServiceLog::new(name, &self.config);
        let opened = self.file_path(name).map(|path| {
            LogFile::open(
                path.clone(),
                self.config.max_file_bytes,
                self.config.keep_files,
            )
            .map_err(|e| (path, e))
        });
        let result = match opened {
            Some(Ok(file)) => {
                *lock(&log.file) = FileState::Open(file);
                Ok(())
            }
            Some(Err(error)) => Err(error),
            None => Ok(()),
        };
        self.services
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name.to_owned(), Arc::new(log));
        result
    }

    pub(crate) fn config(&self) -> &LogConfig {
        &self.config
    }

    /// The path of `service`'s log file, if logs go to files.
    pub(crate) fn file_path(&self, service: &str) -> Option<PathBuf> {
        self.config
            .dir
            .as_ref()
            .map(|dir| dir.join(format!("{service}.log")))
    }

    /// Opens the log files; an error names the file that failed.
    pub(crate) fn open_files(&self) -> Result<(), (PathBuf, io::Error)> {
        for (name, log) in &self.all() {
            if let Some(path) = self.file_path(name) {
                let file = LogFile::open(
                    path.clone(),
                    self.config.max_file_bytes,
                    self.config.keep_files,
                )
                .map_err(|e| (path, e))?;
                *lock(&log.file) = FileState::Open(file);
            }
        }
        Ok(())
    }

    /// Records where every service's log file stands now in
    /// [`MARK_FILE`] (a reload when `changes` is given, else the pod's
    /// start), so that `logs --since-reload` prints what comes after. Each
    /// position is taken under its file's lock: a line is before the mark
    /// or after it, never half. Returns what to tell people when the file
    /// could not be written; nothing is written when logs stay in memory.
    pub(crate) fn mark(&self, changes: Option<&Changes>) -> Option<String> {
        let taken = self.mark_now(changes)?;
        crate::fs::write_atomic_unsynced(&taken.path, &taken.mark.encode())
            .err()
            .map(|e| mark_failed(&taken.path, &e.to_string()))
    }

    /// What [`LogStore::mark`] writes, and where: every position taken now,
    /// for a caller that writes it elsewhere (the engine's background
    /// writer), or later (a reload whose services were stopped ahead of
    /// it names its files once its burst is over). `None` when logs stay
    /// in memory.
    pub(crate) fn mark_now(&self, changes: Option<&Changes>) -> Option<TakenMark> {
        let dir = self.config.dir.as_ref()?;
        let logs = self
            .all()
            .iter()
            .filter_map(|(name, log)| match &*lock(&log.file) {
                FileState::Open(file) => Some((
                    name.clone(),
                    Position {
                        inode: file.inode,
                        offset: file.size,
                    },
                )),
                FileState::None | FileState::Failed { .. } => None,
            })
            .collect();
        let mut mark = Mark {
            at_ms: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            reload: false,
            files: Vec::new(),
            logs,
        };
        mark.name(changes);
        Some(TakenMark {
            path: dir.join(MARK_FILE),
            mark,
        })
    }

    /// Flushes every log file.
    pub(crate) fn flush(&self) {
        for (name, log) in &self.all() {
            let notice = {
                let mut file = lock(&log.file);
                match &mut *file {
                    FileState::Open(f) => match f.flush() {
                        Ok(()) => None,
                        Err(e) => Some(file.fail(&e, 0, self.reopen_every)),
                    },
                    FileState::None | FileState::Failed { .. } => None,
                }
            };
            if let Some(message) = notice {
                self.notice(name, message);
            }
        }
    }

    /// Writes `texts` to `service`'s log file, reopening a failed one once
    /// [`REOPEN_EVERY`] has passed. Returns what people should be told (the
    /// first failure with its cause, and the resumption with the gap).
    fn write_file(&self, log: &ServiceLog, texts: &[String]) -> Option<String> {
        let mut file = lock(&log.file);
        if let FileState::Failed {
            path,
            cause,
            missing,
            retry_at,
        } = &mut *file
        {
            if Instant::now() < *retry_at {
                *missing += texts.len() as u64;
                return None;
            }
            let gap = format!("{missing} lines are missing here ({cause})");
            let reopened = LogFile::open(
                path.clone(),
                self.config.max_file_bytes,
                self.config.keep_files,
            )
            .and_then(|mut f| {
                // Flushed here: a file that opens but still cannot take a
                // line (the disk is still full) is no resumption.
                f.write_line(format!("[omnidev] {gap}").as_bytes())?;
                f.flush()?;
                Ok(f)
            });
            let Ok(f) = reopened else {
                *missing += texts.len() as u64;
                *retry_at = Instant::now() + self.reopen_every;
                return None;
            };
            let message = format!(
                "logging to {} resumed; {missing} lines are missing from it ({cause})",
                path.display()
            );
            *file = FileState::Open(f);
            return Some(match write_all(&mut file, texts) {
                Ok(()) => message,
                Err(e) => file.fail(&e, texts.len(), self.reopen_every),
            });
        }
        match write_all(&mut file, texts) {
            Ok(()) => None,
            Err(e) => Some(file.fail(&e, texts.len(), self.reopen_every)),
        }
    }

    /// Tells people about `service`'s log file, in order with its lines.
    fn notice(&self, service: &str, message: String) {
        let event = Event {
            at: std::time::SystemTime::now(),
            service: Some(service.to_owned()),
            kind: crate::event::EventKind::Notice { message },
        };
        self.push_supervisor(event.to_string());
        self.bus.send(event);
    }

    /// Lines recorded for `service` so far.
    pub(crate) fn line_count(&self, service: &str) -> u64 {
        self.service(service)
            .map_or(0, |l| l.lines.load(Ordering::Relaxed))
    }

    /// Lines of `service` recorded from now on are shown to `watch` (the
    /// previous run's watch, if any, is dropped).
    pub(crate) fn watch_lines(&self, service: &str, watch: Option<Arc<crate::probe::LineWatch>>) {
        if let Some(log) = self.service(service) {
            *lock(&log.watch) = watch;
        }
    }

    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Records a batch of lines of `service`, leaving `texts` empty.
    pub(crate) fn push_batch(&self, service: &str, stream: Stream, texts: &mut Vec<String>) {
        self.push_pieces(service, stream, texts, &[]);
    }

    /// [`LogStore::push_batch`] of output split by a [`LineSplitter`]:
    /// `cuts` names the pieces that do not end their line.
    fn push_pieces(&self, service: &str, stream: Stream, texts: &mut Vec<String>, cuts: &[usize]) {
        if texts.is_empty() {
            return;
        }
        let Some(log) = self.service(service) else {
            texts.clear();
            return;
        };
        // A full disk must not stop the service: its lines stay in the rings
        // and reach the front-ends; the file is reopened later.
        if let Some(message) = self.write_file(&log, texts) {
            self.notice(service, message);
        }
        log.lines.fetch_add(texts.len() as u64, Ordering::Relaxed);
        if let Some(watch) = lock(&log.watch).as_ref() {
            watch.offer(stream, texts, cuts);
        }
        let mut ring = lock(&log.ring);
        let mut combined = lock(&self.combined);
        let lines: Vec<Arc<LogLine>> = texts
            .drain(..)
            .map(|text| {
                Arc::new(LogLine {
                    service: log.name.clone(),
                    stream,
                    text,
                    seq: self.next_seq(),
                })
            })
            .collect();
        // Published while the combined ring is held, so every subscriber
        // sees lines in sequence order.
        self.bus.send_lines(&lines);
        for line in lines {
            combined.push(line.clone());
            ring.push(line);
        }
    }

    /// Publishes `text`, the unfinished line of `service`'s `stream` as it
    /// stands, to the subscribers only ([`crate::EventKind::PartialLine`]):
    /// the files, rings, feeds and log probe get the line once it is
    /// finished (or its output ends), so nothing is recorded twice.
    pub(crate) fn push_partial(&self, service: &str, stream: Stream, text: String) {
        let Some(log) = self.service(service) else {
            return;
        };
        // Numbered and sent under the combined ring's lock, like every
        // line, so subscribers see it in sequence order.
        let _combined = lock(&self.combined);
        let line = LogLine {
            service: log.name.clone(),
            stream,
            text,
            seq: self.next_seq(),
        };
        self.bus.send_partial(line);
    }

    /// Adds a supervisor line (an event rendered for people) to the
    /// combined buffer only.
    pub(crate) fn push_supervisor(&self, text: String) {
        let line = LogLine {
            service: Arc::from(SUPERVISOR_TAG),
            stream: Stream::Supervisor,
            text,
            seq: self.next_seq(),
        };
        lock(&self.combined).push(Arc::new(line));
    }

    /// A copy of a service's ring, or of the combined ring for `None`.
    /// `None` is returned for an unknown service.
    pub(crate) fn lines(&self, service: Option<&str>) -> Option<Vec<LogLine>> {
        match service {
            None => Some(lock(&self.combined).to_vec()),
            Some(name) => self.service(name).map(|l| lock(&l.ring).to_vec()),
        }
    }

    /// Empties a service's ring, or the combined ring for `None`.
    pub(crate) fn clear(&self, service: Option<&str>) -> bool {
        match service {
            None => lock(&self.combined).clear(),
            Some(name) => match self.service(name) {
                Some(l) => lock(&l.ring).clear(),
                None => return false,
            },
        }
        true
    }
}

/// Pipe buffer asked for a service's stdout and stderr: 1 MiB, the default
/// ceiling (`/proc/sys/fs/pipe-max-size`) for unprivileged processes. It
/// holds about 10 ms of the fastest writer, so letting small writes gather
/// for [`GATHER`] never holds a service up. Linux only: macOS has no call
/// to ask for a bigger pipe (`F_SETPIPE_SZ`).
#[cfg(target_os = "linux")]
pub(crate) const PIPE_BYTES: i32 = 1024 * 1024;

/// How long the capture lets a burst of small writes gather before reading
/// again. A service writing a line per `write` (unbuffered Python, for
/// one) would otherwise cost a read, a log write and a wake-up per line.
const GATHER: Duration = Duration::from_millis(1);

/// Widens the pipe behind `fd` to `PIPE_BYTES` on Linux (best effort:
/// where the kernel refuses, the capture still works, reading more often).
fn widen_pipe(fd: std::os::fd::BorrowedFd<'_>) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: F_SETPIPE_SZ takes an int and touches no memory; the
        // descriptor is borrowed, so it is open for the call.
        unsafe {
            libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = fd;
}

/// Reads the pipe `fd` to its end on a thread of its own, recording each
/// line of `service`; [`Capture::done`] resolves once the last line is
/// recorded. Never waits for subscribers (the broadcast channel drops for
/// laggards, a [`Feed`](crate::feed::Feed) spools to disk), so the child's
/// pipe is drained as fast as the files can be written.
///
/// The thread reads with blocking reads rather than through the runtime's
/// poller: a pipe wakes an `epoll` waiter on every write, so a service
/// writing a line per `write` would wake the runtime once a line even while
/// the capture lets output gather; a reader sleeping outside `read` is not
/// woken at all, and one blocked in `read` only when the pipe stops being
/// empty.
///
/// The pipe is widened first (`PIPE_BYTES`, on Linux).
pub(crate) fn spawn_capture(
    fd: std::os::fd::OwnedFd,
    store: Arc<LogStore>,
    service: &str,
    stream: Stream,
) -> io::Result<Capture> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use std::os::fd::AsFd as _;
    widen_pipe(fd.as_fd());
    let flags = OFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GETFL)?);
    fcntl(&fd, FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK))?;
    let pipe = Arc::new(Pipe {
        splitter: Mutex::new(LineSplitter::new(store.config().max_line_bytes)),
        store,
        service: service.to_owned(),
        stream,
    });
    let (done, finished) = tokio::sync::oneshot::channel();
    let reader = pipe.clone();
    std::thread::Builder::new()
        .name("omnidev-capture".into())
        .spawn(move || {
            capture(std::fs::File::from(fd), &reader);
            let _ = done.send(());
        })?;
    Ok(Capture {
        done: finished,
        pipe,
    })
}

/// The reader of one of a run's pipes, started by [`spawn_capture`].
#[derive(Debug)]
pub(crate) struct Capture {
    /// Resolves once the pipe's last line is recorded.
    pub(crate) done: tokio::sync::oneshot::Receiver<()>,
    pipe: Arc<Pipe>,
}

impl Capture {
    /// Records the pipe's unfinished line now, as a line of its own: for a
    /// pipe a process outside the run still holds open once the run has
    /// ended, so that the run's last words are recorded before its end is
    /// acted on. Output read later goes on as a new line.
    pub(crate) fn finish_unfinished(&self) {
        self.pipe.finish();
    }
}

/// One pipe's splitter, shared by its reader thread and its [`Capture`];
/// each step holds the splitter while it records, so lines are recorded
/// in the order they were split, and an unfinished line is never published
/// after it was finished.
#[derive(Debug)]
struct Pipe {
    splitter: Mutex<LineSplitter>,
    store: Arc<LogStore>,
    service: String,
    stream: Stream,
}

impl Pipe {
    /// Splits `data`, read at `now`, and records its lines.
    fn feed(&self, data: &[u8], now: Instant, batch: &mut Vec<String>) {
        let mut splitter = lock(&self.splitter);
        splitter.feed(data, now, batch);
        let cuts = splitter.take_cuts();
        self.store
            .push_pieces(&self.service, self.stream, batch, &cuts);
    }

    fn partial_due(&self) -> Option<Instant> {
        lock(&self.splitter).partial_due()
    }

    /// Publishes the unfinished line, if it is due at `now`.
    fn offer(&self, now: Instant) {
        let mut splitter = lock(&self.splitter);
        if let Some(text) = splitter.take_partial(now) {
            self.store.push_partial(&self.service, self.stream, text);
        }
    }

    /// Records the unfinished line as a line.
    fn finish(&self) {
        let mut batch = Vec::new();
        let mut splitter = lock(&self.splitter);
        splitter.finish(&mut batch);
        let cuts = splitter.take_cuts();
        self.store
            .push_pieces(&self.service, self.stream, &mut batch, &cuts);
    }
}

/// Reads `reader` to its end, recording each line through `pipe`.
///
/// When reads come back short in quick succession (a service writing
/// many small pieces), the next read waits [`GATHER`] so the pieces arrive
/// together; a read after a quiet spell, or one that filled the buffer, is
/// followed at once.
///
/// An unfinished line is published as it stands once it has waited
/// [`PARTIAL_LINE_AFTER`] for its newline (the wait for more output is
/// then a `poll` with that deadline), and again at most that often while
/// it changes. At the end of the output it is recorded as a line, before
/// [`Capture::done`] resolves: a run's last words are recorded before its
/// end is acted on.
fn capture(reader: std::fs::File, pipe: &Pipe) {
    use std::os::fd::AsFd as _;
    let mut reader = reader;
    let mut buf = vec![0u8; 256 * 1024];
    let mut batch = Vec::new();
    let mut last_read: Option<Instant> = None;
    let mut gather = false;
    loop {
        if gather {
            std::thread::sleep(GATHER);
        }
        if let Some(due) = pipe.partial_due() {
            let wait = due.saturating_duration_since(Instant::now());
            match readable_within(reader.as_fd(), wait) {
                Some(true) => {}
                Some(false) => {
                    pipe.offer(Instant::now());
                    continue;
                }
                None => continue,
            }
        }
        let n = match io::Read::read(&mut reader, &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let now = Instant::now();
        gather = n < buf.len() && last_read.is_some_and(|at| now.duration_since(at) < GATHER);
        last_read = Some(now);
        pipe.feed(&buf[..n], now, &mut batch);
    }
    pipe.finish();
}

/// Whether `fd` has something to read (or its end) within `wait`:
/// `Some(false)` when the wait passed, `None` when a signal cut it short.
/// Any other error is `Some(true)`: the read that follows reports it.
fn readable_within(fd: std::os::fd::BorrowedFd<'_>, wait: Duration) -> Option<bool> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    // Rounded up, so a wait of less than a millisecond is not a busy loop.
    let millis = wait.as_micros().div_ceil(1000);
    let timeout = PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match poll(&mut fds, timeout) {
        Ok(0) => Some(false),
        Err(nix::errno::Errno::EINTR) => None,
        Ok(_) | Err(_) => Some(true),
    }
}

/// Rotated file names of `path`, for tests and tools: `path.1` … `path.n`.
pub fn rotated_path(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// The file in a pod's log directory that says where the last reload, or
/// the pod's start, left each service's log file (`omnidev logs
/// --since-reload`).
pub const MARK_FILE: &str = "reload-mark.json";

/// What to tell people when the mark at `path` could not be written.
pub(crate) fn mark_failed(path: &Path, cause: &str) -> String {
    format!(
        "could not write {}: {cause}; `omnidev logs --since-reload` may start at an earlier \
         reload",
        path.display()
    )
}

/// The largest [`MARK_FILE`] read (a real one is a few hundred bytes).
const MARK_MAX_BYTES: u64 = 1024 * 1024;

/// Where the pod's last reload (or its start, when none followed) left the
/// services' log files: written at that moment to [`MARK_FILE`], read by
/// `omnidev logs --since-reload`, on a running pod or a stopped one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Mark {
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// A reload; `false`: the pod's start.
    pub reload: bool,
    /// The changed files that asked for the reload (at most
    /// [`Changes::KEPT`]; none for a start or a restart asked for by hand).
    #[serde(default)]
    pub files: Vec<String>,
    /// Per service, where its log file stood.
    pub logs: BTreeMap<String, Position>,
}

impl Mark {
    /// Says what it marks: a reload for `changes` (`None`: the pod's start).
    pub(crate) fn name(&mut self, changes: Option<&Changes>) {
        self.reload = changes.is_some();
        self.files = changes.map(|c| c.paths.clone()).unwrap_or_default();
    }

    /// Its file's text. Atomic but not flushed: a mark matters only while
    /// the pod runs.
    pub(crate) fn encode(&self) -> Vec<u8> {
        // A mark holds strings and numbers only: encoding cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// A [`Mark`] taken and not yet written, with the file it goes to.
#[derive(Debug)]
pub(crate) struct TakenMark {
    pub(crate) path: PathBuf,
    pub(crate) mark: Mark,
}

/// A place in a log file that rotation does not move: the file (by inode,
/// whatever its name is now) and the byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The file's inode.
    pub inode: u64,
    /// Bytes written to it before the mark.
    pub offset: u64,
}

impl Mark {
    /// Reads the mark in the log directory `dir`. A missing file is
    /// [`Error::Read`](crate::Error::Read) with
    /// [`io::ErrorKind::NotFound`]; one that is not a mark is
    /// [`io::ErrorKind::InvalidData`].
    pub fn read(dir: &Path) -> crate::Result<Self> {
        let path = dir.join(MARK_FILE);
        let invalid = |message: String| io::Error::new(io::ErrorKind::InvalidData, message);
        let mut text = Vec::new();
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .and_then(|file| file.take(MARK_MAX_BYTES + 1).read_to_end(&mut text))
            .and_then(|n| {
                if n as u64 > MARK_MAX_BYTES {
                    return Err(invalid(format!("larger than {MARK_MAX_BYTES} bytes")));
                }
                serde_json::from_slice(&text).map_err(|e| invalid(e.to_string()))
            })
            .map_err(|source| crate::Error::Read { path, source })
    }

    /// When it was written.
    pub fn at(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.at_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(max: usize, chunks: &[&[u8]]) -> Vec<String> {
        let mut s = LineSplitter::new(max);
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, Instant::now(), &mut out);
        }
        s.finish(&mut out);
        out
    }

    #[test]
    fn splits_lines_across_chunks() {
        assert_eq!(split(100, &[b"ab", b"c\nde\r\n", b"f"]), ["abc", "de", "f"]);
    }

    #[test]
    fn long_lines_are_split_at_max() {
        assert_eq!(
            split(4, &[b"abcdefghij\nxy\n"]),
            ["abcd", "efgh", "ij", "xy"]
        );
    }

    #[test]
    fn split_keeps_multibyte_characters_whole() {
        // "é" is two bytes; a cut after 5 bytes would split the third one.
        let text = "ééé".as_bytes();
        assert_eq!(split(5, &[text]), ["éé", "é"]);
    }

    #[test]
    fn a_carriage_return_starts_its_line_over() {
        assert_eq!(
            split(100, &[b"10%\r20%", b"\r", b"100%\n"]),
            ["100%"],
            "a progress bar is one line"
        );
        // A `\r` that nothing follows overwrites nothing.
        assert_eq!(
            split(100, &[b"done\r\r\n", b"a\r", b"\nb\r"]),
            ["done", "a", "b"]
        );
        assert_eq!(split(100, &[b"\r\n\rx\n"]), ["", "x"]);
        // A redraw flood never fills the line: no piece is cut from it.
        let mut s = LineSplitter::new(16);
        let mut out = Vec::new();
        for i in 0..10_000 {
            s.feed(
                format!("{i:05} of 10000\r").as_bytes(),
                Instant::now(),
                &mut out,
            );
        }
        assert!(out.is_empty(), "{out:?}");
        assert!(s.partial.len() <= 16);
        s.feed(b"\n", Instant::now(), &mut out);
        assert_eq!(out, ["09999 of 10000"]);
    }

    /// What a terminal leaves of each line of `input`: the text after its
    /// last carriage return that something followed.
    fn as_a_terminal_shows(input: &[u8]) -> Vec<String> {
        let mut lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
        let last = lines.pop().unwrap_or_default();
        let shown = |line: &[u8]| {
            let kept = line
                .split(|&b| b == b'\r')
                .rfind(|segment| !segment.is_empty())
                .unwrap_or_default();
            String::from_utf8_lossy(kept).into_owned()
        };
        let mut out: Vec<String> = lines.into_iter().map(shown).collect();
        if !shown(last).is_empty() {
            out.push(shown(last));
        }
        out
    }

    proptest::proptest! {
        /// However the output is cut into reads, the lines are what a
        /// terminal shows, and the unfinished line (and what is offered
        /// of it) never holds more than the line cap.
        #[test]
        fn lines_are_what_a_terminal_shows_and_the_unfinished_one_stays_bounded(
            input in proptest::collection::vec(
                proptest::sample::select(vec![b'a', b'b', b'\r', b'\n', 0xc3, 0xa9, 0xff]),
                0..400,
            ),
            cuts in proptest::collection::vec(1usize..50, 1..20),
            max in 8usize..32,
        ) {
            let start = Instant::now();
            let mut whole = LineSplitter::new(1000);
            let mut small = LineSplitter::new(max);
            let (mut out, mut pieces) = (Vec::new(), Vec::new());
            let mut rest = &input[..];
            for (i, cut) in cuts.iter().cycle().enumerate() {
                if rest.is_empty() {
                    break;
                }
                let (read, after) = rest.split_at((*cut).min(rest.len()));
                let now = start + Duration::from_millis(100 * i as u64);
                whole.feed(read, now, &mut out);
                small.feed(read, now, &mut pieces);
                proptest::prop_assert!(small.partial.len() <= max);
                // An invalid byte is shown as U+FFFD, three bytes.
                if let Some(text) = small.take_partial(now + PARTIAL_LINE_AFTER) {
                    proptest::prop_assert!(!text.is_empty() && text.len() <= 3 * max);
                }
                rest = after;
            }
            whole.finish(&mut out);
            small.finish(&mut pieces);
            proptest::prop_assert_eq!(out, as_a_terminal_shows(&input));
            proptest::prop_assert!(pieces.iter().all(|p| p.len() <= 3 * max));
        }
    }

    #[test]
    fn an_unfinished_line_is_offered_after_its_wait_then_at_most_that_often() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut s = LineSplitter::new(100);
        let mut out = Vec::new();
        s.feed(b"ready\nPassword: ", at(0), &mut out);
        assert_eq!(out, ["ready"]);
        assert_eq!(s.partial_due(), Some(at(200)));
        assert_eq!(s.take_partial(at(199)), None, "not yet");
        assert_eq!(s.take_partial(at(200)).as_deref(), Some("Password: "));
        assert_eq!(s.partial_due(), None, "offered once while unchanged");
        assert_eq!(s.take_partial(at(10_000)), None);

        // A progress bar: its redraws are offered at most every 200 ms,
        // each time as the text after the last `\r`.
        s.feed(b"\n10%", at(1000), &mut out);
        assert_eq!(out, ["ready", "Password: "]);
        for (ms, text) in [(1050, "\r20%"), (1100, "\r30%"), (1150, "\r40%\r")] {
            s.feed(text.as_bytes(), at(ms), &mut out);
        }
        assert_eq!(s.take_partial(at(1200)).as_deref(), Some("40%"));
        s.feed(b"50%", at(1210), &mut out);
        assert_eq!(s.partial_due(), Some(at(1410)));
        // Finished before it was due: nothing more to offer.
        s.feed(b"\r100%\n", at(1300), &mut out);
        assert_eq!(s.partial_due(), None);
        assert_eq!(out.last().map(String::as_str), Some("100%"));

        // A character cut in two by the reads is offered once whole.
        s.feed("é".as_bytes().get(..1).expect("a byte"), at(2000), &mut out);
        assert_eq!(s.take_partial(at(2200)), None);
        s.feed(&"é".as_bytes()[1..], at(2300), &mut out);
        assert_eq!(s.take_partial(at(2500)).as_deref(), Some("é"));
        let mut out = Vec::new();
        s.finish(&mut out);
        assert_eq!(out, ["é"], "the end of the output finishes it");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(split(100, &[b"a\xffb\n"]), ["a\u{fffd}b"]);
    }

    #[test]
    fn ring_bounds_lines_and_bytes() {
        let line = |t: &str| LogLine {
            service: "s".into(),
            stream: Stream::Stdout,
            text: t.into(),
            seq: 0,
        };
        let mut ring = Ring::new(3, usize::MAX);
        for t in ["1", "2", "3", "4"] {
            ring.push(Arc::new(line(t)));
        }
        let texts: Vec<_> = ring.to_vec().into_iter().map(|l| l.text).collect();
        assert_eq!(texts, ["2", "3", "4"]);

        let mut ring = Ring::new(100, 2 * (10 + LINE_OVERHEAD));
        for _ in 0..5 {
            ring.push(Arc::new(line("0123456789")));
        }
        assert_eq!(ring.to_vec().len(), 2);
    }

    #[test]
    fn file_rotates_keeping_n() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        let mut file = LogFile::open(path.clone(), 20, 2).expect("open");
        for i in 0..10 {
            file.write_line(format!("line-{i:04}").as_bytes())
                .expect("write");
        }
        file.flush().expect("flush");
        // Ten 10-byte lines, two per file: current + .1 + .2 kept, .3 never.
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "line-0008\nline-0009\n"
        );
        assert_eq!(
            std::fs::read_to_string(rotated_path(&path, 1)).expect("read .1"),
            "line-0006\nline-0007\n"
        );
        assert!(rotated_path(&path, 2).exists());
        assert!(!rotated_path(&path, 3).exists());
    }

    #[test]
    fn a_log_dir_swapped_for_a_link_while_running_never_gets_output_outside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = dir.path().join("logs");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&logs).expect("mkdir");
        std::fs::create_dir_all(&outside).expect("mkdir");
        let mut file = LogFile::open(logs.join("svc.log"), 20, 2).expect("open");
        file.write_line(b"line-0000").expect("write");
        // A hostile service moves the log directory and plants a link.
        std::fs::rename(&logs, dir.path().join("moved")).expect("move");
        std::os::unix::fs::symlink(&outside, &logs).expect("symlink");
        for i in 1..6 {
            file.write_line(format!("line-{i:04}").as_bytes())
                .expect("write");
        }
        file.flush().expect("flush");
        assert_eq!(std::fs::read_dir(&outside).expect("ls").count(), 0);
        let moved = dir.path().join("moved/svc.log");
        assert_eq!(
            std::fs::read_to_string(&moved).expect("read"),
            "line-0004\nline-0005\n"
        );
        // A link planted as the log itself is refused at open.
        std::fs::remove_file(&logs).expect("rm");
        std::fs::create_dir(&logs).expect("mkdir");
        std::os::unix::fs::symlink(outside.join("x"), logs.join("svc.log")).expect("symlink");
        LogFile::open(logs.join("svc.log"), 20, 2).expect_err("a link");
        assert!(!outside.join("x").exists());
    }

    /// A writer that fails like a full disk.
    #[derive(Debug)]
    struct FullDisk;

    impl Write for FullDisk {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        }
    }

    fn notices(events: &mut tokio::sync::broadcast::Receiver<Event>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(event) = events.try_recv() {
            if let crate::event::EventKind::Notice { .. } = event.kind {
                out.push(event.to_string());
            }
        }
        out
    }

    #[test]
    fn a_mark_is_where_the_lines_after_it_begin_even_once_rotated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            dir: Some(dir.path().to_path_buf()),
            max_file_bytes: 32,
            ..LogConfig::default()
        };
        let store = LogStore::new(config, ["svc", "idle"], Arc::new(Bus::new(64)));
        store.open_files().expect("open");
        let batch = |texts: &[&str]| texts.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
        store.push_batch("svc", Stream::Stdout, &mut batch(&["before 1", "before 2"]));
        assert_eq!(
            store.mark(Some(&Changes::of(["app/b.py", "app/a.py"]))),
            None
        );
        store.push_batch("svc", Stream::Stderr, &mut batch(&["after 1", "after 2"]));

        let mark = Mark::read(dir.path()).expect("the mark");
        assert!(mark.reload);
        assert_eq!(mark.files, ["app/a.py", "app/b.py"]);
        assert_eq!(mark.logs["idle"].offset, 0);
        // `after 2` did not fit: the marked file is now `svc.log.1`.
        let log = dir.path().join("svc.log");
        let rotated = rotated_path(&log, 1);
        let position = mark.logs["svc"];
        assert_eq!(
            std::fs::metadata(&rotated).expect("rotated").ino(),
            position.inode
        );
        let text = std::fs::read_to_string(&rotated).expect("read");
        assert_eq!(
            &text[usize::try_from(position.offset).expect("small")..],
            "after 1\n"
        );
        assert_eq!(std::fs::read_to_string(&log).expect("read"), "after 2\n");

        std::fs::write(dir.path().join(MARK_FILE), "{\"at-ms\": ").expect("write");
        let Err(crate::Error::Read { source, .. }) = Mark::read(dir.path()) else {
            panic!("a broken mark was read");
        };
        assert_eq!(source.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_full_disk_is_announced_once_and_logging_resumes_with_the_gap_marked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bus = Arc::new(Bus::new(1024));
        let mut events = bus.subscribe();
        let config = LogConfig {
            dir: Some(dir.path().to_path_buf()),
            ..LogConfig::default()
        };
        let mut store = LogStore::new(config, ["svc"], bus);
        store.reopen_every = Duration::ZERO;
        store.open_files().expect("open");
        let batch = |texts: &[&str]| texts.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
        store.push_batch("svc", Stream::Stdout, &mut batch(&["before"]));

        // The disk fills up: the next write fails.
        if let FileState::Open(file) = &mut *lock(&store.service("svc").expect("svc").file) {
            file.out = BufWriter::new(Box::new(FullDisk));
        }
        // Reopening waits for the next attempt; hold it off for now.
        store.reopen_every = Duration::from_secs(3600);
        store.push_batch("svc", Stream::Stdout, &mut batch(&["lost 1", "lost 2"]));
        store.push_batch("svc", Stream::Stdout, &mut batch(&["lost 3"]));
        store.flush();
        let said = notices(&mut events);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("svc: could not write ")
                && said[0].contains("No space left on device"),
            "{said:?}"
        );
        // The lines still reached the ring (and every front-end).
        let ring: Vec<String> = store
            .lines(Some("svc"))
            .expect("svc")
            .into_iter()
            .map(|l| l.text)
            .collect();
        assert_eq!(ring, ["before", "lost 1", "lost 2", "lost 3"]);

        // Space is back: the next line reopens the file.
        if let FileState::Failed { retry_at, .. } =
            &mut *lock(&store.service("svc").expect("svc").file)
        {
            *retry_at = Instant::now();
        }
        store.push_batch("svc", Stream::Stdout, &mut batch(&["after"]));
        let said = notices(&mut events);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("resumed; 3 lines are missing from it (No space left on device"),
            "{said:?}"
        );
        let text = std::fs::read_to_string(dir.path().join("svc.log")).expect("read");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "before");
        assert!(
            lines[1].starts_with("[omnidev] 3 lines are missing here (No space left"),
            "{text}"
        );
        assert_eq!(lines[2], "after");
    }

    /// What a log probe sees of `script`'s stdout, read through a real pipe
    /// by the capture: whether `pattern` matched, and the lines kept for
    /// display.
    fn probe_sees(pattern: &str, script: &str) -> (bool, Vec<String>) {
        let store = Arc::new(LogStore::new(
            LogConfig::default(),
            ["svc"],
            Arc::new(Bus::new(64)),
        ));
        let watch = Arc::new(crate::probe::LineWatch::new(pattern));
        store.watch_lines("svc", Some(watch.clone()));
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let out = std::os::fd::OwnedFd::from(child.stdout.take().expect("stdout"));
        let capture = spawn_capture(out, store.clone(), "svc", Stream::Stdout).expect("capture");
        capture.done.blocking_recv().expect("every line recorded");
        assert!(child.wait().expect("wait").success());
        let lines = store
            .lines(Some("svc"))
            .expect("svc")
            .iter()
            .map(|l| l.text.clone())
            .collect();
        (watch.matched(), lines)
    }

    #[test]
    fn a_log_probe_sees_whole_lines_not_the_pieces_kept_for_display() {
        let piece = LogConfig::default().max_line_bytes;
        // Its first 64 KiB piece alone would match.
        let long = format!("print('x' * {piece} + 'x' * 100 + ' END', flush=True)");
        let (matched, lines) = probe_sees("^x+$", &long);
        assert!(!matched, "a piece of a longer line matched");
        assert_eq!(
            lines.iter().map(String::len).collect::<Vec<_>>(),
            [piece, 104],
            "still split for display"
        );
        // A whole long line matches, with a colour code the split cut in two
        // removed.
        let colour = format!(
            r"import sys; sys.stdout.write('x' * {} + '\x1b[31m' + 'x' * 100 + '\x1b[0m\n')",
            piece - 2
        );
        assert!(probe_sees("^x+$", &colour).0, "the whole line matches");
        // Past the bound a line never matches, whole or in pieces; the
        // next line does.
        let bound = crate::probe::LOG_PROBE_LINE_BYTES;
        let past = format!("print('x' * {}, flush=True); print('ready')", bound + 1);
        assert!(!probe_sees("^x+$", &past).0, "a line past the bound");
        assert!(probe_sees("^(x+|ready)$", &past).0, "the line after it");
    }
}

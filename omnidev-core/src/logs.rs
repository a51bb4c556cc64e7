//! Log capture: where every line of a service goes (the store: files and
//! the history), split by concern into the line splitter, the
//! rotating file writer, the pipe capture and the reload mark.

mod capture;
mod file;
mod mark;
mod splitter;

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

pub(crate) use capture::{Capture, spawn_capture};
pub(crate) use file::LogFile;
pub use file::{RotatingLog, rotate_away, rotated_path};
pub use mark::{MARK_FILE, Mark, Position};
pub(crate) use mark::{TakenMark, mark_failed};
pub use splitter::{LineSplitter, PARTIAL_LINE_AFTER};

use crate::event::{Event, LogLine, Stream};
use crate::history::History;
use crate::spec::LogConfig;
use crate::sync::Locked;

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

/// `new` in the memory of `spare`, a line nobody else holds, when there is
/// one (the text it held goes to `texts_back`); else in its own.
fn fill(spare: Option<Arc<LogLine>>, new: LogLine, texts_back: &mut Vec<String>) -> Arc<LogLine> {
    if let Some(mut line) = spare
        && let Some(reused) = Arc::get_mut(&mut line)
    {
        texts_back.push(std::mem::replace(reused, new).text);
        return line;
    }
    Arc::new(new)
}

/// Where every line goes: files and the history.
#[derive(Debug)]
pub(crate) struct LogStore {
    config: LogConfig,
    /// Each service's log, by name (a service added to a running pod
    /// gets one then: [`LogStore::add_service`]).
    services: Mutex<HashMap<String, Arc<ServiceLog>>>,
    /// Held while lines are numbered and published, so every reader sees
    /// them in number order.
    order: Mutex<()>,
    seq: AtomicU64,
    history: Arc<History>,
    /// How often a failed log file is reopened.
    reopen_every: Duration,
}

#[derive(Debug)]
struct ServiceLog {
    /// The service's name, shared by its lines.
    name: Arc<str>,
    file: Mutex<FileState>,
    lines: AtomicU64,
    /// The log-line readiness probe of the current run, if any.
    watch: Mutex<Option<Arc<crate::probe::LineWatch>>>,
}

impl ServiceLog {
    fn new(name: &str) -> Self {
        Self {
            name: Arc::from(name),
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
        history: Arc<History>,
    ) -> Self {
        let services = names
            .into_iter()
            .map(|name| (name.to_owned(), Arc::new(ServiceLog::new(name))))
            .collect();
        Self {
            order: Mutex::new(()),
            services: Mutex::new(services),
            seq: AtomicU64::new(0),
            history,
            config,
            reopen_every: REOPEN_EVERY,
        }
    }

    /// The log of `service`, if it has one.
    fn service(&self, service: &str) -> Option<Arc<ServiceLog>> {
        self.services.locked().get(service).cloned()
    }

    /// Every service's log.
    fn all(&self) -> Vec<(String, Arc<ServiceLog>)> {
        self.services.locked().iter().map(|(name, log)| (name.clone(), log.clone())).collect()
    }

    /// Gives a service added to a running pod its log, and opens its file
    /// when logs go to files (a file that cannot be opened is the error;
    /// the service's lines are then kept in memory only). A service that
    /// has a log keeps it, its file opened again after [`Self::release`].
    pub(crate) fn add_service(&self, name: &str) -> Result<(), (PathBuf, io::Error)> {
        if let Some(log) = self.service(name) {
            if matches!(*log.file.locked(), FileState::None) {
                return self.open_file(name, &log);
            }
            return Ok(());
        }
        let log = ServiceLog::new(name);
        let result = self.open_file(name, &log);
        self.services.locked().insert(name.to_owned(), Arc::new(log));
        result
    }

    pub(crate) fn config(&self) -> &LogConfig {
        &self.config
    }

    /// The path of `service`'s log file, if logs go to files.
    pub(crate) fn file_path(&self, service: &str) -> Option<PathBuf> {
        self.config.dir.as_ref().map(|dir| dir.join(format!("{service}.log")))
    }

    /// The log file at `path`, rotated as this store's config says.
    fn open_log(&self, path: &std::path::Path) -> io::Result<LogFile> {
        let config = &self.config;
        LogFile::open(path.to_owned(), config.max_file_bytes, config.keep_files)
    }

    /// Opens `log`'s file (of service `name`), when logs go to files; an
    /// error names the file.
    fn open_file(&self, name: &str, log: &ServiceLog) -> Result<(), (PathBuf, io::Error)> {
        if let Some(path) = self.file_path(name) {
            let file = self.open_log(&path).map_err(|e| (path, e))?;
            *log.file.locked() = FileState::Open(file);
        }
        Ok(())
    }

    /// Opens the log files; an error names the file that failed.
    pub(crate) fn open_files(&self) -> Result<(), (PathBuf, io::Error)> {
        for (name, log) in &self.all() {
            self.open_file(name, log)?;
        }
        Ok(())
    }

    /// Records where every service's log file stands at the pod's start in
    /// [`MARK_FILE`], so that `logs --since-reload` prints what comes after
    /// (a reload's mark is written by the engine). Each position is taken
    /// under its file's lock: a line is before the mark or after it, never
    /// half. Returns what to tell people when the file could not be
    /// written; nothing is written when logs stay in memory.
    pub(crate) fn mark(&self) -> Option<String> {
        let taken = self.mark_now()?;
        crate::fs::write_atomic_unsynced(&taken.path, &taken.mark.encode())
            .err()
            .map(|e| mark_failed(&taken.path, &e.to_string()))
    }

    /// What [`LogStore::mark`] writes, and where: every position taken now,
    /// for a caller that writes it elsewhere (the engine's background
    /// writer), or later (a reload whose services were stopped ahead of
    /// it names its files once its burst is over). `None` when logs stay
    /// in memory. A reload names itself in it ([`Mark::name`]).
    pub(crate) fn mark_now(&self) -> Option<TakenMark> {
        let dir = self.config.dir.as_ref()?;
        let logs = self
            .all()
            .iter()
            .filter_map(|(name, log)| match &*log.file.locked() {
                FileState::Open(file) => {
                    Some((name.clone(), Position { inode: file.inode, offset: file.size }))
                }
                FileState::None | FileState::Failed { .. } => None,
            })
            .collect();
        let mark = Mark {
            at_ms: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            reload: false,
            files: Vec::new(),
            logs,
        };
        Some(TakenMark { path: dir.join(MARK_FILE), mark })
    }

    /// Flushes every log file.
    pub(crate) fn flush(&self) {
        for (name, log) in &self.all() {
            let mut file = log.file.locked();
            if let FileState::Open(f) = &mut *file
                && let Err(e) = f.flush()
            {
                let message = file.fail(&e, 0, self.reopen_every);
                drop(file);
                self.notice(name, message);
            }
        }
    }

    /// Writes `texts` to `service`'s log file, reopening a failed one once
    /// [`REOPEN_EVERY`] has passed. Returns what people should be told (the
    /// first failure with its cause, and the resumption with the gap).
    fn write_file(&self, log: &ServiceLog, texts: &[String]) -> Option<String> {
        let mut file = log.file.locked();
        let mut resumed = None;
        if let FileState::Failed { path, cause, missing, retry_at } = &mut *file {
            let gap = format!("{missing} lines are missing here ({cause})");
            // Flushed here: a file that opens but still cannot take a line
            // (the disk is still full) is no resumption.
            let reopened = (Instant::now() >= *retry_at).then(|| {
                *retry_at = Instant::now() + self.reopen_every;
                let mut f = self.open_log(path)?;
                f.write_line(format!("[omnidev] {gap}").as_bytes())?;
                f.flush().map(|()| f)
            });
            let Some(Ok(f)) = reopened else {
                *missing += texts.len() as u64;
                return None;
            };
            resumed = Some(format!(
                "logging to {} resumed; {missing} lines are missing from it ({cause})",
                path.display()
            ));
            *file = FileState::Open(f);
        }
        match write_all(&mut file, texts) {
            Ok(()) => resumed,
            Err(e) => Some(file.fail(&e, texts.len(), self.reopen_every)),
        }
    }

    /// Tells people about `service`'s log file, in order with its lines.
    fn notice(&self, service: &str, message: String) {
        let notice = crate::event::EventKind::Notice { message };
        self.history.push_event(&Event::now(Some(service), notice));
    }

    /// The lines and events kept for readers with a cursor.
    pub(crate) fn history(&self) -> &History {
        &self.history
    }

    /// Lines recorded for `service` so far.
    pub(crate) fn line_count(&self, service: &str) -> u64 {
        self.service(service).map_or(0, |l| l.lines.load(Ordering::Relaxed))
    }

    /// Lines of `service` recorded from now on are shown to `watch` (the
    /// previous run's watch, if any, is dropped).
    pub(crate) fn watch_lines(&self, service: &str, watch: Option<Arc<crate::probe::LineWatch>>) {
        if let Some(log) = self.service(service) {
            *log.watch.locked() = watch;
        }
    }

    /// `text` as `log`'s next line, numbered now (under `order`).
    fn line(&self, log: &ServiceLog, stream: Stream, text: String, at: SystemTime) -> LogLine {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        LogLine { service: log.name.clone(), stream, text, seq, at }
    }

    /// Records a batch of lines of `service`, leaving `texts` empty; split
    /// by a [`LineSplitter`], `cuts` names the pieces that do not end their
    /// line.
    pub(crate) fn push_batch(
        &self,
        service: &str,
        stream: Stream,
        texts: &mut Vec<String>,
        cuts: &[usize],
    ) {
        self.push_batch_reusing(service, stream, texts, cuts, &mut Vec::new());
    }

    /// [`LogStore::push_batch`], handing the texts of the lines whose
    /// memory the new ones took to `texts_back` (a splitter's spares).
    pub(crate) fn push_batch_reusing(
        &self,
        service: &str,
        stream: Stream,
        texts: &mut Vec<String>,
        cuts: &[usize],
        texts_back: &mut Vec<String>,
    ) {
        if texts.is_empty() {
            return;
        }
        let Some(log) = self.service(service) else {
            texts.clear();
            return;
        };
        // A full disk must not stop the service: its lines reach the
        // history and the front-ends; the file is reopened later.
        if let Some(message) = self.write_file(&log, texts) {
            self.notice(service, message);
        }
        log.lines.fetch_add(texts.len() as u64, Ordering::Relaxed);
        if let Some(watch) = log.watch.locked().as_ref() {
            watch.offer(stream, texts, cuts);
        }
        let _order = self.order.locked();
        let at = SystemTime::now();
        // Published in order, so every reader sees lines in number order.
        self.history.push_each(texts.drain(..), |text, spare| {
            fill(spare, self.line(&log, stream, text, at), texts_back)
        });
    }

    /// Holds `text`, the unfinished line of `service`'s `stream` as it
    /// stands, in the history for its followers
    /// ([`crate::EventKind::PartialLine`]): the files, the kept lines and
    /// the log probe get the line once it is finished (or its output
    /// ends), so nothing is recorded twice.
    pub(crate) fn push_partial(&self, service: &str, stream: Stream, text: String) {
        let Some(log) = self.service(service) else {
            return;
        };
        // Numbered and sent in order, like every line.
        let _order = self.order.locked();
        let line = self.line(&log, stream, text, SystemTime::now());
        self.history.push_partial(Arc::new(line));
    }

    /// Lets go of what the log of a service removed from the pod holds:
    /// its file (and the handle on its directory) is closed; the files on
    /// disk stay for `omnidev logs`.
    pub(crate) fn release(&self, service: &str) {
        if let Some(log) = self.service(service) {
            *log.file.locked() = FileState::None;
        }
    }
}

#[cfg(test)]
mod tests {
    impl super::LogStore {
        /// The texts of `service`'s lines the history keeps.
        pub(crate) fn kept_lines(&self, service: &str) -> Vec<String> {
            let history = self.history();
            let read = history.read(
                &mut history.cursor(false, false),
                usize::MAX,
                false,
                |kept| matches!(kept, crate::history::Kept::Line(l) if *l.service == *service),
            );
            read.kept
                .iter()
                .filter_map(|kept| match kept {
                    crate::history::Kept::Line(line) => Some(line.text.clone()),
                    _ => None,
                })
                .collect()
        }
    }

    use std::io::{BufWriter, Write};
    use std::os::unix::fs::MetadataExt;

    use super::*;

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

    fn notices(events: &mut crate::history::Follower) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(event) = events.try_recv() {
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
        let store = LogStore::new(config, ["svc", "idle"], Arc::default());
        store.open_files().expect("open");
        let batch = |texts: &[&str]| texts.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
        store.push_batch("svc", Stream::Stdout, &mut batch(&["before 1", "before 2"]), &[]);
        // As the engine writes a reload's mark.
        let mut taken = store.mark_now().expect("a mark");
        taken.mark.name(Some(&crate::Changes::of(["app/b.py", "app/a.py"])));
        crate::fs::write_atomic_unsynced(&taken.path, &taken.mark.encode()).expect("written");
        store.push_batch("svc", Stream::Stderr, &mut batch(&["after 1", "after 2"]), &[]);

        let mark = Mark::read(dir.path()).expect("the mark");
        assert!(mark.reload);
        assert_eq!(mark.files, ["app/a.py", "app/b.py"]);
        assert_eq!(mark.logs["idle"].offset, 0);
        // `after 2` did not fit: the marked file is now `svc.log.1`.
        let log = dir.path().join("svc.log");
        let rotated = rotated_path(&log, 1);
        let position = mark.logs["svc"];
        assert_eq!(std::fs::metadata(&rotated).expect("rotated").ino(), position.inode);
        let text = std::fs::read_to_string(&rotated).expect("read");
        assert_eq!(&text[usize::try_from(position.offset).expect("small")..], "after 1\n");
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
        let history: Arc<History> = Arc::default();
        let mut events = history.follow();
        let config = LogConfig { dir: Some(dir.path().to_path_buf()), ..LogConfig::default() };
        let mut store = LogStore::new(config, ["svc"], history);
        store.reopen_every = Duration::ZERO;
        store.open_files().expect("open");
        let batch = |texts: &[&str]| texts.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
        store.push_batch("svc", Stream::Stdout, &mut batch(&["before"]), &[]);

        // The disk fills up: the next write fails.
        if let FileState::Open(file) = &mut *store.service("svc").expect("svc").file.locked() {
            file.out = BufWriter::new(Box::new(FullDisk));
        }
        // Reopening waits for the next attempt; hold it off for now.
        store.reopen_every = Duration::from_secs(3600);
        store.push_batch("svc", Stream::Stdout, &mut batch(&["lost 1", "lost 2"]), &[]);
        store.push_batch("svc", Stream::Stdout, &mut batch(&["lost 3"]), &[]);
        store.flush();
        let said = notices(&mut events);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("svc: could not write ")
                && said[0].contains("No space left on device"),
            "{said:?}"
        );
        // The lines still reached the history (and every front-end).
        assert_eq!(store.kept_lines("svc"), ["before", "lost 1", "lost 2", "lost 3"]);

        // Space is back: the next line reopens the file.
        if let FileState::Failed { retry_at, .. } =
            &mut *store.service("svc").expect("svc").file.locked()
        {
            *retry_at = Instant::now();
        }
        store.push_batch("svc", Stream::Stdout, &mut batch(&["after"]), &[]);
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
}

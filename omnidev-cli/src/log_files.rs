//! The one reader of the pod's log files, `<pod>/logs/<service>.log` and
//! the rotated `<service>.log.N`: the last lines, those since the last
//! reload (from the mark the supervisor writes), and what was appended
//! since the last read, across rotations and truncations; for `omnidev
//! logs`, `omnidev mcp` and `up --detach`'s failure report.
//!
//! It is bounded by the answer, not the file: the last lines are found by
//! reading back from the end (at most a byte budget), and everything is
//! read and handed on in [`CHUNK`]s, a line longer than [`PIECE`] in
//! pieces, so a 2 GiB log costs what the lines shown cost.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use omnidev_core::logs::{LineSplitter, Mark, Position};
use omnidev_pod::layout::{DETACHED_LOG, LOG_SUFFIX};

use crate::error::Error;

/// Bytes remembered from just before where reading stopped, to notice a
/// file truncated and regrown past that point between two polls.
const TAIL_CHECK: usize = 64;

/// How far past a missing rotated file (`.N` renamed while we look) the
/// search for older ones goes on.
const ROTATED_GAP: usize = 2;

/// Bytes read at a time.
const CHUNK: usize = 64 * 1024;

/// The longest line handed on whole: the writer's own cut
/// ([`omnidev_core::LogConfig::max_line_bytes`]'s default); a longer one,
/// only in a file written by someone else, comes in pieces.
const PIECE: usize = 64 * 1024;

/// What is done with each line read; an error (stdout closed) stops the
/// reading.
pub type Each<'a> = &'a mut dyn FnMut(&LogReader, FileLine) -> Result<(), Error>;

/// How much of the end of a log to read: the last `lines` complete lines,
/// read back from the end at most `bytes` far.
#[derive(Debug, Clone, Copy)]
pub struct Tail {
    /// Lines.
    pub lines: usize,
    /// Bytes read back from the end at most.
    pub bytes: u64,
}

impl Tail {
    /// The last `lines` lines whole (each up to [`PIECE`]).
    pub fn lines(lines: usize) -> Self {
        Self { lines, bytes: (lines as u64).saturating_mul(PIECE as u64 + 1) }
    }
}

/// One log file being read.
pub struct LogReader {
    /// The service.
    pub name: String,
    path: PathBuf,
    /// What its lines are printed after (`name | `, or nothing).
    pub prefix: String,
    file: Option<Open>,
    lines: LineSplitter,
}

/// A complete line read from a log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLine {
    /// The file's modification time when the line was read: the line was
    /// written then or before (the files keep no time per line).
    pub at: SystemTime,
    /// The line, without its line break.
    pub text: String,
}

impl LogReader {
    /// The log of service `name` in `dir`, not opened yet.
    pub fn new(name: &str, dir: &Path, prefix: String) -> Self {
        Self {
            name: name.to_owned(),
            path: dir.join(format!("{name}{LOG_SUFFIX}")),
            prefix,
            file: None,
            lines: LineSplitter::new(PIECE),
        }
    }

    /// Reads `open` from its position to its end, handing each complete
    /// line (or piece of [`PIECE`]) to `each`, split as the supervisor
    /// splits a service's output ([`LineSplitter`]), and keeps it as the
    /// file followed.
    fn read_on(&mut self, mut open: Open, each: Each) -> Result<(), Error> {
        let mut chunk = vec![0u8; CHUNK];
        let mut lines = Vec::new();
        loop {
            let (n, at) = open.read_chunk(&mut chunk);
            if n == 0 {
                break;
            }
            self.lines.feed(&chunk[..n], Instant::now(), &mut lines);
            // Which pieces were cut from one line matters to a log probe
            // only; taken so the splitter does not keep them.
            self.lines.take_cuts();
            for text in lines.drain(..) {
                each(self, FileLine { at, text })?;
            }
        }
        self.file = Some(open);
        Ok(())
    }
}

/// An open log file and how far it has been read.
struct Open {
    file: File,
    inode: u64,
    position: u64,
    /// The last bytes read (up to [`TAIL_CHECK`]).
    tail: Vec<u8>,
}

impl Open {
    /// The log file `path`, opened as every pod file is opened
    /// ([`omnidev_core::fs::open`]: no link followed, no FIFO); `None` when
    /// it does not exist, an error naming it when it cannot be read.
    fn at(path: &Path) -> Result<Option<Self>, Error> {
        let unreadable = |source| Error::LogUnreadable { path: path.to_path_buf(), source };
        let opened = omnidev_core::fs::open(path, omnidev_core::fs::OpenOptions::Read);
        let Some(file) = omnidev_core::fs::found(opened).map_err(unreadable)? else {
            return Ok(None);
        };
        let inode = file.metadata().map_err(unreadable)?.ino();
        Ok(Some(Self { file, inode, position: 0, tail: Vec::new() }))
    }

    fn len(&self) -> u64 {
        self.file.metadata().map_or(0, |m| m.len())
    }

    /// When the file was last written (now, if that cannot be read).
    fn modified(&self) -> SystemTime {
        self.file.metadata().and_then(|meta| meta.modified()).unwrap_or_else(|_| SystemTime::now())
    }

    /// The next bytes from where reading stopped (0 at the end), and the
    /// file's modification time after reading them.
    fn read_chunk(&mut self, chunk: &mut [u8]) -> (usize, SystemTime) {
        let n = self.file.read_at(chunk, self.position).unwrap_or(0);
        self.position += n as u64;
        self.tail.extend_from_slice(&chunk[n.saturating_sub(TAIL_CHECK)..n]);
        let excess = self.tail.len().saturating_sub(TAIL_CHECK);
        self.tail.drain(..excess);
        (n, self.modified())
    }

    /// Whether the file was truncated in place since the last read: it is
    /// shorter than what was read, or the bytes just before where reading
    /// stopped changed (truncated and written again past that point).
    fn truncated(&self) -> bool {
        let Ok(meta) = self.file.metadata() else {
            return false;
        };
        if meta.len() < self.position {
            return true;
        }
        let mut now = vec![0u8; self.tail.len()];
        let from = self.position - self.tail.len() as u64;
        self.file.read_exact_at(&mut now, from).is_ok_and(|()| now != self.tail)
    }
}

/// The log files of `path`, oldest first, the current one last: back to
/// and including the one with inode `back_to` (every file when none has
/// it, or without `back_to`), at most `most`. Files are opened newest
/// first, so a rotation racing with the search shows a file twice
/// (skipped by inode) rather than not at all.
fn log_files(path: &Path, back_to: Option<u64>, most: usize) -> Result<Vec<Open>, Error> {
    let Some(current) = Open::at(path)? else {
        return Ok(Vec::new());
    };
    let mut found = vec![current];
    let mut missing = 0;
    for n in 1.. {
        if found.len() >= most
            || back_to.is_some_and(|inode| found.iter().any(|f| f.inode == inode))
        {
            break;
        }
        let Some(open) = Open::at(&omnidev_core::logs::rotated_path(path, n))? else {
            missing += 1;
            if missing > ROTATED_GAP {
                break;
            }
            continue;
        };
        missing = 0;
        if !found.iter().any(|f| f.inode == open.inode) {
            found.push(open);
        }
    }
    found.reverse();
    Ok(found)
}

/// The last `tail` complete lines of the log `name` in `dir` (of those
/// written since `mark`), as written: for `omnidev mcp`'s `logs` and the
/// lines `up --detach` shows of a failure.
pub fn last_lines(
    dir: &Path,
    name: &str,
    mark: Option<&Mark>,
    tail: Tail,
) -> Result<Vec<String>, Error> {
    let mut lines = Vec::new();
    let mut source = LogReader::new(name, dir, String::new());
    read_back(&mut source, mark, Some(tail), &mut |_, line| {
        lines.push(line.text);
        Ok(())
    })?;
    Ok(lines)
}

/// Hands `each` the lines of `source` to show before following: those
/// since `mark` (the last reload), else those of its current file (and the
/// newest rotated one when `tail` asks for more); the last `tail` of them.
/// Following goes on from exactly where this stopped; an unfinished last
/// line is completed by what comes next.
pub fn read_back(
    source: &mut LogReader,
    mark: Option<&Mark>,
    tail: Option<Tail>,
    each: Each,
) -> Result<(), Error> {
    let mut files = match mark {
        Some(mark) => since_mark(source, mark.logs.get(&source.name), mark.at())?,
        None => log_files(&source.path, None, if tail.is_some() { 2 } else { 1 })?,
    };
    if let Some(tail) = tail {
        start_of_tail(&mut files, tail);
    }
    for open in files {
        source.read_on(open, each)?;
    }
    Ok(())
}

/// Moves the starts of `files` (read from their positions to their ends,
/// in order) to where the last `tail.lines` complete lines begin, reading
/// back at most `tail.bytes`; the files wholly before it are dropped.
fn start_of_tail(files: &mut Vec<Open>, tail: Tail) {
    let mut newlines = 0;
    let mut budget = tail.bytes;
    let mut chunk = vec![0u8; CHUNK];
    let mut cut = None;
    'files: for (i, open) in files.iter().enumerate().rev() {
        let mut end = open.len();
        while end > open.position {
            let n = (end - open.position).min(CHUNK as u64) as usize;
            let from = end - n as u64;
            if open.file.read_exact_at(&mut chunk[..n], from).is_err() {
                break;
            }
            for (at, byte) in chunk[..n].iter().enumerate().rev() {
                newlines += usize::from(*byte == b'\n');
                if newlines > tail.lines || budget == 0 {
                    cut = Some((i, from + at as u64 + 1));
                    break 'files;
                }
                budget -= 1;
            }
            end = from;
        }
    }
    if let Some((i, position)) = cut {
        files.drain(..i);
        files[0].position = position;
    }
}

/// The services of the pod in `pod_dir` to read: those named (each
/// checked; a service that runs as replicas stands for them all), or every
/// one with a log file.
///
/// Which name is a service is what the pod's last run says (`state.json`):
/// a service that went from one copy to replicas keeps its old log beside
/// theirs, and `web` is then `web.1`, `web.2`…, not the old file. Without a
/// record, the log files say.
pub fn selected(pod_dir: &Path, named: &[String]) -> miette::Result<Vec<String>> {
    let dir = omnidev_pod::Pod::at(pod_dir).logs_dir();
    if !dir.is_dir() {
        return Err(Error::NoLogs { dir }.into());
    }
    let available = services_with_logs(&dir)?;
    if named.is_empty() {
        return Ok(available);
    }
    let last_run = omnidev_core::read_state(&omnidev_pod::Pod::at(pod_dir).state_file())
        .ok()
        .flatten()
        .map(|state| state.services.into_keys().collect::<Vec<_>>())
        .filter(|services| !services.is_empty());
    let services = last_run.as_ref().unwrap_or(&available);
    let mut chosen: Vec<String> = Vec::new();
    for name in omnidev_pod::names::expand(named, services) {
        omnidev_pod::names::check_service(&name).map_err(Error::from)?;
        // A replica of the last run with no output yet has no file.
        if !available.contains(&name) && !services.contains(&name) {
            return Err(Error::NoLog {
                service: name,
                dir,
                known: if available.is_empty() {
                    "none yet (start the pod with `omnidev up`)".to_owned()
                } else {
                    available.join(", ")
                },
            }
            .into());
        }
        if available.contains(&name) && !chosen.contains(&name) {
            chosen.push(name);
        }
    }
    if chosen.is_empty() {
        return Err(
            Error::NoLog { service: named.join(", "), dir, known: available.join(", ") }.into()
        );
    }
    Ok(chosen)
}

/// The pod's record of where its last reload (or start) left the log files.
pub fn read_mark(dir: &Path) -> Result<Mark, Error> {
    Mark::read(dir).map_err(|error| {
        let omnidev_core::Error::Read { path, source } = error else {
            return Error::Core(error);
        };
        Error::NoMark {
            reason: if source.kind() == std::io::ErrorKind::NotFound {
                "no such file".to_owned()
            } else {
                source.to_string()
            },
            path,
        }
    })
}

/// Services that have a log file, sorted by name (the detached pod's own
/// output, `omnidev.log`, is not a service). A log that is not a regular
/// file (a link, a FIFO planted there) is an error naming it, never a
/// service without a log.
pub fn services_with_logs(dir: &Path) -> Result<Vec<String>, Error> {
    let unreadable = |path: PathBuf, source| Error::LogUnreadable { path, source };
    let entries = std::fs::read_dir(dir).map_err(|e| unreadable(dir.to_path_buf(), e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| unreadable(dir.to_path_buf(), e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let Some(service) = name.strip_suffix(LOG_SUFFIX) else {
            continue;
        };
        if name == DETACHED_LOG || !omnidev_pod::names::is_service(service) {
            continue;
        }
        if !entry.file_type().is_ok_and(|kind| kind.is_file()) {
            // Refused by the open (a link, a FIFO) with its reason.
            Open::at(&entry.path())?;
            let source = std::io::Error::other("it is not a regular file");
            return Err(unreadable(entry.path(), source));
        }
        names.push(service.to_owned());
    }
    names.sort();
    Ok(names)
}

/// The files of `source` holding lines written after `position` (its
/// file and offset when the pod last reloaded), positioned there, across
/// every rotation since. Without a position (the service had no open log
/// file then), or when its file is gone (rotated out of the kept ones),
/// every file last written after the mark (`at`) counts; following goes on
/// from the end of the current file.
fn since_mark(
    source: &mut LogReader,
    position: Option<&Position>,
    at: SystemTime,
) -> Result<Vec<Open>, Error> {
    let files = log_files(&source.path, position.map(|p| p.inode), usize::MAX)?;
    let found = position.filter(|p| files.first().is_some_and(|f| f.inode == p.inode));
    let mut kept = Vec::new();
    for mut file in files {
        if let Some(p) = found.filter(|p| p.inode == file.inode) {
            // An offset past the end: truncated since, all of it is newer.
            file.position = if p.offset <= file.len() { p.offset } else { 0 };
        } else if found.is_none() && file.modified() < at {
            // Only to follow on from its end.
            file.position = file.len();
            source.file = Some(file);
            continue;
        }
        kept.push(file);
    }
    Ok(kept)
}

/// Hands `each` the lines written since the last call: the rest of the
/// open file, then every file rotated in after it, in order; a file
/// truncated in place is read again from its start. A file that cannot be
/// read (swapped for a link while followed) gives nothing.
///
/// Whether the open file was rotated away is looked at before it is read:
/// the writer flushes a file before it renames it (up to 64 KiB of lines
/// can wait in its buffer), so a file seen replaced is whole, and read to
/// its end nothing of it is lost; one rotated after the look is finished
/// at the next call.
pub fn read_new(source: &mut LogReader, each: Each) -> Result<(), Error> {
    let replaced = std::fs::symlink_metadata(&source.path)
        .is_ok_and(|meta| source.file.as_ref().is_none_or(|open| open.inode != meta.ino()));
    if let Some(mut open) = source.file.take() {
        if open.truncated() {
            open.position = 0;
            open.tail.clear();
            source.lines = LineSplitter::new(PIECE);
        }
        source.read_on(open, each)?;
    }
    if replaced {
        let known = source.file.as_ref().map(|open| open.inode);
        for open in newer_files(&source.path, known) {
            source.read_on(open, each)?;
        }
    }
    Ok(())
}

/// The files written after the one with inode `known`, oldest first, the
/// current `path` last: after a rotation (or several between two polls),
/// `known` is now `path.N`, and `path.N-1` … `path.1` and `path` are newer.
/// Without a `known` file (nothing open yet), only the current one.
fn newer_files(path: &Path, known: Option<u64>) -> Vec<Open> {
    let Some(known) = known else {
        return Open::at(path).ok().flatten().into_iter().collect();
    };
    let mut files = log_files(path, Some(known), usize::MAX).unwrap_or_default();
    if files.first().is_some_and(|f| f.inode == known) {
        files.remove(0);
    }
    files
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;
    use std::time::Duration;

    use super::*;

    fn source(path: &Path) -> LogReader {
        LogReader {
            name: "svc".into(),
            path: path.to_path_buf(),
            prefix: "svc | ".into(),
            file: None,
            lines: LineSplitter::new(PIECE),
        }
    }

    /// What `logs -f` prints at its next poll (the text form).
    fn poll(src: &mut LogReader, out: &mut String) {
        read_new(src, &mut |src, line| {
            out.push_str(&src.prefix);
            out.push_str(&line.text);
            out.push('\n');
            Ok(())
        })
        .expect("read");
    }

    /// [`read_back`] into a list.
    pub(crate) fn collect(
        source: &mut LogReader,
        mark: Option<&Mark>,
        tail: Option<Tail>,
    ) -> Result<Vec<FileLine>, Error> {
        let mut lines = Vec::new();
        read_back(source, mark, tail, &mut |_, line| {
            lines.push(line);
            Ok(())
        })?;
        Ok(lines)
    }

    /// What is shown before following, without a mark.
    fn at_end(src: &mut LogReader, tail: Option<usize>) -> Vec<FileLine> {
        collect(src, None, tail.map(Tail::lines)).expect("read")
    }

    /// The lines since `position` (a mark at `at`).
    fn read_since(
        src: &mut LogReader,
        position: Option<&Position>,
        at: SystemTime,
    ) -> Vec<FileLine> {
        let mut lines = Vec::new();
        for open in since_mark(src, position, at).expect("files") {
            src.read_on(open, &mut |_, line| {
                lines.push(line);
                Ok(())
            })
            .expect("read");
        }
        lines
    }

    fn texts(lines: &[FileLine]) -> Vec<&str> {
        lines.iter().map(|l| l.text.as_str()).collect()
    }

    fn set_modified(path: &Path, at: SystemTime) {
        File::options().write(true).open(path).and_then(|f| f.set_modified(at)).expect("set mtime");
    }

    fn position(path: &Path, offset: u64) -> Position {
        Position { inode: std::fs::metadata(path).expect("stat").ino(), offset }
    }

    /// Rotates like the supervisor's log writer: `.N` → `.N+1`, …, the
    /// file → `.1`, keeping `keep`.
    fn rotate(path: &Path, keep: usize) {
        use omnidev_core::logs::rotated_path;
        for n in (1..keep).rev() {
            let from = rotated_path(path, n);
            if from.exists() {
                std::fs::rename(&from, rotated_path(path, n + 1)).expect("rename");
            }
        }
        std::fs::rename(path, rotated_path(path, 1)).expect("rename");
    }

    /// `logs -f` beside core's own rotating writer, which holds up to a
    /// file's worth of lines in its buffer and flushes them only as it
    /// rotates: a follower polling as fast as it can, while 20,000 lines
    /// go through 28 files, gets every line once, in order (a file
    /// rotated away between reading it to its end and looking for newer
    /// ones used to lose what the rotation flushed into it).
    #[test]
    fn follow_beside_the_rotating_writer_loses_no_line() {
        use std::io::Write as _;
        const LINES: u64 = 20_000;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        let mut log =
            omnidev_core::logs::RotatingLog::open(path.clone(), 64 * 1024, 100).expect("open");
        // Following from the empty file, as `logs -f` follows from where
        // its read back ended.
        let mut src = source(&path);
        read_new(&mut src, &mut |_, _| Ok(())).expect("open");
        let writer = std::thread::spawn(move || {
            for i in 0..LINES {
                writeln!(log, "{i:09} {}", "x".repeat(80)).expect("write");
            }
            log.flush().expect("flush");
        });
        let mut expected = 0u64;
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while expected < LINES && std::time::Instant::now() < deadline {
            read_new(&mut src, &mut |_, line| {
                let number: u64 = line.text[..9].parse().expect("a numbered line");
                assert_eq!(number, expected, "line {number} where {expected} was due");
                expected += 1;
                Ok(())
            })
            .expect("read");
        }
        writer.join().expect("writer");
        assert_eq!(expected, LINES);
    }

    #[test]
    fn follow_reads_every_line_once_across_two_rotations_between_polls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        let mut src = source(&path);
        let mut out = String::new();
        append(&path, "1\n");
        poll(&mut src, &mut out);
        append(&path, "2\n");
        rotate(&path, 3);
        append(&path, "3\n");
        rotate(&path, 3);
        append(&path, "4\n");
        poll(&mut src, &mut out);
        assert_eq!(out, "svc | 1\nsvc | 2\nsvc | 3\nsvc | 4\n");
        // Three more before the next poll: the file read last is now `.3`.
        for n in 5..8 {
            append(&path, &format!("{n}\n"));
            rotate(&path, 3);
        }
        append(&path, "8\n");
        out.clear();
        poll(&mut src, &mut out);
        assert_eq!(out, "svc | 5\nsvc | 6\nsvc | 7\nsvc | 8\n");
        out.clear();
        poll(&mut src, &mut out);
        assert_eq!(out, "", "nothing twice");
    }

    #[test]
    fn follow_notices_a_truncate_and_regrow_between_polls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        let mut src = source(&path);
        let mut out = String::new();
        append(&path, "first line\nsecond line\n");
        poll(&mut src, &mut out);
        // Truncated in place and written past the old length before the
        // next poll: the file is not shorter, but it is not the same.
        std::fs::OpenOptions::new().write(true).truncate(true).open(&path).expect("truncate");
        append(&path, "a new first line\nand a second one\nand more\n");
        out.clear();
        poll(&mut src, &mut out);
        assert_eq!(out, "svc | a new first line\nsvc | and a second one\nsvc | and more\n");
    }

    fn append(path: &Path, text: &str) {
        let mut file =
            std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open");
        file.write_all(text.as_bytes()).expect("write");
    }

    #[test]
    fn follow_reads_across_rotation_truncation_and_partial_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        let mut src = source(&path);
        let mut out = String::new();
        poll(&mut src, &mut out);
        assert_eq!(out, "", "no file yet");

        append(&path, "one\ntw");
        poll(&mut src, &mut out);
        assert_eq!(out, "svc | one\n");
        append(&path, "o\n");
        poll(&mut src, &mut out);
        assert_eq!(out, "svc | one\nsvc | two\n");

        // Rotation: the rest of the old file, then the new one.
        append(&path, "three\n");
        std::fs::rename(&path, omnidev_core::logs::rotated_path(&path, 1)).expect("rename");
        append(&path, "four\n");
        out.clear();
        poll(&mut src, &mut out);
        assert_eq!(out, "svc | three\nsvc | four\n");

        // Truncation in place (seen as a file shorter than what was read):
        // read again from the start.
        std::fs::write(&path, "").expect("truncate");
        append(&path, "5\n");
        out.clear();
        poll(&mut src, &mut out);
        assert_eq!(out, "svc | 5\n");
    }

    /// A file written by someone else reads as the supervisor would have
    /// split its output: a redrawn line is its last redraw, a line longer
    /// than a piece comes in pieces cut between characters.
    #[test]
    fn a_foreign_file_splits_as_the_supervisor_splits_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        let long = "é".repeat(PIECE);
        append(&path, &format!("10%\r50%\r100%\r\nwindows\r\n{long}\n"));
        let lines = at_end(&mut source(&path), None);
        assert_eq!(texts(&lines[..2]), ["100%", "windows"]);
        let pieces = &lines[2..];
        assert!(pieces.len() >= 2 && pieces.iter().all(|p| p.text.len() <= PIECE));
        assert_eq!(texts(pieces).concat(), long, "cut between characters");
    }

    #[test]
    fn tail_reaches_into_the_rotated_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        std::fs::write(omnidev_core::logs::rotated_path(&path, 1), "a\nb\nc\n").expect("write");
        std::fs::write(&path, "d\ne\n").expect("write");
        // The last three lines: one from the rotated file, then the current.
        let lines = at_end(&mut source(&path), Some(3));
        assert_eq!(texts(&lines), ["c", "d", "e"]);
        assert_eq!(texts(&at_end(&mut source(&path), None)), ["d", "e"]);
        assert_eq!(texts(&at_end(&mut source(&path), Some(1))), ["e"]);
    }

    /// Files many times the reader's byte budget: the last lines come
    /// right across the rotation boundary, and no more is read back than
    /// the budget (a tail that asks for more lines gets what fits).
    #[test]
    fn a_tail_of_logs_larger_than_its_budget_crosses_the_rotation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        let line = |n: usize| format!("{n:07} {}", "x".repeat(92));
        let old: String = (0..40_000).map(|n| line(n) + "\n").collect();
        std::fs::write(omnidev_core::logs::rotated_path(&path, 1), old).expect("write");
        std::fs::write(&path, format!("{}\n{}\n", line(40_000), line(40_001))).expect("write");
        let tail = |lines: usize| {
            let budget = Tail { lines, bytes: 64 * 1024 };
            collect(&mut source(&path), None, Some(budget)).expect("read")
        };
        let last = tail(4);
        assert_eq!(texts(&last), [line(39_998), line(39_999), line(40_000), line(40_001)]);
        // 4 MB behind it, 64 KiB read back: about 650 lines of 100 bytes.
        let most = tail(100_000);
        assert!(most.len() < 700 && most.len() > 600, "{}", most.len());
        assert_eq!(most.last().map(|l| l.text.as_str()), Some(line(40_001).as_str()));
    }

    #[test]
    fn since_a_mark_reads_from_its_offset_across_rotations_then_follows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        append(&path, "old 1\nold 2\n");
        let mark = position(&path, 12);
        append(&path, "new 1\n");
        rotate(&path, 3);
        append(&path, "new 2\n");
        rotate(&path, 3);
        append(&path, "new 3\npart");
        let mut src = source(&path);
        let lines = read_since(&mut src, Some(&mark), SystemTime::now());
        assert_eq!(texts(&lines), ["new 1", "new 2", "new 3"]);
        // Following goes on where that stopped, the unfinished line too.
        append(&path, "ial\n");
        let mut out = String::new();
        poll(&mut src, &mut out);
        assert_eq!(out, "svc | partial\n");

        // The same file in place: from the offset.
        let fresh = dir.path().join("fresh.log");
        append(&fresh, "before\nafter\n");
        let mark = position(&fresh, 7);
        let lines = read_since(&mut source(&fresh), Some(&mark), SystemTime::now());
        assert_eq!(texts(&lines), ["after"]);
        // Truncated since (shorter than the offset): all of it is newer.
        std::fs::write(&fresh, "x\n").expect("truncate");
        let lines = read_since(&mut source(&fresh), Some(&mark), SystemTime::now());
        assert_eq!(texts(&lines), ["x"]);
    }

    #[test]
    fn without_its_marked_file_only_files_written_after_the_mark_count() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        let mark_at = SystemTime::now() - Duration::from_secs(60);
        append(&path, "long ago\n");
        set_modified(&path, mark_at - Duration::from_secs(60));
        rotate(&path, 3);
        append(&path, "lately\n");
        rotate(&path, 3);
        append(&path, "now\n");
        // The marked file (an inode no file has) was rotated away.
        let gone = Position { inode: u64::MAX, offset: 3 };
        let mut src = source(&path);
        let lines = read_since(&mut src, Some(&gone), mark_at);
        assert_eq!(texts(&lines), ["lately", "now"]);
        // No position at all (the service had no log file then): the same.
        let lines = read_since(&mut source(&path), None, mark_at);
        assert_eq!(texts(&lines), ["lately", "now"]);
        // A current file older than the mark: nothing, then what comes.
        set_modified(&path, mark_at - Duration::from_secs(1));
        let mut src = source(&path);
        let lines = read_since(&mut src, None, SystemTime::now());
        assert!(lines.is_empty(), "{:?}", texts(&lines));
        append(&path, "later\n");
        let mut out = String::new();
        poll(&mut src, &mut out);
        assert_eq!(out, "svc | later\n");
    }

    #[test]
    fn a_link_or_fifo_planted_as_a_log_is_never_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).expect("mkdir");
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "not a log\n").expect("write");
        std::os::unix::fs::symlink(&secret, logs.join("linked.log")).expect("symlink");
        std::os::unix::fs::symlink("/dev/zero", logs.join("zero.log")).expect("symlink");
        nix::unistd::mkfifo(&logs.join("fifo.log"), nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        std::fs::write(logs.join("real.log"), "a line\n").expect("write");

        for name in ["linked", "zero", "fifo"] {
            let error = selected(dir.path(), &[name.to_owned()]).expect_err(name);
            let Some(Error::LogUnreadable { path, .. }) = error.downcast_ref::<Error>() else {
                panic!("{name}: {error:?}");
            };
            // Every one is an error naming it, never a service without logs.
            assert!(path.starts_with(&logs) && path.extension().is_some(), "{path:?}");
            // Read as `logs -f` and `mcp` would: an error naming it, at once.
            let mut src = source(&logs.join(format!("{name}.log")));
            let Err(Error::LogUnreadable { path, .. }) =
                collect(&mut src, None, Some(Tail::lines(10)))
            else {
                panic!("{name} was read");
            };
            assert_eq!(path, logs.join(format!("{name}.log")));
            let mut out = String::new();
            poll(&mut src, &mut out);
            assert_eq!(out, "", "{name}");
            std::fs::remove_file(logs.join(format!("{name}.log"))).expect("rm");
        }
        assert_eq!(services_with_logs(&logs).expect("listed"), ["real"]);
        // The same once the file is there but then swapped for a link.
        let mut src = source(&logs.join("real.log"));
        assert_eq!(texts(&at_end(&mut src, None)), ["a line"]);
        std::fs::remove_file(logs.join("real.log")).expect("rm");
        std::os::unix::fs::symlink(&secret, logs.join("real.log")).expect("symlink");
        let mut out = String::new();
        poll(&mut src, &mut out);
        assert_eq!(out, "");
    }
}

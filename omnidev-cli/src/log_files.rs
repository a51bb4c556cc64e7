//! Reading the pod's log files, `<pod>/logs/<service>.log` and the
//! rotated `<service>.log.N`: the last lines, those since the last reload
//! (from the mark the supervisor writes), and what was appended since the
//! last read, across rotations and truncations; for `omnidev logs` and
//! `omnidev mcp`.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use omnidev_core::logs::{Mark, Position};
use omnidev_pod::layout::{DETACHED_LOG, LOG_SUFFIX};

use crate::error::Error;

/// Bytes remembered from just before where reading stopped, to notice a
/// file truncated and regrown past that point between two polls.
const TAIL_CHECK: usize = 64;

/// How far past a missing rotated file (`.N` renamed while we look) the
/// search for older ones goes on.
const ROTATED_GAP: usize = 2;

/// One log file being read.
pub struct Source {
    /// The service.
    pub name: String,
    path: PathBuf,
    /// What its lines are printed after (`name | `, or nothing).
    pub prefix: String,
    file: Option<Open>,
    partial: Vec<u8>,
}

/// A complete line read from a log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The file's modification time when the line was read: the line was
    /// written then or before (the files keep no time per line).
    pub at: SystemTime,
    /// The line, without its line break.
    pub text: String,
}

impl Source {
    /// The log of service `name` in `dir`, not opened yet.
    pub fn new(name: &str, dir: &Path, prefix: String) -> Self {
        Self {
            name: name.to_owned(),
            path: dir.join(format!("{name}{LOG_SUFFIX}")),
            prefix,
            file: None,
            partial: Vec::new(),
        }
    }

    /// Adds `bytes`, read from a file last modified at `at`, to the
    /// unfinished line and moves the complete lines to `out`.
    fn take_lines(&mut self, bytes: &[u8], at: SystemTime, out: &mut Vec<Line>) {
        self.partial.extend_from_slice(bytes);
        if let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') {
            let complete: Vec<u8> = self.partial.drain(..=end).collect();
            out.extend(String::from_utf8_lossy(&complete).lines().map(|text| Line {
                at,
                text: text.to_owned(),
            }));
        }
    }
}

/// Opens the log file `path` for reading as every pod file is opened
/// ([`omnidev_core::fs::Dir::open_file`]): a symbolic link planted in its
/// place is never followed, and a FIFO or a device there (which would
/// block the open, or never end) is refused.
fn open_log(path: &Path) -> std::io::Result<File> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::ErrorKind::NotFound.into());
    };
    omnidev_core::fs::Dir::open(dir)?
        .open_file(Path::new(name), omnidev_core::fs::OpenOptions::Read)
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
    /// The log file `path`, opened as [`open_log`] does.
    fn at(path: &Path) -> Option<Self> {
        let file = open_log(path).ok()?;
        let inode = file.metadata().ok()?.ino();
        Some(Self {
            file,
            inode,
            position: 0,
            tail: Vec::new(),
        })
    }

    /// When the file was last written (now, if that cannot be read).
    fn modified(&self) -> SystemTime {
        self.file
            .metadata()
            .and_then(|meta| meta.modified())
            .unwrap_or_else(|_| SystemTime::now())
    }

    /// What was written since the last read, and the file's modification
    /// time after reading it.
    fn read_new(&mut self) -> (Vec<u8>, SystemTime) {
        let mut bytes = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        while let Ok(n) = self.file.read_at(&mut chunk, self.position) {
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&chunk[..n]);
            self.position += n as u64;
        }
        if bytes.len() >= TAIL_CHECK {
            self.tail = bytes[bytes.len() - TAIL_CHECK..].to_vec();
        } else {
            self.tail.extend_from_slice(&bytes);
            let excess = self.tail.len().saturating_sub(TAIL_CHECK);
            self.tail.drain(..excess);
        }
        (bytes, self.modified())
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
        self.file
            .read_exact_at(&mut now, from)
            .is_ok_and(|()| now != self.tail)
    }
}

/// The log files of `path`, oldest first, the current one last: back to
/// and including the one with inode `back_to` (every file when none has
/// it, or without `back_to`). Files are opened newest first, so a rotation
/// racing with the search shows a file twice (skipped by inode) rather
/// than not at all.
fn log_files(path: &Path, back_to: Option<u64>) -> Vec<Open> {
    let Some(current) = Open::at(path) else {
        return Vec::new();
    };
    let mut found = vec![current];
    let mut missing = 0;
    for n in 1.. {
        if back_to.is_some_and(|inode| found.iter().any(|f| f.inode == inode)) {
            break;
        }
        let Some(open) = Open::at(&omnidev_core::logs::rotated_path(path, n)) else {
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
    found
}

/// The files written after the one with inode `known`, oldest first, the
/// current `path` last: after a rotation (or several between two polls),
/// `known` is now `path.N`, and `path.N-1` … `path.1` and `path` are newer.
/// Without a `known` file (nothing open yet), only the current one.
fn newer_files(path: &Path, known: Option<u64>) -> Vec<Open> {
    let Some(known) = known else {
        return Open::at(path).into_iter().collect();
    };
    let mut files = log_files(path, Some(known));
    if files.first().is_some_and(|f| f.inode == known) {
        files.remove(0);
    }
    files
}

/// The last `tail` complete lines of `service`'s log (of those written
/// since the pod's last reload, with `since_reload`), as written: what
/// `omnidev logs SERVICE -n N [--since-reload]` reads (for `omnidev mcp`).
pub fn last_lines(
    pod_dir: &Path,
    service: &str,
    tail: usize,
    since_reload: bool,
) -> miette::Result<Vec<String>> {
    let dir = omnidev_pod::Pod::at(pod_dir).logs_dir();
    selected(&dir, &[service.to_owned()])?;
    let mark = if since_reload {
        Some(read_mark(&dir)?)
    } else {
        None
    };
    let mut source = Source::new(service, &dir, String::new());
    Ok(read_back(&mut source, mark.as_ref(), Some(tail))
        .into_iter()
        .map(|line| line.text)
        .collect())
}

/// The lines of `source` to show before following: those since `mark`
/// (the last reload), else those of its current file (and the newest
/// rotated one when `tail` asks for more); the last `tail` of them.
pub fn read_back(source: &mut Source, mark: Option<&Mark>, tail: Option<usize>) -> Vec<Line> {
    let mut lines = match mark {
        Some(mark) => since_mark(source, mark.logs.get(&source.name), mark.at()),
        None => open_at_end(source, tail),
    };
    let skip = tail.map_or(0, |n| lines.len().saturating_sub(n));
    lines.drain(..skip);
    lines
}

/// The services to read: those named (each checked), or every one with a
/// log file.
pub fn selected(dir: &Path, named: &[String]) -> miette::Result<Vec<String>> {
    if !dir.is_dir() {
        return Err(Error::NoLogs {
            dir: dir.to_path_buf(),
        }
        .into());
    }
    let available = services_with_logs(dir);
    if named.is_empty() {
        return Ok(available);
    }
    let mut chosen: Vec<String> = Vec::new();
    for name in named {
        omnidev_pod::names::check("service name", name)
            .map_err(|message| Error::BadName { message })?;
        if !available.contains(name) {
            let path = dir.join(format!("{name}{LOG_SUFFIX}"));
            if let Err(source) = open_log(&path)
                && source.kind() != std::io::ErrorKind::NotFound
            {
                return Err(Error::LogUnreadable { path, source }.into());
            }
            return Err(Error::NoLog {
                service: name.clone(),
                dir: dir.to_path_buf(),
                known: if available.is_empty() {
                    "none yet (start the pod with `omnidev up`)".to_owned()
                } else {
                    available.join(", ")
                },
            }
            .into());
        }
        if !chosen.contains(name) {
            chosen.push(name.clone());
        }
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

/// Services that have a log file (a regular one), sorted by name (the detached pod's own
/// output, `omnidev.log`, is not a service).
pub fn services_with_logs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|kind| kind.is_file()))
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .filter(|name| name != DETACHED_LOG)
                .filter_map(|name| name.strip_suffix(LOG_SUFFIX).map(str::to_owned))
                .filter(|name| omnidev_pod::names::is_valid(name))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Opens the current file of `source` and reads it to its end: its
/// complete lines, preceded by those of the newest rotated file
/// `<name>.log.1` when `tail` asks for more. Following goes on from
/// exactly there; an unfinished last line is completed by what comes next.
fn open_at_end(source: &mut Source, tail: Option<usize>) -> Vec<Line> {
    let mut lines = Vec::new();
    if let Some(mut file) = Open::at(&source.path) {
        let (bytes, at) = file.read_new();
        source.file = Some(file);
        source.take_lines(&bytes, at, &mut lines);
    }
    if tail.is_some_and(|n| lines.len() < n) {
        let rotated = omnidev_core::logs::rotated_path(&source.path, 1);
        if let Some(mut older) = Open::at(&rotated) {
            let (bytes, at) = older.read_new();
            let mut all: Vec<Line> = String::from_utf8_lossy(&bytes)
                .lines()
                .map(|text| Line {
                    at,
                    text: text.to_owned(),
                })
                .collect();
            all.append(&mut lines);
            lines = all;
        }
    }
    lines
}

/// The lines of `source` written after `position` (its file and offset
/// when the pod last reloaded), across every rotation since; following goes
/// on from the end of the current file. Without a position (the service
/// had no open log file then), or when its file is gone (rotated out of
/// the kept ones), every file last written after the mark (`at`) counts.
fn since_mark(source: &mut Source, position: Option<&Position>, at: SystemTime) -> Vec<Line> {
    let mut lines = Vec::new();
    let files = log_files(&source.path, position.map(|p| p.inode));
    let found = position.filter(|p| files.first().is_some_and(|f| f.inode == p.inode));
    for mut file in files {
        if let Some(p) = found.filter(|p| p.inode == file.inode) {
            // An offset past the end: truncated since, all of it is newer.
            let len = file.file.metadata().map_or(0, |m| m.len());
            file.position = if p.offset <= len { p.offset } else { 0 };
        } else if found.is_none() && file.modified() < at {
            // Read only to follow on from its end.
            let _ = file.read_new();
            source.file = Some(file);
            continue;
        }
        let (bytes, modified) = file.read_new();
        source.file = Some(file);
        source.take_lines(&bytes, modified, &mut lines);
    }
    lines
}

/// The lines written since the last call: the rest of the open file, then
/// every file rotated in after it, in order; a file truncated in place is
/// read again from its start.
pub fn read_new(source: &mut Source) -> Vec<Line> {
    let mut lines = Vec::new();
    if let Some(open) = &mut source.file {
        if open.truncated() {
            open.position = 0;
            open.tail.clear();
            source.partial.clear();
        }
        let (bytes, at) = open.read_new();
        source.take_lines(&bytes, at, &mut lines);
    }
    let replaced = std::fs::symlink_metadata(&source.path).is_ok_and(|meta| {
        source
            .file
            .as_ref()
            .is_none_or(|open| open.inode != meta.ino())
    });
    if replaced {
        let known = source.file.as_ref().map(|open| open.inode);
        for mut open in newer_files(&source.path, known) {
            let (bytes, at) = open.read_new();
            source.file = Some(open);
            source.take_lines(&bytes, at, &mut lines);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::Duration;

    use super::*;

    fn source(path: &Path) -> Source {
        Source {
            name: "svc".into(),
            path: path.to_path_buf(),
            prefix: "svc | ".into(),
            file: None,
            partial: Vec::new(),
        }
    }

    /// What `logs -f` prints at its next poll (the text form).
    fn poll(src: &mut Source, out: &mut String) {
        for line in read_new(src) {
            out.push_str(&src.prefix);
            out.push_str(&line.text);
            out.push('\n');
        }
    }

    fn texts(lines: &[Line]) -> Vec<&str> {
        lines.iter().map(|l| l.text.as_str()).collect()
    }

    fn set_modified(path: &Path, at: SystemTime) {
        File::options()
            .write(true)
            .open(path)
            .and_then(|f| f.set_modified(at))
            .expect("set mtime");
    }

    fn position(path: &Path, offset: u64) -> Position {
        Position {
            inode: std::fs::metadata(path).expect("stat").ino(),
            offset,
        }
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
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .expect("truncate");
        append(&path, "a new first line\nand a second one\nand more\n");
        out.clear();
        poll(&mut src, &mut out);
        assert_eq!(
            out,
            "svc | a new first line\nsvc | and a second one\nsvc | and more\n"
        );
    }

    fn append(path: &Path, text: &str) {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("open");
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

    #[test]
    fn tail_reaches_into_the_rotated_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        std::fs::write(omnidev_core::logs::rotated_path(&path, 1), "a\nb\nc\n").expect("write");
        std::fs::write(&path, "d\ne\n").expect("write");
        let lines = open_at_end(&mut source(&path), Some(3));
        assert_eq!(texts(&lines), ["a", "b", "c", "d", "e"]);
        assert_eq!(texts(&open_at_end(&mut source(&path), None)), ["d", "e"]);
        assert_eq!(texts(&open_at_end(&mut source(&path), Some(1))), ["d", "e"]);
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
        let lines = since_mark(&mut src, Some(&mark), SystemTime::now());
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
        let lines = since_mark(&mut source(&fresh), Some(&mark), SystemTime::now());
        assert_eq!(texts(&lines), ["after"]);
        // Truncated since (shorter than the offset): all of it is newer.
        std::fs::write(&fresh, "x\n").expect("truncate");
        let lines = since_mark(&mut source(&fresh), Some(&mark), SystemTime::now());
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
        let gone = Position {
            inode: u64::MAX,
            offset: 3,
        };
        let mut src = source(&path);
        let lines = since_mark(&mut src, Some(&gone), mark_at);
        assert_eq!(texts(&lines), ["lately", "now"]);
        // No position at all (the service had no log file then): the same.
        let lines = since_mark(&mut source(&path), None, mark_at);
        assert_eq!(texts(&lines), ["lately", "now"]);
        // A current file older than the mark: nothing, then what comes.
        set_modified(&path, mark_at - Duration::from_secs(1));
        let mut src = source(&path);
        let lines = since_mark(&mut src, None, SystemTime::now());
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

        assert_eq!(services_with_logs(&logs), ["real"]);
        for name in ["linked", "zero", "fifo"] {
            let error = selected(&logs, &[name.to_owned()]).expect_err(name);
            let Some(Error::LogUnreadable { path, .. }) = error.downcast_ref::<Error>() else {
                panic!("{name}: {error:?}");
            };
            assert_eq!(path, &logs.join(format!("{name}.log")));
            // Read as `logs -f` and `mcp` would: nothing, at once.
            let mut src = source(&logs.join(format!("{name}.log")));
            assert!(open_at_end(&mut src, Some(10)).is_empty(), "{name}");
            assert!(read_new(&mut src).is_empty(), "{name}");
        }
        // The same once the file is there but then swapped for a link.
        let mut src = source(&logs.join("real.log"));
        assert_eq!(texts(&open_at_end(&mut src, None)), ["a line"]);
        std::fs::remove_file(logs.join("real.log")).expect("rm");
        std::os::unix::fs::symlink(&secret, logs.join("real.log")).expect("symlink");
        assert!(read_new(&mut src).is_empty());
    }
}

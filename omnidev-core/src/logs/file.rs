//! The rotating log writer: a log file rotated by size, checked on every
//! write.

use std::io::{self, BufWriter, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

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
    pub(super) path: PathBuf,
    dir: crate::fs::Dir,
    name: PathBuf,
    pub(super) out: BufWriter<Box<dyn Sink>>,
    /// The inode of the file written to, which a rotation keeps.
    pub(super) inode: u64,
    pub(super) size: u64,
    max_bytes: u64,
    keep: usize,
}

impl LogFile {
    /// Opens (appending to) `path`.
    pub(crate) fn open(path: PathBuf, max_bytes: u64, keep: usize) -> io::Result<Self> {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
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
        self.make_room(len)?;
        self.out.write_all(text)?;
        self.out.write_all(b"\n")?;
        self.size += len;
        Ok(())
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Rotates first when a line of `len` bytes beginning now would take
    /// a file that holds something past `max_bytes`; whether it did.
    fn make_room(&mut self, len: u64) -> io::Result<bool> {
        let rotate = self.size > 0 && self.size + len > self.max_bytes;
        if rotate {
            self.rotate()?;
        }
        Ok(rotate)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.out.flush()?;
        rotate_away(&self.dir, &self.name, self.keep)?;
        let file = self.dir.open_file(&self.name, crate::fs::OpenOptions::AppendCreate)?;
        self.inode = file.metadata()?.ino();
        self.out = BufWriter::with_capacity(64 * 1024, Box::new(file));
        self.size = 0;
        Ok(())
    }
}

/// A log of text that is no service's (the detached pod's own output,
/// `omnidev.log`), rotated as a service's log is, through the same
/// writer: by size, checked for each whole line (a line written in
/// several pieces is held until its end), so a file exceeds `max_bytes`
/// only by a line longer than it alone, and no line is split across two
/// files. A line that has not ended after 64 KiB (`HELD_MAX`) goes out as it
/// stands.
pub struct RotatingLog {
    file: LogFile,
    /// The start of a line whose end has not come yet.
    held: Vec<u8>,
    rotated: Option<Box<dyn FnMut() + Send>>,
}

/// The most of an unfinished line a [`RotatingLog`] holds.
const HELD_MAX: usize = 64 * 1024;

impl std::fmt::Debug for RotatingLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RotatingLog")
            .field("path", &self.file.path)
            .field("size", &self.file.size)
            .finish_non_exhaustive()
    }
}

impl RotatingLog {
    /// Opens (appending to) `path`, a file of at most `max_bytes` (plus a
    /// line) and `keep` rotated ones, through a handle on its directory
    /// as a service's log is (a link planted as the log is refused).
    pub fn open(path: PathBuf, max_bytes: u64, keep: usize) -> io::Result<Self> {
        Ok(Self { file: LogFile::open(path, max_bytes, keep)?, held: Vec::new(), rotated: None })
    }

    /// Calls `then` after each rotation, once the new file is in place.
    #[must_use]
    pub fn on_rotate(mut self, then: impl FnMut() + Send + 'static) -> Self {
        self.rotated = Some(Box::new(then));
        self
    }

    /// Writes `line` (whole, or a piece held too long), rotating first
    /// when it would not fit.
    fn put(&mut self, line: &[u8]) -> io::Result<()> {
        if self.file.make_room(line.len() as u64)?
            && let Some(then) = &mut self.rotated
        {
            then();
        }
        self.file.out.write_all(line)?;
        self.file.size += line.len() as u64;
        Ok(())
    }
}

impl Write for RotatingLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut rest = buf;
        while let Some(end) = memchr::memchr(b'\n', rest) {
            let (line, after) = rest.split_at(end + 1);
            if self.held.is_empty() {
                self.put(line)?;
            } else {
                let mut whole = std::mem::take(&mut self.held);
                whole.extend_from_slice(line);
                self.put(&whole)?;
            }
            rest = after;
        }
        self.held.extend_from_slice(rest);
        if self.held.len() > HELD_MAX {
            let held = std::mem::take(&mut self.held);
            self.put(&held)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for RotatingLog {
    fn drop(&mut self) {
        if !self.held.is_empty() {
            let held = std::mem::take(&mut self.held);
            let _ = self.put(&held);
        }
        let _ = self.file.flush();
    }
}

/// Moves the log `name` in `dir` out of the way as every log file rotates:
/// it becomes `name.1`, older ones shift up, `keep` of them kept (with
/// `keep` 0, it is removed).
pub fn rotate_away(dir: &crate::fs::Dir, name: &Path, keep: usize) -> io::Result<()> {
    if keep == 0 {
        return dir.remove_file(name).map(drop);
    }
    for n in (1..keep).rev() {
        let from = rotated_path(name, n);
        if dir.stat(&from)?.is_some() {
            dir.rename(&from, &rotated_path(name, n + 1))?;
        }
    }
    dir.rename(name, &rotated_path(name, 1))
}

/// Rotated file names of `path`, for tests and tools: `path.1` … `path.n`.
pub fn rotated_path(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_rotates_keeping_n() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        let mut file = LogFile::open(path.clone(), 20, 2).expect("open");
        for i in 0..10 {
            file.write_line(format!("line-{i:04}").as_bytes()).expect("write");
        }
        file.flush().expect("flush");
        // Ten 10-byte lines, two per file: current + .1 + .2 kept, .3 never.
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "line-0008\nline-0009\n");
        assert_eq!(
            std::fs::read_to_string(rotated_path(&path, 1)).expect("read .1"),
            "line-0006\nline-0007\n"
        );
        assert!(rotated_path(&path, 2).exists());
        assert!(!rotated_path(&path, 3).exists());
    }

    /// Lines written in pieces (a prefix, the text, the newline) and
    /// several at once: no file holds more than its size and the line
    /// that began in it, no line is split, none is lost, and the hook
    /// runs once a rotation.
    /// A line written in two pieces that together would pass the cap
    /// goes whole to the next file: the full one stays within its cap.
    #[test]
    fn a_line_in_pieces_is_placed_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("omnidev.log");
        let mut log = RotatingLog::open(path.clone(), 100, 3).expect("open");
        log.write_all(&[b'a'; 79]).expect("first");
        log.write_all(b"\n").expect("end");
        log.write_all(&[b'b'; 10]).expect("a line begun");
        log.flush().expect("flush");
        log.write_all(&[b'b'; 20]).expect("its rest");
        log.write_all(b"\n").expect("its end");
        drop(log);
        let full = std::fs::read(rotated_path(&path, 1)).expect("rotated");
        assert_eq!(full.len(), 80, "the full file within its cap");
        assert_eq!(std::fs::read(&path).expect("current").len(), 31);
    }

    #[test]
    fn a_rotating_log_rotates_between_lines_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("omnidev.log");
        let rotations = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&rotations);
        let mut log = RotatingLog::open(path.clone(), 100, 3).expect("open").on_rotate(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let long = "x".repeat(150);
        for i in 0..6 {
            log.write_all(b"svc | ").expect("prefix");
            log.write_all(format!("{i} {long}").as_bytes()).expect("text");
            log.write_all(b"\n").expect("newline");
        }
        log.write_all(b"a\nb\nc\n").expect("several");
        log.flush().expect("flush");
        let files: Vec<String> = (0..=3)
            .map(|n| match n {
                0 => path.clone(),
                n => rotated_path(&path, n),
            })
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect();
        for text in &files {
            let lines: Vec<&str> = text.lines().collect();
            let before_last: usize =
                lines.iter().take(lines.len().saturating_sub(1)).map(|l| l.len() + 1).sum();
            assert!(before_last <= 100, "{lines:?}");
            assert!(text.is_empty() || text.ends_with('\n'), "split: {text:?}");
        }
        // Each long line filled a file; the short ones share the newest;
        // three kept before it.
        assert_eq!(files[0], "a\nb\nc\n");
        assert_eq!(files[1], format!("svc | 5 {long}\n"));
        assert!(files[3].starts_with("svc | 3 "), "{:?}", files[3]);
        assert!(!rotated_path(&path, 4).exists());
        assert_eq!(rotations.load(std::sync::atomic::Ordering::Relaxed), 6);
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
            file.write_line(format!("line-{i:04}").as_bytes()).expect("write");
        }
        file.flush().expect("flush");
        assert_eq!(std::fs::read_dir(&outside).expect("ls").count(), 0);
        let moved = dir.path().join("moved/svc.log");
        assert_eq!(std::fs::read_to_string(&moved).expect("read"), "line-0004\nline-0005\n");
        // A link planted as the log itself is refused at open.
        std::fs::remove_file(&logs).expect("rm");
        std::fs::create_dir(&logs).expect("mkdir");
        std::os::unix::fs::symlink(outside.join("x"), logs.join("svc.log")).expect("symlink");
        LogFile::open(logs.join("svc.log"), 20, 2).expect_err("a link");
        assert!(!outside.join("x").exists());
    }
}

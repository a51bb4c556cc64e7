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
}

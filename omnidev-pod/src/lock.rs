//! The single-instance lock: one omnidev per pod.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use omnidev_core::fs::Dir;

use crate::error::{Error, Result};
use crate::layout::LOCK_FILE;

/// A held, exclusive, non-blocking lock on `<pod>/omnidev.lock`.
///
/// The holder's pid is written into the file for diagnostics. The file is
/// opened close-on-exec (Rust's standard library always sets `O_CLOEXEC`),
/// so children never inherit it and a surviving child never keeps a pod
/// locked. The OS releases the lock when the holder exits or crashes;
/// dropping the value releases it too.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// let lock = omnidev_pod::PodLock::acquire(tmp.path()).unwrap();
/// let err = omnidev_pod::PodLock::acquire(tmp.path()).unwrap_err();
/// assert!(matches!(err, omnidev_pod::Error::AlreadyRunning { pid: Some(_), .. }));
/// drop(lock);
/// omnidev_pod::PodLock::acquire(tmp.path()).unwrap();
/// ```
#[derive(Debug)]
pub struct PodLock {
    file: File,
    path: PathBuf,
}

/// A removal that holds a pod's lock instead of a running pod: it says
/// so in the lock file, after its pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// `omnidev clean` (or `up --clean`).
    Clean,
    /// `omnidev gc`.
    Gc,
}

impl Removal {
    /// Its word in the lock file, which is also the command's name.
    pub fn word(self) -> &'static str {
        match self {
            Removal::Clean => "clean",
            Removal::Gc => "gc",
        }
    }
}

/// Whether a pod's lock is held, as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockState {
    /// Nobody holds the lock.
    Free,
    /// A running pod holds it.
    Held {
        /// The pid written by the holder, if readable.
        pid: Option<u32>,
    },
    /// A removal of the pod holds it: no pod runs.
    Removing {
        /// The remover's pid.
        pid: Option<u32>,
        /// Which command removes it.
        by: Removal,
    },
}

impl PodLock {
    /// Takes the lock of the pod directory `pod_dir` (which must exist) for
    /// a pod to run, or fails at once with [`Error::AlreadyRunning`]
    /// naming the pod directory and the holder's pid ([`Error::BeingRemoved`]
    /// when the holder is a removal).
    pub fn acquire(pod_dir: &Path) -> Result<Self> {
        Self::take(pod_dir, None)
    }

    /// Takes the lock of `pod_dir` for a removal, `by`, which the lock
    /// file names: a `gc` or `status` meanwhile says the pod is being
    /// removed, not that it runs.
    pub fn acquire_to_remove(pod_dir: &Path, by: Removal) -> Result<Self> {
        Self::take(pod_dir, Some(by))
    }

    fn take(pod_dir: &Path, removal: Option<Removal>) -> Result<Self> {
        let path = pod_dir.join(LOCK_FILE);
        let mut file = match removal {
            None => open(pod_dir, &path)?,
            Some(_) => open_for_removal(pod_dir, &path)?,
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let pod_dir = pod_dir.to_path_buf();
                return Err(match holder(&mut file) {
                    LockState::Removing { pid, by } => {
                        Error::BeingRemoved { pod_dir, pid, by: by.word() }
                    }
                    LockState::Held { pid } => Error::AlreadyRunning { pod_dir, pid },
                    LockState::Free => Error::AlreadyRunning { pod_dir, pid: None },
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("lock", &path)(e)),
        }
        if removal.is_some() && !still_named(pod_dir, &file) {
            // Its remover unlinked it between our open and our lock.
            return Err(being_removed_by_another(pod_dir));
        }
        let word = removal.map_or(String::new(), |by| format!(" {}", by.word()));
        // One write of the whole line: a reader never sees the pid without
        // the word after it (`writeln!` writes each piece on its own).
        let line = format!("{}{word}\n", std::process::id());
        let write = |file: &mut File| -> std::io::Result<()> {
            file.set_len(0)?;
            file.rewind()?;
            file.write_all(line.as_bytes())?;
            file.sync_data()
        };
        write(&mut file).map_err(Error::io("write the pid into", &path))?;
        Ok(Self { file, path })
    }

    /// Reports whether `pod_dir`'s lock is held, without keeping it. The
    /// check takes a shared lock for an instant.
    pub fn state(pod_dir: &Path) -> Result<LockState> {
        let path = pod_dir.join(LOCK_FILE);
        let opened = Dir::open(pod_dir).and_then(|dir| {
            dir.open_file(Path::new(LOCK_FILE), omnidev_core::fs::OpenOptions::Read)
        });
        let Some(mut file) = omnidev_core::fs::found(opened).map_err(Error::io("open", &path))?
        else {
            return Ok(LockState::Free);
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(LockState::Free),
            Err(std::fs::TryLockError::WouldBlock) => Ok(holder(&mut file)),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", &path)(e)),
        }
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl std::os::fd::AsRawFd for PodLock {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

/// Opens (creating, mode 0600) the lock file through the pod's directory
/// handle: a symbolic link planted as `omnidev.lock` is refused, never
/// followed (its target would be truncated and get omnidev's pid).
fn open(pod_dir: &Path, path: &Path) -> Result<File> {
    Dir::open(pod_dir)
        .and_then(|dir| {
            dir.open_file(Path::new(LOCK_FILE), omnidev_core::fs::OpenOptions::ReadWriteCreate)
        })
        .map_err(Error::io("open the pod lock", path))
}

/// The lock file a removal takes: the pod's own, or a new one for a pod
/// that never ran (its identity still there). A pod whose lock file is
/// gone with its identity is being removed by another (who unlinked the
/// lock it still holds): a new lock file there would let two removals run
/// at once.
fn open_for_removal(pod_dir: &Path, path: &Path) -> Result<File> {
    let dir = Dir::open(pod_dir).map_err(Error::io("open the pod lock", path))?;
    let opened = dir.open_file(Path::new(LOCK_FILE), omnidev_core::fs::OpenOptions::ReadWrite);
    if let Some(file) =
        omnidev_core::fs::found(opened).map_err(Error::io("open the pod lock", path))?
    {
        return Ok(file);
    }
    match dir.stat(Path::new(crate::layout::MARKER)) {
        Ok(Some(_)) => open(pod_dir, path),
        _ => Err(being_removed_by_another(pod_dir)),
    }
}

/// Whether `file` is still the pod's lock file (not one unlinked since
/// it was opened).
fn still_named(pod_dir: &Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let named = Dir::open(pod_dir).and_then(|dir| dir.stat(Path::new(LOCK_FILE)));
    match (named, file.metadata()) {
        (Ok(Some(entry)), Ok(held)) => entry.ino == held.ino(),
        _ => false,
    }
}

fn being_removed_by_another(pod_dir: &Path) -> Error {
    Error::NotAPod {
        path: pod_dir.to_path_buf(),
        reason: "its lock is gone: another omnidev is removing it".to_owned(),
    }
}

/// The longest a lock file's holder may take to write its pid after
/// taking the lock: a file without its whole line is read again until
/// then.
const HOLDER_WRITES_WITHIN: std::time::Duration = std::time::Duration::from_millis(200);

/// Who holds the lock `file` (held by someone): the pid and, for a
/// removal, which one, as the holder wrote them (`PID` or `PID gc`).
fn holder(file: &mut File) -> LockState {
    let deadline = std::time::Instant::now() + HOLDER_WRITES_WITHIN;
    loop {
        let mut text = String::new();
        let read =
            file.rewind().and_then(|()| Read::by_ref(file).take(64).read_to_string(&mut text));
        let mut words = text.split_whitespace();
        let pid = words.next().and_then(|w| w.parse().ok());
        // Just taken, not written (whole) yet: the line ends written.
        if read.is_ok() && !text.ends_with('\n') && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
            continue;
        }
        return match words.next() {
            Some("gc") => LockState::Removing { pid, by: Removal::Gc },
            Some("clean") => LockState::Removing { pid, by: Removal::Clean },
            _ => LockState::Held { pid },
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A reader that comes while the holder is writing its line (the pid
    /// written, ` gc` not yet) waits for the whole line: a pod being
    /// removed is never said to run.
    #[test]
    fn a_holder_read_mid_write_waits_for_the_whole_line() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join(LOCK_FILE);
        let mut writer = File::create(&path).expect("create");
        writer.try_lock().expect("lock");
        writer.write_all(b"4242").expect("write the pid");
        let finish = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            writer.write_all(b" gc\n").expect("write the rest");
            writer
        });
        let mut reader = File::open(&path).expect("open");
        assert_eq!(holder(&mut reader), LockState::Removing { pid: Some(4242), by: Removal::Gc });
        drop(finish.join());
    }

    #[test]
    fn lock_fd_is_close_on_exec_and_pid_is_written() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let lock = PodLock::acquire(tmp.path()).expect("lock");
        // SAFETY: F_GETFD on a descriptor we own has no memory effects.
        let flags = unsafe { libc::fcntl(lock.as_raw_fd(), libc::F_GETFD) };
        assert!(flags >= 0 && flags & libc::FD_CLOEXEC != 0, "flags {flags}");
        let text = std::fs::read_to_string(lock.path()).expect("read");
        assert_eq!(text.trim(), std::process::id().to_string());
        assert_eq!(
            PodLock::state(tmp.path()).expect("state"),
            LockState::Held { pid: Some(std::process::id()) }
        );
        drop(lock);
        // A process another test forks at this instant holds a copy of the
        // descriptor until its exec closes it: wait, do not read once.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while PodLock::state(tmp.path()).expect("state") != LockState::Free {
            assert!(std::time::Instant::now() < deadline, "lock still held");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// A removal's lock is told apart from a running pod's: `state` and a
    /// refused `acquire` say which command removes the pod.
    #[test]
    fn a_removal_holding_the_lock_says_so() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // A pod that never ran: its identity, no lock file yet.
        std::fs::write(tmp.path().join(crate::layout::MARKER), "").expect("marker");
        let lock = PodLock::acquire_to_remove(tmp.path(), Removal::Gc).expect("lock");
        let pid = Some(std::process::id());
        assert_eq!(
            PodLock::state(tmp.path()).expect("state"),
            LockState::Removing { pid, by: Removal::Gc }
        );
        let err = PodLock::acquire(tmp.path()).expect_err("held");
        assert!(matches!(err, Error::BeingRemoved { by: "gc", pid: p, .. } if p == pid), "{err:?}");
        drop(lock);
    }

    /// A removal never makes a lock file where the pod's identity and
    /// lock are gone (another removal unlinked them and still holds its
    /// lock): it is refused, and the directory stays as it was.
    #[test]
    fn a_removal_takes_no_new_lock_in_a_pod_half_removed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let err = PodLock::acquire_to_remove(tmp.path(), Removal::Gc).expect_err("refused");
        assert!(err.to_string().contains("another omnidev is removing it"), "{err}");
        assert_eq!(std::fs::read_dir(tmp.path()).expect("list").count(), 0);

        // Unlinked while held: a removal that opened it before is refused.
        std::fs::write(tmp.path().join(crate::layout::MARKER), "").expect("marker");
        let first = PodLock::acquire_to_remove(tmp.path(), Removal::Gc).expect("first");
        let opened = open(tmp.path(), &tmp.path().join(LOCK_FILE)).expect("open");
        std::fs::remove_file(tmp.path().join(LOCK_FILE)).expect("unlink");
        drop(first);
        opened.try_lock().expect("the unlinked file locks");
        assert!(!still_named(tmp.path(), &opened));
    }

    #[test]
    fn refusal_names_pod_dir_and_pid() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let _lock = PodLock::acquire(tmp.path()).expect("lock");
        let err = PodLock::acquire(tmp.path()).expect_err("second");
        let text = err.to_string();
        assert!(text.contains(&tmp.path().display().to_string()), "{text}");
        assert!(text.contains(&std::process::id().to_string()), "{text}");
    }

    #[test]
    fn a_lock_file_planted_as_a_link_is_refused_and_its_target_untouched() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "precious").expect("write");
        let pod = tmp.path().join("pod");
        std::fs::create_dir(&pod).expect("mkdir");
        std::os::unix::fs::symlink(&victim, pod.join(LOCK_FILE)).expect("symlink");
        let err = PodLock::acquire(&pod).expect_err("a link");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        PodLock::state(&pod).expect_err("a link");
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
    }
}

//! The one way omnidev touches the files of its own directories (a pod
//! directory, the per-user runtime directory): relative to an open
//! directory handle ([`Dir`]), one path component at a time, never
//! following a symbolic link, and refusing what is not a regular file or a
//! directory where one is expected.
//!
//! A directory is opened once by the path the caller names (a link there
//! is the caller's choice and is followed); everything below it is reached
//! with `openat`/`mkdirat`/`unlinkat`/`renameat` and `O_NOFOLLOW`, so a
//! symbolic link planted inside (`omnidev.lock -> ~/.bashrc`, `logs ->
//! /elsewhere`) is an error, never a write outside. Paths given to a
//! [`Dir`] are checked by [`components`]: relative, plain names only
//! (`.` parts are dropped; `..`, an absolute path or an empty one is
//! refused), so no path handed to this module reaches outside the
//! directory it is relative to.
//!
//! It is also the one door for every file omnidev reads by a whole path:
//! [`read_file`] (omnidev's own files: state, install state, stamps; a link
//! as the last name refused) and [`read_linked`] (the user's: env files,
//! manifests; a link followed). Every open is non-blocking (a FIFO, a
//! socket or a device is refused at once, saying what it is), only a
//! regular file is read, and never more than the caller's bound.

mod background;

pub(crate) use background::BackgroundWriter;

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};
use nix::unistd::UnlinkatFlags;

/// The message of the error a symbolic link met on the way gives.
pub const LINK_REFUSED: &str =
    "it is a symbolic link, and omnidev never follows one inside its own directories";

/// What a name inside a [`Dir`] is, looked at without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// A Unix domain socket.
    Socket,
    /// Anything else (a FIFO, a device).
    Other,
}

/// What [`Dir::stat`] tells about a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Its kind.
    pub kind: Kind,
    /// Its owner.
    pub uid: u32,
    /// Its inode.
    pub ino: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// How [`Dir::open_file`] opens a file (new files get mode 0600).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenOptions {
    /// Read only; the file must exist.
    Read,
    /// Read and write, created when missing, never truncated (a lock
    /// file).
    ReadWriteCreate,
    /// Read and write; the file must exist (a lock file a removal takes).
    ReadWrite,
    /// Append, created when missing (a log file).
    AppendCreate,
    /// Write a new file; fails when the name exists, even as a link (a
    /// file that must never overwrite another).
    CreateNew,
}

impl OpenOptions {
    fn flags(self) -> OFlag {
        let flags = match self {
            Self::Read => OFlag::O_RDONLY,
            Self::ReadWriteCreate => OFlag::O_RDWR | OFlag::O_CREAT,
            Self::ReadWrite => OFlag::O_RDWR,
            Self::AppendCreate => OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT,
            Self::CreateNew => OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
        };
        flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK
    }
}

/// The plain names `path` is made of, or why it may not be used relative
/// to a directory of omnidev's: it must be relative and non-empty, `.`
/// parts are dropped, and `..` is refused (even one that would fold back
/// inside: a name is never resolved through a link either way).
///
/// ```
/// use std::path::Path;
/// use omnidev_core::fs::components;
/// assert_eq!(components(Path::new("logs/./server.log")).unwrap().len(), 2);
/// assert!(components(Path::new("../x")).is_err());
/// assert!(components(Path::new("/etc/passwd")).is_err());
/// assert!(components(Path::new("")).is_err());
/// ```
pub fn components(path: &Path) -> io::Result<Vec<&OsStr>> {
    let mut out = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            Component::ParentDir => return Err(invalid(path, "`..` is not allowed here")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(invalid(path, "an absolute path is not allowed here"));
            }
        }
    }
    if out.is_empty() {
        return Err(invalid(path, "the path names no file"));
    }
    Ok(out)
}

/// The first executable file called `name` in the `PATH`-style list
/// `path`, found without starting a process.
///
/// ```
/// use std::ffi::OsStr;
/// let sh = omnidev_core::fs::which("sh", OsStr::new("/nonexistent:/bin:/usr/bin"));
/// assert!(sh.is_some_and(|sh| sh.ends_with("sh")));
/// assert_eq!(omnidev_core::fs::which("sh", OsStr::new("")), None);
/// ```
pub fn which(name: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// Whether `path` is a file (through links) that someone may execute.
pub fn is_executable(path: &Path) -> bool {
    path.metadata().is_ok_and(|meta| meta.is_file() && meta.mode() & 0o111 != 0)
}

/// `None` where `result` failed because nothing is there.
///
/// ```
/// use std::io;
/// let missing: io::Result<u8> = Err(io::ErrorKind::NotFound.into());
/// assert_eq!(omnidev_core::fs::found(missing).unwrap(), None);
/// assert_eq!(omnidev_core::fs::found(Ok(7)).unwrap(), Some(7));
/// let denied: io::Result<u8> = Err(io::ErrorKind::PermissionDenied.into());
/// assert!(omnidev_core::fs::found(denied).is_err());
/// ```
pub fn found<T>(result: io::Result<T>) -> io::Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn invalid(path: &Path, reason: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {reason}", path.display()))
}

/// An [`Errno`] as an [`io::Error`], with `ELOOP` (the `O_NOFOLLOW` refusal)
/// said in words.
fn os_error(errno: Errno) -> io::Error {
    if errno == Errno::ELOOP { io::Error::other(LINK_REFUSED) } else { io::Error::from(errno) }
}

/// An open directory; every path given to its methods is relative to it
/// (see the module docs).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// Opens the directory `path` (a symbolic link naming it is followed:
    /// the caller named it).
    pub fn open(path: &Path) -> io::Result<Self> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(os_error)?;
        Ok(Self { fd, path: path.to_path_buf() })
    }

    /// The directory's path, as it was opened (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `relative` under this directory's path (for messages; never opened
    /// by path).
    pub fn join(&self, relative: &Path) -> PathBuf {
        self.path.join(relative)
    }

    /// [`Dir::parent_of`], with a missing parent as `None`.
    fn existing_parent_of<'p>(&self, relative: &'p Path) -> io::Result<Option<(Dir, &'p OsStr)>> {
        found(self.parent_of(relative))
    }

    /// The directory holding the last name of `relative`, and that name.
    fn parent_of<'p>(&self, relative: &'p Path) -> io::Result<(Dir, &'p OsStr)> {
        let names = components(relative)?;
        let (last, parents) = names.split_last().expect("components is never empty");
        let mut dir = self.open_here(OsStr::new("."))?;
        for name in parents {
            dir = dir.open_here(name)?;
        }
        Ok((dir, last))
    }

    /// The sub-directory `name` (one plain name) of this one, not through
    /// a link.
    fn open_here(&self, name: &OsStr) -> io::Result<Dir> {
        let fd = nix::fcntl::openat(
            self.fd.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| self.not_a_dir(name, errno))?;
        Ok(Self { fd, path: self.path.join(name) })
    }

    /// Why `name` could not be opened as a directory, in words.
    fn not_a_dir(&self, name: &OsStr, errno: Errno) -> io::Error {
        if matches!(errno, Errno::ELOOP | Errno::ENOTDIR)
            && let Ok(entry) = self.stat_here(name)
        {
            return match entry.kind {
                Kind::Symlink => io::Error::other(LINK_REFUSED),
                _ => io::Error::new(io::ErrorKind::NotADirectory, "it is not a directory"),
            };
        }
        os_error(errno)
    }

    fn stat_here(&self, name: &OsStr) -> io::Result<Entry> {
        let stat = nix::sys::stat::fstatat(self.fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(os_error)?;
        Ok(entry_of(&stat))
    }

    /// The existing sub-directory `relative`, reached without following a
    /// link.
    pub fn sub(&self, relative: &Path) -> io::Result<Dir> {
        let (dir, last) = self.parent_of(relative)?;
        dir.open_here(last)
    }

    /// The sub-directory `relative`, created one component at a time (each
    /// new one with `mode`) when missing; a link or a file on the way is an
    /// error.
    pub fn create_dir_all(&self, relative: &Path, mode: u32) -> io::Result<Dir> {
        let mut dir = self.open_here(OsStr::new("."))?;
        for name in components(relative)? {
            match nix::sys::stat::mkdirat(
                dir.fd.as_fd(),
                name,
                Mode::from_bits_truncate(mode as libc::mode_t),
            ) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(errno) => return Err(os_error(errno)),
            }
            dir = dir.open_here(name)?;
        }
        Ok(dir)
    }

    /// What `relative` is, without following a link; `None` when missing.
    pub fn stat(&self, relative: &Path) -> io::Result<Option<Entry>> {
        let Some((dir, last)) = self.existing_parent_of(relative)? else {
            return Ok(None);
        };
        found(dir.stat_here(last))
    }

    /// Opens the regular file `relative` as `options` say. A link is never
    /// followed and anything but a regular file (a directory, a FIFO, a
    /// socket, a device) is refused. A log opened to append into
    /// ([`OpenOptions::AppendCreate`]) that has other hard links (one
    /// planted to point outside) is replaced by a new file, so what is
    /// written never reaches the other names.
    pub fn open_file(&self, relative: &Path, options: OpenOptions) -> io::Result<File> {
        let (dir, last) = self.parent_of(relative)?;
        let open = |flags| {
            regular(nix::fcntl::openat(
                dir.fd.as_fd(),
                last,
                flags,
                Mode::from_bits_truncate(0o600),
            ))
        };
        let file = open(options.flags())?;
        if options != OpenOptions::AppendCreate || file.metadata()?.nlink() <= 1 {
            return Ok(file);
        }
        drop(file);
        nix::unistd::unlinkat(dir.fd.as_fd(), last, UnlinkatFlags::NoRemoveDir)
            .map_err(os_error)?;
        // Created anew or refused: a link planted again meanwhile is not
        // opened.
        open(options.flags() | OFlag::O_EXCL)
    }

    /// The bytes of the regular file `relative`; `None` when it does not
    /// exist; an error when it holds more than `max` bytes.
    pub fn read(&self, relative: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
        read_bounded(self.open_file(relative, OpenOptions::Read), max)
    }

    /// Replaces `relative` with `contents` atomically and durably: the
    /// bytes go to a new temporary file (`.omnidev-*.tmp`, mode 0600) beside
    /// it, which is flushed and renamed over it, and the directory is
    /// flushed so the rename survives a crash. A reader sees the old file
    /// or the new one, never a torn one; a link at `relative` is replaced,
    /// not written through; a directory there is refused.
    pub fn write_atomic(&self, relative: &Path, contents: &[u8]) -> io::Result<()> {
        self.replace(relative, contents, true)
    }

    /// [`Dir::write_atomic`] without the flushes: as atomic for every
    /// reader, but a crash of the machine may lose it. For a file that
    /// only matters while omnidev runs (a reload's mark), written where a
    /// flush would make someone wait: a flush takes 8 ms at the median and
    /// 30 ms at worst on a disk that others keep busy.
    pub fn write_atomic_unsynced(&self, relative: &Path, contents: &[u8]) -> io::Result<()> {
        self.replace(relative, contents, false)
    }

    fn replace(&self, relative: &Path, contents: &[u8], durable: bool) -> io::Result<()> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let (dir, last) = self.parent_of(relative)?;
        if dir.stat_here(last).is_ok_and(|e| e.kind == Kind::Dir) {
            return Err(io::Error::new(io::ErrorKind::IsADirectory, "it is a directory"));
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let (tmp_name, file) = loop {
            let name = OsString::from(format!(
                ".omnidev-{}-{}-{nanos:08x}.tmp",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            match nix::fcntl::openat(
                dir.fd.as_fd(),
                name.as_os_str(),
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            ) {
                Ok(fd) => break (name, File::from(fd)),
                Err(Errno::EEXIST) => {}
                Err(errno) => return Err(os_error(errno)),
            }
        };
        let written = (|| {
            let mut file = file;
            file.write_all(contents)?;
            if durable {
                file.sync_all()?;
            }
            nix::fcntl::renameat(dir.fd.as_fd(), tmp_name.as_os_str(), dir.fd.as_fd(), last)
                .map_err(os_error)
        })();
        if let Err(e) = written {
            let _ = nix::unistd::unlinkat(
                dir.fd.as_fd(),
                tmp_name.as_os_str(),
                UnlinkatFlags::NoRemoveDir,
            );
            return Err(e);
        }
        if durable {
            // Make the rename itself durable.
            let _ = nix::unistd::fsync(dir.fd.as_fd());
        }
        Ok(())
    }

    /// Renames `from` to `to` (both relative to this directory), replacing
    /// `to`; links are renamed, never followed.
    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (from_dir, from_name) = self.parent_of(from)?;
        let (to_dir, to_name) = self.parent_of(to)?;
        nix::fcntl::renameat(from_dir.fd.as_fd(), from_name, to_dir.fd.as_fd(), to_name)
            .map_err(os_error)
    }

    /// Makes `relative` a symbolic link to `target` (which is only stored,
    /// never resolved here); fails when something is there.
    pub fn symlink(&self, target: &Path, relative: &Path) -> io::Result<()> {
        let (dir, last) = self.parent_of(relative)?;
        nix::unistd::symlinkat(target, dir.fd.as_fd(), last).map_err(os_error)
    }

    /// The target of the symbolic link `relative`.
    pub fn read_link(&self, relative: &Path) -> io::Result<PathBuf> {
        let (dir, last) = self.parent_of(relative)?;
        nix::fcntl::readlinkat(dir.fd.as_fd(), last).map(PathBuf::from).map_err(os_error)
    }

    /// Removes the name `relative` when it is not a directory (a file, a
    /// link — not what it points to —, a socket). `false` when it was
    /// missing.
    pub fn remove_file(&self, relative: &Path) -> io::Result<bool> {
        let Some((dir, last)) = self.existing_parent_of(relative)? else {
            return Ok(false);
        };
        dir.unlink(last, UnlinkatFlags::NoRemoveDir)
    }

    /// Removes the empty directory `relative`. `false` when it was missing.
    pub fn remove_dir(&self, relative: &Path) -> io::Result<bool> {
        let Some((dir, last)) = self.existing_parent_of(relative)? else {
            return Ok(false);
        };
        dir.unlink(last, UnlinkatFlags::RemoveDir)
    }

    /// Removes `relative` and, when it is a directory, everything in it,
    /// descending through directory handles: a link inside is removed
    /// itself, never followed. `false` when it was missing.
    pub fn remove_tree(&self, relative: &Path) -> io::Result<bool> {
        let Some((dir, last)) = self.existing_parent_of(relative)? else {
            return Ok(false);
        };
        dir.remove_tree_here(last)
    }

    fn remove_tree_here(&self, name: &OsStr) -> io::Result<bool> {
        match found(self.stat_here(name))? {
            None => return Ok(false),
            Some(entry) if entry.kind != Kind::Dir => {
                return self.unlink(name, UnlinkatFlags::NoRemoveDir);
            }
            Some(_) => {}
        }
        let sub = self.open_here(name)?;
        for child in sub.entries()? {
            sub.remove_tree_here(&child)?;
        }
        self.unlink(name, UnlinkatFlags::RemoveDir)
    }

    /// Removes `name` here: whether it was there.
    fn unlink(&self, name: &OsStr, flags: UnlinkatFlags) -> io::Result<bool> {
        match nix::unistd::unlinkat(self.fd.as_fd(), name, flags) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(Errno::EISDIR) => {
                Err(io::Error::new(io::ErrorKind::IsADirectory, "it is a directory"))
            }
            Err(errno) => Err(os_error(errno)),
        }
    }

    /// The names in this directory (without `.` and `..`), sorted.
    pub fn entries(&self) -> io::Result<Vec<OsString>> {
        use std::os::unix::ffi::OsStrExt as _;
        let fd = nix::fcntl::openat(
            self.fd.as_fd(),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(os_error)?;
        let mut dir = nix::dir::Dir::from_fd(fd).map_err(os_error)?;
        let mut names = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(os_error)?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(name).to_owned());
            }
        }
        names.sort();
        Ok(names)
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn entry_of(stat: &nix::sys::stat::FileStat) -> Entry {
    let format = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    let kind = if format == SFlag::S_IFREG {
        Kind::File
    } else if format == SFlag::S_IFDIR {
        Kind::Dir
    } else if format == SFlag::S_IFLNK {
        Kind::Symlink
    } else if format == SFlag::S_IFSOCK {
        Kind::Socket
    } else {
        Kind::Other
    };
    Entry { kind, uid: stat.st_uid, ino: stat.st_ino, size: stat.st_size as u64 }
}

/// The file `opened` is, when it is a regular file; anything else (a
/// directory, a FIFO, a socket, a device) is refused, saying what it is.
/// The open was non-blocking (a FIFO never blocks it); the file is put back
/// to blocking I/O.
fn regular(opened: nix::Result<OwnedFd>) -> io::Result<File> {
    let fd = opened.map_err(|errno| match errno {
        Errno::EISDIR => io::Error::new(io::ErrorKind::IsADirectory, "it is a directory"),
        errno => os_error(errno),
    })?;
    let stat = nix::sys::stat::fstat(fd.as_fd()).map_err(os_error)?;
    let format = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    let what = match format {
        SFlag::S_IFREG => None,
        SFlag::S_IFDIR => Some("a directory"),
        SFlag::S_IFIFO => Some("a FIFO"),
        SFlag::S_IFSOCK => Some("a socket"),
        _ => Some("a device"),
    };
    if let Some(what) = what {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is not a regular file ({what})"),
        ));
    }
    let flags = nix::fcntl::fcntl(fd.as_fd(), nix::fcntl::FcntlArg::F_GETFL).map_err(os_error)?;
    let flags = OFlag::from_bits_truncate(flags) & !OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(fd.as_fd(), nix::fcntl::FcntlArg::F_SETFL(flags)).map_err(os_error)?;
    Ok(File::from(fd))
}

/// At most `max` bytes of the file `opened`; `None` when it did not exist,
/// an error when it holds more.
fn read_bounded(opened: io::Result<File>, max: u64) -> io::Result<Option<Vec<u8>>> {
    let Some(file) = found(opened)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is larger than {max} bytes"),
        ));
    }
    Ok(Some(bytes))
}

/// The directory and last name of an absolute or relative `path` given
/// whole (the callers that hold no [`Dir`]): the parent is opened as named,
/// the last name goes through it.
fn split(path: &Path) -> io::Result<(Dir, &Path)> {
    let name =
        path.file_name().map(Path::new).ok_or_else(|| invalid(path, "the path names no file"))?;
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok((Dir::open(parent)?, name))
}

/// [`Dir::write_atomic`] for a path given whole: its directory is opened
/// as named, and the file replaced in it. The one atomic writer of every
/// omnidev crate; callers wrap the error with their own context.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("state.json");
/// omnidev_core::fs::write_atomic(&path, b"{}").unwrap();
/// assert_eq!(std::fs::read(&path).unwrap(), b"{}");
/// ```
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let (dir, name) = split(path)?;
    dir.write_atomic(name, contents)
}

/// [`Dir::write_atomic_unsynced`] for a path given whole.
pub fn write_atomic_unsynced(path: &Path, contents: &[u8]) -> io::Result<()> {
    let (dir, name) = split(path)?;
    dir.write_atomic_unsynced(name, contents)
}

/// [`Dir::read`] for a path given whole: the regular file's bytes (at
/// most `max`), `None` when missing; a link as the last name is refused.
/// For the files omnidev owns (state, install state, stamps).
pub fn read_file(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let Some((dir, name)) = found(split(path))? else {
        return Ok(None);
    };
    dir.read(name, max)
}

/// [`Dir::open_file`] for a path given whole (a lock file, a log being
/// read): a link planted as its last name is refused, never followed, and
/// a FIFO or a device there (which would block the open, or never end)
/// too.
pub fn open(path: &Path, options: OpenOptions) -> io::Result<File> {
    let (dir, name) = split(path)?;
    dir.open_file(name, options)
}

/// [`read_file`] for a file of the user's (an env file, a checkout's
/// manifest), where a link is the user's choice and is followed: still
/// never blocking, only a regular file, at most `max` bytes.
pub fn read_linked(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
    read_bounded(regular(nix::fcntl::open(path, flags, Mode::empty())), max)
}

/// What [`read_file`] or [`read_linked`] read, as text; not UTF-8 is an
/// [`io::ErrorKind::InvalidData`] error.
pub fn text(bytes: Option<Vec<u8>>) -> io::Result<Option<String>> {
    bytes
        .map(|bytes| {
            String::from_utf8(bytes)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "it is not UTF-8 text"))
        })
        .transpose()
}

/// An absolute, non-empty value of an XDG variable; anything else is
/// ignored (the XDG base directory specification says relative paths are
/// invalid and must be ignored).
///
/// ```
/// use omnidev_core::fs::xdg_dir;
/// assert_eq!(xdg_dir(Some("/run/user/1000".into())), Some("/run/user/1000".into()));
/// assert_eq!(xdg_dir(Some("relative/cache".into())), None);
/// assert_eq!(xdg_dir(Some("".into())), None);
/// assert_eq!(xdg_dir(None), None);
/// ```
pub fn xdg_dir(value: Option<OsString>) -> Option<PathBuf> {
    value.map(PathBuf::from).filter(|path| path.is_absolute())
}

/// An XDG base directory: the variable's `value` when it is usable
/// ([`xdg_dir`]), else `default` under `home` when that is absolute (the
/// user's cache, config and data directories omnidev writes in).
///
/// ```
/// use omnidev_core::fs::xdg_home;
/// let home = || Some("/home/ada".into());
/// assert_eq!(xdg_home(Some("/x".into()), home(), ".cache"), Some("/x".into()));
/// assert_eq!(xdg_home(Some("rel".into()), home(), ".cache"), Some("/home/ada/.cache".into()));
/// assert_eq!(xdg_home(None, Some("rel".into()), ".cache"), None);
/// ```
pub fn xdg_home(value: Option<OsString>, home: Option<OsString>, default: &str) -> Option<PathBuf> {
    xdg_dir(value).or_else(|| Some(xdg_dir(home)?.join(default)))
}

/// omnidev's cache root, where every pod lives:
/// `${XDG_CACHE_HOME:-$HOME/.cache}/omnidev` (an empty or relative
/// `XDG_CACHE_HOME` is ignored); `None` without an absolute home. The one
/// place it is worked out; [`check_private`] is what every user of it
/// asks before writing there.
///
/// ```
/// use omnidev_core::fs::cache_root_from;
/// assert_eq!(cache_root_from(None, Some("/home/ada".into())), Some("/home/ada/.cache/omnidev".into()));
/// assert_eq!(cache_root_from(Some("/xdg".into()), None), Some("/xdg/omnidev".into()));
/// ```
pub fn cache_root_from(
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    xdg_home(xdg_cache_home, home, ".cache").map(|cache| cache.join("omnidev"))
}

/// Why a directory omnidev keeps things in is unsafe: another user could
/// plant files in it. What [`check_private`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotPrivate {
    /// What is wrong: `its mode 777 lets others write in it`.
    pub reason: String,
    /// What to run: `check what is in it, then chmod 700 DIR`.
    pub fix: String,
}

/// Whether an existing `dir` is this user's alone: a directory owned by
/// this user that group and others cannot write; a missing one is (it
/// will be made so). `refuse_link`: a symbolic link naming `dir` is
/// refused (the runtime directory) rather than followed (the cache root,
/// a pod directory: a link there is the user's choice).
pub fn check_private(dir: &Path, refuse_link: bool) -> io::Result<Option<NotPrivate>> {
    let meta = if refuse_link { std::fs::symlink_metadata(dir) } else { std::fs::metadata(dir) };
    let Some(meta) = found(meta)? else {
        return Ok(None);
    };
    let uid = nix::unistd::getuid().as_raw();
    let shown = dir.display();
    let (reason, fix) = if meta.file_type().is_symlink() {
        ("it is a symbolic link".to_owned(), format!("remove it: `rm {shown}`"))
    } else if !meta.is_dir() {
        ("it is not a directory".to_owned(), format!("remove or rename {shown}"))
    } else if meta.uid() != uid {
        (
            format!("it belongs to uid {}, not to you (uid {uid})", meta.uid()),
            format!("make it yours (`sudo chown -R {uid} {shown}`) or remove it"),
        )
    } else if meta.mode() & 0o022 != 0 {
        (
            format!("its mode {:o} lets others write in it", meta.mode() & 0o777),
            format!("check what is in it, then `chmod 700 {shown}`"),
        )
    } else {
        return Ok(None);
    };
    Ok(Some(NotPrivate { reason, fix }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_existing_file_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.toml");
        for write in [write_atomic, write_atomic_unsynced] {
            std::fs::write(&path, "old").expect("write");
            write(&path, b"new").expect("atomic write");
            assert_eq!(std::fs::read_to_string(&path).expect("read"), "new");
            let entries = std::fs::read_dir(dir.path()).expect("read_dir").count();
            assert_eq!(entries, 1);
        }
    }

    #[test]
    fn an_unsynced_write_replaces_a_link_instead_of_writing_through_it() {
        let (tmp, dir, outside) = planted();
        let victim = outside.join("victim");
        let mark = tmp.path().join("inside/mark");
        std::os::unix::fs::symlink(&victim, &mark).expect("plant");
        dir.write_atomic_unsynced(Path::new("mark"), b"x").expect("replaced");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
        assert_eq!(std::fs::read(&mark).expect("mark"), b"x");
        assert!(!std::fs::symlink_metadata(&mark).expect("mark").is_symlink());
    }

    /// A tempdir with `outside/` (holding `victim`, whose bytes must never
    /// change) and `inside/`, the directory handed to [`Dir`].
    fn planted() -> (tempfile::TempDir, Dir, PathBuf) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("victim"), "precious").expect("write");
        std::fs::create_dir(tmp.path().join("inside")).expect("mkdir");
        let dir = Dir::open(&tmp.path().join("inside")).expect("open");
        (tmp, dir, outside)
    }

    #[test]
    fn a_planted_link_is_never_written_through() {
        let (_tmp, dir, outside) = planted();
        let victim = outside.join("victim");
        std::os::unix::fs::symlink(&victim, dir.join(Path::new("lock"))).expect("symlink");
        std::os::unix::fs::symlink(&outside, dir.join(Path::new("logs"))).expect("symlink");
        let err =
            dir.open_file(Path::new("lock"), OpenOptions::ReadWriteCreate).expect_err("a link");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let err = dir
            .open_file(Path::new("logs/victim"), OpenOptions::AppendCreate)
            .expect_err("through a link");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        dir.write_atomic(Path::new("logs/new"), b"x").expect_err("through a link");
        dir.create_dir_all(Path::new("logs/sub"), 0o700).expect_err("through a link");
        // The link itself is replaced, not written through.
        dir.write_atomic(Path::new("lock"), b"mine").expect("replace");
        assert_eq!(std::fs::read(dir.join(Path::new("lock"))).expect("read"), b"mine");
        dir.remove_tree(Path::new("logs")).expect("remove the link");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
        assert!(!outside.join("new").exists() && !outside.join("sub").exists());
    }

    #[test]
    fn a_hard_link_planted_as_a_log_is_replaced_never_written_through() {
        let (_tmp, dir, outside) = planted();
        let victim = outside.join("victim");
        std::fs::hard_link(&victim, dir.join(Path::new("a.log"))).expect("link");
        let mut log =
            dir.open_file(Path::new("a.log"), OpenOptions::AppendCreate).expect("replaced");
        log.write_all(b"WRITTEN-BY-SERVICE\n").expect("write");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
        assert_eq!(
            std::fs::read(dir.join(Path::new("a.log"))).expect("log"),
            b"WRITTEN-BY-SERVICE\n"
        );
    }

    #[test]
    fn a_fifo_or_directory_is_not_a_file() {
        let (_tmp, dir, _outside) = planted();
        nix::unistd::mkfifo(&dir.join(Path::new("fifo")), Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        std::fs::create_dir(dir.join(Path::new("d"))).expect("mkdir");
        let err = dir.open_file(Path::new("fifo"), OpenOptions::Read).expect_err("fifo");
        assert!(err.to_string().contains("not a regular file"), "{err}");
        dir.open_file(Path::new("d"), OpenOptions::Read).expect_err("dir");
        dir.write_atomic(Path::new("d"), b"x").expect_err("dir");
    }

    #[test]
    fn remove_tree_removes_links_not_their_targets() {
        let (_tmp, dir, outside) = planted();
        let tree = dir.create_dir_all(Path::new("a/b"), 0o700).expect("mkdir");
        tree.write_atomic(Path::new("f"), b"x").expect("write");
        std::os::unix::fs::symlink(&outside, dir.join(Path::new("a/b/out"))).expect("symlink");
        assert!(dir.remove_tree(Path::new("a")).expect("remove"));
        assert!(!dir.join(Path::new("a")).exists());
        assert!(outside.join("victim").exists());
        assert!(!dir.remove_tree(Path::new("a")).expect("again"));
    }

    #[test]
    fn reads_are_bounded() {
        let (_tmp, dir, _outside) = planted();
        dir.write_atomic(Path::new("big"), &[b'x'; 100]).expect("write");
        assert_eq!(dir.read(Path::new("big"), 100).expect("read").map(|b| b.len()), Some(100));
        let err = dir.read(Path::new("big"), 99).expect_err("too big");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert_eq!(dir.read(Path::new("none"), 1).expect("missing"), None);
    }
}

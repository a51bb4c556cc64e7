//! The pod directory: where one checkout's state lives, and its layout.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::layout::{
    CONTROL_SOCKET, DETACHED_LOG, LOCK_FILE, LOG_SUFFIX, LOGS_DIR, MARKER, POD_TOML, STATE_FILE,
};

/// The machine-wide cache root, `${XDG_CACHE_HOME:-$HOME/.cache}/omnidev`,
/// computed from the given variable values (an empty or relative
/// `XDG_CACHE_HOME` counts as unset, as the XDG specification says).
///
/// ```
/// use std::path::PathBuf;
/// let root = omnidev_pod::pod::cache_root_from(None, Some("/home/ada".into())).unwrap();
/// assert_eq!(root, PathBuf::from("/home/ada/.cache/omnidev"));
/// let root = omnidev_pod::pod::cache_root_from(Some("/xdg".into()), Some("/home/ada".into())).unwrap();
/// assert_eq!(root, PathBuf::from("/xdg/omnidev"));
/// let root = omnidev_pod::pod::cache_root_from(Some("rel".into()), Some("/home/ada".into())).unwrap();
/// assert_eq!(root, PathBuf::from("/home/ada/.cache/omnidev"));
/// ```
pub fn cache_root_from(
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf> {
    if let Some(xdg) = crate::runtime::xdg_dir(xdg_cache_home) {
        return Ok(xdg.join("omnidev"));
    }
    home.filter(|v| !v.is_empty())
        .map(|home| PathBuf::from(home).join(".cache").join("omnidev"))
        .ok_or(Error::NoCacheDir)
}

/// The cache root from this process's `XDG_CACHE_HOME` and `HOME`.
pub fn cache_root() -> Result<PathBuf> {
    cache_root_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
}

/// A stable 8-hex-digit hash of a path: the first 4 bytes of the SHA-256 of
/// the path's raw bytes (as given; pass the canonical repo root), in
/// lower-case hex. This algorithm is part of the on-disk format and must never
/// change, or every user's pods would move.
///
/// ```
/// assert_eq!(omnidev_pod::pod::hash8(std::path::Path::new("/")).len(), 8);
/// ```
pub fn hash8(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let digest = Sha256::digest(path.as_os_str().as_bytes());
    let mut out = String::with_capacity(8);
    for byte in &digest[..4] {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// The default pod directory of a checkout: `<cache_root>/<basename>-<hash8>`.
///
/// ```
/// use std::path::Path;
/// let dir = omnidev_pod::pod::default_pod_dir(Path::new("/cache/omnidev"), Path::new("/src/omnigent"));
/// assert!(dir.starts_with("/cache/omnidev"));
/// assert!(dir.file_name().unwrap().to_str().unwrap().starts_with("omnigent-"));
/// ```
pub fn default_pod_dir(cache_root: &Path, repo_root: &Path) -> PathBuf {
    let base = repo_root
        .file_name()
        .map_or_else(|| "root".to_owned(), |n| n.to_string_lossy().into_owned());
    cache_root.join(format!("{base}-{}", hash8(repo_root)))
}

/// Lexically normalises `value`, a path meant to stay inside a base
/// directory (the pod, or the checkout for a service's `cwd`): `.` parts
/// are dropped and `a/..` pairs folded. Refused, with the reason: an
/// empty value, an absolute path, and a path whose `..` climbs out of the
/// base. The result may be empty (the base itself).
///
/// ```
/// use std::path::Path;
/// use omnidev_pod::pod::relative_inside;
/// assert_eq!(relative_inside("a/./b/../c").unwrap(), Path::new("a/c"));
/// assert!(relative_inside("a/../../b").is_err());
/// assert!(relative_inside("/abs/path").is_err());
/// assert!(relative_inside("../x").is_err());
/// ```
pub fn relative_inside(value: &str) -> std::result::Result<PathBuf, &'static str> {
    use std::path::Component;
    if value.is_empty() {
        return Err("the path is empty");
    }
    let mut out = PathBuf::new();
    for component in Path::new(value).components() {
        match component {
            Component::Prefix(_) | Component::RootDir => {
                return Err("an absolute path is not allowed here; give a relative one");
            }
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err("`..` leads out of the directory it is relative to");
                }
            }
            Component::Normal(part) => out.push(part),
        }
    }
    Ok(out)
}

/// Creates `dir` and its missing parents, new ones with mode 0700.
pub(crate) fn ensure_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(Error::io("create the directory", dir))
}

/// [`ensure_dir`], then tightens `dir`'s mode to 0700 (for directories
/// omnidev owns: the cache root, a pod).
pub(crate) fn create_private_dir(dir: &Path) -> Result<()> {
    ensure_dir(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(Error::io("set the mode of", dir))
}

const MARKER_TEXT: &str = "This directory is an omnidev pod; `omnidev clean` removes it.\n";

/// Files whose presence shows a pod made before the marker existed.
const LAYOUT: &[&str] = &[POD_TOML, LOCK_FILE, STATE_FILE, CONTROL_SOCKET];

/// What a directory given as a pod directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirKind {
    /// Nothing there yet.
    Missing,
    /// An empty directory: omnidev may make it a pod.
    Empty,
    /// A directory omnidev created: it has the [`MARKER`] file, or the
    /// pod layout (`pod.toml`, `omnidev.lock`, `state.json` or
    /// `control.sock`).
    Pod,
    /// Anything else (a file, or a directory with other contents): never
    /// written to, chmod-ed or removed.
    Other,
}

/// What `dir` is, the one pod check used by `up`, `up --clean`,
/// `--pod-dir` and `omnidev clean`. A symbolic link is followed only when
/// it names the pod directory itself.
///
/// ```
/// use omnidev_pod::pod::{examine, DirKind};
/// let tmp = tempfile::tempdir().unwrap();
/// assert_eq!(examine(&tmp.path().join("new")).unwrap(), DirKind::Missing);
/// assert_eq!(examine(tmp.path()).unwrap(), DirKind::Empty);
/// std::fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
/// assert_eq!(examine(tmp.path()).unwrap(), DirKind::Other);
/// ```
pub fn examine(dir: &Path) -> Result<DirKind> {
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(DirKind::Missing),
        Err(e) => return Err(Error::io("examine", dir)(e)),
    };
    if !meta.is_dir() {
        return Ok(DirKind::Other);
    }
    if std::iter::once(MARKER)
        .chain(LAYOUT.iter().copied())
        .any(|name| std::fs::symlink_metadata(dir.join(name)).is_ok())
    {
        return Ok(DirKind::Pod);
    }
    let mut entries = std::fs::read_dir(dir).map_err(Error::io("read", dir))?;
    Ok(if entries.next().is_none() {
        DirKind::Empty
    } else {
        DirKind::Other
    })
}

fn not_a_pod(dir: &Path) -> Error {
    Error::NotAPod {
        path: dir.to_path_buf(),
    }
}

/// A checkout's pod directory and the paths inside it.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// let pod = omnidev_pod::Pod::create(tmp.path().join("pod"), &["logs".into()]).unwrap();
/// assert!(pod.dir().join("logs").is_dir());
/// assert_eq!(pod.lock_file(), tmp.path().join("pod/omnidev.lock"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    dir: PathBuf,
}

impl Pod {
    /// A handle on `dir` without touching the file system.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// Creates `dir` (mode 0700, parents as needed) with its marker file,
    /// its `logs` directory and the profile's sub-directories `dirs`
    /// (relative to it, checked by [`relative_inside`]). An existing pod or
    /// empty directory is kept and its mode tightened to 0700; any other
    /// existing directory is refused untouched ([`Error::NotAPod`]). A symbolic link met on the way to a
    /// sub-directory is never followed: it is an [`Error::OutsidePod`].
    pub fn create(dir: impl Into<PathBuf>, dirs: &[String]) -> Result<Self> {
        let dir = dir.into();
        // Checked before anything is created or chmod-ed: a directory that
        // is not a pod is the user's, and stays exactly as it was.
        if examine(&dir)? == DirKind::Other {
            return Err(not_a_pod(&dir));
        }
        create_private_dir(&dir)?;
        let marker = dir.join(MARKER);
        if std::fs::symlink_metadata(&marker).is_err() {
            std::fs::write(&marker, MARKER_TEXT).map_err(Error::io("write", &marker))?;
        }
        let pod = Self { dir };
        pod.create_dir(Path::new(LOGS_DIR))?;
        for sub in dirs {
            let relative = relative_inside(sub).map_err(|reason| Error::OutsidePod {
                path: pod.dir.join(sub),
                reason: reason.to_owned(),
            })?;
            pod.create_dir(&relative)?;
        }
        Ok(pod)
    }

    /// Creates the directory `relative` (already checked by
    /// [`relative_inside`]) inside the pod (created first when missing),
    /// one component at a time, each new one with mode 0700, refusing to pass through a symbolic link or
    /// a file. Returns its path.
    pub fn create_dir(&self, relative: &Path) -> Result<PathBuf> {
        ensure_dir(&self.dir)?;
        let mut path = self.dir.clone();
        for component in relative.components() {
            let std::path::Component::Normal(part) = component else {
                return Err(Error::OutsidePod {
                    path: self.dir.join(relative),
                    reason: "the path is not a plain relative path".to_owned(),
                });
            };
            path.push(part);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    let target = std::fs::read_link(&path)
                        .map_or_else(|_| "?".to_owned(), |t| t.display().to_string());
                    return Err(Error::OutsidePod {
                        reason: format!("it is a symbolic link (to {target})"),
                        path,
                    });
                }
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(Error::OutsidePod {
                        path,
                        reason: "a file is in the way of a directory".to_owned(),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                        Ok(()) => {}
                        // Created meanwhile: look again on the next start.
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                        Err(e) => {
                            return Err(Error::Io {
                                action: "create the pod sub-directory",
                                path,
                                source: e,
                            });
                        }
                    }
                }
                Err(e) => {
                    return Err(Error::Io {
                        action: "examine",
                        path,
                        source: e,
                    });
                }
            }
        }
        Ok(path)
    }

    /// Removes the pod directory and everything in it (`--clean`, `omnidev
    /// clean`). Nothing outside it is touched: symbolic links inside are
    /// removed, not followed. A missing directory is not an error; a
    /// directory that is not a pod (see [`examine`]) is refused untouched.
    pub fn clean(dir: &Path) -> Result<()> {
        if examine(dir)? == DirKind::Other {
            return Err(not_a_pod(dir));
        }
        match std::fs::remove_dir_all(dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::Io {
                action: "remove the pod directory",
                path: dir.to_path_buf(),
                source: e,
            }),
        }
    }

    /// The pod directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<pod>/pod.toml`: the allocated ports and the repo path.
    pub fn pod_toml(&self) -> PathBuf {
        self.dir.join(POD_TOML)
    }

    /// `<pod>/omnidev.lock`: the single-instance lock.
    pub fn lock_file(&self) -> PathBuf {
        self.dir.join(LOCK_FILE)
    }

    /// `<pod>/state.json`: the supervisor's record of running processes.
    pub fn state_file(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// `<pod>/logs`: per-service log files.
    pub fn logs_dir(&self) -> PathBuf {
        self.dir.join(LOGS_DIR)
    }

    /// `<pod>/logs/<service>.log`.
    pub fn log_file(&self, service: &str) -> PathBuf {
        self.logs_dir().join(format!("{service}{LOG_SUFFIX}"))
    }

    /// `<pod>/logs/omnidev.log`: a detached pod's own output.
    pub fn detached_log(&self) -> PathBuf {
        self.logs_dir().join(DETACHED_LOG)
    }

    /// `<pod>/control.sock`: the pointer to the running pod's control socket.
    pub fn control_socket(&self) -> PathBuf {
        self.dir.join(CONTROL_SOCKET)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash8_is_pinned() {
        // Changing this value moves every user's pod directory: never update
        // it without a migration.
        assert_eq!(hash8(Path::new("/home/user/src/omnigent")), "e3e2c4da");
    }

    #[test]
    fn pod_dir_is_stable_and_distinct() {
        let cache = Path::new("/c");
        let a = default_pod_dir(cache, Path::new("/src/a/omnigent"));
        let a2 = default_pod_dir(cache, Path::new("/src/a/omnigent"));
        let b = default_pod_dir(cache, Path::new("/src/b/omnigent"));
        assert_eq!(a, a2);
        assert_ne!(a, b);
        assert_eq!(a.parent(), b.parent());
    }

    #[test]
    fn create_sets_mode_0700_and_tightens_existing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("p");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let pod = Pod::create(&dir, &["data/omnigent".into()]).expect("create");
        let mode = std::fs::metadata(pod.dir())
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700);
        assert!(dir.join("data/omnigent").is_dir());
    }

    #[test]
    fn clean_removes_only_the_pod() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("keep"), "x").expect("write");
        let pod = Pod::create(tmp.path().join("pod"), &["logs".into()]).expect("create");
        std::os::unix::fs::symlink(&outside, pod.dir().join("link")).expect("symlink");
        Pod::clean(pod.dir()).expect("clean");
        assert!(!pod.dir().exists());
        assert!(outside.join("keep").exists());
        Pod::clean(pod.dir()).expect("clean of a missing dir");
    }
}

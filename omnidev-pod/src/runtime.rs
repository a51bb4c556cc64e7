//! The per-user runtime directory: what every pod of one user shares,
//! whatever its cache root — the port allocation lock, the registry of
//! pods holding ports, and the control sockets (short paths that always fit
//! a Unix socket address).
//!
//! It is `$XDG_RUNTIME_DIR/omnidev` when `XDG_RUNTIME_DIR` is an absolute
//! path to an existing directory, else `/tmp/omnidev-<uid>`. A relative or
//! empty `XDG_RUNTIME_DIR` is ignored, as the XDG base directory
//! specification says. The directory is made with mode 0700 and must be a
//! real directory owned by the user: a symbolic link, or a directory owned
//! by someone else (another user squatting `/tmp/omnidev-<uid>`), is an
//! error, never used. The cache root and every pod directory are held to
//! the same rule ([`check_private`]), and so is a directory writable by
//! group or others: the refusal says what to run.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The longest path a Unix domain socket can be bound at on every
/// platform omnidev runs on (`sun_path` is 108 bytes on Linux, 104 on
/// macOS, one of them the terminating NUL).
pub const MAX_SOCKET_PATH: usize = 103;

/// The socket file's name inside its directory.
const SOCKET_NAME: &str = "control.sock";

/// The runtime directory for `xdg_runtime_dir` (the variable's value) and
/// user `uid`, without touching anything (see the module docs). An
/// `XDG_RUNTIME_DIR` that does not exist is passed over.
///
/// ```
/// use std::path::Path;
/// let dir = omnidev_pod::runtime::runtime_dir_from(Some("relative".into()), 1000);
/// assert_eq!(dir, Path::new("/tmp/omnidev-1000"));
/// let tmp = tempfile::tempdir().unwrap();
/// let dir = omnidev_pod::runtime::runtime_dir_from(Some(tmp.path().into()), 1000);
/// assert_eq!(dir, tmp.path().join("omnidev"));
/// ```
pub fn runtime_dir_from(xdg_runtime_dir: Option<OsString>, uid: u32) -> PathBuf {
    match omnidev_core::fs::xdg_dir(xdg_runtime_dir).filter(|dir| dir.is_dir()) {
        Some(dir) => dir.join("omnidev"),
        None => PathBuf::from(format!("/tmp/omnidev-{uid}")),
    }
}

/// The variable a pod's services get naming omnidev's runtime directory
/// itself: their `XDG_RUNTIME_DIR` is the pod's own (`<pod>/run`), so an
/// omnidev run by a service (an agent's `omnidev status`) reads this one
/// instead and meets the same registry, lock and sockets as its pod.
pub const OWN_RUNTIME_DIR: &str = "OMNIDEV_RUNTIME_DIR";

/// The runtime directory of this process's user: `OMNIDEV_RUNTIME_DIR`
/// when it is an absolute path (set for a pod's services), else from
/// `XDG_RUNTIME_DIR` ([`runtime_dir_from`]). Either is held to the same
/// checks ([`check_private`]) before use.
pub fn runtime_dir() -> PathBuf {
    if let Some(dir) = omnidev_core::fs::xdg_dir(std::env::var_os(OWN_RUNTIME_DIR)) {
        return dir;
    }
    let uid = nix::unistd::getuid().as_raw();
    runtime_dir_from(std::env::var_os("XDG_RUNTIME_DIR"), uid)
}

/// What a private directory holds, for the refusal's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Private {
    /// The runtime directory: a link there is refused, never followed.
    Runtime,
    /// The cache root (a link naming it is followed: the user's choice).
    CacheRoot,
    /// A pod directory (likewise).
    Pod,
}

impl Private {
    fn holds(self) -> &'static str {
        match self {
            Self::Runtime => "omnidev's locks and sockets",
            Self::CacheRoot => "omnidev's pods",
            Self::Pod => "a pod",
        }
    }
}

/// The runtime directory `dir`, made private ([`make_private`]).
pub fn ensure_private(dir: &Path) -> Result<()> {
    make_private(dir, Private::Runtime)
}

/// Creates `dir` with mode 0700 (missing parents too, each 0700), or
/// checks an existing one ([`check_private`]) and tightens its mode to
/// 0700.
pub fn make_private(dir: &Path, holds: Private) -> Result<()> {
    let create = || match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        created => created,
    };
    let mut created = create();
    if let (Err(e), Some(parent)) = (&created, dir.parent())
        && e.kind() == std::io::ErrorKind::NotFound
    {
        // A parent is missing (a new `$XDG_RUNTIME_DIR/omnidev/<hash>`).
        make_private(parent, holds)?;
        created = create();
    }
    created.map_err(Error::io("create the directory", dir))?;
    check_private(dir, holds)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(Error::io("set the mode of", dir))
}

/// Refuses an existing `dir` that is not a directory, is not owned by this
/// user or is writable by group or others (another user could plant files
/// in it), saying what to run; a missing one passes.
pub fn check_private(dir: &Path, holds: Private) -> Result<()> {
    let refuse_link = matches!(holds, Private::Runtime);
    match omnidev_core::fs::check_private(dir, refuse_link).map_err(Error::io("examine", dir))? {
        None => Ok(()),
        Some(unsafe_dir) => Err(Error::UnsafeDir {
            path: dir.to_path_buf(),
            holds: holds.holds(),
            reason: unsafe_dir.reason,
            fix: unsafe_dir.fix,
        }),
    }
}

/// Where the control socket of the pod at `pod_dir` lives:
/// `<runtime>/<16 hex digits of the pod directory's SHA-256>/control.sock`.
///
/// ```
/// use std::path::Path;
/// let runtime = Path::new("/run/user/1000/omnidev");
/// let long = Path::new("/home/ada/.cache/omnidev").join("x".repeat(200));
/// let socket = omnidev_pod::runtime::socket_path(runtime, &long);
/// assert!(socket.starts_with(runtime));
/// assert!(socket.as_os_str().len() <= omnidev_pod::runtime::MAX_SOCKET_PATH);
/// ```
pub fn socket_path(runtime: &Path, pod_dir: &Path) -> PathBuf {
    socket_dir(runtime, pod_dir).join(SOCKET_NAME)
}

/// The pod's socket directory in `runtime`: its control socket's, and its
/// database servers' (`<runtime>/<16 hex digits>`; `pod_dir` as
/// [`socket_path`] takes it, canonical).
pub fn socket_dir(runtime: &Path, pod_dir: &Path) -> PathBuf {
    runtime.join(crate::ids::path_hash(pod_dir, 8))
}

/// Checks that `path` fits a Unix socket address.
pub fn check_socket_path(path: &Path) -> Result<()> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(Error::SocketPathTooLong {
            path: path.to_path_buf(),
            len,
            max: MAX_SOCKET_PATH,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_or_missing_runtime_dir_falls_back_to_tmp() {
        assert_eq!(runtime_dir_from(Some("run".into()), 7), Path::new("/tmp/omnidev-7"));
        assert_eq!(runtime_dir_from(None, 7), Path::new("/tmp/omnidev-7"));
        assert_eq!(
            runtime_dir_from(Some("/does/not/exist/here".into()), 7),
            Path::new("/tmp/omnidev-7")
        );
    }

    #[test]
    fn private_dir_is_made_0700_and_a_link_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("run/omnidev");
        ensure_private(&dir).expect("create");
        let mode = std::fs::metadata(&dir).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        ensure_private(&dir).expect("again");
        let mode = std::fs::metadata(&dir).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);

        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("mkdir");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&elsewhere, &link).expect("symlink");
        let err = ensure_private(&link).expect_err("a link must be refused");
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }

    #[test]
    fn socket_paths_are_short_distinct_and_checked() {
        let runtime = Path::new("/tmp/omnidev-1000");
        let a = socket_path(runtime, Path::new("/c/one/omnigent-00000000"));
        let b = socket_path(runtime, Path::new("/d/one/omnigent-00000000"));
        assert_ne!(a, b);
        check_socket_path(&a).expect("fits");
        let long = Path::new("/").join("y".repeat(120));
        let err = check_socket_path(&long).expect_err("too long");
        assert!(err.to_string().contains("121 bytes"), "{err}");
    }
}

//! The `check` hot path: read the cache, and when it is stale start one
//! detached `omnidev refresh`. Nothing here touches the network, and the only
//! process it may start is that refresh.

use std::fs::{File, TryLockError};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

use crate::cache::{CheckCache, NewerCommit};
use crate::{Error, Paths, Result, fs};

/// Environment variable naming the program started as the background
/// refresh (default: the running executable). Meant for tests, which point
/// it at a script that records each start.
pub const REFRESH_EXE_ENV: &str = "OMNIDEV_REFRESH_EXE";

/// Environment variable through which the background refresh learns the
/// descriptor of the single-flight lock it inherited.
pub const REFRESH_LOCK_FD_ENV: &str = "OMNIDEV_REFRESH_LOCK_FD";

/// What the cache says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// The cache entry; `None` when missing or corrupt.
    pub cache: Option<CheckCache>,
    /// Whether a refresh is due.
    pub stale: bool,
    /// The update on offer, if any.
    pub update: Option<NewerCommit>,
}

/// Reads the cache and decides. Reads one small file; spawns nothing.
pub fn evaluate(paths: &Paths, now: SystemTime) -> CheckReport {
    let cache = CheckCache::load(&paths.check_cache());
    let stale = cache.as_ref().is_none_or(|cache| cache.is_stale(now));
    let update = cache.as_ref().and_then(CheckCache::available_update);
    CheckReport { cache, stale, update }
}

/// Remembers that the user declined `commit`, so it is not offered again.
pub fn decline(paths: &Paths, commit: &str) -> Result<()> {
    CheckCache::modify(&paths.check_cache(), |current| CheckCache {
        declined_commit: Some(commit.to_owned()),
        ..current.unwrap_or_default()
    })
    .map(drop)
}

/// The outcome of [`start_background_refresh`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshStart {
    /// A refresh was started with this pid.
    Started(u32),
    /// Another refresh holds the lock.
    AlreadyRunning,
    /// The cache became fresh meanwhile (a refresh just finished).
    NotNeeded,
}

/// The program to start as the background refresh: `$OMNIDEV_REFRESH_EXE`
/// if set, else the running executable.
pub fn refresh_program() -> Result<PathBuf> {
    if let Some(program) = std::env::var_os(REFRESH_EXE_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(program));
    }
    std::env::current_exe().map_err(Error::spawn("omnidev (current executable)"))
}

/// Starts `program refresh` detached (own session, stdio on /dev/null),
/// at most one at a time.
///
/// Single flight: the caller takes a non-blocking exclusive `flock` on the
/// lock file and hands the locked descriptor to the child, which keeps the
/// lock until it exits — so there is no window between "parent gave up the
/// lock" and "child took it", and a crashed refresh never leaves a stale
/// lock behind. After taking the lock the cache is read again, so a check
/// that raced a refresh which has just finished does not start another.
pub fn start_background_refresh(
    paths: &Paths,
    program: &Path,
    now: SystemTime,
) -> Result<RefreshStart> {
    fs::create_private_dir(&paths.cache_dir)?;
    let lock_path = paths.refresh_lock();
    let lock = omnidev_core::fs::open(&lock_path, omnidev_core::fs::OpenOptions::ReadWriteCreate)
        .map_err(|source| Error::io("open", &lock_path, source))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(RefreshStart::AlreadyRunning),
        Err(TryLockError::Error(source)) => return Err(Error::io("lock", &lock_path, source)),
    }
    if !evaluate(paths, now).stale {
        return Ok(RefreshStart::NotNeeded);
    }
    spawn_detached(program, &lock).map(RefreshStart::Started)
}

fn spawn_detached(program: &Path, lock: &File) -> Result<u32> {
    let fd = lock.as_raw_fd();
    let mut command = Command::new(program);
    command
        .arg("refresh")
        .env(REFRESH_LOCK_FD_ENV, fd.to_string())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (setsid, fcntl) on a descriptor it owns.
    unsafe {
        command.pre_exec(move || {
            // A new session: no controlling terminal, no signals from the
            // shell's job control, survives the shell exiting.
            nix::unistd::setsid()?;
            // Keep the locked descriptor open across exec so the child
            // holds the single-flight lock for its whole life.
            if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn().map_err(Error::spawn(program.display()))?;
    // The child is not waited for: it outlives this short-lived process and
    // is reparented to init, which reaps it.
    Ok(child.id())
}

/// Called by the background refresh: marks the inherited lock descriptor
/// close-on-exec, so processes the refresh starts (git, uv) do not hold the
/// lock after it exits. The lock itself stays held until this process exits.
pub fn adopt_inherited_lock() {
    let Some(fd) =
        std::env::var(REFRESH_LOCK_FD_ENV).ok().and_then(|value| value.parse::<i32>().ok())
    else {
        return;
    };
    // SAFETY: fcntl on an arbitrary integer is harmless: an invalid
    // descriptor yields EBADF, which is ignored.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags != -1 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::unix_seconds;

    fn paths(dir: &Path) -> Paths {
        Paths { config_dir: dir.join("config/omnidev"), cache_dir: dir.join("cache/omnidev") }
    }

    #[test]
    fn missing_cache_is_stale_and_offers_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let report = evaluate(&paths(dir.path()), SystemTime::now());
        assert!(report.stale);
        assert_eq!(report.update, None);
    }

    #[test]
    fn decline_is_remembered() {
        let dir = tempfile::tempdir().expect("temp dir");
        let paths = paths(dir.path());
        let now = SystemTime::now();
        CheckCache {
            checked_at: unix_seconds(now),
            installed_commit: Some("a".into()),
            remote_commit: Some("b".into()),
            ..CheckCache::default()
        }
        .save(&paths.check_cache())
        .expect("save");
        assert!(evaluate(&paths, now).update.is_some());
        decline(&paths, "b").expect("decline");
        let report = evaluate(&paths, now);
        assert!(!report.stale);
        assert_eq!(report.update, None);
    }

    #[test]
    fn held_lock_means_already_running() {
        let dir = tempfile::tempdir().expect("temp dir");
        let paths = paths(dir.path());
        fs::create_private_dir(&paths.cache_dir).expect("dir");
        let held = File::create(paths.refresh_lock()).expect("lock file");
        held.lock().expect("lock");
        let outcome =
            start_background_refresh(&paths, Path::new("/nonexistent"), SystemTime::now())
                .expect("no spawn attempted");
        assert_eq!(outcome, RefreshStart::AlreadyRunning);
    }

    #[test]
    fn fresh_cache_after_lock_means_not_needed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let paths = paths(dir.path());
        let now = SystemTime::now();
        CheckCache { checked_at: unix_seconds(now), ..CheckCache::default() }
            .save(&paths.check_cache())
            .expect("save");
        let outcome = start_background_refresh(&paths, Path::new("/nonexistent"), now)
            .expect("no spawn attempted");
        assert_eq!(outcome, RefreshStart::NotNeeded);
    }
}

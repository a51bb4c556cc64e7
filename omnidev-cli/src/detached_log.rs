//! The detached pod's own output, `<pod>/logs/omnidev.log`: the file its
//! background process gets as stdout and stderr, and the one rotating
//! writer of log files ([`omnidev_core::logs::RotatingLog`]) that its
//! headless output goes through.

use std::path::{Path, PathBuf};

use omnidev_core::fs::Kind;
use omnidev_pod::Pod;

/// The pod directory of this process when it is a detached pod's
/// background process whose stdout is that pod's `logs/omnidev.log`.
static OWN_LOG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Opens `<pod>/logs/omnidev.log` for appending through the pod's
/// directory handles (a link planted there is refused, never written
/// through); with `rotate_first`, the previous run's file is kept as
/// `omnidev.log.1` (and older ones shifted, as the service logs are) first.
pub fn open(pod: &Pod, rotate_first: bool) -> std::io::Result<std::fs::File> {
    let logs = omnidev_core::fs::Dir::open(pod.dir())?
        .create_dir_all(Path::new(omnidev_pod::layout::LOGS_DIR), 0o700)?;
    let name = Path::new(omnidev_pod::layout::DETACHED_LOG);
    let keep = omnidev_core::LogConfig::default().keep_files;
    // Anything but a file there is refused by the open below, never
    // rotated away or written through.
    let existing = logs.stat(name)?;
    if rotate_first && existing.is_some_and(|e| e.kind == Kind::File && e.size > 0) {
        omnidev_core::logs::rotate_away(&logs, name, keep)?;
    }
    logs.open_file(name, omnidev_core::fs::OpenOptions::AppendCreate)
}

/// Marks this process as the detached pod of `pod_dir` when its stdout is
/// that pod's `logs/omnidev.log` ([`own`]).
pub fn follow(pod_dir: PathBuf) {
    let log = omnidev_core::fs::Dir::open(&pod_dir).and_then(|pod| {
        pod.sub(Path::new(omnidev_pod::layout::LOGS_DIR))?
            .stat(Path::new(omnidev_pod::layout::DETACHED_LOG))
    });
    if let (Ok(stdout), Ok(Some(log))) = (nix::sys::stat::fstat(std::io::stdout()), log)
        && stdout.st_ino == log.ino
    {
        let _ = OWN_LOG.set(pod_dir);
    }
}

/// In the background process of `up --detach` (its stdout and stderr are
/// `logs/omnidev.log`): the writer its output goes through, rotated by
/// the service logs' size and count, checked as each line begins; after a
/// rotation stdout and stderr are pointed at the new file (`dup2`), so
/// the few lines written straight to them (a last word, a panic) land in
/// the current file too. `None` in any other process, or when stdout is
/// not that file (run by hand, `omnidev detached` writes wherever its
/// stdout goes, unrotated).
pub fn own() -> Option<omnidev_core::logs::RotatingLog> {
    let pod = Pod::at(OWN_LOG.get()?.clone());
    let config = omnidev_core::LogConfig::default();
    let log = omnidev_core::logs::RotatingLog::open(
        pod.detached_log(),
        config.max_file_bytes,
        config.keep_files,
    )
    .ok()?;
    Some(log.on_rotate(move || {
        if let Ok(file) = open(&pod, false) {
            let _ = nix::unistd::dup2_stdout(&file);
            let _ = nix::unistd::dup2_stderr(&file);
        }
    }))
}

//! `omnidev clean`: remove this checkout's pod directory (never while the
//! pod runs, never anything outside it).

use std::process::ExitCode;

use omnidev_pod::{Pod, PodLock};

use crate::cli::CleanArgs;
use crate::error::Error;

/// Removes the socket a pod killed with `kill -9` left in the per-user
/// runtime directory: only a socket, only one of this user's (the pod is
/// stopped: its lock was held).
fn remove_stale_socket(socket: &std::path::Path) {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let Ok(meta) = std::fs::symlink_metadata(socket) else {
        return;
    };
    if meta.file_type().is_socket() && meta.uid() == nix::unistd::getuid().as_raw() {
        let _ = std::fs::remove_file(socket);
    }
}

/// Runs `omnidev clean`.
pub fn run(args: &CleanArgs) -> miette::Result<ExitCode> {
    let pod_dir = &crate::session::pod_dir(&args.pod)?;
    if !pod_dir.exists() {
        note!(
            "omnidev: nothing to clean ({} does not exist)",
            pod_dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    // Before the lock, whose file would make any directory look like a pod.
    if omnidev_pod::pod::examine(pod_dir).map_err(Error::from)? == omnidev_pod::pod::DirKind::Other
    {
        return Err(Error::from(omnidev_pod::Error::NotAPod {
            path: pod_dir.clone(),
        })
        .into());
    }
    // Holding the lock while removing keeps an `omnidev up` from starting
    // halfway through; it fails (naming the pid) while the pod runs.
    let lock = PodLock::acquire(pod_dir).map_err(Error::from)?;
    // Read before the pointer goes with the pod directory.
    let socket = crate::control::socket_path(pod_dir);
    Pod::clean(pod_dir).map_err(Error::from)?;
    remove_stale_socket(&socket);
    drop(lock);
    note!("omnidev: removed {}", pod_dir.display());
    Ok(ExitCode::SUCCESS)
}

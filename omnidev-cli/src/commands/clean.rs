//! `omnidev clean`: remove what omnidev made in this checkout's pod
//! directory (never while the pod runs, only in a directory carrying
//! omnidev's pod identity, never anything outside it).

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use omnidev_pod::pod::{Cleaned, DirKind, Identity};
use omnidev_pod::{Pod, PodLock};

use crate::cli::CleanArgs;
use crate::error::Error;

/// Removes the socket a pod killed with `kill -9` left in the per-user
/// runtime directory: the one this pod directory itself serves at (keyed by
/// its own path, never the target its `control.sock` link names: a copy's
/// link names the original's live socket), only a socket, only one of this
/// user's (the pod is stopped: its lock was held).
pub(crate) fn remove_stale_socket(pod_dir: &Path) {
    let Ok(socket) = crate::control::serving_path(pod_dir) else {
        return;
    };
    let (Some(parent), Some(name)) = (socket.parent(), socket.file_name()) else {
        return;
    };
    let Ok(dir) = omnidev_core::fs::Dir::open(parent) else {
        return;
    };
    if let Ok(Some(entry)) = dir.stat(Path::new(name))
        && entry.kind == omnidev_core::fs::Kind::Socket
        && entry.uid == nix::unistd::getuid().as_raw()
    {
        let _ = dir.remove_file(Path::new(name));
        drop(dir);
        let _ = std::fs::remove_dir(parent);
    }
}

/// Cleans the stopped pod at `pod_dir` (the caller checked it is one and
/// holds its lock), and the socket it left; what to say about it.
pub(crate) fn clean_pod(pod_dir: &Path, identity: &Identity) -> Result<String, Error> {
    // Read before the directory goes: a copy's socket is the original's.
    let own = !matches!(identity, Identity::Copy(_));
    let Cleaned {
        removed,
        kept,
        copy_of,
    } = Pod::clean(pod_dir)?;
    if own {
        remove_stale_socket(pod_dir);
    }
    let shown = crate::terminal_text::quote_path(pod_dir);
    let mut text = if removed {
        format!("omnidev: removed {shown}")
    } else {
        let kept: Vec<String> = kept
            .iter()
            .map(|k| crate::terminal_text::quote(k).into_owned())
            .collect();
        format!(
            "omnidev: removed what omnidev made in {shown}; kept what it did not make: {} \
             (remove them yourself to have the directory gone)",
            kept.join(", ")
        )
    };
    if let Some(original) = copy_of {
        let _ = write!(
            text,
            " (it was a copy of the pod {}, which was not touched)",
            crate::terminal_text::quote_path(&original)
        );
    }
    Ok(text)
}

/// Runs `omnidev clean`.
pub fn run(args: &CleanArgs) -> miette::Result<ExitCode> {
    let pod_dir = &crate::session::pod_dir(&args.pod)?;
    // Before the lock, whose file would be created in any directory. A
    // directory that cannot be looked at is an error, not "missing".
    let identity = match omnidev_pod::pod::examine(pod_dir).map_err(Error::from)? {
        DirKind::Missing => {
            note!(
                "omnidev: nothing to clean ({} does not exist)",
                crate::terminal_text::quote_path(pod_dir)
            );
            return Ok(ExitCode::SUCCESS);
        }
        DirKind::Pod(identity) => identity,
        DirKind::Empty | DirKind::Unmarked | DirKind::Other(_) => {
            // The same refusal, with the reason, as the removal itself gives.
            return Err(Error::from(Pod::clean(pod_dir).err().unwrap_or_else(|| {
                omnidev_pod::Error::NotAPod {
                    path: pod_dir.clone(),
                    reason: "it is empty and carries no pod identity".to_owned(),
                }
            }))
            .into());
        }
    };
    // Holding the lock while removing keeps an `omnidev up` from starting
    // halfway through; it fails (naming the pid) while the pod runs.
    let lock = PodLock::acquire(pod_dir).map_err(Error::from)?;
    let said = clean_pod(pod_dir, &identity)?;
    drop(lock);
    note!("{said}");
    Ok(ExitCode::SUCCESS)
}

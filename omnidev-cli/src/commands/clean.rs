//! `omnidev clean`: remove what omnidev made in this checkout's pod
//! directory (never while the pod runs, only in a directory carrying
//! omnidev's pod identity, never anything outside it).

use std::process::ExitCode;

use omnidev_pod::pod::DirKind;
use omnidev_pod::{Pod, PodLock};

use crate::cli::CleanArgs;
use crate::error::Error;

/// Runs `omnidev clean`.
pub fn run(args: &CleanArgs) -> miette::Result<ExitCode> {
    let pod_dir = &crate::session::pod_dir(&args.pod)?;
    // Before the lock, whose file would be created in any directory. A
    // directory that cannot be looked at is an error, not "missing".
    let identity = match omnidev_pod::pod::examine(pod_dir).map_err(Error::from)? {
        DirKind::Missing => {
            note!(
                "omnidev: nothing to clean ({} does not exist)",
                omnidev_core::text::quote_path(pod_dir)
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
    let lock =
        PodLock::acquire_to_remove(pod_dir, omnidev_pod::Removal::Clean).map_err(Error::from)?;
    let said = crate::session::clean_pod(pod_dir, &identity)?;
    drop(lock);
    note!("{said}");
    Ok(ExitCode::SUCCESS)
}

//! The watch budget: the system's limit of watches, the share a pod's
//! rules take, and counting what a rule would need before it is set up.

use std::path::Path;

use omnidev_core::platform::{watch_limit, watches_held};

use super::WatchConfig;
use crate::error::Error;

/// Directories all the watch rules of a pod may watch together: half of
/// [`watch_limit`] (the rest is left to editors and other pods), or 4,096
/// when it cannot be read.
pub fn watch_budget() -> usize {
    watch_limit().map_or(4096, |limit| limit / 2)
}

/// `error` of setting up `needed` watches, when this process held `held`
/// before: the system's limit, with how many watches could be added.
pub(super) fn at_the_limit(
    error: Error,
    config: &WatchConfig,
    needed: usize,
    held: usize,
) -> Error {
    match &error {
        Error::Watch { source, .. } if is_limit(source) => {
            let added = watches_held().unwrap_or(0).saturating_sub(held);
            let limit = watch_limit().unwrap_or_default();
            Error::WatchLimit {
                patterns: config.patterns.join(", "),
                needed,
                added,
                short: needed.saturating_sub(added),
                limit,
                suggested: (limit + needed).next_power_of_two().max(524_288),
            }
        }
        _ => error,
    }
}

/// Whether a notify error is the system's watch limit.
pub(super) fn is_limit(error: &notify::Error) -> bool {
    matches!(error.kind, notify::ErrorKind::MaxFilesWatch)
}

/// The directories under `dir` (itself included), not following symbolic
/// links; `None` once there are more than `limit`.
pub(super) fn count_dirs(dir: &Path, limit: usize) -> Option<usize> {
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        count += 1;
        if count > limit {
            return None;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(std::result::Result::ok) {
            // file_type() does not follow a symbolic link.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    Some(count)
}

//! Config seeding: copy a user's real config into a new pod, never overwriting.

use std::path::PathBuf;

/// The most a seeded config file may hold: a user's config is far
/// smaller; a bound on what a link to something huge costs.
const MAX_SEED_BYTES: u64 = 16 << 20;

/// What happened to one seed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedOutcome {
    /// The source was copied to the destination.
    Copied {
        /// Copied from.
        from: PathBuf,
        /// Copied to.
        to: PathBuf,
    },
    /// The destination already exists; a pod-local file is never overwritten.
    Kept {
        /// The existing destination.
        to: PathBuf,
    },
    /// No source exists (or none could be resolved); nothing to copy.
    NoSource {
        /// The destination that stays absent.
        to: PathBuf,
        /// The candidate sources that were looked at.
        candidates: Vec<PathBuf>,
    },
    /// The copy failed: a warning for the caller to show, not a failure.
    Failed {
        /// Copying from.
        from: PathBuf,
        /// Copying to.
        to: PathBuf,
        /// Why.
        error: String,
    },
}

/// Copies the first existing file of `candidates` to `to` unless `to`
/// already exists. Never fails: problems are reported as
/// [`SeedOutcome::Failed`] for the caller to print as a warning.
///
/// ```
/// use omnidev_pod::seed::{seed_file, SeedOutcome};
/// let tmp = tempfile::tempdir().unwrap();
/// let src = tmp.path().join("config.yaml");
/// std::fs::write(&src, "a: 1").unwrap();
/// let dst = tmp.path().join("pod/config/config.yaml");
/// assert!(matches!(seed_file(&[src.clone()], &dst), SeedOutcome::Copied { .. }));
/// assert!(matches!(seed_file(&[src], &dst), SeedOutcome::Kept { .. }));
/// ```
pub fn seed_file(candidates: &[PathBuf], to: &std::path::Path) -> SeedOutcome {
    let to = to.to_path_buf();
    if to.exists() || to.symlink_metadata().is_ok() {
        return SeedOutcome::Kept { to };
    }
    let Some(from) = candidates.iter().find(|c| c.is_file()).cloned() else {
        return SeedOutcome::NoSource { to, candidates: candidates.to_vec() };
    };
    let failed = |error: std::io::Error, from: PathBuf, to: PathBuf| SeedOutcome::Failed {
        from,
        to,
        error: error.to_string(),
    };
    let (Some(parent), Some(name)) = (to.parent(), to.file_name()) else {
        let error = std::io::Error::new(std::io::ErrorKind::InvalidInput, "names no file");
        return failed(error, from, to);
    };
    let name = std::path::Path::new(name);
    let prepared = std::fs::create_dir_all(parent)
        .and_then(|()| omnidev_core::fs::Dir::open(parent))
        .and_then(|dir| {
            omnidev_core::fs::read_linked(&from, MAX_SEED_BYTES)?
                .ok_or_else(|| std::io::ErrorKind::NotFound.into())
                .map(|bytes| (dir, bytes))
        });
    let (dir, bytes) = match prepared {
        Ok(found) => found,
        Err(e) => return failed(e, from, to),
    };
    // A new file only, through the directory's handle: a file (or a link)
    // appearing meanwhile is kept, never overwritten or followed.
    let mut file = match dir.open_file(name, omnidev_core::fs::OpenOptions::CreateNew) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return SeedOutcome::Kept { to },
        Err(e) => return failed(e, from, to),
    };
    match std::io::Write::write_all(&mut file, &bytes).and_then(|()| file.sync_all()) {
        Ok(()) => SeedOutcome::Copied { from, to },
        Err(e) => {
            // The file is ours (created new) and torn: left in place it
            // would be kept as the pod-local config on every later start.
            drop(file);
            let _ = dir.remove_file(name);
            failed(e, from, to)
        }
    }
}

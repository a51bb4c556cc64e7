//! `omnidev gc [--dry-run]`: remove the pods whose checkout no longer
//! exists and that are not running, and free their ports.
//!
//! The pods looked at are the directories under the cache root and those
//! the per-user registry lists (pods made with `--pod-dir` elsewhere). Only
//! a directory carrying omnidev's pod identity is ever removed, and only
//! of what omnidev made in it ([`crate::session::clean_pod`]); a running pod
//! whose checkout is gone is kept and named with the `omnidev stop` that
//! ends it.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use omnidev_core::text::quote_path;
use omnidev_pod::pod::{DirKind, Identity};
use omnidev_pod::{LockState, PodLock};

use crate::cli::GcArgs;
use crate::error::Error;
use crate::output::write_stdout;

/// What gc decides for one pod directory.
#[derive(Debug)]
enum Verdict {
    /// Stopped, checkout gone: removed (or to be, with `--dry-run`).
    Remove { identity: Identity, repo: PathBuf },
    /// Kept, with the reason (and, for a running pod, what to run).
    Keep(String),
    /// Kept because something in it cannot be read: said, and gc exits 1
    /// (an unreadable file is never taken for an absent one).
    Fault(String),
}

/// Whether `repo` is gone: only a path that does not exist counts; one
/// that cannot be looked at is not taken for gone.
fn gone(repo: &Path) -> Result<bool, std::io::Error> {
    Ok(omnidev_core::fs::found(std::fs::symlink_metadata(repo))?.is_none())
}

/// What another removal (`by`, the command) holding the pod's lock is
/// said as.
fn being_removed(pid: Option<u32>, by: &str) -> String {
    let pid = pid.map_or_else(String::new, |p| format!(" (pid {p})"));
    format!("another `omnidev {by}`{pid} is removing it")
}

/// The verdict on a directory that no longer holds a pod (`kind`).
fn no_pod(kind: &DirKind) -> Option<Verdict> {
    let reason = match kind {
        DirKind::Missing => "it no longer exists",
        DirKind::Empty => "no pod is left in it",
        _ => return None,
    };
    Some(Verdict::Keep(reason.to_owned()))
}

/// The verdict on `dir`; one that meets a pod half removed (by another
/// `gc` or a `clean` holding its lock) says so instead.
fn judge(dir: &Path) -> Verdict {
    match judge_files(dir) {
        verdict @ (Verdict::Fault(_) | Verdict::Keep(_)) => match PodLock::state(dir) {
            Ok(LockState::Removing { pid, by }) => Verdict::Keep(being_removed(pid, by.word())),
            // Removed while it was looked at.
            _ => omnidev_pod::pod::examine(dir)
                .ok()
                .and_then(|kind| no_pod(&kind))
                .unwrap_or(verdict),
        },
        verdict @ Verdict::Remove { .. } => verdict,
    }
}

fn judge_files(dir: &Path) -> Verdict {
    let kind = match omnidev_pod::pod::examine(dir) {
        Ok(kind) => kind,
        Err(e) => return Verdict::Fault(format!("it cannot be examined: {e}")),
    };
    if let Some(verdict) = no_pod(&kind) {
        return verdict;
    }
    let DirKind::Pod(identity) = kind else {
        return Verdict::Keep("it carries no omnidev pod identity".to_owned());
    };
    let repo = match omnidev_pod::read_ports(dir) {
        Ok(record) => record.repo,
        Err(omnidev_pod::Error::NoPorts { .. }) => None,
        Err(e) => return Verdict::Fault(format!("its pod.toml cannot be read: {e}")),
    };
    let Some(repo) = repo else {
        return Verdict::Keep("it records no checkout".to_owned());
    };
    match gone(&repo) {
        Ok(false) => return Verdict::Keep(format!("its checkout {} exists", quote_path(&repo))),
        Ok(true) => {}
        Err(e) => {
            return Verdict::Fault(format!(
                "its checkout {} cannot be looked at: {e}",
                quote_path(&repo)
            ));
        }
    }
    match PodLock::state(dir) {
        Ok(LockState::Free) => Verdict::Remove { identity, repo },
        Ok(LockState::Held { pid }) => Verdict::Keep(format!(
            "it runs{} although its checkout {} is gone: `omnidev stop --pod-dir {}`, then \
             `omnidev gc`",
            pid.map_or_else(String::new, |p| format!(" (pid {p})")),
            quote_path(&repo),
            quote_path(dir)
        )),
        Ok(LockState::Removing { pid, by }) => Verdict::Keep(being_removed(pid, by.word())),
        Err(e) => Verdict::Fault(format!("its lock cannot be read: {e}")),
    }
}

/// Every pod directory to look at: those under the cache root and those
/// the registry lists, each once.
fn candidates(cache_root: &Path, runtime_dir: &Path) -> Result<BTreeSet<PathBuf>, Error> {
    let mut dirs: BTreeSet<PathBuf> = omnidev_pod::pod::cache_dirs(cache_root)
        .map_err(Error::io("list", cache_root))?
        .into_iter()
        .collect();
    let known: BTreeSet<PathBuf> = dirs.iter().filter_map(|d| d.canonicalize().ok()).collect();
    for dir in omnidev_pod::ports::registered_pods(runtime_dir)? {
        if !known.contains(&dir) {
            dirs.insert(dir);
        }
    }
    Ok(dirs)
}

/// Runs `omnidev gc`.
pub fn run(args: &GcArgs) -> miette::Result<ExitCode> {
    let cache_root = omnidev_pod::pod::cache_root().map_err(Error::Pod)?;
    let runtime_dir = omnidev_pod::runtime::runtime_dir();
    let mut out = String::new();
    let mut freed = Vec::new();
    let mut failed = false;
    for dir in candidates(&cache_root, &runtime_dir)? {
        match judge(&dir) {
            Verdict::Keep(reason) => {
                let _ = writeln!(out, "kept     {}: {reason}", quote_path(&dir));
            }
            Verdict::Fault(reason) => {
                failed = true;
                let _ = writeln!(out, "kept     {}: {reason}", quote_path(&dir));
            }
            Verdict::Remove { repo, .. } if args.dry_run => {
                let _ = writeln!(
                    out,
                    "would remove {} (stopped; its checkout {} is gone)",
                    quote_path(&dir),
                    quote_path(&repo)
                );
            }
            Verdict::Remove { identity, repo } => {
                // Under the pod's lock, so an `omnidev up` starting now
                // waits for the removal or makes gc skip the pod.
                let canonical = dir.canonicalize().unwrap_or_else(|_| dir.clone());
                let lock = match PodLock::acquire_to_remove(&dir, omnidev_pod::Removal::Gc) {
                    Ok(lock) => lock,
                    // Taken (or removed) since it was judged, by another
                    // gc or an `up`: what it is now.
                    Err(e) => {
                        let reason = match judge(&dir) {
                            Verdict::Keep(reason) => reason,
                            Verdict::Fault(_) | Verdict::Remove { .. } => {
                                failed = true;
                                e.to_string()
                            }
                        };
                        let _ = writeln!(out, "kept     {}: {reason}", quote_path(&dir));
                        continue;
                    }
                };
                let done = crate::session::clean_pod(&dir, &identity);
                drop(lock);
                match done {
                    Ok(said) => {
                        freed.push(canonical);
                        let said = said.trim_start_matches("omnidev: ");
                        let _ = writeln!(
                            out,
                            "removed  {} (its checkout {} is gone): {said}",
                            quote_path(&dir),
                            quote_path(&repo)
                        );
                    }
                    Err(e) => {
                        failed = true;
                        let _ = writeln!(out, "kept     {}: {e}", quote_path(&dir));
                    }
                }
            }
        }
    }
    if !freed.is_empty() {
        omnidev_pod::ports::unregister(&runtime_dir, &freed).map_err(Error::Pod)?;
    }
    // The seed results beyond the cache's bound, least recently used first.
    if !args.dry_run {
        let max = omnidev_pod::db_seed::MAX_CACHE_BYTES;
        for entry in omnidev_pod::db_seed::prune(&cache_root, max).map_err(Error::Pod)? {
            let _ = writeln!(
                out,
                "removed  the seed result {} of {} (the cache keeps {} MiB)",
                entry.key,
                entry.database,
                max / 1024 / 1024
            );
        }
    }
    if out.is_empty() {
        let _ = writeln!(out, "no pods under {}", quote_path(&cache_root));
    }
    write_stdout(&out)?;
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

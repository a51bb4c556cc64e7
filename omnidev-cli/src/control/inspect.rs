//! Looking at a pod from outside: the lock says whether it runs, the control
//! socket says how it is doing, `pod.toml` and `state.json` say the rest
//! when nothing answers.

use std::path::Path;

use omnidev_core::{ServiceState, ServiceStatus};
use omnidev_pod::{LockState, PodLock};

use super::protocol::{PodList, PodStatus, PodSummary, SCHEMA, ServiceReport};
use crate::error::{Error, Result};

/// Whether an `omnidev up` holds the pod's lock (`Free` when the pod
/// directory does not exist). A directory that cannot be looked at (no
/// permission on it or on the cache root, an I/O error) is an error naming
/// it, never taken for a pod that is not running.
pub fn lock_state(pod_dir: &Path) -> Result<LockState> {
    match std::fs::metadata(pod_dir) {
        Ok(meta) if meta.is_dir() => Ok(PodLock::state(pod_dir)?),
        Ok(_) => Ok(LockState::Free),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LockState::Free),
        Err(e) => Err(Error::io("look at the pod directory", pod_dir)(e)),
    }
}

/// The status of the pod in `pod_dir`, never waiting on a stale socket:
/// when no process holds the pod lock, the pod is not running, whatever
/// files are left; when one does, its control socket is asked (with a
/// timeout), and `state.json` is the fallback.
pub fn inspect(pod_dir: &Path) -> Result<PodStatus> {
    let (record, mut error) = read_record(pod_dir).unwrap_or_else(|e| (None, Some(e.to_string())));
    let lock = lock_state(pod_dir)?;
    if matches!(lock, LockState::Held { .. })
        && let Ok(response) = super::Ask::status().send(pod_dir)
    {
        let mut status = response.status;
        // A pod of another host answers for itself; this side knows where.
        status.host = super::remote_record(pod_dir).map(|record| record.host);
        return Ok(status);
    }
    let (running, pid) = match lock {
        LockState::Held { pid } => (true, pid),
        LockState::Free | LockState::Removing { .. } => (false, None),
    };
    let pod = omnidev_pod::Pod::at(pod_dir);
    // An unreadable state.json is said (as the pod's error), not taken for
    // a pod without services.
    let state = match omnidev_core::read_state(&pod.state_file()) {
        Ok(state) => state,
        Err(e) => {
            error.get_or_insert(omnidev_core::text::with_causes(&e));
            None
        }
    };
    let containment = state
        .as_ref()
        .filter(|_| running)
        .and_then(|s| s.containment.as_ref())
        .map(ToString::to_string);
    let services = state
        .map(|state| {
            state
                .services
                .into_iter()
                .map(|(name, record)| {
                    let log_file = Some(pod.log_file(&name));
                    // Whatever the file says when the pod is not running,
                    // nothing of it runs (the orphan guard ends the
                    // services of a killed supervisor).
                    let mut status = ServiceStatus::new(name, ServiceState::Stopped);
                    status.restarts = record.restarts;
                    if running {
                        status.state = record.state;
                        status.ready = record.ready;
                    }
                    ServiceReport::new(status, log_file)
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(PodStatus {
        schema: SCHEMA,
        pod_dir: pod_dir.to_path_buf(),
        repo: record.as_ref().and_then(|r| r.repo.clone()),
        running,
        pid,
        ports: record.map(|r| r.ports.0).unwrap_or_default(),
        containment,
        db_engine: db_engine(pod_dir),
        services,
        error,
        ..PodStatus::default()
    })
}

/// The engine the pod keeps for its databases (`PodStatus::db_engine`).
pub(crate) fn db_engine(pod_dir: &std::path::Path) -> Option<String> {
    let engine = omnidev_pod::Pod::at(pod_dir).db_engine()?;
    Some(engine.word().to_owned())
}

/// A pod's `pod.toml`, or why it does not parse (`None` for a pod that
/// has none yet: that is no error). A file that cannot be read (not a
/// regular file, no permission) is the error, never absence: `ls` fails
/// with it, `status` says it as the pod's.
fn read_record(
    pod_dir: &Path,
) -> std::result::Result<(Option<omnidev_pod::PodRecord>, Option<String>), omnidev_pod::Error> {
    match omnidev_pod::read_ports(pod_dir) {
        Ok(record) => Ok((Some(record), None)),
        Err(omnidev_pod::Error::NoPorts { .. }) => Ok((None, None)),
        Err(e @ omnidev_pod::Error::Io { .. }) => Err(e),
        Err(e) => Ok((None, Some(e.to_string()))),
    }
}

/// Every pod under `cache_root` (directories holding `pod.toml`), sorted by
/// directory, with whether each runs. Cheap: reads files and locks only.
pub fn list_pods(cache_root: &Path) -> Result<PodList> {
    let mut pods = Vec::new();
    let dirs = omnidev_pod::pod::cache_dirs(cache_root).map_err(Error::io("list", cache_root))?;
    for dir in dirs {
        let pod_toml = omnidev_pod::Pod::at(&dir).pod_toml();
        let here = omnidev_core::fs::found(std::fs::symlink_metadata(&pod_toml));
        let (record, error) = if here.map_err(Error::io("look at", &pod_toml))?.is_some() {
            // A record that does not parse is reported (as a pod in error);
            // one that cannot be read (a FIFO, a directory) fails the listing.
            read_record(&dir)?
        } else if super::remote_record(&dir).is_some() {
            // A pod of another host, while `up --host` stands for it here:
            // what it answers is its record.
            (None, None)
        } else {
            continue;
        };
        let (running, pid) = match lock_state(&dir) {
            Ok(LockState::Held { pid }) => (true, pid),
            _ => (false, None),
        };
        let repo = record.as_ref().and_then(|r| r.repo.clone());
        pods.push(PodSummary {
            pod_dir: dir,
            repo_gone: repo.as_ref().is_some_and(|r| !r.exists()),
            repo,
            running,
            pid,
            ports: record.map(|r| r.ports.0).unwrap_or_default(),
            error,
            usage: None,
            host: None,
            started_at: None,
            last_activity: None,
        });
    }
    pods.sort_by(|a, b| a.pod_dir.cmp(&b.pod_dir));
    Ok(PodList { schema: SCHEMA, cache_root: cache_root.to_path_buf(), pods, usage: None })
}

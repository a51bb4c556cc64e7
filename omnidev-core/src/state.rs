//! `state.json`: the running supervisor and its services' process groups,
//! written atomically whenever a pid changes, read by status tools and by
//! the next supervisor to stop leftovers.
//!
//! # Schema (version 1)
//!
//! ```json
//! {
//!   "version": 1,
//!   "supervisor": { "pid": 4242, "start-time": 123456 },
//!   "guard-pid": 4243,
//!   "containment": { "kind": "cgroup", "path": "/sys/fs/cgroup/omnidev-4242-123456-0" },
//!   "services": {
//!     "server": {
//!       "pid": 4250,
//!       "pgid": 4250,
//!       "start-time": 123470,
//!       "state": { "state": "ready", "pid": 4250 },
//!       "restarts": 0,
//!       "ready": true,
//!       "cgroup": "/sys/fs/cgroup/omnidev-4242-123456-0/0-server",
//!       "service-id": "4242.123456.0.0"
//!     },
//!     "host": {
//!       "pid": null, "pgid": null, "start-time": null,
//!       "state": { "state": "waiting" }, "restarts": 0, "ready": false
//!     }
//!   }
//! }
//! ```
//!
//! - `start-time` is the process start time as the OS reports it (Linux:
//!   field 22 of `/proc/<pid>/stat`, clock ticks since boot), or `null`
//!   where unknown. A pid is only trusted (signalled, or reported as the
//!   running supervisor) when its current start time equals the recorded
//!   one, so a recycled pid is never mistaken for ours.
//! - `state` is a [`ServiceState`] as serialised in
//!   events (`waiting`, `preparing`, `running`, `ready`, `restarting`,
//!   `stopping`, `exited`, `stopped`).
//! - `containment` is the [`Mechanism`] in force (`cgroup` with the pod
//!   cgroup, or `process-groups` with the reason); `cgroup` and
//!   `service-id` identify a service's processes without its leader (see
//!   [`crate::containment`]). All three are absent in files written before
//!   they existed, which stay readable. A prepare step's processes carry
//!   its service's id and, with cgroups, live in `<cgroup>.prepare-<n>`
//!   beside the service's cgroup: both are recovered with the service,
//!   also when it was recorded without a pid (killed while preparing).
//! - After a clean shutdown every service has `pid: null` and state
//!   `stopped`; the file is left in place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::event::ServiceState;
pub use crate::process::ProcessRecord;

/// Version written into `state.json`.
pub const STATE_VERSION: u32 = 1;

/// The mechanism in force for a supervisor (recorded in `state.json`,
/// shown by `omnidev status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Mechanism {
    /// Every service in its own cgroup under `path`.
    Cgroup {
        /// The pod's cgroup directory.
        path: PathBuf,
    },
    /// Process groups, sessions and a subreaper.
    ProcessGroups {
        /// Why not cgroups.
        reason: String,
    },
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mechanism::Cgroup { path } => write!(f, "cgroup v2 ({})", path.display()),
            Mechanism::ProcessGroups { reason } if crate::platform::HAS_SUBREAPER => {
                write!(f, "process groups and a subreaper ({reason})")
            }
            Mechanism::ProcessGroups { reason } => write!(
                f,
                "process groups and sessions, no subreaper: orphans are found by their \
                 service id among every process ({reason})"
            ),
        }
    }
}

/// One service in `state.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ServiceRecord {
    /// Process id of the group leader, when running.
    pub pid: Option<u32>,
    /// Process-group id (equal to the leader's pid), when running.
    pub pgid: Option<i32>,
    /// The leader's start time, when known.
    pub start_time: Option<u64>,
    /// The service's state when the file was written.
    pub state: ServiceState,
    /// Crash restarts so far.
    #[serde(default)]
    pub restarts: u32,
    /// Whether it counted as ready.
    #[serde(default)]
    pub ready: bool,
    /// The service's cgroup, when services are contained by cgroups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    /// The value of [`SERVICE_ID_ENV`](crate::containment::SERVICE_ID_ENV)
    /// its processes carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_id: Option<String>,
}

/// The whole of `state.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StateFile {
    /// Schema version ([`STATE_VERSION`]).
    pub version: u32,
    /// The supervisor that wrote the file.
    pub supervisor: ProcessRecord,
    /// The orphan guard's pid.
    #[serde(default)]
    pub guard_pid: Option<u32>,
    /// How the services are contained (absent in files of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<Mechanism>,
    /// Services by name.
    #[serde(default)]
    pub services: BTreeMap<String, ServiceRecord>,
}

impl StateFile {
    /// Whether the supervisor that wrote the file still runs (pid and start
    /// time match).
    pub fn supervisor_alive(&self) -> bool {
        self.supervisor.is_alive()
    }
}

/// The most `state.json` may hold: far above what a pod writes (a few
/// hundred bytes per service), and a bound on what a planted file costs.
pub const MAX_STATE_BYTES: u64 = 16 << 20;

/// Reads `state.json` through [`crate::fs`] (a link in its place is an
/// error, never followed; at most [`MAX_STATE_BYTES`]); `Ok(None)` when the
/// file does not exist.
pub fn read_state(path: &Path) -> Result<Option<StateFile>> {
    let read = crate::fs::read_file(path, MAX_STATE_BYTES)
        .map_err(|source| Error::Read { path: path.to_path_buf(), source });
    let Some(bytes) = read? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::StateFile { path: path.to_path_buf(), message: e.to_string() })
}

/// The bytes of `state.json` (at `path`, named in the error) for `state`.
pub fn encode_state(path: &Path, state: &StateFile) -> Result<Vec<u8>> {
    let mut text = serde_json::to_vec_pretty(state)
        .map_err(|e| Error::StateFile { path: path.to_path_buf(), message: e.to_string() })?;
    text.push(b'\n');
    Ok(text)
}

/// Writes `state.json` atomically (replaced by rename; not flushed to the
/// disk, see the comment inside).
pub fn write_state(path: &Path, state: &StateFile) -> Result<()> {
    let text = encode_state(path, state)?;
    // Atomic by rename for every reader, but not flushed to the disk: the
    // file names processes, which a crash of the machine ends too, and a
    // flush (8 ms at the median, 30 ms and more while others keep the disk
    // busy) held up the engine, and with it the next spawn, on every turn
    // that changed a service.
    crate::fs::write_atomic_unsynced(path, &text)
        .map_err(|source| Error::Write { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_missing_is_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        assert!(read_state(&path).expect("read missing").is_none());
        let mut services = BTreeMap::new();
        services.insert(
            "server".to_owned(),
            ServiceRecord {
                pid: Some(10),
                pgid: Some(10),
                start_time: Some(5),
                state: ServiceState::Ready { pid: 10 },
                restarts: 1,
                ready: true,
                cgroup: None,
                service_id: Some("1.2.0".into()),
            },
        );
        let state = StateFile {
            version: STATE_VERSION,
            supervisor: ProcessRecord::of(std::process::id()),
            guard_pid: None,
            containment: Some(Mechanism::ProcessGroups { reason: "test".into() }),
            services,
        };
        write_state(&path, &state).expect("write");
        assert_eq!(read_state(&path).expect("read"), Some(state.clone()));
        assert!(state.supervisor_alive());
    }

    #[test]
    fn corrupt_file_names_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        std::fs::write(&path, "{ nope").expect("write");
        let err = read_state(&path).expect_err("corrupt");
        assert!(err.to_string().contains("state.json"), "{err}");
    }

    #[test]
    fn a_different_start_time_is_not_alive() {
        let me = ProcessRecord::of(std::process::id());
        let other = ProcessRecord { pid: me.pid, start_time: me.start_time.map(|t| t + 1) };
        assert!(me.is_alive());
        assert!(!other.is_alive());
    }
}

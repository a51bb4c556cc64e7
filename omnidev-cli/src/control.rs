//! The control socket: how `status`, `stop`, `restart` and `up --detach`
//! talk to a running pod from any terminal, script or coding agent.
//!
//! A running `omnidev up` serves a Unix domain socket in the per-user
//! runtime directory (`$XDG_RUNTIME_DIR/omnidev/<hash of the pod
//! directory>/control.sock`, else under `/tmp/omnidev-<uid>/`; the
//! directories 0700, the socket 0600, so only the owner can connect), with
//! a symbolic link to it at `<pod>/control.sock`, where every client looks.
//! So the socket's path always fits a Unix socket address (at most 103
//! bytes), however long the pod directory's path is. The protocol is line-delimited JSON: the client
//! writes one request object and a newline, the server answers with one
//! response object and a newline, then either side may close.
//!
//! # Requests
//!
//! ```json
//! {"cmd":"status"}
//! {"cmd":"stop"}
//! {"cmd":"restart","service":"server"}
//! {"cmd":"restart"}
//! {"cmd":"wait-ready"}
//! ```
//!
//! - `status`: the pod's [`PodStatus`].
//! - `stop`: acknowledged at once; the pod then shuts down exactly as on
//!   SIGTERM (dependents first, every process group emptied). The pod's lock
//!   is released when the last process is gone: that is what `omnidev stop`
//!   waits for.
//! - `restart` with a `service`: that service restarts (its dependents follow
//!   once it is ready again); without one, the watched services (those with
//!   watch rules — `server`, then `host` once it is ready; every service when
//!   no rule exists), like the TUI's `R`. Answered once the restarted
//!   services run with new pids and are ready (or have failed).
//! - `wait-ready`: answered once every service is ready (its probe passed;
//!   without a probe, it has kept running for a second; or it exited 0), or
//!   as soon as one has failed (crashed, exited non-zero, or its readiness
//!   probe timed out).
//!
//! # Responses
//!
//! ```json
//! {"schema":3,"ok":true,"status":{…},"failed":[]}
//! {"schema":3,"ok":false,"error":"unknown service `nope` (known: server, host)"}
//! ```
//!
//! `status` (a [`PodStatus`]) is present on every successful answer;
//! `failed` lists the services that failed (for `wait-ready` and
//! `restart`). The same [`PodStatus`] object is what `omnidev status --json`
//! prints, and [`PodList`] is what `omnidev ls --json` prints; both carry
//! `"schema": 3` ([`SCHEMA`](protocol::SCHEMA)). Fields are only ever added within a schema
//! version; a removal or change of meaning bumps it. `docs/control.md` has
//! the full schema.
//!
//! When nothing answers — no `omnidev up` holds the pod lock, or a socket
//! file is left over from a supervisor killed with SIGKILL — `status` and
//! `ls` fall back to `pod.toml` (ports, repo) and `state.json` and report
//! the pod as not running; they never wait on a stale socket. The next
//! `omnidev up` removes the stale file and listens afresh.

pub mod client;
pub mod events;
pub mod inspect;
pub mod protocol;
pub mod retained;
pub mod server;

use std::path::{Path, PathBuf};

pub use client::{Ask, CallConnection, RestartScope};
pub use inspect::{inspect, list_pods, lock_state};
pub use protocol::{EventsQuery, PodList, PodStatus};
pub use server::{ControlServer, ServerInfo};

/// The control socket of the pod in `pod_dir`, found through its pointer
/// `<pod>/control.sock`: the link's target, or the pointer itself when it
/// is not a link (a pod started by an older omnidev) or is missing.
pub fn socket_path(pod_dir: &Path) -> PathBuf {
    let pointer = pointer_path(pod_dir);
    match std::fs::read_link(&pointer) {
        Ok(target) => pod_dir.join(target),
        Err(_) => pointer,
    }
}

/// `<pod>/control.sock`, the pointer to the socket.
pub fn pointer_path(pod_dir: &Path) -> PathBuf {
    omnidev_pod::Pod::at(pod_dir).control_socket()
}

/// What a local pod directory says of its pod on another host
/// (`<pod>/remote.json`, while `up --host` is connected).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RemoteRecord {
    /// `[USER@]HOST[:PORT]`.
    pub host: String,
    /// The pod directory there.
    pub pod_dir: PathBuf,
    /// How to run a command there over the connection: the ssh program,
    /// the master's control socket here, the destination and port.
    pub ssh: Vec<String>,
    /// The omnidev there, and the checkout there (both relative to the
    /// host user's home).
    pub omnidev: String,
    pub checkout: String,
}

/// The file of [`RemoteRecord`] in a pod directory.
pub const REMOTE_RECORD: &str = "remote.json";

/// The host a local pod directory's pod runs on, while `up --host` is
/// connected to it.
pub fn remote_record(pod_dir: &Path) -> Option<RemoteRecord> {
    let bytes = omnidev_core::fs::read_file(&pod_dir.join(REMOTE_RECORD), 64 * 1024).ok()??;
    serde_json::from_slice(&bytes).ok()
}

/// Makes `pointer` a symbolic link to `target`, replacing whatever file or
/// link is there by a rename (never writing through it).
pub fn point_at(pointer: &Path, target: &Path) -> std::io::Result<()> {
    let mut temp = pointer.as_os_str().to_owned();
    temp.push(format!(".{}.tmp", std::process::id()));
    let temp = PathBuf::from(temp);
    omnidev_core::fs::found(std::fs::remove_file(&temp))?;
    std::os::unix::fs::symlink(target, &temp)?;
    std::fs::rename(&temp, pointer).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

/// Where a pod in `pod_dir` serves its control socket: in the per-user
/// runtime directory, keyed by the pod directory, so that the path always
/// fits a Unix socket address however long the pod directory is. An error
/// when even that path is too long (a very long `XDG_RUNTIME_DIR`).
pub fn serving_path(pod_dir: &Path) -> omnidev_pod::Result<PathBuf> {
    let canonical = pod_dir.canonicalize().unwrap_or_else(|_| pod_dir.to_path_buf());
    let path = omnidev_pod::runtime::socket_path(&omnidev_pod::runtime::runtime_dir(), &canonical);
    omnidev_pod::runtime::check_socket_path(&path)?;
    Ok(path)
}

//! The names of the files and directories inside a pod directory (and the
//! one omnidev keeps beside the pods), in one place: every crate that
//! reads a pod asks [`Pod`](crate::Pod) or this module for a path.

/// The record of a pod's ports and checkout (`<pod>/pod.toml`).
pub const POD_TOML: &str = "pod.toml";

/// The single-instance lock (`<pod>/omnidev.lock`).
pub const LOCK_FILE: &str = "omnidev.lock";

/// The supervisor's record of running processes (`<pod>/state.json`).
pub const STATE_FILE: &str = "state.json";

/// The engine `omnidev up --db` chose for the pod's databases.
pub const DB_ENGINE_FILE: &str = "db-engine";

/// The pointer to a running pod's control socket (`<pod>/control.sock`): a
/// symbolic link to the socket in the per-user runtime directory.
pub const CONTROL_SOCKET: &str = "control.sock";

/// The databases' snapshots (`<pod>/snapshots/<database>/<label>/`).
pub const SNAPSHOTS_DIR: &str = "snapshots";

/// The seed results' cache, beside the pods under the cache root (a dot
/// name: no pod's) ([`crate::db_seed`]).
pub const SEEDS_DIR: &str = ".seeds";

/// The per-service log files (`<pod>/logs/<service>.log`).
pub const LOGS_DIR: &str = "logs";

/// The services' own runtime directory (`<pod>/run`, their
/// `XDG_RUNTIME_DIR`): sockets and pid files of one pod never meet
/// another's.
pub const RUN_DIR: &str = "run";

/// The services' own temporary directory (`<pod>/tmp`, their `TMPDIR`).
pub const TMP_DIR: &str = "tmp";

/// Suffix of a service's log file inside [`LOGS_DIR`].
pub const LOG_SUFFIX: &str = ".log";

/// A detached pod's own output (`<pod>/logs/omnidev.log`), not a service.
pub const DETACHED_LOG: &str = "omnidev.log";

/// Where the pod's last reload (or its start) left each log file
/// (`<pod>/logs/reload-mark.json`, written by the supervisor, read by
/// `omnidev logs --since-reload`).
pub const RELOAD_MARK: &str = omnidev_core::logs::MARK_FILE;

/// The marker file omnidev writes into every pod it creates.
pub const MARKER: &str = ".omnidev-pod";

/// The per-user port allocation lock, inside the runtime directory
/// ([`crate::runtime`]), shared by every cache root.
pub const ALLOCATION_LOCK: &str = "ports.lock";

/// The registry of pod directories holding ports, beside the allocation
/// lock.
pub const REGISTRY: &str = "pods.toml";

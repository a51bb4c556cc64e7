//! The error type of `omnidev-core`.

use std::path::PathBuf;

/// Everything that can go wrong in the supervision engine.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be written or replaced.
    #[error("could not write {path}")]
    #[diagnostic(
        code(omnidev::core::write),
        help("check that the directory exists and is writable")
    )]
    Write {
        /// The file that was being written.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A file could not be read.
    #[error("could not read {path}")]
    #[diagnostic(code(omnidev::core::read), help("check that the file exists and is readable"))]
    Read {
        /// The file that was being read.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// `state.json` exists but is not valid.
    #[error("{path} is not a valid omnidev state file: {message}")]
    #[diagnostic(
        code(omnidev::core::state_file),
        help(
            "remove the file if no omnidev supervisor is running for this pod; it is rewritten on the next start"
        )
    )]
    StateFile {
        /// The state file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },

    /// Two services share a name.
    #[error("service `{name}` is defined more than once")]
    #[diagnostic(code(omnidev::core::duplicate_service), help("give every service a unique name"))]
    DuplicateService {
        /// The repeated name.
        name: String,
    },

    /// A service depends on a service that does not exist.
    #[error("service `{service}` depends on `{dependency}`, which is not defined")]
    #[diagnostic(
        code(omnidev::core::unknown_dependency),
        help("define `{dependency}` or remove it from `depends-on` of `{service}`")
    )]
    UnknownDependency {
        /// The dependent service.
        service: String,
        /// The missing dependency.
        dependency: String,
    },

    /// The dependency graph has a cycle.
    #[error("services depend on each other in a cycle: {}", cycle.join(" -> "))]
    #[diagnostic(
        code(omnidev::core::dependency_cycle),
        help("remove one of the `depends-on` edges of the cycle")
    )]
    DependencyCycle {
        /// The services of the cycle, in order, the first repeated at the end.
        cycle: Vec<String>,
    },

    /// A request named a service the supervisor does not run.
    #[error("no service named `{name}`")]
    #[diagnostic(
        code(omnidev::core::unknown_service),
        help("known services: {}", known.join(", "))
    )]
    UnknownService {
        /// The name asked for.
        name: String,
        /// The names that exist.
        known: Vec<String>,
    },

    /// The orphan guard process could not be started.
    #[error("could not start the orphan guard process")]
    #[diagnostic(
        code(omnidev::core::guard),
        help(
            "the system may be out of processes or file descriptors (check `ulimit -u` and `ulimit -n`)"
        )
    )]
    Guard {
        /// The underlying OS error.
        #[source]
        source: std::io::Error,
    },

    /// The state file names a supervisor that is still running.
    #[error("another supervisor (pid {pid}) is still running according to {path}")]
    #[diagnostic(
        code(omnidev::core::already_running),
        help("stop the other supervisor first (e.g. `omnidev stop`), or kill pid {pid}")
    )]
    AlreadyRunning {
        /// The state file.
        path: PathBuf,
        /// The running supervisor's pid.
        pid: u32,
    },

    /// The supervisor's background task has ended (after `shutdown`).
    #[error("the supervisor has shut down")]
    #[diagnostic(
        code(omnidev::core::shut_down),
        help("start a new supervisor; a handle cannot be used after `shutdown`")
    )]
    ShutDown,

    /// `OMNIDEV_CONTAINMENT` names no mechanism.
    #[error("OMNIDEV_CONTAINMENT={value} names no mechanism")]
    #[diagnostic(
        code(omnidev::containment),
        help(
            "unset OMNIDEV_CONTAINMENT, or set it to `auto`, `process-groups` or `cgroup-under:DIR`"
        )
    )]
    Containment {
        /// The value given.
        value: String,
    },
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

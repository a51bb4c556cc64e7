//! Errors of the `omnidev` binary itself; library errors pass through
//! unchanged (they already carry their code and help).

use std::path::PathBuf;

/// Everything the CLI layer can fail with.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum Error {
    /// A pod-crate error (repo root, profile, ports, lock, …).
    #[error(transparent)]
    #[diagnostic(transparent)]
    Pod(#[from] omnidev_pod::Error),

    /// A supervision-engine error.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Core(#[from] omnidev_core::Error),

    /// A watch pattern of the profile is not a valid glob.
    #[error("invalid watch pattern `{pattern}`")]
    #[diagnostic(
        code(omnidev::watch::pattern),
        help(
            "watch patterns are gitignore-style globs relative to the repo root, e.g. `src/**/*.py`"
        )
    )]
    WatchPattern {
        /// The pattern.
        pattern: String,
        /// What the glob parser said.
        #[source]
        source: ignore::Error,
    },

    /// The file watcher could not be set up.
    #[error("could not watch {path} for changes")]
    #[diagnostic(
        code(omnidev::watch::setup),
        help(
            "on Linux, raise the inotify limit (sysctl fs.inotify.max_user_watches) or narrow the profile's `watch` patterns"
        )
    )]
    Watch {
        /// What was being watched.
        path: PathBuf,
        /// The notify error.
        #[source]
        source: notify::Error,
    },

    /// The terminal could not be prepared or drawn on.
    #[error("terminal error")]
    #[diagnostic(
        code(omnidev::terminal),
        help("run with --headless to print logs instead of the TUI")
    )]
    Terminal(#[source] std::io::Error),

    /// The async runtime could not be created.
    #[error("could not start the async runtime")]
    #[diagnostic(code(omnidev::runtime))]
    Runtime(#[source] std::io::Error),

    /// `--only`/`--skip` left nothing to run.
    #[error("no service left to run")]
    #[diagnostic(
        code(omnidev::up::nothing_to_run),
        help("check --only / --skip / --no-vite")
    )]
    NothingToRun,

    /// The command of `omnidev exec` could not be started.
    #[error("could not run `{program}`")]
    #[diagnostic(
        code(omnidev::exec::spawn),
        help("check that `{program}` is installed and on PATH")
    )]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// Writing to standard output failed.
    #[error("could not write to standard output")]
    #[diagnostic(code(omnidev::stdout))]
    Stdout(#[source] std::io::Error),
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

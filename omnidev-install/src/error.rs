//! The error type of `omnidev-install`.

use std::path::PathBuf;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum Error {
    /// A file-system operation failed.
    #[error("could not {action} {}", path.display())]
    #[diagnostic(
        code(omnidev::install::io),
        help("check that the path exists and that you may read and write it")
    )]
    Io {
        /// What was being done ("read", "write", "create directory", ...).
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A directory omnidev keeps its files in is not this user's alone.
    #[error("refusing to use {}: {reason}", path.display())]
    #[diagnostic(
        code(omnidev::install::unsafe_dir),
        help("{fix}; another user could plant files in it")
    )]
    UnsafeDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
        /// What to run.
        fix: String,
    },

    /// Neither `XDG_*_HOME` nor `HOME` says where to keep files.
    #[error("cannot find the home directory: HOME is not set (or not an absolute path)")]
    #[diagnostic(
        code(omnidev::install::no_home),
        help("set HOME (or XDG_CONFIG_HOME and XDG_CACHE_HOME) to a directory you own")
    )]
    NoHome,

    /// `install.toml` exists but cannot be parsed.
    #[error("the saved install choice {} is corrupt: {message}", path.display())]
    #[diagnostic(
        code(omnidev::install::corrupt_choice),
        help("fix the file by hand, or delete it and run `omnidev install` again")
    )]
    CorruptChoice {
        /// The file.
        path: PathBuf,
        /// The parse problem.
        message: String,
    },

    /// A repository URL that could make git or uv run something unintended.
    #[error("refusing the repository URL {repo:?}: {reason}")]
    #[diagnostic(
        code(omnidev::install::unsafe_repo),
        help(
            "use a plain https://, ssh://, git:// or file:// URL, e.g. https://github.com/omnigent-ai/omnigent.git"
        )
    )]
    UnsafeRepo {
        /// The rejected URL.
        repo: String,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// A ref that could be read as an option or is not a valid git ref.
    #[error("refusing the git ref {reference:?}: {reason}")]
    #[diagnostic(
        code(omnidev::install::unsafe_ref),
        help("use a branch name, a tag or a full commit sha, e.g. `--ref main`")
    )]
    UnsafeRef {
        /// The rejected ref.
        reference: String,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// An extra or Python version that is not a plain name.
    #[error("refusing {what} {value:?}: only letters, digits and `.`, `_`, `-` are allowed")]
    #[diagnostic(
        code(omnidev::install::invalid_value),
        help("pass a plain name, e.g. `--extra databricks` or `--python 3.12`")
    )]
    InvalidValue {
        /// Which argument ("extra", "Python version").
        what: &'static str,
        /// The rejected value.
        value: String,
    },

    /// A program the install needs is not on PATH.
    #[error("`{program}` was not found on PATH")]
    #[diagnostic(code(omnidev::install::missing_program), help("{help}"))]
    MissingProgram {
        /// The program looked for.
        program: &'static str,
        /// How to get it.
        help: &'static str,
    },

    /// Node is installed but older than the web UI build needs.
    #[error("Node {found} is too old: building the Omnigent web UI needs Node 22 or newer")]
    #[diagnostic(
        code(omnidev::install::node_too_old),
        help(
            "install Node 22+ (e.g. with nvm or fnm); to install a package that builds no web UI, set OMNIDEV_SKIP_WEB_CHECK=1 or pass --skip-web-check"
        )
    )]
    NodeTooOld {
        /// What `node --version` printed.
        found: String,
    },

    /// Another `install` or `update` holds the install lock.
    #[error("another `omnidev install` or `omnidev update` is running{}", pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    #[diagnostic(
        code(omnidev::install::busy),
        help("wait for it to finish, then run this again (the lock is {})", path.display())
    )]
    InstallRunning {
        /// The lock file.
        path: PathBuf,
        /// The holder, as it wrote itself into the lock file.
        pid: Option<u32>,
    },

    /// A child process could not be started.
    #[error("could not run `{program}`")]
    #[diagnostic(
        code(omnidev::install::spawn),
        help("check that `{program}` is installed and executable")
    )]
    Spawn {
        /// The program.
        program: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A child process ran and failed.
    #[error("`{command}` failed ({status})")]
    #[diagnostic(code(omnidev::install::command_failed), help("read the output above; {hint}"))]
    CommandFailed {
        /// The command line, for the message.
        command: String,
        /// The exit status.
        status: std::process::ExitStatus,
        /// What to try.
        hint: &'static str,
    },

    /// The uv tool directory holds no `direct_url.json` for the tool.
    #[error("found no install metadata (direct_url.json) for `{tool}` under {}", tool_dir.display())]
    #[diagnostic(
        code(omnidev::install::no_metadata),
        help("is the tool installed with `uv tool install`? run `omnidev install`")
    )]
    NoInstallMetadata {
        /// The tool name.
        tool: String,
        /// `uv tool dir`.
        tool_dir: PathBuf,
    },

    /// The GitHub API lookup failed.
    #[error("GitHub API lookup of {url} failed: {message}")]
    #[diagnostic(
        code(omnidev::install::github),
        help(
            "check the network; omnidev falls back to `git ls-remote` when the API is unavailable"
        )
    )]
    GitHub {
        /// The request URL.
        url: String,
        /// What went wrong.
        message: String,
    },

    /// The repository is not on github.com, so the API cannot be asked.
    #[error("{repo} is not a github.com repository")]
    #[diagnostic(code(omnidev::install::not_github))]
    NotGitHub {
        /// The repository URL.
        repo: String,
    },

    /// `git ls-remote` failed or timed out.
    #[error("`git ls-remote {repo}` failed: {message}")]
    #[diagnostic(
        code(omnidev::install::git),
        help("check the repository URL and the network, and that `git` is installed")
    )]
    Git {
        /// The repository URL.
        repo: String,
        /// What went wrong.
        message: String,
    },

    /// The remote has no branch or tag of that name.
    #[error("{repo} has no branch or tag named {reference:?}")]
    #[diagnostic(
        code(omnidev::install::ref_not_found),
        help("check the spelling, or install with `--ref <branch|tag|sha>`")
    )]
    RefNotFound {
        /// The repository URL.
        repo: String,
        /// The ref looked for.
        reference: String,
    },
}

impl Error {
    /// Builds an [`Error::Io`].
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io { action, path: path.into(), source }
    }

    /// A closure turning the error of starting `program` into an
    /// [`Error::Spawn`].
    pub(crate) fn spawn(program: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> Self {
        let program = program.to_string();
        move |source| Self::Spawn { program, source }
    }
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

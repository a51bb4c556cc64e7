//! The one error type of the `omnidev` binary: its own failures (watching,
//! the terminal, the control socket, detaching) and library errors, which
//! pass through unchanged (they already carry their code and help); and the
//! one place that turns an error into an exit code ([`exit`]) and, with
//! `--json`, into a JSON record ([`json_record`]).

use std::path::PathBuf;

/// The exit codes, the same for every command (docs/control.md); 0 is
/// success.
pub mod exit {
    /// A service failed, or omnidev could not do what was asked (the
    /// message says which).
    pub const FAILED: u8 = 1;
    /// A usage error: an unknown flag or service, a value out of range, a
    /// `--pod-dir` that is not a pod.
    pub const USAGE: u8 = 2;
    /// No pod runs there.
    pub const NOT_RUNNING: u8 = 3;
    /// The time given ran out.
    pub const TIMED_OUT: u8 = 4;
}

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

    /// A watch rule covers more directories than the watch budget.
    #[error(
        "watching {patterns} would take more than the {limit} directory watches left of the \
         pod's share (half of fs.inotify.max_user_watches, for all its watch rules)"
    )]
    #[diagnostic(
        code(omnidev::watch::too_many),
        help(
            "narrow the service's `watch` globs to the source directories, or raise the limit \
             (sysctl fs.inotify.max_user_watches)"
        )
    )]
    TooManyWatches {
        /// The rule's globs.
        patterns: String,
        /// The budget.
        limit: usize,
    },

    /// The system's inotify limit was reached while watching a rule.
    #[error(
        "watching {patterns} needs {needed} inotify watches and only {added} could be added \
         ({short} short): the system's limit for this user (fs.inotify.max_user_watches = \
         {limit}, shared by every program of the user) is reached"
    )]
    #[diagnostic(
        code(omnidev::watch::limit),
        help(
            "raise the limit (sudo sysctl fs.inotify.max_user_watches={suggested}), close other \
             watchers, or narrow the service's `watch` globs"
        )
    )]
    WatchLimit {
        /// The rule's globs.
        patterns: String,
        /// Watches the rule needs.
        needed: usize,
        /// Watches that could be added.
        added: usize,
        /// `needed - added`.
        short: usize,
        /// The system's limit.
        limit: usize,
        /// A limit that would have room.
        suggested: usize,
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

    /// One port's bind host was given twice, with different addresses.
    #[error("the bind host of `{name}` is given twice, as {first} and as {second}")]
    #[diagnostic(
        code(omnidev::up::host_twice),
        help("give one address for `{name}` (`--vite-host ADDR` is `--host vite=ADDR`)")
    )]
    HostForcedTwice {
        /// The port name.
        name: String,
        /// The first address.
        first: String,
        /// The other one.
        second: String,
    },

    /// The background process of `up --detach` could not read the options
    /// it was started with.
    #[error("the background process of `up --detach` got unreadable options: {message}")]
    #[diagnostic(
        code(omnidev::detach::options),
        help(
            "`omnidev detached` is started by `omnidev up --detach`, which writes its options \
             to its standard input; run `omnidev up --detach` instead"
        )
    )]
    BackgroundOptions {
        /// What was wrong.
        message: String,
    },

    /// `omnidev db` of a database the profile does not declare.
    #[error("{message}")]
    #[diagnostic(
        code(omnidev::db::unknown),
        help(
            "a database is declared in the profile: `[databases.main] engine = \"postgres\"` \
             (or \"sqlite\"); `omnidev help profile` describes it"
        )
    )]
    UnknownDatabase {
        /// Which, and the ones there are.
        message: String,
    },

    /// The command of `omnidev run` could not be started.
    #[error("could not run `{program}`")]
    #[diagnostic(code(omnidev::run::spawn))]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
        /// What to do, by the real cause.
        #[help]
        help: String,
    },

    /// `completions --install` for a shell without a known place.
    #[error("`omnidev completions --install` does not know where {shell} looks for completions")]
    #[diagnostic(
        code(omnidev::completions::shell),
        help("print the script and add it yourself (see `omnidev completions --help`)")
    )]
    CompletionsShell {
        /// The shell.
        shell: String,
    },

    /// `completions --install` would replace a file omnidev did not write.
    #[error("{} exists and omnidev did not write it", path.display())]
    #[diagnostic(
        code(omnidev::completions::foreign),
        help("move it away, or pass --force to replace it with omnidev's script")
    )]
    CompletionsForeign {
        /// The file.
        path: PathBuf,
    },

    /// A file omnidev writes on request (completions, man pages) could not be written.
    #[error("could not write {}", path.display())]
    #[diagnostic(code(omnidev::write), help("check that the directory is yours and writable"))]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// There is no home directory to install into.
    #[error("HOME is not set (or not an absolute path)")]
    #[diagnostic(
        code(omnidev::completions::home),
        help(
            "set HOME, or print the script with `omnidev completions SHELL` and place it yourself"
        )
    )]
    NoHome,

    /// A value could not be encoded as JSON.
    #[error("could not encode JSON")]
    #[diagnostic(code(omnidev::json))]
    Json(#[source] serde_json::Error),

    /// A step of `up --host` failed on the host or on the way there.
    #[error("{host}: could not {step}: {message}")]
    #[diagnostic(
        code(omnidev::remote),
        help(
            "each step runs over the user's own ssh, which may not prompt (BatchMode) nor take \
             an unknown host key: `ssh HOST true` must work as it is; `OMNIDEV_SSH` names \
             another ssh program"
        )
    )]
    Remote {
        /// `[USER@]HOST[:PORT]`.
        host: String,
        /// What was being done.
        step: String,
        /// What ssh or the host said.
        message: String,
    },

    /// The checkout's files could not be listed or packed for the host.
    #[error("could not pack {} for the host: {message}", repo.display())]
    #[diagnostic(
        code(omnidev::remote_checkout),
        help("`up --host` sends the files git would commit: run it in a git checkout")
    )]
    RemoteCheckout {
        /// The checkout.
        repo: PathBuf,
        /// What git or tar said.
        message: String,
    },

    /// A file or socket operation failed.
    #[error("could not {action} {}", path.display())]
    #[diagnostic(
        code(omnidev::control::io),
        help("check the permissions of the pod directory (it should be yours, mode 0700)")
    )]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The pod is not running.
    #[error("the pod {} is not running", pod_dir.display())]
    #[diagnostic(
        code(omnidev::control::not_running),
        help("start it with `omnidev up` (or `omnidev up --detach` to run it in the background)")
    )]
    NotRunning {
        /// The pod directory.
        pod_dir: PathBuf,
    },

    /// `omnidev attach` without a terminal.
    #[error("`omnidev attach` needs a terminal (its standard input and output are not one)")]
    #[diagnostic(
        code(omnidev::attach::terminal),
        help(
            "`omnidev logs -f{same_pod}` or `omnidev events -f --logs{same_pod}` print the pod's output without one"
        )
    )]
    NeedsTerminal {
        /// The flags naming the pod again.
        same_pod: String,
    },

    /// `omnidev up` (in the foreground) on a pod that already runs.
    #[error(
        "the pod {} is already running (pid {})",
        pod_dir.display(),
        pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string())
    )]
    #[diagnostic(
        code(omnidev::up::running),
        help(
            "`omnidev attach{same_pod}` opens its terminal UI, `omnidev stop{same_pod}` stops it \
             (`omnidev up --detach{same_pod}` prints its URLs)"
        )
    )]
    UpRunning {
        /// The pod directory.
        pod_dir: PathBuf,
        /// The pid holding its lock.
        pid: Option<u32>,
        /// The flags naming the pod again.
        same_pod: String,
    },

    /// The pod's lock is held but nothing answers on its control socket.
    #[error("the pod {} runs (pid {}) but its control socket {} does not answer", pod_dir.display(), pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string()), socket.display())]
    #[diagnostic(
        code(omnidev::control::unreachable),
        help(
            "it may be starting or stuck; `omnidev stop` falls back to SIGTERM, or stop it with `kill <pid>`"
        )
    )]
    Unreachable {
        /// The pod directory.
        pod_dir: PathBuf,
        /// The socket.
        socket: PathBuf,
        /// The pid holding the lock.
        pid: Option<u32>,
        /// What went wrong while connecting or reading.
        #[source]
        source: std::io::Error,
    },

    /// The pod answered something that is not a response.
    #[error("unexpected answer on {}: {message}", socket.display())]
    #[diagnostic(
        code(omnidev::control::protocol),
        help("the running `omnidev up` may be a different version; stop it and start it again")
    )]
    Protocol {
        /// The socket.
        socket: PathBuf,
        /// What was wrong.
        message: String,
    },

    /// The pod refused the request.
    #[error("the pod refused: {message}")]
    #[diagnostic(code(omnidev::control::refused), help("see `omnidev status`"))]
    Refused {
        /// The pod's explanation.
        message: String,
    },

    /// The pod has no service of that name.
    #[error("{message}")]
    #[diagnostic(
        code(omnidev::unknown_service),
        help("service names are those of the profile; `omnidev status` lists them")
    )]
    UnknownService {
        /// The pod's explanation, naming the known services.
        message: String,
    },

    /// The pod refused a request as malformed (a bad name, a value out of
    /// range).
    #[error("{message}")]
    #[diagnostic(code(omnidev::control::usage), help("see `omnidev help`"))]
    BadRequest {
        /// The pod's explanation.
        message: String,
    },

    /// `reload-profile`: the profile file cannot be loaded; the pod runs
    /// on with the profile it runs.
    #[error("{message}")]
    #[diagnostic(
        code(omnidev::control::invalid_profile),
        help(
            "fix the file (`omnidev profile check` shows the problem) and run `omnidev reload-profile` again; `omnidev help profile` describes the format"
        )
    )]
    InvalidProfile {
        /// The error, with the file, line and column.
        message: String,
    },

    /// What was waited for did not happen in time.
    #[error("{message}")]
    #[diagnostic(
        code(omnidev::timeout),
        help(
            "the pod keeps running: see `omnidev status` and `omnidev logs`; raise the limit with --timeout"
        )
    )]
    TimedOut {
        /// What did not happen, and the limit.
        message: String,
    },

    /// `--pod-dir` names no pod: a typo must not look like a stopped pod.
    #[error("{} {what}", pod_dir.display())]
    #[diagnostic(
        code(omnidev::pod_dir::not_a_pod),
        help("`omnidev ls` lists the pods; leave out --pod-dir to use this checkout's pod")
    )]
    NoSuchPod {
        /// The directory given.
        pod_dir: PathBuf,
        /// What it is instead.
        what: String,
    },

    /// The control socket could not be created.
    #[error("could not serve the control socket {}", path.display())]
    #[diagnostic(
        code(omnidev::control::listen),
        help(
            "the socket lives in the per-user runtime directory ($XDG_RUNTIME_DIR/omnidev or \
             /tmp/omnidev-<uid>); check that it is yours and writable"
        )
    )]
    Listen {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// `omnidev stop` waited in vain for the pod to end.
    #[error("the pod {} did not stop within {seconds} s (pid {})", pod_dir.display(), pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string()))]
    #[diagnostic(
        code(omnidev::control::stop_timeout),
        help(
            "look at `omnidev logs`; `kill -9 <pid>` ends it (its orphan guard then kills the services)"
        )
    )]
    StopTimeout {
        /// The pod directory.
        pod_dir: PathBuf,
        /// The pid holding the lock.
        pid: Option<u32>,
        /// How long was waited.
        seconds: u64,
    },

    /// A service has no log file.
    #[error("no log file for `{service}` in {}", dir.display())]
    #[diagnostic(code(omnidev::logs::unknown_service), help("services with logs: {known}"))]
    NoLog {
        /// The service asked for.
        service: String,
        /// The logs directory.
        dir: PathBuf,
        /// The services that have logs.
        known: String,
    },

    /// `logs SERVICE` whose log file is there but is not a regular file
    /// omnidev can read (a symbolic link or a FIFO planted in its place).
    #[error("could not read the log {}", path.display())]
    #[diagnostic(
        code(omnidev::logs::unreadable),
        help(
            "omnidev reads only the regular files it wrote in the pod's logs directory; move this one away"
        )
    )]
    LogUnreadable {
        /// The log file.
        path: PathBuf,
        /// Why it could not be opened.
        #[source]
        source: std::io::Error,
    },

    /// `logs` on a pod directory without a logs directory: a pod that
    /// never ran, or a `--pod-dir` that names no pod.
    #[error("no logs at {}: this pod has never run", dir.display())]
    #[diagnostic(
        code(omnidev::logs::no_logs),
        help(
            "start it with `omnidev up`; with --pod-dir, check the path (`omnidev ls` lists the pods)"
        )
    )]
    NoLogs {
        /// The logs directory that is missing.
        dir: PathBuf,
    },

    /// `logs --since-reload` found no record of where the last reload left
    /// the log files.
    #[error("cannot tell which lines came after the last reload: {}: {reason}", path.display())]
    #[diagnostic(
        code(omnidev::logs::no_mark),
        help(
            "the running pod writes it when it starts and at every reload; start the pod with \
             `omnidev up` (an older omnidev did not write it), or read every line with `omnidev logs`"
        )
    )]
    NoMark {
        /// The mark file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },

    /// A service name given on the command line does not follow the syntax.
    #[error(transparent)]
    #[diagnostic(
        code(omnidev::logs::bad_name),
        help("service names are those of the profile; `omnidev status` lists them")
    )]
    BadName(#[from] omnidev_pod::names::BadName),

    /// `up --detach` could not start the background pod.
    #[error("could not start the pod in the background")]
    #[diagnostic(code(omnidev::detach::spawn), help("check that {} is still executable", program.display()))]
    DetachSpawn {
        /// The program re-executed.
        program: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The background pod exited before it became ready.
    #[error("the background pod exited ({status}) before it was ready")]
    #[diagnostic(code(omnidev::detach::exited), help("its output is in {}:\n{tail}", log.display()))]
    DetachExited {
        /// How it ended.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that file.
        tail: String,
    },

    /// The background pod did not become ready in time.
    #[error("the pod was not ready within {seconds} s")]
    #[diagnostic(
        code(omnidev::detach::timeout),
        help(
            "it keeps running: see `omnidev status` and `omnidev logs`; raise the limit with --ready-timeout"
        )
    )]
    DetachTimeout {
        /// The limit.
        seconds: u64,
    },

    /// The MCP session on stdin/stdout could not be set up or broke off.
    #[error("the MCP session on stdin/stdout failed: {message}")]
    #[diagnostic(
        code(omnidev::mcp::session),
        help(
            "`omnidev mcp` is started by an MCP client (Claude Code, Codex, Cursor), which speaks the protocol on its stdin and stdout"
        )
    )]
    McpSession {
        /// What went wrong.
        message: String,
    },

    /// An `omnidev mcp` tool was called with an argument out of its range.
    #[error("{message}")]
    #[diagnostic(
        code(omnidev::mcp::argument),
        help("the tool's input schema gives each argument's range")
    )]
    ToolArgument {
        /// Which argument, its value and its range.
        message: String,
    },

    /// The `up` tool of an `omnidev mcp` started without `--allow-up`.
    #[error("starting the pod is not allowed: this MCP server was started without --allow-up")]
    #[diagnostic(
        code(omnidev::mcp::up_not_allowed),
        help(
            "run `omnidev up --detach` in the checkout yourself, or register the server as \
             `omnidev mcp --allow-up` to let agents start the pod"
        )
    )]
    UpNotAllowed,

    /// The checkout's `.python-version` gives no usable version.
    #[error(transparent)]
    #[diagnostic(
        code(omnidev::python_version),
        help("`omnidev omnigent` runs `uv run --python <the checkout's .python-version>`")
    )]
    Python(#[from] omnidev_pod::python::BadPin),

    /// Writing to standard output failed.
    #[error("could not write to standard output")]
    #[diagnostic(code(omnidev::stdout))]
    Stdout(#[source] std::io::Error),

    /// Standard output is a pipe whose reader has gone (`| head`): the
    /// command exits 1 without a message.
    #[error("standard output was closed")]
    #[diagnostic(code(omnidev::stdout_closed))]
    OutputClosed,
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The exit code of this error (see [`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::NotRunning { .. } | Error::NoLogs { .. } => exit::NOT_RUNNING,
            Error::StopTimeout { .. } | Error::DetachTimeout { .. } | Error::TimedOut { .. } => {
                exit::TIMED_OUT
            }
            Error::UnknownService { .. }
            | Error::BadRequest { .. }
            | Error::InvalidProfile { .. }
            | Error::NoSuchPod { .. }
            | Error::NoLog { .. }
            | Error::BadName(_)
            | Error::HostForcedTwice { .. }
            | Error::ToolArgument { .. }
            | Error::UnknownDatabase { .. }
            | Error::Pod(
                omnidev_pod::Error::NotAPod { .. }
                | omnidev_pod::Error::UnknownPort { .. }
                | omnidev_pod::Error::UnknownService { .. }
                | omnidev_pod::Error::BadScale { .. }
                | omnidev_pod::Error::DatabaseAsRoot { .. },
            ) => exit::USAGE,
            _ => exit::FAILED,
        }
    }

    /// A closure turning an I/O error into [`Error::Io`].
    pub fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { action, path, source }
    }

    /// A closure turning the error of starting (or waiting for) `program`
    /// into [`Error::Spawn`].
    pub fn spawn(program: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> Error {
        let program = program.to_string();
        move |source| {
            let help = spawn_help(&program, &source);
            Error::Spawn { program, source, help }
        }
    }

    /// A closure turning an error writing `path` into [`Error::Write`].
    pub fn write(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Write { path, source }
    }
}

/// What to do when `program` could not be started, by the real cause:
/// a program missing is one cause among several.
fn spawn_help(program: &str, error: &std::io::Error) -> String {
    let environment: usize =
        std::env::vars_os().map(|(name, value)| name.len() + value.len() + 2).sum();
    match error.kind() {
        _ if error.raw_os_error() == Some(libc::E2BIG) => format!(
            "its arguments and environment are too large for the system to start it \
             (E2BIG; this environment alone holds {environment} bytes, and the pod's \
             env files and [env] add theirs): unset large variables or shorten them"
        ),
        std::io::ErrorKind::InvalidInput => "an argument or an environment variable holds a \
             NUL byte, which no program can be given: look in the command, the env files \
             and the profile's [env]"
            .to_owned(),
        std::io::ErrorKind::PermissionDenied => {
            format!("`{program}` is there but may not be run: check its mode and its directory's")
        }
        std::io::ErrorKind::NotFound => format!("check that `{program}` is installed and on PATH"),
        _ => format!("the system refused to start `{program}` (the error above says why)"),
    }
}

/// Prints `report` to stderr as miette renders it (with its colours on a
/// terminal), every text of it (message, help, causes, related) first
/// through the one sanitiser: an error that quotes an argument, a path or a
/// name holding escape sequences shows them, never obeys them.
pub fn print(report: &miette::Report) {
    use std::io::Write as _;
    let shown = miette::Report::new(Shown::of(report.as_ref()));
    let _ = writeln!(std::io::stderr(), "{shown:?}");
}

/// A diagnostic's texts as [`omnidev_core::text::message`] shows them,
/// owned, with its code, severity and causes (what [`print()`] renders).
#[derive(Debug, Default)]
struct Shown {
    message: String,
    code: Option<String>,
    help: Option<String>,
    url: Option<String>,
    severity: Option<miette::Severity>,
    cause: Option<Box<Shown>>,
    related: Vec<Shown>,
}

impl Shown {
    fn text(text: &dyn std::fmt::Display) -> String {
        omnidev_core::text::message(&text.to_string()).into_owned()
    }

    fn of(diagnostic: &dyn miette::Diagnostic) -> Self {
        let cause = match diagnostic.diagnostic_source() {
            Some(cause) => Some(Self::of(cause)),
            None => diagnostic.source().map(Self::of_error),
        };
        Self {
            // One line: a line break in it is a path's or a name's (a
            // checkout `a\nb`), shown, never a second line of the message.
            message: omnidev_core::text::quote(&diagnostic.to_string()).into_owned(),
            code: diagnostic.code().map(|code| Self::text(&code)),
            help: diagnostic.help().map(|help| Self::text(&help)),
            url: diagnostic.url().map(|url| Self::text(&url)),
            severity: diagnostic.severity(),
            cause: cause.map(Box::new),
            related: diagnostic
                .related()
                .map(|related| related.map(Self::of).collect())
                .unwrap_or_default(),
        }
    }

    fn of_error(error: &(dyn std::error::Error + 'static)) -> Self {
        Self {
            message: Self::text(&error),
            cause: error.source().map(|cause| Box::new(Self::of_error(cause))),
            ..Self::default()
        }
    }
}

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Shown {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_deref().map(|cause| cause as &(dyn std::error::Error + 'static))
    }
}

impl miette::Diagnostic for Shown {
    fn code<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        self.code.as_ref().map(|code| Box::new(code) as Box<dyn std::fmt::Display>)
    }

    fn help<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        self.help.as_ref().map(|help| Box::new(help) as Box<dyn std::fmt::Display>)
    }

    fn url<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        self.url.as_ref().map(|url| Box::new(url) as Box<dyn std::fmt::Display>)
    }

    fn severity(&self) -> Option<miette::Severity> {
        self.severity
    }

    fn diagnostic_source(&self) -> Option<&dyn miette::Diagnostic> {
        self.cause.as_deref().map(|cause| cause as &dyn miette::Diagnostic)
    }

    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        if self.related.is_empty() {
            return None;
        }
        Some(Box::new(self.related.iter().map(|related| related as &dyn miette::Diagnostic)))
    }
}

/// The exit code of a report: [`Error::exit_code`] for the CLI's own
/// errors, [`exit::FAILED`] for anything else.
pub fn exit_code(report: &miette::Report) -> u8 {
    report.downcast_ref::<Error>().map_or(exit::FAILED, Error::exit_code)
}

/// The one JSON record a command given `--json` prints for an error:
/// `{"error": {"code", "message", "help", "exit"}}`. `message` is the error
/// and its causes, joined with `: `.
pub fn json_record(report: &miette::Report) -> String {
    omnidev_core::text::json_line(&error_value(report))
}

/// [`json_record`] as a value.
fn error_value(report: &miette::Report) -> serde_json::Value {
    let diagnostic: &dyn miette::Diagnostic = report.as_ref();
    let message = omnidev_core::text::with_causes(diagnostic);
    value(
        &diagnostic.code().map_or_else(|| "omnidev::error".to_owned(), |c| c.to_string()),
        &message,
        diagnostic.help().map(|h| h.to_string()).as_deref(),
        exit_code(report),
    )
}

/// `{"error": {…}}` with a newline.
pub fn error_record(code: &str, message: &str, help: Option<&str>, exit: u8) -> String {
    omnidev_core::text::json_line(&value(code, message, help, exit))
}

fn value(code: &str, message: &str, help: Option<&str>, exit: u8) -> serde_json::Value {
    serde_json::json!({
        "error": { "code": code, "message": message, "help": help, "exit": exit }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A diagnostic whose every text is outside input.
    #[derive(Debug, thiserror::Error, miette::Diagnostic)]
    #[error("could not run `{program}`")]
    #[diagnostic(code(omnidev::test), help("check `{program}`"))]
    struct Quoting {
        program: String,
        #[source]
        cause: std::io::Error,
    }

    /// `report` as [`print`] renders it, in colour (miette's own SGR).
    fn rendered(report: &miette::Report) -> String {
        let mut out = String::new();
        let handler = miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode());
        handler.render_report(&mut out, &Shown::of(report.as_ref())).expect("render");
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Whatever an error quotes (message, help, cause), the rendered
        /// report holds no escape but miette's own SGR colours and no
        /// control but line breaks and tabs.
        #[test]
        fn a_rendered_error_obeys_nothing_it_quotes(
            program in omnidev_test_support::hostile::text(),
            cause in omnidev_test_support::hostile::text(),
        ) {
            let report = miette::Report::new(Quoting {
                program: program.clone(),
                cause: std::io::Error::other(cause),
            });
            let out = rendered(&report);
            let mut rest = out.as_str();
            while let Some(at) = rest.find('\x1b') {
                let sgr = rest[at..]
                    .strip_prefix("\x1b[")
                    .and_then(|params| params.find('m').map(|end| &params[..end]));
                prop_assert!(
                    sgr.is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit() || b == b';')),
                    "not miette's SGR: {out:?}"
                );
                rest = &rest[at + 1..];
            }
            prop_assert!(
                !out.chars().any(|c| !"\x1b\n\t".contains(c) && omnidev_core::text::obeyed(c)),
                "{out:?}"
            );
        }
    }
}

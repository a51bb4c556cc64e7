//! The error type of `omnidev-pod`: every failure names what, where, and the fix.

use std::path::PathBuf;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation on a path failed. The OS error is part of the
    /// message and not a cause of its own (it would be told twice), and the
    /// hint asks for the access the action needs.
    #[error("could not {action} {}: {error}", path.display())]
    #[diagnostic(
        code(omnidev::pod::io),
        help("check that the path exists and that you may {} it", access_needed(action))
    )]
    Io {
        /// What was being done, e.g. "create directory".
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },

    /// An atomic state-file write failed.
    #[error("could not write {}", path.display())]
    #[diagnostic(
        code(omnidev::pod::write),
        help("check free disk space and the permissions of the pod directory")
    )]
    Write {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// No `.git` or `.jj` was found walking up from the start directory.
    #[error(
        "no repository found: looked for `.git` or `.jj` in {} and every parent directory",
        start.display()
    )]
    #[diagnostic(
        code(omnidev::pod::no_repo),
        help("run omnidev inside a checkout, or pass `--repo DIR` to name the checkout root")
    )]
    RepoNotFound {
        /// The directory the search started from.
        start: PathBuf,
    },

    /// The repository does not have the shape the profile requires.
    #[error(
        "{} does not look like a checkout for this profile: missing {}",
        root.display(),
        missing.join(", ")
    )]
    #[diagnostic(
        code(omnidev::pod::repo_shape),
        help(
            "the profile expects the directories [{}] at the checkout root; pass `--repo DIR` \
             with the right checkout, or write an `omnidev.toml` profile for this repository",
            expected.join(", ")
        )
    )]
    RepoShape {
        /// The checkout root examined.
        root: PathBuf,
        /// Markers that were not found.
        missing: Vec<String>,
        /// Every marker the profile requires.
        expected: Vec<String>,
    },

    /// Neither `XDG_CACHE_HOME` nor `HOME` is an absolute path.
    #[error("cannot find a cache directory: neither XDG_CACHE_HOME nor HOME is an absolute path")]
    #[diagnostic(
        code(omnidev::pod::no_cache_dir),
        help("set HOME (or XDG_CACHE_HOME) to an absolute path, or pass `--pod-dir PATH`")
    )]
    NoCacheDir,

    /// A state file (such as `pod.toml`) could not be parsed.
    #[error("{} is corrupt: {message}", path.display())]
    #[diagnostic(
        code(omnidev::pod::corrupt_state),
        help(
            "the file was left untouched; fix it by hand, or delete it to let omnidev \
             allocate fresh ports"
        )
    )]
    CorruptState {
        /// The file.
        path: PathBuf,
        /// The parser's description of the problem.
        message: String,
    },

    /// A state value could not be serialised.
    #[error("could not serialise {what}: {message}")]
    #[diagnostic(code(omnidev::pod::serialise), help("this is a bug in omnidev; please report it"))]
    Serialise {
        /// What was being serialised.
        what: &'static str,
        /// The serialiser's message.
        message: String,
    },

    /// A requested port is in use.
    #[error("port {port} requested for `{name}` is already in use{}", holder.as_ref().map_or_else(String::new, |h| format!(" (held by {h})")))]
    #[diagnostic(
        code(omnidev::pod::port_busy),
        help(
            "stop whatever listens on port {port} (e.g. `lsof -i :{port}`), or choose another \
             port, or drop the override to let omnidev pick a free one"
        )
    )]
    PortBusy {
        /// The port's name in the profile.
        name: String,
        /// The port number.
        port: u16,
        /// Who listens on it (`pid 4242 (python3 -m http.server 8123)`),
        /// when it can be told.
        holder: Option<String>,
    },

    /// No free port exists at or above a base.
    #[error("no free port for `{name}` between {base} and 65535")]
    #[diagnostic(
        code(omnidev::pod::no_free_port),
        help("free some ports, or remove stale pods with `omnidev clean`")
    )]
    NoFreePort {
        /// The port's name.
        name: String,
        /// Where probing started.
        base: u16,
    },

    /// An override names a port the profile does not declare.
    #[error("unknown port name `{name}`; the profile declares: {}", known.join(", "))]
    #[diagnostic(
        code(omnidev::pod::unknown_port),
        help("use one of the port names from the profile's [ports] table")
    )]
    UnknownPort {
        /// The name given.
        name: String,
        /// The declared names.
        known: Vec<String>,
    },

    /// The pod has no persisted ports yet.
    #[error("the pod at {} has no allocated ports yet ({} is missing)", pod_dir.display(), pod_dir.join("pod.toml").display())]
    #[diagnostic(
        code(omnidev::pod::no_ports),
        help("start the pod once with `omnidev up` so that its ports are allocated")
    )]
    NoPorts {
        /// The pod directory.
        pod_dir: PathBuf,
    },

    /// Another omnidev holds the pod's lock.
    #[error(
        "another omnidev is already running for the pod {} (pid {})",
        pod_dir.display(),
        pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string())
    )]
    #[diagnostic(
        code(omnidev::pod::already_running),
        help(
            "`omnidev attach` opens its terminal UI, `omnidev stop` stops it; or use another `--pod-dir`"
        )
    )]
    AlreadyRunning {
        /// The pod directory.
        pod_dir: PathBuf,
        /// The holder's pid, as written into the lock file (if readable).
        pid: Option<u32>,
    },

    /// A removal (`omnidev gc`, `omnidev clean`) holds the pod's lock.
    #[error(
        "the pod {} is being removed by `omnidev {by}`{}",
        pod_dir.display(),
        pid.map_or_else(String::new, |p| format!(" (pid {p})"))
    )]
    #[diagnostic(
        code(omnidev::pod::being_removed),
        help("run the command again once it is done: the pod is made afresh")
    )]
    BeingRemoved {
        /// The pod directory.
        pod_dir: PathBuf,
        /// The remover's pid, as written into the lock file.
        pid: Option<u32>,
        /// The command removing it.
        by: &'static str,
    },

    /// A profile could not be parsed or is invalid.
    #[error("{origin}:{line}:{column}: {message}")]
    #[diagnostic(
        code(omnidev::pod::profile),
        help(
            "`omnidev help profile` describes the format; `omnidev profile check` checks a profile without running it"
        )
    )]
    Profile {
        /// Where the profile came from (a path, or `<embedded omnigent profile>`).
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column (in characters).
        column: usize,
        /// What is wrong.
        message: String,
    },

    /// A `Procfile` line `omnidev init` cannot turn into a service.
    #[error("{}{}: {message}", path.display(), if *line > 0 { format!(":{line}") } else { String::new() })]
    #[diagnostic(
        code(omnidev::pod::procfile),
        help(
            "a Procfile has one `name: command` per line (names in a-z, 0-9, `_`, `-`); \
             fix the line, or move the Procfile aside for a generic omnidev.toml"
        )
    )]
    Procfile {
        /// The Procfile.
        path: PathBuf,
        /// 1-based line (0 for the file as a whole).
        line: usize,
        /// What is wrong.
        message: String,
    },

    /// `omnidev init` found a profile already there.
    #[error("{} already exists; not touching it", path.display())]
    #[diagnostic(
        code(omnidev::pod::profile_exists),
        help(
            "`omnidev profile check` checks it; `omnidev init --force` replaces it with a new one"
        )
    )]
    ProfileExists {
        /// The existing file.
        path: PathBuf,
    },

    /// A server database would run as root, which Postgres and MariaDB
    /// refuse.
    #[error("database `{name}` ({engine}) cannot run as root: its server refuses to")]
    #[diagnostic(
        code(omnidev::pod::database_as_root),
        help(
            "run omnidev as an unprivileged user (`runuser -u USER -- omnidev up`, or a \
             login of your own); an `engine = \"sqlite\"` database runs as anyone"
        )
    )]
    DatabaseAsRoot {
        /// The database.
        name: String,
        /// Its engine.
        engine: &'static str,
    },

    /// `--db ENGINE` for a profile whose databases cannot run on it.
    #[error("no database of the profile runs on {engine} (it declares: {declared})")]
    #[diagnostic(
        code(omnidev::pod::no_database_for),
        help(
            "a database lists the engines `--db` may move it to: \
             `[databases.NAME.engines.{engine}]` with the URL `scheme` and `driver` it takes there"
        )
    )]
    NoDatabaseFor {
        /// The engine asked for.
        engine: &'static str,
        /// The databases there are.
        declared: String,
    },

    /// A `[links.NAME]` of the profile cannot be followed.
    #[error("link `{name}`: {message}")]
    #[diagnostic(code(omnidev::pod::link), help("{help}"))]
    Link {
        /// The link.
        name: String,
        /// What is wrong.
        message: String,
        /// What to do.
        help: String,
    },

    /// A database's data could not be copied, snapshotted or restored.
    #[error("database `{name}`: {message}")]
    #[diagnostic(code(omnidev::pod::database_data), help("{help}"))]
    DatabaseData {
        /// The database.
        name: String,
        /// What went wrong.
        message: String,
        /// What to do.
        help: String,
    },

    /// A server database's programs are not installed.
    #[error("`{program}` is not installed (looked on PATH and in /usr/lib/postgresql/*/bin)")]
    #[diagnostic(
        code(omnidev::pod::database_missing),
        help(
            "install it: `apt install {package}` on Debian and Ubuntu, `brew install {package}` on macOS"
        )
    )]
    DatabaseProgramMissing {
        /// The server program.
        program: &'static str,
        /// The package that has it.
        package: &'static str,
    },

    /// An env file (`env-files`) could not be parsed or is unusable.
    #[error("env file {}: {message}", path.display())]
    #[diagnostic(
        code(omnidev::pod::env_file),
        help(
            "env files are read as foreman and honcho read `.env`: `KEY=value` or \
             `export KEY=value` per line, `#` comments, 'single' (as written) or \
             \"double\" quotes (`\\n`, `\\t`, `\\\"`, `\\\\`, `\\$`), and `$` is literal"
        )
    )]
    EnvFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },

    /// A directory given as a pod directory does not carry omnidev's pod
    /// identity (and is not empty, or is being removed).
    #[error("{} is not an omnidev pod ({reason}): refusing to use or remove it", path.display())]
    #[diagnostic(
        code(omnidev::pod::not_a_pod),
        help(
            "a pod directory is one omnidev created: it holds the `.omnidev-pod` identity \
             omnidev wrote; give `--pod-dir` a new or empty directory, or leave it out to use \
             the default (a pod made by an omnidev older than the identity gets one at its \
             next `omnidev up`)"
        )
    )]
    NotAPod {
        /// The directory.
        path: PathBuf,
        /// Why it is not taken for a pod.
        reason: String,
    },

    /// The per-user registry of pods holding ports does not parse.
    #[error("the pod registry {} is corrupt: {message}", path.display())]
    #[diagnostic(
        code(omnidev::pod::corrupt_registry),
        help(
            "it lists the pod directories that hold ports, and was left untouched so no claim \
             is lost; fix it by hand (`pods = [\"/path/to/pod\", ...]`), or move it aside: \
             omnidev then rebuilds it from the pods under the cache root (pods made with \
             `--pod-dir` elsewhere register again at their next `omnidev up`)"
        )
    )]
    CorruptRegistry {
        /// The registry file.
        path: PathBuf,
        /// The parser's description of the problem.
        message: String,
    },

    /// A path omnidev was about to write inside the pod leads out of it.
    #[error("refusing to write {}: {reason}", path.display())]
    #[diagnostic(
        code(omnidev::pod::outside_pod),
        help(
            "omnidev writes only inside the pod directory and never follows a symbolic link \
             there; remove the link (or run `omnidev clean`), then start again"
        )
    )]
    OutsidePod {
        /// The path inside the pod.
        path: PathBuf,
        /// Why writing it would leave the pod.
        reason: String,
    },

    /// A `--only` / `--skip` name is not a service of the profile.
    #[error("unknown service `{name}`; the profile has: {}", known.join(", "))]
    #[diagnostic(
        code(omnidev::pod::unknown_service),
        help("use one of the service names from the profile")
    )]
    UnknownService {
        /// The name given.
        name: String,
        /// The profile's services.
        known: Vec<String>,
    },

    /// `--scale NAME=N` asks for no copy or too many.
    #[error("--scale {name}={count}: a service runs 1 to {max} copies", max = crate::names::MAX_REPLICAS)]
    #[diagnostic(
        code(omnidev::pod::bad_scale),
        help("give a count from 1 to {max}; `--skip {name}` runs none", max = crate::names::MAX_REPLICAS)
    )]
    BadScale {
        /// The service.
        name: String,
        /// The count given.
        count: u32,
    },

    /// Nothing would run: the profile has no service, or the selection
    /// left none.
    #[error("no service left to run: {reason}")]
    #[diagnostic(code(omnidev::pod::nothing_to_run), help("{help}"))]
    NothingToRun {
        /// Why none is left.
        reason: &'static str,
        /// What to change.
        help: &'static str,
    },

    /// A value needed for rendering is missing from the render context.
    #[error("cannot render the profile: {message}")]
    #[diagnostic(
        code(omnidev::pod::render),
        help("allocate every port the profile declares before rendering")
    )]
    Render {
        /// What is missing.
        message: String,
    },

    /// Forced ports of one pod collide, or one is out of range.
    #[error("{message}")]
    #[diagnostic(
        code(omnidev::pod::port_conflict),
        help("give every forced port its own number between 1 and 65535 (`--port NAME=N`)")
    )]
    PortConflict {
        /// What collides.
        message: String,
    },

    /// A forced port was lost to another process: omnidev does not move a
    /// port the user chose.
    #[error("port {port} of `{name}` is forced, and is held by {holder}")]
    #[diagnostic(
        code(omnidev::pod::forced_port_taken),
        help("stop that process, or start without the override to let omnidev pick a free port")
    )]
    ForcedPortTaken {
        /// The port's name.
        name: String,
        /// The port.
        port: u16,
        /// Who holds it (`pid 4242 (python3 -m http.server)`).
        holder: String,
    },

    /// A directory omnidev keeps private (the runtime directory, the cache
    /// root, a pod) is not safe to use.
    #[error("refusing to use {} for {holds}: {reason}", path.display())]
    #[diagnostic(code(omnidev::pod::unsafe_dir), help("{fix}"))]
    UnsafeDir {
        /// The directory.
        path: PathBuf,
        /// What it would hold.
        holds: &'static str,
        /// What is wrong with it.
        reason: String,
        /// What to run.
        fix: String,
    },

    /// A control socket path does not fit a Unix socket address.
    #[error(
        "the control socket path {} is {len} bytes; a Unix socket path must be at most {max} bytes",
        path.display()
    )]
    #[diagnostic(
        code(omnidev::pod::socket_path),
        help("set XDG_RUNTIME_DIR to a short directory of yours (e.g. /run/user/$(id -u))")
    )]
    SocketPathTooLong {
        /// The path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The longest a socket path may be.
        max: usize,
    },

    /// The web package manager is not installed.
    #[error("`{tool}` is needed to run the web UI in {} but was not found on PATH", dir.display())]
    #[diagnostic(
        code(omnidev::pod::package_manager_missing),
        help("{hint}, or run the backend only with `--no-vite`")
    )]
    PackageManagerMissing {
        /// The missing program (e.g. `pnpm`, or `pnpm (or corepack)`).
        tool: String,
        /// The web directory whose lockfile selected it.
        dir: PathBuf,
        /// How to install it.
        hint: String,
    },

    /// A `package.json` read to detect the package manager is malformed.
    #[error("cannot use {}: {message}", path.display())]
    #[diagnostic(
        code(omnidev::pod::manifest),
        help("fix the file, or run the backend only with `--no-vite`")
    )]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

impl Error {
    /// Wraps an I/O error with what was being done and where.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |error| Self::Io { action, path, error }
    }
}

/// What an [`Error::Io`] action needs of its path: reading only when it
/// reads, examines or resolves it (a profile, a state file, the checkout),
/// else writing too (a pod directory, a lock).
fn access_needed(action: &str) -> &'static str {
    let reads = ["read", "examine", "resolve", "open the checkout", "use the checkout"];
    if reads.iter().any(|verb| action.starts_with(verb)) { "read" } else { "read and write" }
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use miette::Diagnostic as _;

    /// A missing profile: one cause (the OS error once, in the message, not
    /// again as a cause), and a hint that asks only for read access.
    #[test]
    fn an_io_error_tells_its_cause_once_with_the_access_it_needs() {
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        let error = Error::io("read the profile", "/nope.toml")(missing);
        assert_eq!(error.to_string(), "could not read the profile /nope.toml: entity not found");
        assert!(std::error::Error::source(&error).is_none());
        let help = error.help().expect("help").to_string();
        assert_eq!(help, "check that the path exists and that you may read it");
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let error = Error::io("create the directory", "/pod")(denied);
        let help = error.help().expect("help").to_string();
        assert!(help.ends_with("you may read and write it"), "{help}");
    }
}

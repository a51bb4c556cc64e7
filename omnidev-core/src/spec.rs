//! Service specifications: the plain data a supervisor is started from.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A program to run: no shell is involved unless the program is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CommandSpec {
    /// The program, looked up on `PATH` when it has no slash.
    pub program: String,
    /// Arguments, passed verbatim.
    #[serde(default)]
    pub args: Vec<String>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Variables set on top of the inherited environment.
    #[serde(default)]
    pub env: Env,
}

/// A command's variables: a map shared by many commands (a pod's
/// environment, one copy for every service) under the command's own, which
/// win. Cloning it copies only its own variables, so a pod's cost is linear
/// in its profile, not services × variables. Serialized as one map.
///
/// ```
/// use std::sync::Arc;
/// use omnidev_core::Env;
/// let pod = Arc::new([("A".to_owned(), "pod".to_owned()), ("B".to_owned(), "pod".to_owned())].into());
/// let mut env = Env::over(&pod);
/// env.insert("B".into(), "own".into());
/// assert_eq!((env["A"].as_str(), env["B"].as_str()), ("pod", "own"));
/// assert_eq!(env.iter().count(), 2);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Env {
    shared: Arc<BTreeMap<String, String>>,
    own: BTreeMap<String, String>,
}

impl Env {
    /// No variables of its own over `shared`.
    pub fn over(shared: &Arc<BTreeMap<String, String>>) -> Self {
        Self { shared: Arc::clone(shared), own: BTreeMap::new() }
    }

    /// Sets `key` (for this command only).
    pub fn insert(&mut self, key: String, value: String) {
        self.own.insert(key, value);
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&String> {
        self.own.get(key).or_else(|| self.shared.get(key))
    }

    /// Every variable once, the command's own winning.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        let own = &self.own;
        self.shared.iter().filter(move |(key, _)| !own.contains_key(*key)).chain(own)
    }

    fn merged(&self) -> BTreeMap<&String, &String> {
        self.iter().collect()
    }
}

impl PartialEq for Env {
    fn eq(&self, other: &Self) -> bool {
        (Arc::ptr_eq(&self.shared, &other.shared) && self.own == other.own)
            || self.merged() == other.merged()
    }
}

impl Eq for Env {}

impl std::ops::Index<&str> for Env {
    type Output = String;
    fn index(&self, key: &str) -> &String {
        self.get(key).expect("no such variable")
    }
}

impl Extend<(String, String)> for Env {
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, items: I) {
        self.own.extend(items);
    }
}

impl FromIterator<(String, String)> for Env {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(items: I) -> Self {
        Self { shared: Arc::default(), own: items.into_iter().collect() }
    }
}

impl<'e> IntoIterator for &'e Env {
    type Item = (&'e String, &'e String);
    type IntoIter = Box<dyn Iterator<Item = Self::Item> + 'e>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl Serialize for Env {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.merged())
    }
}

impl<'de> Deserialize<'de> for Env {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(deserializer).map(|own| Self { shared: Arc::default(), own })
    }
}

/// The largest values omnidev accepts for durations, checked where values
/// enter (profiles, command-line flags, the control socket) so that no
/// deadline can overflow and no stop can be made to wait for ever.
pub mod limits {
    use std::time::Duration;

    /// Longest stop grace period (`grace-ms`): 10 minutes.
    pub const MAX_GRACE: Duration = Duration::from_secs(600);
    /// Longest pause between readiness attempts (`interval-ms`): 10 minutes.
    pub const MAX_READY_INTERVAL: Duration = Duration::from_secs(600);
    /// Longest time before "not ready" is reported (`timeout-ms`, and
    /// `up --ready-timeout`): 24 hours.
    pub const MAX_READY_TIMEOUT: Duration = Duration::from_secs(86_400);
    /// Longest file-watch debounce (`debounce-ms`, `up --debounce`): 1 minute.
    pub const MAX_DEBOUNCE: Duration = Duration::from_secs(60);
    /// Longest wait for a request (`restart --timeout`, `stop --timeout`,
    /// the control protocol's `timeout-secs`): 24 hours.
    pub const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(86_400);
}

/// When a dependent may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Condition {
    /// As soon as the dependency's process has been spawned. Like every
    /// condition, also met by a dependency that has exited 0 and is not
    /// restarted (a finished one-shot never holds its dependents back).
    Started,
    /// Once the dependency's readiness probe has passed (or, without a probe,
    /// once it has been spawned).
    #[default]
    Ready,
    /// Once the dependency has exited 0: a one-shot task (a migration, a
    /// code generator) that must finish first. A dependency that exited
    /// otherwise blocks its dependents (see [`ServiceState::Blocked`]).
    ///
    /// [`ServiceState::Blocked`]: crate::ServiceState::Blocked
    Completed,
}

/// An edge of the dependency graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Dependency {
    /// Name of the service depended on.
    pub service: String,
    /// What the dependency must reach first.
    #[serde(default)]
    pub condition: Condition,
}

/// How readiness is checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum ProbeSpec {
    /// HTTP GET expecting a 2xx status.
    Http {
        /// Full URL, e.g. `http://127.0.0.1:6767/health`.
        url: String,
        /// Optional `Host` header to send.
        #[serde(default)]
        host: Option<String>,
    },
    /// A TCP connect succeeding.
    Tcp {
        /// `host:port` to connect to.
        address: String,
    },
    /// A command exiting 0.
    Command(CommandSpec),
    /// A line of the service's output (stdout or stderr, colour codes
    /// removed) matching the regular expression `pattern`, written by the
    /// current run. See [`crate::probe::compile_log_pattern`] for the limits.
    Log {
        /// The regular expression (Rust `regex` syntax).
        pattern: String,
    },
}

/// A readiness probe with its timing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Readiness {
    /// What to check.
    pub probe: ProbeSpec,
    /// The longest pause between two attempts; polling starts at tens of
    /// milliseconds and backs off up to this.
    pub interval: Duration,
    /// How long after spawn before a "probe timed out" event is published.
    /// Polling carries on after it.
    pub timeout: Duration,
    /// The port the service itself must listen on (an HTTP or TCP probe
    /// on one of a pod's ports): the probe passes only while that port's
    /// listener is a process of the service ([`crate::listener`]), and a
    /// crash while another process holds the port is reported (and, with
    /// a [`crate::supervisor::PortMover`], the port is moved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<u16>,
}

/// Whether an exit the supervisor did not ask for is followed by a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// Restart after any exit (the default for long-running dev servers).
    #[default]
    Always,
    /// Restart only after a non-zero exit or a death by signal.
    OnFailure,
    /// Never restart.
    Never,
}

/// How a service is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StopSpec {
    /// Signal number sent to the process group first (default SIGTERM).
    pub signal: i32,
    /// How long to wait before SIGKILL of the whole group (default 5 s).
    pub grace: Duration,
}

impl Default for StopSpec {
    fn default() -> Self {
        Self { signal: libc::SIGTERM, grace: Duration::from_secs(5) }
    }
}

/// When a prepare step runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum PrepareWhen {
    /// Every time the service is (re)started.
    #[default]
    Always,
    /// Only when `target` is missing or any existing file of `sources` is
    /// newer than it (e.g. `node_modules/` against `package.json` and the
    /// lockfile). Checked at each start, so a manual restart re-checks.
    Stale {
        /// The output whose age is compared.
        target: PathBuf,
        /// The inputs; missing ones are ignored.
        sources: Vec<PathBuf>,
    },
}

/// A command run to completion before a service starts. A failure (a
/// non-zero exit, or a program that cannot be started) is reported once and
/// the service is not started: it rests in [`crate::ServiceState::Failed`]
/// until a `sources` file of a [`PrepareWhen::Stale`] step changes, or a
/// start or restart is requested. The next attempt runs the steps whether
/// they look stale or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PrepareStep {
    /// Short label shown in events (e.g. `npm install`).
    pub name: String,
    /// What to run; its output goes to the service's log.
    pub command: CommandSpec,
    /// When to run it.
    #[serde(default)]
    pub when: PrepareWhen,
    /// While the step prints nothing for this long, a heartbeat line is
    /// logged (default 5 s).
    pub heartbeat: Duration,
}

/// One supervised service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ServiceSpec {
    /// Unique name, used in events, logs and file names.
    pub name: String,
    /// The long-running command.
    pub command: CommandSpec,
    /// Services that must reach a condition before this one starts.
    #[serde(default)]
    pub depends_on: Vec<Dependency>,
    /// Optional readiness probe.
    #[serde(default)]
    pub readiness: Option<Readiness>,
    /// Restart policy.
    #[serde(default)]
    pub restart: RestartPolicy,
    /// Stop signal and grace period.
    #[serde(default)]
    pub stop: StopSpec,
    /// Steps run to completion before each start.
    #[serde(default)]
    pub prepare: Vec<PrepareStep>,
    /// Why this service cannot run here, found before starting (e.g. a
    /// Node.js below the one its toolchain needs): the supervisor does not
    /// start it and shows it [`crate::ServiceState::Failed`] with this
    /// reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// Whether this service lets the others start first: while another
    /// service that does not yield is preparing or starting (its probe
    /// not yet passed nor timed out), this one's prepare steps and run are
    /// in the background ([`crate::platform::set_background`]: lowest CPU
    /// and I/O priority); in the foreground again once none is. For work
    /// nothing waits on while a longer chain starts: a web UI's install
    /// and dev server beside a backend whose host waits for its server.
    #[serde(default, rename = "yield", skip_serializing_if = "std::ops::Not::not")]
    pub yields: bool,
    /// The URLs it serves, for people: [`crate::ServiceStatus::urls`] shows
    /// them while it runs ready. They are not how it runs: a change of
    /// them alone restarts nothing ([`ServiceSpec::runs_as`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<NamedUrl>,
    /// What its processes may use ([`Limits`]); none by default.
    #[serde(default, skip_serializing_if = "Limits::is_none")]
    pub limits: Limits,
    /// It stands for a service of another pod this one is linked to (it
    /// watches that service, ready while it is ready there). A run that
    /// exits with [`LINK_DOWN`] says the service is not ready there: this
    /// one shows [`crate::ServiceState::Blocked`] with the run's last line
    /// as the reason, its dependents are stopped and wait, blocked on it,
    /// and it is run again after [`LINK_RETRY`] (not a crash: no backoff
    /// grows, no restart is counted) until it is ready again. That run
    /// gets the reason in [`LINK_DOWN_ENV`]: it stays quiet and running
    /// while the reason holds, and says `ready` once the service is, or
    /// another reason (exiting with [`LINK_DOWN`] again).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub link: bool,
}

/// The exit code of a [`ServiceSpec::link`] run that says the service it
/// watches is not ready in its pod (`EX_TEMPFAIL`).
pub const LINK_DOWN: i32 = 75;

/// The variable a [`ServiceSpec::link`] run started while its service is
/// down gets: the reason the previous run gave.
pub const LINK_DOWN_ENV: &str = "OMNIDEV_LINK_DOWN";

/// How soon a [`ServiceSpec::link`] run that said its service is down is
/// run again to look.
pub const LINK_RETRY: Duration = Duration::from_secs(1);

/// What a service's processes (or a pod's) may use. Where the machine
/// delegates cgroup v2 controllers to omnidev the kernel enforces them
/// (`memory.max`, `cpu.max`); elsewhere the supervisor watches memory
/// itself (twice a second, only while a limit is set) and kills a service
/// over its limit, and a CPU limit is not enforced (a notice says so once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Limits {
    /// Most memory, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<u64>,
    /// Most CPU, in percent of one CPU (`150`: one and a half).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_max: Option<u32>,
}

impl Limits {
    /// Whether it limits nothing.
    pub fn is_none(&self) -> bool {
        self.memory_max.is_none() && self.cpu_max.is_none()
    }
}

/// A URL shown to people under a label (`ui http://localhost:5173`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamedUrl {
    /// Its label (`ui`, `server`).
    pub name: String,
    /// The URL.
    pub url: String,
}

impl ServiceSpec {
    /// A service running `program args…` in `cwd` with every other field at
    /// its default.
    ///
    /// ```
    /// let spec = omnidev_core::spec::ServiceSpec::new("web", "python3", ["-m", "http.server"], ".");
    /// assert_eq!(spec.command.args.len(), 2);
    /// ```
    pub fn new<I, S>(
        name: impl Into<String>,
        program: impl Into<String>,
        args: I,
        cwd: impl Into<PathBuf>,
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            name: name.into(),
            command: CommandSpec {
                program: program.into(),
                args: args.into_iter().map(Into::into).collect(),
                cwd: cwd.into(),
                env: Env::default(),
            },
            depends_on: Vec::new(),
            readiness: None,
            restart: RestartPolicy::default(),
            stop: StopSpec::default(),
            prepare: Vec::new(),
            unavailable: None,
            yields: false,
            urls: Vec::new(),
            limits: Limits::default(),
            link: false,
        }
    }

    /// Whether `other` runs as this one does: the same but for its URLs,
    /// which only say where to look.
    ///
    /// ```
    /// use omnidev_core::spec::{NamedUrl, ServiceSpec};
    /// let web = ServiceSpec::new("web", "python3", ["-m", "http.server"], ".");
    /// let mut moved = web.clone();
    /// moved.urls.push(NamedUrl { name: "ui".into(), url: "http://localhost:8000".into() });
    /// assert!(web.runs_as(&moved));
    /// moved.command.args.push("8001".into());
    /// assert!(!web.runs_as(&moved));
    /// ```
    pub fn runs_as(&self, other: &Self) -> bool {
        self.name == other.name && self.differences(other).is_empty()
    }

    /// What differs in `new`, as the profile names its keys (`command`,
    /// `cwd`, `env`, `depends-on`, `ready`, `restart`, `stop`, `prepare`,
    /// `availability`, `yield`, `limits`, `link`), in that order: empty exactly when a
    /// service of that name runs the same ([`ServiceSpec::runs_as`]; its
    /// URLs are not a difference). Every field is named, none left to
    /// `..`, so a new field must be given its key before this compiles.
    pub fn differences(&self, new: &Self) -> Vec<&'static str> {
        let Self {
            name: _,
            command: CommandSpec { program, args, cwd, env },
            depends_on,
            readiness,
            restart,
            stop,
            prepare,
            unavailable,
            yields,
            urls: _,
            limits,
            link,
        } = self;
        [
            ("command", *program != new.command.program || *args != new.command.args),
            ("cwd", *cwd != new.command.cwd),
            ("env", *env != new.command.env),
            ("depends-on", *depends_on != new.depends_on),
            ("ready", *readiness != new.readiness),
            ("restart", *restart != new.restart),
            ("stop", *stop != new.stop),
            ("prepare", *prepare != new.prepare),
            ("availability", *unavailable != new.unavailable),
            ("yield", *yields != new.yields),
            ("limits", *limits != new.limits),
            ("link", *link != new.link),
        ]
        .into_iter()
        .filter_map(|(key, differs)| differs.then_some(key))
        .collect()
    }
}

/// Log capture settings shared by every service of a supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LogConfig {
    /// Directory for `<service>.log` files; `None` keeps logs in memory only.
    pub dir: Option<PathBuf>,
    /// Size at which a log file is rotated (default 10 MiB).
    pub max_file_bytes: u64,
    /// Rotated files kept: `<service>.log.1` … `.N` (default 3).
    pub keep_files: usize,
    /// Longer lines are split into pieces of this size (default 64 KiB).
    pub max_line_bytes: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            dir: None,
            max_file_bytes: 10 * 1024 * 1024,
            keep_files: 3,
            max_line_bytes: 64 * 1024,
        }
    }
}

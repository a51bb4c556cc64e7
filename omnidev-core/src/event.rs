//! Typed events a supervisor keeps in its history for any number of readers,
//! and the one wording of them (`Display`) that every front-end prints.

use std::fmt;
use std::time::{Duration, SystemTime};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which stream a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Stream {
    /// The child's standard output.
    Stdout,
    /// The child's standard error.
    Stderr,
    /// A line written by the supervisor itself (events, prepare heartbeats).
    Supervisor,
    /// Read back from a log file, which merges the other three: which one
    /// is not known.
    Merged,
}

/// One line of output, as kept in the history and read by its readers.
/// ANSI colour codes are kept; invalid UTF-8 has been replaced. Serialised
/// inside its [`Event`], which carries its service and time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LogLine {
    /// The service the line belongs to (shared by all its lines).
    #[serde(skip)]
    pub service: std::sync::Arc<str>,
    /// Where it came from.
    pub stream: Stream,
    /// The text, without the trailing newline (colour codes kept, invalid
    /// UTF-8 replaced).
    #[serde(rename = "line")]
    pub text: String,
    /// Numbers the pod's lines in the order they were read (across its
    /// services); 0 for a line read back from a log file.
    pub seq: u64,
    /// When omnidev read it (what `--timestamps` shows, and the `ts` of its
    /// record).
    #[serde(skip, default = "SystemTime::now")]
    pub at: SystemTime,
}

impl LogLine {
    /// A line of `service`'s output from `stream`, numbered `seq`, read
    /// now.
    pub fn new(
        service: impl Into<std::sync::Arc<str>>,
        stream: Stream,
        text: impl Into<String>,
        seq: u64,
    ) -> Self {
        Self { service: service.into(), stream, text: text.into(), seq, at: SystemTime::now() }
    }
}

/// How a process ended: `{"code": N}` or `{"signal": N}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

impl ExitStatus {
    /// Whether this is a clean exit (code 0).
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit code {c}"),
            ExitStatus::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// The state of one service, carrying its data.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum ServiceState {
    /// Not started yet: waiting for dependencies.
    #[default]
    Waiting,
    /// Not started, and nothing will start it by itself: a dependency ended
    /// (exited non-zero, was stopped, failed to start) and will not come
    /// back. It starts once that dependency is restarted and meets its
    /// condition.
    Blocked {
        /// Which dependency and how it ended: `waiting for migrate, which
        /// exited with exit code 3`.
        reason: String,
    },
    /// Running prepare steps.
    Preparing,
    /// Spawned; its readiness probe has not passed yet (dependents that
    /// want it ready wait).
    Starting {
        /// Process id of the group leader.
        pid: u32,
    },
    /// Spawned, without a readiness probe: it counts as ready while it
    /// runs.
    Running {
        /// Process id of the group leader.
        pid: u32,
    },
    /// Spawned and its readiness probe passed.
    Ready {
        /// Process id of the group leader.
        pid: u32,
    },
    /// Waiting out a backoff before the next start.
    Restarting {
        /// The wait, in milliseconds.
        #[serde(rename = "backoff-ms", alias = "after", with = "millis")]
        #[schemars(with = "u64")]
        after: Duration,
        /// Which restart attempt this is (1-based).
        attempt: u32,
    },
    /// Killed for going over its memory limit (its own, or the pod's), and
    /// waiting out a backoff before the next start, like a crash.
    OverLimit {
        /// The limit it went over, in bytes.
        #[serde(rename = "limit-bytes")]
        limit: u64,
        /// The limit was the pod's (its services together), not its own.
        #[serde(default, rename = "pod-limit", skip_serializing_if = "std::ops::Not::not")]
        pod: bool,
        /// The wait, in milliseconds.
        #[serde(rename = "backoff-ms", with = "millis")]
        #[schemars(with = "u64")]
        after: Duration,
        /// Which restart attempt this is (1-based).
        attempt: u32,
    },
    /// Being stopped (stop signal sent, grace period running).
    Stopping {
        /// Process id of the group leader.
        pid: u32,
    },
    /// Exited on its own and will not be restarted.
    Exited {
        /// How it ended.
        #[serde(rename = "exit", alias = "status")]
        status: ExitStatus,
    },
    /// Stopped on request; its process group is empty.
    Stopped,
    /// Could not start: a prepare step failed (it waits for a change to the
    /// step's inputs, or a restart) or the service is unavailable here.
    Failed {
        /// What went wrong and what to do, in one line.
        reason: String,
    },
}

/// How a service's state reads at a glance ([`ServiceState::tone`]): what
/// every front-end colours it by, so a clean exit is quiet in each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Tone {
    /// Ready: doing what it was started for.
    Good,
    /// Up, not counted ready yet (starting), or without a probe (running).
    Up,
    /// On its way somewhere: waiting, preparing, stopping.
    Busy,
    /// Down for now and coming back: restarting, over its limit.
    Trouble,
    /// Down until something changes: crashed for good, failed, blocked.
    Bad,
    /// At rest: stopped, or a one-shot that exited 0.
    Quiet,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum EventKind {
    /// A service changed state.
    State {
        /// The new state.
        #[serde(flatten)]
        state: ServiceState,
    },
    /// The service counts as ready: its readiness probe passed, or it has
    /// none and kept running for a second.
    Ready {
        /// The URLs it serves, shown from now on
        /// ([`ServiceStatus::urls`]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        urls: Vec<crate::NamedUrl>,
    },
    /// A readiness probe did not pass within its timeout; polling goes on
    /// and dependents still wait.
    #[serde(rename = "probe-timeout")]
    ProbeTimedOut {
        /// The timeout that passed, in milliseconds.
        #[serde(rename = "after-ms", with = "millis")]
        #[schemars(with = "u64")]
        after: Duration,
    },
    /// An exit the supervisor did not ask for that is followed by a
    /// restart, or that failed (non-zero code or a signal). A clean exit
    /// that is not restarted (a finished one-shot) only changes the state to
    /// [`ServiceState::Exited`].
    Crashed {
        /// How it ended.
        #[serde(rename = "exit")]
        status: ExitStatus,
        /// The restart attempt that follows (0 when none will).
        attempt: u32,
        /// The backoff before that restart, in milliseconds.
        #[serde(rename = "backoff-ms", with = "millis")]
        #[schemars(with = "u64")]
        backoff: Duration,
    },
    /// The service was killed for going over its memory limit (its own,
    /// or the pod's: then it held the most of the pod's services); it is
    /// restarted with the backoff of a crash.
    OverLimit {
        /// What it held when it was killed, in bytes.
        #[serde(rename = "used-bytes")]
        used: u64,
        /// The limit, in bytes.
        #[serde(rename = "limit-bytes")]
        limit: u64,
        /// The limit was the pod's, not the service's own.
        #[serde(default, rename = "pod-limit", skip_serializing_if = "std::ops::Not::not")]
        pod: bool,
        /// The restart attempt that follows (0 when none will).
        attempt: u32,
        /// The backoff before that restart, in milliseconds.
        #[serde(rename = "backoff-ms", with = "millis")]
        #[schemars(with = "u64")]
        backoff: Duration,
    },
    /// The service of a linked pod that this service stands for
    /// ([`crate::spec::ServiceSpec::link`]) is not ready there any more (or
    /// was not when first looked at): this one is blocked, and its
    /// dependents are stopped and wait until it is back.
    LinkDown {
        /// Why, in the watch's words: `the pod /src/api is not running`.
        reason: String,
    },
    /// The service of a linked pod that was down is ready there again: its
    /// dependents start.
    LinkUp,
    /// A link of the pod: what `[links.NAME]` resolved to when the pod
    /// started (a front-end tells it first).
    Link {
        /// The link's name in the profile.
        name: String,
        /// The linked checkout.
        checkout: std::path::PathBuf,
        /// Its pod directory.
        #[serde(rename = "pod-dir")]
        pod_dir: std::path::PathBuf,
        /// Its ports, as this pod's placeholders got them.
        ports: std::collections::BTreeMap<String, u16>,
    },
    /// A reload (restart of a set of services) began: a watcher saw
    /// changed files, or someone asked (`R`, `omnidev restart`).
    #[serde(rename = "reload")]
    Reloading {
        /// The services reloaded (their dependents follow).
        services: Vec<String>,
        /// The changed files that asked for it, when a watcher did.
        #[serde(flatten)]
        changes: Changes,
    },
    /// The port a service must listen on ([`crate::spec::Readiness::listener`])
    /// is held by a process that is not the service's: the service is not
    /// ready (its probe would be answered by that process), and if it
    /// crashed, that is why.
    PortHeld {
        /// The port.
        port: u16,
        /// Who holds it, as people read it: `pid 4242 (python3 -m http.server)`.
        holder: String,
    },
    /// Diagnostics shown only when asked for (`--debug`): a watcher's
    /// decision about a file event, a readiness attempt.
    Debug {
        /// The message.
        message: String,
    },
    /// A prepare step started.
    PrepareStarted {
        /// The step's label.
        step: String,
    },
    /// A prepare step finished.
    PrepareFinished {
        /// The step's label.
        step: String,
        /// Whether it exited 0.
        success: bool,
    },
    /// A line of output (finished: its newline came, or its output
    /// ended).
    Log {
        /// The line.
        #[serde(flatten)]
        line: LogLine,
    },
    /// A line of output still waiting for its newline (a prompt such as
    /// `Password: `, a progress bar redrawn with `\r`), as it stands after
    /// [`crate::logs::PARTIAL_LINE_AFTER`]: the text after its last `\r`.
    /// The next [`EventKind::Log`] or `PartialLine` of the same service and
    /// stream replaces it (the finished line, or the unfinished one as it
    /// stands then). Followers of the history that ask get it; the log
    /// files and the kept lines get the finished line alone, and a line
    /// still unfinished when its output ends is finished then.
    PartialLine {
        /// The line so far (its `seq` numbered among the lines).
        #[serde(flatten)]
        line: LogLine,
    },
    /// A message from the supervisor for people (leftovers stopped, etc.).
    Notice {
        /// The message.
        message: String,
    },
    /// The pod's profile file changed under it (a front-end that watches
    /// the file publishes it): what applying it would change, or why it
    /// cannot be applied. Nothing is applied until someone asks.
    ProfileChanged(ProfileChange),
    /// A changed profile was applied: the services restarted (their spec
    /// changed), started (new) and stopped (removed).
    ProfileApplied(ProfileApplied),
    /// The pod has stopped: how each service ended (the last event of a
    /// pod's run).
    Ended {
        /// Every service, in the order they were given.
        services: Vec<Ending>,
    },
    /// A port of the pod (a front-end tells them first).
    Port {
        /// The port's name in the profile.
        name: String,
        /// The port.
        port: u16,
    },
    /// A URL shown to people: the pod's own at start, a service's once it
    /// is ready (a front-end tells them).
    Url {
        /// The URL's name.
        name: String,
        /// The URL.
        url: String,
    },
    /// Events that could not be kept for a reader (the log files have the
    /// lines).
    Lost {
        /// How many.
        count: u64,
        /// Why.
        reason: String,
    },
    /// The reader fell behind and is dropped: the last event it gets.
    Lagged {
        /// What happened and what to do.
        message: String,
    },
    /// Every service's status now ([`crate::Supervisor::watch_status`]):
    /// told to a reader that follows them instead of rebuilding states
    /// from events.
    Status {
        /// Every service, in start order.
        services: Vec<ServiceStatus>,
    },
}

/// What applying a changed profile file would change, or why it cannot
/// be applied ([`EventKind::ProfileChanged`]; the control socket's
/// `profile-changed` record has the same fields).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProfileChange {
    /// The profile file.
    pub file: String,
    /// Services whose rendered spec changed.
    pub changed: Vec<String>,
    /// Services the new profile adds.
    pub added: Vec<String>,
    /// Services the new profile no longer has.
    pub removed: Vec<String>,
    /// Why the new profile cannot be loaded (the pod keeps the one it
    /// runs), with line and column; `None` when it is valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What applying it would change, in short (`api +worker -old URLs`),
    /// as the pod decides it: front-ends offer to apply it (the TUI's `P`)
    /// exactly when this is set. `None` when applying would change
    /// nothing, or the profile is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply: Option<String>,
    /// The same for people, with what to do.
    pub message: String,
}

/// What applying a changed profile did: the `profile-applied` event
/// ([`EventKind::ProfileApplied`]), and the `applied` of the control
/// socket's and MCP's answer to `reload-profile`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ProfileApplied {
    /// What was restarted, started and stopped.
    #[serde(flatten)]
    pub applied: crate::Applied,
    /// The same for people, with what is applied only when the pod starts
    /// again.
    pub message: String,
}

/// How a service ended, when its pod stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Ending {
    /// The service.
    pub name: String,
    /// How its last run ended; `None` when it never ran.
    pub exit: Option<ExitStatus>,
    /// Why it is down.
    pub reason: EndReason,
    /// The same for people: `server stopped (signal 15)`.
    pub detail: String,
}

/// Why a service is down once its pod stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EndReason {
    /// omnidev stopped it (the pod's shutdown, or a stop of the service),
    /// or it never started.
    Stopped,
    /// It ended on its own with code 0.
    Exited,
    /// It ended on its own otherwise (a non-zero code, a signal) and was
    /// not restarted.
    Crashed,
    /// It could not start (a prepare step failed, or it is unavailable).
    Failed,
}

impl EndReason {
    /// The reason as one word: `stopped`, `exited`, `crashed`, `failed`.
    pub fn word(self) -> &'static str {
        match self {
            EndReason::Stopped => "stopped",
            EndReason::Exited => "exited",
            EndReason::Crashed => "crashed",
            EndReason::Failed => "failed",
        }
    }
}

/// The changed files behind a reload: the first few (sorted, deduplicated)
/// and how many there were in all, so a burst of thousands stays small.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Changes {
    /// Up to [`Changes::KEPT`] paths, relative to the checkout, sorted.
    #[serde(default, rename = "files")]
    pub paths: Vec<String>,
    /// How many distinct paths changed (at least `paths.len()`).
    #[serde(default, rename = "files-total")]
    pub total: usize,
}

impl Changes {
    /// Most paths kept.
    pub const KEPT: usize = 64;
    /// How many paths a notice names before `(+N more)`.
    pub const NAMED: usize = 2;

    /// The changes of `paths` (any order, duplicates allowed).
    pub fn of<S: AsRef<str>>(paths: impl IntoIterator<Item = S>) -> Self {
        let mut changes = Self::default();
        changes.add(paths.into_iter().map(|p| p.as_ref().to_owned()));
        changes
    }

    /// Adds `paths`, keeping at most [`Changes::KEPT`] of them. A path
    /// already kept is not counted twice; beyond the kept ones, every path
    /// counts (exact counts would need every path kept).
    pub fn merge(&mut self, other: Changes) {
        let extra = other.total.saturating_sub(other.paths.len());
        self.add(other.paths);
        self.total = self.total.saturating_add(extra);
    }

    fn add(&mut self, paths: impl IntoIterator<Item = String>) {
        for path in paths {
            match self.paths.binary_search(&path) {
                Ok(_) => {}
                Err(at) if self.paths.len() < Self::KEPT => {
                    self.paths.insert(at, path);
                    self.total += 1;
                }
                Err(_) => self.total = self.total.saturating_add(1),
            }
        }
    }

    /// Whether no file is known.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

/// `omnigent/a.py, omnigent/b.py (+3 more)`.
impl fmt::Display for Changes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let named = &self.paths[..self.paths.len().min(Self::NAMED)];
        f.write_str(&named.join(", "))?;
        let more = self.total.saturating_sub(named.len());
        if more > 0 {
            write!(f, " (+{more} more)")?;
        }
        Ok(())
    }
}

/// An event: which service (or `None` for the supervisor), when, what.
/// Serialised as one object: `ts`, `service`, `kind` and the kind's
/// fields, what the control socket carries (`docs/events.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(from = "Fields")]
pub struct Event {
    /// When it happened (RFC 3339, UTC, milliseconds). For a line: when
    /// omnidev read it.
    #[serde(rename = "ts", with = "rfc3339")]
    #[schemars(with = "String")]
    pub at: SystemTime,
    /// The service it concerns; `None` (JSON `null`) for the pod.
    pub service: Option<String>,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// An [`Event`] as read, before its line (if any) is given the event's
/// service and time, which it does not repeat (the event's JSON Schema is
/// this one's).
#[derive(Deserialize, JsonSchema)]
struct Fields {
    /// When it happened (RFC 3339, UTC, milliseconds). For a line: when
    /// omnidev read it.
    #[serde(rename = "ts", with = "rfc3339")]
    #[schemars(
        with = "String",
        regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$")
    )]
    at: SystemTime,
    /// The service it concerns; `null` for the pod.
    service: Option<String>,
    #[serde(flatten)]
    kind: EventKind,
}

impl From<Fields> for Event {
    fn from(Fields { at, service, mut kind }: Fields) -> Self {
        if let EventKind::Log { line } | EventKind::PartialLine { line } = &mut kind {
            line.service = service.as_deref().unwrap_or_default().into();
            line.at = at;
        }
        Self { at, service, kind }
    }
}

/// A duration as whole milliseconds (also read back from serde's own
/// `{"secs", "nanos"}`, as an older `state.json` has it, to the
/// millisecond).
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    fn of(d: Duration) -> u64 {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
    }

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(of(*d))
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Millis(u64),
        Struct(Duration),
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(match Either::deserialize(d)? {
            Either::Millis(ms) => Duration::from_millis(ms),
            Either::Struct(d) => Duration::from_millis(of(d)),
        })
    }
}

/// A time as RFC 3339, UTC, to the millisecond: `2026-11-30T14:18:38.123Z`.
pub mod rfc3339 {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    /// `at` in the form this module reads.
    pub fn format(at: SystemTime) -> String {
        chrono::DateTime::<chrono::Utc>::from(at)
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    }

    /// The time `ts` names; `None` when it is not RFC 3339.
    pub fn parse(ts: &str) -> Option<SystemTime> {
        chrono::DateTime::parse_from_rfc3339(ts).ok().map(SystemTime::from)
    }

    pub(super) fn serialize<S: Serializer>(at: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*at))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        parse(&text).ok_or_else(|| D::Error::custom(format!("`{text}` is not an RFC 3339 time")))
    }
}

impl Event {
    /// The event that publishes `line`: stamped when it was read,
    /// attributed to the line's service.
    pub fn log(line: LogLine) -> Self {
        Self { at: line.at, service: Some(line.service.to_string()), kind: EventKind::Log { line } }
    }

    /// The event that publishes `line`, unfinished
    /// ([`EventKind::PartialLine`]): stamped when it was read, attributed
    /// to the line's service.
    pub fn partial(line: LogLine) -> Self {
        Self {
            at: line.at,
            service: Some(line.service.to_string()),
            kind: EventKind::PartialLine { line },
        }
    }

    /// A pod-wide event of `kind`, now.
    pub fn pod(kind: EventKind) -> Self {
        Self::now(None, kind)
    }

    /// An event of `kind` about `service` (the pod's own without one), now.
    pub fn now(service: Option<&str>, kind: EventKind) -> Self {
        Self { at: SystemTime::now(), service: service.map(str::to_owned), kind }
    }
}

/// A service's current status, as returned by a snapshot. Serialised as
/// one object: its name, its state's `state` word and fields (`pid` while
/// it runs), then the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ServiceStatus {
    /// Service name.
    pub name: String,
    /// Current state.
    #[serde(flatten)]
    pub state: ServiceState,
    /// How many times it has been restarted after a crash.
    pub restarts: u32,
    /// Whether the service currently counts as ready (its probe passed, or
    /// it has no probe and is running).
    #[serde(default)]
    pub ready: bool,
    /// How its last run ended (on its own or stopped), once one has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<ExitStatus>,
    /// What keeps it from being ready, when omnidev knows: `port 6767 is
    /// held by pid 4242 (python3 …), not by server`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// How many times it was started (its prepare steps begun, or its
    /// program spawned): a run that began after a request has a higher
    /// count than a snapshot taken before it.
    #[serde(default)]
    pub starts: u32,
    /// Its current run's readiness probe did not pass within its timeout
    /// (polling goes on; [`ServiceState::Starting`] still).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub probe_timed_out: bool,
    /// The URLs it shows now: those it serves while it runs ready, none
    /// otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<crate::NamedUrl>,
    /// The process people mean by its pid, once known: the one its own
    /// log prints. The pid itself, or the child of a wrapper such as `uv
    /// run` ([`crate::platform::main_process`]); looked for again once the
    /// service is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main_pid: Option<u32>,
}

impl ServiceStatus {
    /// The status of a service that has not started (or ended) yet: no
    /// restarts, starts or exit, not ready.
    pub fn new(name: impl Into<String>, state: ServiceState) -> Self {
        Self { name: name.into(), state, ..Self::default() }
    }

    /// Process id of the running group leader, if any.
    pub fn pid(&self) -> Option<u32> {
        self.state.pid()
    }

    /// Its state for people, with what keeps it from being ready when
    /// omnidev knows: `ready pid 12`, `starting pid 12: port 6767 is held
    /// by …`.
    pub fn detail(&self) -> String {
        match &self.note {
            Some(note) => format!("{}: {note}", self.label()),
            None => self.label(),
        }
    }

    /// Its state's label with its main process for the pid, once known:
    /// `ready pid 12` where 12 is the Python that `uv run` started.
    pub fn label(&self) -> String {
        match (self.state.pid(), self.main_pid) {
            (Some(_), Some(main)) => format!("{} pid {main}", self.state.word()),
            _ => self.state.label(),
        }
    }

    /// How it ended, as a part of [`EventKind::Ended`].
    pub fn end(&self) -> Ending {
        let reason = match &self.state {
            ServiceState::Exited { status } if status.success() => EndReason::Exited,
            ServiceState::Exited { .. } => EndReason::Crashed,
            ServiceState::Failed { .. } => EndReason::Failed,
            _ => EndReason::Stopped,
        };
        Ending {
            name: self.name.clone(),
            exit: match self.state {
                ServiceState::Exited { status } => Some(status),
                _ => self.last_exit,
            },
            reason,
            detail: self.ending(),
        }
    }

    /// How it ended, for a closing summary: `server stopped (exit code
    /// 0)`, `host crashed (exit code 1)`, `vite failed: …`.
    pub fn ending(&self) -> String {
        let state = match &self.state {
            // Its label carries the status (the reason) already.
            ServiceState::Exited { .. } | ServiceState::Failed { .. } => self.state.label(),
            state => match self.last_exit {
                Some(status) => format!("{} ({status})", state.label()),
                None => state.label(),
            },
        };
        format!("{} {state}", self.name)
    }
}

/// A duration as people read it: `250ms`, `2s`, `1.5s`.
///
/// ```
/// use std::time::Duration;
/// use omnidev_core::event::format_duration;
/// assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
/// ```
pub fn format_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

impl ServiceState {
    /// The state as one word: `waiting`, `blocked` (waiting on a
    /// dependency that ended and will not come back), `preparing`, `starting` (running,
    /// its probe not passed yet), `running` (no probe), `ready`,
    /// `restarting`, `over-limit` (killed over its memory limit, waiting
    /// to restart), `stopping`, `exited` (code 0), `crashed` (any other
    /// end), `stopped`, `failed` (not started, see
    /// [`ServiceState::Failed`]).
    pub fn word(&self) -> &'static str {
        match self {
            ServiceState::Waiting => "waiting",
            ServiceState::Blocked { .. } => "blocked",
            ServiceState::Preparing => "preparing",
            ServiceState::Starting { .. } => "starting",
            ServiceState::Running { .. } => "running",
            ServiceState::Ready { .. } => "ready",
            ServiceState::Restarting { .. } => "restarting",
            ServiceState::OverLimit { .. } => "over-limit",
            ServiceState::Stopping { .. } => "stopping",
            ServiceState::Exited { status } if status.success() => "exited",
            ServiceState::Exited { .. } => "crashed",
            ServiceState::Stopped => "stopped",
            ServiceState::Failed { .. } => "failed",
        }
    }

    /// How it reads at a glance ([`Tone`]), for colours and icons.
    pub fn tone(&self) -> Tone {
        match self {
            ServiceState::Ready { .. } => Tone::Good,
            ServiceState::Starting { .. } | ServiceState::Running { .. } => Tone::Up,
            ServiceState::Waiting | ServiceState::Preparing | ServiceState::Stopping { .. } => {
                Tone::Busy
            }
            ServiceState::Restarting { .. } | ServiceState::OverLimit { .. } => Tone::Trouble,
            ServiceState::Exited { status } if status.success() => Tone::Quiet,
            ServiceState::Stopped => Tone::Quiet,
            ServiceState::Exited { .. }
            | ServiceState::Failed { .. }
            | ServiceState::Blocked { .. } => Tone::Bad,
        }
    }

    /// It has ended and nothing starts it by itself: exited, stopped, or
    /// failed to start (a failed one comes back only when its inputs
    /// change or on request). What `s` in the UI starts rather than stops.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            ServiceState::Exited { .. } | ServiceState::Stopped | ServiceState::Failed { .. }
        )
    }

    /// The pid of the service's process in this state, if it has one.
    pub fn pid(&self) -> Option<u32> {
        match self {
            ServiceState::Starting { pid }
            | ServiceState::Running { pid }
            | ServiceState::Ready { pid }
            | ServiceState::Stopping { pid } => Some(*pid),
            _ => None,
        }
    }

    /// A short status with its data: `starting pid 12`, `ready pid 12`,
    /// `restarting in 2s`, `crashed (exit code 1)`, … (`Display` is this).
    pub fn label(&self) -> String {
        let word = self.word();
        match self {
            ServiceState::Starting { pid }
            | ServiceState::Running { pid }
            | ServiceState::Ready { pid }
            | ServiceState::Stopping { pid } => format!("{word} pid {pid}"),
            ServiceState::Restarting { after, .. } => {
                format!("{word} in {}", format_duration(*after))
            }
            ServiceState::OverLimit { limit, pod, after, .. } => format!(
                "over {} memory limit ({}); restarting in {}",
                if *pod { "the pod's" } else { "its" },
                crate::platform::mib(*limit),
                format_duration(*after)
            ),
            ServiceState::Exited { status } => format!("{word} ({status})"),
            ServiceState::Blocked { reason } | ServiceState::Failed { reason } => {
                format!("{word}: {reason}")
            }
            ServiceState::Waiting | ServiceState::Preparing | ServiceState::Stopped => {
                word.to_owned()
            }
        }
    }
}

impl fmt::Display for ServiceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

impl EventKind {
    /// Whether its text goes after the subject as `subject: text` (a
    /// message of its own) rather than `subject text` (a predicate).
    fn is_message(&self) -> bool {
        matches!(
            self,
            EventKind::PrepareStarted { .. }
                | EventKind::PrepareFinished { .. }
                | EventKind::Notice { .. }
                | EventKind::ProfileChanged(_)
                | EventKind::ProfileApplied(_)
                | EventKind::Reloading { .. }
                | EventKind::Debug { .. }
                | EventKind::Ended { .. }
                | EventKind::Lost { .. }
                | EventKind::Lagged { .. }
                | EventKind::Status { .. }
        )
    }
}

/// What happened, without who: `started (pid 7)`, `crashed (signal 9);
/// restart #2 in 2s`, `npm install done`, …
impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventKind::Log { line } | EventKind::PartialLine { line } => f.write_str(&line.text),
            EventKind::State { state } => match state {
                ServiceState::Starting { pid } | ServiceState::Running { pid } => {
                    write!(f, "started (pid {pid})")
                }
                ServiceState::Stopping { pid } => write!(f, "stopping (pid {pid})"),
                ServiceState::Exited { status } => write!(f, "exited ({status})"),
                _ => write!(f, "{state}"),
            },
            EventKind::Ready { .. } => f.write_str("ready"),
            EventKind::ProbeTimedOut { after } => write!(
                f,
                "not ready after {}; still checking, dependents wait",
                format_duration(*after)
            ),
            EventKind::Crashed { status, attempt: 0, .. } => {
                write!(f, "crashed ({status}); not restarting")
            }
            EventKind::Crashed { status, attempt, backoff } => {
                write!(f, "crashed ({status}); restart #{attempt} in {}", format_duration(*backoff))
            }
            EventKind::OverLimit { used, limit, pod, attempt, backoff } => {
                write!(
                    f,
                    "killed over {} memory limit ({} of {}); ",
                    if *pod { "the pod's" } else { "its" },
                    crate::platform::mib(*used),
                    crate::platform::mib(*limit)
                )?;
                match attempt {
                    0 => f.write_str("not restarting"),
                    n => write!(f, "restart #{n} in {}", format_duration(*backoff)),
                }
            }
            EventKind::LinkDown { reason } => write!(f, "down in its linked pod: {reason}"),
            EventKind::LinkUp => f.write_str("ready again in its linked pod"),
            EventKind::Link { name, checkout, ports, .. } => {
                write!(f, "link {name}: {}", checkout.display())?;
                for (port, number) in ports {
                    write!(f, " {port} {number}")?;
                }
                Ok(())
            }
            EventKind::Reloading { services, changes } => {
                write!(f, "reloading {}", services.join(", "))?;
                if !changes.is_empty() {
                    write!(f, ": {changes}")?;
                }
                Ok(())
            }
            EventKind::PortHeld { port, holder } => {
                write!(f, "port {port} is held by {holder}, not by this service")
            }
            EventKind::Debug { message } => write!(f, "debug: {message}"),
            EventKind::PrepareStarted { step } => write!(f, "{step} …"),
            EventKind::PrepareFinished { step, success: true } => write!(f, "{step} done"),
            EventKind::PrepareFinished { step, success: false } => write!(f, "{step} failed"),
            EventKind::Notice { message }
            | EventKind::Lagged { message }
            | EventKind::ProfileChanged(ProfileChange { message, .. })
            | EventKind::ProfileApplied(ProfileApplied { message, .. }) => f.write_str(message),
            EventKind::Ended { services } => {
                let endings: Vec<&str> = services.iter().map(|e| e.detail.as_str()).collect();
                write!(f, "ended: {}", endings.join("; "))
            }
            EventKind::Port { name, port } => write!(f, "port {name} {port}"),
            EventKind::Url { name, url } => write!(f, "url {name} {url}"),
            EventKind::Lost { count, reason } => write!(f, "{count} records lost ({reason})"),
            EventKind::Status { services } => {
                let details: Vec<String> =
                    services.iter().map(|s| format!("{} {}", s.name, s.detail())).collect();
                write!(f, "status: {}", details.join("; "))
            }
        }
    }
}

impl Event {
    /// Whether people are shown this event as a line of its own: one line
    /// per happening. Log lines are shown as they are; `waiting`, `ready`
    /// and `restarting` states repeat what the `ready` and `crashed` events
    /// already said, and so does the `exited` state of a failed run (its
    /// `crashed …; not restarting` came just before it). A clean exit is
    /// told by its `exited (exit code 0)`.
    pub fn is_shown(&self) -> bool {
        match &self.kind {
            EventKind::Log { .. } | EventKind::PartialLine { .. } => false,
            EventKind::State { state: ServiceState::Exited { status } } => status.success(),
            EventKind::State { state } => !matches!(
                state,
                ServiceState::Waiting
                    | ServiceState::Ready { .. }
                    | ServiceState::Restarting { .. }
                    | ServiceState::OverLimit { .. }
            ),
            _ => true,
        }
    }
}

/// The event as a line for people: `server started (pid 7)`, `vite: npm
/// install done`, or a pod-wide notice on its own.
impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.service, self.kind.is_message()) {
            (Some(service), _) if let EventKind::PortHeld { port, holder } = &self.kind => {
                write!(f, "port {port} is held by {holder}, not by {service}")
            }
            (None, true) => write!(f, "{}", self.kind),
            (Some(service), true) => write!(f, "{service}: {}", self.kind),
            (service, false) => write!(f, "{} {}", service.as_deref().unwrap_or("pod"), self.kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(service: Option<&str>, kind: EventKind) -> Event {
        Event { at: SystemTime::UNIX_EPOCH, service: service.map(str::to_owned), kind }
    }

    #[test]
    fn one_wording_for_states_and_events() {
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_secs(2)), "2s");
        assert_eq!(ServiceState::Starting { pid: 7 }.label(), "starting pid 7");
        let crashed = ServiceState::Exited { status: ExitStatus::Code(1) };
        assert_eq!(crashed.to_string(), "crashed (exit code 1)");
        let crash = event(
            Some("server"),
            EventKind::Crashed {
                status: ExitStatus::Signal(9),
                attempt: 2,
                backoff: Duration::from_secs(2),
            },
        );
        assert_eq!(crash.to_string(), "server crashed (signal 9); restart #2 in 2s");
        let started =
            event(Some("host"), EventKind::State { state: ServiceState::Running { pid: 4 } });
        assert_eq!(started.to_string(), "host started (pid 4)");
        let step = event(
            Some("vite"),
            EventKind::PrepareFinished { step: "npm install".into(), success: false },
        );
        assert_eq!(step.to_string(), "vite: npm install failed");
        let notice = event(None, EventKind::Notice { message: "shutting down".into() });
        assert_eq!(notice.to_string(), "shutting down");
        let reload = |changes| {
            event(None, EventKind::Reloading { services: vec!["server".into()], changes })
                .to_string()
        };
        assert_eq!(reload(Changes::default()), "reloading server");
        assert_eq!(
            reload(Changes::of(["omnigent/b.py", "omnigent/a.py"])),
            "reloading server: omnigent/a.py, omnigent/b.py"
        );
        assert_eq!(
            reload(Changes::of(["e.py", "d.py", "c.py", "b.py", "a.py", "a.py"])),
            "reloading server: a.py, b.py (+3 more)"
        );
    }

    #[test]
    fn a_status_names_its_main_process_while_it_runs() {
        let ready = ServiceStatus::new("server", ServiceState::Ready { pid: 7 });
        assert_eq!(ready.label(), "ready pid 7", "its own pid until known");
        let mut status = ServiceStatus {
            main_pid: Some(9),
            note: Some("port 6767 is held by pid 4".into()),
            ..ready
        };
        assert_eq!(status.detail(), "ready pid 9: port 6767 is held by pid 4");
        status.state = ServiceState::Stopped;
        assert_eq!(status.label(), "stopped", "no pid once it is down");
    }

    #[test]
    fn endings_say_how_each_service_ended() {
        let status = |state, last_exit| ServiceStatus {
            last_exit,
            starts: 1,
            ..ServiceStatus::new("server", state)
        };
        let stopped = status(ServiceState::Stopped, Some(ExitStatus::Signal(15)));
        assert_eq!(stopped.ending(), "server stopped (signal 15)");
        let exited =
            status(ServiceState::Exited { status: ExitStatus::Code(1) }, Some(ExitStatus::Code(1)));
        assert_eq!(exited.ending(), "server crashed (exit code 1)");
        let never = status(ServiceState::Stopped, None);
        assert_eq!(never.ending(), "server stopped");
        let failed = status(ServiceState::Failed { reason: "pnpm install failed".into() }, None);
        assert_eq!(failed.ending(), "server failed: pnpm install failed");
    }

    #[test]
    fn changes_stay_bounded_and_count_every_path() {
        let mut changes = Changes::of((0..100).map(|i| format!("f{i:03}.py")));
        assert_eq!(changes.paths.len(), Changes::KEPT);
        assert_eq!(changes.total, 100);
        changes.merge(Changes::of(["f000.py", "new.py"]));
        // f000.py is kept, so it is known; new.py sorts after the kept
        // ones and is counted.
        assert_eq!(changes.total, 101);
        assert_eq!(changes.paths.len(), Changes::KEPT);
    }

    #[test]
    fn repeated_states_and_log_lines_are_not_shown() {
        let waiting = event(Some("host"), EventKind::State { state: ServiceState::Waiting });
        assert!(!waiting.is_shown());
        assert!(event(Some("server"), EventKind::Ready { urls: Vec::new() }).is_shown());
        // A failed exit is one line, its crash; a clean one its exit.
        let exited = |status| {
            event(Some("migrate"), EventKind::State { state: ServiceState::Exited { status } })
        };
        assert!(!exited(ExitStatus::Code(1)).is_shown());
        assert!(exited(ExitStatus::Code(0)).is_shown());
    }
}

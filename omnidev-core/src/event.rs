//! Typed events published by a supervisor to any number of subscribers.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// Which stream a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stream {
    /// The child's standard output.
    Stdout,
    /// The child's standard error.
    Stderr,
    /// A line written by the supervisor itself (events, prepare heartbeats).
    Supervisor,
}

/// One line of output, as kept in the ring buffers and sent to subscribers.
/// ANSI colour codes are kept; invalid UTF-8 has been replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// The service the line belongs to.
    pub service: String,
    /// Where it came from.
    pub stream: Stream,
    /// The text, without the trailing newline.
    pub text: String,
    /// Monotonic sequence number across the whole supervisor.
    pub seq: u64,
}

impl LogLine {
    /// A line of `service`'s output from `stream`, numbered `seq`.
    pub fn new(
        service: impl Into<String>,
        stream: Stream,
        text: impl Into<String>,
        seq: u64,
    ) -> Self {
        Self {
            service: service.into(),
            stream,
            text: text.into(),
            seq,
        }
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum ServiceState {
    /// Not started yet: waiting for dependencies.
    Waiting,
    /// Running prepare steps.
    Preparing,
    /// Spawned; readiness not yet confirmed (or no probe).
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
        /// The wait.
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
        status: ExitStatus,
    },
    /// Stopped on request; its process group is empty.
    Stopped,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum EventKind {
    /// A service changed state.
    State {
        /// The new state.
        state: ServiceState,
    },
    /// A readiness probe passed.
    Ready,
    /// A readiness probe did not pass within its timeout; polling goes on
    /// and dependents still wait.
    ProbeTimedOut {
        /// The timeout that passed.
        after: Duration,
    },
    /// An exit the supervisor did not ask for that is followed by a
    /// restart, or that failed (non-zero code or a signal). A clean exit
    /// that is not restarted (a finished one-shot) only changes the state to
    /// [`ServiceState::Exited`].
    Crashed {
        /// How it ended.
        status: ExitStatus,
        /// The restart attempt that follows (0 when none will).
        attempt: u32,
        /// The backoff before that restart.
        backoff: Duration,
    },
    /// A reload (restart of a set of services) began.
    Reloading,
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
    /// A line of output.
    Log {
        /// The line.
        line: LogLine,
    },
    /// A message from the supervisor for people (leftovers stopped, etc.).
    Notice {
        /// The message.
        message: String,
    },
}

/// An event: which service (or `None` for the supervisor), when, what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// When it happened.
    pub at: SystemTime,
    /// The service it concerns; `None` for supervisor-wide events.
    pub service: Option<String>,
    /// What happened.
    pub kind: EventKind,
}

impl Event {
    /// The event that publishes `line`: stamped now, attributed to the
    /// line's service.
    pub fn log(line: LogLine) -> Self {
        Self {
            at: SystemTime::now(),
            service: Some(line.service.clone()),
            kind: EventKind::Log { line },
        }
    }
}

/// A service's current status, as returned by a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceStatus {
    /// Service name.
    pub name: String,
    /// Current state.
    pub state: ServiceState,
    /// How many times it has been restarted after a crash.
    pub restarts: u32,
    /// Process id of the running group leader, if any.
    #[serde(default)]
    pub pid: Option<u32>,
    /// Whether the service currently counts as ready (its probe passed, or
    /// it has no probe and is running).
    #[serde(default)]
    pub ready: bool,
}

/// A line for the combined buffer describing an event, or `None` for log
/// lines (which are already there).
pub(crate) fn supervisor_line(service: Option<&str>, kind: &EventKind) -> Option<String> {
    let prefix = service.map(|s| format!("{s}: ")).unwrap_or_default();
    let text = match kind {
        EventKind::Log { .. } | EventKind::Ready | EventKind::Reloading => return None,
        EventKind::State { state } => match state {
            ServiceState::Waiting => "waiting".to_owned(),
            ServiceState::Preparing => "preparing".to_owned(),
            ServiceState::Running { pid } => format!("running (pid {pid})"),
            ServiceState::Ready { pid } => format!("ready (pid {pid})"),
            ServiceState::Restarting { after, attempt } => {
                format!(
                    "restarting in {} s (attempt {attempt})",
                    after.as_secs_f32()
                )
            }
            ServiceState::Stopping { pid } => format!("stopping (pid {pid})"),
            ServiceState::Exited { status } => format!("exited ({status})"),
            ServiceState::Stopped => "stopped".to_owned(),
        },
        EventKind::ProbeTimedOut { after } => {
            format!("not ready after {} s; still waiting", after.as_secs_f32())
        }
        EventKind::Crashed {
            status,
            attempt,
            backoff,
        } => {
            if *attempt == 0 {
                format!("ended ({status})")
            } else {
                format!(
                    "crashed ({status}); restart {attempt} in {} s",
                    backoff.as_secs_f32()
                )
            }
        }
        EventKind::PrepareStarted { step } => format!("{step}…"),
        EventKind::PrepareFinished { step, success } => {
            format!("{step} {}", if *success { "done" } else { "failed" })
        }
        EventKind::Notice { message } => message.clone(),
    };
    Some(format!("{prefix}{text}"))
}

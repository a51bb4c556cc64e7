//! The event stream for programs (`up --headless --json`, `events`,
//! `logs --json`): one JSON object per line, version [`VERSION`], described
//! by `docs/events.schema.json` and `docs/events.md`.
//!
//! Each record has `v`, `ts` (RFC 3339, UTC, milliseconds), `pod` (the pod
//! directory), `service` (`null` for the pod as a whole) and `kind`, plus
//! the fields of its kind. The supervisor's typed [`Event`]s are turned
//! into records here and nowhere else.

use std::time::{Duration, SystemTime};

use omnidev_core::{
    Entry, Event, EventKind, ExitStatus, LogLine, ProfileApplied, ProfileChange, ServiceState,
    Stream,
};
use serde::{Deserialize, Serialize};

/// Version of the event records (`v`).
pub const VERSION: u32 = 1;

/// One line of the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// [`VERSION`].
    pub v: u32,
    /// When it happened (RFC 3339, UTC). For a `log` record: when omnidev
    /// read the line.
    pub ts: String,
    /// The pod directory.
    pub pod: String,
    /// The service it concerns; `None` (JSON `null`) for the pod.
    pub service: Option<String>,
    /// The kind and its fields.
    #[serde(flatten)]
    pub body: Body,
}

/// What a record says, by `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Body {
    /// A service changed state (other than exiting on its own, which is
    /// [`Body::Exited`]).
    State {
        /// The state word, as in `status --json` (`waiting`, `preparing`,
        /// `starting`, `running`, `ready`, `restarting`, `stopping`,
        /// `stopped`, `failed`).
        state: String,
        /// The same for people (`ready pid 12`, `restarting in 2s`).
        detail: String,
        /// The process id, while it runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        /// `restarting`: the restart attempt (1-based).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
        /// `restarting`: the backoff before it, in milliseconds.
        #[serde(
            default,
            rename = "backoff-ms",
            skip_serializing_if = "Option::is_none"
        )]
        backoff_ms: Option<u64>,
        /// `failed`: why, and what to do.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Its readiness probe passed (or, without one, it kept running for a
    /// second).
    Ready {
        /// The URLs it serves, shown from now on.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        urls: Vec<omnidev_core::NamedUrl>,
    },
    /// Its readiness probe has not passed within its timeout; polling goes
    /// on.
    ProbeTimeout {
        /// The timeout, in milliseconds.
        #[serde(rename = "after-ms")]
        after_ms: u64,
    },
    /// It ended without being asked to and will be restarted, or it failed.
    Crashed {
        /// How it ended: `{"code": N}` or `{"signal": N}`.
        exit: ExitStatus,
        /// The restart attempt that follows (0: none).
        attempt: u32,
        /// The backoff before that restart, in milliseconds.
        #[serde(rename = "backoff-ms")]
        backoff_ms: u64,
    },
    /// It exited on its own and will not be restarted.
    Exited {
        /// How it ended.
        exit: ExitStatus,
    },
    /// A reload began (a watcher saw changed files, or `R`/`restart`).
    Reload {
        /// The services restarted (their dependents follow).
        services: Vec<String>,
        /// The changed files, relative to the checkout (at most 64, sorted).
        files: Vec<String>,
        /// How many files changed in all.
        #[serde(rename = "files-total")]
        files_total: usize,
    },
    /// A line of a service's output.
    Log {
        /// `stdout`, `stderr` or `supervisor`; `None` (JSON `null`) when not
        /// known: `logs --json` reads the log files, which merge them.
        stream: Option<Stream>,
        /// The text (colour codes kept, invalid UTF-8 replaced).
        line: String,
        /// `true`: the line still waits for its newline, and this is it as
        /// it stands (the text after its last `\r`); the next `log` record
        /// of the same service and stream replaces it. Absent for a
        /// finished line.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        partial: bool,
    },
    /// A port of the pod (at start).
    Port {
        /// The port's name in the profile.
        name: String,
        /// The port.
        port: u16,
    },
    /// A URL, once its service is ready.
    Url {
        /// The URL's name.
        name: String,
        /// The URL.
        url: String,
    },
    /// A prepare step (a dependency install) started.
    PrepareStarted {
        /// The step.
        step: String,
    },
    /// A prepare step finished.
    PrepareFinished {
        /// The step.
        step: String,
        /// Whether it exited 0.
        success: bool,
    },
    /// A message for people.
    Notice {
        /// The message.
        message: String,
    },
    /// The profile file changed under the running pod (nothing applied
    /// yet): `file`, the services `changed`, `added` and `removed`, the
    /// `error` (with line and column) when it cannot be applied, the
    /// `message` for people.
    ProfileChanged(ProfileChange),
    /// A changed profile was applied: the services `restarted`, `started`
    /// and `stopped`, the same for people as `message`.
    ProfileApplied(ProfileApplied),
    /// A diagnostic shown with `--debug`.
    Debug {
        /// The message.
        message: String,
    },
    /// Records that could not be kept (the log files have the lines).
    Lost {
        /// How many.
        count: u64,
        /// Why.
        reason: String,
    },
    /// The reader fell behind: this is the last record, the stream closes.
    Lagged {
        /// What happened and what to do.
        message: String,
    },
    /// The pod stopped: how each service ended. The last record of a
    /// pod's run.
    Ended {
        /// Every service, in profile order.
        services: Vec<EndedService>,
    },
}

/// A service in an [`Body::Ended`] record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedService {
    /// The service.
    pub name: String,
    /// How its last run ended (`{"code": N}` or `{"signal": N}`); `None`
    /// (JSON `null`) when it never ran.
    pub exit: Option<ExitStatus>,
    /// `stopped` (by omnidev, or never started), `exited` (on its own,
    /// code 0), `crashed` (on its own otherwise), `failed` (could not
    /// start).
    pub reason: String,
    /// The same for people: `server stopped (signal 15)`.
    pub detail: String,
}

impl Body {
    /// The `kind` of this body.
    pub fn kind(&self) -> &'static str {
        match self {
            Body::State { .. } => "state",
            Body::Ready { .. } => "ready",
            Body::ProbeTimeout { .. } => "probe-timeout",
            Body::Crashed { .. } => "crashed",
            Body::Exited { .. } => "exited",
            Body::Reload { .. } => "reload",
            Body::Log { .. } => "log",
            Body::Port { .. } => "port",
            Body::Url { .. } => "url",
            Body::PrepareStarted { .. } => "prepare-started",
            Body::PrepareFinished { .. } => "prepare-finished",
            Body::Notice { .. } => "notice",
            Body::ProfileChanged(_) => "profile-changed",
            Body::ProfileApplied(_) => "profile-applied",
            Body::Debug { .. } => "debug",
            Body::Lost { .. } => "lost",
            Body::Lagged { .. } => "lagged",
            Body::Ended { .. } => "ended",
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Turns the supervisor's events into records of one pod.
#[derive(Debug, Clone, Default)]
pub struct Encoder {
    pod: String,
}

impl Encoder {
    /// An encoder for the pod in `pod_dir`.
    pub fn new(pod_dir: &std::path::Path) -> Self {
        Self {
            pod: pod_dir.display().to_string(),
        }
    }

    /// A record of `body` about `service`, at `at`.
    pub fn record(&self, at: SystemTime, service: Option<String>, body: Body) -> Record {
        Record {
            v: VERSION,
            ts: rfc3339(at),
            pod: self.pod.clone(),
            service,
            body,
        }
    }

    /// The record of a supervisor event.
    pub fn event(&self, event: &Event) -> Record {
        let body = match &event.kind {
            EventKind::State { state } => Self::state(state),
            EventKind::Ready { urls } => Body::Ready { urls: urls.clone() },
            EventKind::ProbeTimedOut { after } => Body::ProbeTimeout {
                after_ms: millis(*after),
            },
            EventKind::Crashed {
                status,
                attempt,
                backoff,
            } => Body::Crashed {
                exit: *status,
                attempt: *attempt,
                backoff_ms: millis(*backoff),
            },
            EventKind::Reloading { services, changes } => Body::Reload {
                services: services.clone(),
                files: changes.paths.clone(),
                files_total: changes.total,
            },
            EventKind::Debug { message } => Body::Debug {
                message: message.clone(),
            },
            EventKind::PrepareStarted { step } => Body::PrepareStarted { step: step.clone() },
            EventKind::PrepareFinished { step, success } => Body::PrepareFinished {
                step: step.clone(),
                success: *success,
            },
            EventKind::Log { line } => return self.line(line),
            EventKind::PartialLine { line } => return self.partial_line(line),
            EventKind::Notice { message } => Body::Notice {
                message: message.clone(),
            },
            EventKind::ProfileChanged(change) => Body::ProfileChanged(change.clone()),
            EventKind::ProfileApplied(applied) => Body::ProfileApplied(applied.clone()),
            // Another process on the service's port: a notice in the
            // schema's words (`port 6767 is held by pid 4242 (…), not by server`).
            EventKind::PortHeld { .. } => Body::Notice {
                message: event.to_string(),
            },
            EventKind::Ended { services } => Body::Ended {
                services: services
                    .iter()
                    .map(|end| EndedService {
                        name: end.name.clone(),
                        exit: end.exit,
                        reason: end.reason.word().to_owned(),
                        detail: end.detail.clone(),
                    })
                    .collect(),
            },
        };
        self.record(event.at, event.service.clone(), body)
    }

    fn state(state: &ServiceState) -> Body {
        if let ServiceState::Exited { status } = state {
            return Body::Exited { exit: *status };
        }
        let (pid, attempt, backoff_ms, reason) = match state {
            ServiceState::Starting { pid }
            | ServiceState::Running { pid }
            | ServiceState::Ready { pid }
            | ServiceState::Stopping { pid } => (Some(*pid), None, None, None),
            ServiceState::Restarting { after, attempt } => {
                (None, Some(*attempt), Some(millis(*after)), None)
            }
            ServiceState::Failed { reason } | ServiceState::Blocked { reason } => {
                (None, None, None, Some(reason.clone()))
            }
            ServiceState::Waiting
            | ServiceState::Preparing
            | ServiceState::Stopped
            | ServiceState::Exited { .. } => (None, None, None, None),
        };
        Body::State {
            state: state.word().to_owned(),
            detail: state.label(),
            pid,
            attempt,
            backoff_ms,
            reason,
        }
    }

    /// The record of a line of output, stamped when it was read.
    pub fn line(&self, line: &LogLine) -> Record {
        self.record(
            line.at,
            Some(line.service.to_string()),
            Body::Log {
                stream: Some(line.stream),
                line: line.text.clone(),
                partial: false,
            },
        )
    }

    /// The record of an unfinished line (`partial: true`).
    pub fn partial_line(&self, line: &LogLine) -> Record {
        let mut record = self.line(line);
        if let Body::Log { partial, .. } = &mut record.body {
            *partial = true;
        }
        record
    }

    /// The record of a line read back from `service`'s log file, which
    /// was last modified at `at` when the line was read (the files keep no
    /// time or stream per line).
    pub fn file_line(&self, service: &str, text: &str, at: SystemTime) -> Record {
        self.record(
            at,
            Some(service.to_owned()),
            Body::Log {
                stream: None,
                line: text.to_owned(),
                partial: false,
            },
        )
    }

    /// The record of a feed entry, read at `now`.
    pub fn entry(&self, entry: &Entry, now: SystemTime) -> Record {
        match entry {
            Entry::Line(line) => self.line(line),
            Entry::Partial(line) => self.partial_line(line),
            Entry::Event(event) => self.event(event),
            Entry::Lost { count, reason } => self.record(
                now,
                None,
                Body::Lost {
                    count: *count,
                    reason: reason.clone(),
                },
            ),
        }
    }

    /// A pod-wide notice, now.
    pub fn notice(&self, message: impl Into<String>) -> Record {
        self.record(
            SystemTime::now(),
            None,
            Body::Notice {
                message: message.into(),
            },
        )
    }
}

impl EndedService {
    /// How the service ended, as the supervisor words it.
    fn ending(&self) -> omnidev_core::Ending {
        omnidev_core::Ending {
            name: self.name.clone(),
            exit: self.exit,
            reason: match self.reason.as_str() {
                "exited" => omnidev_core::EndReason::Exited,
                "crashed" => omnidev_core::EndReason::Crashed,
                "failed" => omnidev_core::EndReason::Failed,
                _ => omnidev_core::EndReason::Stopped,
            },
            detail: self.detail.clone(),
        }
    }
}

impl Record {
    /// The supervisor event this record was made from, as the TUI takes
    /// it in (`omnidev attach`): `None` for a record of no event (`port`,
    /// `url`, `lagged`, the reader's own business). `seq` numbers a log
    /// line (records carry none); the time is the record's `ts` (now when
    /// it does not parse). A `lost` record becomes a notice; a port held by
    /// another process (written as a notice) stays one.
    pub fn event(&self, seq: u64) -> Option<Event> {
        let at = parse_rfc3339(&self.ts).unwrap_or_else(SystemTime::now);
        let kind = match &self.body {
            Body::State {
                state,
                detail,
                pid,
                attempt,
                backoff_ms,
                reason,
            } => EventKind::State {
                state: state_of(
                    state,
                    detail,
                    *pid,
                    *attempt,
                    *backoff_ms,
                    reason.as_deref(),
                    None,
                )?,
            },
            Body::Exited { exit } => EventKind::State {
                state: ServiceState::Exited { status: *exit },
            },
            Body::Ready { urls } => EventKind::Ready { urls: urls.clone() },
            Body::ProbeTimeout { after_ms } => EventKind::ProbeTimedOut {
                after: Duration::from_millis(*after_ms),
            },
            Body::Crashed {
                exit,
                attempt,
                backoff_ms,
            } => EventKind::Crashed {
                status: *exit,
                attempt: *attempt,
                backoff: Duration::from_millis(*backoff_ms),
            },
            Body::Reload {
                services,
                files,
                files_total,
            } => EventKind::Reloading {
                services: services.clone(),
                changes: omnidev_core::Changes {
                    paths: files.clone(),
                    total: *files_total,
                },
            },
            Body::Log {
                stream,
                line,
                partial,
            } => {
                let mut line = LogLine::new(
                    self.service.as_deref()?,
                    stream.unwrap_or(Stream::Stdout),
                    line.clone(),
                    seq,
                );
                line.at = at;
                if *partial {
                    EventKind::PartialLine { line }
                } else {
                    EventKind::Log { line }
                }
            }
            Body::PrepareStarted { step } => EventKind::PrepareStarted { step: step.clone() },
            Body::PrepareFinished { step, success } => EventKind::PrepareFinished {
                step: step.clone(),
                success: *success,
            },
            Body::Notice { message } => EventKind::Notice {
                message: message.clone(),
            },
            Body::ProfileChanged(change) => EventKind::ProfileChanged(change.clone()),
            Body::ProfileApplied(applied) => EventKind::ProfileApplied(applied.clone()),
            Body::Debug { message } => EventKind::Debug {
                message: message.clone(),
            },
            Body::Lost { count, reason } => EventKind::Notice {
                message: format!("{count} records lost ({reason})"),
            },
            Body::Ended { services } => EventKind::Ended {
                services: services.iter().map(EndedService::ending).collect(),
            },
            Body::Port { .. } | Body::Url { .. } | Body::Lagged { .. } => return None,
        };
        Some(Event {
            at,
            service: self.service.clone(),
            kind,
        })
    }
}

/// The state a state word names (the inverse of [`ServiceState::word`]),
/// from what a `state` record or a `status` report carries beside it:
/// `detail` gives a `failed` or `blocked` state its reason when `reason`
/// does not, `last_exit` a `crashed` one its exit. `None` for a word this
/// omnidev does not know (a newer pod's), or a running state without its
/// pid.
pub fn state_of(
    word: &str,
    detail: &str,
    pid: Option<u32>,
    attempt: Option<u32>,
    backoff_ms: Option<u64>,
    reason: Option<&str>,
    last_exit: Option<ExitStatus>,
) -> Option<ServiceState> {
    let reason = || {
        reason.map_or_else(
            || {
                detail
                    .split_once(": ")
                    .map_or(detail, |(_, why)| why)
                    .to_owned()
            },
            str::to_owned,
        )
    };
    Some(match word {
        "waiting" => ServiceState::Waiting,
        "blocked" => ServiceState::Blocked { reason: reason() },
        "preparing" => ServiceState::Preparing,
        "starting" => ServiceState::Starting { pid: pid? },
        "running" => ServiceState::Running { pid: pid? },
        "ready" => ServiceState::Ready { pid: pid? },
        "restarting" => ServiceState::Restarting {
            after: Duration::from_millis(backoff_ms.unwrap_or(0)),
            attempt: attempt.unwrap_or(0),
        },
        "stopping" => ServiceState::Stopping { pid: pid? },
        "exited" => ServiceState::Exited {
            status: ExitStatus::Code(0),
        },
        "crashed" => ServiceState::Exited {
            status: last_exit.unwrap_or(ExitStatus::Code(1)),
        },
        "stopped" => ServiceState::Stopped,
        "failed" => ServiceState::Failed { reason: reason() },
        _ => return None,
    })
}

/// `2026-11-30T14:18:38.123Z`: UTC, milliseconds.
pub fn rfc3339(at: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(at).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The time an RFC 3339 `ts` names; `None` when it is not one.
pub fn parse_rfc3339(ts: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(ts)
        .ok()
        .map(SystemTime::from)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_048_318_123);
        assert_eq!(rfc3339(at), "2026-11-30T14:18:38.123Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
        for at in [at, leap, SystemTime::UNIX_EPOCH] {
            assert_eq!(parse_rfc3339(&rfc3339(at)), Some(at));
        }
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn records_have_the_documented_shape() {
        let encoder = Encoder::new(std::path::Path::new("/pod"));
        let crash = Event {
            at: SystemTime::UNIX_EPOCH,
            service: Some("server".into()),
            kind: EventKind::Crashed {
                status: ExitStatus::Code(1),
                attempt: 2,
                backoff: Duration::from_millis(1500),
            },
        };
        assert_eq!(
            serde_json::to_string(&encoder.event(&crash)).expect("encode"),
            r#"{"v":1,"ts":"1970-01-01T00:00:00.000Z","pod":"/pod","service":"server","kind":"crashed","exit":{"code":1},"attempt":2,"backoff-ms":1500}"#
        );
        let ready = encoder.record(
            SystemTime::UNIX_EPOCH,
            None,
            Body::Ready { urls: Vec::new() },
        );
        let text = serde_json::to_string(&ready).expect("encode");
        assert_eq!(
            text,
            r#"{"v":1,"ts":"1970-01-01T00:00:00.000Z","pod":"/pod","service":null,"kind":"ready"}"#
        );
        assert_eq!(
            serde_json::from_str::<Record>(&text).expect("decode"),
            ready
        );
    }

    /// One of every event the supervisor can publish: a new variant of
    /// [`EventKind`] or [`ServiceState`] does not compile here until it has
    /// a sample (the matches have no catch-all).
    pub(crate) fn every_supervisor_event() -> Vec<Event> {
        let mut kinds: Vec<EventKind> = every_state()
            .into_iter()
            .map(|state| EventKind::State { state })
            .collect();
        kinds.extend(every_other_kind());
        let mut seen = HashSet::new();
        for kind in &kinds {
            seen.insert(match kind {
                EventKind::State { .. } => "state",
                EventKind::Ready { .. } => "ready",
                EventKind::ProbeTimedOut { .. } => "probe-timed-out",
                EventKind::Crashed { .. } => "crashed",
                EventKind::Reloading { .. } => "reloading",
                EventKind::Debug { .. } => "debug",
                EventKind::PrepareStarted { .. } => "prepare-started",
                EventKind::PrepareFinished { .. } => "prepare-finished",
                EventKind::Log { .. } => "log",
                EventKind::PartialLine { .. } => "partial-line",
                EventKind::Notice { .. } => "notice",
                EventKind::PortHeld { .. } => "port-held",
                EventKind::ProfileChanged(_) => "profile-changed",
                EventKind::ProfileApplied(_) => "profile-applied",
                EventKind::Ended { .. } => "ended",
            });
        }
        assert_eq!(seen.len(), 15, "a sample of every event kind");
        kinds
            .into_iter()
            .enumerate()
            .map(|(i, mut kind)| {
                let at =
                    SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_048_318_123 + i as u64);
                // A line's event is stamped when the line was read.
                if let EventKind::Log { line } | EventKind::PartialLine { line } = &mut kind {
                    line.at = at;
                }
                Event {
                    at,
                    service: (i % 5 != 4).then(|| "server".to_owned()),
                    kind,
                }
            })
            .collect()
    }

    /// One of every state.
    pub(crate) fn every_state() -> Vec<ServiceState> {
        let states = [
            ServiceState::Waiting,
            ServiceState::Preparing,
            ServiceState::Starting { pid: 7 },
            ServiceState::Running { pid: 7 },
            ServiceState::Ready { pid: 7 },
            ServiceState::Restarting {
                after: Duration::from_millis(1500),
                attempt: 2,
            },
            ServiceState::Stopping { pid: 7 },
            ServiceState::Exited {
                status: ExitStatus::Signal(9),
            },
            ServiceState::Exited {
                status: ExitStatus::Code(0),
            },
            ServiceState::Stopped,
            ServiceState::Failed {
                reason: "pnpm install failed".into(),
            },
            ServiceState::Blocked {
                reason: "waiting for migrate, which exited with exit code 3".into(),
            },
        ];
        let mut seen_states = HashSet::new();
        for state in &states {
            seen_states.insert(match state {
                ServiceState::Waiting => "waiting",
                ServiceState::Preparing => "preparing",
                ServiceState::Starting { .. } => "starting",
                ServiceState::Running { .. } => "running",
                ServiceState::Ready { .. } => "ready",
                ServiceState::Restarting { .. } => "restarting",
                ServiceState::Stopping { .. } => "stopping",
                ServiceState::Exited { .. } => "exited",
                ServiceState::Stopped => "stopped",
                ServiceState::Failed { .. } => "failed",
                ServiceState::Blocked { .. } => "blocked",
            });
        }
        assert_eq!(seen_states.len(), 11, "a sample of every state");
        states.to_vec()
    }

    fn every_other_kind() -> Vec<EventKind> {
        vec![
            EventKind::Ready { urls: Vec::new() },
            EventKind::Ready {
                urls: vec![omnidev_core::NamedUrl {
                    name: "ui".into(),
                    url: "http://localhost:5173".into(),
                }],
            },
            EventKind::PortHeld {
                port: 6767,
                holder: "pid 4242 (python3 -m http.server 6767)".into(),
            },
            EventKind::ProbeTimedOut {
                after: Duration::from_secs(30),
            },
            EventKind::Crashed {
                status: ExitStatus::Code(1),
                attempt: 1,
                backoff: Duration::from_secs(1),
            },
            EventKind::Crashed {
                status: ExitStatus::Code(3),
                attempt: 0,
                backoff: Duration::ZERO,
            },
            EventKind::Reloading {
                services: vec!["server".into()],
                changes: omnidev_core::Changes::of(["omnigent/app.py"]),
            },
            EventKind::Debug {
                message: "ignored: .git/index".into(),
            },
            EventKind::PrepareStarted {
                step: "npm install".into(),
            },
            EventKind::PrepareFinished {
                step: "npm install".into(),
                success: false,
            },
            EventKind::Log {
                line: LogLine::new("server", Stream::Stderr, "\u{1b}[31mboom\u{1b}[0m", 4),
            },
            EventKind::PartialLine {
                line: LogLine::new("server", Stream::Stdout, "Password: ", 5),
            },
            EventKind::Notice {
                message: "shutting down".into(),
            },
            EventKind::ProfileChanged(ProfileChange {
                file: "/repo/omnidev.toml".into(),
                changed: vec!["api".into()],
                added: vec!["worker".into()],
                removed: Vec::new(),
                error: None,
                message: "omnidev.toml changed: api (command), new service worker".into(),
            }),
            EventKind::ProfileChanged(ProfileChange {
                file: "/repo/omnidev.toml".into(),
                changed: Vec::new(),
                added: Vec::new(),
                removed: Vec::new(),
                error: Some("/repo/omnidev.toml:3:1: unknown field `comand`".into()),
                message: "omnidev.toml changed but cannot be applied".into(),
            }),
            EventKind::ProfileApplied(ProfileApplied {
                restarted: vec!["api".into()],
                started: vec!["worker".into()],
                stopped: Vec::new(),
                message: "applied omnidev.toml: restarted api; started worker".into(),
            }),
            EventKind::Ended {
                services: vec![
                    omnidev_core::Ending {
                        name: "server".into(),
                        exit: Some(ExitStatus::Signal(15)),
                        reason: omnidev_core::EndReason::Stopped,
                        detail: "server stopped (signal 15)".into(),
                    },
                    omnidev_core::Ending {
                        name: "vite".into(),
                        exit: None,
                        reason: omnidev_core::EndReason::Failed,
                        detail: "vite failed: pnpm install failed".into(),
                    },
                ],
            },
        ]
    }

    /// What `omnidev attach` reads back is what the supervisor published:
    /// every event kind and state survives the record, its time included
    /// (to the millisecond; a held port stays the notice it was written
    /// as).
    #[test]
    fn records_read_back_as_the_events_they_were_made_from() {
        let encoder = Encoder::new(std::path::Path::new("/pod"));
        for event in every_supervisor_event() {
            let record = encoder.event(&event);
            let text = serde_json::to_string(&record).expect("encode");
            // Records carry no line number: the reader numbers the lines.
            let seq = match &event.kind {
                EventKind::Log { line } | EventKind::PartialLine { line } => line.seq,
                _ => 0,
            };
            let back = serde_json::from_str::<Record>(&text)
                .expect("decode")
                .event(seq)
                .unwrap_or_else(|| panic!("no event from {text}"));
            assert_eq!(back.service, event.service, "{text}");
            assert_eq!(back.at, event.at, "{text}");
            let want = match &event.kind {
                EventKind::PortHeld { .. } => EventKind::Notice {
                    message: event.to_string(),
                },
                kind => kind.clone(),
            };
            assert_eq!(back.kind, want, "{text}");
            assert_eq!(back.to_string(), event.to_string().replace(
                "port 6767 is held by pid 4242 (python3 -m http.server 6767), not by server",
                "server: port 6767 is held by pid 4242 (python3 -m http.server 6767), not by server",
            ), "the same line in the TUI");
        }
        let lost = encoder.entry(
            &Entry::Lost {
                count: 3,
                reason: "disk full".into(),
            },
            SystemTime::now(),
        );
        assert_eq!(
            lost.event(0).map(|e| e.to_string()).as_deref(),
            Some("3 records lost (disk full)")
        );
        let unknown = encoder.record(
            SystemTime::now(),
            Some("server".into()),
            Body::State {
                state: "levitating".into(),
                detail: "levitating".into(),
                pid: None,
                attempt: None,
                backoff_ms: None,
                reason: None,
            },
        );
        assert_eq!(
            unknown.event(0),
            None,
            "a state word of a newer pod is skipped"
        );
    }

    #[test]
    fn every_record_validates_against_the_published_schema() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/events.schema.json");
        let schema: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("the schema file"))
                .expect("the schema is JSON");
        let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
        let encoder = Encoder::new(std::path::Path::new(
            "/home/ada/.cache/omnidev/omnigent-1a2b3c4d",
        ));
        let now = SystemTime::now();
        let mut records: Vec<Record> = every_supervisor_event()
            .iter()
            .map(|event| encoder.event(event))
            .collect();
        // What the feed adds, and the front-ends' own records.
        let line = LogLine::new("vite", Stream::Stdout, "ready in 300 ms", 9);
        records.push(encoder.entry(&Entry::Line(std::sync::Arc::new(line)), now));
        records.push(encoder.entry(
            &Entry::Lost {
                count: 3,
                reason: "disk full".into(),
            },
            now,
        ));
        records.push(encoder.record(
            now,
            None,
            Body::Port {
                name: "server".into(),
                port: 6767,
            },
        ));
        records.push(encoder.record(
            now,
            Some("vite".into()),
            Body::Url {
                name: "ui".into(),
                url: "http://localhost:5173".into(),
            },
        ));
        records.push(encoder.file_line("server", "GET /api 200", now));
        records.push(encoder.notice("pod /x"));
        records.push(encoder.record(
            now,
            None,
            Body::Lagged {
                message: "fell behind".into(),
            },
        ));
        let mut kinds = HashSet::new();
        for record in &records {
            let value = serde_json::to_value(record).expect("encode");
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{value} does not validate: {errors:?}");
            // And a program reading the stream gets the same record back.
            let text = serde_json::to_string(record).expect("encode");
            assert_eq!(
                &serde_json::from_str::<Record>(&text).expect("decode"),
                record
            );
            kinds.insert(record.body.kind());
        }
        let every = [
            "state",
            "ready",
            "probe-timeout",
            "crashed",
            "exited",
            "reload",
            "log",
            "port",
            "url",
            "prepare-started",
            "prepare-finished",
            "notice",
            "profile-changed",
            "profile-applied",
            "debug",
            "lost",
            "lagged",
            "ended",
        ];
        assert_eq!(kinds, HashSet::from(every), "a record of every kind");
        // The schema names exactly these kinds.
        let in_schema: HashSet<&str> = schema["oneOf"]
            .as_array()
            .expect("oneOf")
            .iter()
            .filter_map(|entry| entry["properties"]["kind"]["const"].as_str())
            .collect();
        assert_eq!(in_schema, HashSet::from(every));
        // A record of an unknown kind, or with a missing field, fails.
        for bad in [
            r#"{"v":1,"ts":"2026-11-30T14:58:38.123Z","pod":"/p","service":null,"kind":"exploded"}"#,
            r#"{"v":1,"ts":"2026-11-30T14:58:38.123Z","pod":"/p","service":"s","kind":"crashed","attempt":1}"#,
            r#"{"v":1,"ts":"yesterday","pod":"/p","service":null,"kind":"ready"}"#,
        ] {
            let value: serde_json::Value = serde_json::from_str(bad).expect("json");
            assert!(!validator.is_valid(&value), "{bad} must not validate");
        }
    }
}

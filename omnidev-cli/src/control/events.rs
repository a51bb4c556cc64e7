//! The event stream for programs (`up --headless --json`, `events`,
//! `logs --json`): one JSON object per line, version [`VERSION`]: a core
//! [`Event`] as it serialises, with the record's version and pod. Its
//! JSON Schema, `docs/events.schema.json`, is generated from these types
//! (a test keeps the file equal to it); `docs/events.md` explains it.

use std::time::SystemTime;

use omnidev_core::{Event, EventKind, Kept, LogLine, Stream};
use serde::{Deserialize, Serialize};

pub use omnidev_core::event::rfc3339::format as rfc3339;

/// Version of the event records (`v`).
pub const VERSION: u32 = 2;

/// One line of the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(
    title = "omnidev event record, version 2",
    description = "One line of `omnidev up --headless --json`, `omnidev events --json` or `omnidev logs --json`. See docs/events.md."
)]
pub struct Record {
    /// The records' version: 2 ([`VERSION`]).
    #[schemars(range(min = 2, max = 2))]
    pub v: u32,
    /// The pod directory.
    pub pod: String,
    /// What happened, when, to which service.
    #[serde(flatten)]
    pub event: Event,
}

/// Makes the records of one pod.
#[derive(Debug, Clone, Default)]
pub struct Encoder {
    pod: String,
}

impl Encoder {
    /// An encoder for the pod in `pod_dir`.
    pub fn new(pod_dir: &std::path::Path) -> Self {
        Self { pod: pod_dir.display().to_string() }
    }

    /// The record of `event`.
    pub fn event(&self, event: Event) -> Record {
        Record { v: VERSION, pod: self.pod.clone(), event }
    }

    /// A record of `kind` about `service`, at `at`.
    pub fn record(&self, at: SystemTime, service: Option<String>, kind: EventKind) -> Record {
        self.event(Event { at, service, kind })
    }

    /// The record of a line read back from `service`'s log file, which
    /// was last modified at `at` when the line was read (the files keep no
    /// time, stream or number per line).
    pub fn file_line(&self, service: &str, text: &str, at: SystemTime) -> Record {
        let mut line = LogLine::new(service, Stream::Merged, text, 0);
        line.at = at;
        self.event(Event::log(line))
    }

    /// The record of a line or event of the history.
    pub fn kept(&self, kept: &Kept) -> Record {
        self.event(kept.event())
    }

    /// A pod-wide notice, now.
    pub fn notice(&self, message: impl Into<String>) -> Record {
        self.record(SystemTime::now(), None, EventKind::Notice { message: message.into() })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashSet;

    use std::time::Duration;

    use omnidev_core::{ExitStatus, ProfileApplied, ProfileChange, ServiceState};

    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        use omnidev_core::event::rfc3339::parse;
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_048_318_123);
        assert_eq!(rfc3339(at), "2026-11-30T14:18:38.123Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
        for at in [at, leap, SystemTime::UNIX_EPOCH] {
            assert_eq!(parse(&rfc3339(at)), Some(at));
        }
        assert_eq!(parse("yesterday"), None);
    }

    #[test]
    fn records_have_the_documented_shape() {
        let encoder = Encoder::new(std::path::Path::new("/pod"));
        let at = SystemTime::UNIX_EPOCH;
        let cases = [
            (
                EventKind::Crashed {
                    status: ExitStatus::Code(1),
                    attempt: 2,
                    backoff: Duration::from_millis(1500),
                },
                r#""kind":"crashed","exit":{"code":1},"attempt":2,"backoff-ms":1500}"#,
            ),
            (
                EventKind::State {
                    state: ServiceState::Restarting {
                        after: Duration::from_millis(1500),
                        attempt: 2,
                    },
                },
                r#""kind":"state","state":"restarting","backoff-ms":1500,"attempt":2}"#,
            ),
            (
                EventKind::State { state: ServiceState::Exited { status: ExitStatus::Signal(9) } },
                r#""kind":"state","state":"exited","exit":{"signal":9}}"#,
            ),
            (
                EventKind::Reloading {
                    services: vec!["server".into()],
                    changes: omnidev_core::Changes::of(["a.py"]),
                },
                r#""kind":"reload","services":["server"],"files":["a.py"],"files-total":1}"#,
            ),
            (
                EventKind::Log { line: LogLine::new("server", Stream::Stderr, "boom", 4) },
                r#""kind":"log","stream":"stderr","line":"boom","seq":4}"#,
            ),
        ];
        for (kind, tail) in cases {
            let text = serde_json::to_string(&encoder.record(at, Some("server".into()), kind))
                .expect("encode");
            let head = r#"{"v":2,"pod":"/pod","ts":"1970-01-01T00:00:00.000Z","service":"server","#;
            assert_eq!(text, format!("{head}{tail}"));
        }
    }

    /// One of every event kind (the supervisor's, the front-ends'): a new variant of
    /// [`EventKind`] or [`ServiceState`] does not compile here until it has
    /// a sample (the matches have no catch-all).
    pub(crate) fn every_supervisor_event() -> Vec<Event> {
        let mut kinds: Vec<EventKind> =
            every_state().into_iter().map(|state| EventKind::State { state }).collect();
        kinds.extend(every_other_kind());
        kinds.extend(told_by_front_ends());
        kinds.extend(over_limits());
        let mut seen = HashSet::new();
        for kind in &kinds {
            seen.insert(match kind {
                EventKind::State { .. } => "state",
                EventKind::Ready { .. } => "ready",
                EventKind::ProbeTimedOut { .. } => "probe-timed-out",
                EventKind::Crashed { .. } => "crashed",
                EventKind::OverLimit { .. } => "over-limit",
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
                EventKind::Port { .. } => "port",
                EventKind::Url { .. } => "url",
                EventKind::Lost { .. } => "lost",
                EventKind::Lagged { .. } => "lagged",
                EventKind::Status { .. } => "status",
                EventKind::LinkDown { .. } => "link-down",
                EventKind::LinkUp => "link-up",
                EventKind::Link { .. } => "link",
            });
        }
        assert_eq!(seen.len(), 24, "a sample of every event kind");
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
                // Every fifth is the pod's own, but a line is a service's.
                let line = matches!(kind, EventKind::Log { .. } | EventKind::PartialLine { .. });
                Event { at, service: (i % 5 != 4 || line).then(|| "server".to_owned()), kind }
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
            ServiceState::Restarting { after: Duration::from_millis(1500), attempt: 2 },
            ServiceState::OverLimit {
                limit: 64 << 20,
                pod: false,
                after: Duration::from_secs(1),
                attempt: 1,
            },
            ServiceState::Stopping { pid: 7 },
            ServiceState::Exited { status: ExitStatus::Signal(9) },
            ServiceState::Exited { status: ExitStatus::Code(0) },
            ServiceState::Stopped,
            ServiceState::Failed { reason: "pnpm install failed".into() },
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
                ServiceState::OverLimit { .. } => "over-limit",
                ServiceState::Stopping { .. } => "stopping",
                ServiceState::Exited { .. } => "exited",
                ServiceState::Stopped => "stopped",
                ServiceState::Failed { .. } => "failed",
                ServiceState::Blocked { .. } => "blocked",
            });
        }
        assert_eq!(seen_states.len(), 12, "a sample of every state");
        states.to_vec()
    }

    /// Kills over a service's own memory limit and over the pod's.
    fn over_limits() -> Vec<EventKind> {
        vec![
            EventKind::OverLimit {
                used: 212 << 20,
                limit: 64 << 20,
                pod: false,
                attempt: 1,
                backoff: Duration::from_secs(1),
            },
            EventKind::OverLimit {
                used: 1 << 30,
                limit: 1 << 30,
                pod: true,
                attempt: 0,
                backoff: Duration::ZERO,
            },
        ]
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
            EventKind::ProbeTimedOut { after: Duration::from_secs(30) },
            EventKind::Crashed {
                status: ExitStatus::Code(1),
                attempt: 1,
                backoff: Duration::from_secs(1),
            },
            EventKind::Crashed { status: ExitStatus::Code(3), attempt: 0, backoff: Duration::ZERO },
            EventKind::Reloading {
                services: vec!["server".into()],
                changes: omnidev_core::Changes::of(["omnigent/app.py"]),
            },
            EventKind::Debug { message: "ignored: .git/index".into() },
            EventKind::PrepareStarted { step: "npm install".into() },
            EventKind::PrepareFinished { step: "npm install".into(), success: false },
            EventKind::Log {
                line: LogLine::new("server", Stream::Stderr, "\u{1b}[31mboom\u{1b}[0m", 4),
            },
            EventKind::PartialLine {
                line: LogLine::new("server", Stream::Stdout, "Password: ", 5),
            },
            EventKind::Notice { message: "shutting down".into() },
            EventKind::ProfileChanged(ProfileChange {
                file: "/repo/omnidev.toml".into(),
                changed: vec!["api".into()],
                added: vec!["worker".into()],
                removed: Vec::new(),
                error: None,
                apply: Some("api +worker".into()),
                message: "omnidev.toml changed: api (command), new service worker".into(),
            }),
            EventKind::ProfileChanged(ProfileChange {
                file: "/repo/omnidev.toml".into(),
                changed: Vec::new(),
                added: Vec::new(),
                removed: Vec::new(),
                error: Some("/repo/omnidev.toml:3:1: unknown field `comand`".into()),
                apply: None,
                message: "omnidev.toml changed but cannot be applied".into(),
            }),
            EventKind::ProfileApplied(ProfileApplied {
                applied: omnidev_core::Applied {
                    restarted: vec!["api".into()],
                    started: vec!["worker".into()],
                    ..Default::default()
                },
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

    /// The kinds a front-end or the control socket tells.
    fn told_by_front_ends() -> [EventKind; 8] {
        let mut crashed = omnidev_core::ServiceStatus::new(
            "server",
            ServiceState::Restarting { after: Duration::from_secs(2), attempt: 1 },
        );
        crashed.last_exit = Some(ExitStatus::Code(1));
        [
            EventKind::Status { services: vec![crashed] },
            EventKind::Port { name: "server".into(), port: 6767 },
            EventKind::Url { name: "ui".into(), url: "http://localhost:5173".into() },
            EventKind::Lost { count: 3, reason: "disk full".into() },
            EventKind::Lagged { message: "fell behind".into() },
            EventKind::Link {
                name: "api".into(),
                checkout: "/src/api".into(),
                pod_dir: "/pods/api-1".into(),
                ports: [("server".to_owned(), 6801)].into(),
            },
            EventKind::LinkDown { reason: "the pod /pods/api-1 is not running".into() },
            EventKind::LinkUp,
        ]
    }

    /// What a reader (`omnidev attach`, a script) reads back is what the
    /// supervisor published: every event kind and state, its time (to the
    /// millisecond), a line's service, stream and number.
    #[test]
    fn records_read_back_as_the_events_they_were_made_from() {
        let encoder = Encoder::new(std::path::Path::new("/pod"));
        for event in every_supervisor_event() {
            let record = encoder.event(event.clone());
            let text = serde_json::to_string(&record).expect("encode");
            let back = serde_json::from_str::<Record>(&text).expect("decode");
            assert_eq!(back, record, "{text}");
            assert_eq!(back.event.to_string(), event.to_string(), "{text}");
        }
        let line = encoder.file_line("server", "GET / 200", SystemTime::UNIX_EPOCH);
        let text = serde_json::to_string(&line).expect("encode");
        assert!(text.contains(r#""stream":"merged""#), "{text}");
        assert_eq!(serde_json::from_str::<Record>(&text).expect("decode"), line);
    }

    /// `docs/events.schema.json` is the schema of [`Record`] as generated
    /// from the types (`OMNIDEV_BLESS=1` writes it), and every record the
    /// supervisor and the front-ends can emit validates against it.
    #[test]
    fn the_published_schema_is_the_one_the_types_make() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/events.schema.json");
        let generated = schemars::schema_for!(Record);
        let mut text = serde_json::to_string_pretty(&generated).expect("encode");
        text.push('\n');
        if std::env::var_os("OMNIDEV_BLESS").is_some() {
            std::fs::write(path, &text).expect("write the schema");
        }
        let published = std::fs::read_to_string(path).expect("the schema file");
        assert!(
            published == text,
            "docs/events.schema.json is not the schema of the record types: run the test with OMNIDEV_BLESS=1 and commit the file"
        );
        let schema: serde_json::Value = serde_json::from_str(&published).expect("JSON");
        let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
        let encoder =
            Encoder::new(std::path::Path::new("/home/ada/.cache/omnidev/omnigent-1a2b3c4d"));
        let mut kinds = HashSet::new();
        let records = every_supervisor_event()
            .into_iter()
            .map(|event| encoder.event(event))
            .chain([encoder.file_line("server", "GET /api 200", SystemTime::now())]);
        for record in records {
            let value = serde_json::to_value(&record).expect("encode");
            let errors: Vec<String> =
                validator.iter_errors(&value).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{value} does not validate: {errors:?}");
            kinds.insert(value["kind"].as_str().expect("a kind").to_owned());
        }
        assert_eq!(kinds.len(), 24, "a record of every kind: {kinds:?}");
        // A record of an unknown kind, or with a missing field, fails.
        for bad in [
            r#"{"v":2,"ts":"2026-11-30T14:58:38.123Z","pod":"/p","service":null,"kind":"exploded"}"#,
            r#"{"v":2,"ts":"2026-11-30T14:58:38.123Z","pod":"/p","service":"s","kind":"crashed","attempt":1}"#,
            r#"{"v":2,"ts":"yesterday","pod":"/p","service":null,"kind":"notice","message":"hi"}"#,
            r#"{"v":1,"ts":"2026-11-30T14:58:38.123Z","pod":"/p","service":null,"kind":"notice","message":"hi"}"#,
        ] {
            let value: serde_json::Value = serde_json::from_str(bad).expect("json");
            assert!(!validator.is_valid(&value), "{bad} must not validate");
        }
    }
}

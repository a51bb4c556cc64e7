//! The control protocol's messages and the `--json` output of `status`
//! and `ls` (schema version [`SCHEMA`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use omnidev_core::{NamedUrl, ServiceState, ServiceStatus};
use serde::{Deserialize, Serialize};

/// Version of the protocol and of the `--json` outputs.
pub const SCHEMA: u32 = 3;

/// A request to a running pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case", rename_all_fields = "kebab-case")]
pub enum Request {
    /// The pod's status.
    Status,
    /// Shut the pod down.
    Stop,
    /// Restart a service, or the watched services when `service` is absent (every
    /// service with `all`).
    Restart {
        /// The service; `None` for the watched services.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        service: Option<String>,
        /// Every service, as one reload (instead of `service`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        all: bool,
        /// With `service`: its dependents keep running.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        no_deps: bool,
        /// How long to wait for the restarted services, in seconds
        /// (default 300); the client's own read timeout should match.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_secs: Option<u64>,
    },
    /// Stop these services (the pod and their dependents run on); answered
    /// once each one's processes are gone.
    StopService {
        /// The services.
        services: Vec<String>,
    },
    /// Start these services (stopped or ended ones; a running one is left
    /// as it is); answered once each is ready or one failed.
    StartService {
        /// The services.
        services: Vec<String>,
        /// How long to wait for them, in seconds (default 300).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_secs: Option<u64>,
    },
    /// Apply the profile file as it is now (`omnidev reload-profile`):
    /// restart the services whose rendered spec changed, start the new
    /// ones, stop the removed ones; answered once those restarted and
    /// started are ready or one failed.
    ReloadProfile {
        /// How long to wait for them, in seconds (default 300).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_secs: Option<u64>,
    },
    /// Answer once every service is ready or one has failed.
    WaitReady,
    /// Answer once a condition holds (or a service failed, or the time
    /// ran out).
    Wait {
        /// The condition.
        until: WaitFor,
        /// The services it concerns; all when empty.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        services: Vec<String>,
        /// How long to wait, in seconds (default 600).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_secs: Option<u64>,
    },
    /// The kept event records, then (with `follow`) every new one: an
    /// answer line first, then one record a line.
    Events(EventsQuery),
}

/// What an `events` request asks for: which records, and whether to
/// follow. The pod's reader filters by it as it came
/// ([`crate::control::retained::Filter`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[expect(
    clippy::struct_excessive_bools,
    reason = "the request's flags as the wire has them, each on its own"
)]
pub struct EventsQuery {
    /// Keep sending new records until the pod stops.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub follow: bool,
    /// Only these services' records (and the pod's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    /// Log lines too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub logs: bool,
    /// Only records at most this many milliseconds old.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// Only records from the last reload on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub since_reload: bool,
    /// With `logs` and `follow`: unfinished lines too, as they stand
    /// (`partial-line` records).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// With `follow`: a `status` record after the kept records, and
    /// one whenever a service's status changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub status: bool,
}

impl EventsQuery {
    /// What a UI of the whole pod follows (`omnidev attach`, the
    /// dashboard): every record kept and new, finished lines too, a
    /// `status` at each change (`partial` adds unfinished lines as they
    /// stand).
    pub fn everything() -> Self {
        Self { follow: true, logs: true, status: true, ..Self::default() }
    }
}

/// What `wait` waits for (also the `until` of the MCP `wait` tool, whose
/// schema these comments describe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WaitFor {
    /// Each service is ready (its probe passed; without a probe, it has
    /// kept running for a second; or it exited 0), as `wait-ready`.
    Ready,
    /// Each service has ended.
    Exited,
    /// The reload of the latest source change the pod has seen (begun at
    /// most 2 s before the request, or after it) is over and each service
    /// is ready again (after an edit).
    HealthyAfterReload,
}

/// The answer to a [`Request`]: accepted (the first line of an `events`
/// stream), done (with the pod's status after it), or refused.
///
/// On the wire it is one object: `schema`, `ok`, and `status`, `failed`
/// and `applied` when done, `error` and `error-kind` when refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Wire", into = "Wire")]
pub enum Response {
    /// The request was taken: records follow.
    Accepted,
    /// The request was carried out.
    Done(Box<Completed>),
    /// The request was not carried out.
    Refused(Refusal),
}

/// What a request that was carried out answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    /// The pod's status after the request.
    pub status: PodStatus,
    /// Services that failed (`wait-ready`, `restart`, `start-service`,
    /// `reload-profile`).
    pub failed: Vec<String>,
    /// What `reload-profile` did.
    pub applied: Option<omnidev_core::ProfileApplied>,
}

impl Completed {
    /// The answer `status` after a request, with the services that
    /// `failed`.
    pub fn new(status: PodStatus, failed: Vec<String>) -> Self {
        Self { status, failed, applied: None }
    }

    /// Each service of [`Completed::failed`] with its state as the status
    /// shows it: `web failed: stopped`, `api failed: blocked: waiting for
    /// db, which was stopped`, `worker failed: exit code 127: …` (a
    /// `failed` state is not said twice).
    pub fn failures(&self) -> Vec<String> {
        self.failed
            .iter()
            .map(|name| {
                let report = self.status.services.iter().find(|s| &s.status.name == name);
                match report {
                    Some(r) if matches!(r.status.state, ServiceState::Failed { .. }) => {
                        format!("{name} {}", r.detail)
                    }
                    Some(r) => format!("{name} failed: {}", r.detail),
                    None => format!("{name} failed"),
                }
            })
            .collect()
    }
}

/// Why a request was not carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What kind, when the client tells it apart (its exit code
    /// differs).
    pub kind: Option<ErrorKind>,
    /// Why, for people.
    pub message: String,
}

impl Refusal {
    /// A refusal of a kind the client tells apart.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind: Some(kind), message: message.into() }
    }

    /// A refusal of no particular kind.
    pub fn other(message: impl Into<String>) -> Self {
        Self { kind: None, message: message.into() }
    }
}

impl Response {
    /// A successful answer: `status` after the request, with the
    /// services that `failed`.
    pub fn ok(status: PodStatus, failed: Vec<String>) -> Self {
        Self::Done(Box::new(Completed::new(status, failed)))
    }

    /// A refusal of no particular kind.
    pub fn error(message: impl Into<String>) -> Self {
        Self::Refused(Refusal::other(message))
    }

    /// A refusal of a kind the client tells apart.
    pub fn refused(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::Refused(Refusal::new(kind, message))
    }
}

impl From<Refusal> for Response {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}

/// [`Response`] as the wire has it. An answer `ok` without a status is
/// [`Response::Accepted`]; a refusal without a reason says so.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Wire {
    schema: u32,
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error_kind: Option<ErrorKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<PodStatus>,
    #[serde(default)]
    failed: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    applied: Option<omnidev_core::ProfileApplied>,
}

impl From<Wire> for Response {
    fn from(wire: Wire) -> Self {
        match wire {
            Wire { ok: false, error, error_kind, .. } => Self::Refused(Refusal {
                kind: error_kind,
                message: error.unwrap_or_else(|| "no reason given".to_owned()),
            }),
            Wire { status: None, .. } => Self::Accepted,
            Wire { status: Some(status), failed, applied, .. } => {
                Self::Done(Box::new(Completed { status, failed, applied }))
            }
        }
    }
}

impl From<Response> for Wire {
    fn from(response: Response) -> Self {
        let wire = Self { schema: SCHEMA, ok: true, ..Self::default() };
        match response {
            Response::Accepted => wire,
            Response::Done(done) => {
                let Completed { status, failed, applied } = *done;
                Self { status: Some(status), failed, applied, ..wire }
            }
            Response::Refused(Refusal { kind, message }) => {
                Self { ok: false, error: Some(message), error_kind: kind, ..wire }
            }
        }
    }
}

/// The kinds of refusal a client tells apart (`error-kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// A service the pod does not have.
    UnknownService,
    /// A malformed request: a bad name, a value out of range.
    Usage,
    /// What the request waited for did not happen within its limit.
    Timeout,
    /// The profile file cannot be loaded (`reload-profile`): the pod runs
    /// on with the profile it runs.
    InvalidProfile,
}

/// A URL shown to people (`ui`, `server`, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UrlReport {
    /// The URL's name.
    pub name: String,
    /// The URL.
    pub url: String,
    /// The service serving it, shown while it runs ready; absent for the
    /// pod's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

impl UrlReport {
    /// The URLs shown now: the pod's own, then each service's that core
    /// shows ([`ServiceStatus::urls`]), in service order.
    pub fn shown(pod: &[NamedUrl], services: &[ServiceStatus]) -> Vec<Self> {
        let own = pod.iter().map(|u| Self::of(u, None));
        Self::with_services(own, services)
    }

    /// `own` (the pod's own URLs, as a status reported them), then each
    /// service's that core shows: [`UrlReport::shown`] for a reader of
    /// statuses.
    pub fn with_services(own: impl Iterator<Item = Self>, services: &[ServiceStatus]) -> Vec<Self> {
        let served =
            (services.iter()).flat_map(|s| s.urls.iter().map(|u| Self::of(u, Some(&s.name))));
        own.chain(served).collect()
    }

    fn of(url: &NamedUrl, service: Option<&String>) -> Self {
        Self { name: url.name.clone(), url: url.url.clone(), service: service.cloned() }
    }
}

/// One service, as `status` reports it: core's status, the same for
/// people, and its log file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ServiceReport {
    /// Its name, state (`state`: one of `waiting`, `blocked`,
    /// `preparing`, `starting`, `running`, `ready`, `restarting`,
    /// `stopping`, `exited`, `stopped`, `failed`, with the state's own
    /// fields) and the rest.
    #[serde(flatten)]
    pub status: ServiceStatus,
    /// For people: `ready pid 123`, `crashed (exit code 1)`.
    pub detail: String,
    /// Its log file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_file: Option<PathBuf>,
    /// What its processes hold now (its pid and every process below it),
    /// while it has a process and the pod runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<omnidev_core::platform::Usage>,
}

impl ServiceReport {
    /// The report of `status`, whose log is `log_file`.
    pub fn new(status: ServiceStatus, log_file: Option<PathBuf>) -> Self {
        Self { detail: status.detail(), status, log_file, usage: None }
    }
}

/// A pod's status: `omnidev status --json`, and the `status` field of
/// every successful [`Response`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct PodStatus {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The pod directory.
    pub pod_dir: PathBuf,
    /// The checkout, as recorded in `pod.toml`.
    pub repo: Option<PathBuf>,
    /// Whether an `omnidev up` runs this pod (holds its lock).
    pub running: bool,
    /// That process's pid.
    pub pid: Option<u32>,
    /// Whether the control socket answered (false when not running, or
    /// when the supervisor does not respond; services then come from
    /// `state.json`).
    pub control: bool,
    /// The pod's ports (`pod.toml`).
    pub ports: BTreeMap<String, u16>,
    /// URLs for people (only known while running).
    pub urls: Vec<UrlReport>,
    /// How the pod's processes are contained, while it runs: `cgroup v2
    /// (<dir>)`, `process groups and a subreaper (<why not cgroups>)`
    /// (Linux) or `process groups and sessions, no subreaper: orphans are
    /// found by their service id among every process (cgroups are
    /// Linux-only)` (macOS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
    /// The host the pod runs on (`omnidev up --host`), seen from the
    /// machine whose pod directory forwards to it; absent for a pod of
    /// this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The engine `omnidev up --db` moved the pod's databases to (`sqlite`,
    /// `postgres`, `mariadb`, `redis`), kept by the pod; absent when the
    /// profile's own engines hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_engine: Option<String>,
    /// Every service, in start order (from `state.json`, sorted by name,
    /// when the control socket did not answer).
    pub services: Vec<ServiceReport>,
    /// What the pod's services hold together (the sum of theirs), while it
    /// runs and the control socket answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<omnidev_core::platform::Usage>,
    /// The last reload, while running (when one happened).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reload: Option<ReloadReport>,
    /// What each `[links.NAME]` of the profile resolved to when the pod
    /// started, while running.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub links: BTreeMap<String, LinkReport>,
    /// When the pod started (RFC 3339), while running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When something last happened in it (RFC 3339; a line of output, a
    /// state change, a restart), while running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_activity: Option<String>,
    /// The watched services, while running: what `restart` without a service (and
    /// the TUI's `R`) restarts — the services with watch rules, every
    /// service when none has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watched: Vec<String>,
    /// Why the pod's records could not be read (e.g. a corrupt `pod.toml`:
    /// its path and the parser's reason); absent when they could.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A linked pod, as `status` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct LinkReport {
    /// The linked checkout.
    pub checkout: PathBuf,
    /// Its pod directory.
    pub pod_dir: PathBuf,
    /// Its ports, as this pod's placeholders got them.
    pub ports: BTreeMap<String, u16>,
    /// Whether it runs now.
    pub running: bool,
}

impl LinkReport {
    /// The report of `linked`, asked now whether it runs.
    pub fn of(linked: &omnidev_pod::link::Linked) -> Self {
        Self {
            checkout: linked.checkout.clone(),
            pod_dir: linked.pod_dir.clone(),
            ports: linked.ports.0.clone(),
            running: matches!(
                omnidev_pod::PodLock::state(&linked.pod_dir),
                Ok(omnidev_pod::LockState::Held { .. })
            ),
        }
    }
}

/// A reload, as `status` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ReloadReport {
    /// When it began (RFC 3339).
    pub ts: String,
    /// The services reloaded.
    pub services: Vec<String>,
    /// The changed files behind it (`files`, at most 64) and how many
    /// changed in all (`files-total`).
    #[serde(flatten)]
    pub changes: omnidev_core::Changes,
}

/// One pod in `omnidev ls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PodSummary {
    /// The pod directory.
    pub pod_dir: PathBuf,
    /// The checkout, as recorded in `pod.toml`.
    pub repo: Option<PathBuf>,
    /// Whether an `omnidev up` runs it.
    pub running: bool,
    /// That process's pid.
    pub pid: Option<u32>,
    /// The pod's ports.
    pub ports: BTreeMap<String, u16>,
    /// Why its `pod.toml` could not be read (path and reason); absent when
    /// it could.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its checkout no longer exists (a deleted worktree): the pod keeps
    /// its ports until it is cleaned.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repo_gone: bool,
    /// What its services hold now (`omnidev ls` asks each running pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<omnidev_core::platform::Usage>,
    /// The host it runs on, while `omnidev up --host` is connected to it
    /// (as in `status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// When it started, while running (as in `status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When something last happened in it, while running (as in
    /// `status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_activity: Option<String>,
}

/// `omnidev ls --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PodList {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The cache root that was searched.
    pub cache_root: PathBuf,
    /// Every pod with a `pod.toml`, sorted by directory.
    pub pods: Vec<PodSummary>,
    /// What the running pods hold together (`omnidev ls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<omnidev_core::platform::Usage>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `events` request of docs/control.md reads as the query it
    /// names, and is written back the same.
    #[test]
    fn an_events_request_is_its_query_on_the_wire() {
        let text = r#"{"cmd":"events","follow":true,"services":["server"],"logs":true,"since-ms":30000,"since-reload":true,"status":true}"#;
        let request: Request = serde_json::from_str(text).expect("an events request");
        let query = EventsQuery {
            follow: true,
            services: vec!["server".into()],
            logs: true,
            since_ms: Some(30_000),
            since_reload: true,
            partial: false,
            status: true,
        };
        assert_eq!(request, Request::Events(query));
        assert_eq!(serde_json::to_string(&request).expect("encode"), text);
        let bare: Request = serde_json::from_str(r#"{"cmd":"events"}"#).expect("bare");
        assert_eq!(bare, Request::Events(EventsQuery::default()));
    }

    #[test]
    fn each_failure_is_named_with_its_state_once() {
        let report = |name: &str, state: &str, detail: &str| serde_json::json!({"name": name, "state": state, "reason": "", "ready": false, "restarts": 0, "starts": 1, "detail": detail});
        let Response::Done(response) = serde_json::from_value(serde_json::json!({
            "schema": SCHEMA, "ok": true, "failed": ["web", "api", "gone"],
            "status": {"schema": SCHEMA, "pod-dir": "/pod", "running": true, "control": true,
                "ports": {}, "urls": [], "services": [
                    report("web", "stopped", "stopped"),
                    report("api", "failed", "failed: exit code 127: a command it runs was not found"),
                ]},
        }))
        .expect("a response") else {
            panic!("not done")
        };
        assert_eq!(
            response.failures(),
            [
                "web failed: stopped",
                "api failed: exit code 127: a command it runs was not found",
                "gone failed",
            ]
        );
    }

    #[test]
    fn requests_have_the_documented_shape() {
        let cases = [
            (Request::Status, r#"{"cmd":"status"}"#),
            (Request::Stop, r#"{"cmd":"stop"}"#),
            (Request::WaitReady, r#"{"cmd":"wait-ready"}"#),
            (
                Request::Restart {
                    service: Some("server".into()),
                    all: false,
                    no_deps: false,
                    timeout_secs: None,
                },
                r#"{"cmd":"restart","service":"server"}"#,
            ),
            (
                Request::Restart {
                    service: Some("server".into()),
                    all: false,
                    no_deps: true,
                    timeout_secs: None,
                },
                r#"{"cmd":"restart","service":"server","no-deps":true}"#,
            ),
            (
                Request::Restart {
                    service: None,
                    all: false,
                    no_deps: false,
                    timeout_secs: Some(30),
                },
                r#"{"cmd":"restart","timeout-secs":30}"#,
            ),
            (
                Request::Restart { service: None, all: false, no_deps: false, timeout_secs: None },
                r#"{"cmd":"restart"}"#,
            ),
            (
                Request::Restart { service: None, all: true, no_deps: false, timeout_secs: None },
                r#"{"cmd":"restart","all":true}"#,
            ),
            (
                Request::StopService { services: vec!["vite".into()] },
                r#"{"cmd":"stop-service","services":["vite"]}"#,
            ),
            (
                Request::StartService { services: vec!["vite".into()], timeout_secs: None },
                r#"{"cmd":"start-service","services":["vite"]}"#,
            ),
        ];
        for (request, text) in cases {
            assert_eq!(serde_json::to_string(&request).expect("encode"), text);
            assert_eq!(serde_json::from_str::<Request>(text).expect("decode"), request);
        }
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"explode"}"#).is_err());
    }

    /// Each kind of answer has the wire's one shape and reads back as
    /// itself; an answer `ok` without a status is the start of a stream,
    /// a refusal without a reason says so.
    #[test]
    fn each_answer_round_trips_in_the_wire_shape() {
        let done = Response::Done(Box::new(Completed {
            applied: Some(omnidev_core::ProfileApplied::default()),
            ..Completed::new(PodStatus::default(), vec!["web".into()])
        }));
        let cases = [
            (Response::error("nope"), r#"{"schema":3,"ok":false,"error":"nope","failed":[]}"#),
            (
                Response::refused(ErrorKind::Timeout, "late"),
                r#"{"schema":3,"ok":false,"error":"late","error-kind":"timeout","failed":[]}"#,
            ),
            (Response::Accepted, r#"{"schema":3,"ok":true,"failed":[]}"#),
        ];
        for (response, text) in cases {
            assert_eq!(serde_json::to_string(&response).expect("encode"), text);
            assert_eq!(serde_json::from_str::<Response>(text).expect("decode"), response);
        }
        let text = serde_json::to_string(&done).expect("encode");
        assert!(text.starts_with(r#"{"schema":3,"ok":true,"status":{"#), "{text}");
        assert!(text.contains(r#""failed":["web"],"applied":{"#), "{text}");
        assert_eq!(serde_json::from_str::<Response>(&text).expect("decode"), done);
        let bare = serde_json::from_str::<Response>(r#"{"schema":3,"ok":false}"#).expect("decode");
        assert_eq!(bare, Response::error("no reason given"));
    }

    /// Every state a status reports reads back as itself (a backoff
    /// included), and the same for people.
    #[test]
    fn every_reported_state_reads_back_whole() {
        for state in crate::control::events::tests::every_state() {
            let status = ServiceStatus {
                restarts: 2,
                last_exit: Some(omnidev_core::ExitStatus::Signal(9)),
                note: Some("port 6767 is held by pid 4242".into()),
                ..ServiceStatus::new("server", state.clone())
            };
            let report = ServiceReport::new(status.clone(), None);
            assert_eq!(report.detail, format!("{}: port 6767 is held by pid 4242", state.label()));
            let text = serde_json::to_string(&report).expect("encode");
            let back: ServiceReport = serde_json::from_str(&text).expect("decode");
            assert_eq!(back, report, "{text}");
        }
    }

    #[test]
    fn state_words() {
        use omnidev_core::{ExitStatus, ServiceState};
        assert_eq!(ServiceState::Starting { pid: 1 }.word(), "starting");
        assert_eq!(ServiceState::Running { pid: 1 }.word(), "running");
        let failed = ServiceState::Exited { status: ExitStatus::Signal(9) };
        assert_eq!(failed.word(), "crashed");
    }
}

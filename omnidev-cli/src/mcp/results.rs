//! The arguments and results of the tools of `omnidev mcp`: plain data
//! whose JSON Schemas (from their doc comments, and each number's range
//! and default from [`super::limits`]) the tools advertise, and which
//! the arguments are checked against ([`super::schema::check`]).

use rmcp::ErrorData;
use rmcp::handler::server::tool::IntoCallToolResult;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock};
use serde::{Deserialize, Serialize};

use super::limits::{
    EVENT_BYTES, EVENTS, LOG_BYTES, LOG_LINES, RESTART_SECS, SERVICES, UP_SECS, WAIT_SECS,
};

use crate::control::protocol::{PodStatus, WaitFor};

/// A tool's answer: `T` as the result's `structuredContent`, and as its
/// text the same value through the one JSON encoder
/// ([`omnidev_core::text::json_line`]), so that the text a client prints
/// holds no DEL, C1 or bidi control a service printed, only `\u` escapes
/// (the SDK's own `Json` writes them raw). Named `Json`, as the SDK's is,
/// for `#[tool]` to derive the output schema from `T`.
#[derive(Debug)]
pub struct Json<T>(pub T);

impl<T: Serialize> IntoCallToolResult for Json<T> {
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        let value = serde_json::to_value(self.0).map_err(|e| {
            ErrorData::internal_error(format!("the result does not encode: {e}"), None)
        })?;
        let text = omnidev_core::text::json_line(&value);
        let mut result = CallToolResult::success(vec![ContentBlock::text(text.trim_end())]);
        result.structured_content = Some(value);
        Ok(result.into())
    }
}

/// The arguments of `logs`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogsParams {
    /// The service whose log to read.
    pub service: String,
    /// The last this many lines.
    #[serde(default)]
    #[schemars(range(min = 1, max = LOG_LINES.1), extend("default" = LOG_LINES.0))]
    pub lines: Option<u32>,
    /// Only lines written since the pod's last reload (since it started
    /// when none happened).
    #[serde(default)]
    pub since_reload: bool,
    /// At most this many bytes of lines, the newest kept.
    #[serde(default)]
    #[schemars(range(min = 1, max = LOG_BYTES.1), extend("default" = LOG_BYTES.0))]
    pub max_bytes: Option<u32>,
}

/// What `logs` answers.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct LogsResult {
    /// The service.
    pub service: String,
    /// Whether only the lines since the last reload were asked for.
    pub since_reload: bool,
    /// The lines, oldest first, escape sequences and controls shown
    /// visibly.
    pub lines: Vec<String>,
    /// Whether older lines were left out (or the oldest one cut) to keep
    /// within `max_bytes`.
    pub truncated: bool,
}

/// The arguments of `wait`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitParams {
    /// The condition.
    pub until: WaitFor,
    /// The services it concerns; every service when empty.
    #[serde(default)]
    #[schemars(length(max = SERVICES))]
    pub services: Vec<String>,
    /// Seconds to wait at most (default 60 for healthy-after-reload, 300
    /// otherwise).
    #[serde(default)]
    #[schemars(range(min = 1, max = WAIT_SECS.1))]
    pub timeout_secs: Option<u64>,
}

/// The arguments of `restart`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartParams {
    /// The service to restart; without it, the watched services (those with
    /// watch rules, or every service when none has).
    #[serde(default)]
    pub service: Option<String>,
    /// Every service, as one reload (not with `service`).
    #[serde(default)]
    pub all: bool,
    /// With `service`: its dependents keep running.
    #[serde(default)]
    pub no_deps: bool,
    /// Seconds to wait for the restarted services to be ready.
    #[serde(default)]
    #[schemars(range(min = 1, max = RESTART_SECS.1), extend("default" = RESTART_SECS.0))]
    pub timeout_secs: Option<u64>,
}

/// The arguments of `stop_service`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceParams {
    /// The service.
    pub service: String,
}

/// The arguments of `start_service`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartParams {
    /// The service.
    pub service: String,
    /// Seconds to wait for it to be ready.
    #[serde(default)]
    #[schemars(range(min = 1, max = RESTART_SECS.1), extend("default" = RESTART_SECS.0))]
    pub timeout_secs: Option<u64>,
}

/// The arguments of `reload_profile`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReloadProfileParams {
    /// Seconds to wait for the restarted and started services to be ready.
    #[serde(default)]
    #[schemars(range(min = 1, max = RESTART_SECS.1), extend("default" = RESTART_SECS.0))]
    pub timeout_secs: Option<u64>,
}

/// What `reload_profile` answers.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ReloadProfileResult {
    /// What was applied: the services restarted (their rendered spec
    /// changed), started (new), stopped (removed), kept stopped, and the
    /// same in words.
    pub applied: omnidev_core::ProfileApplied,
    /// Whether they came up, and the pod's status afterwards (new ports
    /// and URLs included).
    #[serde(flatten)]
    pub outcome: ActionResult,
}

/// The arguments of `events`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsParams {
    /// Only these services' events (and the pod's own); all when empty.
    #[serde(default)]
    #[schemars(length(max = SERVICES))]
    pub services: Vec<String>,
    /// Only events from the last reload on.
    #[serde(default)]
    pub since_reload: bool,
    /// The services' output lines too (`log` records).
    #[serde(default)]
    pub logs: bool,
    /// The newest this many records.
    #[serde(default)]
    #[schemars(range(min = 1, max = EVENTS.1), extend("default" = EVENTS.0))]
    pub limit: Option<u32>,
    /// At most this many bytes of records, the newest kept.
    #[serde(default)]
    #[schemars(range(min = 1, max = EVENT_BYTES.1), extend("default" = EVENT_BYTES.0))]
    pub max_bytes: Option<u32>,
}

/// What `events` answers.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct EventsResult {
    /// The records, oldest first (`v`, `ts`, `pod`, `seq`, `kind`, … as in
    /// docs/events.md).
    pub events: Vec<serde_json::Value>,
    /// Whether older records were left out (by `limit` or `max_bytes`).
    pub truncated: bool,
}

/// The arguments of `up`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpParams {
    /// Seconds for every service to be ready.
    #[serde(default)]
    #[schemars(range(min = 1, max = UP_SECS.1), extend("default" = UP_SECS.0))]
    pub timeout_secs: Option<u64>,
}

/// A service that failed while a tool waited.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct FailedService {
    /// Its name.
    pub name: String,
    /// Its state, e.g. `crashed (exit code 1)`.
    pub detail: String,
    /// How its last run ended (`{"code": N}` or `{"signal": N}`).
    pub last_exit: Option<omnidev_core::ExitStatus>,
    /// The last lines of its log (at most 20, 8 KiB).
    pub last_lines: Vec<String>,
}

/// What `wait`, `restart`, `stop_service`, `start_service` and `up` answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ActionResult {
    /// Whether it went as asked: false when a service failed.
    pub ok: bool,
    /// The services that failed, with their state and last lines.
    pub failed: Vec<FailedService>,
    /// The pod's status afterwards.
    pub status: PodStatus,
}

/// The arguments of `db_snapshot`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotParams {
    /// The database (the profile's first when omitted).
    #[serde(default)]
    pub database: Option<String>,
    /// Its label: 1 to 64 letters, digits, `.`, `_`, `-` (default: the
    /// time, `YYYYMMDD-HHMMSS`).
    #[serde(default)]
    pub label: Option<String>,
}

/// The arguments of `db_restore`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreParams {
    /// The database (the profile's first when omitted).
    #[serde(default)]
    pub database: Option<String>,
    /// The snapshot's label (`db_snapshots` lists them).
    pub label: String,
}

/// The arguments of `db_clone`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloneParams {
    /// The database (the profile's first when omitted).
    #[serde(default)]
    pub database: Option<String>,
    /// The checkout whose pod to copy from (default: the repository's
    /// main worktree).
    #[serde(default)]
    pub from: Option<String>,
}

/// What `db_snapshot`, `db_restore` and `db_clone` answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct DataResult {
    /// What was done, with its size and time: `snapshot main/before:
    /// 45.3 MiB in 0.21 s (a base backup of the running server)`.
    pub message: String,
}

/// One snapshot of the pod.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct SnapshotReport {
    /// The database.
    pub database: String,
    /// Its label.
    pub label: String,
    /// The engine its data is of.
    pub engine: String,
    /// When it was taken (RFC 3339, UTC).
    pub taken_at: String,
    /// Its bytes.
    pub bytes: u64,
}

/// What `db_snapshots` answers.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct SnapshotsResult {
    /// The pod's snapshots, by database and time.
    pub snapshots: Vec<SnapshotReport>,
}

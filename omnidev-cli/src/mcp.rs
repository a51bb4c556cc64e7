//! `omnidev mcp`: the pod of a checkout as Model Context Protocol tools,
//! served over stdin/stdout with the official Rust SDK (rmcp), for coding
//! agents (Claude Code, Codex, Cursor).
//!
//! Every tool does what a command does, through the same code: the control
//! socket client for `status`, `wait`, `restart`, `stop`/`start SERVICE`
//! and `events`, the log files as `omnidev logs` reads them, `up
//! --detach`'s start of a background pod for `up`. A failure is a tool
//! error (`isError`) whose text is the command's `--json` error record
//! (`{"error": {"code", "message", "help", "exit"}}`); a success carries
//! `structuredContent` that its output schema describes (each tool
//! returns `Result<Json<T>, CallToolResult>`, written out: the SDK derives
//! the output schema from that very type), and as its text the same value
//! through the one JSON encoder ([`results::Json`]). Every argument is bounded ([`limits`]) by the tool's
//! input schema, which each call is checked against ([`schema::check`]);
//! what is no message is answered as JSON-RPC says ([`framing`]). stdout
//! carries protocol messages only: nothing here prints.

mod framing;
mod results;
mod schema;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router};

use crate::cli::PodArgs;
use crate::control::protocol::{Completed, EventsQuery, PodStatus, WaitFor};
use crate::control::{self, Ask, CallConnection};
use crate::error::Error;
use crate::log_files;
use results::{
    ActionResult, CloneParams, DataResult, EventsParams, EventsResult, FailedService, Json,
    LogsParams, LogsResult, ReloadProfileParams, ReloadProfileResult, RestartParams, RestoreParams,
    ServiceParams, SnapshotParams, SnapshotReport, SnapshotsResult, StartParams, UpParams,
    WaitParams,
};

/// The bounds of every argument, and the defaults within them.
pub mod limits {
    /// `logs`: lines returned by default, and at most.
    pub const LOG_LINES: (u32, u32) = (100, 5000);
    /// `logs`: bytes of lines returned by default, and at most.
    pub const LOG_BYTES: (u32, u32) = (32 * 1024, 1024 * 1024);
    /// `events`: records returned by default, and at most.
    pub const EVENTS: (u32, u32) = (100, 1000);
    /// `events`: bytes of records returned by default, and at most.
    pub const EVENT_BYTES: (u32, u32) = (64 * 1024, 1024 * 1024);
    /// `wait`: seconds by default (for a reload; 300 for the others), and
    /// at most.
    pub const WAIT_SECS: (u64, u64) = (60, 900);
    /// `restart`, `start_service`: seconds by default, and at most.
    pub const RESTART_SECS: (u64, u64) = (300, 900);
    /// `up`: seconds for the pod to be ready by default, and at most.
    pub const UP_SECS: (u64, u64) = (600, 1800);
    /// `wait`: services named at most.
    pub const SERVICES: usize = 64;
    /// A failed service's last lines given with it, and their bytes.
    pub const FAILURE_LINES: usize = 20;
    /// See [`FAILURE_LINES`].
    pub const FAILURE_BYTES: usize = 8 * 1024;
    /// `events`: bytes read from the pod at most (its kept records are
    /// bounded too; this bounds what a misbehaving pod could send).
    pub const EVENTS_READ_BYTES: usize = 64 * 1024 * 1024;
}

/// How long `stop_service` waits for the service's processes to be gone.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// Serves the pod `pod` names on stdin/stdout until the client leaves.
pub async fn serve(pod: PodArgs, allow_up: bool) -> Result<(), Error> {
    let session = |e: &dyn std::fmt::Display| Error::McpSession { message: e.to_string() };
    let running = Tools::new(pod, allow_up)
        .serve(framing::Framing::stdio())
        .await
        .map_err(|e| session(&e))?;
    running.waiting().await.map_err(|e| session(&e))?;
    Ok(())
}

/// The tools of one pod.
#[derive(Debug, Clone)]
pub struct Tools {
    pod: PodArgs,
    allow_up: bool,
    tool_router: ToolRouter<Self>,
}

/// The tool error of `report`: its `--json` error record as the text (no
/// `structuredContent`: it would not match the tool's output schema).
fn refusal(report: &miette::Report) -> CallToolResult {
    let record = crate::error::json_record(report);
    CallToolResult::error(vec![ContentBlock::text(record.trim_end())])
}

/// Runs `work` (which blocks on the pod's socket or files) off the
/// protocol's thread, turning its error into a tool error.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> miette::Result<T> + Send + 'static,
) -> Result<T, CallToolResult> {
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(report)) => Err(refusal(&report)),
        Err(join) => Err(refusal(&miette::Report::msg(format!("the tool's task failed: {join}")))),
    }
}

/// The running pod's directory, or [`Error::NotRunning`] (as every
/// command that asks a running pod checks first).
fn running(pod: &PodArgs) -> miette::Result<PathBuf> {
    Ok(crate::session::running_pod_dir(pod)?)
}

/// The newest lines pushed, at most `count` of them within `max_bytes`
/// (each line with its newline; a newest line longer than that alone is
/// kept cut at a character boundary): what `logs` and `events` keep while
/// they read, so that neither holds more than it answers, however much
/// the file or the pod gives.
#[derive(Debug)]
struct Newest {
    lines: VecDeque<String>,
    bytes: usize,
    count: usize,
    max_bytes: usize,
    /// Whether any line pushed was left out, or cut.
    left_out: bool,
}

impl Newest {
    fn new(count: usize, max_bytes: usize) -> Self {
        Self { lines: VecDeque::new(), bytes: 0, count, max_bytes, left_out: false }
    }

    /// Keeps `line` as the newest, leaving out the oldest ones that no
    /// longer fit. A line over `max_bytes` alone leaves out every older
    /// one and is kept cut, filling the bytes: any newer line replaces it.
    /// The lines kept are always the newest ones, without a gap.
    fn push(&mut self, mut line: String) {
        let size = line.len() + 1;
        if size > self.max_bytes {
            let mut end = self.max_bytes.min(line.len());
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
            line.shrink_to_fit();
            self.lines.clear();
            self.lines.push_back(line);
            self.bytes = self.max_bytes;
            self.left_out = true;
            return;
        }
        self.bytes += size;
        self.lines.push_back(line);
        while self.bytes > self.max_bytes || self.lines.len() > self.count {
            let oldest = self.lines.pop_front().expect("over a bound: not empty");
            self.bytes -= (oldest.len() + 1).min(self.bytes);
            self.left_out = true;
        }
    }

    /// The lines kept, oldest first, and whether any was left out or cut.
    fn into_lines(self) -> (Vec<String>, bool) {
        (self.lines.into(), self.left_out)
    }
}

/// The last lines of `service`'s log (each of its replicas', prefixed
/// `web.1 | `, sharing the bounds, when it runs as replicas), safe to show
/// (escape sequences and controls made visible), within `max_bytes`;
/// whether any was left out.
fn shown_lines(
    pod_dir: &Path,
    service: &str,
    lines: usize,
    since_reload: bool,
    max_bytes: usize,
) -> miette::Result<(Vec<String>, bool)> {
    let names = log_files::selected(pod_dir, &[service.to_owned()])?;
    let dir = omnidev_pod::Pod::at(pod_dir).logs_dir();
    let mark = since_reload.then(|| log_files::read_mark(&dir)).transpose()?;
    let (mut shown, mut left_out) = (Vec::new(), false);
    for name in &names {
        let (lines, max_bytes) = (lines / names.len(), max_bytes / names.len());
        // Read back from the end at most four times the answer's bytes
        // (what is made visible of a line may be longer or shorter than
        // it), each line made visible as it is read: never more held than
        // answered.
        let tail = log_files::Tail { lines, bytes: (max_bytes as u64).saturating_mul(4) };
        let prefix = if names.len() > 1 { format!("{name} | ") } else { String::new() };
        let mut newest = Newest::new(lines, max_bytes);
        let mut source = log_files::LogReader::new(name, &dir, String::new());
        log_files::read_back(&mut source, mark.as_ref(), Some(tail), &mut |_, line| {
            let text = match omnidev_core::text::sanitise(&line.text, false) {
                Cow::Owned(text) => text,
                Cow::Borrowed(_) => line.text,
            };
            newest.push(if prefix.is_empty() { text } else { format!("{prefix}{text}") });
            Ok(())
        })?;
        let (lines, cut) = newest.into_lines();
        shown.extend(lines);
        left_out |= cut;
    }
    Ok((shown, left_out))
}

/// Sends `request`, which the pod answers once it has acted (or waited),
/// to the running pod, and waits `timeout` (the pod's own limit) plus a
/// margin, as the commands do, for what it came to, on a connection
/// `connection` can hang up.
fn acted(pod: &PodArgs, asked: &Ask, connection: &CallConnection) -> miette::Result<ActionResult> {
    let (pod_dir, response) = ask(pod, asked, connection)?;
    Ok(outcome(&pod_dir, response))
}

/// [`acted`]'s request and answer, for a tool that reads more of the
/// answer than the outcome: the pod's directory and the pod's response.
fn ask(
    pod: &PodArgs,
    asked: &Ask,
    connection: &CallConnection,
) -> miette::Result<(PathBuf, Completed)> {
    let pod_dir = running(pod)?;
    let response = asked.send_on(&pod_dir, |stream| connection.keep(stream))?;
    Ok((pod_dir, response))
}

/// What a waiting request came to: the status, and each failed service
/// with its state and last lines.
fn outcome(pod_dir: &Path, response: Completed) -> ActionResult {
    let status = response.status;
    let failed = response
        .failed
        .iter()
        .map(|name| {
            let report = status.services.iter().find(|s| &s.status.name == name);
            FailedService {
                name: name.clone(),
                detail: report.map(|s| s.detail.clone()).unwrap_or_default(),
                last_exit: report.and_then(|s| s.status.last_exit),
                last_lines: shown_lines(
                    pod_dir,
                    name,
                    limits::FAILURE_LINES,
                    false,
                    limits::FAILURE_BYTES,
                )
                .map(|(lines, _)| lines)
                .unwrap_or_default(),
            }
        })
        .collect::<Vec<_>>();
    ActionResult { ok: failed.is_empty(), failed, status }
}

/// The database `database` of the pod `pod` names.
fn which(pod: &PodArgs, database: Option<String>) -> crate::cli::DbWhich {
    crate::cli::DbWhich { pod: pod.clone(), name: database }
}

impl Tools {
    /// Runs `work` on the pod's arguments off the protocol's thread: its
    /// value as the tool's structured result, its error as a tool error.
    /// When the client cancels the call, its connection to the pod is hung
    /// up.
    async fn answer<T: Send + 'static>(
        &self,
        context: &RequestContext<RoleServer>,
        work: impl FnOnce(&PodArgs, &CallConnection) -> miette::Result<T> + Send + 'static,
    ) -> Result<Json<T>, CallToolResult> {
        let pod = self.pod.clone();
        let connection = CallConnection::default();
        let held = connection.clone();
        tokio::select! {
            answer = blocking(move || work(&pod, &held)) => answer.map(Json),
            () = context.ct.cancelled() => {
                connection.hang_up();
                // Not sent: the SDK drops the answer to a cancelled call.
                Err(refusal(&miette::miette!("the call was cancelled")))
            }
        }
    }
}

#[tool_router(router = tool_router)]
impl Tools {
    /// The tools for the pod `pod` names; `up` only when `allow_up`.
    pub fn new(pod: PodArgs, allow_up: bool) -> Self {
        let mut tool_router = Self::tool_router();
        if !allow_up {
            tool_router.remove_route("up");
        }
        for route in tool_router.map.values_mut() {
            let tool = &mut route.attr;
            schema::plain(Arc::make_mut(&mut tool.input_schema), true);
            if let Some(output) = &mut tool.output_schema {
                schema::plain(Arc::make_mut(output), false);
            }
        }
        Self { pod, allow_up, tool_router }
    }

    #[tool(
        name = "status",
        description = "The running pod: its directory and ports, and each service's state, pid, readiness, restarts and last exit, its URLs and its last reload (the JSON of `omnidev status --json`). A tool error with code omnidev::control::not_running when no pod runs.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn status(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<PodStatus>, CallToolResult> {
        self.answer(&context, |pod, _| Ok(control::inspect(&running(pod)?)?)).await
    }

    #[tool(
        name = "logs",
        description = "The last lines of one service's log file (escape sequences shown, not obeyed), optionally only those written since the pod's last reload; at most `lines` lines and `max_bytes` bytes, the newest kept. Works on a stopped pod too (its files stay).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn logs(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<LogsParams>,
    ) -> Result<Json<LogsResult>, CallToolResult> {
        self.answer(&context, move |pod, _| {
            let lines = args.lines.unwrap_or(limits::LOG_LINES.0);
            let max_bytes = args.max_bytes.unwrap_or(limits::LOG_BYTES.0);
            let pod_dir = crate::session::pod_dir(pod)?;
            let (lines, truncated) = shown_lines(
                &pod_dir,
                &args.service,
                lines as usize,
                args.since_reload,
                max_bytes as usize,
            )?;
            Ok(LogsResult {
                service: args.service,
                since_reload: args.since_reload,
                lines,
                truncated,
            })
        })
        .await
    }

    #[tool(
        name = "wait",
        description = "Wait until the services (all when none named) are ready, have exited, or are healthy after the reload of the latest source change the pod has seen (one begun at most 2 s before this call, or after it). Ends at once when one fails (crashed, exited non-zero, probe timed out): `ok` is false and `failed` names it with its state and last log lines. A tool error with code omnidev::timeout when the time runs out.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn wait(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<WaitParams>,
    ) -> Result<Json<ActionResult>, CallToolResult> {
        self.answer(&context, move |pod, connection| {
            let default = match args.until {
                WaitFor::HealthyAfterReload => limits::WAIT_SECS.0,
                WaitFor::Ready | WaitFor::Exited => 300,
            };
            let secs = args.timeout_secs.unwrap_or(default);
            let asked = Ask::wait(args.until, args.services, Duration::from_secs(secs));
            acted(pod, &asked, connection)
        })
        .await
    }

    #[tool(
        name = "restart",
        description = "Restart one service (its dependents follow, unless `no_deps`), or without `service` the services with watch rules (every service when none has any), as a file change would, or with `all` every service; answered once they run again and are ready, or one failed (`ok` false, `failed` names it with its last lines).",
        annotations(destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn restart(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<RestartParams>,
    ) -> Result<Json<ActionResult>, CallToolResult> {
        self.answer(&context, move |pod, connection| {
            let secs = args.timeout_secs.unwrap_or(limits::RESTART_SECS.0);
            let what = control::RestartScope {
                service: args.service,
                all: args.all,
                no_deps: args.no_deps,
            };
            let asked = Ask::restart(what, Duration::from_secs(secs));
            acted(pod, &asked, connection)
        })
        .await
    }

    #[tool(
        name = "stop_service",
        description = "Stop one service of the running pod (answered once its processes are gone); the pod and the services that depend on it run on. `start_service` starts it again.",
        annotations(destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn stop_service(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<ServiceParams>,
    ) -> Result<Json<ActionResult>, CallToolResult> {
        self.answer(&context, move |pod, connection| {
            acted(pod, &Ask::stop(vec![args.service], STOP_TIMEOUT), connection)
        })
        .await
    }

    #[tool(
        name = "start_service",
        description = "Start one service of the running pod that was stopped or has ended (one that runs is left as it is); answered once it is ready, or failed (`ok` false, with its last lines).",
        annotations(destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn start_service(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<StartParams>,
    ) -> Result<Json<ActionResult>, CallToolResult> {
        self.answer(&context, move |pod, connection| {
            let secs = args.timeout_secs.unwrap_or(limits::RESTART_SECS.0);
            let asked = Ask::start(vec![args.service], Duration::from_secs(secs));
            acted(pod, &asked, connection)
        })
        .await
    }

    #[tool(
        name = "reload_profile",
        description = "Apply the pod's profile file (omnidev.toml) as it is now, as `omnidev reload-profile` does: services whose rendered spec changed restart (their dependents follow), new ones start, removed ones stop, ports keep their numbers; answered once those restarted and started are ready, or one failed (`ok` false, with its last lines). A profile that cannot be loaded is a tool error with code omnidev::control::invalid_profile naming file, line and column; the pod runs on with its profile.",
        annotations(destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn reload_profile(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<ReloadProfileParams>,
    ) -> Result<Json<ReloadProfileResult>, CallToolResult> {
        self.answer(&context, move |pod, connection| {
            let secs = args.timeout_secs.unwrap_or(limits::RESTART_SECS.0);
            let asked = Ask::reload_profile(Duration::from_secs(secs));
            let (pod_dir, mut response) = ask(pod, &asked, connection)?;
            let applied = response.applied.take().unwrap_or_default();
            let outcome = outcome(&pod_dir, response);
            Ok(ReloadProfileResult { applied, outcome })
        })
        .await
    }

    #[tool(
        name = "db_snapshot",
        description = "Keep a copy of a database's data in the pod (as `omnidev db snapshot`), e.g. before trying a migration: copied live, consistent while its services write (SQLite's backup, pg_basebackup, mariadb-backup, Redis's RDB transfer). `db_restore` puts it back.",
        annotations(destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn db_snapshot(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<SnapshotParams>,
    ) -> Result<Json<DataResult>, CallToolResult> {
        self.answer(&context, move |pod, _| {
            let which = which(pod, args.database);
            let message = crate::pod_data::snapshot(&which, args.label.as_deref())?;
            Ok(DataResult { message })
        })
        .await
    }

    #[tool(
        name = "db_restore",
        description = "Put a snapshot's data back in place of the database's (as `omnidev db restore`): the server is stopped, its data swapped, and it and the services that depend on it start again; SQLite is restored live. The data it replaces is lost unless snapshotted.",
        annotations(destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn db_restore(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<RestoreParams>,
    ) -> Result<Json<DataResult>, CallToolResult> {
        self.answer(&context, move |pod, _| {
            let which = which(pod, args.database);
            let message = crate::pod_data::restore(&which, &args.label)?;
            Ok(DataResult { message })
        })
        .await
    }

    #[tool(
        name = "db_snapshots",
        description = "The pod's database snapshots: database, label, engine, when, bytes.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn db_snapshots(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<SnapshotsResult>, CallToolResult> {
        self.answer(&context, move |pod, _| {
            let snapshots = crate::pod_data::list(pod)?
                .iter()
                .map(|s| SnapshotReport {
                    database: s.database.clone(),
                    label: s.label.clone(),
                    engine: s.engine.word().to_owned(),
                    taken_at: crate::pod_data::taken_at(s),
                    bytes: s.bytes,
                })
                .collect();
            Ok(SnapshotsResult { snapshots })
        })
        .await
    }

    #[tool(
        name = "db_clone",
        description = "Copy another checkout's pod's database in place of this pod's (as `omnidev db clone`; from the repository's main worktree by default): consistent while the source runs, never writing into it; this pod's server is stopped, its data swapped, and started again.",
        annotations(destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn db_clone(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<CloneParams>,
    ) -> Result<Json<DataResult>, CallToolResult> {
        self.answer(&context, move |pod, _| {
            let which = which(pod, args.database);
            let from = args.from.map(PathBuf::from);
            let message = crate::pod_data::clone(&which, from.as_deref())?;
            Ok(DataResult { message })
        })
        .await
    }

    #[tool(
        name = "events",
        description = "The pod's recent events (state changes, ready, crashed, reload with its changed files, notices; log lines with `logs`), the newest `limit` of them within `max_bytes`, optionally only those since the last reload or of some services. Each is a record of docs/events.md.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn events(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<EventsParams>,
    ) -> Result<Json<EventsResult>, CallToolResult> {
        self.answer(&context, move |pod, _| {
            let limit = args.limit.unwrap_or(limits::EVENTS.0) as usize;
            let max_bytes = args.max_bytes.unwrap_or(limits::EVENT_BYTES.0) as usize;
            let pod_dir = running(pod)?;
            // Kept records: finished lines only.
            let query = EventsQuery {
                services: args.services,
                logs: args.logs,
                since_reload: args.since_reload,
                ..EventsQuery::default()
            };
            let records = Ask::events(query).stream(&pod_dir)?;
            let mut newest = Newest::new(limit, max_bytes);
            let mut read = 0usize;
            for line in records {
                // A line over the socket's bound is skipped (and counted).
                let control::client::Line::Text(line) = line else {
                    newest.left_out = true;
                    continue;
                };
                read += line.len() + 1;
                if read > limits::EVENTS_READ_BYTES {
                    newest.left_out = true;
                    break;
                }
                newest.push(String::from_utf8_lossy(&line).into_owned());
            }
            let (lines, mut truncated) = newest.into_lines();
            // A line cut to fit is no record: left out.
            let events: Vec<serde_json::Value> =
                lines.iter().filter_map(|line| serde_json::from_str(line).ok()).collect();
            truncated |= events.len() < lines.len();
            Ok(EventsResult { events, truncated })
        })
        .await
    }

    #[tool(
        name = "up",
        description = "Start the pod of this checkout in the background (`omnidev up --detach`) and answer once every service is ready; a pod that already runs is answered at once. Offered only when the server was started with `omnidev mcp --allow-up`.",
        annotations(destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn up(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<UpParams>,
    ) -> Result<Json<ActionResult>, CallToolResult> {
        // Not routed without --allow-up: `call_tool` refuses it.
        self.answer(&context, move |pod, connection| {
            let secs = args.timeout_secs.unwrap_or(limits::UP_SECS.0);
            let started = crate::detach::up(pod, Duration::from_secs(secs), connection)?;
            Ok(outcome(started.pod.dir(), started.response))
        })
        .await
    }
}

/// Starts `pod` in the background as `omnidev up --detach` does (the same
/// code, in this process) and waits until every service is ready, at
/// most `secs`; what failed is answered as the other tools answer it.
#[tool_handler(router = self.tool_router)]
impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        let up = if self.allow_up {
            " `up` starts the pod in the background."
        } else {
            " Starting the pod is not offered (`omnidev mcp --allow-up` offers it)."
        };
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("omnidev", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "The omnidev dev pod of this checkout: its services run supervised, reload on \
                 source changes, and log to files. After editing code, call `wait` with \
                 until=healthy-after-reload: it fails naming a service that crashed, with its last \
                 lines; `logs` reads a service's log (since_reload for the lines since the last \
                 reload), `status` shows states, ports and URLs, `restart`, `stop_service`, \
                 `start_service` act on services, `events` lists what happened.{up}"
            ))
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // Not offered, so not routed: refused with the reason, not "unknown tool".
        if request.name == "up" && !self.allow_up {
            return Ok(refusal(&Error::UpNotAllowed.into()).into());
        }
        if let (Some(tool), Some(arguments)) =
            (self.tool_router.get(&request.name), request.arguments.as_mut())
            && let Err(message) = schema::check(&tool.input_schema, arguments)
        {
            return Ok(refusal(&Error::ToolArgument { message }.into()).into());
        }
        let context = ToolCallContext::new(self, request, context);
        self.tool_router.call(context).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines `push`ed into a [`Newest`] of `count` and `max_bytes`.
    fn newest(count: usize, max_bytes: usize, pushed: &[&str]) -> (Vec<String>, bool) {
        let mut newest = Newest::new(count, max_bytes);
        for line in pushed {
            newest.push((*line).to_owned());
        }
        newest.into_lines()
    }

    #[test]
    fn the_newest_lines_are_kept_within_both_bounds_as_they_are_read() {
        let lines = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        // By count.
        assert_eq!(newest(2, 100, &["a", "b", "c"]), (lines(&["b", "c"]), true));
        // By bytes, each line with its newline: "bb" and "cc" make 6.
        assert_eq!(newest(10, 6, &["a", "bb", "cc"]), (lines(&["bb", "cc"]), true));
        assert_eq!(newest(10, 100, &["a", "bb"]), (lines(&["a", "bb"]), false));
        assert_eq!(newest(10, 3, &[]), (Vec::new(), false));
        // The newest line longer than the bytes alone: its start, cut at a
        // character, and nothing older.
        assert_eq!(newest(10, 3, &["a", "ééé"]), (lines(&["é"]), true));
        // A long line then newer ones: the newer ones, no gap.
        assert_eq!(newest(10, 4, &["a", "toolong", "b"]), (lines(&["b"]), true));
        assert_eq!(newest(10, 4, &["a", "toolong", "b", "c"]), (lines(&["b", "c"]), true));
    }

    #[test]
    fn every_tool_has_both_schemas_and_up_is_routed_only_when_allowed() {
        let names = |tools: &Tools| {
            let mut names: Vec<String> = tools
                .tool_router
                .list_all()
                .into_iter()
                .inspect(|tool| {
                    assert!(tool.output_schema.is_some(), "{} has no output schema", tool.name);
                    assert_eq!(tool.input_schema.get("type"), Some(&"object".into()));
                })
                .map(|tool| tool.name.to_string())
                .collect();
            names.sort();
            names
        };
        let without = names(&Tools::new(PodArgs::default(), false));
        assert!(!without.contains(&"up".to_owned()), "{without:?}");
        let with = names(&Tools::new(PodArgs::default(), true));
        assert!(with.contains(&"up".to_owned()), "{with:?}");
    }
}

//! `omnidev mcp` driven by a real MCP client (the official Rust SDK's,
//! over the binary's stdin and stdout): a live pod of the bundled example
//! (its `omnigent` package run with python3), its status, logs, a restart,
//! waits for reloads of edits (a healthy one, a broken one naming the
//! server and its last lines), one service stopped and started, events;
//! `up` refused without `--allow-up` and starting the pod with it;
//! cancelled calls free the pod's waiting slots, and a cancelled `up`
//! leaves no child behind; a tool error with the
//! CLI's code when no pod runs; nothing but protocol messages on stdout.

#[path = "support/context.rs"]
mod common;

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{TestContext, api_and_web, service};
use omnidev_test_support::free_port;
use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::{Value, json};

/// How long any one tool call may take (generous: the machine is shared).
const CALL: Duration = Duration::from_secs(180);

/// Copies `from` (a directory) to `to`, recursively.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// A checkout holding the bundled example's `omnigent` package, and a
/// profile that runs its server and host with python3 (no uv needed): the
/// server reloads on `omnigent/**/*.py`, the host waits for it.
fn example(ctx: &TestContext) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/omnigent-example");
    copy_tree(&example.join("omnigent"), &ctx.repo.join("omnigent"));
    ctx.omnigent_shape();
    ctx.write(
        "omnidev.toml",
        &format!(
            r#"
[ports]
server = {base}

[urls]
server = {{ url = "http://localhost:{{port.server}}", service = "server" }}

[watch]
debounce-ms = 100

[services.server]
command = ["python3", "-u", "-m", "omnigent", "--log-to-stderr", "server", "--host", "127.0.0.1", "--port", "{{port.server}}", "--database-uri", "sqlite:///{{pod}}/data/chat.db", "--artifact-location", "{{pod}}/artifacts"]
ready = {{ http = "http://127.0.0.1:{{port.server}}/health", interval-ms = 100 }}
watch = ["omnigent/**/*.py"]
grace-ms = 3000

[services.host]
command = ["python3", "-u", "-m", "omnigent", "--log-to-stderr", "host", "--server", "http://127.0.0.1:{{port.server}}", "--heartbeat", "0.5"]
depends-on = {{ server = "ready" }}
ready = {{ log = "Connected as" }}
grace-ms = 3000
"#,
            // A port nothing listens on now: the pod probes up from it.
            base = free_port()
        ),
    );
}

/// A real MCP client of `omnidev mcp EXTRA…` run in the context's checkout.
/// A plain `Command` (as tokio's): the server runs while the client talks
/// to it over its stdin and stdout, which `assert_cmd` (run to the end,
/// then assert) does not fit.
async fn connect(ctx: &TestContext, extra: &[&str]) -> RunningService<RoleClient, ()> {
    let mut command = tokio::process::Command::from(ctx.command());
    command.arg("mcp").args(extra);
    let (transport, _stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn omnidev mcp");
    tokio::time::timeout(CALL, ().serve(transport))
        .await
        .expect("initialized in time")
        .expect("initialize")
}

async fn call(client: &RunningService<RoleClient, ()>, name: &str, args: Value) -> CallToolResult {
    let Value::Object(arguments) = args else {
        panic!("arguments must be an object: {args}");
    };
    let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
    tokio::time::timeout(CALL, client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{name} answered within {CALL:?}"))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The structured result of a call that must have succeeded (its text
/// content is the same JSON).
fn ok(name: &str, result: &CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "{name}: {result:?}");
    let structured = result
        .structured_content
        .clone()
        .unwrap_or_else(|| panic!("{name}: no structured content: {result:?}"));
    let text = result.content[0].as_text().expect("text content");
    assert_eq!(serde_json::from_str::<Value>(&text.text).expect("JSON text"), structured);
    structured
}

/// The error record of a call that must have failed.
fn refused(name: &str, result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(true), "{name}: {result:?}");
    assert!(result.structured_content.is_none(), "{name}: {result:?}");
    let text = result.content[0].as_text().expect("text content");
    let record: Value = serde_json::from_str(&text.text).expect("a JSON error record");
    for field in ["code", "message", "help", "exit"] {
        assert!(!record["error"][field].is_null(), "{name}: {record}");
    }
    record
}

fn lines(result: &Value) -> Vec<String> {
    result["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|l| l.as_str().expect("a line").to_owned())
        .collect()
}

/// Appends `text` to the checkout's `relative` file.
fn append(ctx: &TestContext, relative: &str, text: &str) {
    let mut file =
        std::fs::OpenOptions::new().append(true).open(ctx.repo.join(relative)).expect("open");
    file.write_all(text.as_bytes()).expect("append");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_drives_a_live_pod_of_the_example() {
    let ctx = TestContext::new();
    example(&ctx);
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let client = connect(&ctx, &[]).await;

    tools_with_schemas(&client).await;
    let server_pid = status_and_logs(&client).await;
    // A restart: a new server, ready.
    let restarted = ok("restart", &call(&client, "restart", json!({"service": "server"})).await);
    assert_eq!(restarted["ok"], true, "{restarted}");
    let new_pid = service(&restarted["status"], "server")["pid"].as_u64().expect("pid");
    assert_ne!(new_pid, server_pid, "{restarted}");

    reloads_of_edits(&ctx, &client).await;
    services_events_and_errors(&client).await;
    client.cancel().await.expect("close");
    ctx.run_ok(&["stop"]);
}

/// `reload_profile` applies an edited profile (only the changed service
/// restarts, the other keeps its pid) and refuses a broken one naming its
/// line, the pod running on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_profile_applies_an_edit_and_refuses_a_broken_one() {
    let ctx = TestContext::new();
    let file = ctx.write("omnidev.toml", &api_and_web("v1", ""));
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let client = connect(&ctx, &[]).await;
    let before = ok("status", &call(&client, "status", json!({})).await);
    let web = service(&before, "web")["pid"].as_u64().expect("web's pid");
    let api = service(&before, "api")["pid"].as_u64().expect("api's pid");

    std::fs::write(&file, api_and_web("v2", "")).expect("edit");
    let applied =
        ok("reload_profile", &call(&client, "reload_profile", json!({"timeout_secs": 60})).await);
    assert_eq!(applied["ok"], true, "{applied}");
    assert_eq!(applied["applied"]["restarted"], json!(["api"]), "{applied}");
    assert_eq!(applied["applied"]["started"], json!([]), "{applied}");
    let after = &applied["status"];
    assert_eq!(service(after, "web")["pid"].as_u64(), Some(web), "{after}");
    let new_api = service(after, "api")["pid"].as_u64().expect("api's pid");
    assert_ne!(new_api, api, "{after}");

    std::fs::write(&file, "[services.api]\ncommand = 5\n").expect("break");
    let record = refused("reload_profile", &call(&client, "reload_profile", json!({})).await);
    assert_eq!(record["error"]["code"], "omnidev::control::invalid_profile", "{record}");
    let message = record["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("omnidev.toml:2:"), "{record}");
    let still = ok("status", &call(&client, "status", json!({})).await);
    assert_eq!(service(&still, "api")["pid"].as_u64(), Some(new_api), "{still}");
    assert_eq!(service(&still, "web")["pid"].as_u64(), Some(web), "{still}");

    let bad = refused(
        "reload_profile",
        &call(&client, "reload_profile", json!({"timeout_secs": 0})).await,
    );
    assert!(bad["error"]["message"].as_str().is_some_and(|m| m.contains("timeout_secs")), "{bad}");
    client.cancel().await.expect("close");
}

/// The server's identity, and every tool with both schemas (no `up`
/// without `--allow-up`).
async fn tools_with_schemas(client: &RunningService<RoleClient, ()>) {
    let info = client.peer_info().expect("the server's initialize answer");
    let server = info.server_info.as_ref().expect("server info");
    assert_eq!(server.name, "omnidev");
    assert!(info.capabilities.tools.is_some(), "{info:?}");

    let tools = client.list_all_tools().await.expect("tools/list");
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "db_clone",
            "db_restore",
            "db_snapshot",
            "db_snapshots",
            "events",
            "logs",
            "reload_profile",
            "restart",
            "start_service",
            "status",
            "stop_service",
            "wait"
        ]
    );
    for tool in &tools {
        assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
        let output = tool.output_schema.as_ref().expect("an output schema");
        assert_eq!(output["type"], "object", "{}", tool.name);
    }
    let logs_tool = tools.iter().find(|t| t.name == "logs").expect("logs");
    assert_eq!(logs_tool.input_schema["required"], json!(["service"]));
}

/// Status (both services, pids, the server's URL and port) and bounded
/// logs; the server's pid.
async fn status_and_logs(client: &RunningService<RoleClient, ()>) -> u64 {
    let status = ok("status", &call(client, "status", json!({})).await);
    assert_eq!(status["running"], true, "{status}");
    let server_pid = service(&status, "server")["pid"].as_u64().expect("pid");
    assert_eq!(service(&status, "server")["state"], "ready", "{status}");
    assert!(service(&status, "host")["pid"].is_u64(), "{status}");
    let port = status["ports"]["server"].as_u64().expect("port");
    assert_eq!(status["urls"][0]["url"], format!("http://localhost:{port}"), "{status}");

    // The server's log, bounded.
    let logs = ok("logs", &call(client, "logs", json!({"service": "server", "lines": 50})).await);
    assert!(lines(&logs).iter().any(|l| l.contains("listening on")), "{logs}");
    let small = ok(
        "logs",
        &call(client, "logs", json!({"service": "host", "lines": 5000, "max_bytes": 40})).await,
    );
    assert!(lines(&small).concat().len() <= 40, "{small}");
    assert_eq!(small["truncated"], true, "{small}");

    server_pid
}

/// An edit and the wait for its reload; a broken edit, whose wait ends at
/// the server's crash naming it with its last lines; the fix.
async fn reloads_of_edits(ctx: &TestContext, client: &RunningService<RoleClient, ()>) {
    // An edit, and the wait for its reload.
    append(ctx, "omnigent/log.py", "\n# touched by the MCP test\n");
    let healthy = ok("wait", &call(client, "wait", json!({"until": "healthy-after-reload"})).await);
    assert_eq!(healthy["ok"], true, "{healthy}");
    assert_eq!(healthy["status"]["last-reload"]["files"], json!(["omnigent/log.py"]), "{healthy}");
    assert_eq!(healthy["status"]["last-reload"]["files-total"], 1, "{healthy}");
    let since =
        ok("logs", &call(client, "logs", json!({"service": "server", "since_reload": true})).await);
    let since = lines(&since);
    assert_eq!(
        since.iter().filter(|l| l.contains("listening on")).count(),
        1,
        "one start since the reload: {since:?}"
    );

    // A broken edit: the wait ends at the server's crash, naming it with
    // its last lines; the fix makes it healthy again.
    let server_py = ctx.repo.join("omnigent/server.py");
    let saved = std::fs::read(&server_py).expect("read");
    append(ctx, "omnigent/server.py", "\ndef broken(:\n");
    let broken = ok("wait", &call(client, "wait", json!({"until": "healthy-after-reload"})).await);
    assert_eq!(broken["ok"], false, "{broken}");
    assert_eq!(broken["failed"][0]["name"], "server", "{broken}");
    let last: Vec<String> = lines(&json!({"lines": broken["failed"][0]["last_lines"]}));
    assert!(last.iter().any(|l| l.contains("SyntaxError")), "the crash's last lines: {last:?}");
    std::fs::write(&server_py, saved).expect("restore");
    let fixed = ok("wait", &call(client, "wait", json!({"until": "healthy-after-reload"})).await);
    assert_eq!(fixed["ok"], true, "{fixed}");
}

/// One service stopped and started again, the events naming the reloads,
/// errors with the CLI's codes.
async fn services_events_and_errors(client: &RunningService<RoleClient, ()>) {
    // One service stopped, then started again.
    let stopped =
        ok("stop_service", &call(client, "stop_service", json!({"service": "host"})).await);
    assert_eq!(service(&stopped["status"], "host")["state"], "stopped");
    // A stopped service is never ready.
    let waited = ok(
        "wait",
        &call(client, "wait", json!({"until": "ready", "services": ["host"], "timeout_secs": 60}))
            .await,
    );
    assert_eq!(waited["ok"], false, "{waited}");
    assert_eq!(waited["failed"][0]["name"], "host", "{waited}");
    assert_eq!(waited["failed"][0]["detail"], "stopped", "{waited}");
    let started =
        ok("start_service", &call(client, "start_service", json!({"service": "host"})).await);
    assert_eq!(started["ok"], true, "{started}");
    assert_eq!(service(&started["status"], "host")["ready"], true, "{started}");

    // The recent events name the reloads.
    let events = ok("events", &call(client, "events", json!({"limit": 1000})).await);
    let reloads: Vec<&Value> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "reload")
        .collect();
    assert!(reloads.iter().any(|e| e["files"] == json!(["omnigent/log.py"])), "{events}");

    // Errors carry the CLI's codes.
    let unknown = refused("restart", &call(client, "restart", json!({"service": "nosuch"})).await);
    assert_eq!(unknown["error"]["code"], "omnidev::unknown_service");
    assert_eq!(unknown["error"]["exit"], 2);
    let range =
        refused("logs", &call(client, "logs", json!({"service": "server", "lines": 0})).await);
    assert_eq!(range["error"]["code"], "omnidev::mcp::argument");
}

/// MCP's `logs` and `events` of a service with replicas give every
/// replica's lines and records, each line prefixed with its replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_and_events_of_a_service_with_replicas_cover_every_replica() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        "[services.web]\ncommand = [\"sh\", \"-c\", \"echo copy; exec sleep 300\"]\n\
         replicas = 2\ngrace-ms = 1000\n",
    );
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let client = connect(&ctx, &[]).await;
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen = lines(&ok("logs", &call(&client, "logs", json!({"service": "web"})).await));
        if seen.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen, ["web.1 | copy", "web.2 | copy"]);
    let events = ok("events", &call(&client, "events", json!({"services": ["web"]})).await);
    for replica in ["web.1", "web.2"] {
        assert!(
            events.to_string().contains(&format!("\"service\":\"{replica}\"")),
            "{replica}: {events}"
        );
    }
    client.cancel().await.expect("close");
}

/// An agent's way back from a bad migration: `db_snapshot`, the
/// migration, `db_restore`; `db_snapshots` lists what there is, and an
/// unknown label is a tool error with the CLI's code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_snapshots_before_a_migration_and_restores_after_it() {
    let ctx = TestContext::new();
    let _stop = ctx.stop_on_drop();
    ctx.sqlite_pod();
    ctx.sqlite("create table t(x); insert into t values (1), (2), (3);");
    let client = connect(&ctx, &[]).await;
    let taken = ok("db_snapshot", &call(&client, "db_snapshot", json!({"label": "before"})).await);
    assert!(
        taken["message"].as_str().is_some_and(|m| m.starts_with("snapshot lite/before: ")),
        "{taken}"
    );
    ctx.sqlite("drop table t;");
    let listed = ok("db_snapshots", &call(&client, "db_snapshots", json!({})).await);
    assert_eq!(listed["snapshots"][0]["label"], "before", "{listed}");
    assert_eq!(listed["snapshots"][0]["engine"], "sqlite", "{listed}");
    ok("db_restore", &call(&client, "db_restore", json!({"label": "before"})).await);
    assert_eq!(ctx.sqlite("select sum(x) from t;"), "6");
    let record =
        refused("db_restore", &call(&client, "db_restore", json!({"label": "nope"})).await);
    assert_eq!(record["error"]["code"], "omnidev::pod::database_data", "{record}");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_only_with_allow_up_and_no_pod_is_a_not_running_error() {
    let ctx = TestContext::new();
    example(&ctx);
    let _stop = ctx.stop_on_drop();

    let client = connect(&ctx, &[]).await;
    let status = refused("status", &call(&client, "status", json!({})).await);
    assert_eq!(status["error"]["code"], "omnidev::control::not_running");
    assert_eq!(status["error"]["exit"], 3);
    let up = refused("up", &call(&client, "up", json!({})).await);
    assert_eq!(up["error"]["code"], "omnidev::mcp::up_not_allowed");
    assert!(up["error"]["help"].as_str().is_some_and(|h| h.contains("--allow-up")), "{up}");
    client.cancel().await.expect("close");
    // Nothing was started: no pod (exit 3).
    ctx.assert(&["status"]).code(3);

    // A client of the SDK's current revision (no `initialize`: it
    // discovers the server and sends its version with each request).
    let mut command = tokio::process::Command::from(ctx.command());
    command.arg("mcp");
    let (transport, _stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn omnidev mcp");
    let lifecycle =
        ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    let current = tokio::time::timeout(CALL, ().serve_with_lifecycle(transport, lifecycle))
        .await
        .expect("discovered in time")
        .expect("discover");
    let status = refused("status", &call(&current, "status", json!({})).await);
    assert_eq!(status["error"]["code"], "omnidev::control::not_running");
    current.cancel().await.expect("close");

    let client = connect(&ctx, &["--allow-up"]).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "up"), "{tools:?}");
    let started = ok("up", &call(&client, "up", json!({})).await);
    assert_eq!(started["ok"], true, "{started}");
    assert_eq!(started["status"]["running"], true, "{started}");
    assert_eq!(service(&started["status"], "host")["ready"], true);
    // Again: the running pod, at once.
    let again = ok("up", &call(&client, "up", json!({})).await);
    assert_eq!(again["status"]["pid"], started["status"]["pid"]);

    // Calls the client gives up on (the SDK sends notifications/cancelled
    // when the call's future is dropped): more than the pod answers at
    // once (32 waiting requests). Each one's connection is hung up, so the
    // pod stops waiting for it; kept, the later ones and the CLI's wait
    // below would be refused as busy.
    for _ in 0..40 {
        let params = CallToolRequestParams::new("wait").with_arguments(
            json!({"until": "exited", "timeout_secs": 900}).as_object().expect("object").clone(),
        );
        let abandoned = tokio::time::timeout(Duration::from_millis(200), client.call_tool(params));
        if let Ok(answer) = abandoned.await {
            panic!("the services never exit, yet the wait was answered (busy?): {answer:?}");
        }
    }
    ctx.assert(&["wait", "--ready", "--timeout", "60"]).success();
    client.cancel().await.expect("close");
    ctx.run_ok(&["stop"]);
}

/// Two agents, each with its own `omnidev mcp --allow-up`, call `up` at
/// the same moment on a checkout with no pod yet: one pod starts and both
/// answer ok with its status, once it is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_calling_up_at_once_both_answer_ok() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        "[services.web]\ncommand = [\"sh\", \"-c\", \"sleep 0.3; echo up; exec sleep 300\"]\n\
         ready = { log = \"up\" }\ngrace-ms = 1000\n",
    );
    let _stop = ctx.stop_on_drop();
    let (first, second) =
        tokio::join!(connect(&ctx, &["--allow-up"]), connect(&ctx, &["--allow-up"]));
    let (a, b) = tokio::join!(call(&first, "up", json!({})), call(&second, "up", json!({})));
    let (a, b) = (ok("up", &a), ok("up", &b));
    for answer in [&a, &b] {
        assert_eq!(answer["ok"], true, "{answer}");
        assert_eq!(service(&answer["status"], "web")["ready"], true, "{answer}");
    }
    assert_eq!(a["status"]["pid"], b["status"]["pid"], "one pod: {a} {b}");
    let status = ctx.json(&["status", "--json"]);
    assert_eq!(status["pid"], a["status"]["pid"], "{status}");
    first.cancel().await.expect("close");
    second.cancel().await.expect("close");
}

/// `up` starts the pod in the server's own process (no `omnidev up
/// --detach` between them: the pod's process is the server's only child);
/// a cancelled `up` leaves the pod running, as after Ctrl-C of `omnidev up
/// --detach`, and the server reaps the pod's process once it stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_up_leaves_the_pod_running_and_its_process_is_reaped() {
    let ctx = TestContext::new();
    ctx.omnigent_shape();
    ctx.write(
        "omnidev.toml",
        &format!(
            r#"
[services.never-ready]
command = ["sleep", "300"]
ready = {{ tcp = "127.0.0.1:{closed}", interval-ms = 100, timeout-ms = 3600000 }}
grace-ms = 1000
"#,
            // Nothing listens there: the service is never ready.
            closed = free_port()
        ),
    );
    let _stop = ctx.stop_on_drop();
    let mut command = tokio::process::Command::from(ctx.command());
    command.arg("mcp").arg("--allow-up");
    let (transport, _stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn omnidev mcp");
    let server = transport.id().expect("the server's pid");
    let client = tokio::time::timeout(CALL, ().serve(transport))
        .await
        .expect("initialized in time")
        .expect("initialize");
    let peer = client.peer().clone();
    let up = tokio::spawn(async move {
        let params = CallToolRequestParams::new("up")
            .with_arguments(json!({"timeout_secs": 1800}).as_object().expect("object").clone());
        peer.call_tool(params).await
    });
    // The pod runs, its service not ready: `up` waits for it.
    common::wait_for("the pod to run", CALL, || ctx.run(&["status"]).status.code() == Some(0));
    assert!(!up.is_finished(), "up answered before its service was ready");
    let status = ctx.json(&["status", "--json"]);
    let pod = u32::try_from(status["pid"].as_u64().expect("the pod's pid")).expect("a pid");
    assert_eq!(
        omnidev_core::platform::children(server),
        [pod],
        "the pod's process is the server's only child"
    );
    // Dropped by the client: the SDK sends notifications/cancelled.
    up.abort();
    ctx.assert(&["status"]).success();
    ctx.run_ok(&["stop"]);
    common::wait_for("the stopped pod's process to be reaped", CALL, || {
        omnidev_core::platform::children(server).is_empty()
    });
    client.cancel().await.expect("close");
}

/// `omnidev mcp` for `ctx`'s checkout, its stdin and stdout piped for a
/// raw JSON-RPC session.
fn raw_server(ctx: &TestContext, stderr: Stdio) -> std::process::Child {
    ctx.command()
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn")
}

/// What a raw session sends first: `initialize` (id 1), `initialized`.
fn handshake() -> [Value; 2] {
    [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]
}

#[test]
fn stdout_carries_protocol_messages_only() {
    // A raw session: every line the server writes is a JSON-RPC message,
    // answers to each request included, even for a tool that fails.
    let ctx = TestContext::new();
    example(&ctx);
    let mut child = raw_server(&ctx, Stdio::piped());
    let mut requests = handshake().to_vec();
    requests.extend([
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "logs", "arguments": {"service": "server"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "status", "arguments": {}}}),
    ]);
    let mut stdin = child.stdin.take().expect("stdin");
    for request in &requests {
        writeln!(stdin, "{request}").expect("send");
    }
    let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut answered = Vec::new();
        for line in stdout.lines() {
            let line = line.expect("read");
            let message: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            assert_eq!(message["jsonrpc"], "2.0", "{line}");
            if let Some(id) = message["id"].as_u64() {
                answered.push(id);
            }
            if answered.len() == 4 {
                break;
            }
        }
        let _ = tx.send(answered);
    });
    let Ok(mut answered) = rx.recv_timeout(CALL) else {
        let _ = child.kill();
        panic!("no answer to every request within {CALL:?}");
    };
    drop(stdin);
    // The client closed stdin: the server ends, exit 0.
    let status = child.wait().expect("wait");
    answered.sort_unstable();
    assert_eq!(answered, [1, 2, 3, 4]);
    assert!(status.success(), "{status:?}");
}

#[test]
fn heavy_calls_take_turns_and_a_cancelled_one_gives_its_turn_back() {
    // `logs` and `events` are answered at most two at a time: twelve sent
    // at once, two of them cancelled at once, are all answered (but those
    // the SDK dropped for their cancel), and a `status` sent last too.
    let ctx = TestContext::new();
    example(&ctx);
    let mut child = raw_server(&ctx, Stdio::null());
    let mut stdin = child.stdin.take().expect("stdin");
    let mut requests = handshake().to_vec();
    for id in 10..22 {
        let call = if id % 2 == 0 {
            json!({"name": "events", "arguments": {"limit": 1000, "logs": true}})
        } else {
            json!({"name": "logs", "arguments": {"service": "server", "lines": 5000}})
        };
        requests.push(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": call}));
        if id < 12 {
            requests.push(json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": id, "reason": "test"}}));
        }
    }
    requests.push(json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
        "params": {"name": "status", "arguments": {}}}));
    for request in &requests {
        writeln!(stdin, "{request}").expect("send");
    }
    let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let message: Value = serde_json::from_str(&line.expect("read")).expect("JSON");
            if let Some(id) = message["id"].as_u64() {
                let _ = tx.send(id);
            }
        }
    });
    let mut answered = Vec::new();
    let deadline = std::time::Instant::now() + CALL;
    while !(12..22).chain([1, 99]).all(|id| answered.contains(&id)) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok(id) = rx.recv_timeout(left) else {
            let _ = child.kill();
            panic!("not every call was answered within {CALL:?}: {answered:?}");
        };
        answered.push(id);
    }
    drop(stdin);
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status:?}");
}

#[test]
fn events_carry_no_raw_control_a_service_printed() {
    // ESC, DEL, a C1 control (U+009B) and a bidi override (U+202E) from a
    // service's output reach the JSON-RPC line, and the CLI's JSON, only
    // as `\u` escapes.
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        "[services.noisy]\ncommand = [\"sh\", \"-c\", 'printf \"evil \\033[31m \\177 \\302\\233 \\342\\200\\256 end\\n\"; exec sleep 1000']\ngrace-ms = 1000\n",
    );
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    common::wait_for("the hostile line", CALL, || ctx.run_ok(&["logs", "noisy"]).contains("end"));
    let mut child = raw_server(&ctx, Stdio::null());
    let mut stdin = child.stdin.take().expect("stdin");
    let mut requests = handshake().to_vec();
    requests.extend([
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "events", "arguments": {"logs": true, "limit": 1000}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "logs", "arguments": {"service": "noisy"}}}),
    ]);
    for request in requests {
        writeln!(stdin, "{request}").expect("send");
    }
    let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut answers = Vec::new();
        for line in stdout.split(b'\n') {
            let line = String::from_utf8(line.expect("read")).expect("UTF-8");
            let message: Value = serde_json::from_str(&line).expect("JSON");
            if message["id"] == 2 || message["id"] == 3 {
                answers.push((line, message));
            }
            if answers.len() == 2 {
                let _ = tx.send(answers);
                return;
            }
        }
    });
    let Ok(mut answers) = rx.recv_timeout(CALL) else {
        let _ = child.kill();
        panic!("no answer to events and logs within {CALL:?}");
    };
    drop(stdin);
    let _ = child.wait();
    answers.sort_by_key(|(_, message)| message["id"].as_u64());
    let [(events_line, events), (logs_line, logs)] = &answers[..] else {
        unreachable!("two answers");
    };
    // The structured value is the line the service printed, decoded.
    let logged = events["result"]["structuredContent"]["events"]
        .as_array()
        .expect("events")
        .iter()
        .any(|e| e["line"] == "evil \u{1b}[31m \u{7f} \u{9b} \u{202e} end");
    assert!(logged, "{events_line}");
    let raw = ['\u{1b}', '\u{7f}', '\u{9b}', '\u{202e}'];
    for (line, message) in &answers {
        // On the wire: only escapes.
        for c in raw {
            assert!(!line.contains(c), "{c:?} raw in {line:?}");
        }
        // The text a client prints, decoded from the message: only escapes.
        let text = message["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text content: {line}"));
        assert!(text.contains("end"), "{text}");
        for c in raw {
            assert!(!text.contains(c), "{c:?} raw in the text {text:?}");
        }
    }
    // `logs` shows the controls visibly in its structured lines too.
    let shown = lines(&logs["result"]["structuredContent"]);
    let line = shown
        .iter()
        .find(|l| l.contains("evil"))
        .unwrap_or_else(|| panic!("no hostile line: {logs_line}"));
    for c in raw {
        assert!(!line.contains(c), "{c:?} raw in the log line {line:?}");
    }
    // The CLI's JSON: the same value, the same escapes.
    for args in [&["events", "--json", "--logs"][..], &["logs", "noisy", "--json"]] {
        let out = ctx.run_ok(args);
        assert!(out.contains("end"), "{args:?}: {out}");
        for c in raw {
            assert!(!out.contains(c), "{args:?}: {c:?} raw in {out:?}");
        }
    }
}

/// Every tool's schemas, as `tools/list` gives them, are plain JSON Schema
/// 2020-12 that a strict validator (formats asserted, an unknown one
/// refused) accepts; optional arguments are optional by their absence from
/// `required`, never by a `null` type. Arguments of the wrong type are
/// refused naming the argument, what it got and its range; a number given
/// as text is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_schemas_are_plain_json_schema_and_arguments_are_checked() {
    let ctx = TestContext::new();
    example(&ctx);
    let client = connect(&ctx, &["--allow-up"]).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    assert_eq!(tools.len(), 13, "{tools:?}");
    let strict = |schema: &Value| {
        jsonschema::meta::validate(schema).unwrap_or_else(|e| panic!("{e}: {schema}"));
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .should_ignore_unknown_formats(false)
            .build(schema)
            .unwrap_or_else(|e| panic!("{e}: {schema}"))
    };
    for tool in &tools {
        let input = Value::Object((*tool.input_schema).clone());
        let text = input.to_string();
        assert!(!text.contains("\"null\""), "{}: {text}", tool.name);
        let validator = strict(&input);
        if let Some(output) = &tool.output_schema {
            strict(&Value::Object((**output).clone()));
        }
        if tool.name == "logs" {
            assert!(validator.is_valid(&json!({"service": "server", "lines": 3})));
            for wrong in [json!({"service": "server", "lines": 0}), json!({"lines": 3})] {
                assert!(!validator.is_valid(&wrong), "{wrong}");
            }
            assert_eq!(
                input["properties"]["lines"],
                json!({"type": "integer", "minimum": 1, "maximum": 5000, "default": 100,
                    "description": "The last this many lines."}),
            );
        }
    }
    // `"3"` is taken as 3: the call gets as far as the pod (none ran).
    let text =
        refused("logs", &call(&client, "logs", json!({"service": "server", "lines": "3"})).await);
    assert_ne!(text["error"]["code"], "omnidev::mcp::argument", "{text}");
    for (arguments, said) in [
        (
            json!({"service": "server", "lines": 4_294_967_296_u64}),
            "`lines` is 4294967296; it must be an integer between 1 and 5000",
        ),
        (
            json!({"service": "server", "lines": "many"}),
            "`lines` is \"many\"; it must be an integer between 1 and 5000",
        ),
        (
            json!({"until": "ready", "services": "db"}),
            "`services` is \"db\"; it must be an array of at most 64 strings",
        ),
    ] {
        let name = if arguments["until"].is_null() { "logs" } else { "wait" };
        let record = refused(name, &call(&client, name, arguments).await);
        assert_eq!(record["error"]["code"], "omnidev::mcp::argument", "{record}");
        assert_eq!(record["error"]["message"], said, "{record}");
    }
    client.cancel().await.expect("close");
}

/// Lines that are no message are answered as JSON-RPC says, each at once
/// (the requests after them are answered too): not JSON -32700, `params`
/// that do not fit -32602, a 32 MB request -32600 with its id, JSON that
/// is no message -32600, an unknown method -32601.
#[test]
fn bad_lines_get_json_rpc_errors_and_block_nothing() {
    let ctx = TestContext::new();
    let mut child = raw_server(&ctx, Stdio::null());
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        let call = |id: u32, params: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
        };
        let huge = format!(
            r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"logs","arguments":{{"service":"{}"}}}}}}"#,
            "x".repeat(32 << 20)
        );
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
            "this is not JSON".to_owned(),
            call(2, r#"{"name":"status","arguments":"db"}"#),
            call(3, r#""status""#),
            r#"{"jsonrpc":"2.0","id":4,"method":"no/such"}"#.to_owned(),
            huge,
            "[1, 2]".to_owned(),
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/list"}"#.to_owned(),
        ];
        for line in lines {
            writeln!(stdin, "{line}").expect("send");
        }
        stdin
    });
    let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let message: Value = serde_json::from_str(&line.expect("read")).expect("JSON");
            if tx.send(message).is_err() {
                break;
            }
        }
    });
    let mut answers = Vec::new();
    while answers.len() < 8 {
        let Ok(message) = rx.recv_timeout(CALL) else {
            let _ = child.kill();
            panic!("only these within {CALL:?}: {answers:#?}");
        };
        answers.push(message);
    }
    let code = |id: Value| -> Vec<Value> {
        answers.iter().filter(|a| a["id"] == id).map(|a| a["error"]["code"].clone()).collect()
    };
    assert_eq!(code(json!(1)), [Value::Null], "{answers:#?}");
    assert_eq!(code(json!(6)), [Value::Null], "{answers:#?}");
    assert_eq!(code(Value::Null), [json!(-32700), json!(-32600)], "{answers:#?}");
    assert_eq!(code(json!(2)), [json!(-32602)], "{answers:#?}");
    assert_eq!(code(json!(3)), [json!(-32602)], "{answers:#?}");
    assert_eq!(code(json!(4)), [json!(-32601)], "{answers:#?}");
    assert_eq!(code(json!(5)), [json!(-32600)], "{answers:#?}");
    let long = answers.iter().find(|a| a["id"] == 5).expect("answered");
    let said = long["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("33554") && said.contains("1048576"), "{said}");
    drop(writer.join().expect("written"));
    assert!(child.wait().expect("wait").success());
}

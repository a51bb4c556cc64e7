//! Driving a detached pod from outside: `up --detach`, `status`, `logs`,
//! `restart`, `stop`, `ls`, `clean`, the socket's mode and stale sockets.
//! Real processes and sockets; stub services (sh, python3).

#[path = "support/context.rs"]
mod common;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::mpsc;
use std::time::Duration;

use common::{Signal, TestContext, alive, service, service_names, signal, wait_for};
use omnidev_test_support::{free_port, free_ports};
use predicates::prelude::*;
use predicates::str::contains;
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(30);

/// A server with a readiness probe that logs 20 numbered lines first, and a
/// host that depends on it and ticks.
fn profile(base: u16) -> String {
    format!(
        r#"
[ports]
server = {base}

[urls]
server = "http://localhost:{{port.server}}"

[services.server]
command = ["python3", "-u", "-c", "import http.server, sys\nclass Quiet(http.server.SimpleHTTPRequestHandler):\n    log_message = lambda *args: None\nfor i in range(1, 21): print('line', i)\nhttp.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), Quiet).serve_forever()", "{{port.server}}"]
ready = {{ http = "http://127.0.0.1:{{port.server}}/", interval-ms = 100 }}
grace-ms = 2000

[services.host]
command = ["sh", "-c", "echo host up; i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.1; done"]
depends-on = {{ server = "ready" }}
grace-ms = 2000
"#
    )
}

/// Runs omnidev, which must exit `code`; its output.
fn run_code(ctx: &TestContext, args: &[&str], code: i32) -> Output {
    ctx.assert(args).code(code).get_output().clone()
}

/// The JSON on stdout of a command that must exit `code`.
fn json_code(ctx: &TestContext, args: &[&str], code: i32) -> Value {
    let output = run_code(ctx, args, code);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!("{args:?}: {e}\n{}", ctx.render(&output));
    })
}

/// The exit code of `status` when the pod does not run (docs/control.md).
const NOT_RUNNING: i32 = 3;

fn pid_of(status: &Value, name: &str) -> i32 {
    let pid = service(status, name)["pid"]
        .as_i64()
        .unwrap_or_else(|| panic!("{name} has no pid: {status}"));
    i32::try_from(pid).expect("pid")
}

fn pod_dir(status: &Value) -> PathBuf {
    PathBuf::from(status["pod-dir"].as_str().expect("pod-dir"))
}

/// Runs omnidev in the background and fails the test when it does not end
/// within `deadline` (a hang), instead of blocking forever. Spawned, not
/// through `assert_cmd`: the failure to report is the hang itself, with
/// the command that hung, not an exit code of a process killed at the
/// deadline.
fn run_within(ctx: &TestContext, args: &[&str], deadline: Duration) -> Output {
    finish_within(ctx.spawn(args), args, deadline)
}

/// Waits for `child` (omnidev `args`, spawned with piped output) and fails
/// the test when it does not end within `deadline`.
fn finish_within(child: std::process::Child, args: &[&str], deadline: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    if let Ok(output) = rx.recv_timeout(deadline) {
        output.expect("wait")
    } else {
        omnidev_test_support::process::try_signal(pid, Signal::SIGKILL);
        panic!("omnidev {args:?} did not finish within {deadline:?}");
    }
}

#[test]
fn detach_status_logs_restart_stop() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(free_port()));
    let _pods = ctx.stop_on_drop();

    let out = ctx.run_ok(&["up", "--detach"]);
    assert!(out.contains("pod "), "{out}");
    assert!(out.contains("server http://localhost:"), "{out}");

    let status = ctx.json(&["status", "--json"]);
    assert_eq!(status["schema"], 3);
    assert_eq!(status["running"], true, "{status}");
    assert_eq!(status["control"], true, "{status}");
    // Services in start order (`host` waits for `server`); with no watch
    // rule, `restart` alone restarts every one.
    let names = service_names(&status);
    assert_eq!(names, ["server", "host"], "{status}");
    assert_eq!(status["watched"], serde_json::json!(["server", "host"]), "{status}");
    assert_eq!(service(&status, "server")["state"], "ready", "{status}");
    let server = pid_of(&status, "server");
    let host = pid_of(&status, "host");
    assert!(alive(server) && alive(host));
    assert!(status["ports"]["server"].as_u64().is_some(), "{status}");
    // The mechanism in force is shown (whichever this machine allows).
    let containment = status["containment"].as_str().unwrap_or_default();
    assert!(
        containment.starts_with("cgroup v2 (") || containment.starts_with("process groups"),
        "{status}"
    );
    let text = ctx.run_ok(&["status"]);
    assert!(text.contains("running (pid"), "{text}");
    assert!(text.contains(&format!("contain {containment}")), "{text}");

    // The last five lines of the server's log.
    let last = ctx.run_ok(&["logs", "server", "-n", "5"]);
    assert_eq!(
        last.lines().collect::<Vec<_>>(),
        ["line 16", "line 17", "line 18", "line 19", "line 20"]
    );
    // All services, prefixed.
    let all = ctx.run_ok(&["logs", "-n", "1"]);
    assert!(all.contains("server | line 20"), "{all}");
    assert!(all.contains("host   | tick"), "{all}");

    // The pod's kept lines, as `log` records of the event stream.
    let records = ctx.run_ok(&["events", "--logs", "--json", "server"]);
    let lines: Vec<Value> = records
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record a line"))
        .filter(|r: &Value| r["kind"] == "log")
        .collect();
    assert!(lines.iter().any(|r| r["service"] == "server" && r["line"] == "line 20"), "{records}");
    assert!(lines.iter().all(|r| r["service"] == "server"), "{records}");

    // Following prints lines written after it started.
    let mut follow = ctx.spawn(&["logs", "host", "-f", "-n", "1"]);
    let mut lines = BufReader::new(follow.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("read");
    let first_tick: u32 = first
        .strip_prefix("tick ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{first}"));
    let later = lines.nth(2).expect("more lines").expect("read");
    assert_eq!(later, format!("tick {}", first_tick + 3));
    let _ = follow.kill();
    let _ = follow.wait();

    // Restarting the server gives it a new pid; the host follows it.
    let restarted = ctx.run_ok(&["restart", "server", "--json"]);
    let restarted: Value = serde_json::from_str(&restarted).expect("json");
    let new_server = pid_of(&restarted, "server");
    assert_ne!(new_server, server);
    assert!(!alive(server), "old server {server} still runs");
    wait_for("the host to restart", DEADLINE, || {
        let status = ctx.json(&["status", "--json"]);
        service(&status, "host")["pid"].as_i64().is_some_and(|p| p != i64::from(host))
    });

    // Without a service, the backend restarts (here: every service, as the
    // profile has no watch rules).
    let before = ctx.json(&["status", "--json"]);
    let after = ctx.json(&["restart", "--json"]);
    assert_ne!(pid_of(&after, "server"), pid_of(&before, "server"));
    assert_ne!(pid_of(&after, "host"), pid_of(&before, "host"));

    // Stop ends every process; status then says stopped.
    let status = ctx.json(&["status", "--json"]);
    let supervisor = i32::try_from(status["pid"].as_i64().expect("pid")).expect("pid");
    let (server, host) = (pid_of(&status, "server"), pid_of(&status, "host"));
    ctx.run_ok(&["stop"]);
    for pid in [supervisor, server, host] {
        assert!(!alive(pid), "pid {pid} survived `omnidev stop`");
    }
    let status = json_code(&ctx, &["status", "--json"], NOT_RUNNING);
    assert_eq!(status["running"], false, "{status}");
    for s in status["services"].as_array().expect("services") {
        assert_eq!(s["state"], "stopped", "{status}");
        assert!(s["pid"].is_null(), "{status}");
    }
    ctx.assert(&["status"]).code(NOT_RUNNING).stdout(contains("not running"));
    // Stopping again is fine.
    ctx.run_ok(&["stop"]);
}

#[test]
fn socket_and_state_are_owner_only() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(free_port()));
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let dir = pod_dir(&ctx.json(&["status", "--json"]));
    let mode = |p: &Path| {
        std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode()
            & 0o777
    };
    assert_eq!(mode(&dir.join("control.sock")), 0o600);
    assert_eq!(mode(&dir.join("state.json")) & 0o077, 0);
    assert_eq!(mode(&dir.join("logs/omnidev.log")) & 0o077, 0);
    assert_eq!(mode(&dir) & 0o077, 0);
    ctx.run_ok(&["stop"]);
    assert!(!dir.join("control.sock").exists(), "socket left after stop");
}

/// Waits for the lock of the pod in `dir` to be free after its
/// supervisor was killed: its leader is gone (a zombie) before its last
/// thread has exited and released the lock.
fn wait_lock_free(dir: &Path) {
    wait_for("the pod's lock to be released", DEADLINE, || {
        omnidev_pod::PodLock::state(dir).is_ok_and(|s| s == omnidev_pod::LockState::Free)
    });
}

#[test]
fn stale_socket_after_sigkill_is_detected_and_replaced() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(free_port()));
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let status = ctx.json(&["status", "--json"]);
    let dir = pod_dir(&status);
    let supervisor = i32::try_from(status["pid"].as_i64().expect("pid")).expect("pid");
    let server = pid_of(&status, "server");
    signal(supervisor.unsigned_abs(), Signal::SIGKILL);
    wait_for("the supervisor to die", DEADLINE, || !alive(supervisor));
    wait_for("the orphan guard to end the server", DEADLINE, || !alive(server));
    wait_lock_free(&dir);
    assert!(dir.join("control.sock").exists(), "the stale socket is kept");

    let output = run_within(&ctx, &["status", "--json"], Duration::from_secs(20));
    assert_eq!(output.status.code(), Some(NOT_RUNNING), "{}", ctx.render(&output));
    let status: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(status["running"], false, "{status}");
    let output = run_within(&ctx, &["status"], Duration::from_secs(20));
    assert!(String::from_utf8_lossy(&output.stdout).contains("not running"));

    // The next `up` replaces the stale socket and answers on it.
    ctx.run_ok(&["up", "--detach"]);
    let status = ctx.json(&["status", "--json"]);
    assert_eq!(status["control"], true, "{status}");
    assert_ne!(pid_of(&status, "server"), server);

    // `clean` after another `kill -9` removes the socket left in the
    // runtime directory too.
    let supervisor = i32::try_from(status["pid"].as_i64().expect("pid")).expect("pid");
    let socket = dir.join(std::fs::read_link(dir.join("control.sock")).expect("a pointer"));
    signal(supervisor.unsigned_abs(), Signal::SIGKILL);
    wait_for("the supervisor to die", DEADLINE, || !alive(supervisor));
    wait_lock_free(&dir);
    assert!(socket.exists(), "the stale socket {}", socket.display());
    let output = run_within(&ctx, &["clean"], Duration::from_secs(20));
    assert_eq!(output.status.code(), Some(0), "{}", ctx.render(&output));
    assert!(!dir.exists(), "pod dir still there");
    assert!(!socket.exists(), "{} is left behind", socket.display());
}

#[test]
fn clean_refuses_while_running_and_removes_only_the_pod() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(free_port()));
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let dir = pod_dir(&ctx.json(&["status", "--json"]));

    ctx.assert(&["clean"]).code(1).stderr(contains("already running"));
    assert!(dir.join("pod.toml").is_file());

    ctx.run_ok(&["stop"]);
    let sibling = ctx.cache_root().join("other-00000000");
    std::fs::create_dir_all(&sibling).expect("mkdir");
    std::fs::write(sibling.join("pod.toml"), "").expect("write");
    ctx.run_ok(&["clean"]);
    assert!(!dir.exists(), "pod dir still there");
    assert!(sibling.join("pod.toml").is_file(), "a sibling pod was touched");
    assert!(ctx.repo.join("omnidev.toml").is_file(), "the checkout was touched");

    // A directory that is not a pod is never removed.
    let precious = ctx.root.join("precious");
    std::fs::create_dir_all(&precious).expect("mkdir");
    std::fs::write(precious.join("keep"), "x").expect("write");
    // A usage error (exit 2), as a --pod-dir that is not a pod is for every command.
    ctx.assert(&["clean", "--pod-dir", precious.to_str().expect("utf-8")]).code(2);
    assert!(precious.join("keep").is_file());
}

#[test]
fn ls_lists_running_and_stopped_pods() {
    let ctx = TestContext::new();
    let mut guards = Vec::new();
    let mut repos = Vec::new();
    let bases = free_ports(3);
    for (name, base) in ["alpha", "beta", "gamma"].iter().zip(bases) {
        let repo = ctx.root.join(name);
        std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
        std::fs::write(repo.join("omnidev.toml"), profile(base)).expect("write");
        guards.push(ctx.stop_on_drop_with([OsStr::new("--repo"), repo.as_os_str()]));
        repos.push(repo);
    }
    let repo_arg = |r: &PathBuf| r.to_str().expect("utf-8").to_owned();
    for repo in &repos {
        ctx.run_ok(&["up", "--detach", "--repo", &repo_arg(repo)]);
    }
    ctx.run_ok(&["stop", "--repo", &repo_arg(&repos[2])]);

    let list = ctx.json(&["ls", "--json"]);
    assert_eq!(list["schema"], 3);
    let pods = list["pods"].as_array().expect("pods");
    assert_eq!(pods.len(), 3, "{list}");
    for (repo, running) in repos.iter().zip([true, true, false]) {
        let pod = pods
            .iter()
            .find(|p| p["repo"].as_str() == Some(repo.to_str().expect("utf-8")))
            .unwrap_or_else(|| panic!("{} not listed: {list}", repo.display()));
        assert_eq!(pod["running"], running, "{list}");
        assert_eq!(pod["pid"].is_u64(), running, "{list}");
        assert!(pod["ports"]["server"].is_u64(), "{list}");
    }
    let ports: std::collections::BTreeSet<u64> =
        pods.iter().filter_map(|p| p["ports"]["server"].as_u64()).collect();
    assert_eq!(ports.len(), 3, "ports must differ between pods: {list}");
    let text = ctx.run_ok(&["ls"]);
    assert_eq!(text.matches("running pid").count(), 2, "{text}");
    assert_eq!(text.matches("stopped").count(), 1, "{text}");
    drop(guards);
    let list = ctx.json(&["ls", "--json"]);
    assert!(list["pods"].as_array().expect("pods").iter().all(|p| p["running"] == false), "{list}");
}

#[test]
fn detach_reports_a_failing_service() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.broken]
command = ["sh", "-c", "echo cannot open the database; exit 3"]
restart = "never"

[services.fine]
command = ["sleep", "300"]
"#,
    );
    let _pods = ctx.stop_on_drop();
    ctx.assert(&["up", "--detach"])
        .code(1)
        .stderr(contains("broken failed").and(contains("cannot open the database")));
    ctx.run_ok(&["stop"]);
}

#[test]
fn detach_reports_a_pod_that_cannot_start() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.a]
command = ["sh", "-c", "echo cannot start; exit 3"]
restart = "never"
"#,
    );
    ctx.assert(&["up", "--detach"]).code(1).stderr(contains("omnidev.log"));
}

#[test]
fn commands_on_a_pod_that_never_ran() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(free_port()));
    let status = json_code(&ctx, &["status", "--json"], NOT_RUNNING);
    assert_eq!(status["running"], false, "{status}");
    assert_eq!(status["control"], false, "{status}");
    // Stopping what does not run leaves it as asked.
    ctx.run_ok(&["stop"]);
    for args in [
        &["restart", "server"][..],
        &["wait", "--ready"],
        &["wait", "--healthy-after-reload"],
        &["events"],
    ] {
        ctx.assert(args).code(NOT_RUNNING).stderr(contains("not running"));
    }
    // With --json, the error is one record on stdout.
    let record = json_code(&ctx, &["restart", "--json"], NOT_RUNNING);
    assert_eq!(record["error"]["code"], "omnidev::control::not_running", "{record}");
    assert!(
        record["error"]["message"].as_str().is_some_and(|m| m.contains("is not running")),
        "{record}"
    );
    assert!(record["error"]["help"].is_string(), "{record}");
    ctx.assert(&["logs", "server"]).code(NOT_RUNNING);
    // Without a service too: a pod that never ran is said, not an empty
    // success.
    ctx.assert(&["logs"]).code(NOT_RUNNING).stderr(contains("this pod has never run"));
    let list = ctx.json(&["ls", "--json"]);
    assert_eq!(list["pods"].as_array().map(Vec::len), Some(0), "{list}");
}

#[test]
fn completions_for_each_shell() {
    let ctx = TestContext::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = ctx.run_ok(&["completions", shell]);
        assert!(out.contains("omnidev"), "{shell}: {out}");
        assert!(out.contains("restart"), "{shell}: {out}");
    }
    ctx.assert(&["completions", "tcsh"]).code(2);
}

#[test]
fn restart_of_an_exited_service_waits_for_the_new_run() {
    // `flaky` fails its first run and is not restarted on its own; its
    // second run (after `omnidev restart flaky`) keeps running.
    let ctx = TestContext::new();
    let marker = ctx.root.join("flaky-ran-once");
    ctx.write(
        "omnidev.toml",
        &format!(
            r#"
[services.flaky]
command = ["sh", "-c", "if [ -e {m} ]; then echo second run; exec sleep 300; fi; touch {m}; echo first run; exit 3"]
restart = "never"
grace-ms = 1000

[services.fine]
command = ["sleep", "300"]
grace-ms = 1000
"#,
            m = marker.display()
        ),
    );
    let _pods = ctx.stop_on_drop();
    ctx.assert(&["up", "--detach"]).code(1);
    let status = ctx.json(&["status", "--json"]);
    let flaky = service(&status, "flaky");
    assert_eq!(flaky["state"], "exited", "{status}");
    assert_ne!(flaky["exit"]["code"], 0, "a crash: {status}");
    assert!(flaky["detail"].as_str().unwrap_or_default().starts_with("crashed"), "{status}");

    // The answer describes the new run, not the exit it replaces.
    let output = run_within(&ctx, &["restart", "flaky", "--json"], Duration::from_secs(30));
    assert_eq!(output.status.code(), Some(0), "{}", ctx.render(&output));
    let status: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(service(&status, "flaky")["state"], "running", "{status}");
    assert!(alive(pid_of(&status, "flaky")), "{status}");
    ctx.run_ok(&["stop"]);
}

/// Every `restart --json` answer shows the state it waited for: the
/// service ready, in its state as in its readiness (one in three said
/// `starting` beside `"ready":true`).
#[test]
fn restart_json_reports_the_state_it_waited_for() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.web]
command = ["sh", "-c", "echo up; exec sleep 300"]
ready = { log = "up" }
grace-ms = 1000
"#,
    );
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let mut pids = std::collections::BTreeSet::new();
    for run in 0..50 {
        let output = run_within(&ctx, &["restart", "web", "--json"], Duration::from_secs(30));
        assert_eq!(output.status.code(), Some(0), "{}", ctx.render(&output));
        let status: Value = serde_json::from_slice(&output.stdout).expect("json");
        let web = service(&status, "web");
        assert!(web["state"] == "ready" && web["ready"] == true, "run {run}: {status}");
        pids.insert(pid_of(&status, "web"));
    }
    assert_eq!(pids.len(), 50, "a new run each time");
}

#[test]
fn restart_gives_up_after_its_timeout() {
    // `never` is never ready: its probe targets a port nobody listens on,
    // and its timeout is far away (a timed-out probe fails the restart at
    // once, as it fails `wait --ready`).
    let ctx = TestContext::new();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    ctx.write(
        "omnidev.toml",
        &format!(
            r#"
[services.never]
command = ["sleep", "300"]
ready = {{ tcp = "127.0.0.1:{closed}", interval-ms = 100, timeout-ms = 600000 }}
grace-ms = 1000
"#
        ),
    );
    let _pods = ctx.stop_on_drop();
    // Not ready in time: exit 4 (timed out).
    ctx.assert(&["up", "--detach", "--ready-timeout", "1"]).code(4);
    let output = run_within(&ctx, &["restart", "never", "--timeout", "2"], Duration::from_secs(30));
    assert_eq!(output.status.code(), Some(4), "{}", ctx.render(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("within 2 s"), "{stderr}");
    ctx.run_ok(&["stop"]);
}

#[test]
fn detach_reports_a_pod_that_ends_while_waiting() {
    // The only service fails after a moment: the background pod then ends
    // (headless exit rule) while `up --detach` waits on its socket.
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.brief]
command = ["sh", "-c", "sleep 0.5; echo giving up; exit 3"]
restart = "never"
"#,
    );
    for _ in 0..3 {
        let output = run_code(&ctx, &["up", "--detach"], 1);
        let text = ctx.render(&output);
        assert!(!text.contains("unexpected answer"), "{text}");
        assert!(text.contains("giving up"), "{text}");
        // When the failure was answered first, the pod may still be ending.
        ctx.run_ok(&["stop"]);
    }
}

#[test]
fn a_pod_whose_checkout_is_gone_is_reached_by_its_pod_dir() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(free_port()));
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let dir = pod_dir(&ctx.json(&["status", "--json"]));
    // The worktree goes away (here: moved) while its pod runs.
    let moved = ctx.root.join("moved-away");
    std::fs::rename(&ctx.repo, &moved).expect("move the checkout");
    let _moved = ctx.stop_on_drop_with([OsStr::new("--repo"), moved.as_os_str()]);
    let outside = ctx.root.join("elsewhere");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let at = dir.to_str().expect("utf-8");
    let omnidev = |args: &[&str]| {
        let done =
            ctx.cmd().current_dir(&outside).args(args).args(["--pod-dir", at]).assert().success();
        common::stdout(&done)
    };
    let status: Value = serde_json::from_str(&omnidev(&["status", "--json"])).expect("json");
    assert_eq!(status["running"], true, "{status}");
    assert!(omnidev(&["logs", "server", "-n", "1"]).contains("line 20"));
    let server = pid_of(&status, "server");
    omnidev(&["stop"]);
    assert!(!alive(server), "the server survived `stop --pod-dir`");
    // `ls` says the checkout is gone and how to free the pod's ports.
    ctx.cmd()
        .current_dir(&outside)
        .arg("ls")
        .assert()
        .stdout(contains("(gone)").and(contains(format!("omnidev clean --pod-dir {at}"))));
    omnidev(&["clean"]);
    assert!(!dir.exists(), "clean --pod-dir left {}", dir.display());
}

#[test]
fn a_pod_dir_that_is_no_pod_is_a_usage_error() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(free_port()));
    let missing = ctx.root.join("no-such-pod");
    let empty = ctx.root.join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let other = ctx.root.join("other");
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::write(other.join("notes.txt"), "mine").expect("write");
    for (dir, what) in
        [(&missing, "does not exist"), (&empty, "not a pod"), (&other, "is not an omnidev pod")]
    {
        let at = dir.to_str().expect("utf-8");
        for command in ["status", "stop", "restart", "logs", "events", "clean"] {
            ctx.assert(&[command, "--pod-dir", at]).code(2).stderr(contains(what));
        }
        let record = json_code(&ctx, &["status", "--json", "--pod-dir", at], 2);
        assert_eq!(record["error"]["code"], "omnidev::pod_dir::not_a_pod", "{record}");
        assert_eq!(record["error"]["exit"], 2, "{record}");
    }
    assert!(!missing.exists(), "a command made the missing pod dir");
    assert!(other.join("notes.txt").is_file());
    // A usage error of clap's, with --json: a record too.
    let record = json_code(&ctx, &["status", "--json", "--no-such-flag"], 2);
    assert_eq!(record["error"]["code"], "omnidev::usage", "{record}");
    assert!(
        record["error"]["message"].as_str().is_some_and(|m| m.contains("--no-such-flag")),
        "{record}"
    );
}

#[test]
fn exit_codes_on_a_running_pod() {
    let ctx = TestContext::new();
    let port = free_port();
    ctx.write("omnidev.toml", &profile(port));
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    // A second `up --detach` reports the running pod: exit 0, its URLs.
    let again = ctx.run_ok(&["up", "--detach"]);
    assert!(again.contains(&format!("server http://localhost:{port}")), "{again}");
    assert!(again.contains("already running"), "{again}");
    // Running: status exits 0.
    ctx.run_ok(&["status"]);
    // An unknown service is a usage error, whatever asks for it.
    for args in [
        &["wait", "--ready", "nosuch"][..],
        &["restart", "nosuch"],
        &["events", "nosuch"],
        &["logs", "nosuch"],
    ] {
        ctx.assert(args).code(2).stderr(contains("nosuch"));
    }
    let record = json_code(&ctx, &["restart", "nosuch", "--json"], 2);
    assert_eq!(record["error"]["code"], "omnidev::unknown_service", "{record}");
    // No reload comes: the wait times out, exit 4.
    ctx.assert(&["wait", "--healthy-after-reload", "--timeout", "1"])
        .code(4)
        .stderr(contains("within 1 s"));
    // A stopped service is never ready: the wait fails at once naming it.
    ctx.run_ok(&["stop", "host"]);
    // (Exit 1, not the timeout's 4.)
    ctx.assert(&["wait", "host", "--ready", "--timeout", "60"])
        .code(1)
        .stderr(contains("host failed: stopped"));
    // A follower of the events gets one `ended` record last when the pod
    // stops, and its stream ends.
    let events = follow_events(&ctx);
    ctx.run_ok(&["stop"]);
    let all = events.records();
    let last: Value = serde_json::from_str(all.last().expect("records")).expect("json");
    assert_eq!(last["kind"], "ended", "{all:?}");
    let names = service_names(&last);
    assert_eq!(names, ["server", "host"], "{last}");
    assert!(
        last["services"].as_array().expect("services").iter().all(|s| s["reason"] == "stopped"),
        "{last}"
    );
    ctx.assert(&["wait", "--ready"]).code(NOT_RUNNING);
}

/// `omnidev events -f --json` on the running pod, read on a thread of its
/// own until the pod ends.
struct Following {
    child: std::process::Child,
    all: mpsc::Receiver<Vec<String>>,
}

fn follow_events(ctx: &TestContext) -> Following {
    let mut child = ctx.spawn(&["events", "-f", "--json"]);
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    // Its first record (of the kept ones) says it is attached.
    let first = lines.next().expect("a first record").expect("read");
    let (tx, all) = mpsc::channel();
    std::thread::spawn(move || {
        let all: Vec<String> = std::iter::once(first).chain(lines.map_while(Result::ok)).collect();
        let _ = tx.send(all);
    });
    Following { child, all }
}

impl Following {
    /// Every record, once the pod has ended.
    fn records(mut self) -> Vec<String> {
        let all = self.all.recv_timeout(DEADLINE).expect("the events stream ends with the pod");
        let _ = self.child.wait();
        all
    }
}

#[test]
fn wait_healthy_after_reload_fails_at_the_first_crash() {
    // `app` watches src/; once `src/broken` exists it crashes at start, and
    // keeps crashing (restarts with backoff): the wait must fail at the
    // first crash, naming it, not at its timeout.
    let ctx = TestContext::new();
    ctx.write("src/app.txt", "v1");
    ctx.write(
        "omnidev.toml",
        r#"
[services.app]
command = ["sh", "-c", "if [ -e src/broken ]; then echo broken start; exit 7; fi; echo app up; exec sleep 300"]
watch = ["src/**"]
grace-ms = 1000
"#,
    );
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let args = ["wait", "--healthy-after-reload", "--timeout", "600"];
    let wait = ctx.spawn(&args);
    ctx.write("src/broken", "yes");
    // Far below the 600 s given: a crash ends the wait.
    let output = finish_within(wait, &args, Duration::from_secs(120));
    let (status, stderr) = (output.status, String::from_utf8_lossy(&output.stderr));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("app failed"), "{stderr}");
    ctx.run_ok(&["stop"]);
}

#[test]
fn two_quick_edits_are_judged_on_the_second_ones_reload() {
    // Two edits well under the 2 s lookback apart: the first's reload is
    // over and healthy when the second, which breaks `app`, is saved. Its
    // reload waits out the long debounce while `wait` runs: the wait must
    // judge that reload (and fail naming `app`), not the healthy one.
    let ctx = TestContext::new();
    ctx.write("src/app.txt", "v1");
    ctx.write(
        "omnidev.toml",
        r#"
[watch]
debounce-ms = 1500

[services.app]
command = ["sh", "-c", "if [ -e src/broken ]; then echo broken start; exit 7; fi; echo app up; exec sleep 300"]
ready = { log = "app up" }
watch = ["src/**"]
grace-ms = 1000
"#,
    );
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    ctx.write("src/app.txt", "v2");
    ctx.run_ok(&["wait", "--healthy-after-reload", "--timeout", "120"]);
    ctx.write("src/broken", "yes");
    let args = ["wait", "--healthy-after-reload", "--timeout", "120"];
    let output = run_within(&ctx, &args, Duration::from_secs(180));
    let (status, stderr) = (output.status, String::from_utf8_lossy(&output.stderr));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("app failed"), "{stderr}");
    ctx.run_ok(&["stop"]);
}

#[test]
fn an_edit_stops_the_old_run_while_the_debounce_runs_and_keeps_its_last_words() {
    // A long debounce makes the order plain: the old run is stopped at the
    // edit, the reload (named by its `reload` record) comes 1.5 s later
    // and only starts the new run; `logs --since-reload` still begins
    // before the old run's last words.
    let ctx = TestContext::new();
    ctx.write("src/app.txt", "v1");
    ctx.write(
        "omnidev.toml",
        r#"
[watch]
debounce-ms = 1500

[services.app]
command = ["sh", "-c", "exec 2>/dev/null; n=$(( $(cat runs 2>/dev/null || echo 0) + 1 )); echo $n > runs; trap 'echo run $n stopping; exit 0' TERM; echo run $n started; while :; do sleep 0.05; done"]
ready = { log = "started" }
watch = ["src/**"]
"#,
    );
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let events = follow_events(&ctx);
    ctx.write("src/app.txt", "v2");
    ctx.run_ok(&["wait", "--healthy-after-reload", "--timeout", "120"]);
    let out = ctx.run_ok(&["logs", "app", "--since-reload"]);
    assert_eq!(
        out, "run 1 stopping\nrun 2 started\n",
        "the mark is taken before the old run is stopped"
    );
    ctx.run_ok(&["stop"]);
    let all = events.records();
    let records: Vec<Value> = all.iter().map(|l| serde_json::from_str(l).expect("json")).collect();
    let position = |what: &str, test: &dyn Fn(&Value) -> bool| {
        records.iter().position(test).unwrap_or_else(|| panic!("no {what} in {all:?}"))
    };
    let state = |r: &Value, state: &str| r["service"] == "app" && r["state"] == state;
    let stopped = position("the old run's end", &|r| state(r, "stopping"));
    let reload = position("reload record", &|r| r["kind"] == "reload");
    let started = stopped
        + records[stopped..]
            .iter()
            .position(|r| state(r, "starting"))
            .unwrap_or_else(|| panic!("no new run in {all:?}"));
    assert!(
        records[stopped..reload].iter().any(|r| state(r, "waiting")),
        "down before the reload: {all:?}"
    );
    assert_eq!(records[reload]["files"], serde_json::json!(["src/app.txt"]));
    assert!(stopped < reload && reload < started, "stop at the edit, start at the reload: {all:?}");
}

#[test]
fn headless_json_ends_with_one_ended_record() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.once]
command = ["sh", "-c", "echo done"]
restart = "never"

[services.bad]
command = ["sh", "-c", "sleep 0.3; exit 3"]
restart = "never"
"#,
    );
    let output = run_within(&ctx, &["up", "--json"], Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(1), "{}", ctx.render(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let ended: Vec<&Value> = records.iter().filter(|r| r["kind"] == "ended").collect();
    assert_eq!(ended.len(), 1, "{text}");
    assert_eq!(records.last(), Some(ended[0]), "ended is the last record: {text}");
    let services = ended[0]["services"].as_array().expect("services");
    let of = |name: &str| {
        services.iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    assert_eq!(of("once")["reason"], "exited", "{text}");
    assert_eq!(of("once")["exit"]["code"], 0, "{text}");
    assert_eq!(of("bad")["reason"], "crashed", "{text}");
    assert_eq!(of("bad")["exit"]["code"], 3, "{text}");
}

/// Issue 44: a Procfile's one-shot `release` has exited 0 and `web` is
/// stopped on request — every service has ended, yet the pod runs on
/// until told to stop, and `web` starts again.
#[test]
fn stopping_the_last_running_service_leaves_the_pod_running() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.release]
command = ["true"]
restart = "never"

[services.web]
command = ["sleep", "300"]
grace-ms = 1000
"#,
    );
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    wait_for("release to exit", DEADLINE, || {
        service(&ctx.json(&["status", "--json"]), "release")["state"] == "exited"
    });
    ctx.run_ok(&["stop", "web"]);
    let status = ctx.json(&["status", "--json"]);
    assert_eq!(service(&status, "web")["state"], "stopped", "{status}");
    ctx.run_ok(&["start", "web"]);
    let status = ctx.json(&["status", "--json"]);
    assert_eq!(service(&status, "web")["state"], "running", "{status}");
    ctx.run_ok(&["stop"]);
}

#[test]
fn one_service_stops_and_starts_and_restart_all_renews_every_pid() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(free_port()));
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let status = ctx.json(&["status", "--json"]);
    let (server, host) = (pid_of(&status, "server"), pid_of(&status, "host"));
    // The host stops; the server (and the pod) run on.
    ctx.run_ok(&["stop", "host"]);
    assert!(!alive(host), "the host survived `stop host`");
    let status = ctx.json(&["status", "--json"]);
    assert_eq!(service(&status, "host")["state"], "stopped", "{status}");
    assert_eq!(pid_of(&status, "server"), server, "{status}");
    // Unknown and missing services are usage errors.
    ctx.assert(&["stop", "nosuch"]).code(2);
    ctx.assert(&["start"]).code(2);
    // It starts again, ready once `start` returns.
    ctx.run_ok(&["start", "host"]);
    let status = ctx.json(&["status", "--json"]);
    let new_host = pid_of(&status, "host");
    assert_ne!(new_host, host);
    assert_eq!(service(&status, "host")["state"], "running", "{status}");
    // Every service, as one reload.
    let after = ctx.json(&["restart", "--all", "--json"]);
    assert_ne!(pid_of(&after, "server"), server, "{after}");
    wait_for("the host to restart after the server", DEADLINE, || {
        let status = ctx.json(&["status", "--json"]);
        service(&status, "host")["pid"].as_i64().is_some_and(|p| p != i64::from(new_host))
    });
    ctx.assert(&["restart", "--all", "server"]).code(2);
    // --no-deps: a new server, the same host.
    let before = ctx.json(&["status", "--json"]);
    let after = ctx.json(&["restart", "server", "--no-deps", "--json"]);
    assert_ne!(pid_of(&after, "server"), pid_of(&before, "server"), "{after}");
    // With its dependents, the host would be stopping by now: the engine
    // stops it in the turn the new server is ready.
    assert_eq!(pid_of(&after, "host"), pid_of(&before, "host"), "{after}");
    assert_eq!(service(&after, "host")["state"], "running", "{after}");
    ctx.assert(&["restart", "--no-deps"]).code(2);
    // With the server stopped, a restarted host waits for it for good:
    // the restart fails at once naming it (exit 1, not the timeout's 4).
    ctx.run_ok(&["stop", "server"]);
    ctx.assert(&["restart", "host", "--timeout", "60"])
        .code(1)
        .stderr(contains("host failed: blocked: waiting for server, which was stopped"));
    // So does a start of the host.
    ctx.run_ok(&["stop", "host"]);
    ctx.assert(&["start", "host", "--timeout", "60"])
        .code(1)
        .stderr(contains("host failed: blocked"));
    ctx.run_ok(&["stop"]);
    // Services of a pod that does not run: exit 3.
    ctx.assert(&["stop", "host"]).code(NOT_RUNNING);
    ctx.assert(&["start", "host"]).code(NOT_RUNNING);
}

#[test]
fn a_stop_that_needs_sigkill_says_so() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.stubborn]
command = ["sh", "-c", "trap '' TERM; echo up; while true; do sleep 0.1; done"]
grace-ms = 300

[services.polite]
command = ["sleep", "300"]
grace-ms = 5000
"#,
    );
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    wait_for("stubborn's first line", DEADLINE, || {
        ctx.run_ok(&["logs", "stubborn"]).contains("up")
    });
    ctx.run_ok(&["stop", "stubborn"]);
    ctx.run_ok(&["stop", "polite"]);
    let events = ctx.run_ok(&["events"]);
    assert!(
        events.contains(
            "stubborn: still running 300ms after SIGTERM (its grace-ms): killed with SIGKILL"
        ),
        "{events}"
    );
    // One that ends on SIGTERM is not said to be killed.
    assert!(!events.contains("polite: still running"), "{events}");
    let json = ctx.run_ok(&["events", "--json"]);
    assert!(
        json.lines().any(|line| line.contains(r#""kind":"notice""#)
            && line.contains("killed with SIGKILL")
            && line.contains(r#""service":"stubborn""#)),
        "{json}"
    );
    ctx.run_ok(&["stop"]);
}

#[test]
fn a_program_that_cannot_start_fails_at_once_with_a_hint() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.web]
command = ["sh", "-c", "echo booting; omnidev-test-no-such-server --bind 0"]

[services.direct]
command = ["omnidev-test-no-such-program"]

[services.steady]
command = ["sleep", "300"]
grace-ms = 1000
"#,
    );
    let _pods = ctx.stop_on_drop();
    // `up --detach` fails (exit 1) at the first of them, naming it; the
    // other may still be on its way there.
    let out = run_code(&ctx, &["up", "--detach"], 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("web failed") || stderr.contains("direct failed"), "{stderr}");
    wait_for("both failed", DEADLINE, || {
        let status = ctx.json(&["status", "--json"]);
        service(&status, "web")["state"] == "failed"
            && service(&status, "direct")["state"] == "failed"
    });
    let status = ctx.json(&["status", "--json"]);
    let web = service(&status, "web");
    assert_eq!(web["state"], "failed", "{status}");
    let detail = web["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("exit code 127"), "{detail}");
    assert!(detail.contains("was not found"), "{detail}");
    assert!(detail.contains("prepare"), "{detail}");
    let direct = service(&status, "direct");
    assert_eq!(direct["state"], "failed", "{status}");
    let detail = direct["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("could not start `omnidev-test-no-such-program`"), "{detail}");
    // Failed, not backing off: one start each (that no time brings a
    // restart is the paused-clock test
    // `a_command_that_cannot_be_run_fails_at_once_and_is_never_restarted`).
    let status = ctx.json(&["status", "--json"]);
    for name in ["web", "direct"] {
        assert_eq!(service(&status, name)["state"], "failed", "{status}");
        assert_eq!(service(&status, name)["restarts"], 0, "{status}");
    }
    assert_eq!(
        ctx.run_ok(&["logs", "web"]).matches("booting").count(),
        1,
        "web ran more than once"
    );
    // The pod runs on for the service that can run.
    assert_eq!(service(&status, "steady")["state"], "running", "{status}");
    ctx.run_ok(&["stop"]);
}

/// A keep-alive HTTP server that, on SIGTERM, waits for its open
/// connections to close before it exits (as gunicorn does).
const DRAINING_SERVER: &str = r#"
import http.server, signal, socketserver, sys, threading
open_connections = 0
lock = threading.Lock()
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def setup(self):
        global open_connections
        with lock: open_connections += 1
        super().setup()
    def finish(self):
        global open_connections
        super().finish()
        with lock: open_connections -= 1
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args): pass
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
server = Server(("127.0.0.1", int(sys.argv[1])), Handler)
def drain(*_):
    def wait():
        import time
        while True:
            with lock:
                if open_connections == 0: break
            time.sleep(0.05)
        print("drained", flush=True)
        server.shutdown()
    threading.Thread(target=wait).start()
signal.signal(signal.SIGTERM, drain)
print("serving", flush=True)
server.serve_forever()
"#;

#[test]
fn a_server_that_drains_its_connections_restarts_within_its_grace() {
    let ctx = TestContext::new();
    ctx.write("server.py", DRAINING_SERVER);
    let port = free_port();
    ctx.write(
        "omnidev.toml",
        &format!(
            r#"
[ports]
web = {port}

[services.web]
command = ["python3", "-u", "server.py", "{{port.web}}"]
ready = {{ http = "http://127.0.0.1:{{port.web}}/", interval-ms = 100 }}
grace-ms = 60000
"#
        ),
    );
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    // The probe's connection is closed once answered: the old server
    // drains at once, not at the grace's end with SIGKILL.
    let restart = run_within(&ctx, &["restart", "web", "--timeout", "120"], DEADLINE);
    assert!(restart.status.success(), "{}", ctx.render(&restart));
    let logs = ctx.run_ok(&["logs", "web"]);
    assert_eq!(logs.matches("drained").count(), 1, "{logs}");
    let events = ctx.run_ok(&["events"]);
    assert!(!events.contains("killed with SIGKILL"), "{events}");
    ctx.run_ok(&["stop"]);
}

/// `omnidev run --port NAME` gives a one-off command the `PORT` the
/// service of that name gets (a Procfile app's `web`), over the user's own
/// `PORT`; an unknown name says which ones exist; `exec` is the same
/// command.
#[test]
fn run_with_port_sees_the_services_port() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        &format!(
            r#"
[ports]
web = {}
worker = {}

[env]
GREETING = "hello"

[services.web]
command = ["sh", "-c", "echo port=$PORT; exec sleep 300"]
env = {{ PORT = "{{port.web}}" }}
grace-ms = 1000
"#,
            free_port(),
            free_port()
        ),
    );
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let status = ctx.json(&["status", "--json"]);
    let web = status["ports"]["web"].as_u64().expect("web port");
    wait_for("web's first line", DEADLINE, || {
        ctx.run_ok(&["logs", "web", "-n", "1"]).trim() == format!("port={web}")
    });

    let out = ctx
        .cmd()
        .args(["run", "--port", "web", "--", "sh", "-c", "echo $PORT $GREETING"])
        .env("PORT", "1")
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("{web} hello"));
    // Without --port, the user's PORT is left alone; `exec` is `run`.
    let out = ctx
        .cmd()
        .args(["exec", "--", "sh", "-c", "echo ${PORT:-none}; exit 5"])
        .env_remove("PORT")
        .output()
        .expect("exec");
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "none");

    // Refused before anything is made: another checkout's pod stays
    // unmade.
    let other = ctx.root.join("other");
    std::fs::create_dir_all(other.join(".git")).expect("mkdir");
    std::fs::copy(ctx.repo.join("omnidev.toml"), other.join("omnidev.toml")).expect("copy");
    let pods = || std::fs::read_dir(ctx.cache_root()).expect("pods").count();
    let before = pods();
    let out = ctx
        .cmd()
        .args(["run", "--port", "nope", "--repo"])
        .arg(&other)
        .args(["--", "true"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(pods(), before, "a pod was made for a refused command");
    let out = ctx.cmd().args(["run", "--port", "nope", "--", "true"]).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown port name `nope`"), "{stderr}");
    assert!(stderr.contains("web, worker"), "{stderr}");
}

/// SIGTERM, SIGHUP and SIGINT sent to `omnidev run` reach its command
/// (which ended omnidev alone and left the command to pid 1): omnidev
/// exits with the command's status and no process of it stays.
#[test]
fn run_forwards_the_signals_that_would_end_it() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", "[services.idle]\ncommand = [\"true\"]\n");
    for (sig, code) in [(Signal::SIGTERM, 143), (Signal::SIGHUP, 129), (Signal::SIGINT, 130)] {
        let mut run = ctx
            .command()
            .args(["run", "--", "sh", "-c", "echo $$; exec sleep 300"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let mut line = String::new();
        BufReader::new(run.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the command's pid");
        let command: i32 = line.trim().parse().expect("a pid");
        signal(run.id(), sig);
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || sender.send(run.wait()));
        let status = receiver
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("omnidev run outlived {sig}"))
            .expect("wait");
        assert_eq!(status.code(), Some(code), "{sig}: {status:?}");
        wait_for(&format!("the command gone after {sig}"), DEADLINE, || !alive(command));
    }
}

/// `omnidev run` says why a command did not start, by the real cause: an
/// environment too large for exec, a NUL in it (refused with its place in
/// the profile, before anything runs), a program missing.
#[test]
fn run_names_the_real_cause_when_a_command_cannot_start() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", "[env]\nBAD = \"a\\u0000b\"\n");
    let said = |command: &mut std::process::Command| {
        let out = command.output().expect("run");
        assert!(!out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let nul = said(ctx.command().args(["run", "--", "true"]));
    assert!(nul.contains("NUL byte") && !nul.contains("installed"), "{nul}");
    // Under an 8 MiB stack, exec takes 2 MiB of arguments and environment:
    // omnidev starts with 1.5 MB of it, its command would get 2.4 MB.
    let chunk = "x".repeat(100_000);
    ctx.write(".env", &(0..9).fold(String::new(), |text, i| text + &format!("POD_{i}={chunk}\n")));
    ctx.write(
        "omnidev.toml",
        "[pod]\nenv-files = [\".env\"]\n[services.idle]\ncommand = [\"true\"]\n",
    );
    let mut big = ctx.command();
    big.args(["run", "--", "true"]);
    for i in 0..15 {
        big.env(format!("USER_{i}"), &chunk);
    }
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut big, || {
            let limit = libc::rlimit { rlim_cur: 8 << 20, rlim_max: libc::RLIM_INFINITY };
            if libc::setrlimit(libc::RLIMIT_STACK, &raw const limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let big = said(&mut big);
    assert!(big.contains("E2BIG") && !big.contains("installed"), "{big}");
    let said = |args: &[&str]| said(ctx.command().args(args));
    let missing = said(&["run", "--", "no-such-program-here"]);
    assert!(missing.contains("installed and on PATH"), "{missing}");
}

/// Two pods' services each get their own `XDG_RUNTIME_DIR` and `TMPDIR`
/// (0700, inside the pod, neither the user's): both bind a socket of the
/// same name, as two gunicorns' `gunicorn.ctl` would; and an omnidev run
/// by a service still reaches its pod, and allocates another checkout's
/// ports under the user's runtime directory, not the service's.
#[test]
fn each_pods_services_get_their_own_runtime_and_temp_dirs() {
    let ctx = TestContext::new();
    let second = ctx.root.join("second");
    std::fs::create_dir_all(second.join(".git")).expect("mkdir");
    let third = ctx.root.join("third");
    std::fs::create_dir_all(third.join(".git")).expect("mkdir");
    std::fs::write(
        third.join("omnidev.toml"),
        format!("[ports]\nx = {}\n\n[services.x]\ncommand = [\"true\"]\n", free_port()),
    )
    .expect("write");
    let profile = format!(
        r#"
[env]
OMNIDEV = "{}"
THIRD = "{}"

[services.app]
command = ["sh", "-c", "echo run=$XDG_RUNTIME_DIR; echo tmp=$TMPDIR; python3 -c 'import os, socket; socket.socket(socket.AF_UNIX).bind(os.environ[\"XDG_RUNTIME_DIR\"] + \"/app.ctl\"); print(\"bound\")'; \"$OMNIDEV\" run --repo \"$THIRD\" -- true && echo allocated; \"$OMNIDEV\" status --json | tr -d ' \\n' | grep -o '\"control\":[a-z]*'; exec sleep 300"]
grace-ms = 1000
"#,
        common::omnidev_bin().display(),
        third.display()
    );
    ctx.write("omnidev.toml", &profile);
    std::fs::write(second.join("omnidev.toml"), &profile).expect("write");
    let second_arg = second.display().to_string();
    let _pods = ctx.stop_on_drop();
    let _second = ctx.stop_on_drop_with(["--repo", &second_arg]);
    ctx.run_ok(&["up", "--detach"]);
    ctx.run_ok(&["up", "--detach", "--repo", &second_arg]);

    let mut seen = Vec::new();
    for args in [&[][..], &["--repo", &second_arg][..]] {
        let status = ctx.json(&[&["status", "--json"][..], args].concat());
        let pod = PathBuf::from(status["pod-dir"].as_str().expect("pod dir"));
        let logs = [&["logs", "app"][..], args].concat();
        wait_for("the service's report", DEADLINE, || ctx.run_ok(&logs).contains("\"control\":"));
        let lines = ctx.run_ok(&logs);
        let run = pod.join("run");
        let tmp = pod.join("tmp");
        assert!(lines.contains(&format!("run={}\n", run.display())), "{lines}");
        assert!(lines.contains(&format!("tmp={}\n", tmp.display())), "{lines}");
        assert!(lines.contains("bound\n"), "{lines}");
        assert!(lines.contains("\"control\":true"), "{lines}");
        assert!(lines.contains("allocated\n"), "{lines}");
        assert!(!run.join("omnidev").exists(), "{lines}");
        for dir in [&run, &tmp] {
            let mode = std::fs::metadata(dir).expect("made").permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
        }
        assert!(run.join("app.ctl").exists());
        seen.push((run, tmp));
    }
    assert_ne!(seen[0], seen[1]);
    for (run, tmp) in &seen {
        assert!(!run.starts_with(ctx.runtime_home()), "{}", run.display());
        assert_ne!(tmp, &std::env::temp_dir());
    }
}

/// A service that ran as one copy and now runs as two is one name for
/// `logs`, `logs -f` and `events`: every replica's lines, prefixed, and not
/// the old `web.log` (only it was shown, and `events web` was refused).
#[test]
fn a_service_with_replicas_is_one_name_for_logs_and_events() {
    let ctx = TestContext::new();
    let text = |replicas: &str| {
        format!(
            "[services.web]\ncommand = [\"sh\", \"-c\", \"echo copy; exec sleep 300\"]\n\
             {replicas}grace-ms = 1000\n"
        )
    };
    ctx.write("omnidev.toml", &text(""));
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    wait_for("the one copy's line", DEADLINE, || ctx.run_ok(&["logs", "web"]).contains("copy"));
    ctx.run_ok(&["stop"]);
    ctx.write("omnidev.toml", &text("replicas = 2\n"));
    ctx.run_ok(&["up", "--detach"]);
    let both = |text: &str| text.contains("web.1 | copy") && text.contains("web.2 | copy");
    let mut logs = String::new();
    wait_for("both replicas' lines in `logs web`", DEADLINE, || {
        logs = ctx.run_ok(&["logs", "web"]);
        both(&logs)
    });
    assert!(!logs.lines().any(|l| l.starts_with("web ")), "the old web.log: {logs}");

    let mut follow = ctx.spawn(&["logs", "web", "-f"]);
    let mut lines = omnidev_test_support::Lines::new(follow.stdout.take().expect("stdout"));
    lines.wait_for("web.1's line in `logs -f web`", DEADLINE, |l| l.starts_with("web.1 | copy"));
    lines.wait_for("web.2's line in `logs -f web`", DEADLINE, |l| l.starts_with("web.2 | copy"));
    let _ = follow.kill();
    let _ = follow.wait();

    let events = ctx.run_ok(&["events", "web", "--json"]);
    for replica in ["web.1", "web.2"] {
        assert!(events.contains(&format!("\"service\":\"{replica}\"")), "{replica}: {events}");
    }
}

/// `replicas = 2`: `web.1` and `web.2` each answer on a port of their own;
/// `restart web.2` restarts that one alone; `restart web` restarts both,
/// one after another (the second stops only once the first is ready
/// again); `logs web` has both.
#[test]
fn replicas_answer_on_their_own_ports_and_restart_alone_or_in_turn() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        &format!(
            r#"
[ports]
web = {}

[services.web]
command = ["python3", "-m", "http.server", "{{port.web}}", "--bind", "127.0.0.1"]
ready = {{ tcp = "127.0.0.1:{{port.web}}", interval-ms = 100 }}
replicas = 2
grace-ms = 2000
"#,
            free_port()
        ),
    );
    let _pods = ctx.stop_on_drop();
    let out = ctx.run_ok(&["up", "--detach"]);
    assert!(out.contains("pod "), "{out}");
    let status = ctx.json(&["status", "--json"]);
    let ports = [
        status["ports"]["web"].as_u64().expect("web.1's port"),
        status["ports"]["web.2"].as_u64().expect("web.2's port"),
    ];
    assert_ne!(ports[0], ports[1]);
    for port in ports {
        let connected = std::net::TcpStream::connect(("127.0.0.1", port as u16));
        // A refusal right after `up` said ready: what the pod says now and
        // what its replicas wrote tell why.
        let mut stream = connected.unwrap_or_else(|e| {
            let now = String::from_utf8_lossy(&ctx.run(&["status", "--json"]).stdout).into_owned();
            let logs =
                String::from_utf8_lossy(&ctx.run(&["logs", "web", "-n", "40"]).stdout).into_owned();
            let events = ctx.run(&["events"]);
            let events = String::from_utf8_lossy(&events.stdout).into_owned();
            panic!("connect to {port}: {e}\nstatus at `up`: {status}\nnow: {now}\n{logs}\n{events}")
        });
        std::io::Write::write_all(&mut stream, b"GET / HTTP/1.0\r\n\r\n").expect("send");
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut stream, &mut answer).expect("read");
        assert!(answer.starts_with("HTTP/1.0 200"), "{port}: {answer}");
    }
    let (one, two) = (pid_of(&status, "web.1"), pid_of(&status, "web.2"));

    ctx.run_ok(&["restart", "web.2"]);
    let status = ctx.json(&["status", "--json"]);
    assert_eq!(pid_of(&status, "web.1"), one, "web.1 untouched");
    let two_again = pid_of(&status, "web.2");
    assert_ne!(two_again, two);

    ctx.run_ok(&["restart", "web"]);
    let status = ctx.json(&["status", "--json"]);
    assert_ne!(pid_of(&status, "web.1"), one);
    assert_ne!(pid_of(&status, "web.2"), two_again);
    let events = ctx.run_ok(&["events", "--since", "60s"]);
    let last = |what: &str| {
        events
            .lines()
            .collect::<Vec<_>>()
            .iter()
            .rposition(|line| line.ends_with(what) || line.contains(&format!("{what} (")))
            .unwrap_or_else(|| panic!("no `{what}` in\n{events}"))
    };
    assert!(
        last("web.1 ready") < last("web.2 stopping"),
        "web.2 stopped before web.1 was ready again:\n{events}"
    );

    let logs = ctx.run_ok(&["logs", "web", "-n", "1"]);
    assert!(logs.contains("web.1 | ") && logs.contains("web.2 | "), "{logs}");
}

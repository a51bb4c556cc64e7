//! What a pod's services hold, in `status`: a real service that holds
//! 200 MB shows what `/proc` says of its processes, and the pod's total is
//! the sum of its services'.

#[path = "support/context.rs"]
mod common;

use common::{TestContext, service};

/// The resident bytes `/proc` gives for `pid` and every process below it.
fn proc_rss(pid: u64) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let own = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024;
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    own + children
        .split_whitespace()
        .filter_map(|child| child.parse().ok())
        .map(proc_rss)
        .sum::<u64>()
}

/// The structured result of MCP's `status` tool, from a raw JSON-RPC
/// session with `omnidev mcp`.
fn mcp_status(ctx: &TestContext) -> serde_json::Value {
    use std::io::{BufRead as _, Write as _};
    let mut server = ctx
        .command()
        .arg("mcp")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("omnidev mcp");
    let mut stdin = server.stdin.take().expect("stdin");
    for message in [
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "usage", "version": "1"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "status", "arguments": {}}}),
    ] {
        writeln!(stdin, "{message}").expect("write");
    }
    let stdout = std::io::BufReader::new(server.stdout.take().expect("stdout"));
    let answer = (stdout.lines().map_while(Result::ok))
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(&line).ok())
        .find(|message| message["id"] == 2)
        .expect("an answer to the status call");
    drop(stdin);
    let _ = server.kill();
    let _ = server.wait();
    answer["result"]["structuredContent"].clone()
}

#[test]
fn a_service_holding_200_mb_shows_it_and_the_pod_sums_its_services() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.hog]
command = ["sh", "-c", "python3 -c \"import sys, time; b = b'x' * (200 * 1024 * 1024); print('held', flush=True); time.sleep(300)\"; exit $?"]
ready = { log = "^held$" }
grace-ms = 1000

[services.idle]
command = ["sleep", "300"]
grace-ms = 1000
"#,
    );
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let status = ctx.json(&["status", "--json"]);
    let hog = service(&status, "hog");
    let pid = hog["pid"].as_u64().expect("the hog's pid");
    let shown = hog["usage"]["rss-bytes"].as_u64().expect("its usage");
    let procs = proc_rss(pid);
    assert!(shown >= 200 * 1024 * 1024, "{hog}");
    let off = shown.abs_diff(procs);
    assert!(off * 10 <= procs, "status {shown} bytes, /proc {procs}");
    assert_eq!(hog["usage"]["processes"], 2, "sh and python: {hog}");
    let idle = service(&status, "idle");
    let total = &status["usage"];
    for field in ["rss-bytes", "cpu-ms", "processes"] {
        let sum =
            hog["usage"][field].as_u64().unwrap_or(0) + idle["usage"][field].as_u64().unwrap_or(0);
        assert_eq!(total[field].as_u64(), Some(sum), "{field}: {status}");
    }
    let text = ctx.run_ok(&["status"]);
    assert!(text.contains("uses    2"), "{text}");
    // What an agent reads over MCP, and what the dashboard's page is told
    // while it follows the pod: the same, measured anew.
    let close = |what: &str, shown: u64| {
        let procs = proc_rss(pid);
        assert!(shown.abs_diff(procs) * 10 <= procs, "{what} {shown} bytes, /proc {procs}");
    };
    let mcp = mcp_status(&ctx);
    close("MCP", service(&mcp, "hog")["usage"]["rss-bytes"].as_u64().expect("MCP's usage"));
    let told = ctx.dashboard_told(&status, "usage", |_| true);
    close("the dashboard", told["services"]["hog"]["of"]["rss-bytes"].as_u64().expect("usage"));
    assert!(told["text"].as_str().is_some_and(|t| t.contains(" MiB, ")), "{told}");
    // `ls` asks each running pod: this one's, and the machine's total.
    let listed = ctx.json(&["ls", "--json"]);
    let pod = &listed["pods"][0];
    let held = pod["usage"]["rss-bytes"].as_u64().expect("the pod's usage");
    assert!(held >= 200 * 1024 * 1024, "{listed}");
    assert_eq!(listed["usage"]["rss-bytes"].as_u64(), Some(held), "{listed}");
    // Its age, and when something last happened in it (the hog's line).
    let (started, active) = (&pod["started-at"], &pod["last-activity"]);
    let (started, active) =
        (started.as_str().expect("started-at"), active.as_str().expect("last-activity"));
    assert!(started <= active && active.len() == started.len(), "{listed}");
    assert_eq!(status["started-at"], pod["started-at"], "{status}");
    let text = ctx.run_ok(&["ls"]);
    assert!(text.contains("1 running: 2"), "{text}");
    assert!(text.lines().next().is_some_and(|h| h.contains(" UP  ACTIVE ")), "{text}");
    // A stopped service holds nothing, and says nothing.
    ctx.run_ok(&["stop", "idle"]);
    let status = ctx.json(&["status", "--json"]);
    assert!(service(&status, "idle")["usage"].is_null(), "{status}");
}

/// `stop --all --yes` stops every running pod of the user (two checkouts'
/// here), each once its processes are gone, and says so of none after.
#[test]
fn stop_all_leaves_no_pod_running() {
    let ctx = TestContext::new();
    let mut repos = Vec::new();
    for name in ["one", "two"] {
        let dir = ctx.root.join(name);
        std::fs::create_dir_all(dir.join(".git")).expect("checkout");
        std::fs::write(
            dir.join("omnidev.toml"),
            "[services.idle]\ncommand = [\"sleep\", \"300\"]\ngrace-ms = 1000\n",
        )
        .expect("profile");
        repos.push(dir.to_str().expect("path").to_owned());
    }
    let _stops: Vec<_> =
        (repos.iter()).map(|repo| ctx.stop_on_drop_with(["--repo", repo.as_str()])).collect();
    let mut pids = Vec::new();
    for repo in &repos {
        ctx.run_ok(&["up", "--detach", "--repo", repo]);
        let status = ctx.json(&["status", "--json", "--repo", repo]);
        pids.push(service(&status, "idle")["pid"].as_u64().expect("a pid"));
    }
    let said = ctx.cmd().args(["stop", "--all", "--yes"]).assert().success();
    let said = String::from_utf8_lossy(&said.get_output().stderr).into_owned();
    assert_eq!(said.matches("stopped the pod").count(), 2, "{said}");
    for (repo, pid) in repos.iter().zip(pids) {
        let status = ctx.cmd().args(["status", "--json", "--repo", repo]).assert().code(3);
        let status: serde_json::Value =
            serde_json::from_slice(&status.get_output().stdout).expect("json");
        assert_eq!(status["running"], false, "{status}");
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "{pid} left");
    }
    let said = ctx.cmd().args(["stop", "--all"]).assert().success();
    let said = String::from_utf8_lossy(&said.get_output().stderr).into_owned();
    assert!(said.contains("no pod of yours is running"), "{said}");
}

/// A service over its `memory-max` is killed and told as such (an
/// `over-limit` event and state, not a crash), and restarted with the
/// backoff of a crash; `up` said how the limit is kept here.
#[test]
fn a_service_over_its_memory_max_is_killed_told_so_and_restarted() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.hog]
command = ["python3", "-c", "import time; print('up', flush=True); time.sleep(0.5); b = b'x' * (200 * 1024 * 1024); time.sleep(300)"]
ready = { log = "^up$" }
memory-max = "64MiB"
grace-ms = 1000

[services.idle]
command = ["sleep", "300"]
memory-max = "1GiB"
cpu-max = "50%"
grace-ms = 1000
"#,
    );
    let _stop = ctx.stop_on_drop();
    let said = ctx.run_ok(&["up", "--detach"]);
    let events = || ctx.records();
    common::wait_for("two over-limit kills", std::time::Duration::from_secs(60), || {
        (events().iter()).filter(|e| e["kind"] == "over-limit").count() >= 2
    });
    let events = events();
    let over: Vec<&serde_json::Value> =
        (events.iter()).filter(|e| e["kind"] == "over-limit").collect();
    let first = over[0];
    assert_eq!(first["service"], "hog", "{first}");
    assert_eq!(first["limit-bytes"], 64 << 20, "{first}");
    let used = first["used-bytes"].as_u64().expect("used-bytes");
    assert!(used > 64 << 20, "{first}");
    assert_eq!(first["attempt"], 1, "{first}");
    assert_eq!(over[1]["attempt"], 2, "restarted and killed again: {over:?}");
    assert!(
        !events.iter().any(|e| e["kind"] == "crashed"),
        "a kill over the limit is no crash: {events:?}"
    );
    assert!(
        (events.iter()).any(|e| e["kind"] == "state" && e["state"] == "over-limit"),
        "{events:?}"
    );
    // The other service runs on, under its own limit.
    let status = ctx.json(&["status", "--json"]);
    assert_eq!(service(&status, "idle")["state"], "running", "{status}");
    assert!(service(&status, "hog")["restarts"].as_u64() >= Some(2), "{status}");
    // How each memory limit is kept here was said once, at the start: by
    // the kernel, or by omnidev's own watch.
    let notices: Vec<&str> = (events.iter())
        .filter(|e| e["kind"] == "notice")
        .filter_map(|e| e["message"].as_str())
        .collect();
    let told: Vec<&&str> =
        (notices.iter()).filter(|n| n.starts_with("memory-max of hog, idle: ")).collect();
    assert_eq!(told.len(), 1, "{notices:?} / {said}");
}

/// Over the pod's `memory-max` (its services together), the service that
/// holds the most is the one killed, and the event says the limit was the
/// pod's.
#[test]
fn over_the_pods_memory_max_the_biggest_service_is_killed() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[pod]
memory-max = "150MiB"

[services.big]
command = ["python3", "-c", "import time; b = b'x' * (120 * 1024 * 1024); print('held', flush=True); time.sleep(300)"]
ready = { log = "^held$" }
grace-ms = 1000

[services.small]
command = ["python3", "-c", "import time; b = b'x' * (60 * 1024 * 1024); print('held', flush=True); time.sleep(300)"]
ready = { log = "^held$" }
grace-ms = 1000
"#,
    );
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let over = || -> Vec<serde_json::Value> {
        (ctx.records().into_iter()).filter(|e| e["kind"] == "over-limit").collect()
    };
    common::wait_for("a kill over the pod's limit", std::time::Duration::from_secs(60), || {
        !over().is_empty()
    });
    let first = over()[0].clone();
    assert_eq!(first["service"], "big", "{first}");
    assert_eq!(first["pod-limit"], true, "{first}");
    assert_eq!(first["limit-bytes"], 150 << 20, "{first}");
    assert!(first["used-bytes"].as_u64() > Some(150 << 20), "{first}");
    let status = ctx.json(&["status", "--json"]);
    assert_eq!(service(&status, "small")["restarts"], 0, "{status}");
}

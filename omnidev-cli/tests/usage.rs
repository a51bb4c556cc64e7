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
    // A stopped service holds nothing, and says nothing.
    ctx.run_ok(&["stop", "idle"]);
    let status = ctx.json(&["status", "--json"]);
    assert!(service(&status, "idle")["usage"].is_null(), "{status}");
}

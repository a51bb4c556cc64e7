//! `omnidev attach` as a user runs it: on a pseudo-terminal, attached to a
//! pod started with `up --detach`. Real processes, socket and terminal.

#[path = "support/context.rs"]
mod common;

use std::io::Write as _;
use std::time::Duration;

use common::{Terminal, TestContext, on_pty, service, stderr, wait_for};
use omnidev_test_support::process::{Reaped, wait_exit};
use predicates::prelude::*;
use predicates::str::contains;

const DEADLINE: Duration = Duration::from_secs(30);

/// An app that is ready on its first run only: a restart waits for a
/// readiness that never comes (the pod's restart request waits 300 s).
fn profile(ctx: &TestContext) -> String {
    let ran = ctx.root.join("ran");
    format!(
        r#"[services.app]
command = ["sh", "-c", "if [ -e '{ran}' ]; then echo again; exec sleep 600; fi; touch '{ran}'; echo app up; exec sleep 600"]
ready = {{ log = "app up" }}
grace-ms = 1000
"#,
        ran = ran.display()
    )
}

/// `omnidev attach` on a pseudo-terminal; what it writes is collected.
struct Attached {
    process: Reaped,
    terminal: Terminal,
}

impl Attached {
    /// A plain `std::process::Command` on a pseudo-terminal: attach runs
    /// while the test types into it and reads its screens, which
    /// `assert_cmd` (run to the end on pipes, then assert) cannot do.
    fn start(ctx: &TestContext) -> Self {
        let mut command = ctx.command();
        command.arg("attach");
        let (child, terminal) = on_pty(command, Some((30, 160)), true);
        Self { process: Reaped::new(child), terminal }
    }

    fn written(&self) -> String {
        String::from_utf8_lossy(&self.terminal.written()).into_owned()
    }

    fn key(&mut self, key: &str) {
        self.terminal.master.write_all(key.as_bytes()).expect("type");
    }
}

fn app_pid(ctx: &TestContext) -> Option<u64> {
    let output = ctx.run(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    service(&status, "app")["pid"].as_u64()
}

/// `q` right after `r` leaves at once, the restart still waiting for a
/// readiness that does not come: attach does not wait for its own
/// requests, and the pod keeps running.
#[test]
fn q_leaves_at_once_while_a_restart_is_still_waiting_and_the_pod_runs_on() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(&ctx));
    let _pod = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let before = app_pid(&ctx).expect("the app's pid");

    let mut attached = Attached::start(&ctx);
    let shown = || {
        let written = attached.written();
        // (Blank cells are skipped with cursor moves: a phrase without
        // spaces, or the supervisor's italic line, comes whole.)
        written.contains("app ready") && written.contains("pod keeps running")
    };
    let start = std::time::Instant::now();
    while !shown() && start.elapsed() < DEADLINE {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(shown(), "no attached UI with the app's line:\n{:?}", attached.written());
    // The header tells what the pod's services hold, measured while the
    // UI is open.
    wait_for("the pod's usage in the header", DEADLINE, || {
        let written = attached.written();
        written.contains("uses") && written.contains("MiB,")
    });
    attached.key("1");
    attached.key("r");
    wait_for("the restart to begin (a new app run)", DEADLINE, || {
        app_pid(&ctx).is_some_and(|pid| pid != before)
    });
    attached.key("q");
    let status = wait_exit(&mut attached.process.child, "omnidev attach after q", DEADLINE);
    assert!(status.success(), "{status:?}\n{}", attached.written());
    assert!(
        attached.written().contains("detached; the pod keeps running"),
        "{}",
        attached.written()
    );
    // The pod runs on, its new run untouched by the UI leaving.
    ctx.assert(&["status", "--json"]).success();
    let after = app_pid(&ctx).expect("a pid");
    assert_ne!(after, before);
}

/// Without a terminal attach says what to run instead (exit 1); with no
/// pod running it is exit 3, as for every command that needs one.
#[test]
fn attach_needs_a_terminal_and_a_running_pod() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(&ctx));
    ctx.assert(&["attach"]).code(3);
    let _pod = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let refused = ctx
        .assert(&["attach"])
        .code(1)
        .stderr(contains("needs a terminal").and(contains("omnidev logs -f")));
    TestContext::settings().bind(|| {
        insta::assert_snapshot!("attach_without_a_terminal", ctx.filter(&stderr(&refused)));
    });
}

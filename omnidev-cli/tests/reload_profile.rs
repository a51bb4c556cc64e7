//! A change to the profile file under a running pod: noticed once (a
//! `profile-changed` record naming what changed, or the error with its
//! line and column), applied only by `omnidev reload-profile`, which
//! restarts only the services whose rendered spec changed. Real detached
//! pods of stub services (sh).

#[path = "support/context.rs"]
mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{TestContext, alive, api_and_web as profile, service, service_names, wait_for};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(60);

fn status(ctx: &TestContext) -> Value {
    ctx.json(&["status", "--json"])
}

fn pid_of(status: &Value, name: &str) -> Option<i64> {
    service(status, name)["pid"].as_i64()
}

fn of_kind(records: &[Value], kind: &str) -> Vec<Value> {
    records.iter().filter(|r| r["kind"] == kind).cloned().collect()
}

/// Waits for the `n`th `profile-changed` record and returns it.
fn nth_change(ctx: &TestContext, n: usize) -> Value {
    let mut found = None;
    wait_for(&format!("profile-changed record #{n}"), DEADLINE, || {
        found = of_kind(&ctx.records(), "profile-changed").into_iter().nth(n - 1);
        found.is_some()
    });
    found.expect("found")
}

/// Saves `text` as an editor does: the file truncated and written, then
/// a new copy renamed over it, in one burst.
fn save(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
    let tmp = path.with_extension("toml.swp");
    std::fs::write(&tmp, text).expect("write the copy");
    std::fs::rename(&tmp, path).expect("rename over");
}

/// Runs `omnidev reload-profile --json`, which must exit `code`; its
/// output.
fn reload(ctx: &TestContext, code: i32) -> Output {
    ctx.assert(&["reload-profile", "--json"]).code(code).get_output().clone()
}

fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)))
}

/// A detached pod of [`profile`] `v1` (api and web), stopped when the
/// guard is dropped; the profile file.
fn up_v1(ctx: &TestContext) -> (std::path::PathBuf, common::StopOnDrop<'_>) {
    let file = ctx.write("omnidev.toml", &profile("v1", ""));
    let pod = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    (file, pod)
}

#[test]
fn a_changed_profile_is_noticed_once_and_applied_to_the_changed_service_only() {
    let ctx = TestContext::new();
    let (file, _pod) = up_v1(&ctx);
    let before = status(&ctx);
    let api = pid_of(&before, "api").expect("api runs");
    let web = pid_of(&before, "web").expect("web runs");

    save(&file, &profile("v2", ""));
    let change = nth_change(&ctx, 1);
    assert_eq!(change["changed"], serde_json::json!(["api"]), "{change}");
    assert_eq!(change["added"], serde_json::json!([]), "{change}");
    let message = change["message"].as_str().expect("message");
    assert!(
        message.starts_with("omnidev.toml changed: api (command); run `omnidev reload-profile`"),
        "{message}"
    );
    // Nothing is applied by itself.
    let unchanged = status(&ctx);
    assert_eq!(pid_of(&unchanged, "api"), Some(api), "{unchanged}");

    let applied = report(&reload(&ctx, 0));
    assert_eq!(applied["restarted"], serde_json::json!(["api"]), "{applied}");
    assert_eq!(applied["started"], serde_json::json!([]), "{applied}");
    assert_eq!(applied["message"], "applied omnidev.toml: restarted api", "{applied}");
    let after = status(&ctx);
    let api2 = pid_of(&after, "api").expect("api runs again");
    assert_ne!(api2, api, "{after}");
    assert_eq!(pid_of(&after, "web"), Some(web), "web keeps its process: {after}");
    let log = ctx.run_ok(&["logs", "api", "-n", "1"]);
    assert_eq!(log.trim(), "api v2");
    // Only the save's notice came before the apply.
    let kept = ctx.records();
    assert_eq!(of_kind(&kept, "profile-changed").len(), 1, "{kept:?}");
    assert_eq!(of_kind(&kept, "profile-applied").len(), 1, "{kept:?}");

    // A new service starts; the others keep their processes.
    let worker =
        "\n[services.worker]\ncommand = [\"sh\", \"-c\", \"echo worker up; exec sleep 1000\"]\n";
    save(&file, &profile("v2", worker));
    let change = nth_change(&ctx, 2);
    assert_eq!(change["added"], serde_json::json!(["worker"]), "{change}");
    let applied = report(&reload(&ctx, 0));
    assert_eq!(applied["started"], serde_json::json!(["worker"]), "{applied}");
    assert_eq!(applied["restarted"], serde_json::json!([]), "{applied}");
    let after = status(&ctx);
    assert!(pid_of(&after, "worker").is_some(), "{after}");
    assert_eq!(pid_of(&after, "api"), Some(api2), "{after}");
    assert_eq!(pid_of(&after, "web"), Some(web), "{after}");
    wait_for("worker's log", DEADLINE, || {
        ctx.run(&["logs", "worker", "-n", "1"]).stdout == b"worker up\n"
    });

    // A removed service stops and is no longer the pod's.
    save(&file, &profile("v2", ""));
    nth_change(&ctx, 3);
    let applied = report(&reload(&ctx, 0));
    assert_eq!(applied["stopped"], serde_json::json!(["worker"]), "{applied}");
    // The answer can come while the removed service is still stopping
    // (seen on a busy machine: `stopping pid N: removed from the profile`).
    wait_for("worker to have stopped", DEADLINE, || pid_of(&status(&ctx), "worker").is_none());
    let after = status(&ctx);
    // A removed service stays listed.
    let worker = service(&after, "worker");
    assert_eq!(worker["detail"], "stopped: removed from the profile", "{after}");
    assert_eq!(pid_of(&after, "web"), Some(web), "{after}");
    ctx.assert(&["restart", "worker"]).code(2);

    // A service stopped on request and changed stays stopped; the answer
    // and the event say so alike.
    ctx.run_ok(&["stop", "api"]);
    save(&file, &profile("v3", ""));
    nth_change(&ctx, 4);
    let applied = report(&reload(&ctx, 0));
    assert_eq!(applied["kept-stopped"], serde_json::json!(["api"]), "{applied}");
    assert_eq!(pid_of(&status(&ctx), "api"), None);
    let event = of_kind(&ctx.records(), "profile-applied").pop().expect("event");
    assert_eq!(event["kept-stopped"], applied["kept-stopped"], "{event}");
    assert_eq!(event["message"], applied["message"], "{event}");
}

#[test]
fn an_invalid_profile_is_noticed_with_its_place_and_refused_and_the_pod_runs_on() {
    let ctx = TestContext::new();
    let (file, _pod) = up_v1(&ctx);
    let api = pid_of(&status(&ctx), "api").expect("api runs");

    let broken = profile("v1", "").replace(
        "grace-ms = 1000\n\n[services.web]",
        "grace-ms = 1000\nretsart = \"never\"\n\n[services.web]",
    );
    save(&file, &broken);
    let invalid = nth_change(&ctx, 1);
    let error = invalid["error"].as_str().expect("an error");
    assert!(error.contains("omnidev.toml:5:1: unknown field `retsart`"), "{invalid}");
    let message = invalid["message"].as_str().expect("message");
    assert!(message.starts_with("omnidev.toml changed but cannot be applied: "), "{message}");
    assert!(message.contains("the pod runs on"), "{message}");

    ctx.assert(&["reload-profile"])
        .code(2)
        .stderr(predicates::str::contains("omnidev.toml:5:1: unknown field `retsart`"));
    let running = status(&ctx);
    assert_eq!(running["running"], true, "{running}");
    assert_eq!(pid_of(&running, "api"), Some(api), "{running}");
    assert!(alive(i32::try_from(api).expect("pid")));

    // Fixed: noticed again, and applied.
    save(&file, &profile("v3", ""));
    let fixed = nth_change(&ctx, 2);
    assert!(fixed.get("error").is_none(), "{fixed}");
    assert_eq!(fixed["changed"], serde_json::json!(["api"]), "{fixed}");
    let applied = report(&reload(&ctx, 0));
    assert_eq!(applied["restarted"], serde_json::json!(["api"]), "{applied}");
}

/// A profile left without services (one bad save by an agent) is refused
/// by `reload-profile` with the message `profile check` and `up` give it,
/// and the pod runs on untouched.
#[test]
fn a_profile_without_services_is_refused_as_up_refuses_it() {
    let ctx = TestContext::new();
    let (file, _pod) = up_v1(&ctx);
    let before = status(&ctx);
    let api = pid_of(&before, "api").expect("api runs");
    let web = pid_of(&before, "web").expect("web runs");

    save(&file, "# every service deleted\n[ports]\n");
    let said = "no service left to run: the profile defines no service";
    ctx.assert(&["profile", "check"]).code(1).stderr(predicates::str::contains(said));
    ctx.assert(&["reload-profile"]).code(2).stderr(predicates::str::contains(said));
    let after = status(&ctx);
    assert_eq!(after["running"], true, "{after}");
    assert_eq!(pid_of(&after, "api"), Some(api), "{after}");
    assert_eq!(pid_of(&after, "web"), Some(web), "{after}");
    assert!(alive(i32::try_from(api).expect("pid")));
}

/// The descriptors the supervisor process `pid` holds.
fn descriptors(pid: i64) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).expect("the supervisor's descriptors").count()
}

/// Services added by `reload-profile` and removed by the next one give
/// back what they held: three rounds of 200 (new names each round) leave
/// the supervisor with the descriptors it had before them.
#[test]
fn services_added_and_removed_leave_no_descriptor_behind() {
    const ADDED: usize = 200;
    let ctx = TestContext::new();
    let base = "[services.web]\ncommand = [\"sleep\", \"300\"]\ngrace-ms = 1000\n";
    let file = ctx.write("omnidev.toml", base);
    let _pod = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let supervisor = status(&ctx)["pid"].as_i64().expect("the supervisor's pid");
    let before = descriptors(supervisor);
    for round in 0..3 {
        let mut grown = base.to_owned();
        for i in 0..ADDED {
            let _ = write!(
                grown,
                "\n[services.r{round}-{i}]\ncommand = [\"sleep\", \"300\"]\ngrace-ms = 1000\n"
            );
        }
        save(&file, &grown);
        let added = report(&reload(&ctx, 0));
        assert_eq!(added["started"].as_array().map(Vec::len), Some(ADDED), "{added}");
        save(&file, base);
        let removed = report(&reload(&ctx, 0));
        assert_eq!(removed["stopped"].as_array().map(Vec::len), Some(ADDED), "{removed}");
        let mut now = 0;
        wait_for(&format!("round {round}: the descriptors back to {before}"), DEADLINE, || {
            now = descriptors(supervisor);
            now <= before
        });
    }
    let running = status(&ctx);
    assert!(pid_of(&running, "web").is_some(), "{running}");
}

/// A profile file replaced by a huge file, by a link to a FIFO or to a
/// directory: a notice each, with the path and why, and the pod runs on;
/// a link to a profile elsewhere is followed, and edits of what it names
/// are noticed too.
#[test]
fn hostile_profile_files_are_notices_and_a_link_is_followed() {
    let ctx = TestContext::new();
    let (file, _pod) = up_v1(&ctx);
    let api = pid_of(&status(&ctx), "api").expect("api runs");
    let error_of = |n| {
        let change = nth_change(&ctx, n);
        change["error"].as_str().unwrap_or_else(|| panic!("no error in {change}")).to_owned()
    };

    // 2 MiB of comments: refused without reading it all.
    save(&file, &"#".repeat(2 * 1024 * 1024));
    let error = error_of(1);
    assert!(error.contains("larger than 1048576 bytes"), "{error}");

    // A link to a FIFO: refused at once, never a read that blocks.
    let elsewhere = ctx.root.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let fifo = elsewhere.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let link = |to: &Path| {
        std::fs::remove_file(&file).expect("remove");
        std::os::unix::fs::symlink(to, &file).expect("symlink");
    };
    link(&fifo);
    let error = error_of(2);
    assert!(error.contains(&format!("{}: it is not a regular file", fifo.display())), "{error}");

    // A link to a directory.
    link(&elsewhere);
    let error = error_of(3);
    assert!(
        error.contains(&format!("{}: it is not a regular file", elsewhere.display())),
        "{error}"
    );

    // A link to a profile kept elsewhere is followed, and so are edits of
    // what it names.
    let kept = elsewhere.join("dev.toml");
    std::fs::write(&kept, profile("v2", "")).expect("write");
    link(&kept);
    let change = nth_change(&ctx, 4);
    assert_eq!(change["changed"], serde_json::json!(["api"]), "{change}");
    save(&kept, &profile("v3", "\n[services.worker]\ncommand = [\"sleep\", \"1000\"]\n"));
    let change = nth_change(&ctx, 5);
    assert_eq!(change["added"], serde_json::json!(["worker"]), "{change}");

    let running = status(&ctx);
    assert_eq!(running["running"], true, "{running}");
    assert_eq!(pid_of(&running, "api"), Some(api), "{running}");
    let applied = report(&reload(&ctx, 0));
    assert_eq!(applied["restarted"], serde_json::json!(["api"]), "{applied}");
    assert_eq!(applied["started"], serde_json::json!(["worker"]), "{applied}");
}

/// The port `web` has in `status`, and one of `bases` that is not it (a
/// busy base is probed up) for the profile to move web's base to.
fn web_port_and_another(status: &Value, bases: &[u16]) -> (u64, u16) {
    let port = status["ports"]["web"].as_u64().expect("web's port");
    let other = bases.iter().copied().find(|&b| u64::from(b) != port).expect("another base");
    (port, other)
}

/// A port whose base the profile moves is noticed as a change of the
/// services using it (they would be restarted on a port probed from the
/// new base), and applying it does so; the other service keeps its
/// process.
#[test]
fn a_moved_port_base_is_a_change_of_its_services() {
    let ctx = TestContext::new();
    let bases = omnidev_test_support::free_ports(2);
    let with_base = |base: u16| {
        format!(
            r#"
[ports]
web = {base}

[services.api]
command = ["sh", "-c", "echo api up; exec sleep 1000"]
grace-ms = 1000

[services.web]
command = ["sh", "-c", "echo web on {{port.web}}; exec sleep 1000"]
grace-ms = 1000
"#
        )
    };
    let file = ctx.write("omnidev.toml", &with_base(bases[0]));
    let _pod = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let before = status(&ctx);
    let (port, base) = web_port_and_another(&before, &bases);
    let api = pid_of(&before, "api").expect("api runs");
    let web = pid_of(&before, "web").expect("web runs");

    save(&file, &with_base(base));
    let change = nth_change(&ctx, 1);
    assert_eq!(change["changed"], serde_json::json!(["web"]), "{change}");
    assert_eq!(
        change["message"],
        "omnidev.toml changed: web (command); run `omnidev reload-profile` to apply",
        "{change}"
    );

    let applied = report(&reload(&ctx, 0));
    assert_eq!(applied["restarted"], serde_json::json!(["web"]), "{applied}");
    let after = status(&ctx);
    let moved = after["ports"]["web"].as_u64().expect("web's port");
    assert!(moved >= u64::from(base) && moved != port, "{after}");
    assert_ne!(pid_of(&after, "web"), Some(web), "{after}");
    assert_eq!(pid_of(&after, "api"), Some(api), "{after}");
    wait_for("web on its new port", DEADLINE, || {
        ctx.run(&["logs", "web", "-n", "1"]).stdout == format!("web on {moved}\n").as_bytes()
    });
}

/// While `reload-profile` waits for a restarted service to be ready, the
/// pod already shows the ports of the profile it applied (the service
/// runs on them; a port it loses meanwhile is moved from them).
#[test]
fn the_applied_ports_are_shown_while_the_reload_waits() {
    let ctx = TestContext::new();
    let bases = omnidev_test_support::free_ports(2);
    let with = |base: u16, ready: &str| {
        format!(
            r#"
[ports]
web = {base}

[services.web]
command = ["sh", "-c", "echo web on {{port.web}}; exec sleep 1000"]
ready = {{ log = "{ready}" }}
grace-ms = 1000
"#
        )
    };
    let file = ctx.write("omnidev.toml", &with(bases[0], "web on"));
    let _pod = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let (port, base) = web_port_and_another(&status(&ctx), &bases);

    // The new run is never ready: the reload waits until it is killed.
    save(&file, &with(base, "never printed"));
    nth_change(&ctx, 1);
    let mut reload = omnidev_test_support::process::Reaped::new(
        ctx.command()
            .args(["reload-profile", "--timeout", "600"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn reload-profile"),
    );
    let mut shown = 0;
    wait_for("the applied port in status", DEADLINE, || {
        shown = status(&ctx)["ports"]["web"].as_u64().unwrap_or(0);
        shown != port
    });
    assert!(shown >= u64::from(base), "web on {shown}");
    assert!(
        reload.child.try_wait().expect("try_wait").is_none(),
        "reload-profile still waits for web"
    );
    wait_for("web on its new port", DEADLINE, || {
        ctx.run(&["logs", "web", "-n", "1"]).stdout == format!("web on {shown}\n").as_bytes()
    });
}

/// A profile that adds a replica a service depends on: the new `web.3`
/// is started after `client` in the pod's own order but before it in start
/// order, and the reload is answered as soon as both are ready (it once
/// waited out its whole timeout, judging one by the other's start count);
/// `restart` alone then restarts the new replica too.
#[test]
fn an_added_replica_its_dependent_waits_for_is_answered_once_ready() {
    let ctx = TestContext::new();
    let text = |replicas: u32| {
        format!(
            "[services.web]\ncommand = [\"sleep\", \"300\"]\nreplicas = {replicas}\ngrace-ms = 1000\n\n\
             [services.client]\ncommand = [\"sleep\", \"300\"]\ndepends-on = {{ web = \"started\" }}\n\
             grace-ms = 1000\n"
        )
    };
    let file = ctx.write("omnidev.toml", &text(2));
    let _pod = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    save(&file, &text(3));
    let started = std::time::Instant::now();
    let output =
        ctx.assert(&["reload-profile", "--json", "--timeout", "30"]).code(0).get_output().clone();
    let report = report(&output);
    assert_eq!(report["started"], serde_json::json!(["web.3"]), "{report}");
    assert!(started.elapsed() < Duration::from_secs(25), "{report}");
    let names = service_names(&report["status"]);
    assert_eq!(names, ["web.1", "web.2", "web.3", "client"]);
    // What `restart` alone restarts follows the applied profile.
    assert_eq!(
        report["status"]["watched"],
        serde_json::json!(["web.1", "web.2", "web.3", "client"]),
        "{report}"
    );
}

/// Scaling down from three replicas to one stops `web.2` and `web.3`
/// only: `web.1` keeps its process throughout (it once stopped all three
/// and started a fresh `web`).
#[test]
fn scaling_down_stops_only_the_replicas_that_go() {
    let ctx = TestContext::new();
    let text = |replicas: u32| {
        format!(
            "[services.web]\ncommand = [\"sleep\", \"300\"]\nreplicas = {replicas}\ngrace-ms = 1000\n"
        )
    };
    let file = ctx.write("omnidev.toml", &text(3));
    let _pod = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let before = ctx.json(&["status", "--json"]);
    let pid = |status: &Value, name: &str| service(status, name)["pid"].as_u64().expect("a pid");
    let (one, two) = (pid(&before, "web.1"), pid(&before, "web.2"));
    save(&file, &text(1));
    let report = report(&reload(&ctx, 0));
    assert_eq!(report["stopped"], serde_json::json!(["web.2", "web.3"]), "{report}");
    assert_eq!(report["restarted"], serde_json::json!([]), "{report}");
    assert_eq!(pid(&report["status"], "web.1"), one, "web.1 kept: {report}");
    assert!(alive(one as i32), "{report}");
    wait_for("web.2 gone", DEADLINE, || !alive(two as i32));
}

/// `omnidev profile check`, `omnidev up` and `omnidev reload-profile`
/// (of a pod running a good profile) accept and refuse the same profiles:
/// they share one list of checks (`Profile::check_run`, then the render).
#[test]
fn profile_check_up_and_reload_agree_on_every_profile() {
    let ctx = TestContext::new();
    let good = "[services.api]\ncommand = [\"sleep\", \"300\"]\n";
    let root = nix::unistd::geteuid().is_root();
    let cases: &[(&str, String, bool)] = &[
        ("a good profile", good.to_owned(), true),
        ("an unknown key", format!("{good}retsart = \"never\"\n"), false),
        (
            "a dependency loop",
            "[services.a]\ncommand = [\"sleep\", \"300\"]\ndepends-on = { b = \"ready\" }\n\
             [services.b]\ncommand = [\"sleep\", \"300\"]\ndepends-on = { a = \"ready\" }\n"
                .to_owned(),
            false,
        ),
        (
            "an unknown placeholder",
            "[services.api]\ncommand = [\"sleep\", \"{port.nope}\"]\n".to_owned(),
            false,
        ),
        ("a missing repo marker", format!("[repo]\nmarkers = [\"not-here\"]\n\n{good}"), false),
        (
            "a package.json that does not parse",
            "[services.web]\nscript = \"dev\"\ncwd = \"web\"\n".to_owned(),
            false,
        ),
        (
            "a link to a checkout that is not there",
            format!("[links.api]\ncheckout = \"../not-here\"\n\n{good}"),
            false,
        ),
        // A server database runs as any user but root.
        (
            "a Postgres database",
            format!("[databases.main]\nengine = \"postgres\"\n\n{good}"),
            !root,
        ),
    ];
    ctx.write("web/package.json", "{ not json");
    let ok = |args: &[&str]| ctx.run(args).status.success();
    let mut verdicts = Vec::new();
    for (what, text, accepted) in cases {
        ctx.write("omnidev.toml", text);
        let checked = ok(&["profile", "check"]);
        let started = ok(&["up", "--detach", "--ready-timeout", "30"]);
        if started {
            ctx.run_ok(&["stop"]);
        }
        ctx.write("omnidev.toml", good);
        ctx.run_ok(&["up", "--detach"]);
        ctx.write("omnidev.toml", text);
        let reloaded = ok(&["reload-profile"]);
        ctx.run_ok(&["stop"]);
        verdicts.push(format!(
            "{what}: check {checked}, up {started}, reload {reloaded}, expected {accepted}"
        ));
        assert!(
            checked == *accepted && started == *accepted && reloaded == *accepted,
            "{verdicts:#?}"
        );
    }
}

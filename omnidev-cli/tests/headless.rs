//! Headless runs of stub services: output format, the exit rule, signals
//! leaving no process behind, and `omnidev run`.

#[path = "support/context.rs"]
mod common;

use std::io::Read;
use std::time::Duration;

use common::{Signal, TestContext, alive, read_pids, signal, stdout, wait_for};
use omnidev_test_support::Lines;
use predicates::prelude::*;
use predicates::str::contains;

const ONE_SHOTS: &str = r#"
[services.greeter]
command = ["sh", "-c", "echo hello; echo world >&2"]
restart = "never"

[services.py]
command = ["python3", "-c", "print('from python')"]
restart = "never"
depends-on = { greeter = "started" }
"#;

#[test]
fn one_shot_services_print_and_exit_0() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", ONE_SHOTS);
    ctx.assert(&["--headless"]).success().stdout(
        contains("greeter | hello")
            .and(contains("greeter | world"))
            .and(contains("py      | from python"))
            .and(contains("omnidev | pod "))
            // No colour: not a terminal and NO_COLOR set.
            .and(contains("\x1b").not()),
    );
}

/// `--timestamps` (or `[pod] timestamps = true`) starts every line, the
/// services' and omnidev's own, with the local time it was read.
#[test]
fn timestamps_start_every_line_with_the_local_time() {
    let ctx = TestContext::new();
    let seconds_of_day = || {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
        now.as_secs() % 86_400
    };
    for (profile, args) in [
        (ONE_SHOTS.to_owned(), &["--headless", "--timestamps"][..]),
        (format!("[pod]\ntimestamps = true\n{ONE_SHOTS}"), &["--headless"][..]),
    ] {
        ctx.write("omnidev.toml", &profile);
        let before = seconds_of_day();
        // Local time is UTC here, so the stamp can be checked.
        let out = ctx.cmd().args(args).env("TZ", "UTC").output().expect("run");
        let after = seconds_of_day();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            let (stamp, rest) = line.split_at_checked(9).expect("a stamp");
            let parts: Vec<u64> =
                stamp.trim_end().split(':').map(|p| p.parse().expect("a number")).collect();
            let [h, m, s] = parts[..] else { panic!("not HH:MM:SS: {line}") };
            let at = h * 3600 + m * 60 + s;
            // (Across midnight, any time of day will do.)
            assert!(
                after < before || (before..=after).contains(&at),
                "{line}: not between {before} and {after}"
            );
            assert!(stamp.ends_with(' ') && !rest.starts_with(' '), "{line}");
        }
        assert!(text.contains(" greeter | hello\n"), "{text}");
        assert!(text.contains(" omnidev | pod "), "{text}");
    }
}

#[test]
fn a_failing_one_shot_service_exits_1() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.ok]
command = ["true"]
restart = "never"

[services.bad]
command = ["sh", "-c", "echo failing; exit 3"]
restart = "never"
"#,
    );
    let stdout = stdout(&ctx.assert(&["--headless"]).code(1));
    assert!(stdout.contains("bad     | failing"), "{stdout}");
    // One line per exit: the crash, not also an `exited` line after it.
    assert_eq!(stdout.matches("bad crashed (exit code 3); not restarting").count(), 1, "{stdout}");
    assert!(!stdout.contains("bad exited"), "{stdout}");
    // A clean one-shot exit is reported as an exit, never as a crash.
    assert!(stdout.contains("ok exited (exit code 0)"), "{stdout}");
    assert!(!stdout.contains("ok crashed"), "{stdout}");
}

#[test]
fn only_and_skip_select_services() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", ONE_SHOTS);
    // Runs headless with `args`, which must exit `code`; what it printed
    // (stdout and stderr).
    let run = |args: &[&str], code: i32| {
        let assert = ctx.cmd().arg("--headless").args(args).assert().code(code);
        ctx.render(assert.get_output())
    };
    // --skip alone, then combined with --only (the skip applied after it).
    for args in
        [&["--skip", "greeter"][..], &["--only", "greeter", "--only", "py", "--skip", "greeter"]]
    {
        let text = run(args, 0);
        assert!(!text.contains("hello"), "{args:?}: {text}");
        assert!(text.contains("from python"), "{args:?}: {text}");
    }
    let text = run(&["--skip", "greeter", "--only", "greeter"], 1);
    assert!(text.contains("no service left to run"), "{text}");
    // An unknown name is a usage error, as documented.
    let text = run(&["--only", "nope"], 2);
    assert!(text.contains("nope"), "{text}");
}

/// Each service forks grandchildren and records every pid it started.
fn forking_profile(ctx: &TestContext) -> std::path::PathBuf {
    let pids = ctx.root.join("pids");
    std::fs::create_dir_all(&pids).expect("mkdir");
    let script = |name: &str| {
        format!(
            "echo $$ > {dir}/{name}; sleep 300 & echo $! >> {dir}/{name}; \
             (sleep 300 & echo $! >> {dir}/{name}; wait) & wait",
            dir = pids.display()
        )
    };
    ctx.write(
        "omnidev.toml",
        &format!(
            r#"
[services.alpha]
command = ["sh", "-c", "{a}"]
grace-ms = 2000

[services.beta]
command = ["python3", "-c", "import subprocess, os, time; p = subprocess.Popen(['sleep', '300']); open('{dir}/beta', 'w').write('%d %d' % (os.getpid(), p.pid)); time.sleep(300)"]
grace-ms = 2000
depends-on = {{ alpha = "started" }}
"#,
            a = script("alpha"),
            dir = pids.display()
        ),
    );
    pids
}

fn signal_leaves_nothing_behind(sent: Signal, name: &str) {
    let ctx = TestContext::new();
    let pids_dir = forking_profile(&ctx);
    let mut child = ctx.spawn(&["--headless"]);
    wait_for("every service to record its pids", Duration::from_secs(20), || {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("omnidev exited early ({status}): {err}");
        }
        read_pids(&pids_dir).len() >= 5
    });
    let pids = read_pids(&pids_dir);
    assert!(pids.iter().all(|p| alive(*p)), "{pids:?}");
    signal(child.id(), sent);
    let mut done = None;
    wait_for("omnidev to exit", Duration::from_secs(20), || {
        done = child.try_wait().expect("try_wait");
        done.is_some()
    });
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    assert_eq!(done.and_then(|s| s.code()), Some(0), "{stdout}");
    assert!(
        stdout.contains(&format!("omnidev | stopping the pod ({name})")),
        "the signal is told as a sentence: {stdout}"
    );
    // The supervisor has reaped its groups before exiting; give the
    // grandchildren's last reaping (by init) a moment as a condition.
    wait_for("every pod process to be gone", Duration::from_secs(5), || {
        pids.iter().all(|p| !alive(*p))
    });
}

#[test]
fn sigint_leaves_no_process_behind() {
    signal_leaves_nothing_behind(Signal::SIGINT, "SIGINT");
}

#[test]
fn sigterm_leaves_no_process_behind() {
    signal_leaves_nothing_behind(Signal::SIGTERM, "SIGTERM");
}

#[test]
fn sighup_leaves_no_process_behind() {
    signal_leaves_nothing_behind(Signal::SIGHUP, "SIGHUP");
}

/// A profile whose service ignores SIGTERM and starts five helpers that
/// ignore it too (same group, double fork, `setsid`, double fork +
/// `setsid`, `setpgid(0, 0)`); each helper appends its pid to `file`.
fn escaping_helpers_profile(ctx: &TestContext, file: &std::path::Path) {
    let script = format!(
        r#"trap '' TERM
sleep 1000 & echo $! >> {f}
sh -c 'sleep 1000 & echo $! >> {f}' &
setsid sh -c 'echo $$ >> {f}; exec sleep 1000' &
sh -c "setsid sh -c 'echo \$\$ >> {f}; exec sleep 1000' &" &
python3 -c 'import os; os.setpgid(0, 0); os.execvp("sleep", ["sleep", "1000"])' & echo $! >> {f}
wait
"#,
        f = file.display()
    );
    ctx.write("helpers.sh", &script);
    ctx.write(
        "omnidev.toml",
        "[services.svc]\ncommand = [\"sh\", \"helpers.sh\"]\ngrace-ms = 500\n",
    );
}

/// The five helpers' pids once all run `sleep`.
fn helper_pids(file: &std::path::Path) -> Vec<i32> {
    let mut pids = Vec::new();
    wait_for("five helpers", Duration::from_secs(30), || {
        pids = std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        pids.len() == 5
            && pids.iter().all(|p| {
                u32::try_from(*p)
                    .ok()
                    .and_then(omnidev_core::platform::name)
                    .is_some_and(|name| name == "sleep")
            })
    });
    pids
}

fn guard_pid(ctx: &TestContext) -> i32 {
    let mut guard = None;
    wait_for("state.json with the guard", Duration::from_secs(30), || {
        guard = ctx
            .pod_dir()
            .and_then(|dir| std::fs::read_to_string(dir.join("state.json")).ok())
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|state| state["guard-pid"].as_i64());
        guard.is_some()
    });
    i32::try_from(guard.expect("guard pid")).expect("pid")
}

#[test]
fn sigterm_and_kill_9_leave_none_of_five_escaping_helpers() {
    let ctx = TestContext::new();
    let file = ctx.root.join("helpers");
    escaping_helpers_profile(&ctx, &file);

    // SIGTERM to the CLI: omnidev exits once every helper is gone.
    let mut pod = ctx.spawn(&["--headless"]);
    let helpers = helper_pids(&file);
    signal(pod.id(), Signal::SIGTERM);
    let status = pod.wait().expect("wait");
    assert_eq!(status.code(), Some(0));
    wait_for("no helper left after SIGTERM", Duration::from_secs(2), || {
        helpers.iter().all(|p| !alive(*p))
    });

    // kill -9 of omnidev: the guard kills them.
    std::fs::remove_file(&file).expect("reset");
    let mut pod = ctx.spawn(&["--headless"]);
    let helpers = helper_pids(&file);
    let guard = guard_pid(&ctx);
    pod.kill().expect("kill -9");
    pod.wait().expect("reap");
    wait_for("no helper left after kill -9", Duration::from_secs(2), || {
        helpers.iter().all(|p| !alive(*p))
    });
    wait_for("the guard to exit", Duration::from_secs(10), || !alive(guard));

    // kill -9 of omnidev and its guard together: the next `up` in the same
    // checkout stops what they left before it starts anything.
    std::fs::remove_file(&file).expect("reset");
    let mut pod = ctx.spawn(&["--headless"]);
    let helpers = helper_pids(&file);
    let guard = guard_pid(&ctx);
    // omnidev is stopped first: running, it would see its guard die and
    // start another (or stop the pod) before its own SIGKILL arrived.
    signal(pod.id(), Signal::SIGSTOP);
    signal(guard.unsigned_abs(), Signal::SIGKILL);
    pod.kill().expect("kill -9");
    pod.wait().expect("reap");
    wait_for("the guard gone", Duration::from_secs(10), || !alive(guard));
    assert!(helpers.iter().all(|p| alive(*p)), "nothing killed them yet");
    std::fs::remove_file(&file).expect("reset");
    let mut next = ctx.spawn(&["--headless"]);
    let next_helpers = helper_pids(&file);
    assert!(helpers.iter().all(|p| !alive(*p)), "the next up stopped them");
    signal(next.id(), Signal::SIGTERM);
    assert_eq!(next.wait().expect("wait").code(), Some(0));
    wait_for("no helper of the next run left", Duration::from_secs(2), || {
        next_helpers.iter().all(|p| !alive(*p))
    });
}

#[test]
fn a_second_sigint_skips_a_30_second_grace() {
    let ctx = TestContext::new();
    let pids = ctx.root.join("stubborn.pids");
    ctx.write(
        "omnidev.toml",
        &format!(
            r#"
[services.stubborn]
command = ["sh", "-c", "trap '' TERM INT; sleep 300 & echo $! > {pids}; wait"]
grace-ms = 30000
"#,
            pids = pids.display()
        ),
    );
    let mut child = ctx.spawn(&["--headless"]);
    let mut stdout = Lines::new(child.stdout.take().expect("stdout"));
    wait_for("the service to run", Duration::from_secs(20), || {
        std::fs::read_to_string(&pids).is_ok_and(|t| !t.trim().is_empty())
    });
    let helper: i32 = std::fs::read_to_string(&pids).expect("pids").trim().parse().expect("pid");
    signal(child.id(), Signal::SIGINT);
    // The first SIGINT was taken: the shutdown began, and now waits out
    // the grace of a service that ignores SIGTERM.
    stdout.wait_for("the shutdown to begin", Duration::from_secs(20), |line| {
        line.contains("stopping the pod (SIGINT)")
    });
    stdout.wait_for("the service to be stopping", Duration::from_secs(20), |line| {
        line.contains("stubborn stopping")
    });
    assert!(child.try_wait().expect("try_wait").is_none(), "still in its grace");
    let second = std::time::Instant::now();
    signal(child.id(), Signal::SIGINT);
    let mut done = None;
    wait_for("omnidev to exit", Duration::from_secs(20), || {
        done = child.try_wait().expect("try_wait");
        done.is_some()
    });
    let took = second.elapsed();
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    assert_eq!(done.and_then(|s| s.code()), Some(0), "{stderr}");
    assert!(stderr.contains("killing every process now"), "{stderr}");
    // Far below the 30 s grace (the target is < 1 s, see `cargo xtask bench`).
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(!alive(helper));
}

#[test]
fn exec_uses_persisted_ports_and_never_rewrites_pod_toml() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[ports]
api = 23456

[env]
API_URL = "http://127.0.0.1:{port.api}"

[services.sleeper]
command = ["sleep", "300"]
grace-ms = 1000
"#,
    );
    // Before any run, exec allocates the ports once and records them.
    let first = ctx.assert(&["exec", "--", "sh", "-c", "echo $API_URL"]).success();
    let pod_toml = ctx.pod_dir().expect("pod dir").join("pod.toml");
    let written = std::fs::read(&pod_toml).expect("exec wrote pod.toml");
    ctx.assert(&["exec", "--", "sh", "-c", "echo $API_URL"])
        .stdout(first.get_output().stdout.clone());
    assert_eq!(std::fs::read(&pod_toml).expect("pod.toml"), written);

    let mut pod = ctx.spawn(&["--headless"]);
    wait_for("the pod to start", Duration::from_secs(20), || {
        ctx.pod_dir().is_some_and(|p| p.join("state.json").exists())
    });
    let before = std::fs::read(&pod_toml).expect("pod.toml");
    // `up` kept the ports exec recorded.
    assert_eq!(before, written);
    let mtime = std::fs::metadata(&pod_toml).and_then(|m| m.modified()).expect("mtime");
    let record: toml::Table = toml::from_str(&String::from_utf8_lossy(&before)).expect("toml");
    let port = record["ports"]["api"].as_integer().expect("api port");

    // Run now, asserted once the pod is stopped (a failed assertion must
    // not leave it running).
    let exec = ctx.assert(&["exec", "--", "sh", "-c", "echo $API_URL; exit 7"]);
    let omnigent =
        ctx.cmd().args(["omnigent", "--version"]).env("PATH", ctx.root.join("no-bin")).assert();
    signal(pod.id(), Signal::SIGTERM);
    let _ = pod.wait();

    exec.code(7).stdout(predicates::str::diff(format!("http://127.0.0.1:{port}")).trim());
    assert_eq!(std::fs::read(&pod_toml).expect("pod.toml"), before);
    assert_eq!(std::fs::metadata(&pod_toml).and_then(|m| m.modified()).expect("mtime"), mtime);
    // `omnigent` runs `uv run omnigent …`; with no uv on PATH that is a
    // clear spawn error naming uv.
    omnigent.code(1).stderr(contains("uv"));
}

/// A prompt without a newline that the service never finishes (it is
/// stopped first) is not lost: headless prints it and the log file keeps
/// it, as a line of its own.
#[test]
fn a_line_without_its_newline_is_kept_when_the_service_is_stopped() {
    let ctx = TestContext::new();
    let ready = ctx.root.join("prompted");
    ctx.write(
        "omnidev.toml",
        &format!(
            "[services.app]\ncommand = [\"sh\", \"-c\", \"printf 'Password: '; touch {}; exec sleep 300\"]\n",
            ready.display()
        ),
    );
    let child = ctx.spawn(&["--headless"]);
    wait_for("the prompt", Duration::from_secs(20), || ready.exists());
    signal(child.id(), Signal::SIGTERM);
    let output = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("app     | Password: \n"), "{stdout}");
    let log = ctx.pod_dir().expect("pod").join("logs/app.log");
    assert_eq!(std::fs::read_to_string(log).expect("log"), "Password: \n");
}

/// A progress bar redrawn with `\r` is one line, its last redraw, in
/// headless output and in the log file; a prompt a service leaves
/// unfinished when it is killed (SIGKILL, by itself) is printed and kept
/// before its crash is told.
#[test]
fn a_progress_bar_is_one_line_and_a_killed_services_last_words_are_kept() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.bar]
command = ["sh", "-c", "for p in 10 20 30 40 50 60 70 80 90; do printf '%s%%\r' $p; sleep 0.05; done; printf '100%%\n'"]
restart = "never"

[services.killed]
command = ["sh", "-c", "printf 'last words'; sleep 0.5; kill -9 $$"]
restart = "never"
"#,
    );
    let stdout = stdout(&ctx.assert(&["--headless"]).code(1));
    let bar: Vec<&str> = stdout.lines().filter(|l| l.starts_with("bar ")).collect();
    assert_eq!(bar, ["bar     | 100%"], "{stdout}");
    let said = stdout.find("killed  | last words\n");
    let crashed = stdout.find("killed crashed (signal 9)");
    assert!(said.is_some() && said < crashed, "its last words before its crash: {stdout}");
    let logs = ctx.pod_dir().expect("pod").join("logs");
    assert_eq!(std::fs::read_to_string(logs.join("bar.log")).expect("log"), "100%\n");
    assert_eq!(std::fs::read_to_string(logs.join("killed.log")).expect("log"), "last words\n");
}

/// The processes carrying the service id `id` (its own, the helpers').
fn carrying(id: &str) -> Vec<u32> {
    omnidev_core::platform::pids()
        .into_iter()
        .filter(|pid| {
            omnidev_core::platform::env_var(*pid, "OMNIDEV_SERVICE_ID").as_deref() == Some(id)
                && !omnidev_core::platform::stat(*pid).is_some_and(|s| s.is_zombie())
        })
        .collect()
}

/// A stopped guard could kill nothing: it is noticed (the SIGCHLD of its
/// stop), killed and replaced like a dead one, so a kill -9 of omnidev
/// afterwards still leaves no service process.
#[test]
fn a_stopped_guard_is_replaced_and_kill_9_then_leaves_nothing() {
    let ctx = TestContext::new();
    let file = ctx.root.join("helpers");
    escaping_helpers_profile(&ctx, &file);
    let mut pod = ctx.spawn(&["--headless"]);
    let helpers = helper_pids(&file);
    let old = guard_pid(&ctx);
    let state = ctx.pod_dir().expect("pod").join("state.json");
    let id = {
        let text = std::fs::read_to_string(&state).expect("state.json");
        let state: serde_json::Value = serde_json::from_str(&text).expect("json");
        state["services"]["svc"]["service-id"].as_str().expect("service id").to_owned()
    };
    assert!(carrying(&id).len() >= helpers.len(), "{:?}", carrying(&id));
    signal(old.unsigned_abs(), Signal::SIGSTOP);
    wait_for("a new guard", Duration::from_secs(30), || guard_pid(&ctx) != old);
    wait_for("the stopped guard gone", Duration::from_secs(10), || !alive(old));
    pod.kill().expect("kill -9");
    pod.wait().expect("reap");
    wait_for("no service process left", Duration::from_secs(5), || carrying(&id).is_empty());
}

#[test]
fn stopping_the_only_long_running_service_leaves_a_headless_pod_running() {
    // Heroku's shape: a `release` one-shot beside `web`.
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
    let mut child = ctx.spawn(&["--headless"]);
    let state = |name: &str| {
        let status = ctx.run(&["status", "--json"]);
        // Before the pod answers, its services are not listed yet.
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap_or_default();
        status["services"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["name"] == name))
            .map(|s| s["state"].clone())
            .unwrap_or_default()
    };
    let deadline = Duration::from_secs(60);
    wait_for("release exited and web running", deadline, || {
        state("release") == "exited" && state("web") == "running"
    });
    ctx.run_ok(&["stop", "web"]);
    assert_eq!(state("web"), "stopped");
    // Every service has ended, one on request: the pod waits to be told.
    std::thread::sleep(Duration::from_secs(1));
    assert!(child.try_wait().expect("try_wait").is_none(), "the pod ended when web was stopped");
    ctx.run_ok(&["start", "web"]);
    assert_eq!(state("web"), "running");
    ctx.run_ok(&["stop"]);
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status}");
}

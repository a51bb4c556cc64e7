//! Tests that run the example binaries as separate supervisor processes:
//! orphan protection when the supervisor is SIGKILLed, containment of
//! helpers that leave their service's group and session, and bounded
//! memory when a child writes 200 MB without a newline.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use omnidev_core::platform;
use omnidev_core::process::{group_alive, pid_alive};
use omnidev_test_support::process::{Signal, signal, try_signal};

/// The example binary `name`, built (once per test run) by cargo: a run
/// filtered to this test target does not rebuild examples, and a stale one
/// would test old code.
fn example(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let exe = std::env::current_exe().expect("test exe");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let path = profile_dir.join("examples").join(name);
    let mut built = BUILT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !built.iter().any(|b| b == name) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "omnidev-core", "--example", name])
            .status()
            .expect("run cargo");
        assert!(status.success(), "building example {name}");
        built.push(name.to_owned());
    }
    path
}

fn wait_until(what: &str, limit: Duration, condition: impl FnMut() -> bool) {
    omnidev_test_support::poll_until(what, limit, condition);
}

#[test]
fn sigkilled_supervisor_leaves_no_process_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state.json");
    // Each service's shell has grandchildren (one with a child of its own)
    // and records their pids.
    let service = |n: &str| {
        format!(
            "{n}=sleep 1000 & echo $! > {n}.pids; sh -c 'sleep 1000 & wait' & echo $! >> {n}.pids; wait"
        )
    };
    let mut supervisor = Command::new(example("supervise"))
        .current_dir(dir.path())
        .arg("--state")
        .arg(&state)
        .arg("--")
        .args([service("one"), service("two")])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn supervise");
    let pid_files = [dir.path().join("one.pids"), dir.path().join("two.pids")];
    wait_until("services and grandchildren running", Duration::from_secs(30), || {
        pid_files.iter().all(|f| std::fs::read_to_string(f).is_ok_and(|t| t.lines().count() == 2))
    });
    // state.json is written right after each spawn, which may come after
    // the pid files.
    let mut recorded = None;
    wait_until("both groups recorded", Duration::from_secs(30), || {
        recorded = omnidev_core::read_state(&state).ok().flatten();
        recorded
            .as_ref()
            .is_some_and(|r| r.services.len() == 2 && r.services.values().all(|s| s.pgid.is_some()))
    });
    let recorded = recorded.expect("state written");
    let groups: Vec<i32> =
        recorded.services.values().map(|s| s.pgid.expect("pgid recorded")).collect();
    let guard = recorded.guard_pid.expect("guard pid");
    let mut pids: Vec<u32> = pid_files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .expect("pids")
                .lines()
                .map(|l| l.trim().parse::<u32>().expect("pid"))
                .collect::<Vec<_>>()
        })
        .collect();
    pids.extend(groups.iter().map(|&g| g as u32));
    assert_eq!(groups.len(), 2);
    assert!(pids.iter().all(|&p| pid_alive(p)));

    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap supervisor");
    let killed = Instant::now();
    // The requirement: gone within 2 s (the guard acts on pipe EOF at once).
    wait_until("every service process gone", Duration::from_secs(2), || {
        groups.iter().all(|&g| !group_alive(g)) && pids.iter().all(|&p| !pid_alive(p))
    });
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    wait_until("guard exited", Duration::from_secs(5), || !pid_alive(guard));
}

#[test]
fn a_readiness_check_in_flight_dies_with_a_sigkilled_supervisor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("probe.pids");
    // A check that hangs with a grandchild of its own, as a `curl` behind a
    // wrapper script might; it records both pids.
    let probe = format!("sleep 1000 & echo $$ $! > '{}'; wait", pids.display());
    let mut supervisor = Command::new(example("supervise"))
        .current_dir(dir.path())
        .args(["--probe-cmd", &probe, "--", "web=exec sleep 1000"])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn supervise");
    wait_until("the check to be running", Duration::from_secs(30), || {
        std::fs::read_to_string(&pids).is_ok_and(|t| t.split_whitespace().count() == 2)
    });
    let recorded: Vec<u32> = std::fs::read_to_string(&pids)
        .expect("pids")
        .split_whitespace()
        .map(|p| p.parse().expect("pid"))
        .collect();
    assert!(recorded.iter().all(|&p| pid_alive(p)));
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap supervisor");
    // Generous: the guard acts on pipe EOF at once, but a loaded machine
    // may take a while to schedule it (the 2 s figure is the SIGKILL test's).
    wait_until("the check and its child gone", Duration::from_secs(10), || {
        recorded.iter().all(|&p| !pid_alive(p))
    });
}

#[test]
fn supervise_example_shuts_down_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state.json");
    let supervisor = Command::new(example("supervise"))
        .current_dir(dir.path())
        .arg("--state")
        .arg(&state)
        .args(["--", "a=echo $$ > a.pid; exec sleep 1000"])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn supervise");
    let pid_file = dir.path().join("a.pid");
    wait_until("service running", Duration::from_secs(30), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| !t.trim().is_empty())
    });
    let pid: u32 = std::fs::read_to_string(&pid_file).expect("pid").trim().parse().expect("number");
    signal(supervisor.id(), Signal::SIGTERM);
    let output = supervisor.wait_with_output().expect("wait");
    assert!(output.status.success(), "{output:?}");
    assert!(!pid_alive(pid));
    let recorded = omnidev_core::read_state(&state).expect("read").expect("state");
    assert!(recorded.services["a"].pid.is_none());
}

#[test]
fn two_hundred_megabytes_without_newline_keep_memory_bounded() {
    let output = Command::new(example("log_throughput"))
        .args(["--rounds", "1", "--producer", "head -c 200000000 /dev/zero"])
        .output()
        .expect("run log_throughput");
    assert!(output.status.success(), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON line");
    assert_eq!(report["service_ok"], true, "{report}");
    let rss = report["max_rss_mib"].as_f64().expect("rss");
    // 200 MB passed through; the two rings (8 MiB each) and the event
    // channel (512 events of at most 64 KiB) are bounded, so the peak stays
    // far below the data size.
    assert!(rss < 64.0, "peak RSS {rss} MiB: {report}");
    // 200,000,000 bytes in 64 KiB pieces.
    assert_eq!(report["file_lines"], 200_000_000_u64.div_ceil(65_536), "{report}");
}

// ----- containment: helpers that leave the service's group and session -----

/// A service that ignores SIGTERM and starts five helpers that ignore it
/// too, the ways real servers and agent harnesses do: in its group, by a
/// double fork, with `setsid`, by a double fork plus `setsid`, and with
/// `setpgid(0, 0)`. Each helper appends its pid to `pids`.
const FIVE_HELPERS: &str = r#"trap '' TERM
sleep 1000 & echo $! >> pids
sh -c 'sleep 1000 & echo $! >> pids' &
setsid sh -c 'echo $$ >> pids; exec sleep 1000' &
sh -c "setsid sh -c 'echo \$\$ >> pids; exec sleep 1000' &" &
python3 -c 'import os; os.setpgid(0, 0); os.execvp("sleep", ["sleep", "1000"])' & echo $! >> pids
wait
"#;

/// Environment variable carrying a test's tag into every process it starts.
const TAG: &str = "OMNIDEV_CONTAINMENT_TEST_TAG";

/// Live processes whose environment carries `TAG=tag`, except `skip`.
fn tagged(tag: &str, skip: &[u32]) -> Vec<u32> {
    platform::pids()
        .into_iter()
        .filter(|pid| !skip.contains(pid) && pid_alive(*pid))
        .filter(|&pid| platform::env_var(pid, TAG).is_some_and(|value| value == tag))
        .collect()
}

/// A fresh tag for one run.
fn new_tag(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!("{what}-{}-{nanos}", std::process::id())
}

/// Writes the helper script into `dir` and returns the `name=command`
/// argument of the supervise example for it.
fn helper_service(dir: &Path, name: &str) -> String {
    std::fs::write(dir.join("helpers.sh"), FIVE_HELPERS).expect("write script");
    format!("{name}=sh helpers.sh")
}

/// Waits for the five helpers and returns their pids, all alive.
fn five_helpers(dir: &Path) -> Vec<u32> {
    sleeping_pids(&dir.join("pids"), 5)
}

/// Waits until `file` lists `count` pids, each of them running `sleep`.
fn sleeping_pids(file: &Path, count: usize) -> Vec<u32> {
    let mut pids = Vec::new();
    wait_until("helpers running", Duration::from_secs(30), || {
        pids = std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse::<u32>().ok())
            .collect();
        // A pid is written before its `exec`; wait until each has exec'd
        // into `sleep`, so the tag check sees its final environment.
        pids.len() == count
            && pids.iter().all(|p| platform::name(*p).is_some_and(|name| name == "sleep"))
    });
    pids
}

/// The supervise example in `dir` with `dir/state.json`, tagged `tag`,
/// with `containment` as `OMNIDEV_CONTAINMENT`.
fn supervise_in(dir: &Path, tag: &str, containment: &str) -> Command {
    let mut command = Command::new(example("supervise"));
    command
        .current_dir(dir)
        .env(TAG, tag)
        .env("OMNIDEV_CONTAINMENT", containment)
        .arg("--state")
        .arg(dir.join("state.json"));
    command
}

/// Starts the supervise example on the five-helper service, tagged `tag`,
/// with `containment` as `OMNIDEV_CONTAINMENT`; returns it with the
/// helpers' pids once they run and the state file names the mechanism.
fn supervise_helpers(
    dir: &Path,
    tag: &str,
    containment: &str,
) -> (std::process::Child, Vec<u32>, omnidev_core::StateFile) {
    let state = dir.join("state.json");
    let _ = std::fs::remove_file(dir.join("pids"));
    let child = supervise_in(dir, tag, containment)
        .args(["--grace-ms", "500", "--"])
        .arg(helper_service(dir, "svc"))
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn supervise");
    let pids = five_helpers(dir);
    (child, pids, svc_recorded(&state))
}

/// `state` once it records service `svc` running.
fn svc_recorded(state: &Path) -> omnidev_core::StateFile {
    let mut recorded = None;
    wait_until("the service recorded", Duration::from_secs(30), || {
        recorded = omnidev_core::read_state(state).ok().flatten();
        recorded.as_ref().is_some_and(|r| r.services.get("svc").is_some_and(|s| s.pid.is_some()))
    });
    recorded.expect("state")
}

fn assert_cgroup(state: &omnidev_core::StateFile) {
    assert!(
        matches!(state.containment, Some(omnidev_core::Mechanism::Cgroup { .. })),
        "these tests need a writable cgroup v2 hierarchy (as root, or in a \
         systemd user session); the supervisor used {:?}",
        state.containment
    );
}

/// Zero processes of `tag` (besides `skip`) within 2 s.
fn assert_none_left(tag: &str, skip: &[u32], after: &str) {
    let start = Instant::now();
    let mut left = Vec::new();
    while start.elapsed() < Duration::from_secs(2) {
        left = tagged(tag, skip);
        if left.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("2 s after {after}, processes left: {left:?}");
}

#[tokio::test]
async fn shutdown_leaves_none_of_five_escaping_helpers_in_either_mechanism() {
    for choice in
        [omnidev_core::ContainmentChoice::Auto, omnidev_core::ContainmentChoice::ProcessGroups]
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let tag = new_tag("shutdown");
        let mut service = omnidev_core::ServiceSpec::new("svc", "sh", ["helpers.sh"], dir.path());
        helper_service(dir.path(), "svc");
        service.command.env.insert(TAG.into(), tag.clone());
        service.stop.grace = Duration::from_millis(500);
        let supervisor = omnidev_core::Supervisor::builder(omnidev_core::SupervisorConfig {
            services: vec![service],
            containment: choice.clone(),
            ..Default::default()
        })
        .expect("a valid graph")
        .run()
        .await
        .expect("start");
        let cgroup = match supervisor.containment() {
            omnidev_core::Mechanism::Cgroup { path } => Some(path.clone()),
            omnidev_core::Mechanism::ProcessGroups { .. } => None,
        };
        assert_eq!(
            cgroup.is_some(),
            choice == omnidev_core::ContainmentChoice::Auto,
            "{:?}",
            supervisor.containment()
        );
        let dir_path = dir.path().to_owned();
        let helpers =
            tokio::task::spawn_blocking(move || five_helpers(&dir_path)).await.expect("helpers");
        let tag_now = tag.clone();
        tokio::task::spawn_blocking(move || {
            wait_until("the service and five helpers only", Duration::from_secs(30), || {
                tagged(&tag_now, &[]).len() == 6
            });
        })
        .await
        .expect("six processes");
        supervisor.shutdown().await.expect("shutdown");
        assert_none_left(&tag, &[], &format!("shutdown() with {choice:?}"));
        assert!(helpers.iter().all(|&p| !pid_alive(p)));
        if let Some(path) = cgroup {
            assert!(!path.exists(), "empty cgroup {} removed", path.display());
        }
    }
}

#[test]
fn sigterm_to_the_supervisor_leaves_no_helper_in_either_mechanism() {
    for containment in ["auto", "process-groups"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let tag = new_tag("sigterm");
        let (supervisor, _helpers, state) = supervise_helpers(dir.path(), &tag, containment);
        if containment == "auto" {
            assert_cgroup(&state);
        }
        signal(supervisor.id(), Signal::SIGTERM);
        let output = supervisor.wait_with_output().expect("wait");
        assert!(output.status.success(), "{output:?}");
        assert_none_left(&tag, &[], &format!("SIGTERM ({containment})"));
    }
}

/// kill -9 of the supervisor, its services running (five escaping
/// helpers) or a prepare step running (with a `setsid` helper): the guard
/// kills the pod cgroup and removes it with every cgroup below it, the
/// step's included.
#[test]
fn sigkill_of_the_supervisor_leaves_no_helper_and_no_cgroup() {
    type Start = fn(&Path, &str, &str) -> (std::process::Child, Vec<u32>, omnidev_core::StateFile);
    let starts: [(&str, Start); 2] =
        [("running", supervise_helpers), ("preparing", supervise_preparing)];
    for (what, start) in starts {
        let dir = tempfile::tempdir().expect("tempdir");
        let tag = new_tag("sigkill");
        let _cleanup = KillTagged(tag.clone());
        let (mut supervisor, _helpers, state) = start(dir.path(), &tag, "auto");
        assert_cgroup(&state);
        let guard = state.guard_pid.expect("guard pid");
        kill9_leaves_nothing(
            &mut supervisor,
            guard,
            &tag,
            &state,
            &format!("kill -9 of the supervisor ({what})"),
        );
    }
}

/// SIGKILLs `supervisor`: within 2 s no process of `tag` is left but its
/// guard, which then exits, having removed the pod cgroup (with cgroups).
fn kill9_leaves_nothing(
    supervisor: &mut std::process::Child,
    guard: u32,
    tag: &str,
    state: &omnidev_core::StateFile,
    after: &str,
) {
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap");
    // The guard carries the tag too (it is a fork of the supervisor).
    assert_none_left(tag, &[guard], after);
    wait_until("guard exited", Duration::from_secs(10), || !pid_alive(guard));
    // The guard removes the empty cgroups too (before it exits).
    if let Some(omnidev_core::Mechanism::Cgroup { path }) = &state.containment {
        assert!(!path.exists(), "pod cgroup {} removed", path.display());
    }
}

/// SIGKILL a supervisor and its guard together, as `killall -9` of every
/// omnidev process would, and wait until both are gone.
fn kill_supervisor_and_guard(
    supervisor: &mut std::process::Child,
    state: &omnidev_core::StateFile,
) {
    let guard = state.guard_pid.expect("guard pid");
    // The supervisor stopped first: it can neither replace a guard that
    // dies (a replacement would clean up after it) nor close the guard's
    // pipe. A stopped guard would not do: the supervisor's death orphans
    // its process group, and the kernel's SIGCONT then lets it act.
    signal(supervisor.id(), Signal::SIGSTOP);
    signal(guard, Signal::SIGKILL);
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap");
    wait_until("guard gone", Duration::from_secs(10), || !pid_alive(guard));
}

#[test]
fn sigkill_of_supervisor_and_guard_is_cleaned_up_by_the_next_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tag = new_tag("both");
    let (mut supervisor, helpers, state) = supervise_helpers(dir.path(), &tag, "auto");
    assert_cgroup(&state);
    kill_supervisor_and_guard(&mut supervisor, &state);
    // Nothing killed the helpers.
    assert!(helpers.iter().all(|&p| pid_alive(p)));

    let next_tag = new_tag("next");
    let (mut next, _, _) = supervise_helpers(dir.path(), &next_tag, "auto");
    // The next supervisor stopped the recorded cgroup before starting.
    assert_none_left(&tag, &[], "the next start");
    next.kill().expect("kill the next supervisor");
    next.wait().expect("reap");
    let next_state =
        omnidev_core::read_state(&dir.path().join("state.json")).expect("read").expect("state");
    assert_none_left(
        &next_tag,
        &next_state.guard_pid.into_iter().collect::<Vec<_>>(),
        "kill -9 of the next supervisor",
    );
}

#[test]
fn without_cgroups_leftovers_of_both_killed_are_found_by_session_and_service_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tag = new_tag("fallback-both");
    let (mut supervisor, helpers, state) = supervise_helpers(dir.path(), &tag, "process-groups");
    assert!(matches!(state.containment, Some(omnidev_core::Mechanism::ProcessGroups { .. })));
    kill_supervisor_and_guard(&mut supervisor, &state);
    assert!(helpers.iter().all(|&p| pid_alive(p)));
    let next_tag = new_tag("fallback-next");
    let (next, _, _) = supervise_helpers(dir.path(), &next_tag, "process-groups");
    assert_none_left(&tag, &[], "the next start (fallback)");
    signal(next.id(), Signal::SIGTERM);
    let output = next.wait_with_output().expect("wait");
    assert!(output.status.success(), "{output:?}");
    assert_none_left(&next_tag, &[], "SIGTERM of the next supervisor");
}

#[tokio::test]
async fn a_cgroup_that_cannot_be_created_is_reported_once_and_the_fallback_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tag = new_tag("no-cgroup");
    helper_service(dir.path(), "svc");
    let mut service = omnidev_core::ServiceSpec::new("svc", "sh", ["helpers.sh"], dir.path());
    service.command.env.insert(TAG.into(), tag.clone());
    service.stop.grace = Duration::from_millis(500);
    // Not a directory of the cgroup2 hierarchy: the pod cgroup cannot be made.
    let builder = omnidev_core::Supervisor::builder(omnidev_core::SupervisorConfig {
        services: vec![service],
        containment: omnidev_core::ContainmentChoice::CgroupUnder(dir.path().join("nope")),
        ..Default::default()
    })
    .expect("a valid graph");
    let mut events = builder.subscribe();
    let supervisor = builder.run().await.expect("start");
    assert!(
        matches!(
            supervisor.containment(),
            omnidev_core::Mechanism::ProcessGroups { reason } if reason.contains("nope")
        ),
        "{:?}",
        supervisor.containment()
    );
    let dir_path = dir.path().to_owned();
    let helpers =
        tokio::task::spawn_blocking(move || five_helpers(&dir_path)).await.expect("helpers");
    let mut notices = Vec::new();
    while let Some(event) = events.try_recv() {
        if let omnidev_core::EventKind::Notice { message } = event.kind {
            notices.push(message);
        }
    }
    let why: Vec<&String> = notices.iter().filter(|m| m.contains("not a cgroup")).collect();
    assert_eq!(why.len(), 1, "said once: {notices:?}");
    assert!(why[0].contains("nope"), "says why: {}", why[0]);
    supervisor.shutdown().await.expect("shutdown");
    assert_none_left(&tag, &[], "shutdown() on the fallback");
    assert!(helpers.iter().all(|&p| !pid_alive(p)));
}

/// A service whose helpers stay in its process group, so that the guard's
/// kill of the group reaches them in either mechanism.
const GROUP_HELPERS: &str = "sleep 1000 & sh -c 'sleep 1000 & wait' & wait";

/// The supervise example's stdout, line by line, as it comes.
fn collect_lines(child: &mut std::process::Child) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = child.stdout.take().expect("stdout piped");
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok) {
            sink.lock().expect("lines").push(line);
        }
    });
    lines
}

/// SIGKILLs every process of a tag when dropped: a failed assertion
/// leaves nothing running.
struct KillTagged(String);

impl Drop for KillTagged {
    fn drop(&mut self) {
        for pid in tagged(&self.0, &[std::process::id()]) {
            try_signal(pid, Signal::SIGKILL);
        }
    }
}

/// Kill the orphan guard alone: the supervisor notices at once, says so,
/// reaps it and starts a new one that knows every running group (and the
/// pod cgroup); a kill -9 of the supervisor afterwards leaves nothing.
#[test]
fn a_killed_guard_is_replaced_and_the_new_one_guards_every_group() {
    for containment in ["auto", "process-groups"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state.json");
        let tag = new_tag("guard");
        let mut supervisor = supervise_in(dir.path(), &tag, containment)
            .arg("--")
            .args([format!("one={GROUP_HELPERS}"), format!("two={GROUP_HELPERS}")])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn supervise");
        let lines = collect_lines(&mut supervisor);
        let _cleanup = KillTagged(tag.clone());
        let mut recorded = None;
        wait_until("both services recorded", Duration::from_secs(30), || {
            recorded = omnidev_core::read_state(&state).ok().flatten();
            recorded.as_ref().is_some_and(|r| {
                r.services.len() == 2 && r.services.values().all(|s| s.pid.is_some())
            })
        });
        let recorded = recorded.expect("state");
        if containment == "auto" {
            assert_cgroup(&recorded);
        }
        let old = recorded.guard_pid.expect("guard pid");
        let supervisor_pid = supervisor.id();
        // Each service: its shell, a sleep, a shell and its sleep.
        wait_until("eight service processes", Duration::from_secs(30), || {
            tagged(&tag, &[supervisor_pid, old]).len() == 8
        });

        signal(old, Signal::SIGKILL);
        let mut new = None;
        wait_until("a new guard recorded", Duration::from_secs(30), || {
            new = omnidev_core::read_state(&state)
                .ok()
                .flatten()
                .and_then(|s| s.guard_pid)
                .filter(|&pid| pid != old && pid_alive(pid));
            new.is_some()
        });
        let new = new.expect("new guard");
        wait_until("the notice", Duration::from_secs(30), || {
            lines.lock().expect("lines").iter().any(|l| {
                l.contains(&format!("the orphan guard (pid {old}) ended"))
                    && l.contains(&format!("pid {new}"))
            })
        });
        // It names itself first thing after the fork, which may be just
        // after it was recorded.
        wait_until("the new guard named", Duration::from_secs(10), || {
            platform::name(new).as_deref() == Some("omnidev-guard")
        });
        wait_until("the old guard reaped", Duration::from_secs(10), || {
            platform::stat(old).is_none()
        });

        kill9_leaves_nothing(
            &mut supervisor,
            new,
            &tag,
            &recorded,
            &format!("kill -9 after the guard was replaced ({containment})"),
        );
    }
}

/// A prepare step that starts a helper in a session of its own (it still
/// carries the service id) and one in its group, records both pids and
/// waits: the service stays `preparing`.
const SETSID_STEP: &str = "setsid sh -c 'echo $$ >> step.pids; exec sleep 1000' & \
                           sleep 1000 & echo $! >> step.pids; wait";

/// Starts the supervise example with [`SETSID_STEP`] before `svc`; returns
/// it with the step's helpers once they run and `state.json` records the
/// service preparing.
fn supervise_preparing(
    dir: &Path,
    tag: &str,
    containment: &str,
) -> (std::process::Child, Vec<u32>, omnidev_core::StateFile) {
    let state = dir.join("state.json");
    let child = supervise_in(dir, tag, containment)
        .args(["--prepare", SETSID_STEP, "--", "svc=exec sleep 1000"])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn supervise");
    let pids = sleeping_pids(&dir.join("step.pids"), 2);
    let mut recorded = None;
    wait_until("the service recorded preparing", Duration::from_secs(30), || {
        recorded = omnidev_core::read_state(&state).ok().flatten();
        recorded.as_ref().is_some_and(|r| {
            r.services.get("svc").is_some_and(|s| s.state == omnidev_core::ServiceState::Preparing)
        })
    });
    (child, pids, recorded.expect("state"))
}

/// Prepare steps are recovered like services: omnidev and its guard
/// SIGKILLed while a step runs, the next start stops the step's processes
/// (its cgroup, or every process carrying the service id: the `setsid`
/// helper too) and removes the old pod cgroup.
#[test]
fn a_prepare_step_left_by_omnidev_and_its_guard_is_stopped_by_the_next_start() {
    for containment in ["auto", "process-groups"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let tag = new_tag("prepare-both");
        let _cleanup = KillTagged(tag.clone());
        let (mut supervisor, helpers, state) = supervise_preparing(dir.path(), &tag, containment);
        if containment == "auto" {
            assert_cgroup(&state);
        }
        kill_supervisor_and_guard(&mut supervisor, &state);
        assert!(helpers.iter().all(|&p| pid_alive(p)), "nothing killed them");

        let next_tag = new_tag("prepare-next");
        let _next_cleanup = KillTagged(next_tag.clone());
        let (next, _, _) = supervise_helpers(dir.path(), &next_tag, containment);
        assert_none_left(&tag, &[], &format!("the next start ({containment})"));
        if let Some(omnidev_core::Mechanism::Cgroup { path }) = &state.containment {
            assert!(!path.exists(), "old pod cgroup {} removed", path.display());
        }
        signal(next.id(), Signal::SIGTERM);
        let output = next.wait_with_output().expect("wait");
        assert!(output.status.success(), "{output:?}");
    }
}

/// A service whose helper leaves its session and moves itself out of the
/// pod's cgroup (into the cgroup the supervisor was started in, as root
/// may) once the test names it in `escape-to`; the helper's pid goes to
/// `pids`.
const ESCAPING_HELPER: &str = r#"setsid sh -c 'while [ ! -s escape-to ]; do sleep 0.02; done
echo $$ > "$(cat escape-to)" && echo $$ > pids && exec sleep 1000' &
exec sleep 1000
"#;

/// The pid of the helper of [`ESCAPING_HELPER`], once it has left the pod
/// cgroup `pod` for its parent.
fn escaped_helper(dir: &Path, pod: &Path) -> u32 {
    let parent = pod.parent().expect("the supervisor's own cgroup");
    std::fs::write(dir.join("escape-to"), parent.join("cgroup.procs").to_string_lossy().as_bytes())
        .expect("name the way out");
    let helper = sleeping_pids(&dir.join("pids"), 1)[0];
    let cgroup = std::fs::read_to_string(format!("/proc/{helper}/cgroup")).expect("its cgroup");
    assert!(
        !cgroup.contains(&*pod.file_name().expect("a name").to_string_lossy()),
        "the helper left the pod cgroup: {cgroup}"
    );
    helper
}

/// A `sleep` carrying service id `id` (as a process of another pod whose
/// id shares a prefix with this one's would) and the test's tag.
fn decoy(id: &str, tag: &str) -> std::process::Child {
    Command::new("sleep")
        .arg("1000")
        .env(omnidev_core::containment::SERVICE_ID_ENV, id)
        .env(TAG, tag)
        .spawn()
        .expect("spawn a decoy")
}

/// A helper that wrote itself out of the pod's cgroup is still found by
/// its exact service id: stopped with the pod, and, after SIGKILL of the
/// supervisor (the guard kills only the cgroup), by the next start. Decoys
/// whose ids only share a prefix with the pod's are left alone.
#[test]
fn a_helper_that_leaves_the_cgroup_is_stopped_by_stop_and_by_the_next_start() {
    for kill9 in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let tag = new_tag("escape");
        let _cleanup = KillTagged(tag.clone());
        std::fs::write(dir.path().join("escape.sh"), ESCAPING_HELPER).expect("script");
        let start = || {
            supervise_in(dir.path(), &tag, "auto")
                .args(["--grace-ms", "500", "--", "svc=sh escape.sh"])
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn supervise")
        };
        let mut supervisor = start();
        let recorded = svc_recorded(&dir.path().join("state.json"));
        assert_cgroup(&recorded);
        let Some(omnidev_core::Mechanism::Cgroup { path }) = &recorded.containment else {
            unreachable!("checked above");
        };
        let helper = escaped_helper(dir.path(), path);
        let id = recorded.services["svc"].service_id.clone().expect("its id");
        let pod = id.rsplit_once('.').expect("<pod>.<index>").0.to_owned();
        let mut decoys = [
            decoy(&format!("{id}0"), &tag),
            decoy(&format!("{pod}0.0"), &tag),
            decoy(&format!("1{id}"), &tag),
        ];
        if kill9 {
            let guard = recorded.guard_pid.expect("guard pid");
            supervisor.kill().expect("SIGKILL the supervisor");
            supervisor.wait().expect("reap");
            wait_until("the guard done", Duration::from_secs(10), || !pid_alive(guard));
            assert!(pid_alive(helper), "the guard kills only the cgroup");
            supervisor = start();
            wait_until("the next start stops the escaped helper", Duration::from_secs(30), || {
                !pid_alive(helper)
            });
        }
        signal(supervisor.id(), Signal::SIGTERM);
        let output = supervisor.wait_with_output().expect("wait");
        assert!(output.status.success(), "{output:?}");
        let skip: Vec<u32> = decoys.iter().map(std::process::Child::id).collect();
        assert_none_left(&tag, &skip, &format!("the stop (kill -9 first: {kill9})"));
        for decoy in &mut decoys {
            assert!(
                decoy.try_wait().expect("try_wait").is_none(),
                "a decoy was stopped (kill -9 first: {kill9})"
            );
            decoy.kill().expect("kill the decoy");
            decoy.wait().expect("reap the decoy");
        }
    }
}

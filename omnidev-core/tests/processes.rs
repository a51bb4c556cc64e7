//! Tests that run the example binaries as separate supervisor processes:
//! orphan protection when the supervisor is SIGKILLed, and bounded memory
//! when a child writes 200 MB without a newline.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use omnidev_core::process::{group_alive, pid_alive};

/// The example binary `name`, built by `cargo test` next to the test
/// binaries; built on demand when a filtered run skipped examples.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let path = profile_dir.join("examples").join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "omnidev-core", "--example", name])
            .status()
            .expect("run cargo");
        assert!(status.success(), "building example {name}");
    }
    path
}

fn wait_until(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
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
    wait_until(
        "services and grandchildren running",
        Duration::from_secs(30),
        || {
            pid_files
                .iter()
                .all(|f| std::fs::read_to_string(f).is_ok_and(|t| t.lines().count() == 2))
        },
    );
    let recorded = omnidev_core::read_state(&state)
        .expect("read state")
        .expect("state written");
    let groups: Vec<i32> = recorded
        .services
        .values()
        .map(|s| s.pgid.expect("pgid recorded"))
        .collect();
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
    wait_until(
        "the check and its child gone",
        Duration::from_secs(2),
        || recorded.iter().all(|&p| !pid_alive(p)),
    );
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
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .expect("pid")
        .trim()
        .parse()
        .expect("number");
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(supervisor.id() as i32, libc::SIGTERM);
    }
    let output = supervisor.wait_with_output().expect("wait");
    assert!(output.status.success(), "{output:?}");
    assert!(!pid_alive(pid));
    let recorded = omnidev_core::read_state(&state)
        .expect("read")
        .expect("state");
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
    assert_eq!(
        report["file_lines"],
        200_000_000_u64.div_ceil(65_536),
        "{report}"
    );
}

//! The single-instance lock across real processes, including SIGKILL of the holder.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use omnidev_pod::{Error, LockState, PodLock};
use omnidev_test_support::process::{Signal, is_alive, try_signal};

const HELPER: &str = env!("CARGO_BIN_EXE_omnidev-pod-test-helper");

/// Starts a helper holding the lock; returns it and the pid of the `sleep`
/// child it spawned.
fn spawn_holder(pod: &std::path::Path) -> (Child, i32) {
    let mut holder = Command::new(HELPER)
        .arg("hold-lock")
        .arg(pod)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
    let child_pid = line
        .strip_prefix("locked ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("unexpected holder output {line:?}"));
    (holder, child_pid)
}

fn alive(pid: i32) -> bool {
    is_alive(pid.unsigned_abs())
}

#[test]
fn second_process_is_refused_with_pod_dir_and_pid() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pod = tmp.path().join("pod");
    std::fs::create_dir(&pod).expect("mkdir");
    let (mut holder, child_pid) = spawn_holder(&pod);

    let out = Command::new(HELPER).arg("try-lock").arg(&pod).output().expect("try-lock");
    let message = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(message.contains(&pod.display().to_string()), "{message}");
    assert!(message.contains(&format!("pid {}", holder.id())), "{message}");

    match PodLock::acquire(&pod) {
        Err(Error::AlreadyRunning { pod_dir, pid }) => {
            assert_eq!(pod_dir, pod);
            assert_eq!(pid, Some(holder.id()));
        }
        other => panic!("expected AlreadyRunning, got {other:?}"),
    }
    assert_eq!(PodLock::state(&pod).expect("state"), LockState::Held { pid: Some(holder.id()) });

    holder.kill().expect("kill");
    holder.wait().expect("wait");
    try_signal(child_pid.unsigned_abs(), Signal::SIGKILL);
}

#[test]
fn lock_is_free_after_sigkill_even_with_a_surviving_child() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pod = tmp.path().join("pod");
    std::fs::create_dir(&pod).expect("mkdir");
    let (mut holder, child_pid) = spawn_holder(&pod);
    assert!(PodLock::acquire(&pod).is_err());

    holder.kill().expect("SIGKILL holder"); // Child::kill sends SIGKILL
    holder.wait().expect("reap holder");
    assert!(alive(child_pid), "the holder's child should outlive it");

    // The kernel drops the lock when the holder's descriptor closes; the
    // child never had it (close-on-exec). Poll with a generous deadline.
    let deadline = Instant::now() + Duration::from_secs(20);
    let lock = loop {
        match PodLock::acquire(&pod) {
            Ok(lock) => break lock,
            Err(e) if Instant::now() > deadline => panic!("lock still held: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    assert!(alive(child_pid), "the child was still alive while we took the lock");
    let text = std::fs::read_to_string(lock.path()).expect("read");
    assert_eq!(text.trim(), std::process::id().to_string());

    try_signal(child_pid.unsigned_abs(), Signal::SIGKILL);
}

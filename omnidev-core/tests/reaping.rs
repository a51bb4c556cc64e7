//! The subreaper's reaping of adopted orphans, with real processes. In a
//! test binary of its own: it makes the whole test process a subreaper.
//! Linux has subreapers; macOS has none, and says so.

#[cfg(target_os = "linux")]
use std::process::{Command, Stdio};
#[cfg(target_os = "linux")]
use std::time::Duration;

use omnidev_core::platform;

#[cfg(target_os = "linux")]
fn until(what: &str, condition: impl FnMut() -> bool) {
    omnidev_test_support::poll_until(what, Duration::from_secs(30), condition);
}

#[cfg(target_os = "macos")]
#[test]
fn macos_has_no_subreaper_and_says_so() {
    const { assert!(!platform::HAS_SUBREAPER) };
    assert!(!platform::become_subreaper());
}

#[cfg(target_os = "linux")]
#[test]
fn adopted_orphans_are_reaped_and_own_children_are_left_to_their_owner() {
    const { assert!(platform::HAS_SUBREAPER) };
    assert!(platform::become_subreaper(), "PR_SET_CHILD_SUBREAPER");
    let me = std::process::id();

    // A helper in a session of its own, orphaned when its shell exits:
    // adopted by this process, and a zombie once it ends.
    let output = Command::new("setsid")
        .args(["sh", "-c", "sleep 0.3 & echo $!"])
        .stdin(Stdio::null())
        .output()
        .expect("setsid sh");
    assert!(output.status.success());
    let orphan: u32 =
        String::from_utf8_lossy(&output.stdout).trim().parse().expect("the helper's pid");
    until("the orphan to be an adopted zombie", || {
        platform::stat(orphan).is_some_and(|s| s.ppid == me && s.is_zombie())
    });

    // A child of this process, in this process's session, ended and not
    // waited for yet.
    let mut own = Command::new("sh").args(["-c", "exit 7"]).spawn().expect("sh");
    let own_pid = own.id();
    until("the own child to be a zombie", || {
        platform::stat(own_pid).is_some_and(|s| s.is_zombie())
    });

    omnidev_core::process::reap_adopted();
    assert!(platform::stat(orphan).is_none(), "the orphan was reaped");
    assert!(
        platform::stat(own_pid).is_some_and(|s| s.is_zombie()),
        "a child in this process's session is left to its owner"
    );
    assert_eq!(own.wait().expect("wait").code(), Some(7));
}
